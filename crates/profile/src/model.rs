//! A resolved profile: the calling context tree with every frame named. This is what the writers take
//! (and what the readers of `kprof report`/`kprof compare` produce); it knows nothing of engines.

pub use crate::metric::{Metric, Unit};
use std::collections::BTreeMap;

/// What kind of frame a [`Frame`] is.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A Java method (interpreted, compiled or inlined: they look the same).
    Java,
    /// A native (JNI) method.
    Native,
    /// A bracketed pseudo-frame such as `[GC_active]` or `[root]`.
    Pseudo,
    /// A thread root (`threads=on`).
    Thread,
}

impl FrameKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FrameKind::Java => "java",
            FrameKind::Native => "native",
            FrameKind::Pseudo => "pseudo",
            FrameKind::Thread => "thread",
        }
    }

    pub fn parse(s: &str) -> Option<FrameKind> {
        Some(match s {
            "java" => FrameKind::Java,
            "native" => FrameKind::Native,
            "pseudo" => FrameKind::Pseudo,
            "thread" => FrameKind::Thread,
            _ => return None,
        })
    }
}

/// A named frame.
#[derive(Clone, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub struct Frame {
    pub kind: FrameKind,
    /// Binary class name with dots (`java.util.HashMap`, `a.B$C`); empty for pseudo and thread frames.
    pub class: String,
    /// Method name (`get`, `<init>`); for a pseudo-frame its bracketed name; for a thread its name.
    pub method: String,
    /// JVM method descriptor (`(Ljava/lang/Object;)Ljava/lang/Object;`); empty when unknown.
    pub signature: String,
}

impl Frame {
    pub fn java(class: &str, method: &str, signature: &str) -> Frame {
        Frame {
            kind: FrameKind::Java,
            class: class.to_string(),
            method: method.to_string(),
            signature: signature.to_string(),
        }
    }

    pub fn pseudo(name: &str) -> Frame {
        Frame { kind: FrameKind::Pseudo, class: String::new(), method: name.to_string(), signature: String::new() }
    }

    pub fn thread(name: &str) -> Frame {
        Frame { kind: FrameKind::Thread, class: String::new(), method: name.to_string(), signature: String::new() }
    }

    /// The name every output shows: `package.Class.method(ParamTypes)ReturnType`, so overloads stay apart
    /// (`java.lang.String.indexOf(int,int)int`); pseudo-frames as they are (`[GC_active]`); threads as
    /// `[thread NAME]`. Characters that would break the collapsed format (`;`, newlines) are replaced.
    pub fn display_name(&self) -> String {
        let raw = match self.kind {
            FrameKind::Pseudo => self.method.clone(),
            FrameKind::Thread => format!("[thread {}]", self.method),
            FrameKind::Java | FrameKind::Native => {
                let mut s = String::with_capacity(self.class.len() + self.method.len() + 32);
                if !self.class.is_empty() {
                    s.push_str(&self.class);
                    s.push('.');
                }
                s.push_str(&self.method);
                if !self.signature.is_empty() {
                    s.push_str(&descriptor_to_java(&self.signature));
                }
                if self.kind == FrameKind::Native {
                    s.push_str(" [native]");
                }
                s
            }
        };
        raw.replace([';', '\n', '\r'], "_")
    }
}

/// Turns a method descriptor into Java-like text: `(I[Ljava/lang/String;)V` → `(int,java.lang.String[])void`.
/// A malformed descriptor is returned as it is.
pub fn descriptor_to_java(desc: &str) -> String {
    fn one(bytes: &[u8], i: &mut usize) -> Option<String> {
        let mut dims = 0;
        while *i < bytes.len() && bytes[*i] == b'[' {
            dims += 1;
            *i += 1;
        }
        let base = match *bytes.get(*i)? {
            b'B' => "byte".to_string(),
            b'C' => "char".to_string(),
            b'D' => "double".to_string(),
            b'F' => "float".to_string(),
            b'I' => "int".to_string(),
            b'J' => "long".to_string(),
            b'S' => "short".to_string(),
            b'Z' => "boolean".to_string(),
            b'V' => "void".to_string(),
            b'L' => {
                let start = *i + 1;
                let end = start + bytes[start..].iter().position(|&b| b == b';')?;
                *i = end;
                String::from_utf8_lossy(&bytes[start..end]).replace('/', ".")
            }
            _ => return None,
        };
        *i += 1;
        Some(base + &"[]".repeat(dims))
    }
    let bytes = desc.as_bytes();
    let parse = || -> Option<String> {
        if bytes.first() != Some(&b'(') {
            return None;
        }
        let mut i = 1;
        let mut params = Vec::new();
        while *bytes.get(i)? != b')' {
            params.push(one(bytes, &mut i)?);
        }
        i += 1;
        let ret = one(bytes, &mut i)?;
        if i != bytes.len() {
            return None;
        }
        Some(format!("({}){}", params.join(","), ret))
    };
    parse().unwrap_or_else(|| desc.to_string())
}

/// Per-basic-block execution count in one calling context (exact mode with `bb=on`).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct BlockCount {
    /// First bytecode offset of the block in the original method.
    pub start_bci: u32,
    /// One past the last bytecode offset of the block.
    pub end_bci: u32,
    pub count: u64,
}

/// One calling context. Its counters are kept by the [`Profile`], a column per metric
/// ([`Profile::value`]); they are *self* counts (this context as the leaf, or calls of this context),
/// inclusive counts come from [`Profile::totals`].
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Node {
    /// Index into [`Profile::frames`].
    pub frame: u32,
    /// Bytecode index of the call in the caller's method; -1 when unknown or not recorded.
    pub callsite: i32,
    /// Basic-block counts (exact mode, `bb=on`).
    pub blocks: Vec<BlockCount>,
    /// Indices into [`Profile::nodes`].
    pub children: Vec<u32>,
}

/// Facts about the run that produced the profile.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Meta {
    /// The engines that ran, joined by `+` (`asgct`, `bytecode+asgct`, `asgct+alloc+lock`), or what a reader
    /// found (`collapsed`).
    pub mode: String,
    /// The metric the run asked for (`metric=`): the default for views.
    pub default_metric: Option<Metric>,
    /// The CPU or wall sampling interval, nanoseconds; bytecode mode alone: the granularity (bytecodes). 0
    /// when not applicable.
    pub interval: u64,
    /// The timer that actually ran (asgct), e.g. `perf`, `ctimer`, `itimer`.
    pub timer: String,
    /// JVM name and version.
    pub jvm: String,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub start_unix_ms: u64,
    /// Profiled time, nanoseconds.
    pub duration_ns: u64,
    /// Further figures (samples, dropped, usable, classes rewritten, ...) by name.
    pub counters: BTreeMap<String, u64>,
}

/// A resolved calling context tree. `nodes[0]` is the root; its frame is `[root]`. Counters are kept by
/// metric, a column each (only the metrics of the engines that ran).
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Profile {
    pub meta: Meta,
    pub frames: Vec<Frame>,
    pub nodes: Vec<Node>,
    /// The metrics this profile carries, each with its self values indexed like `nodes`.
    columns: Vec<(Metric, Vec<u64>)>,
}

impl Profile {
    /// An empty profile, just the root, carrying `metrics` (in that order; more are added by
    /// [`Profile::add`] and [`Profile::add_metric`]).
    pub fn new(meta: Meta, metrics: &[Metric]) -> Profile {
        let mut p = Profile { meta, frames: Vec::new(), nodes: Vec::new(), columns: Vec::new() };
        for &m in metrics {
            p.add_metric(m);
        }
        let root = p.intern(Frame::pseudo("[root]"));
        p.push_node(Node { frame: root, callsite: -1, ..Node::default() });
        p
    }

    /// The metrics this profile carries, in order.
    pub fn metrics(&self) -> Vec<Metric> {
        self.columns.iter().map(|(m, _)| *m).collect()
    }

    pub fn has(&self, metric: Metric) -> bool {
        self.columns.iter().any(|(m, _)| *m == metric)
    }

    /// Declares `metric` (all zero so far) if the profile lacks it.
    pub fn add_metric(&mut self, metric: Metric) {
        if !self.has(metric) {
            self.columns.push((metric, vec![0; self.nodes.len()]));
        }
    }

    /// The self values of `metric`, indexed like [`Profile::nodes`], if the profile carries it.
    pub fn column(&self, metric: Metric) -> Option<&[u64]> {
        self.columns.iter().find(|(m, _)| *m == metric).map(|(_, v)| v.as_slice())
    }

    /// Replaces the self values of `metric` (indexed like [`Profile::nodes`]).
    pub fn set_column(&mut self, metric: Metric, values: Vec<u64>) {
        assert_eq!(values.len(), self.nodes.len(), "a column has a value per node");
        match self.columns.iter_mut().find(|(m, _)| *m == metric) {
            Some((_, v)) => *v = values,
            None => self.columns.push((metric, values)),
        }
    }

    /// The self value of `node` under `metric` (0 when the profile lacks the metric).
    pub fn value(&self, node: u32, metric: Metric) -> u64 {
        self.column(metric).map_or(0, |c| c[node as usize])
    }

    /// Adds `v` to the self value of `node` under `metric` (declaring the metric if new).
    pub fn add(&mut self, node: u32, metric: Metric, v: u64) {
        self.add_metric(metric);
        let (_, c) = self.columns.iter_mut().find(|(m, _)| *m == metric).expect("declared above");
        c[node as usize] = c[node as usize].saturating_add(v);
    }

    /// Sets the self value of `node` under `metric` (declaring the metric if new).
    pub fn set(&mut self, node: u32, metric: Metric, v: u64) {
        self.add_metric(metric);
        let (_, c) = self.columns.iter_mut().find(|(m, _)| *m == metric).expect("declared above");
        c[node as usize] = v;
    }

    /// Appends a node (zero in every metric) and returns its index; the caller links it to its parent.
    pub fn push_node(&mut self, node: Node) -> u32 {
        let idx = self.nodes.len() as u32;
        self.nodes.push(node);
        for (_, c) in &mut self.columns {
            c.push(0);
        }
        idx
    }

    /// The index of `frame` in [`Profile::frames`], adding it if new. Linear in the number of frames only
    /// when called without [`FrameInterner`]; builders with many frames use that.
    pub fn intern(&mut self, frame: Frame) -> u32 {
        if let Some(i) = self.frames.iter().position(|f| *f == frame) {
            return i as u32;
        }
        self.frames.push(frame);
        (self.frames.len() - 1) as u32
    }

    /// Adds a child context under `parent` and returns its index (no merging: the caller decides).
    pub fn add_child(&mut self, parent: u32, frame: u32, callsite: i32) -> u32 {
        let idx = self.push_node(Node { frame, callsite, ..Node::default() });
        self.nodes[parent as usize].children.push(idx);
        idx
    }

    /// The child of `parent` with this frame and callsite, created if missing.
    pub fn child(&mut self, parent: u32, frame: u32, callsite: i32) -> u32 {
        let found = self.nodes[parent as usize]
            .children
            .iter()
            .copied()
            .find(|&c| self.nodes[c as usize].frame == frame && self.nodes[c as usize].callsite == callsite);
        found.unwrap_or_else(|| self.add_child(parent, frame, callsite))
    }

    /// The metric a view uses when none is asked for: the run's `metric=`, else the profile's first metric
    /// (the first engine's), else samples.
    pub fn default_metric(&self) -> Metric {
        self.meta
            .default_metric
            .filter(|&m| self.has(m))
            .or(self.columns.first().map(|(m, _)| *m))
            .unwrap_or(Metric::Samples)
    }

    /// The metric a view asked for by name shows in this profile: `name` itself when the profile carries
    /// it; `samples` in a profile without CPU samples means its sampling engine's samples (wall or
    /// bytecode), so that `metric=samples` keeps working on single-engine profiles. Err: a one-line message
    /// naming the metrics the profile has.
    pub fn resolve_metric(&self, metric: Metric) -> Result<Metric, String> {
        if self.has(metric) {
            return Ok(metric);
        }
        if metric == Metric::Samples {
            if let Some(m) = self.columns.iter().find_map(|(m, _)| m.sample_count().filter(|c| self.has(*c))) {
                return Ok(m);
            }
        }
        let have: Vec<&str> = self.columns.iter().map(|(m, _)| m.name()).collect();
        Err(format!(
            "the profile has no '{}' metric (it has: {})",
            metric.name(),
            if have.is_empty() { "none".to_string() } else { have.join(", ") }
        ))
    }

    /// Inclusive values for every node under `metric` (children's totals plus the node's own), indexed
    /// like [`Profile::nodes`].
    pub fn totals(&self, metric: Metric) -> Vec<u64> {
        let mut totals = [self.column(metric).map_or_else(|| vec![0; self.nodes.len()], <[u64]>::to_vec)];
        self.sum_into_parents(&mut totals, &self.parents());
        let [t] = totals;
        t
    }

    /// [`Profile::totals`] of every metric the profile carries (in [`Profile::metrics`] order), in one
    /// walk of the tree; `parents` comes from [`Profile::parents`].
    pub fn all_totals_given(&self, parents: &[u32]) -> Vec<Vec<u64>> {
        let mut totals: Vec<Vec<u64>> = self.columns.iter().map(|(_, c)| c.clone()).collect();
        self.sum_into_parents(&mut totals, parents);
        totals
    }

    /// [`Profile::all_totals_given`] with the parents worked out here.
    pub fn all_totals(&self) -> Vec<Vec<u64>> {
        self.all_totals_given(&self.parents())
    }

    /// Turns self values (a vector per metric, indexed like `nodes`) into inclusive ones.
    fn sum_into_parents(&self, totals: &mut [Vec<u64>], parents: &[u32]) {
        // The agent numbers every child after its parent: then a backward sweep over the parents does it,
        // without a post-order walk of the child lists.
        if parents.iter().enumerate().skip(1).all(|(i, &p)| (p as usize) < i) {
            for t in totals.iter_mut() {
                add_into_parents(t, |i| parents[i] as usize);
            }
            return;
        }
        for i in self.post_order() {
            for t in totals.iter_mut() {
                let sum = self.nodes[i as usize].children.iter().fold(0u64, |s, &c| s.saturating_add(t[c as usize]));
                t[i as usize] = t[i as usize].saturating_add(sum);
            }
        }
    }

    /// Node indices, children before parents (iterative: deep trees must not overflow the stack).
    pub fn post_order(&self) -> Vec<u32> {
        // The agent numbers every child after its parent: then reverse index order is one, found in a
        // pass without the stack walk's cache misses over millions of nodes.
        if self.nodes.iter().enumerate().all(|(i, n)| n.children.iter().all(|&c| c as usize > i)) {
            return (0..self.nodes.len() as u32).rev().collect();
        }
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<(u32, bool)> = vec![(0, false)];
        while let Some((n, expanded)) = stack.pop() {
            if expanded {
                order.push(n);
            } else {
                stack.push((n, true));
                for &c in self.nodes[n as usize].children.iter().rev() {
                    stack.push((c, false));
                }
            }
        }
        order
    }

    /// The frames from the root's child down to `node` (the root itself excluded); `parents` comes from
    /// [`Profile::parents`].
    pub fn path(&self, node: u32, parents: &[u32]) -> Vec<u32> {
        let mut path = Vec::new();
        let mut n = node;
        while n != 0 {
            path.push(n);
            n = parents[n as usize];
        }
        path.reverse();
        path
    }

    /// The parent of every node (the root is its own parent).
    pub fn parents(&self) -> Vec<u32> {
        let mut parents = vec![0u32; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &c in &n.children {
                parents[c as usize] = i as u32;
            }
        }
        parents
    }

    /// A copy where contexts that differ only by callsite are merged (what flame graphs and collapsed
    /// stacks show): children with the same frame become one node, counters and blocks summed.
    pub fn merged_by_frame(&self) -> Profile {
        let mut out = Profile {
            meta: self.meta.clone(),
            frames: self.frames.clone(),
            nodes: Vec::with_capacity(self.nodes.len()),
            columns: self.columns.iter().map(|(m, _)| (*m, Vec::new())).collect(),
        };
        out.push_node(Node { frame: self.nodes[0].frame, callsite: -1, ..Node::default() });
        // (source node, destination node) pairs still to copy.
        let mut work = vec![(0u32, 0u32)];
        while let Some((src, dst)) = work.pop() {
            let s = &self.nodes[src as usize];
            for (k, (_, c)) in self.columns.iter().enumerate() {
                let d = &mut out.columns[k].1[dst as usize];
                *d = d.saturating_add(c[src as usize]);
            }
            merge_blocks(&mut out.nodes[dst as usize].blocks, &s.blocks);
            for &c in &s.children {
                let frame = self.nodes[c as usize].frame;
                let existing =
                    out.nodes[dst as usize].children.iter().copied().find(|&k| out.nodes[k as usize].frame == frame);
                let target = existing.unwrap_or_else(|| out.add_child(dst, frame, -1));
                work.push((c, target));
            }
        }
        out
    }
}

fn merge_blocks(into: &mut Vec<BlockCount>, from: &[BlockCount]) {
    for b in from {
        match into.iter_mut().find(|x| x.start_bci == b.start_bci && x.end_bci == b.end_bci) {
            Some(x) => x.count += b.count,
            None => into.push(b.clone()),
        }
    }
}

/// Adds each node's value into its parent's, from the last node to the first: `values` become inclusive
/// totals when every node comes after its parent (`parent_of(i) < i` for all but the root, node 0).
pub fn add_into_parents(values: &mut [u64], parent_of: impl Fn(usize) -> usize) {
    for i in (1..values.len()).rev() {
        let p = parent_of(i);
        values[p] = values[p].saturating_add(values[i]);
    }
}

/// Interns frames by value in O(1) while a profile's frame list is built.
#[derive(Default)]
pub struct FrameInterner {
    index: std::collections::HashMap<Frame, u32>,
}

impl FrameInterner {
    /// The index of `frame` in `frames`, pushed there if new.
    pub fn intern(&mut self, frames: &mut Vec<Frame>, frame: Frame) -> u32 {
        if let Some(&i) = self.index.get(&frame) {
            return i;
        }
        let i = frames.len() as u32;
        self.index.insert(frame.clone(), i);
        frames.push(frame);
        i
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
