//! The calling context tree: one tree for all threads and all engines.
//!
//! A node is keyed by (parent, frame id, callsite bci). Its counters are kept apart, one column per
//! [`Metric`] (CPU samples and time, wall time, allocated bytes, lock waits, bytecodes, calls...): a column
//! is made when the first engine that fills it starts, so a run pays memory only for the metrics of its
//! engines, and every engine of a run counts into the same nodes. Everything lives in arenas allocated
//! before use ([`arena`]), so inserting and counting never allocate, never lock and never call into the
//! JVM: they are safe inside a signal handler.
//!
//! Lookup is one open-addressing hash table over all nodes (slots hold node indices, published with a
//! CAS); each node also heads a CAS-pushed list of its children, which only the (rare) snapshot walks.
//! An insert that loses a race for a slot to the same key keeps the winner and wastes its own node (counted);
//! it never waits for another thread, so a signal that interrupts an insert on the same thread cannot
//! deadlock. When the arena is full, lookups of new keys fail and callers count the sample on the
//! overflow node ([`Cct::overflow`]).

mod arena;

use crate::frame::{FrameId, Pseudo};
use arena::Arena;
pub use kprof_profile::Metric;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A node index. 0 is "none".
pub type NodeId = u32;

/// The root node.
pub const ROOT: NodeId = 1;

#[repr(C)]
struct Node {
    frame: AtomicU64,
    parent: AtomicU32,
    callsite: AtomicI32,
    first_child: AtomicU32,
    next_sibling: AtomicU32,
}

/// Hash table slots per node: a load factor of at most one half keeps probe sequences short.
const SLOTS_PER_NODE: usize = 2;

/// Nodes one thread has taken from the arena for its next insertions ([`Cct::child_reserved`]); hand it
/// back with [`Cct::release`].
#[derive(Debug, Default)]
pub struct NodeReserve {
    next: NodeId,
    end: NodeId,
}

impl NodeReserve {
    /// Nodes taken at a time: 3 KiB of nodes, a few per merged table of a thread's tree.
    const RUN: u32 = 64;
    /// Nodes whose memory is committed at a time, ahead of their use (768 KiB).
    const POPULATE_AHEAD: usize = 1 << 14;
}

/// The tree. Shared by reference between threads (it is `Sync`).
pub struct Cct {
    nodes: Arena<Node>,
    table: Arena<AtomicU32>,
    /// A column of counters per metric, indexed by node; made by [`Cct::enable`].
    columns: [OnceLock<Arena<AtomicU64>>; Metric::COUNT],
    mask: usize,
    /// Next free node index.
    next: AtomicU32,
    overflow: NodeId,
    overflow_samples: AtomicU64,
    wasted: AtomicU64,
    /// [`Cct::populate_table`] has run.
    table_populated: AtomicBool,
}

/// One node as [`Cct::snapshot`] returns it; `parent` indexes the snapshot (the root is its own parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapNode {
    /// The node in the tree (what per-node side tables, such as exact mode's block counts, are keyed by).
    pub node: NodeId,
    pub frame: FrameId,
    pub callsite: i32,
    pub parent: u32,
}

/// A copy of the tree: its nodes, parents before children, and the counters of the metrics asked for, a
/// column each indexed like `nodes`.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<SnapNode>,
    pub metrics: Vec<Metric>,
    pub columns: Vec<Vec<u64>>,
}

impl Snapshot {
    /// The column of `metric` (zeros when it was not asked for).
    pub fn column(&self, metric: Metric) -> Option<&[u64]> {
        self.metrics.iter().position(|&m| m == metric).map(|k| self.columns[k].as_slice())
    }
}

/// Occupancy figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CctStats {
    pub nodes: u32,
    pub capacity: u32,
    pub bytes: usize,
    pub overflow_samples: u64,
    pub wasted_nodes: u64,
}

impl Cct {
    /// Bytes of arena each node costs: the node, its share of the hash table and two counters (a run's first
    /// engine's pair; each further metric takes 8 bytes a node more, committed only as nodes are used).
    pub const BYTES_PER_NODE: usize =
        std::mem::size_of::<Node>() + SLOTS_PER_NODE * std::mem::size_of::<AtomicU32>() + 2 * 8;

    /// A tree that uses at most about `bytes` of memory. Pages are committed lazily by the kernel, so a
    /// large, mostly unused arena costs little. Returns `None` when the memory cannot be reserved.
    pub fn with_bytes(bytes: usize) -> Option<Cct> {
        let capacity = (bytes / Self::BYTES_PER_NODE).clamp(16, (u32::MAX / 4) as usize);
        let slots = (capacity * SLOTS_PER_NODE).next_power_of_two();
        let cct = Cct {
            nodes: Arena::zeroed(capacity + 1)?,
            table: Arena::zeroed(slots)?,
            columns: Default::default(),
            mask: slots - 1,
            next: AtomicU32::new(ROOT + 1),
            overflow: 0,
            overflow_samples: AtomicU64::new(0),
            wasted: AtomicU64::new(0),
            table_populated: AtomicBool::new(false),
        };
        let root = &cct.nodes[ROOT as usize];
        root.frame.store(FrameId::pseudo(Pseudo::Root).0, Ordering::Relaxed);
        root.callsite.store(-1, Ordering::Relaxed);
        let overflow = cct.child(ROOT, FrameId::pseudo(Pseudo::Overflow), -1).expect("room for the overflow node");
        Some(Cct { overflow, ..cct })
    }

    /// Commits the whole hash table's memory now, for threads about to insert millions of nodes (exact
    /// mode's merge of a large tree): faults at random places of the table, from several threads at once,
    /// cost several times more than committing it in one go (64 ms for 256 MiB, against 0.6 s of faults
    /// on two threads merging clojure's tree).
    /// Once per tree: the pages stay committed, and walking them again costs a system call over all of them.
    pub fn populate_table(&self) {
        if !self.table_populated.swap(true, Ordering::Relaxed) {
            self.table.populate(0..self.table.len());
        }
    }

    /// Makes the counter column of `metric` if there is none: before an engine that counts it starts (the
    /// column is allocated here, never on a counting path). Err when the memory cannot be had.
    pub fn enable(&self, metric: Metric) -> Result<(), String> {
        let column = &self.columns[metric.index()];
        if column.get().is_none() {
            let arena = Arena::zeroed(self.nodes.len())
                .ok_or_else(|| format!("no memory for the tree's '{}' counters", metric.name()))?;
            let _ = column.set(arena);
        }
        Ok(())
    }

    /// Whether `metric` has its column.
    pub fn enabled(&self, metric: Metric) -> bool {
        self.columns[metric.index()].get().is_some()
    }

    /// The node that collects samples which found no room.
    pub fn overflow(&self) -> NodeId {
        self.overflow
    }

    fn capacity(&self) -> u32 {
        (self.nodes.len() - 1) as u32
    }

    fn hash(parent: NodeId, frame: FrameId, callsite: i32) -> u64 {
        // A multiply-xorshift mix of the three key parts; cheap and good enough for open addressing.
        let mut h = frame.0 ^ ((parent as u64) << 32) ^ (callsite as u32 as u64).rotate_left(17);
        h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^ (h >> 32)
    }

    fn matches(&self, idx: NodeId, parent: NodeId, frame: FrameId, callsite: i32) -> bool {
        let n = &self.nodes[idx as usize];
        n.frame.load(Ordering::Relaxed) == frame.0
            && n.parent.load(Ordering::Relaxed) == parent
            && n.callsite.load(Ordering::Relaxed) == callsite
    }

    fn alloc(&self) -> Option<NodeId> {
        self.alloc_run(1).map(|(first, _)| first)
    }

    /// Up to `n` consecutive free nodes: (first, one past the last). `None` when the arena is full.
    fn alloc_run(&self, n: u32) -> Option<(NodeId, NodeId)> {
        let end = self.capacity() + 1;
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            if cur >= end {
                return None;
            }
            let last = cur.saturating_add(n).min(end);
            match self.next.compare_exchange_weak(cur, last, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some((cur, last)),
                Err(actual) => cur = actual,
            }
        }
    }

    /// The child of `parent` for (`frame`, `callsite`), inserted if missing. `None` when the arena is full.
    /// Lock-free and allocation-free: safe in a signal handler.
    pub fn child(&self, parent: NodeId, frame: FrameId, callsite: i32) -> Option<NodeId> {
        self.child_from(parent, frame, callsite, || self.alloc())
    }

    /// [`Cct::child`] for a thread that inserts many nodes while others do too (exact mode's merge workers):
    /// new nodes come from `reserve`, refilled a run at a time, so that the threads do not contend for the
    /// next free node at every insertion, nor write nodes that share a cache line with another's.
    pub fn child_reserved(
        &self,
        parent: NodeId,
        frame: FrameId,
        callsite: i32,
        reserve: &mut NodeReserve,
    ) -> Option<NodeId> {
        self.child_from(parent, frame, callsite, || {
            if reserve.next == reserve.end {
                (reserve.next, reserve.end) = self.alloc_run(NodeReserve::RUN)?;
                // The thread whose run starts a block of nodes commits the next block's memory: nodes
                // are taken in order, so those pages are about to be written, and taking them in one
                // call is cheaper than a fault per page (more so with threads faulting alongside).
                let block = reserve.next as usize / NodeReserve::POPULATE_AHEAD;
                if block != (reserve.end as usize - 1) / NodeReserve::POPULATE_AHEAD
                    || reserve.next as usize % NodeReserve::POPULATE_AHEAD == 0
                {
                    let ahead = (block + 1) * NodeReserve::POPULATE_AHEAD;
                    self.nodes.populate(ahead..ahead + NodeReserve::POPULATE_AHEAD);
                }
            }
            reserve.next += 1;
            Some(reserve.next - 1)
        })
    }

    /// Gives up what is left of `reserve`: counted as wasted (never linked into the tree).
    pub fn release(&self, reserve: NodeReserve) {
        self.wasted.fetch_add((reserve.end - reserve.next) as u64, Ordering::Relaxed);
    }

    fn child_from(
        &self,
        parent: NodeId,
        frame: FrameId,
        callsite: i32,
        mut alloc: impl FnMut() -> Option<NodeId>,
    ) -> Option<NodeId> {
        let mut slot = Self::hash(parent, frame, callsite) as usize & self.mask;
        let mut fresh: NodeId = 0;
        for _ in 0..=self.mask {
            let mut idx = self.table[slot].load(Ordering::Acquire);
            if idx == 0 {
                if fresh == 0 {
                    fresh = alloc()?;
                    let n = &self.nodes[fresh as usize];
                    n.frame.store(frame.0, Ordering::Relaxed);
                    n.parent.store(parent, Ordering::Relaxed);
                    n.callsite.store(callsite, Ordering::Relaxed);
                }
                // Release: the key fields above are visible to whoever reads the slot with Acquire.
                match self.table[slot].compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.link(parent, fresh);
                        return Some(fresh);
                    }
                    Err(winner) => idx = winner,
                }
            }
            if self.matches(idx, parent, frame, callsite) {
                if fresh != 0 {
                    self.wasted.fetch_add(1, Ordering::Relaxed);
                }
                return Some(idx);
            }
            slot = (slot + 1) & self.mask;
        }
        None
    }

    /// Pushes `child` on the front of `parent`'s child list.
    fn link(&self, parent: NodeId, child: NodeId) {
        let p = &self.nodes[parent as usize];
        let c = &self.nodes[child as usize];
        let mut head = p.first_child.load(Ordering::Acquire);
        loop {
            c.next_sibling.store(head, Ordering::Relaxed);
            match p.first_child.compare_exchange_weak(head, child, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Starts loading the hash-table slot where [`Cct::child`] of the same key begins to look, without
    /// waiting for it. A caller about to insert many nodes (exact mode's merge, thousands per table of a
    /// thread's tree) issues these first, so that the slots' cache and TLB misses, each at a random place
    /// of a table of hundreds of megabytes, overlap instead of coming one after the other.
    pub fn prefetch_child(&self, parent: NodeId, frame: FrameId, callsite: i32) {
        let slot = Self::hash(parent, frame, callsite) as usize & self.mask;
        self.table.prefetch(slot);
    }

    /// Walks (or extends) the path below `start`, one (frame, callsite) pair at a time, root side first.
    /// Returns the last node, or the overflow node (with `false`) when the arena ran out on the way.
    pub fn path<I: IntoIterator<Item = (FrameId, i32)>>(&self, start: NodeId, frames: I) -> (NodeId, bool) {
        let mut node = start;
        for (frame, callsite) in frames {
            match self.child(node, frame, callsite) {
                Some(n) => node = n,
                None => return (self.overflow, false),
            }
        }
        (node, true)
    }

    /// Adds `v` to `node`'s counter of `metric`; nothing when the metric has no column (its engine never
    /// started). Lock-free and allocation-free: safe in a signal handler.
    #[inline]
    pub fn add(&self, node: NodeId, metric: Metric, v: u64) {
        if let Some(column) = self.columns[metric.index()].get() {
            column[node as usize].fetch_add(v, Ordering::Relaxed);
        }
    }

    /// Adds `events` events (samples, allocations, waits) of total `weight` to `node`: `count` and `weighed`
    /// are the engine's two metrics. Events on the overflow node are also counted as overflow.
    #[inline]
    pub fn add_events(&self, node: NodeId, count: Metric, events: u64, weighed: Metric, weight: u64) {
        self.add(node, count, events);
        self.add(node, weighed, weight);
        if node == self.overflow {
            self.overflow_samples.fetch_add(events, Ordering::Relaxed);
        }
    }

    /// The frame and callsite of a node.
    pub fn key(&self, node: NodeId) -> (FrameId, i32) {
        let n = &self.nodes[node as usize];
        (FrameId(n.frame.load(Ordering::Relaxed)), n.callsite.load(Ordering::Relaxed))
    }

    /// A consistent-enough copy of the tree for writing out while threads keep inserting: every node
    /// reachable from the root, parents before children, with the counters of `metrics` (each read once).
    pub fn snapshot(&self, metrics: &[Metric]) -> Snapshot {
        let mut nodes = Vec::with_capacity(self.next.load(Ordering::Relaxed) as usize);
        let read = |idx: NodeId, parent: u32| {
            let n = &self.nodes[idx as usize];
            SnapNode {
                node: idx,
                frame: FrameId(n.frame.load(Ordering::Relaxed)),
                callsite: n.callsite.load(Ordering::Relaxed),
                parent,
            }
        };
        nodes.push(read(ROOT, 0));
        // (node, its index in `nodes`) pairs whose children are still to copy.
        let mut work = vec![(ROOT, 0u32)];
        while let Some((idx, at)) = work.pop() {
            let mut c = self.nodes[idx as usize].first_child.load(Ordering::Acquire);
            while c != 0 {
                nodes.push(read(c, at));
                work.push((c, (nodes.len() - 1) as u32));
                c = self.nodes[c as usize].next_sibling.load(Ordering::Relaxed);
            }
        }
        let columns = metrics
            .iter()
            .map(|m| match self.columns[m.index()].get() {
                Some(column) => nodes.iter().map(|n| column[n.node as usize].load(Ordering::Relaxed)).collect(),
                None => vec![0; nodes.len()],
            })
            .collect();
        Snapshot { nodes, metrics: metrics.to_vec(), columns }
    }

    /// For the VM's exit, after the last snapshot: gives the tree's memory back to the kernel, so that
    /// writing the profile reuses it. On a virtual machine, memory the guest has not touched lately costs
    /// the host a fault of its own at first touch: writing 774 MB to a file took 0.5–0.6 s on such memory
    /// and 0.17 s on memory freed just before (docs/benchmarks-log.md). Every node and
    /// slot reads as zero afterwards (an empty tree with no root frame), which is memory-safe for a
    /// straggling insert but is no profile any more.
    pub fn discard(&self) {
        self.table_populated.store(false, Ordering::Relaxed);
        self.nodes.discard();
        self.table.discard();
        for column in self.columns.iter().filter_map(OnceLock::get) {
            column.discard();
        }
    }

    /// Sets every counter to zero (a new profiling session over the same tree). Samples that race with
    /// the reset land on either side of it.
    pub fn reset_counters(&self) {
        let used = self.next.load(Ordering::Acquire).min(self.capacity() + 1);
        for column in self.columns.iter().filter_map(OnceLock::get) {
            for i in 1..used as usize {
                column[i].store(0, Ordering::Relaxed);
            }
        }
        self.overflow_samples.store(0, Ordering::Relaxed);
    }

    /// Sets every counter of `metric` to zero, the other columns untouched: for an engine that recounts
    /// its metric from what it keeps elsewhere (the allocation engine's live objects). Counts added while
    /// it runs land on either side of it.
    pub fn reset_metric(&self, metric: Metric) {
        let Some(column) = self.columns[metric.index()].get() else { return };
        let used = self.next.load(Ordering::Acquire).min(self.capacity() + 1);
        for i in 1..used as usize {
            column[i].store(0, Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> CctStats {
        CctStats {
            nodes: self.next.load(Ordering::Relaxed).min(self.capacity() + 1) - 1,
            capacity: self.capacity(),
            bytes: self.nodes.bytes()
                + self.table.bytes()
                + self.columns.iter().filter_map(OnceLock::get).map(|c| c.bytes()).sum::<usize>(),
            overflow_samples: self.overflow_samples.load(Ordering::Relaxed),
            wasted_nodes: self.wasted.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
