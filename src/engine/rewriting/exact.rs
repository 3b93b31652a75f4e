//! mode=exact's runtime side: `kprof.runtime.Exact` counts every call and block in a per-thread calling
//! context tree (Java arrays, no synchronisation on the fast path); [`merge`] adds a thread's tree to the
//! agent's one CCT when the thread ends, and every live thread's tree before the profile is written (then
//! only what changed since the last merge). Per-node block counts (`bb=on`) live in [`ExactStore`], keyed
//! by CCT node, since the CCT itself keeps three counters per node.

use super::{runtime_class, thread_root, RewritingEngine};
use crate::cct::{NodeId, ROOT};
use crate::frame::{FrameId, Pseudo};
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti};
use crate::options::Mode;
use crate::rewrite::methods::MethodBlocks;
use crate::rewrite::natives::NATIVE_PREFIX;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The method id of a thread's overflow node (`kprof.runtime.Exact.OVERFLOW_KEY`): invocations counted after the
/// runtime's node budget was spent, filed under a `[cct_overflow]` node below the thread's root (`threads=on`) or
/// the CCT's overflow node.
const OVERFLOW_METHOD: u32 = u32::MAX;

/// What exact mode has merged into the CCT: totals and the block counts per node.
#[derive(Default)]
pub struct ExactStore {
    bb: AtomicBool,
    /// Block counts per CCT node (`bb=on`), block 0 included.
    blocks: Mutex<HashMap<NodeId, Vec<u64>>>,
    pub calls: AtomicU64,
    pub bytecodes: AtomicU64,
    /// Merges of a thread's tree (one per thread end, one per live thread and write).
    pub merges: AtomicU64,
    /// Calls that found the CCT full (counted on the overflow node).
    pub overflow_calls: AtomicU64,
    /// Exceptions that native code caught (JNI `ExceptionClear`, `ExceptionDescribe`) while a wrapped native
    /// was the innermost Java frame: each put the current node back to the wrapper's.
    pub native_catches: AtomicU64,
}

impl ExactStore {
    pub(super) fn reset(&self, bb: bool) {
        self.bb.store(bb, Ordering::Release);
        self.blocks.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for c in [&self.calls, &self.bytecodes, &self.merges, &self.overflow_calls, &self.native_catches] {
            c.store(0, Ordering::Relaxed);
        }
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
pub(super) struct ExactRuntime {
    class: jclass,
    init: jmethodID,
    thread_ended: jmethodID,
    merge_all: jmethodID,
    disable: jmethodID,
    /// `caught()` of `Exact`, or of `Ef` when java.lang.Thread has kprof's fields (see [`intercept_native_catches`]).
    caught: (jclass, jmethodID),
}

impl ExactRuntime {
    pub(super) fn load(jni: Jni) -> Result<ExactRuntime, String> {
        let class = runtime_class(
            jni,
            "kprof/runtime/Exact",
            &[
                ("merge", "(I[I[J[J[I)V", merge as *mut c_void),
                ("threadRoot", "(Ljava/lang/String;)I", thread_root as *mut c_void),
            ],
        )?;
        let method = |name: &str, sig: &str| {
            jni.static_method_id(class, name, sig).ok_or(format!("kprof.runtime.Exact.{name} not found"))
        };
        let caught = if super::thread_fields::added() {
            let ef = runtime_class(jni, "kprof/runtime/Ef", &[])?;
            (ef, jni.static_method_id(ef, "caught", "()V").ok_or("kprof.runtime.Ef.caught not found")?)
        } else {
            (class, method("caught", "()V")?)
        };
        Ok(ExactRuntime {
            class,
            init: method("init", "(ZZ)V")?,
            thread_ended: method("threadEnded", "()V")?,
            merge_all: method("mergeAll", "()V")?,
            disable: method("disable", "()V")?,
            caught,
        })
    }

    pub(super) fn init(&self, jni: Jni, threads: bool, thread_fields: bool) -> Result<(), String> {
        jni.call_static_void(self.class, self.init, &[jvalue { z: threads as u8 }, jvalue { z: thread_fields as u8 }])
            .map_err(|_| "kprof.runtime.Exact.init threw".to_string())
    }

    pub(super) fn thread_ended(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.thread_ended, &[]);
    }

    pub(super) fn merge_all(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.merge_all, &[]);
    }

    pub(super) fn disable(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.disable, &[]);
    }
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
pub(super) fn intercept_native_catches(jvmti: Jvmti) -> Result<(), String> {
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
    crate::agent::guard((), || restore_wrapper_node(env));
    let _ = IN_NATIVE_CATCH.try_with(|c| c.set(false));
}

/// When the innermost Java frame is a wrapped native (the exception came from Java code that native
/// called back, or from a JNI call it made), puts the thread's current node back to the wrapper's, where
/// that native's code runs (`Exact.caught`). Anything else (a native without a wrapper, a thread without
/// Java frames, kprof's own JNI calls from a Java method it called) changes nothing.
fn restore_wrapper_node(env: *mut JNIEnv) {
    let Some(engine) = RewritingEngine::get().filter(|e| e.mode() == Mode::Exact) else { return };
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
fn block_counts(blocks: &MethodBlocks, calls: u64, counters: &[i64]) -> (u64, Vec<u64>) {
    let mut out: Vec<u64> = counters.iter().map(|&c| c.max(0) as u64).collect();
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

/// `Exact.merge(int n, int[] parents, long[] keys, long[] counts, int[] cctNodes)`: see `Exact.java`.
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv.
unsafe extern "C" fn merge(
    env: *mut JNIEnv,
    _class: jclass,
    n: jint,
    parents: jintArray,
    keys: jlongArray,
    counts: jlongArray,
    cct_nodes: jintArray,
) {
    let Some(engine) = RewritingEngine::get().filter(|e| e.mode() == Mode::Exact) else { return };
    // SAFETY: the JVM passes the calling thread's JNIEnv.
    let jni = unsafe { Jni::from_raw(env) };
    let (parents, keys, counts) = (jni.int_array(parents), jni.long_array(keys), jni.long_array(counts));
    let mut map = jni.int_array(cct_nodes);
    let n = (n.max(0) as usize).min(parents.len()).min(keys.len()).min(map.len());
    if n == 0 {
        return;
    }
    let cct = engine.cct();
    let store = &engine.exact;
    let callsites = engine.callsites();
    let bb = store.bb.load(Ordering::Acquire);
    let root = if map[0] > 0 { map[0] as NodeId } else { ROOT };
    let mut layouts: HashMap<u32, Option<Arc<MethodBlocks>>> = HashMap::new();
    let mut new_blocks: Vec<(NodeId, Vec<u64>)> = Vec::new();
    let (mut total_calls, mut total_bytecodes, mut overflow_calls) = (0u64, 0u64, 0u64);
    let mut at = 0usize;
    for i in 1..n {
        if at + 3 > counts.len() {
            break;
        }
        let (calls, bytecodes, nblocks) = (counts[at].max(0) as u64, counts[at + 1].max(0) as u64, counts[at + 2]);
        let nblocks = (nblocks.max(0) as usize).min(counts.len() - at - 3);
        let counters = &counts[at + 3..at + 3 + nblocks];
        at += 3 + nblocks;
        let key = keys[i];
        let method = key as u32;
        let p = parents[i];
        let parent = match p {
            0 => root,
            p if p > 0 && (p as usize) < i => map[p as usize] as NodeId,
            _ => cct.overflow(),
        };
        if map[i] == 0 {
            let callsite = if callsites { (key >> 32) as i32 } else { -1 };
            let node = if method == OVERFLOW_METHOD {
                // Below the thread's root (threads=on), else the CCT's own overflow node.
                cct.child(root, FrameId::pseudo(Pseudo::Overflow), -1).unwrap_or(cct.overflow())
            } else if parent == 0 || parent == cct.overflow() {
                cct.overflow()
            } else {
                cct.child(parent, FrameId::method(method), callsite).unwrap_or(cct.overflow())
            };
            map[i] = node as i32;
        }
        let node = map[i] as NodeId;
        let layout = if method != OVERFLOW_METHOD {
            layouts.entry(method).or_insert_with(|| engine.methods.blocks(method)).clone()
        } else {
            None
        };
        let weight = match layout {
            Some(layout) if bb => {
                let (weight, blocks) = block_counts(&layout, calls, counters);
                if blocks.iter().any(|&b| b > 0) {
                    new_blocks.push((node, blocks));
                }
                weight
            }
            Some(layout) => bytecodes + calls * first_block_bytecodes(&layout),
            None => bytecodes,
        };
        if calls == 0 && weight == 0 {
            continue;
        }
        cct.add_calls(node, calls, weight);
        total_calls += calls;
        total_bytecodes += weight;
        if node == cct.overflow() || method == OVERFLOW_METHOD {
            overflow_calls += calls;
        }
    }
    jni.set_int_array(cct_nodes, &map);
    if !new_blocks.is_empty() {
        let mut all = store.blocks.lock().unwrap_or_else(|e| e.into_inner());
        for (node, blocks) in new_blocks {
            let have = all.entry(node).or_default();
            if have.len() < blocks.len() {
                have.resize(blocks.len(), 0);
            }
            for (h, b) in have.iter_mut().zip(blocks) {
                *h += b;
            }
        }
    }
    store.calls.fetch_add(total_calls, Ordering::Relaxed);
    store.bytecodes.fetch_add(total_bytecodes, Ordering::Relaxed);
    store.overflow_calls.fetch_add(overflow_calls, Ordering::Relaxed);
    store.merges.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::methods::BlockSpan;

    #[test]
    fn bytecodes_follow_from_block_counts() {
        let spans = vec![
            BlockSpan { start_bci: 0, end_bci: 4, insns: 3 },
            BlockSpan { start_bci: 4, end_bci: 9, insns: 2 },
            BlockSpan { start_bci: 9, end_bci: 10, insns: 1 },
        ];
        let folded = MethodBlocks { spans: spans.clone(), first_counted_by_calls: true };
        // Block 0 has a counter slot that stays 0; the calls stand for it.
        assert_eq!(block_counts(&folded, 5, &[0, 7, 5]), (5 * 3 + 7 * 2 + 5, vec![5, 7, 5]));
        let looped = MethodBlocks { spans, first_counted_by_calls: false };
        assert_eq!(block_counts(&looped, 5, &[9, 7, 5]), (9 * 3 + 7 * 2 + 5, vec![9, 7, 5]));
    }
}
