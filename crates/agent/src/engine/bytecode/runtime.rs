//! mode=bytecode's runtime side. `kprof.runtime.Bc` counts bytecodes per thread and, every `gran + r` of
//! them, copies the thread's reified stack into the thread's ring: native memory the agent allocates per
//! thread ([`Rings`]), written by rewritten code without a call. A drain thread reads the rings and adds
//! each record to the CCT, resuming from where the thread's previous record left the tree (the path cache
//! of the Komorium paper, section 6.2): the application thread never waits for the tree.
//!
//! Ring protocol (one writer, the application thread; one reader, the agent): the thread writes a record's
//! words, then the `published` offset; the agent reads records up to `published` and then writes
//! `consumed`; the thread writes a record only where it overwrites nothing unconsumed. A thread that finds
//! its ring full drains it itself (`Bc.drainOwn`), so a loaded machine costs time, not samples; a sample
//! that still does not fit is dropped and counted. See `T.java` for the layout.

use crate::cct::{Cct, Metric, NodeId, ROOT};
use crate::engine::rewriting::{runtime_class, thread_root, RewritingEngine};
use crate::frame::{FrameId, Pseudo};
use crate::jvmti::bindings::*;
use crate::jvmti::Jni;
use kprof_classfile::transform::bytecode::SITE_BIT;
use kprof_classfile::transform::methods::MethodTable;
use kprof_protocol::options::{EngineKind, Options};
use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Counters of bytecode mode's sampling.
#[derive(Default)]
pub struct BytecodeStats {
    pub samples: AtomicU64,
    /// Sum of sample weights: bytecodes counted up to each thread's last sample.
    pub sampled_bytecodes: AtomicU64,
    /// Samples that found the CCT full.
    pub overflow: AtomicU64,
    /// Samples a thread dropped because its ring was full even after draining it itself.
    pub dropped: AtomicU64,
    /// The bytecodes those samples stood for (still part of the estimated total).
    pub dropped_bytecodes: AtomicU64,
    /// Threads that got a state (a block and a ring).
    pub threads: AtomicU64,
    /// Samples deeper than the reified stack holds (recorded under `[truncated]`).
    pub truncated: AtomicU64,
    /// Times a thread found its ring full and drained it itself.
    pub self_drains: AtomicU64,
}

impl BytecodeStats {
    fn reset(&self) {
        for c in [
            &self.samples,
            &self.sampled_bytecodes,
            &self.overflow,
            &self.dropped,
            &self.dropped_bytecodes,
            &self.threads,
            &self.truncated,
            &self.self_drains,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Offsets in a block (see `T.java`).
const PUBLISHED: usize = 0;
const DROPPED: usize = 4;
const DROPPED_WEIGHT: usize = 8;
const CONSUMED: usize = 64;
const STACK: usize = 128;
/// Words of a record's head: k, n, depth, leaf, weight (low, high).
const HEAD_BYTES: u32 = 24;

/// One thread's block, as the drain sees it.
struct Block {
    hdr: *mut u8,
    layout: Layout,
    ring: *const u8,
    mask: u32,
    entries: u32,
    root: NodeId,
    /// The CCT node of each entry of the last record's path, and the entries (the drain's half of the
    /// path cache).
    path: Vec<NodeId>,
    last: Vec<u32>,
    /// The block's dropped count and dropped weight when last read.
    dropped_seen: u32,
    dropped_weight_seen: u64,
}

// SAFETY: a block's memory is owned by the agent from `block()` to `release()`; the drain touches it only
// under the registry's lock, and its application thread only through the ring protocol.
unsafe impl Send for Block {}

impl Block {
    fn word(&self, offset: u32) -> u32 {
        // SAFETY: `ring` points to `mask + 1` bytes and the offset is masked to a 4-byte-aligned position
        // inside them; the writer published these words before the offset we read them under.
        unsafe { std::ptr::read_volatile(self.ring.add((offset & self.mask) as usize) as *const u32) }
    }

    fn header(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: the header is 128 bytes at the start of the block, 64-byte aligned; the thread writes
        // these words with plain stores, which an atomic load may read.
        unsafe { &*(self.hdr.add(offset) as *const AtomicU32) }
    }

    fn header64(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= STACK);
        // SAFETY: as `header`; the offset is 8-byte aligned inside the header, and the thread writes the
        // long with one plain 8-byte store (atomic on x86-64 and AArch64 when aligned).
        unsafe { &*(self.hdr.add(offset) as *const AtomicU64) }
    }
}

/// The blocks of all threads, and the drain.
pub struct Rings {
    blocks: Mutex<Vec<Block>>,
    wake: Condvar,
    drain_started: AtomicBool,
    /// Call sites by id, copied from the method table as the drain meets new ones.
    sites: Mutex<Vec<(u32, u32)>>,
}

impl Default for Rings {
    fn default() -> Self {
        Rings {
            blocks: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            drain_started: AtomicBool::new(false),
            sites: Mutex::new(Vec::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Rings {
    /// A zeroed block for a thread with `entries` stack entries and a ring of `ring_bytes` (a power of
    /// two), registered for draining. Null if memory is short.
    fn allocate(&self, entries: u32, ring_bytes: u32, root: NodeId) -> *mut u8 {
        if !ring_bytes.is_power_of_two() || ring_bytes < 64 {
            return std::ptr::null_mut();
        }
        let size = STACK + 8 * entries as usize + ring_bytes as usize;
        let Ok(layout) = Layout::from_size_align(size, 64) else { return std::ptr::null_mut() };
        // SAFETY: the layout has a non-zero size.
        let hdr = unsafe { std::alloc::alloc_zeroed(layout) };
        if hdr.is_null() {
            return hdr;
        }
        // SAFETY: the ring starts inside the allocation.
        let ring = unsafe { hdr.add(STACK + 8 * entries as usize) };
        let root = if root > 0 { root } else { ROOT };
        lock(&self.blocks).push(Block {
            hdr,
            layout,
            ring,
            mask: ring_bytes - 1,
            entries,
            root,
            path: Vec::new(),
            last: Vec::new(),
            dropped_seen: 0,
            dropped_weight_seen: 0,
        });
        hdr
    }

    /// Drains and frees the block at `hdr` (its thread has ended and writes it no more).
    fn release(&self, hdr: *mut u8, engine: &RewritingEngine) {
        let mut blocks = lock(&self.blocks);
        if let Some(i) = blocks.iter().position(|b| b.hdr == hdr) {
            let mut b = blocks.swap_remove(i);
            self.drain_block(&mut b, engine);
            // SAFETY: allocated in `allocate` with this layout; its thread is done with it and it is no
            // longer registered, so nothing reads or writes it after this.
            unsafe { std::alloc::dealloc(b.hdr, b.layout) };
        }
    }

    /// Adds the published records of the block at `hdr` to the CCT, on its own thread, which found its ring
    /// full: the drain fell behind (a loaded machine). The thread waits at most for the drain's current pass;
    /// in return no sample is dropped, so the profile does not depend on how busy the machine is.
    fn drain_own(&self, hdr: *mut u8, engine: &RewritingEngine) {
        let mut blocks = lock(&self.blocks);
        if let Some(b) = blocks.iter_mut().find(|b| b.hdr == hdr) {
            self.drain_block(b, engine);
            engine.bytecode.self_drains.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds every published record of every block to the CCT.
    pub fn drain_all(&self, engine: &RewritingEngine) -> usize {
        let mut blocks = lock(&self.blocks);
        let mut records = 0;
        for b in blocks.iter_mut() {
            records += self.drain_block(b, engine);
        }
        records
    }

    /// Forgets every block's path (the CCT was reset: the nodes it names hold old counts).
    pub fn forget_paths(&self) {
        for b in lock(&self.blocks).iter_mut() {
            b.path.clear();
            b.last.clear();
        }
    }

    /// Starts the drain thread (once).
    pub fn start_drain(&'static self, engine: &'static RewritingEngine) {
        if self.drain_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let spawned = std::thread::Builder::new().name("kprof-drain".into()).spawn(move || {
            let mut wait = Duration::from_millis(1);
            loop {
                let records = self.drain_all(engine);
                // Busy rings: come back soon; idle ones: up to 20 ms.
                wait =
                    if records > 256 { Duration::from_micros(500) } else { (wait * 2).min(Duration::from_millis(20)) };
                let blocks = lock(&self.blocks);
                drop(self.wake.wait_timeout(blocks, wait));
            }
        });
        if spawned.is_err() {
            self.drain_started.store(false, Ordering::Release);
        }
    }

    /// The method and bci of call site `id`.
    fn site(&self, id: u32, methods: &MethodTable) -> Option<(u32, u32)> {
        let mut sites = lock(&self.sites);
        if id as usize >= sites.len() {
            let mut i = sites.len() as u32;
            while let Some(s) = methods.site_of(i) {
                sites.push(s);
                i += 1;
            }
        }
        sites.get(id as usize).copied()
    }

    /// The method an entry names, and the call site it is at (-1: none).
    fn decode(&self, entry: u32, methods: &MethodTable) -> (u32, i32) {
        if entry & SITE_BIT == 0 {
            return (entry, -1);
        }
        match self.site(entry & !SITE_BIT, methods) {
            Some((method, bci)) => (method, bci as i32),
            None => (u32::MAX, -1),
        }
    }

    /// Adds the block's published records to the CCT; returns how many.
    fn drain_block(&self, b: &mut Block, engine: &RewritingEngine) -> usize {
        let cct = engine.cct();
        let stats = &engine.bytecode;
        let callsites = engine.callsites();
        let methods = &engine.methods;
        let published = b.header(PUBLISHED).load(Ordering::Acquire);
        let mut pos = b.header(CONSUMED).load(Ordering::Relaxed);
        let size = b.mask.wrapping_add(1);
        let mut records = 0;
        let mut entries: Vec<u32> = Vec::new();
        while pos != published {
            let avail = published.wrapping_sub(pos);
            let (k, n, depth, leaf) = (b.word(pos), b.word(pos + 4), b.word(pos + 8), b.word(pos + 12));
            let weight = b.word(pos + 16) as u64 | (b.word(pos + 20) as u64) << 32;
            let bytes = HEAD_BYTES.wrapping_add(n.wrapping_sub(k).wrapping_mul(4));
            if avail > size || avail < HEAD_BYTES || k > n || n > b.entries || bytes > avail {
                // Not a record: skip what is published and start the next record's path from the root.
                b.path.clear();
                b.last.clear();
                pos = published;
                break;
            }
            entries.clear();
            entries.extend((k..n).map(|i| b.word(pos + HEAD_BYTES + 4 * (i - k))));
            self.add_record(b, cct, methods, callsites, k, &entries, depth, leaf, weight, stats);
            pos = pos.wrapping_add(bytes);
            records += 1;
        }
        b.header(CONSUMED).store(pos, Ordering::Release);
        let dropped = b.header(DROPPED).load(Ordering::Relaxed);
        stats.dropped.fetch_add(dropped.wrapping_sub(b.dropped_seen) as u64, Ordering::Relaxed);
        b.dropped_seen = dropped;
        let dropped_weight = b.header64(DROPPED_WEIGHT).load(Ordering::Relaxed);
        stats.dropped_bytecodes.fetch_add(dropped_weight.wrapping_sub(b.dropped_weight_seen), Ordering::Relaxed);
        b.dropped_weight_seen = dropped_weight;
        records
    }

    /// One sample: entries `k..` of the path (those below `k` are the previous record's), its true depth,
    /// the sampled method and the bytecodes it stands for.
    #[allow(clippy::too_many_arguments)]
    fn add_record(
        &self,
        b: &mut Block,
        cct: &Cct,
        methods: &MethodTable,
        callsites: bool,
        k: u32,
        entries: &[u32],
        depth: u32,
        leaf: u32,
        weight: u64,
        stats: &BytecodeStats,
    ) {
        let k = k as usize;
        let overflow = cct.overflow();
        // The thread's records follow each other, so the previous record's path is known up to k. It is not
        // after the tree was reset while records were on their way: the missing entries are then unknown.
        while b.path.len() < k {
            let parent = b.path.last().copied().unwrap_or(b.root);
            let node = if parent == overflow {
                overflow
            } else {
                cct.child(parent, FrameId::pseudo(Pseudo::UnknownMethod), -1).unwrap_or(overflow)
            };
            b.path.push(node);
            b.last.push(0);
        }
        b.path.truncate(k);
        b.last.truncate(k);
        let mut node = b.path.last().copied().unwrap_or(b.root);
        // The call site the last entry is at: where its callee's node hangs.
        let mut site = match b.last.last() {
            Some(&e) if callsites => self.decode(e, methods).1,
            _ => -1,
        };
        for &e in entries {
            let (method, bci) = self.decode(e, methods);
            node = if node == overflow {
                overflow
            } else {
                cct.child(node, FrameId::method(method), site).unwrap_or(overflow)
            };
            b.path.push(node);
            b.last.push(e);
            site = if callsites { bci } else { -1 };
        }
        if depth as usize > b.path.len() && node != overflow {
            stats.truncated.fetch_add(1, Ordering::Relaxed);
            node = cct.child(node, FrameId::pseudo(Pseudo::Truncated), -1).unwrap_or(overflow);
            site = -1;
        }
        if node != overflow {
            let (method, _) = self.decode(leaf, methods);
            node = cct.child(node, FrameId::method(method), site).unwrap_or(overflow);
        }
        cct.add_events(node, Metric::BytecodeSamples, 1, Metric::Bytecodes, weight);
        stats.samples.fetch_add(1, Ordering::Relaxed);
        stats.sampled_bytecodes.fetch_add(weight, Ordering::Relaxed);
        if node == overflow {
            stats.overflow.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Global references into `kprof.runtime.Bc`.
pub(crate) struct BcRuntime {
    pub(crate) class: jclass,
    init: jmethodID,
    started: jmethodID,
    adopt: jmethodID,
    finish: jmethodID,
    residual: jmethodID,
    disable: jmethodID,
}

impl BcRuntime {
    pub(crate) fn load(jni: Jni) -> Result<BcRuntime, String> {
        let class = runtime_class(
            jni,
            "kprof/runtime/Bc",
            &[
                ("block", "(III)J", block as *mut c_void),
                ("release", "(J)V", release as *mut c_void),
                ("drainOwn", "(J)V", drain_own as *mut c_void),
                ("threadRoot", "(Ljava/lang/String;)I", thread_root as *mut c_void),
                ("walk", "(JI)I", super::walk::walk as *mut c_void),
            ],
        )?;
        let method = |name: &str, sig: &str| {
            jni.static_method_id(class, name, sig).ok_or(format!("kprof.runtime.Bc.{name} not found"))
        };
        Ok(BcRuntime {
            class,
            init: method("init", "(IIZIIZIZ)V")?,
            started: method("started", "()V")?,
            adopt: method("adopt", "(Ljava/lang/Thread;)V")?,
            finish: method("finish", "()V")?,
            residual: method("residual", "()J")?,
            disable: method("disable", "()V")?,
        })
    }

    pub(crate) fn init(&self, jni: Jni, o: &Options, fields: bool) -> Result<(), String> {
        let args = [
            jvalue { i: o.gran as i32 },
            jvalue { i: o.rand as i32 },
            jvalue { z: o.threads as u8 },
            jvalue { i: o.depth as i32 },
            jvalue { i: ring_bytes(o.gran) as i32 },
            jvalue { z: fields as u8 },
            jvalue { i: o.bytecode_maxpath() as i32 },
            jvalue { z: o.stack_walks() as u8 },
        ];
        jni.call_static_void(self.class, self.init, &args).map_err(|_| "kprof.runtime.Bc.init threw".to_string())
    }

    /// On a thread that starts (ThreadStart, VirtualThreadStart).
    pub(crate) fn started(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.started, &[]);
    }

    /// For a thread that was running when the session started.
    pub(crate) fn adopt(&self, jni: Jni, thread: jobject) {
        let _ = jni.call_static_void(self.class, self.adopt, &[jvalue { l: thread }]);
    }

    pub(crate) fn finish(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.finish, &[]);
    }

    pub(crate) fn residual(&self, jni: Jni) -> u64 {
        jni.call_static_long(self.class, self.residual, &[]).unwrap_or(0).max(0) as u64
    }

    pub(crate) fn disable(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.disable, &[]);
    }
}

/// Bytes of each thread's ring at gran=10000 and finer: about 40,000 records of a few entries, some 60 ms
/// of the busiest thread seen (xalan at gran=10000 takes some 700,000 samples a second) before the drain
/// must have read it.
pub const RING_BYTES: u32 = 1 << 20;
/// The smallest ring (coarse granularities).
const MIN_RING_BYTES: u32 = 64 << 10;

/// The ring of a thread at granularity `gran`: [`RING_BYTES`] up to gran=10000, smaller in proportion above
/// (samples are that much rarer), a power of two, at least [`MIN_RING_BYTES`].
pub fn ring_bytes(gran: u32) -> u32 {
    let scaled = (RING_BYTES as u64 * 10_000 / gran.max(1) as u64).min(RING_BYTES as u64) as u32;
    scaled.max(MIN_RING_BYTES).next_power_of_two().min(RING_BYTES)
}

/// Resets the counters for a new session.
pub(crate) fn reset(engine: &RewritingEngine) {
    engine.bytecode.reset();
    engine.rings.forget_paths();
}

/// `Bc.block(int entries, int ringBytes, int root)`: see `Bc.java`.
///
/// # Safety
/// Called by the JVM as a registered native method.
unsafe extern "C" fn block(_env: *mut JNIEnv, _class: jclass, entries: jint, ring_bytes: jint, root: jint) -> jlong {
    crate::guard::guard(0, || {
        let Some(engine) = RewritingEngine::get().filter(|e| e.mode() == EngineKind::Bytecode) else { return 0 };
        if entries <= 0 || ring_bytes <= 0 {
            return 0;
        }
        let hdr = engine.rings.allocate(entries as u32, ring_bytes as u32, root.max(0) as NodeId);
        if !hdr.is_null() {
            engine.bytecode.threads.fetch_add(1, Ordering::Relaxed);
        }
        hdr as jlong
    })
}

/// `Bc.release(long hdr)`: see `Bc.java`.
///
/// # Safety
/// Called by the JVM as a registered native method.
unsafe extern "C" fn release(_env: *mut JNIEnv, _class: jclass, hdr: jlong) {
    crate::guard::guard((), || {
        if let Some(engine) = RewritingEngine::get() {
            engine.rings.release(hdr as *mut u8, engine);
        }
    })
}

/// `Bc.drainOwn(long hdr)`: see `Bc.java`.
///
/// # Safety
/// Called by the JVM as a registered native method.
unsafe extern "C" fn drain_own(_env: *mut JNIEnv, _class: jclass, hdr: jlong) {
    crate::guard::guard((), || {
        if let Some(engine) = RewritingEngine::get() {
            engine.rings.drain_own(hdr as *mut u8, engine);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_shrink_with_coarser_granularity() {
        assert_eq!(ring_bytes(500), RING_BYTES);
        assert_eq!(ring_bytes(10_000), RING_BYTES);
        assert_eq!(ring_bytes(20_000), RING_BYTES / 2);
        assert_eq!(ring_bytes(30_000), RING_BYTES / 2, "rounded up to a power of two");
        assert_eq!(ring_bytes(1_000_000), MIN_RING_BYTES);
        assert_eq!(ring_bytes(u32::MAX), MIN_RING_BYTES);
        assert_eq!(ring_bytes(0), RING_BYTES);
    }
}
