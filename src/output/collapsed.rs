//! Collapsed stacks: one line per calling context with a non-zero count, root first, `;`-joined.

use crate::profile::{Metric, Profile};

/// Renders collapsed stacks under `metric`.
pub fn render(profile: &Profile, metric: Metric) -> Vec<u8> {
    let merged = profile.merged_by_frame();
    let parents = merged.parents();
    let mut out = String::new();
    for i in 1..merged.nodes.len() as u32 {
        let v = merged.value(i, metric);
        if v == 0 {
            continue;
        }
        let names: Vec<String> = merged
            .path(i, &parents)
            .iter()
            .map(|&n| merged.frames[merged.nodes[n as usize].frame as usize].display_name())
            .collect();
        out.push_str(&names.join(";"));
        out.push(' ');
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out.into_bytes()
}

/// Reads collapsed stacks.
pub fn parse(_text: &str) -> Result<crate::profile::Profile, String> {
    Err("collapsed reader not built yet".into())
}
