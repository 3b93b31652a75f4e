//! The JSON calling context tree (`"format": "kprof-cct"`, schema in docs/json-format.md).
//!
//! Nodes are a flat array indexed by node id, each naming its parent and its children, so neither the
//! writer nor any reader has to recurse: a 100,000-deep tree is as easy as a flat one, and JSON readers
//! with nesting limits (serde_json: 128, Python: ~1000) read it. One node per line keeps big files
//! usable with line-oriented tools.

use crate::model::{BlockCount, Frame, FrameKind, Meta, Metric, Node, Profile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;

/// The value of `"format"`.
pub const FORMAT: &str = "kprof-cct";
/// The schema version this writer produces. The reader also reads version 1 (one `samples`, `weight` and
/// `calls` counter per node, the weight's unit in `meta.weight_unit`).
pub const VERSION: u32 = 2;

#[derive(Serialize, Deserialize)]
struct MetaJson {
    mode: String,
    /// Version 2: the metrics every node carries, in order.
    #[serde(default)]
    metrics: Vec<String>,
    /// Version 1 only.
    #[serde(default, skip_serializing)]
    weight_unit: String,
    #[serde(default)]
    default_metric: Option<String>,
    #[serde(default)]
    interval: u64,
    #[serde(default)]
    timer: String,
    #[serde(default)]
    jvm: String,
    #[serde(default)]
    start_unix_ms: u64,
    #[serde(default)]
    duration_ns: u64,
    #[serde(default)]
    counters: BTreeMap<String, u64>,
}

#[derive(Serialize, Deserialize)]
struct FrameJson {
    kind: String,
    #[serde(default)]
    class: String,
    method: String,
    #[serde(default)]
    signature: String,
    /// The display name; written for readers' convenience, ignored when read (it follows from the rest).
    #[serde(default, skip_deserializing)]
    name: String,
}

#[derive(Deserialize)]
struct BlockJson {
    start_bci: u32,
    end_bci: u32,
    count: u64,
}

#[derive(Deserialize)]
struct NodeIn {
    #[serde(default)]
    id: Option<u64>,
    parent: i64,
    frame: u64,
    #[serde(default = "unknown_callsite")]
    callsite: i32,
    #[serde(default)]
    blocks: Vec<BlockJson>,
    #[serde(default)]
    children: Option<Vec<u64>>,
    /// The counters, self (`samples`) and inclusive (`total_samples`, ignored), by name.
    #[serde(flatten)]
    counters: BTreeMap<String, u64>,
}

fn unknown_callsite() -> i32 {
    -1
}

#[derive(Deserialize)]
struct DocIn {
    format: String,
    version: u32,
    meta: MetaJson,
    frames: Vec<FrameJson>,
    nodes: Vec<NodeIn>,
}

/// Renders the profile as a `kprof-cct` JSON document (every counter, self and inclusive).
pub fn render(profile: &Profile) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + profile.frames.len() * 96 + profile.nodes.len() * 160);
    write_to(profile, &mut out).expect("writing to memory cannot fail");
    out
}

/// Writes what [`render`] makes to `out` as it goes: an exact profile's millions of nodes are never held
/// as text. Nodes are formatted by hand (their fields are numbers), which takes a fraction of what
/// serde's per-node serialization did on such trees; the golden test pins the format.
pub fn write_to(profile: &Profile, out: &mut dyn Write) -> std::io::Result<()> {
    let parents = profile.parents();
    let totals = profile.all_totals_given(&parents);
    let metrics = profile.metrics();
    let nodes = ProfileNodes { profile, parents: &parents, metrics: &metrics };
    write_tree_to(&profile.meta, &profile.frames, &metrics, &nodes, &totals, out)
}

/// Writes a `kprof-cct` document of `nodes` (numbered as [`Profile::nodes`] would be, every child after
/// its parent or not) carrying `metrics`, whose inclusive totals are `totals` (one vector per metric,
/// indexed by node). [`write_to`] is this for a [`Profile`]; the agent writes its tree's snapshot through
/// it without making a [`Profile`] of millions of nodes first.
pub fn write_tree_to<N: NodeLines>(
    meta: &Meta,
    frames: &[Frame],
    metrics: &[Metric],
    nodes: &N,
    totals: &[Vec<u64>],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    assert_eq!(metrics.len(), totals.len(), "a totals vector per metric");
    let meta_json = MetaJson {
        mode: meta.mode.clone(),
        metrics: metrics.iter().map(|m| m.name().to_string()).collect(),
        weight_unit: String::new(),
        default_metric: meta.default_metric.map(|m| m.name().to_string()),
        interval: meta.interval,
        timer: meta.timer.clone(),
        jvm: meta.jvm.clone(),
        start_unix_ms: meta.start_unix_ms,
        duration_ns: meta.duration_ns,
        counters: meta.counters.clone(),
    };
    write!(out, "{{\"format\":\"{FORMAT}\",\"version\":{VERSION},\n\"meta\":")?;
    write(out, &meta_json)?;
    out.write_all(b",\n\"totals\":")?;
    out.write_all(b"{")?;
    for (k, (m, t)) in metrics.iter().zip(totals).enumerate() {
        let sep = if k == 0 { "" } else { "," };
        write!(out, "{sep}\"{}\":{}", m.name(), t.first().copied().unwrap_or(0))?;
    }
    out.write_all(b"}")?;
    out.write_all(b",\n\"frames\":[")?;
    for (i, f) in frames.iter().enumerate() {
        out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
        let frame = FrameJson {
            kind: f.kind.as_str().to_string(),
            class: f.class.clone(),
            method: f.method.clone(),
            signature: f.signature.clone(),
            name: f.display_name(),
        };
        write(out, &frame)?;
    }
    out.write_all(b"],\n\"nodes\":[")?;
    let keys = NodeKeys::new(metrics);
    let text = NodeText { nodes, keys: &keys, totals };
    write_nodes(&text, out)?;
    out.write_all(b"]}\n")
}

/// One node's line as the JSON writer reads it.
pub struct NodeLine<'a> {
    pub frame: u32,
    pub callsite: i32,
    /// -1 for the root.
    pub parent: i64,
    pub blocks: &'a [BlockCount],
    pub children: Children<'a>,
}

/// A node's children: listed, or (in a snapshot of the agent's tree) a run of consecutive numbers.
pub enum Children<'a> {
    Listed(&'a [u32]),
    Run(std::ops::Range<u32>),
}

/// A tree the JSON writer can write: nodes numbered from 0 (the root), read from several threads.
pub trait NodeLines: Sync {
    /// How many nodes there are (the root is node 0).
    fn count(&self) -> usize;
    fn line(&self, i: usize) -> NodeLine<'_>;
    /// Node `i`'s self value of the `k`-th metric of the write.
    fn value(&self, i: usize, k: usize) -> u64;
}

/// A [`Profile`]'s nodes, with their parents from [`Profile::parents`].
struct ProfileNodes<'a> {
    profile: &'a Profile,
    parents: &'a [u32],
    metrics: &'a [Metric],
}

impl NodeLines for ProfileNodes<'_> {
    fn count(&self) -> usize {
        self.profile.nodes.len()
    }

    fn line(&self, i: usize) -> NodeLine<'_> {
        let n = &self.profile.nodes[i];
        NodeLine {
            frame: n.frame,
            callsite: n.callsite,
            parent: if i == 0 { -1 } else { self.parents[i] as i64 },
            blocks: &n.blocks,
            children: Children::Listed(&n.children),
        }
    }

    fn value(&self, i: usize, k: usize) -> u64 {
        self.profile.value(i as u32, self.metrics[k])
    }
}

/// The keys of a node line's counters, made once per write: `,"samples":` and `,"total_samples":` for
/// each metric.
struct NodeKeys {
    own: Vec<Vec<u8>>,
    total: Vec<Vec<u8>>,
}

impl NodeKeys {
    fn new(metrics: &[Metric]) -> NodeKeys {
        NodeKeys {
            own: metrics.iter().map(|m| format!(",\"{}\":", m.name()).into_bytes()).collect(),
            total: metrics.iter().map(|m| format!(",\"total_{}\":", m.name()).into_bytes()).collect(),
        }
    }
}

/// Nodes one worker formats at a time: text of a few MB, written in node order.
const CHUNK_NODES: usize = 1 << 14;
/// Profiles with fewer nodes are formatted on the calling thread alone.
const PARALLEL_NODES: usize = 1 << 16;
/// Most threads that format nodes.
const MAX_FORMATTERS: usize = 4;

/// What one node's line is made of: the node and its inclusive totals (one vector per metric).
struct NodeText<'a, N> {
    nodes: &'a N,
    keys: &'a NodeKeys,
    totals: &'a [Vec<u64>],
}

impl<N: NodeLines> NodeText<'_, N> {
    fn chunks(&self) -> usize {
        self.nodes.count().div_ceil(CHUNK_NODES)
    }

    /// Appends the lines of the nodes of chunk `chunk` to `line`.
    fn format_chunk(&self, chunk: usize, line: &mut Vec<u8>) {
        let first = chunk * CHUNK_NODES;
        let mut num = itoa::Buffer::new();
        let last = self.nodes.count().min(first + CHUNK_NODES);
        for i in first..last {
            let n = self.nodes.line(i);
            line.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
            line.extend_from_slice(b"{\"id\":");
            line.extend_from_slice(num.format(i).as_bytes());
            line.extend_from_slice(b",\"parent\":");
            line.extend_from_slice(num.format(n.parent).as_bytes());
            line.extend_from_slice(b",\"frame\":");
            line.extend_from_slice(num.format(n.frame).as_bytes());
            line.extend_from_slice(b",\"callsite\":");
            line.extend_from_slice(num.format(n.callsite).as_bytes());
            for (k, key) in self.keys.own.iter().enumerate() {
                line.extend_from_slice(key);
                line.extend_from_slice(num.format(self.nodes.value(i, k)).as_bytes());
            }
            for (key, total) in self.keys.total.iter().zip(self.totals) {
                line.extend_from_slice(key);
                line.extend_from_slice(num.format(total[i]).as_bytes());
            }
            if !n.blocks.is_empty() {
                line.extend_from_slice(b",\"blocks\":[");
                for (k, b) in n.blocks.iter().enumerate() {
                    line.extend_from_slice(if k == 0 { b"{\"start_bci\":" } else { b",{\"start_bci\":" });
                    line.extend_from_slice(num.format(b.start_bci).as_bytes());
                    line.extend_from_slice(b",\"end_bci\":");
                    line.extend_from_slice(num.format(b.end_bci).as_bytes());
                    line.extend_from_slice(b",\"count\":");
                    line.extend_from_slice(num.format(b.count).as_bytes());
                    line.push(b'}');
                }
                line.push(b']');
            }
            line.extend_from_slice(b",\"children\":[");
            let mut child = |k: usize, c: u32| {
                if k > 0 {
                    line.push(b',');
                }
                line.extend_from_slice(num.format(c).as_bytes());
            };
            match n.children {
                Children::Listed(list) => list.iter().enumerate().for_each(|(k, &c)| child(k, c)),
                Children::Run(run) => run.enumerate().for_each(|(k, c)| child(k, c)),
            }
            line.extend_from_slice(b"]}");
        }
    }
}

/// Writes every node's line, in node order. A large tree is formatted by helper threads, one per core,
/// chunk `c` by helper `c % n`, while the calling thread only writes: an exact profile of millions of
/// contexts is written when the JVM exits, which waits for it, and the application's own threads have
/// stopped, so the cores are free; copying the text into the page cache is the longest part, and it
/// takes one thread. Each helper reuses the buffers the writer hands back, so the text is never held
/// whole and fresh memory is touched only for the first few chunks.
fn write_nodes<N: NodeLines>(text: &NodeText<'_, N>, out: &mut dyn Write) -> std::io::Result<()> {
    let formatters = if text.nodes.count() < PARALLEL_NODES {
        0
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_FORMATTERS)
    };
    write_nodes_with(text, out, formatters)
}

/// [`write_nodes`] with `formatters` helper threads (none: the calling thread formats too).
fn write_nodes_with<N: NodeLines>(
    text: &NodeText<'_, N>,
    out: &mut dyn Write,
    formatters: usize,
) -> std::io::Result<()> {
    let chunks = text.chunks();
    let formatters = formatters.min(chunks);
    let format_here = |out: &mut dyn Write| {
        let mut line = Vec::with_capacity(CHUNK_NODES * 192);
        (0..chunks).try_for_each(|c| {
            line.clear();
            text.format_chunk(c, &mut line);
            out.write_all(&line)
        })
    };
    if formatters == 0 {
        return format_here(out);
    }
    std::thread::scope(|scope| {
        // Helper h formats chunks h, h + n, ...; it sends each chunk's text on `texts` and takes the next
        // buffer from `spares` (two in flight per helper).
        let mut helpers = Vec::with_capacity(formatters);
        for h in 0..formatters {
            let (text_tx, texts) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
            let (spare_tx, spares) = std::sync::mpsc::channel::<Vec<u8>>();
            let spawned = std::thread::Builder::new().name("kprof-json".into()).spawn_scoped(scope, move || {
                let mut buf = Vec::with_capacity(CHUNK_NODES * 192);
                for c in (h..chunks).step_by(formatters) {
                    buf.clear();
                    text.format_chunk(c, &mut buf);
                    // The writer stopped (a write failed): nothing more to do.
                    if text_tx.send(buf).is_err() {
                        return;
                    }
                    buf = spares.try_recv().unwrap_or_default();
                }
            });
            if spawned.is_err() {
                break;
            }
            helpers.push((texts, spare_tx));
        }
        if helpers.len() < formatters {
            // No thread for every formatter: the helpers started stop at their first send (the receivers
            // go with `helpers`), and this thread formats everything.
            drop(helpers);
            return format_here(out);
        }
        for c in 0..chunks {
            let (texts, spare_tx) = &helpers[c % formatters];
            let buf = texts.recv().map_err(|_| std::io::Error::other("a JSON formatter thread failed"))?;
            out.write_all(&buf)?;
            let _ = spare_tx.send(buf);
        }
        Ok(())
    })
}

/// Writes `value` as JSON.
fn write<T: Serialize>(out: &mut dyn Write, value: &T) -> std::io::Result<()> {
    serde_json::to_writer(out, value).map_err(std::io::Error::from)
}

/// Reads a `kprof-cct` JSON document back into the profile it was written from. The inclusive totals
/// and frame names in the file are ignored (they follow from the rest). Nodes may give `children`, or
/// only `parent` (then children are in file order).
pub fn parse(text: &str) -> Result<Profile, String> {
    let doc: DocIn = serde_json::from_str(text).map_err(|e| format!("not a kprof JSON profile: {e}"))?;
    if doc.format != FORMAT {
        return Err(format!("format is '{}', expected '{FORMAT}'", doc.format));
    }
    if doc.version != VERSION && doc.version != 1 {
        return Err(format!("version {} is not supported (this kprof reads versions 1 and {VERSION})", doc.version));
    }
    let m = doc.meta;
    // Where each metric's self values are in a node: (metric, key).
    let columns: Vec<(Metric, String)> = if doc.version == 1 {
        version1_columns(&m.mode, &m.weight_unit)?
    } else {
        let mut columns = Vec::new();
        for name in &m.metrics {
            let metric =
                Metric::parse(name).ok_or_else(|| format!("meta.metrics has '{name}', which is not a metric"))?;
            columns.push((metric, name.clone()));
        }
        columns
    };
    let default_metric = match m.default_metric.as_deref() {
        None => None,
        // Version 1 named the counter (`weight`): the metric read from that key.
        Some(s) => Some(match columns.iter().find(|(_, key)| doc.version == 1 && key == s) {
            Some((metric, _)) => *metric,
            None => Metric::parse(s).ok_or_else(|| format!("meta.default_metric '{s}' is not a metric"))?,
        }),
    };
    let meta = Meta {
        mode: m.mode,
        default_metric,
        interval: m.interval,
        timer: m.timer,
        jvm: m.jvm,
        start_unix_ms: m.start_unix_ms,
        duration_ns: m.duration_ns,
        counters: m.counters,
    };
    let mut frames = Vec::with_capacity(doc.frames.len());
    for (i, f) in doc.frames.into_iter().enumerate() {
        let kind = FrameKind::parse(&f.kind)
            .ok_or_else(|| format!("frames[{i}].kind '{}' is not one of java, native, pseudo, thread", f.kind))?;
        frames.push(Frame { kind, class: f.class, method: f.method, signature: f.signature });
    }
    let count = doc.nodes.len();
    if count == 0 {
        return Err("no nodes (the root is required)".to_string());
    }
    if count > u32::MAX as usize {
        return Err("too many nodes".to_string());
    }
    let explicit_children = doc.nodes.iter().any(|n| n.children.is_some());
    let mut parents = Vec::with_capacity(count);
    let mut nodes = Vec::with_capacity(count);
    let mut values: Vec<Vec<u64>> = columns.iter().map(|_| Vec::with_capacity(count)).collect();
    for (i, n) in doc.nodes.into_iter().enumerate() {
        if let Some(id) = n.id {
            if id != i as u64 {
                return Err(format!("nodes[{i}].id is {id}: nodes must be listed by id"));
            }
        }
        if n.frame >= frames.len() as u64 {
            return Err(format!("nodes[{i}].frame {} is not a frame index", n.frame));
        }
        let valid_parent = if i == 0 { n.parent == -1 } else { n.parent >= 0 && (n.parent as u64) < count as u64 };
        if !valid_parent {
            return Err(format!("nodes[{i}].parent {} is not valid (the root, node 0, has parent -1)", n.parent));
        }
        let mut children = Vec::new();
        for c in n.children.unwrap_or_default() {
            if c == 0 || c >= count as u64 {
                return Err(format!("nodes[{i}].children has {c}, not a node index"));
            }
            children.push(c as u32);
        }
        parents.push(n.parent);
        for ((_, key), column) in columns.iter().zip(&mut values) {
            column.push(n.counters.get(key).copied().unwrap_or(0));
        }
        nodes.push(Node {
            frame: n.frame as u32,
            callsite: n.callsite,
            blocks: n
                .blocks
                .into_iter()
                .map(|b| BlockCount { start_bci: b.start_bci, end_bci: b.end_bci, count: b.count })
                .collect(),
            children,
        });
    }
    if !explicit_children {
        for (i, &p) in parents.iter().enumerate().skip(1) {
            nodes[p as usize].children.push(i as u32);
        }
    }
    check_tree(&nodes, &parents)?;
    let mut profile = Profile::new(meta, &[]);
    profile.frames = frames;
    profile.nodes = nodes;
    for ((metric, _), column) in columns.into_iter().zip(values) {
        profile.set_column(metric, column);
    }
    Ok(profile)
}

/// Version 1's three counters (`samples`, `weight` in the unit `weight_unit` names, `calls`) as the metrics
/// they were, by mode; (metric, key) pairs.
fn version1_columns(mode: &str, weight_unit: &str) -> Result<Vec<(Metric, String)>, String> {
    let weight = match weight_unit {
        "cpu_ns" => Some(Metric::Cpu),
        "bytecodes" => Some(Metric::Bytecodes),
        "none" => None,
        other => return Err(format!("meta.weight_unit '{other}' is not one of none, cpu_ns, bytecodes")),
    };
    let samples = match mode {
        "exact" => None,
        "bytecode" => Some(Metric::BytecodeSamples),
        _ => Some(Metric::Samples),
    };
    let calls = (mode != "asgct" && mode != "bytecode").then_some(Metric::Calls);
    Ok([(samples, "samples"), (weight, "weight"), (calls, "calls")]
        .into_iter()
        .filter_map(|(m, key)| m.map(|m| (m, key.to_string())))
        .collect())
}

/// Every node but the root is listed as a child exactly once, by its own parent, and is reachable from
/// the root.
fn check_tree(nodes: &[Node], parents: &[i64]) -> Result<(), String> {
    let mut listed = vec![false; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for &c in &n.children {
            if parents[c as usize] != i as i64 {
                return Err(format!("nodes[{i}] lists child {c}, whose parent is {}", parents[c as usize]));
            }
            if std::mem::replace(&mut listed[c as usize], true) {
                return Err(format!("node {c} is listed twice as a child"));
            }
        }
    }
    if let Some(i) = (1..nodes.len()).find(|&i| !listed[i]) {
        return Err(format!("node {i} is not listed among its parent's children"));
    }
    let mut seen = 0usize;
    let mut work = vec![0u32];
    while let Some(n) = work.pop() {
        seen += 1;
        work.extend_from_slice(&nodes[n as usize].children);
    }
    if seen != nodes.len() {
        return Err(format!("{} nodes are not reachable from the root", nodes.len() - seen));
    }
    Ok(())
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
