//! A resolved profile: the calling context tree with every frame named. This is what the writers take
//! (and what the readers of `kprof report`/`kprof compare` produce); it knows nothing of engines.

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

/// One calling context. Counters are *self* counts (this context as the leaf, or calls of this context);
/// inclusive counts are computed by [`Profile::totals`].
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Node {
    /// Index into [`Profile::frames`].
    pub frame: u32,
    /// Bytecode index of the call in the caller's method; -1 when unknown or not recorded.
    pub callsite: i32,
    /// Samples whose leaf is this context (asgct, bytecode).
    pub samples: u64,
    /// Weight of those samples: CPU nanoseconds (asgct) or bytecodes (bytecode, exact); see [`Meta::weight_unit`].
    pub weight: u64,
    /// Invocations of this context (exact mode).
    pub calls: u64,
    /// Basic-block counts (exact mode, `bb=on`).
    pub blocks: Vec<BlockCount>,
    /// Indices into [`Profile::nodes`].
    pub children: Vec<u32>,
}

/// What the weight counter measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum WeightUnit {
    #[default]
    None,
    CpuNanos,
    Bytecodes,
}

impl WeightUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            WeightUnit::None => "none",
            WeightUnit::CpuNanos => "cpu_ns",
            WeightUnit::Bytecodes => "bytecodes",
        }
    }

    pub fn parse(s: &str) -> Option<WeightUnit> {
        Some(match s {
            "none" => WeightUnit::None,
            "cpu_ns" => WeightUnit::CpuNanos,
            "bytecodes" => WeightUnit::Bytecodes,
            _ => return None,
        })
    }
}

/// Which counter a view of the profile (collapsed output, flame graph, report, compare) uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Metric {
    Samples,
    /// The weight counter: CPU nanoseconds in asgct mode, bytecodes in bytecode and exact modes.
    Weight,
    Calls,
}

impl Metric {
    /// Accepted spellings: `samples`; `cpu`, `bytecodes` or `weight` for the weight counter; `calls`.
    pub fn parse(s: &str) -> Option<Metric> {
        Some(match s {
            "samples" => Metric::Samples,
            "weight" | "cpu" | "bytecodes" => Metric::Weight,
            "calls" => Metric::Calls,
            _ => return None,
        })
    }

    pub const ACCEPTED: &'static str = "samples, cpu, bytecodes, weight, calls";

    pub fn name(self, unit: WeightUnit) -> &'static str {
        match self {
            Metric::Samples => "samples",
            Metric::Calls => "calls",
            Metric::Weight => match unit {
                WeightUnit::CpuNanos => "cpu_ns",
                WeightUnit::Bytecodes => "bytecodes",
                WeightUnit::None => "weight",
            },
        }
    }
}

/// Facts about the run that produced the profile.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Meta {
    /// `asgct`, `bytecode`, `exact`, or what a reader found (`collapsed`).
    pub mode: String,
    pub weight_unit: WeightUnit,
    /// The metric the run asked for (`metric=`): the default for views.
    pub default_metric: Option<Metric>,
    /// asgct: the sampling interval; bytecode: the granularity (bytecodes). 0 when not applicable.
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

/// A resolved calling context tree. `nodes[0]` is the root; its frame is `[root]`.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Profile {
    pub meta: Meta,
    pub frames: Vec<Frame>,
    pub nodes: Vec<Node>,
}

impl Profile {
    /// An empty profile: just the root.
    pub fn new(meta: Meta) -> Profile {
        let mut p = Profile { meta, frames: Vec::new(), nodes: Vec::new() };
        let root = p.intern(Frame::pseudo("[root]"));
        p.nodes.push(Node { frame: root, callsite: -1, ..Node::default() });
        p
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
        let idx = self.nodes.len() as u32;
        self.nodes.push(Node { frame, callsite, ..Node::default() });
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

    /// The self value of a node under `metric`.
    pub fn value(&self, node: u32, metric: Metric) -> u64 {
        let n = &self.nodes[node as usize];
        match metric {
            Metric::Samples => n.samples,
            Metric::Weight => n.weight,
            Metric::Calls => n.calls,
        }
    }

    /// The metric a view uses when none is asked for: the run's `metric=`, else calls for exact
    /// profiles, else samples.
    pub fn default_metric(&self) -> Metric {
        self.meta.default_metric.unwrap_or(if self.meta.mode == "exact" { Metric::Calls } else { Metric::Samples })
    }

    /// Inclusive values for every node under `metric` (children's totals plus the node's own), indexed
    /// like [`Profile::nodes`].
    pub fn totals(&self, metric: Metric) -> Vec<u64> {
        let [totals] = self.totals_of([metric]);
        totals
    }

    /// [`Profile::totals`] of samples, weight and calls, in one walk of the tree.
    pub fn all_totals(&self) -> [Vec<u64>; 3] {
        self.all_totals_given(&self.parents())
    }

    /// [`Profile::all_totals`] for a caller that already has [`Profile::parents`].
    pub fn all_totals_given(&self, parents: &[u32]) -> [Vec<u64>; 3] {
        self.totals_given([Metric::Samples, Metric::Weight, Metric::Calls], parents)
    }

    /// [`Profile::totals`] of each of `metrics`, in one walk of the tree.
    fn totals_of<const N: usize>(&self, metrics: [Metric; N]) -> [Vec<u64>; N] {
        self.totals_given(metrics, &self.parents())
    }

    fn totals_given<const N: usize>(&self, metrics: [Metric; N], parents: &[u32]) -> [Vec<u64>; N] {
        let mut totals = metrics.map(|m| (0..self.nodes.len() as u32).map(|i| self.value(i, m)).collect::<Vec<u64>>());
        // The agent numbers every child after its parent: then a backward sweep over the parents does it,
        // without a post-order walk of the child lists.
        if parents.iter().enumerate().skip(1).all(|(i, &p)| (p as usize) < i) {
            for t in &mut totals {
                add_into_parents(t, |i| parents[i] as usize);
            }
            return totals;
        }
        for i in self.post_order() {
            for t in &mut totals {
                let sum = self.nodes[i as usize].children.iter().fold(0u64, |s, &c| s.saturating_add(t[c as usize]));
                t[i as usize] = t[i as usize].saturating_add(sum);
            }
        }
        totals
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
        };
        out.nodes.push(Node { frame: self.nodes[0].frame, callsite: -1, ..Node::default() });
        // (source node, destination node) pairs still to copy.
        let mut work = vec![(0u32, 0u32)];
        while let Some((src, dst)) = work.pop() {
            let s = &self.nodes[src as usize];
            {
                let d = &mut out.nodes[dst as usize];
                d.samples += s.samples;
                d.weight += s.weight;
                d.calls += s.calls;
                merge_blocks(&mut d.blocks, &s.blocks);
            }
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
mod tests {
    use super::*;

    #[test]
    fn descriptors_read_as_java() {
        assert_eq!(descriptor_to_java("(I[Ljava/lang/String;)V"), "(int,java.lang.String[])void");
        assert_eq!(descriptor_to_java("()[[J"), "()long[][]");
        assert_eq!(
            descriptor_to_java("(Ljava/lang/Object;DZ)Ljava/util/Map$Entry;"),
            "(java.lang.Object,double,boolean)java.util.Map$Entry"
        );
        assert_eq!(descriptor_to_java("(Lbroken"), "(Lbroken");
        assert_eq!(descriptor_to_java(""), "");
    }

    #[test]
    fn overloads_have_distinct_names() {
        let a = Frame::java("java.lang.String", "indexOf", "(I)I");
        let b = Frame::java("java.lang.String", "indexOf", "(II)I");
        assert_eq!(a.display_name(), "java.lang.String.indexOf(int)int");
        assert_ne!(a.display_name(), b.display_name());
        assert_eq!(Frame::pseudo("[GC_active]").display_name(), "[GC_active]");
        assert_eq!(Frame::thread("main").display_name(), "[thread main]");
        assert_eq!(Frame::thread("a;b").display_name(), "[thread a_b]");
    }

    fn sample_profile() -> Profile {
        let mut p = Profile::new(Meta::default());
        let f = p.intern(Frame::java("A", "f", "()V"));
        let g = p.intern(Frame::java("A", "g", "()V"));
        let n1 = p.add_child(0, f, -1);
        let n2 = p.add_child(n1, g, 3);
        let n3 = p.add_child(n1, g, 7);
        p.nodes[n1 as usize].samples = 1;
        p.nodes[n2 as usize].samples = 2;
        p.nodes[n3 as usize].samples = 4;
        p
    }

    #[test]
    fn totals_are_inclusive() {
        let p = sample_profile();
        assert_eq!(p.totals(Metric::Samples), vec![7, 7, 2, 4]);
    }

    #[test]
    fn merging_by_frame_joins_callsites() {
        let m = sample_profile().merged_by_frame();
        assert_eq!(m.nodes.len(), 3);
        assert_eq!(m.totals(Metric::Samples)[0], 7);
        let g = m.nodes[1].children[0];
        assert_eq!(m.nodes[g as usize].samples, 6);
    }

    #[test]
    fn totals_hold_when_children_come_before_their_parents() {
        // Node 2 is the root's child and node 1 is node 2's: not in index order, as a JSON reader may give.
        let mut p = Profile::new(Meta::default());
        let f = p.intern(Frame::java("A", "f", "()V"));
        p.nodes.push(Node { frame: f, samples: 3, ..Node::default() });
        p.nodes.push(Node { frame: f, samples: 2, children: vec![1], ..Node::default() });
        p.nodes[0].children.push(2);
        assert_eq!(p.post_order(), vec![1, 2, 0]);
        assert_eq!(p.totals(Metric::Samples), vec![5, 3, 5]);
        p.nodes[0].children = vec![1];
        p.nodes[1].children = vec![2];
        p.nodes[2].children.clear();
        assert_eq!(p.post_order(), vec![2, 1, 0]);
        assert_eq!(p.totals(Metric::Samples), vec![5, 5, 2]);
    }

    #[test]
    fn post_order_handles_deep_trees() {
        let mut p = Profile::new(Meta::default());
        let f = p.intern(Frame::java("A", "r", "()V"));
        let mut n = 0;
        for _ in 0..200_000 {
            n = p.add_child(n, f, 1);
        }
        p.nodes[n as usize].samples = 1;
        assert_eq!(p.totals(Metric::Samples)[0], 1);
        assert_eq!(p.post_order().len(), 200_001);
    }
}
