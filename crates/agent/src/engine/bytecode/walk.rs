//! `stack=walk`: a sample's calling context from the thread's own stack instead of a reified one.
//!
//! Rewritten code then keeps no stack at all (no push in prologues, no depth restored at returns): when a
//! period runs out, `Bc.walk` reads the current thread's Java frames, inlined ones included, with
//! AsyncGetCallTrace from that native call (the thread walks its own stack from its last Java frame, in
//! place: no signal, no safepoint; JVMTI GetStackTrace, which builds a frame object for each, where that
//! gives nothing or a walk not to be trusted: the walker the alloc and lock engines use,
//! [`stack::own`]), and keeps only the frames the reified stack
//! would have held: methods bytecode mode rewrote and that call (the method table marks them when their
//! rewrite is kept). Frames of code left alone (`java.lang.invoke`, lambda forms, natives, reflection's
//! glue, kprof's helpers) and of leaf methods are dropped, as the reified stack never had them, so a
//! context does not depend on how the JDK got from one rewritten method to the next, and the profile is
//! the one `stack=reified` gives. The innermost rewritten frame is the method that samples (named by the
//! sample itself, as with the reified stack).
//!
//! What a jmethodID is to the stack is kept in a lock-free table ([`KindCache`]): the first sight of a
//! method costs three JVMTI calls and a look-up in the method table; after that, one probe.

use crate::engine::rewriting::RewritingEngine;
use crate::engine::stack;
use crate::engine::stack::own::{OwnStack, Walk, WalkCounts};
use crate::engine::Host;
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::Jni;
use kprof_classfile::transform::methods::{STACK_NONE, STACK_PUSHED};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Deeper than this, only the innermost frames are seen (the context then loses its outermost ones).
const MAX_FRAMES: usize = 1 << 16;
/// Slots of the method table cache: a power of two, some four times the methods a large program runs.
const SLOTS: usize = 1 << 17;
/// Probes before a method is looked up the slow way, uncached.
const PROBES: usize = 32;

/// jmethodID -> what its frames are to the stack, for the session (`epoch`) that looked it up.
struct KindCache {
    keys: Box<[AtomicUsize]>,
    /// `epoch << 40 | kind << 32 | id`, 0 while the slot's value is being written.
    values: Box<[AtomicU64]>,
}

static CACHE: OnceLock<KindCache> = OnceLock::new();
/// The session: values from an earlier one are stale (include= and exclude= may have changed).
pub(super) static EPOCH: AtomicU64 = AtomicU64::new(1);
/// The classes loaded before the session have been retransformed: a method found not rewritten now stays
/// so (later classes are rewritten before they are defined), so that answer may be cached.
pub(super) static SETTLED: AtomicBool = AtomicBool::new(false);

/// A session starts (before its retransformation of what is already loaded).
pub(crate) fn begin_session() {
    SETTLED.store(false, Ordering::Release);
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// The session's retransformation of the classes loaded before it is over.
pub(crate) fn settled() {
    SETTLED.store(true, Ordering::Release);
}

fn cache() -> &'static KindCache {
    CACHE.get_or_init(|| KindCache {
        keys: (0..SLOTS).map(|_| AtomicUsize::new(0)).collect(),
        values: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
    })
}

fn slot_of(m: usize) -> usize {
    // jmethodIDs are pointers to 8-byte slots: mix the bits above the alignment.
    ((m >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) & (SLOTS - 1)
}

/// (id, kind) of the method behind `m`.
pub(super) fn kind_of(engine: &RewritingEngine, jni: Jni, m: jmethodID) -> (u32, u8) {
    let key = m as usize;
    let epoch = EPOCH.load(Ordering::Acquire) & 0xFF_FFFF;
    let cache = cache();
    let mut claimed = None;
    for p in 0..PROBES {
        let s = (slot_of(key) + p) & (SLOTS - 1);
        let mut k = cache.keys[s].load(Ordering::Acquire);
        if k == 0 {
            // Claim the free slot; another thread may claim it first, for this method or another.
            k = match cache.keys[s].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => key,
                Err(other) => other,
            };
        }
        if k == key {
            let v = cache.values[s].load(Ordering::Acquire);
            if v != 0 && v >> 40 == epoch {
                return (v as u32, (v >> 32) as u8);
            }
            claimed = Some(s);
            break;
        }
    }
    let (id, kind) = look_up(engine, jni, m);
    if let Some(s) = claimed {
        if kind != STACK_NONE || SETTLED.load(Ordering::Acquire) {
            cache.values[s].store(epoch << 40 | (kind as u64) << 32 | id as u64, Ordering::Release);
        }
    }
    (id, kind)
}

/// A frame where a virtual thread's stack begins: the frames outside it are its carrier's, which neither
/// JVMTI's view of the virtual thread nor its reified stack (kept in the virtual thread's own fields)
/// has, but AsyncGetCallTrace walks on into; a walk that meets it is a virtual thread's, and is redone
/// with JVMTI.
pub(super) const STACK_CARRIER: u8 = u8::MAX;

/// The slow way: the method's class, name and descriptor, then the method table.
fn look_up(engine: &RewritingEngine, jni: Jni, m: jmethodID) -> (u32, u8) {
    let jvmti = engine.jvmti;
    let Ok(class) = jvmti.method_declaring_class(m) else { return (0, STACK_NONE) };
    let signature = jvmti.class_signature(class);
    jni.delete_local_ref(class);
    let (Ok(signature), Ok((name, descriptor))) = (signature, jvmti.method_name(m)) else { return (0, STACK_NONE) };
    let Some(internal) = signature.strip_prefix('L').and_then(|s| s.strip_suffix(';')) else {
        return (0, STACK_NONE);
    };
    if internal == "jdk/internal/vm/Continuation"
        && matches!(name.as_str(), "run" | "enter" | "enter0" | "enterSpecial")
    {
        return (0, STACK_CARRIER);
    }
    engine.methods.find(internal.as_bytes(), name.as_bytes(), descriptor.as_bytes()).unwrap_or((0, STACK_NONE))
}

/// Walks made, and of them those JVMTI made (AsyncGetCallTrace gave no walk or one not to be trusted).
static WALKS: WalkCounts = WalkCounts::new();

/// (walks, walks JVMTI made) since the agent started.
pub(crate) fn walks() -> (u64, u64) {
    WALKS.get()
}

/// Contexts come from the frame-pointer chain first (`stack=fp`, [`super::fp`]).
pub(super) static FP: AtomicBool = AtomicBool::new(false);

/// Own-thread walks may use AsyncGetCallTrace ([`stack::own_stack`]): its JVMTI environment is set up.
static OWN_WALKS: AtomicBool = AtomicBool::new(false);

/// Sets up the faster walk, once, when the engine is made: AsyncGetCallTrace reads the frames from the
/// thread's stack directly; JVMTI GetStackTrace builds a Java frame object for each (and is what a walk
/// falls back to). Both report the same frames, inlined ones included.
pub(crate) fn enable_own_walks(host: &dyn Host) {
    if stack::enable_own_stack_walks(host).is_ok() {
        OWN_WALKS.store(true, Ordering::Release);
    }
}

/// The thread's walker and the ids of the context it last walked (innermost first).
struct Buffers {
    stack: OwnStack,
    ids: Vec<u32>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers { stack: OwnStack::new(&WALKS), ids: Vec::new() });
}

/// The ids the reified stack would hold for `frames` (innermost first) into `ids`: rewritten methods that
/// call, less the innermost rewritten one (the method sampling). False where the frames run into a
/// virtual thread's carrier (see [`STACK_CARRIER`]), where `ids` holds the context up to there.
fn context(engine: &RewritingEngine, jni: Jni, frames: &[jvmtiFrameInfo], ids: &mut Vec<u32>) -> bool {
    ids.clear();
    let mut sampler_seen = false;
    for f in frames {
        if f.method.is_null() {
            continue;
        }
        let (id, kind) = kind_of(engine, jni, f.method);
        if kind == STACK_CARRIER {
            return false;
        }
        if kind == STACK_NONE {
            continue;
        }
        if !sampler_seen {
            sampler_seen = true;
        } else if kind == STACK_PUSHED {
            ids.push(id);
        }
    }
    true
}

/// Walks the current thread's stack as `stack=walk` does and hands `f` the frames (innermost first), the
/// context ids the reified stack would hold (innermost first) and whether the frames were the thread's
/// whole stack without a virtual thread's carrier. None where no walk was made.
pub(super) fn walked<R>(
    engine: &RewritingEngine,
    jni: Jni,
    f: impl FnOnce(&[jvmtiFrameInfo], &[u32], bool) -> R,
) -> Option<R> {
    walked_innermost(engine, jni, MAX_FRAMES, |frames, ids, trusted| {
        f(frames, ids, trusted && frames.len() < MAX_FRAMES)
    })
}

/// [`walked`] of only the innermost `want` frames (fewer where the stack holds fewer): `f` gets them, their
/// context ids as [`walked`] gives them (the innermost rewritten frame is the sampling method) and whether
/// they are to be trusted (no virtual thread's carrier among them).
pub(super) fn walked_innermost<R>(
    engine: &RewritingEngine,
    jni: Jni,
    want: usize,
    f: impl FnOnce(&[jvmtiFrameInfo], &[u32], bool) -> R,
) -> Option<R> {
    BUFFERS.with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else { return None };
        let Buffers { stack: walker, ids } = &mut *b;
        let fast = OWN_WALKS.load(Ordering::Acquire);
        // A virtual thread: AsyncGetCallTrace sees only the frames thawed onto its carrier's stack (the
        // others wait in the continuation's stack chunk) and walks on into the carrier's, JVMTI sees the
        // virtual thread's all; a walk that meets the carrier is made again by JVMTI.
        let mut trust = |frames: &[jvmtiFrameInfo]| context(engine, jni, frames, ids);
        let Ok(Walk { frames, by_asgct }) = walker.walk(jni, engine.jvmti, want, fast, &mut trust) else {
            return None;
        };
        let trusted = if by_asgct { true } else { context(engine, jni, frames, ids) };
        Some(f(frames, ids, trusted))
    })
}

/// Writes `ids` (innermost first) into `stack` outermost first, at most `cap` entries; their number.
pub(super) fn write_ids(ids: &[u32], stack: *mut u32, cap: usize) -> usize {
    for (i, &id) in ids.iter().rev().take(cap).enumerate() {
        // SAFETY: `stack` is the thread's block's stack of `cap` entries (`Bc.walk`'s contract), and
        // `i < cap`.
        unsafe { stack.add(i).write(id) };
    }
    ids.len()
}

/// Writes the calling context of the current thread's innermost rewritten frame (the method sampling) into
/// `stack` (outermost first, at most `cap` entries) and returns its true depth, as the reified stack would
/// have held them.
fn walk_into(engine: &RewritingEngine, jni: Jni, stack: *mut u32, cap: usize) -> usize {
    walked(engine, jni, |_, ids, _| write_ids(ids, stack, cap)).unwrap_or(0)
}

/// `Bc.walk(long stack, int cap)`: see `Bc.java` and the module comment.
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv; `stack` is the
/// address of `cap` writable entries of the calling thread's block.
pub(crate) unsafe extern "C" fn walk(env: *mut JNIEnv, _class: jclass, stack: jlong, cap: jint) -> jint {
    guard(0, || {
        let Some(engine) = RewritingEngine::get() else { return 0 };
        if stack == 0 || cap < 0 {
            return 0;
        }
        // SAFETY: the JVM passes the calling thread's JNIEnv.
        let jni = unsafe { Jni::from_raw(env) };
        let (stack, cap) = (stack as *mut u32, cap as usize);
        #[cfg(target_arch = "x86_64")]
        if FP.load(Ordering::Relaxed) {
            // This function's own frame begins the chain (kprof is built with frame pointers).
            let fp = crate::engine::stack::fp_chain::frame_pointer();
            if let Some(depth) = super::fp::walk_into(engine, jni, fp, stack, cap) {
                return depth.min(i32::MAX as usize) as jint;
            }
        }
        walk_into(engine, jni, stack, cap).min(i32::MAX as usize) as jint
    })
}
