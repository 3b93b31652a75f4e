//! The text report (`kprof report`).

use crate::profile::{Metric, Profile};

pub const DEFAULT_TOP: usize = 30;

pub fn render(_profile: &Profile, _metric: Metric, _top: usize) -> String {
    String::new()
}
