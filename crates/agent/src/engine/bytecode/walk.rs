//! `stack=walk`: a sample's calling context from the thread's own stack instead of a reified one.
//!
//! Rewritten code then keeps no stack at all (no push in prologues, no depth restored at returns): when a
//! period runs out, `Bc.walk` reads the current thread's Java frames, inlined ones included, with
//! AsyncGetCallTrace from that native call (the thread walks its own stack from its last Java frame, in
//! place: no signal, no safepoint; JVMTI GetStackTrace, which builds a frame object for each, where that
//! gives nothing or a walk not to be trusted: [`walk_into`]), and keeps only the frames the reified stack
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
use crate::engine::stack::{self, threads::CallFrame};
use crate::engine::Host;
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::Jni;
use kprof_classfile::transform::methods::{STACK_NONE, STACK_PUSHED};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Frames asked for first; a deeper stack doubles the buffer up to [`MAX_FRAMES`].
const FIRST_FRAMES: usize = 256;
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
static EPOCH: AtomicU64 = AtomicU64::new(1);
/// The classes loaded before the session have been retransformed: a method found not rewritten now stays
/// so (later classes are rewritten before they are defined), so that answer may be cached.
static SETTLED: AtomicBool = AtomicBool::new(false);

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
fn kind_of(engine: &RewritingEngine, jni: Jni, m: jmethodID) -> (u32, u8) {
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
const STACK_CARRIER: u8 = u8::MAX;

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
static WALKS: AtomicU64 = AtomicU64::new(0);
static WALKS_JVMTI: AtomicU64 = AtomicU64::new(0);

/// (walks, walks JVMTI made) since the agent started.
pub(crate) fn walks() -> (u64, u64) {
    (WALKS.load(Ordering::Relaxed), WALKS_JVMTI.load(Ordering::Relaxed))
}

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

/// The thread's frame buffers (one per way of walking) and the ids it keeps (innermost first).
#[derive(Default)]
struct Buffers {
    frames: Vec<jvmtiFrameInfo>,
    call_frames: Vec<CallFrame>,
    methods: Vec<jmethodID>,
    ids: Vec<u32>,
    /// The outermost frame's method in the thread's last walk that JVMTI made or confirmed.
    bottom: Option<jmethodID>,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// Runs `walk` on `buffer`, doubling it (up to [`MAX_FRAMES`]) while a walk fills it: the frames it
/// wrote, or None where it gave none.
fn walk_all<T: Clone>(buffer: &mut Vec<T>, blank: T, mut walk: impl FnMut(&mut [T]) -> Option<usize>) -> Option<usize> {
    if buffer.is_empty() {
        buffer.resize(FIRST_FRAMES, blank.clone());
    }
    loop {
        let n = walk(buffer)?;
        if n < buffer.len() || buffer.len() >= MAX_FRAMES {
            return Some(n);
        }
        let more = buffer.len() * 2;
        buffer.resize(more, blank.clone());
    }
}

/// The current thread's Java frames' methods, innermost first, into `b.methods`: AsyncGetCallTrace where
/// `fast` and it walks, else JVMTI. None if neither did; else whether AsyncGetCallTrace did.
fn own_frames(engine: &RewritingEngine, jni: Jni, b: &mut Buffers, fast: bool) -> Option<bool> {
    b.methods.clear();
    if fast && OWN_WALKS.load(Ordering::Acquire) {
        let blank = CallFrame { lineno: 0, method_id: std::ptr::null_mut() };
        if let Some(n) = walk_all(&mut b.call_frames, blank, |frames| stack::own_stack(jni, frames)) {
            b.methods.extend(b.call_frames[..n].iter().map(|f| f.method_id as jmethodID));
            return Some(true);
        }
    }
    let n = walk_all(&mut b.frames, jvmtiFrameInfo::default(), |frames| engine.jvmti.own_stack_trace(frames).ok())?;
    b.methods.extend(b.frames[..n].iter().map(|f| f.method));
    Some(false)
}

/// Writes the calling context of the current thread's innermost rewritten frame (the method sampling) into
/// `stack` (outermost first, at most `cap` entries) and returns its true depth, as the reified stack would
/// have held them.
fn walk_into(engine: &RewritingEngine, jni: Jni, stack: *mut u32, cap: usize) -> usize {
    BUFFERS.with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else { return 0 };
        let mut fast = true;
        loop {
            let Some(by_asgct) = own_frames(engine, jni, &mut b, fast) else { return 0 };
            let Buffers { methods, ids, bottom, .. } = &mut *b;
            // AsyncGetCallTrace may end a walk early without saying so (a frame whose sender it does not
            // trust: Java code the VM called from a runtime stub, as when compiled code throws an
            // exception the VM makes), which JVMTI walks through. A walk that does not end where the
            // thread's last trusted one ended is made again by JVMTI, whose end is then trusted; so is one
            // with a frame it has no method id for (JVMTI makes the id), which would otherwise be dropped.
            let outermost = methods.last().copied();
            if by_asgct && (outermost != *bottom || methods.iter().any(|m| m.is_null())) {
                fast = false;
                continue;
            }
            *bottom = outermost;
            ids.clear();
            let mut sampler_seen = false;
            let mut carrier = false;
            for &m in methods.iter() {
                if m.is_null() {
                    continue;
                }
                let (id, kind) = kind_of(engine, jni, m);
                if kind == STACK_CARRIER {
                    carrier = true;
                    break;
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
            // A virtual thread: AsyncGetCallTrace sees only the frames thawed onto its carrier's stack
            // (the others wait in the continuation's stack chunk), JVMTI sees them all.
            if carrier && by_asgct {
                fast = false;
                continue;
            }
            WALKS.fetch_add(1, Ordering::Relaxed);
            if !by_asgct {
                WALKS_JVMTI.fetch_add(1, Ordering::Relaxed);
            }
            break;
        }
        let ids = &b.ids;
        let depth = ids.len();
        for (i, &id) in ids.iter().rev().take(cap).enumerate() {
            // SAFETY: `stack` is the thread's block's stack of `cap` entries (`Bc.walk`'s contract), and
            // `i < cap`.
            unsafe { stack.add(i).write(id) };
        }
        depth
    })
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
        walk_into(engine, jni, stack as *mut u32, cap as usize).min(i32::MAX as usize) as jint
    })
}
