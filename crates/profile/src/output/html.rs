//! The self-contained interactive HTML flame graph: the page (HTML, CSS and script, no network) is the
//! template `flamegraph.html`; the profile goes in as JSON: a table of frame names and their kinds, the
//! tree flat in pre-order as (name index, child count) pairs, and the self values of every metric the
//! profile carries, a column each. The page sums them into inclusive totals for the metric the user
//! picks (the run's by default), prunes frames too narrow to see (zero ones among them) and draws only
//! the rows near the viewport, so 100,000-node profiles stay usable.
//!
//! The same page draws the differential flame graph of `kprof compare A B --html`: then the data holds
//! one column for B and one for A over the union of both profiles' contexts (see [`render_difference`]).

use super::compare::UnionTree;
use super::text::run_summary;
use crate::model::{Frame, FrameKind, Metric, Profile, Unit};
use serde::Serialize;
use std::collections::HashMap;

/// How the flame graph names the frames of methods.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub enum FrameNames {
    /// Drawn as the simple class name and the method (`HashMap.put`), as async-profiler's flame graphs
    /// show them; the tooltip, search and zoom use the full name without signature
    /// (`java.util.HashMap.put`). Overloads of a method called from one context are one frame.
    #[default]
    Short,
    /// Full names with signatures everywhere (`java.util.HashMap.put(java.lang.Object,java.lang.Object)
    /// java.lang.Object`), overloads apart: the names of the other outputs.
    Signatures,
}

/// The label a method's frame is drawn with: the class name without its package, then the method
/// (`HashMap.put`, `Map$Entry.getKey`, `Thread.sleep0 [native]`). Pseudo-frames and threads keep
/// their names.
pub fn short_name(frame: &Frame) -> String {
    match frame.kind {
        FrameKind::Java | FrameKind::Native if !frame.class.is_empty() => {
            let simple = frame.class.rsplit_once('.').map_or(frame.class.as_str(), |(_, c)| c);
            let bare = Frame { class: simple.to_string(), signature: String::new(), ..frame.clone() };
            bare.display_name()
        }
        _ => Frame { signature: String::new(), ..frame.clone() }.display_name(),
    }
}

/// `profile` with every frame's signature dropped and the contexts that then share a frame merged.
fn without_signatures(profile: &Profile) -> Profile {
    let mut p = profile.clone();
    let mut index: HashMap<Frame, u32> = HashMap::new();
    let mut frames = Vec::new();
    let remap: Vec<u32> = profile
        .frames
        .iter()
        .map(|f| {
            let bare = Frame { signature: String::new(), ..f.clone() };
            *index.entry(bare.clone()).or_insert_with(|| {
                frames.push(bare);
                frames.len() as u32 - 1
            })
        })
        .collect();
    p.frames = frames;
    for n in &mut p.nodes {
        n.frame = remap[n.frame as usize];
    }
    p.merged_by_frame()
}

const TEMPLATE: &str = include_str!("flamegraph.html");
const DATA_PLACEHOLDER: &str = "@KPROF_DATA@";

/// What the page reads from its `kprof-data` element.
#[derive(Serialize)]
struct FlameData {
    /// The engines that ran (`asgct`, `bytecode+asgct`, ...).
    mode: String,
    subtitle: String,
    /// Full frame names: the tooltip, search and zoom use them.
    names: Vec<String>,
    /// What each frame is drawn with, indexed like `names` (absent: the names themselves).
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<Vec<String>>,
    /// One character per name: `j` Java, `n` native, `p` pseudo, `t` thread.
    kinds: String,
    /// (name index, child count) per node, pre-order, children by name.
    nodes: Vec<u64>,
    /// Every metric, self values indexed like the nodes.
    metrics: Vec<MetricData>,
    /// The index in `metrics` shown first.
    metric: usize,
    /// Set for a differential flame graph: `metrics` then holds B's metric alone.
    diff: Option<DiffData>,
}

#[derive(Serialize)]
struct MetricData {
    name: &'static str,
    /// `count`, `nanoseconds`, `bytes` or `bytecodes` (how the page formats values).
    unit: &'static str,
    /// What a value is called: `samples`, `objects`, ... for counts; `CPU`, `allocated`, ... after a time
    /// or a size.
    word: &'static str,
    values: Vec<u64>,
}

impl MetricData {
    fn new(metric: Metric, values: Vec<u64>) -> MetricData {
        let word = match metric {
            Metric::Samples => "samples",
            Metric::Cpu => "CPU",
            Metric::WallSamples => "wall samples",
            Metric::Wall => "wall",
            Metric::AllocCount => "objects",
            Metric::AllocBytes => "allocated",
            Metric::LockCount => "waits",
            Metric::LockNs => "waited",
            Metric::BytecodeSamples => "bytecode samples",
            Metric::Bytecodes => "bytecodes",
            Metric::Calls => "calls",
        };
        let unit = match metric.unit() {
            Unit::Count => "count",
            Unit::Nanoseconds => "nanoseconds",
            Unit::Bytes => "bytes",
            Unit::Bytecodes => "bytecodes",
        };
        MetricData { name: metric.name(), unit, word, values }
    }
}

/// The A side of a differential flame graph.
#[derive(Serialize)]
struct DiffData {
    /// How the page names the two profiles (their files).
    label_a: String,
    label_b: String,
    mode_a: String,
    mode_b: String,
    /// A's metric with A's self values, indexed like the nodes.
    a: MetricData,
    /// Counts the projection (`--only`) left out of each side's total.
    left_out_a: u64,
    left_out_b: u64,
}

fn kind_code(kind: FrameKind) -> char {
    match kind {
        FrameKind::Java => 'j',
        FrameKind::Native => 'n',
        FrameKind::Pseudo => 'p',
        FrameKind::Thread => 't',
    }
}

/// A tree to flatten: the name of each node, its children, its self values (a column per metric).
/// Every node comes after its parent.
struct Tree<'a> {
    names: &'a [String],
    node_name: Vec<u32>,
    children: Vec<Vec<u32>>,
    columns: Vec<&'a [u64]>,
}

/// The page's names, kinds and pre-order (name, child count) pairs of `tree`, children sorted by name,
/// contexts that are zero in every column left out; and the map from output position to tree node.
fn flatten(tree: &Tree, kind_of: impl Fn(u32) -> char) -> (Vec<String>, String, Vec<u64>, Vec<u32>) {
    let n = tree.node_name.len();
    // A context stays if it or a descendant counts in some column: one backward sweep, since every
    // node comes after its parent.
    let mut alive: Vec<bool> = (0..n).map(|i| tree.columns.iter().any(|c| c[i] > 0)).collect();
    let mut parent = vec![0u32; n];
    for (p, kids) in tree.children.iter().enumerate() {
        for &c in kids {
            parent[c as usize] = p as u32;
        }
    }
    for i in (1..n).rev() {
        if alive[i] {
            alive[parent[i] as usize] = true;
        }
    }
    let mut names = Vec::new();
    let mut kinds = String::new();
    let mut name_index: HashMap<u32, u64> = HashMap::new();
    let mut nodes = Vec::with_capacity(n * 2);
    let mut order = Vec::with_capacity(n);
    let mut work = vec![0u32];
    while let Some(node) = work.pop() {
        let name = tree.node_name[node as usize];
        let index = *name_index.entry(name).or_insert_with(|| {
            names.push(tree.names[name as usize].clone());
            kinds.push(kind_of(name));
            names.len() as u64 - 1
        });
        let mut children: Vec<u32> =
            tree.children[node as usize].iter().copied().filter(|&c| alive[c as usize]).collect();
        children.sort_by(|&a, &b| {
            tree.names[tree.node_name[a as usize] as usize].cmp(&tree.names[tree.node_name[b as usize] as usize])
        });
        nodes.extend_from_slice(&[index, children.len() as u64]);
        order.push(node);
        work.extend(children.iter().rev());
    }
    (names, kinds, nodes, order)
}

/// The run's facts and counters in one line.
fn subtitle(profile: &Profile) -> String {
    let mut subtitle = run_summary(&profile.meta);
    if !profile.meta.counters.is_empty() {
        let counters: Vec<String> = profile.meta.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !subtitle.is_empty() {
            subtitle.push_str("; ");
        }
        subtitle.push_str(&counters.join(" "));
    }
    subtitle
}

fn mode_of(profile: &Profile) -> String {
    if profile.meta.mode.is_empty() {
        "unknown".to_string()
    } else {
        profile.meta.mode.clone()
    }
}

/// The page's data for `profile`, shown first under `metric`: contexts merged by frame, those zero in
/// every metric left out, frames named as `naming` says.
fn flame_data(profile: &Profile, metric: Metric, naming: FrameNames) -> FlameData {
    let merged = match naming {
        FrameNames::Short => without_signatures(profile),
        FrameNames::Signatures => profile.merged_by_frame(),
    };
    let frame_names = super::display_names(&merged);
    let mut metrics = merged.metrics();
    if !metrics.contains(&metric) {
        metrics.push(metric);
    }
    let zeros = vec![0u64; merged.nodes.len()];
    let tree = Tree {
        names: &frame_names,
        node_name: merged.nodes.iter().map(|n| n.frame).collect(),
        children: merged.nodes.iter().map(|n| n.children.clone()).collect(),
        columns: metrics.iter().map(|&m| merged.column(m).unwrap_or(&zeros)).collect(),
    };
    let (names, kinds, nodes, order) = flatten(&tree, |f| kind_code(merged.frames[f as usize].kind));
    let labels = (naming == FrameNames::Short).then(|| {
        let by_name: HashMap<&str, &Frame> = frame_names.iter().map(String::as_str).zip(merged.frames.iter()).collect();
        names.iter().map(|n| by_name.get(n.as_str()).map_or_else(|| n.clone(), |f| short_name(f))).collect()
    });
    let metric_data = metrics
        .iter()
        .zip(&tree.columns)
        .map(|(&m, column)| MetricData::new(m, order.iter().map(|&i| column[i as usize]).collect()))
        .collect();
    FlameData {
        mode: mode_of(&merged),
        subtitle: subtitle(&merged),
        names,
        labels,
        kinds,
        nodes,
        metrics: metric_data,
        metric: metrics.iter().position(|&m| m == metric).expect("added above"),
        diff: None,
    }
}

/// Renders the flame graph page, showing `metric` first, frames drawn with short names (see
/// [`FrameNames::Short`]); the page switches to any other metric of the profile.
pub fn render(profile: &Profile, metric: Metric) -> Vec<u8> {
    render_with(profile, metric, FrameNames::Short)
}

/// [`render`], with the frames named as `naming` says.
pub fn render_with(profile: &Profile, metric: Metric, naming: FrameNames) -> Vec<u8> {
    page(&flame_data(profile, metric, naming))
}

/// One side of a differential flame graph: the profile, the metric its counts are, and its label.
pub struct Side<'a> {
    pub profile: &'a Profile,
    pub metric: Metric,
    pub label: &'a str,
}

/// Renders the differential flame graph of `tree` (from [`super::compare::union_tree`] of `a` and `b`):
/// B's flame graph, each frame coloured by how its share of the total changed from A to B (grown,
/// shrunk, new in B), and the contexts only A has ("gone") drawn with A's share of the width, hatched.
/// Search, zoom and the URL state work as in the flame graph. Frames are drawn with short names unless
/// `naming` asks for signatures; contexts stay apart as the comparison made them.
pub fn render_difference(tree: &UnionTree, a: &Side, b: &Side, naming: FrameNames) -> Vec<u8> {
    let kinds_by_name: Vec<char> =
        tree.names.iter().map(|n| kind_code(super::collapsed::frame_from_display_name(n).kind)).collect();
    let root_name = tree.names.len() as u32;
    let mut names = tree.names.clone();
    names.push("[root]".to_string());
    let mut children = vec![Vec::new(); tree.parent.len()];
    for (c, &p) in tree.parent.iter().enumerate().skip(1) {
        children[p as usize].push(c as u32);
    }
    let flat = Tree {
        names: &names,
        node_name: tree.name.iter().map(|&n| if n == u32::MAX { root_name } else { n }).collect(),
        children,
        columns: vec![&tree.counts[1], &tree.counts[0]],
    };
    let (names, kinds, nodes, order) = flatten(&flat, |n| if n == root_name { 'p' } else { kinds_by_name[n as usize] });
    let column = |side: usize| order.iter().map(|&i| tree.counts[side][i as usize]).collect::<Vec<u64>>();
    let labels = (naming == FrameNames::Short)
        .then(|| names.iter().map(|n| short_name(&super::collapsed::frame_from_display_name(n))).collect());
    let data = FlameData {
        mode: mode_of(b.profile),
        subtitle: String::new(),
        names,
        labels,
        kinds,
        nodes,
        metrics: vec![MetricData::new(b.metric, column(1))],
        metric: 0,
        diff: Some(DiffData {
            label_a: a.label.to_string(),
            label_b: b.label.to_string(),
            mode_a: mode_of(a.profile),
            mode_b: mode_of(b.profile),
            a: MetricData::new(a.metric, column(0)),
            left_out_a: tree.left_out[0],
            left_out_b: tree.left_out[1],
        }),
    };
    page(&data)
}

fn page(data: &FlameData) -> Vec<u8> {
    let data = serde_json::to_string(data).expect("JSON of plain data");
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
    use crate::output::compare::union_tree;

    fn named_nodes(d: &FlameData) -> Vec<(String, u64)> {
        d.nodes.chunks(2).map(|t| (d.names[t[0] as usize].clone(), t[1])).collect()
    }

    #[test]
    fn data_is_preorder_pairs_sorted_by_name_without_empty_contexts() {
        let mut p = collapsed::parse("m;b 2\nm;a 1\nm;a;x 3\nz 4\n").unwrap();
        let extra = p.intern(Frame::pseudo("[never]"));
        p.add_child(0, extra, -1);
        let d = flame_data(&p, Metric::Samples, FrameNames::Signatures);
        let expected = [("[root]", 2), ("m", 2), ("a", 1), ("x", 0), ("b", 0), ("z", 0)];
        assert_eq!(named_nodes(&d), expected.map(|(n, c)| (n.to_string(), c)));
        assert_eq!(d.kinds, "pjjjjj");
        assert_eq!(d.mode, "collapsed");
        assert_eq!(d.metrics.len(), 1);
        assert_eq!(d.metrics[0].values, [0, 0, 1, 3, 2, 4]);
    }

    #[test]
    fn every_metric_goes_in_and_a_context_stays_if_any_metric_counts_it() {
        let mut p = collapsed::parse("m;a 1\nm;b 2\n").unwrap();
        let c = p.intern(Frame::java("x.Y", "c", "()V"));
        let m = p.nodes[0].children[0];
        let nc = p.add_child(m, c, -1);
        p.set(nc, Metric::AllocBytes, 4096);
        p.set(1, Metric::Cpu, 7);
        p.meta.default_metric = Some(Metric::AllocBytes);
        let d = flame_data(&p, Metric::AllocBytes, FrameNames::Signatures);
        let names: Vec<&str> = d.metrics.iter().map(|m| m.name).collect();
        assert_eq!(names, ["samples", "alloc_bytes", "cpu"]);
        assert_eq!(d.metric, 1);
        assert_eq!((d.metrics[1].unit, d.metrics[1].word), ("bytes", "allocated"));
        let expected = [("[root]", 1), ("m", 3), ("a", 0), ("b", 0), ("x.Y.c()void", 0)];
        assert_eq!(named_nodes(&d), expected.map(|(n, c)| (n.to_string(), c)));
        assert_eq!(d.metrics[0].values, [0, 0, 1, 2, 0]);
        assert_eq!(d.metrics[1].values, [0, 0, 0, 0, 4096]);
        assert_eq!(d.metrics[2].values, [0, 7, 0, 0, 0]);
        // A metric asked for that the profile lacks is shown (empty) rather than refused.
        let d = flame_data(&p, Metric::Calls, FrameNames::Signatures);
        assert_eq!(d.metrics[d.metric].name, "calls");
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
    fn a_difference_holds_both_sides_over_the_union_of_contexts() {
        let a = collapsed::parse("m;a 5\nm;gone 5\n").unwrap();
        let b = collapsed::parse("m;a 2\nm;new 6\n").unwrap();
        let tree = union_tree(&a, Metric::Samples, &b, Metric::Samples, &[]);
        let side = |p, label| Side { profile: p, metric: Metric::Samples, label };
        let html = String::from_utf8(render_difference(
            &tree,
            &side(&a, "a.collapsed"),
            &side(&b, "b.collapsed"),
            FrameNames::Short,
        ))
        .unwrap();
        let json = &html[html.find("application/json\">").unwrap() + 18..];
        let json = &json[..json.find("</script>").unwrap()];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let names: Vec<&str> = v["nodes"]
            .as_array()
            .unwrap()
            .chunks(2)
            .map(|t| v["names"][t[0].as_u64().unwrap() as usize].as_str().unwrap())
            .collect();
        assert_eq!(names, ["[root]", "m", "a", "gone", "new"]);
        assert_eq!(v["metrics"][0]["values"], serde_json::json!([0, 0, 2, 0, 6]));
        assert_eq!(v["diff"]["a"]["values"], serde_json::json!([0, 0, 5, 5, 0]));
        assert_eq!(v["diff"]["label_a"], "a.collapsed");
        assert_eq!(v["kinds"], "pjjjj");
    }

    #[test]
    fn short_names_drop_the_package_and_the_signature() {
        let native = Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Thread", "sleep0", "(J)V") };
        assert_eq!(short_name(&Frame::java("java.util.HashMap", "put", "(Ljava/lang/Object;)V")), "HashMap.put");
        assert_eq!(short_name(&Frame::java("a.Map$Entry", "getKey", "()V")), "Map$Entry.getKey");
        assert_eq!(short_name(&Frame::java("Top", "run", "()V")), "Top.run");
        assert_eq!(short_name(&native), "Thread.sleep0 [native]");
        assert_eq!(short_name(&Frame::pseudo("[GC_active]")), "[GC_active]");
        assert_eq!(short_name(&Frame::thread("main")), "[thread main]");
        let mut p = collapsed::parse("m;x.A.f(int)void 2\nm;x.A.f(long)void 3\n").unwrap();
        p.meta.mode = "asgct".into();
        let d = flame_data(&p, Metric::Samples, FrameNames::Short);
        assert_eq!(named_nodes(&d), [("[root]", 1), ("m", 1), ("x.A.f", 0)].map(|(n, c)| (n.to_string(), c)));
        assert_eq!(d.labels.as_deref(), Some(&["[root]".to_string(), "m".into(), "A.f".into()][..]));
        assert_eq!(d.metrics[0].values, [0, 0, 5]);
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
        let d = flame_data(&p, Metric::Samples, FrameNames::Signatures);
        assert_eq!(d.nodes.len(), 2 * 100_001);
        assert_eq!(d.names.len(), 2);
    }
}
