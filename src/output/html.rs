//! The self-contained interactive HTML flame graph.

use crate::profile::{Metric, Profile};

pub fn render(profile: &Profile, metric: Metric) -> Vec<u8> {
    super::collapsed::render(profile, metric)
}
