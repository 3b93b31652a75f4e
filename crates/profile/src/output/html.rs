//! The self-contained interactive HTML flame graph: the page (HTML, CSS and script, no network) is the
//! template `flamegraph.html`; the profile goes in as JSON: a table of frame names and their kinds, and
//! the tree flat in pre-order as (name index, inclusive count, child count) triples. The page prunes
//! frames too narrow to see and draws only the rows near the viewport, so 100,000-node profiles stay
//! usable.

use super::text::{amount, run_summary};
use crate::model::{FrameKind, Metric, Profile};
use serde::Serialize;
use std::collections::HashMap;

const TEMPLATE: &str = include_str!("flamegraph.html");
const DATA_PLACEHOLDER: &str = "@KPROF_DATA@";

/// What the page reads from its `kprof-data` element.
#[derive(Serialize)]
struct FlameData {
    title: String,
    subtitle: String,
    /// The metric's name: `samples`, `cpu`, `alloc_bytes`, `calls`, ...
    unit: String,
    names: Vec<String>,
    /// One character per name: `j` Java, `n` native, `p` pseudo, `t` thread.
    kinds: String,
    /// (name index, inclusive count, child count) per node, pre-order, children by name.
    nodes: Vec<u64>,
}

fn kind_code(kind: FrameKind) -> char {
    match kind {
        FrameKind::Java => 'j',
        FrameKind::Native => 'n',
        FrameKind::Pseudo => 'p',
        FrameKind::Thread => 't',
    }
}

/// The page's data for `profile` under `metric`: contexts merged by frame, those with a zero count left
/// out.
fn flame_data(profile: &Profile, metric: Metric) -> FlameData {
    let merged = profile.merged_by_frame();
    let totals = merged.totals(metric);
    let frame_names = super::display_names(&merged);
    let mode = if merged.meta.mode.is_empty() { "unknown" } else { &merged.meta.mode };
    let title =
        format!("kprof flame graph · mode {mode} · metric {} · total {}", metric.name(), amount(totals[0], metric));
    let mut subtitle = run_summary(&merged.meta);
    if !merged.meta.counters.is_empty() {
        let counters: Vec<String> = merged.meta.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !subtitle.is_empty() {
            subtitle.push_str("; ");
        }
        subtitle.push_str(&counters.join(" "));
    }

    let mut names = Vec::new();
    let mut kinds = String::new();
    let mut name_index: HashMap<&str, u64> = HashMap::new();
    let mut nodes = Vec::with_capacity(merged.nodes.len() * 3);
    let mut work = vec![0u32];
    while let Some(n) = work.pop() {
        let node = &merged.nodes[n as usize];
        let name = frame_names[node.frame as usize].as_str();
        let index = *name_index.entry(name).or_insert_with(|| {
            names.push(name.to_string());
            kinds.push(kind_code(merged.frames[node.frame as usize].kind));
            names.len() as u64 - 1
        });
        let mut children: Vec<u32> = node.children.iter().copied().filter(|&c| totals[c as usize] > 0).collect();
        children.sort_by(|&a, &b| {
            let (fa, fb) = (merged.nodes[a as usize].frame as usize, merged.nodes[b as usize].frame as usize);
            frame_names[fa].cmp(&frame_names[fb])
        });
        nodes.extend_from_slice(&[index, totals[n as usize], children.len() as u64]);
        work.extend(children.iter().rev());
    }
    FlameData { title, subtitle, unit: metric.name().to_string(), names, kinds, nodes }
}

/// Renders the flame graph page under `metric`.
pub fn render(profile: &Profile, metric: Metric) -> Vec<u8> {
    let data = serde_json::to_string(&flame_data(profile, metric)).expect("JSON of plain data");
    // `<` only occurs inside JSON strings, where `\u003c` means the same; so no name can close the
    // script element or open a comment.
    let data = data.replace('<', "\\u003c");
    let (before, after) = TEMPLATE.split_once(DATA_PLACEHOLDER).expect("the template has a data placeholder");
    let mut out = String::with_capacity(TEMPLATE.len() + data.len());
    out.push_str(before);
    out.push_str(&data);
    out.push_str(after);
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, Meta};
    use crate::output::collapsed;

    #[test]
    fn data_is_preorder_triples_sorted_by_name_without_empty_contexts() {
        let mut p = collapsed::parse("m;b 2\nm;a 1\nm;a;x 3\nz 4\n").unwrap();
        let extra = p.intern(Frame::pseudo("[never]"));
        p.add_child(0, extra, -1);
        let d = flame_data(&p, Metric::Samples);
        let named: Vec<(String, u64, u64)> =
            d.nodes.chunks(3).map(|t| (d.names[t[0] as usize].clone(), t[1], t[2])).collect();
        let expected = [("[root]", 10, 2), ("m", 6, 2), ("a", 4, 1), ("x", 3, 0), ("b", 2, 0), ("z", 4, 0)];
        assert_eq!(named, expected.map(|(n, t, c)| (n.to_string(), t, c)));
        assert_eq!(d.kinds, "pjjjjj");
        assert!(d.title.contains("mode collapsed") && d.title.contains("total 10 samples"), "{}", d.title);
    }

    #[test]
    fn page_is_self_contained_and_names_cannot_escape_the_data() {
        let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples]);
        let evil = p.intern(Frame::pseudo("[</script><script>alert(1)</script><!--]"));
        let n = p.add_child(0, evil, -1);
        p.add(n, Metric::Samples, 1);
        let html = String::from_utf8(render(&p, Metric::Samples)).unwrap();
        assert_eq!(html.matches("</script>").count(), 2, "only the page's own two script elements close");
        assert!(html.contains(r"\u003c/script>\u003cscript>alert(1)"));
        assert!(!html.contains(DATA_PLACEHOLDER));
        for external in ["http://", "https://", "src=", "@import", "url("] {
            assert!(!html.contains(external), "the page must not load anything: found {external}");
        }
    }

    #[test]
    fn cpu_time_titles_show_time() {
        let mut p = collapsed::parse("a 1\n").unwrap();
        p.add(1, Metric::Cpu, 2_500_000);
        let d = flame_data(&p, Metric::Cpu);
        assert_eq!(d.unit, "cpu");
        assert!(d.title.ends_with("total 2,500,000 cpu ns (2.50 ms)"), "{}", d.title);
    }

    #[test]
    fn deep_trees_do_not_recurse() {
        let mut p = Profile::new(Meta::default(), &[Metric::Samples]);
        let f = p.intern(Frame::java("A", "r", "()V"));
        let mut n = 0;
        for _ in 0..100_000 {
            n = p.add_child(n, f, 1);
        }
        p.add(n, Metric::Samples, 1);
        let d = flame_data(&p, Metric::Samples);
        assert_eq!(d.nodes.len(), 3 * 100_001);
        assert_eq!(d.names.len(), 2);
    }
}
