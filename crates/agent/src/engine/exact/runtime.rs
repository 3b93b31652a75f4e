//! mode=exact's runtime side: `kprof.runtime.Exact` counts every call and block in a per-thread calling
//! context tree (native memory the thread allocates, no synchronisation on the fast path); [`merge`] reads a
//! thread's tree and adds it to the agent's one CCT when the thread ends or profiling stops, and every live
//! thread's tree before a profile is written while the program runs (then only what changed since the last
//! merge). Per-node block counts (`bb=on`) live in [`ExactStore`], keyed by CCT node, since the CCT itself
//! keeps three counters per node.

use crate::cct::{Metric, NodeId, NodeReserve, ROOT};
use crate::engine::rewriting::{runtime_class, thread_root, RewritingEngine};
use crate::frame::{FrameId, Pseudo};
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti};
use kprof_classfile::transform::methods::MethodBlocks;
use kprof_classfile::transform::natives::NATIVE_PREFIX;
use kprof_protocol::options::EngineKind;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What exact mode has merged into the CCT: totals and the block counts per node.
#[derive(Default)]
pub struct ExactStore {
    bb: AtomicBool,
    /// Block counts per CCT node (`bb=on`), block 0 included.
    blocks: Mutex<HashMap<NodeId, Vec<u64>>>,
    /// Per live tree merged before (by root table), each entry's counters at that merge.
    merged: Mutex<HashMap<u64, HashMap<u64, Merged>>>,
    pub calls: AtomicU64,
    pub bytecodes: AtomicU64,
    /// Merges of a thread's tree (one per thread end, one per live thread and write).
    pub merges: AtomicU64,
    /// Time spent merging trees into the CCT, in nanoseconds (all merges of the session).
    pub merge_ns: AtomicU64,
    /// Helper threads started by merges of large trees.
    pub merge_helpers: AtomicU64,
    /// Calls that found the CCT full (counted on the overflow node).
    pub overflow_calls: AtomicU64,
    /// Exceptions that native code caught (JNI `ExceptionClear`, `ExceptionDescribe`) while a wrapped native
    /// was the innermost Java frame: each put the current node back to the wrapper's.
    pub native_catches: AtomicU64,
    /// Bytes the threads' trees have mapped now, and at most during the session.
    pub mapped: AtomicU64,
    pub mapped_peak: AtomicU64,
}

impl ExactStore {
    pub(crate) fn reset(&self, bb: bool) {
        self.bb.store(bb, Ordering::Release);
        self.blocks.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.merged.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for c in [
            &self.calls,
            &self.bytecodes,
            &self.merges,
            &self.merge_ns,
            &self.merge_helpers,
            &self.overflow_calls,
            &self.native_catches,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.mapped_peak.store(self.mapped.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The block counts of CCT node `node` (`bb=on`), block 0 first.
    pub fn node_blocks(&self, node: NodeId) -> Option<Vec<u64>> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner()).get(&node).cloned()
    }

    /// Every node's block counts at once (for writing a profile).
    pub fn all_blocks(&self) -> HashMap<NodeId, Vec<u64>> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Global references into `kprof.runtime.Exact`.
pub(crate) struct ExactRuntime {
    class: jclass,
    init: jmethodID,
    thread_ended: jmethodID,
    merge_all: jmethodID,
    disable: jmethodID,
    /// `caught()` of `Exact`, or of `Ef` when java.lang.Thread has kprof's fields (see [`intercept_native_catches`]).
    caught: (jclass, jmethodID),
}

impl ExactRuntime {
    pub(crate) fn load(jni: Jni) -> Result<ExactRuntime, String> {
        let class = runtime_class(
            jni,
            "kprof/runtime/Exact",
            &[
                ("merge", "(JJIZ)V", merge as *mut c_void),
                ("map", "(J)J", map as *mut c_void),
                ("unmap", "(JJ)V", unmap as *mut c_void),
                ("threadRoot", "(Ljava/lang/String;)I", thread_root as *mut c_void),
            ],
        )?;
        let method = |name: &str, sig: &str| {
            jni.static_method_id(class, name, sig).ok_or(format!("kprof.runtime.Exact.{name} not found"))
        };
        let caught = if crate::engine::rewriting::thread_fields::added() {
            let ef = runtime_class(jni, "kprof/runtime/Ef", &[])?;
            (ef, jni.static_method_id(ef, "caught", "()V").ok_or("kprof.runtime.Ef.caught not found")?)
        } else {
            (class, method("caught", "()V")?)
        };
        Ok(ExactRuntime {
            class,
            init: method("init", "(ZZZJ)V")?,
            thread_ended: method("threadEnded", "()V")?,
            merge_all: method("mergeAll", "()V")?,
            disable: method("disable", "()V")?,
            caught,
        })
    }

    /// A new session: the trees may take `budget` bytes over all threads.
    pub(crate) fn init(
        &self,
        jni: Jni,
        threads: bool,
        thread_fields: bool,
        bb: bool,
        budget: u64,
    ) -> Result<(), String> {
        let args = [
            jvalue { z: threads as u8 },
            jvalue { z: thread_fields as u8 },
            jvalue { z: bb as u8 },
            jvalue { j: budget.min(i64::MAX as u64) as i64 },
        ];
        jni.call_static_void(self.class, self.init, &args).map_err(|_| "kprof.runtime.Exact.init threw".to_string())
    }

    pub(crate) fn thread_ended(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.thread_ended, &[]);
    }

    pub(crate) fn merge_all(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.merge_all, &[]);
    }

    pub(crate) fn disable(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.disable, &[]);
    }
}

/// Bytes the threads' trees may take together: as much as the agent's tree (`cct_mb`), no more than a quarter
/// of the machine's memory. (A context takes about three times the bytes there: a compiler's millions of
/// contexts fill the threads' trees first, and what the agent writes stays what a profile of that size
/// takes to write.)
pub(crate) fn tree_budget(cct_mb: u32) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let memory = if pages > 0 && page > 0 { pages as u64 * page as u64 } else { u64::MAX };
    ((cct_mb as u64) << 20).min(memory / 4)
}

/// The JNI functions as they were before kprof replaced two of them: the replacements call these.
struct OriginalJni(JNINativeInterface_);

// SAFETY: a JNI function table is immutable data (function pointers and reserved null pointers), the same
// for every thread.
unsafe impl Send for OriginalJni {}
// SAFETY: see above.
unsafe impl Sync for OriginalJni {}

static ORIGINAL_JNI: OnceLock<OriginalJni> = OnceLock::new();

thread_local! {
    /// The thread is inside [`after_native_catch`] (whose own JNI calls may clear an exception).
    static IN_NATIVE_CATCH: Cell<bool> = const { Cell::new(false) };
}

/// Replaces JNI `ExceptionClear` and `ExceptionDescribe` (the two ways native code catches what Java code it
/// called threw) for every thread, once per process. Exact mode keeps the current node without
/// instrumenting exceptional exits: a rewritten handler re-asserts its own node, but native code that
/// catches a callback's exception is no rewritten handler, and its next callbacks would hang below the
/// frame that threw. The replacements do what the JVM's do, then, when the innermost Java frame is a
/// native method kprof wrapped, hand the current node back to the wrapper's ([`after_native_catch`]).
pub(crate) fn intercept_native_catches(jvmti: Jvmti) -> Result<(), String> {
    let original = jvmti.jni_function_table().map_err(|e| format!("GetJNIFunctionTable: {e}"))?;
    if original.ExceptionClear.is_none() || original.ExceptionDescribe.is_none() {
        return Err("the JNI function table has no ExceptionClear or ExceptionDescribe".into());
    }
    let mut table = original;
    // Once per process: a later session's table already holds the replacements, which must never become
    // the "originals" they call.
    if ORIGINAL_JNI.set(OriginalJni(original)).is_err() {
        return Ok(());
    }
    table.ExceptionClear = Some(exception_clear);
    table.ExceptionDescribe = Some(exception_describe);
    jvmti.set_jni_function_table(&table).map_err(|e| format!("SetJNIFunctionTable: {e}"))
}

/// JNI `ExceptionClear`, as installed by [`intercept_native_catches`].
///
/// # Safety
/// Called through the JNI function table, by native code with the calling thread's JNIEnv.
unsafe extern "C" fn exception_clear(env: *mut JNIEnv) {
    if let Some(clear) = ORIGINAL_JNI.get().and_then(|o| o.0.ExceptionClear) {
        // SAFETY: the JVM's own ExceptionClear, with the caller's arguments.
        unsafe { clear(env) };
    }
    after_native_catch(env);
}

/// JNI `ExceptionDescribe` (prints and clears the pending exception), as installed by
/// [`intercept_native_catches`].
///
/// # Safety
/// Called through the JNI function table, by native code with the calling thread's JNIEnv.
unsafe extern "C" fn exception_describe(env: *mut JNIEnv) {
    if let Some(describe) = ORIGINAL_JNI.get().and_then(|o| o.0.ExceptionDescribe) {
        // SAFETY: the JVM's own ExceptionDescribe, with the caller's arguments.
        unsafe { describe(env) };
    }
    after_native_catch(env);
}

/// After native code cleared a pending exception: [`restore_wrapper_node`], unless the thread is already in
/// here (kprof's own JNI calls below may clear an exception) or is tearing down its thread-locals.
fn after_native_catch(env: *mut JNIEnv) {
    if IN_NATIVE_CATCH.try_with(|c| c.replace(true)) != Ok(false) {
        return;
    }
    crate::guard::guard((), || restore_wrapper_node(env));
    let _ = IN_NATIVE_CATCH.try_with(|c| c.set(false));
}

/// When the innermost Java frame is a wrapped native (the exception came from Java code that native
/// called back, or from a JNI call it made), puts the thread's current node back to the wrapper's, where
/// that native's code runs (`Exact.caught`). Anything else (a native without a wrapper, a thread without
/// Java frames, kprof's own JNI calls from a Java method it called) changes nothing.
fn restore_wrapper_node(env: *mut JNIEnv) {
    let Some(engine) = RewritingEngine::get().filter(|e| e.mode() == EngineKind::Exact) else { return };
    let (Some(rt), Ok(method)) = (engine.runtime.get(), engine.jvmti.current_frame_method()) else { return };
    if engine.jvmti.method_name(method).is_ok_and(|(name, _)| name.starts_with(NATIVE_PREFIX)) {
        // SAFETY: the JVM passed this thread's JNIEnv to the JNI function we replaced.
        let jni = unsafe { Jni::from_raw(env) };
        let _ = jni.call_static_void(rt.exact.caught.0, rt.exact.caught.1, &[]);
        engine.exact.native_catches.fetch_add(1, Ordering::Relaxed);
    }
}

/// The weight (bytecodes) and the full block vector of a node from its block counters: block 0 is the
/// call count when the prologue counts it.
fn block_counts(blocks: &MethodBlocks, calls: u64, counters: &[u64]) -> (u64, Vec<u64>) {
    let mut out: Vec<u64> = counters.to_vec();
    out.resize(blocks.spans.len(), 0);
    if blocks.first_counted_by_calls && !out.is_empty() {
        out[0] = calls;
    }
    let weight = out.iter().zip(&blocks.spans).map(|(&n, s)| n * s.insns as u64).sum();
    (weight, out)
}

/// Bytecodes of a method's first block when the prologue counts it by counting the call (bb=off: the node's
/// bytecode counter leaves it out), else 0.
fn first_block_bytecodes(blocks: &MethodBlocks) -> u64 {
    match blocks.spans.first() {
        Some(first) if blocks.first_counted_by_calls => first.insns as u64,
        _ => 0,
    }
}

/// A thread's tree as `kprof.runtime.Exact` lays it out in native memory (see that class): 64-byte entries
/// in tables of children, a context's table at the address in its `KIDS` word with its number of slots in
/// its `LIM` word (its overflow entry follows them, and holds the hash table of the table's other entries).
/// Here a table is named by the address of its first entry with its number of slots in the top 16 bits.
mod tree {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    pub const ENTRY: u64 = 64;
    pub const KEY: u64 = 0;
    pub const CALLS: u64 = 8;
    pub const BYTECODES: u64 = 16;
    pub const KIDS: u64 = 24;
    /// The number of slots of the entry's own table (a 4-byte word; 0: it has none of its own).
    pub const LIM: u64 = 60;
    /// In a table's overflow entry: the hash table of the table's other entries (those whose slot another
    /// holds), its capacity in its first word, then the entries' addresses (0: free).
    pub const OTHERS: u64 = 40;
    pub const BLOCKS: u64 = 48;
    pub const CCT: u64 = 56;
    pub const ADDRESS: u64 = (1 << 48) - 1;
    /// `Exact.OVERFLOW_KEY`: a table's overflow entry.
    pub const OVERFLOW_KEY: u64 = 0xffff_ffff;
    /// `Exact.NEVER`: the slots of the overflow table, which hold no context.
    pub const NEVER: u64 = u64::MAX;
    /// `Exact.USED`: set in the low word of every context's key, above the method id.
    pub const USED: u64 = 1 << 31;

    /// Native memory of a thread's tree, read while the thread may run.
    #[derive(Clone, Copy)]
    pub struct Tree(());

    impl Tree {
        /// # Safety
        /// The caller holds `Exact`'s lock, under which the runtime frees a tree's memory, and reads only
        /// addresses reached from the tree's tables: the runtime writes every pointer (a table, an
        /// others' hash table or an entry in it, block counters) as 0 or as memory of that tree, and publishes entries and the
        /// others' hash tables and their slots with release stores after their contents.
        pub unsafe fn new() -> Tree {
            Tree(())
        }

        /// The 8-byte word at `address` (8-aligned, in the tree).
        pub fn word(self, address: u64) -> u64 {
            // SAFETY: `Tree::new`'s contract: the address is live, aligned memory of the tree. Its own
            // thread may write it meanwhile (plain 8-byte stores, atomic on this platform), so it is read
            // as an atomic, acquiring what a release store published.
            unsafe { AtomicU64::from_ptr(address as *mut u64) }.load(Ordering::Acquire)
        }

        /// The number of slots of the table of the entry at `entry` (0: none of its own).
        pub fn slots(self, entry: u64) -> u64 {
            // SAFETY: as `word`; the runtime writes it before it publishes the entry's key.
            u64::from(unsafe { AtomicU32::from_ptr((entry + LIM) as *mut u32) }.load(Ordering::Acquire))
        }

        /// The CCT node the agent recorded for the entry at `entry` (0: none yet).
        pub fn cct(self, entry: u64) -> u32 {
            // SAFETY: as `word`; the runtime never writes this word, only a merge of its tree (one at a time) does.
            unsafe { AtomicU32::from_ptr((entry + CCT) as *mut u32) }.load(Ordering::Relaxed)
        }

        pub fn set_cct(self, entry: u64, node: u32) {
            // SAFETY: as `cct`.
            unsafe { AtomicU32::from_ptr((entry + CCT) as *mut u32) }.store(node, Ordering::Relaxed);
        }
    }
}

/// Chunks of this size are mapped 2 MiB-aligned (see [`map`]); smaller ones (a
/// thread's first, which most threads never outgrow) come from the allocator, so that thousands of threads
/// do not take thousands of mappings (the kernel allows some 65,000 per process).
const HUGE_PAGE: usize = 2 << 20;
/// Entries are 64 bytes: a chunk starts on a cache line.
const LINE: usize = 64;

/// `Exact.map(long bytes)`: zeroed memory for a thread's tree (a chunk of its arena), 0 when there is none.
/// Chunks of a huge page or more are mapped aligned to one, so that a system whose transparent huge pages
/// are `always` on can back them with huge pages; they are not advised onto them (`MADV_HUGEPAGE`): where
/// the setting is `madvise`, each 2 MiB fault then zeroes, and may first compact, a huge page, and that cost
/// more than the TLB misses it saved (clojure 3–8 %, xalan 2 % slower; docs/BENCHMARKS.md).
///
/// # Safety
/// Called by the JVM as a registered native method.
unsafe extern "C" fn map(_env: *mut JNIEnv, _class: jclass, bytes: jlong) -> jlong {
    crate::guard::guard(0, || {
        let Ok(bytes) = usize::try_from(bytes) else { return 0 };
        let start = if bytes == 0 {
            0
        } else if bytes < HUGE_PAGE {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: posix_memalign writes `p` only; LINE is a power of two and a multiple of a pointer's size.
            if unsafe { libc::posix_memalign(&mut p, LINE, bytes) } != 0 || p.is_null() {
                return 0;
            }
            // SAFETY: `p` is `bytes` bytes just allocated.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0, bytes) };
            p as usize
        } else {
            map_huge(bytes)
        };
        if start != 0 {
            if let Some(engine) = RewritingEngine::get() {
                let now = engine.exact.mapped.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
                engine.exact.mapped_peak.fetch_max(now, Ordering::Relaxed);
            }
        }
        start as jlong
    })
}

/// `bytes` (a huge page or more) of anonymous memory (zeroed) aligned to a huge page; 0 when there is none.
fn map_huge(bytes: usize) -> usize {
    let reserve = bytes + HUGE_PAGE;
    // SAFETY: a new private anonymous mapping; no existing memory is touched.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return 0;
    }
    let start = raw as usize;
    let aligned = (start + HUGE_PAGE - 1) & !(HUGE_PAGE - 1);
    let (head, tail) = (aligned - start, reserve - bytes - (aligned - start));
    // SAFETY: both ranges lie inside the mapping just made and outside [aligned, aligned + bytes).
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + bytes) as *mut c_void, tail);
        }
    }
    aligned
}

/// `Exact.unmap(long address, long bytes)`: returns a chunk [`map`] gave.
///
/// # Safety
/// Called by the JVM as a registered native method, by `Exact` with a chunk of a tree it frees, which no
/// thread uses any more.
unsafe extern "C" fn unmap(_env: *mut JNIEnv, _class: jclass, address: jlong, bytes: jlong) {
    crate::guard::guard((), || {
        let Ok(bytes) = usize::try_from(bytes) else { return };
        if address == 0 || bytes == 0 {
            return;
        }
        if bytes < HUGE_PAGE {
            // SAFETY: `address` is what `map` got from posix_memalign for this size, freed once.
            unsafe { libc::free(address as *mut c_void) };
        } else {
            // SAFETY: the range is a whole mapping made by `map_huge` (its exact size), unmapped once.
            unsafe { libc::munmap(address as *mut c_void, bytes) };
        }
        if let Some(engine) = RewritingEngine::get() {
            engine.exact.mapped.fetch_sub(bytes as u64, Ordering::Relaxed);
        }
    })
}

/// What one merge of a tree takes from an entry: the counters it had at the last merge, for the difference.
#[derive(Default)]
pub(crate) struct Merged {
    calls: u64,
    bytecodes: u64,
    blocks: Vec<u64>,
}

/// What an entry counted since the tree's last merge (its counters then are in `merged`), given what it
/// counts now; unless `last`, what it counts now is kept in `keep` for the next merge.
fn difference(
    merged: &HashMap<u64, Merged>,
    keep: &mut HashMap<u64, Merged>,
    last: bool,
    entry: u64,
    calls: u64,
    bytecodes: u64,
    blocks: Vec<u64>,
) -> (u64, u64, Vec<u64>) {
    // A tree's first merge has nothing before (and hashing every entry for nothing took a while).
    let none = Merged::default();
    let before = if merged.is_empty() { &none } else { merged.get(&entry).unwrap_or(&none) };
    let d_blocks =
        blocks.iter().enumerate().map(|(k, &c)| c.saturating_sub(before.blocks.get(k).copied().unwrap_or(0))).collect();
    let d = (calls.saturating_sub(before.calls), bytecodes.saturating_sub(before.bytecodes), d_blocks);
    if !last {
        keep.insert(entry, Merged { calls, bytecodes, blocks });
    }
    d
}

/// `Exact.merge(long table, long overflow, int root, boolean last)`: adds what the thread's tree (root table
/// `table`, overflow table `overflow`) counted since its last merge to the CCT, below `root` (the thread's
/// root, `threads=on`) or the CCT's root. `last`: the tree is not merged again, so nothing is kept for the
/// next difference.
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv, by `Exact` under the
/// monitor of the tree's state, with a live tree's tables (no other merge of that tree runs meanwhile).
unsafe extern "C" fn merge(
    _env: *mut JNIEnv,
    _class: jclass,
    table: jlong,
    overflow: jlong,
    root: jint,
    last: jboolean,
) {
    let Some(engine) = RewritingEngine::get().filter(|e| e.mode() == EngineKind::Exact) else { return };
    // SAFETY: Exact calls this under the state's monitor with the tables of a tree it has not freed.
    let tree = unsafe { tree::Tree::new() };
    let root = if root > 0 { root as NodeId } else { ROOT };
    // A panic must not unwind into the JVM: the merge is left incomplete and reported.
    crate::guard::guard((), || merge_tree(engine, tree, table as u64, overflow as u64, root, last != 0));
}

/// A table of a tree still to merge: (table, its context's CCT node, its context's method).
type TableWork = (u64, NodeId, Option<u32>);

/// What one merge reads, shared by its workers.
struct MergeInput<'a> {
    engine: &'a RewritingEngine,
    tree: tree::Tree,
    bb: bool,
    callsites: bool,
    last: bool,
    /// Each entry's counters at the tree's last merge (empty at its first).
    merged: &'a HashMap<u64, Merged>,
}

/// What one worker of a merge added to the CCT, and kept for the next difference.
#[derive(Default)]
struct MergeOutput {
    calls: u64,
    bytecodes: u64,
    overflow_calls: u64,
    /// Counts of tables' overflow entries (what ran below an overflowing invocation): one node, at the end.
    overflow_counts: (u64, u64),
    keep: HashMap<u64, Merged>,
    new_blocks: Vec<(NodeId, Vec<u64>)>,
}

impl MergeOutput {
    fn absorb(&mut self, other: MergeOutput) {
        self.calls += other.calls;
        self.bytecodes += other.bytecodes;
        self.overflow_calls += other.overflow_calls;
        self.overflow_counts.0 += other.overflow_counts.0;
        self.overflow_counts.1 += other.overflow_counts.1;
        self.keep.extend(other.keep);
        self.new_blocks.extend(other.new_blocks);
    }
}

/// One worker's cache of method block layouts, by method id (the method table takes a lock per lookup).
#[derive(Default)]
struct Layouts(Vec<Option<Option<Arc<MethodBlocks>>>>);

/// What a merge worker reuses from table to table.
#[derive(Default)]
struct Scratch {
    layouts: Layouts,
    /// The entries of the table at hand.
    entries: Vec<u64>,
    /// CCT nodes taken for this worker's insertions.
    reserve: NodeReserve,
}

impl Layouts {
    fn get(&mut self, engine: &RewritingEngine, method: u32) -> Option<Arc<MethodBlocks>> {
        let i = method as usize;
        if i >= self.0.len() {
            self.0.resize(i + 1, None);
        }
        self.0[i].get_or_insert_with(|| engine.methods.blocks(method)).clone()
    }
}

/// Tables that one merge's workers share: a worker takes from here when its own are done, and gives half
/// of its own when another waits. Done when every worker waits and nothing is left.
struct WorkPool {
    state: Mutex<PoolState>,
    more: std::sync::Condvar,
    /// Workers waiting for tables (read without the lock by workers deciding whether to give).
    hungry: std::sync::atomic::AtomicUsize,
}

struct PoolState {
    tables: Vec<TableWork>,
    workers: usize,
    waiting: usize,
    done: bool,
}

impl WorkPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next table for a worker whose own are done; `None` once every worker's are.
    fn take(&self) -> Option<TableWork> {
        let mut state = self.lock();
        loop {
            if let Some(w) = state.tables.pop() {
                return Some(w);
            }
            if state.done {
                return None;
            }
            state.waiting += 1;
            if state.waiting == state.workers {
                state.done = true;
                self.more.notify_all();
                return None;
            }
            self.hungry.fetch_add(1, Ordering::Relaxed);
            state = self.more.wait(state).unwrap_or_else(|e| e.into_inner());
            self.hungry.fetch_sub(1, Ordering::Relaxed);
            state.waiting -= 1;
        }
    }

    /// A worker stops for good (at the end, or when it panicked): the others no longer wait for it.
    fn leave(&self) {
        let mut state = self.lock();
        state.workers -= 1;
        if state.waiting == state.workers {
            state.done = true;
        }
        self.more.notify_all();
    }

    /// Gives the older half of a worker's tables (nearest the root: the largest subtrees) to those waiting.
    fn give(&self, own: &mut Vec<TableWork>) {
        let half = own.len() / 2;
        let mut state = self.lock();
        state.tables.extend(own.drain(..half));
        self.more.notify_all();
    }
}

/// Tables a merge goes through alone before it starts helpers: most trees (threads that ran briefly) are
/// done by then, and a helper thread would cost more than it saves.
const SOLO_TABLES: usize = 4096;

/// Helper threads at most for one merge (memory-bound work: a few cores are enough).
const MAX_HELPERS: usize = 3;

fn merge_tree(engine: &RewritingEngine, tree: tree::Tree, table: u64, overflow: u64, root: NodeId, last: bool) {
    use tree::*;
    let started = std::time::Instant::now();
    let cct = engine.cct();
    let store = &engine.exact;
    // The counters of the last merge, if the tree was merged before (dumps while the program runs). Taken
    // out for the merge: trees of other threads merge meanwhile (one tree merges once at a time).
    let merged = store.merged.lock().unwrap_or_else(|e| e.into_inner()).remove(&table).unwrap_or_default();
    let input = MergeInput {
        engine,
        tree,
        bb: store.bb.load(Ordering::Acquire),
        callsites: engine.callsites(),
        last,
        merged: &merged,
    };
    let mut out = MergeOutput::default();
    let mut own: Vec<TableWork> = vec![(table, root, None)];
    let mut scratch = Scratch::default();
    for _ in 0..SOLO_TABLES {
        let Some(work) = own.pop() else { break };
        merge_table(&input, work, &mut own, &mut out, &mut scratch);
    }
    if !own.is_empty() {
        scratch = merge_shared(&input, own, &mut out, scratch);
    }
    cct.release(scratch.reserve);
    // What ran below overflowing invocations: the overflow table's own overflow entry.
    let e = (overflow & ADDRESS) + (overflow >> 48) * ENTRY;
    if overflow != 0 && tree.word(e + KEY) == OVERFLOW_KEY {
        let (calls, bytecodes) = (tree.word(e + CALLS), tree.word(e + BYTECODES));
        if calls > 0 || bytecodes > 0 {
            let (d_calls, d_bytecodes, _) = difference(&merged, &mut out.keep, last, e, calls, bytecodes, vec![]);
            out.overflow_counts.0 += d_calls;
            out.overflow_counts.1 += d_bytecodes;
        }
    }
    if out.overflow_counts != (0, 0) {
        // Below the thread's root (threads=on), else the CCT's own overflow node.
        let node = cct.child(root, FrameId::pseudo(Pseudo::Overflow), -1).unwrap_or(cct.overflow());
        cct.add(node, Metric::Calls, out.overflow_counts.0);
        cct.add(node, Metric::Bytecodes, out.overflow_counts.1);
        out.calls += out.overflow_counts.0;
        out.bytecodes += out.overflow_counts.1;
        out.overflow_calls += out.overflow_counts.0;
    }
    if !last {
        store.merged.lock().unwrap_or_else(|e| e.into_inner()).insert(table, out.keep);
    }
    if !out.new_blocks.is_empty() {
        let mut all = store.blocks.lock().unwrap_or_else(|e| e.into_inner());
        for (node, blocks) in out.new_blocks {
            let have = all.entry(node).or_default();
            if have.len() < blocks.len() {
                have.resize(blocks.len(), 0);
            }
            for (h, b) in have.iter_mut().zip(blocks) {
                *h += b;
            }
        }
    }
    store.calls.fetch_add(out.calls, Ordering::Relaxed);
    store.bytecodes.fetch_add(out.bytecodes, Ordering::Relaxed);
    store.overflow_calls.fetch_add(out.overflow_calls, Ordering::Relaxed);
    store.merges.fetch_add(1, Ordering::Relaxed);
    store.merge_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// The rest of a large tree's merge, on this thread and helpers (the work is bound by the latency of
/// memory, each context an insertion at a random place of the CCT's hash table, so more cores overlap
/// more of it; at the program's exit the others are idle). Without helpers, this thread does it alone.
fn merge_shared(input: &MergeInput, own: Vec<TableWork>, out: &mut MergeOutput, scratch: Scratch) -> Scratch {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let helpers = cores.saturating_sub(1).min(MAX_HELPERS);
    let pool = WorkPool {
        state: Mutex::new(PoolState { tables: Vec::new(), workers: 1, waiting: 0, done: false }),
        more: std::sync::Condvar::new(),
        hungry: std::sync::atomic::AtomicUsize::new(0),
    };
    input.engine.cct().populate_table();
    /// Makes a worker leave the pool however it stops, unwinding included, so that no other waits forever.
    struct Leaving<'a>(&'a WorkPool);
    impl Drop for Leaving<'_> {
        fn drop(&mut self) {
            self.0.leave();
        }
    }
    let work = |mut own: Vec<TableWork>, out: &mut MergeOutput, mut scratch: Scratch| {
        let _leaving = Leaving(&pool);
        while let Some(w) = own.pop().or_else(|| pool.take()) {
            merge_table(input, w, &mut own, out, &mut scratch);
            if own.len() >= 2 && pool.hungry.load(Ordering::Relaxed) > 0 {
                pool.give(&mut own);
            }
        }
        scratch
    };
    std::thread::scope(|scope| {
        let mut running = Vec::new();
        for _ in 0..helpers {
            // Counted before it starts, so that no worker finds everyone waiting while one is on its way.
            pool.lock().workers += 1;
            let helper = std::thread::Builder::new().name("kprof-merge".into()).spawn_scoped(scope, || {
                let mut helped = MergeOutput::default();
                let scratch = work(Vec::new(), &mut helped, Scratch::default());
                input.engine.cct().release(scratch.reserve);
                helped
            });
            match helper {
                Ok(h) => {
                    input.engine.exact.merge_helpers.fetch_add(1, Ordering::Relaxed);
                    running.push(h)
                }
                Err(_) => {
                    pool.lock().workers -= 1;
                    break;
                }
            }
        }
        let scratch = work(own, out, scratch);
        for h in running {
            // A helper that panicked (it left the pool) leaves its part of the counts out; the program goes on.
            if let Ok(helped) = h.join() {
                out.absorb(helped);
            }
        }
        scratch
    })
}

/// Merges one table of a tree: each of its contexts into the CCT below `parent`, and queues the contexts'
/// own tables in `own`.
fn merge_table(
    input: &MergeInput,
    (t, parent, parent_method): TableWork,
    own: &mut Vec<TableWork>,
    out: &mut MergeOutput,
    scratch: &mut Scratch,
) {
    use tree::*;
    let Scratch { layouts, entries, reserve } = scratch;
    let MergeInput { engine, tree, bb, callsites, last, merged } = *input;
    let cct = engine.cct();
    let base = t & ADDRESS;
    entries.clear();
    // The slots, the overflow entry after them, and the others.
    let lim = t >> 48;
    entries.extend((0..=lim).map(|slot| base + slot * ENTRY));
    let others = tree.word(base + lim * ENTRY + OTHERS);
    if others != 0 {
        let capacity = tree.word(others);
        entries.extend((0..capacity).map(|i| tree.word(others + 8 + 8 * i)).filter(|&e| e != 0));
    }
    let parent_layout = parent_method.and_then(|m| layouts.get(engine, m));
    // The CCT key of a context new to the CCT: its method, and its callsite's bci in the parent.
    let key_of = |key: u64| {
        let site = (key >> 32) as u32;
        let bci = match &parent_layout {
            Some(layout) if callsites => layout.site_bci(site),
            _ => -1,
        };
        (FrameId::method((key & !USED) as u32), bci)
    };
    if parent != cct.overflow() {
        for &e in entries.iter() {
            let key = tree.word(e + KEY);
            if key != 0 && key != NEVER && key != OVERFLOW_KEY && tree.cct(e) == 0 {
                let (frame, bci) = key_of(key);
                cct.prefetch_child(parent, frame, bci);
            }
        }
    }
    for &e in entries.iter() {
        let key = tree.word(e + KEY);
        if key == 0 || key == NEVER {
            continue;
        }
        let (calls, bytecodes) = (tree.word(e + CALLS), tree.word(e + BYTECODES));
        if key == OVERFLOW_KEY {
            // Every table has one; most never count. Their counts all go to one node, at the end.
            if calls > 0 || bytecodes > 0 {
                let (d_calls, d_bytecodes, _) = difference(merged, &mut out.keep, last, e, calls, bytecodes, vec![]);
                out.overflow_counts.0 += d_calls;
                out.overflow_counts.1 += d_bytecodes;
            }
            continue;
        }
        let method = (key & !USED) as u32;
        let node = match tree.cct(e) {
            0 => {
                let node = if parent == cct.overflow() {
                    cct.overflow()
                } else {
                    let (frame, bci) = key_of(key);
                    cct.child_reserved(parent, frame, bci, reserve).unwrap_or(cct.overflow())
                };
                tree.set_cct(e, node);
                node
            }
            n => n,
        };
        // No table of its own (a leaf method's context, or one whose calls count as overflow): size 0.
        let kids = tree.word(e + KIDS);
        let slots = tree.slots(e);
        if slots != 0 && kids & !ADDRESS == 0 {
            own.push((kids | slots << 48, node, Some(method)));
        }
        let layout = layouts.get(engine, method);
        let blocks_at = tree.word(e + BLOCKS);
        let counters: Vec<u64> = match &layout {
            Some(layout) if bb && blocks_at != 0 => {
                (0..layout.spans.len() as u64).map(|k| tree.word(blocks_at + 8 * k)).collect()
            }
            _ => Vec::new(),
        };
        let (d_calls, d_bytecodes, d_blocks) = difference(merged, &mut out.keep, last, e, calls, bytecodes, counters);
        let weight = match layout {
            Some(layout) if bb => {
                let (weight, blocks) = block_counts(&layout, d_calls, &d_blocks);
                if blocks.iter().any(|&b| b > 0) {
                    out.new_blocks.push((node, blocks));
                }
                weight
            }
            Some(layout) => d_bytecodes + d_calls * first_block_bytecodes(&layout),
            None => d_bytecodes,
        };
        if d_calls == 0 && weight == 0 {
            continue;
        }
        cct.add(node, Metric::Calls, d_calls);
        cct.add(node, Metric::Bytecodes, weight);
        out.calls += d_calls;
        out.bytecodes += weight;
        if node == cct.overflow() {
            out.overflow_calls += d_calls;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kprof_classfile::transform::methods::BlockSpan;

    #[test]
    fn bytecodes_follow_from_block_counts() {
        let spans = vec![
            BlockSpan { start_bci: 0, end_bci: 4, insns: 3 },
            BlockSpan { start_bci: 4, end_bci: 9, insns: 2 },
            BlockSpan { start_bci: 9, end_bci: 10, insns: 1 },
        ];
        let folded = MethodBlocks { spans: spans.clone(), first_counted_by_calls: true, sites: vec![] };
        // Block 0 has a counter slot that stays 0; the calls stand for it.
        assert_eq!(block_counts(&folded, 5, &[0, 7, 5]), (5 * 3 + 7 * 2 + 5, vec![5, 7, 5]));
        let looped = MethodBlocks { spans, first_counted_by_calls: false, sites: vec![] };
        assert_eq!(block_counts(&looped, 5, &[9, 7, 5]), (9 * 3 + 7 * 2 + 5, vec![9, 7, 5]));
    }
}
