//! What the sampling engines share: the table of sampled threads ([`threads`]), the threads found
//! running when a session starts ([`live`]), and a stack walk in a signal handler with AsyncGetCallTrace
//! recorded into the CCT through the thread's path cache ([`Walker`], [`record_stack`]).
//!
//! Everything here that a handler calls allocates nothing, takes no lock and calls nothing but
//! AsyncGetCallTrace and async-signal-safe system calls.

pub mod code_map;
pub mod fp_chain;
pub mod jvmti_path;
pub mod live;
pub mod own;
pub mod threads;

use crate::cct::{Cct, NodeId};
use crate::engine::Host;
use crate::frame::{FrameId, Pseudo};
use crate::jvmti::bindings::*;
use crate::jvmti::{vmstructs, Jni, Jvmti};
use std::ffi::c_void;
use std::sync::OnceLock;
use threads::{CallFrame, Entered, PathEntry};

pub use kprof_timers::gettid;

/// The signal of the wall engine's sampler. Not used by HotSpot (which handles SEGV, BUS, ILL, FPE, PIPE,
/// XFSZ, USR2, QUIT, HUP, INT, TERM), nor by the cpu engine's timers.
pub const WALL_SIGNAL: libc::c_int = libc::SIGVTALRM;

/// Every signal whose handler samples a thread's slot: each handler blocks them all, so that two never
/// nest on one thread.
pub const SIGNALS: [libc::c_int; 3] = [kprof_timers::SIGNAL, libc::SIGPROF, WALL_SIGNAL];

/// Whether `tid` is a thread of this process now.
pub fn is_own_thread(tid: i32) -> bool {
    kprof_timers::signals::is_own_thread(tid)
}

/// CLOCK_MONOTONIC in nanoseconds. Async-signal-safe (the vDSO, no lock).
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `ASGCT_CallTrace`.
#[repr(C)]
struct CallTrace {
    env: *mut c_void,
    num_frames: i32,
    frames: *mut CallFrame,
}

type AsgctFn = unsafe extern "C" fn(*mut CallTrace, i32, *mut c_void);

/// Finds AsyncGetCallTrace in the JVM.
fn find_asgct() -> Option<AsgctFn> {
    // SAFETY: dlsym/dlopen with NUL-terminated names; RTLD_NOLOAD never loads a new library.
    let mut p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"AsyncGetCallTrace".as_ptr()) };
    if p.is_null() {
        // SAFETY: as above.
        let handle = unsafe { libc::dlopen(c"libjvm.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !handle.is_null() {
            // SAFETY: as above.
            p = unsafe { libc::dlsym(handle, c"AsyncGetCallTrace".as_ptr()) };
        }
    }
    // SAFETY: the symbol is HotSpot's `void AsyncGetCallTrace(ASGCT_CallTrace*, jint, void*)`.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, AsgctFn>(p) })
}

/// Whether this JVM has AsyncGetCallTrace (an engine's `check`).
pub fn check_asgct() -> Result<(), String> {
    find_asgct().map(|_| ()).ok_or_else(|| "AsyncGetCallTrace not found in this JVM".to_string())
}

/// Sets up the JVMTI environment AsyncGetCallTrace needs for walks from a signal: ClassLoad events (it
/// refuses to walk stacks without them) and debug information at non-safepoint PCs (DebugNonSafepoints),
/// so that compiled and inlined frames interrupted anywhere are attributed precisely ([`keep_debug_info`]).
pub fn enable_stack_walks(host: &dyn Host) -> Result<(), String> {
    enable_walks(host, true)
}

/// The same for walks of a thread's own stack from a native call ([`own_stack`]): ClassLoad events only.
/// Its frames stop at calls, where compiled code always has debug information, so it needs no
/// DebugNonSafepoints, which costs the JIT time and code on every method it compiles.
pub fn enable_own_stack_walks(host: &dyn Host) -> Result<(), String> {
    enable_walks(host, false)
}

/// The walks' JVMTI environment, once made, and whether it has turned on debug information at non-safepoints.
static WALK_ENV: std::sync::Mutex<Option<(Jvmti, bool)>> = std::sync::Mutex::new(None);

fn enable_walks(host: &dyn Host, non_safepoint_debug: bool) -> Result<(), String> {
    let mut walk_env = WALK_ENV.lock().unwrap_or_else(|e| e.into_inner());
    let (env, on) = match &mut *walk_env {
        Some((env, on)) => (*env, on),
        None => {
            let env = host.vm().jvmti(JVMTI_VERSION_1_2).ok_or("no JVMTI environment")?;
            let callbacks = jvmtiEventCallbacks {
                ClassLoad: Some(on_class_load),
                CompiledMethodLoad: Some(on_compiled_method_load),
                ..Default::default()
            };
            env.set_event_callbacks(&callbacks).map_err(|e| format!("SetEventCallbacks: {e}"))?;
            env.set_event(JVMTI_EVENT_CLASS_LOAD, true).map_err(|e| format!("enabling ClassLoad: {e}"))?;
            let (_, on) = walk_env.insert((env, false));
            (env, on)
        }
    };
    if non_safepoint_debug && !*on {
        keep_debug_info(env)?;
        *on = true;
    }
    Ok(())
}

/// How debug information at every PC was asked for ([`debug_info_way`]): not (yet), kprof set the flag, the
/// flag was left as given (command line, file or tool), CompiledMethodLoad events.
static DEBUG_INFO: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub const DEBUG_INFO_FLAG_SET: u64 = 1;
pub const DEBUG_INFO_FLAG_GIVEN: u64 = 2;
pub const DEBUG_INFO_EVENT: u64 = 3;

/// How the signal-driven engines got debug information at every PC: 0 (not asked for), or one of
/// [`DEBUG_INFO_FLAG_SET`], [`DEBUG_INFO_FLAG_GIVEN`], [`DEBUG_INFO_EVENT`] (the profile's counter
/// `debug_info_at_every_pc`).
pub fn debug_info_way() -> u64 {
    DEBUG_INFO.load(std::sync::atomic::Ordering::Relaxed)
}

/// Makes the JIT record debug information at non-safepoint PCs from now on (for the JVM's life, as a
/// method compiled with it keeps it). HotSpot does so for a compilation when its flag DebugNonSafepoints
/// is on, or, with the flag at its default, while an agent has CompiledMethodLoad events enabled. kprof
/// sets the flag itself through HotSpot's flag table: the event would also make the JVM build and post
/// an address map of every method it compiles, for callbacks that need none (measured in
/// docs/BENCHMARKS.md). A flag set on the command line is left as it is; a JVM without the table gets the
/// event.
fn keep_debug_info(env: Jvmti) -> Result<(), String> {
    use std::sync::atomic::Ordering::Relaxed;
    if let Some(flag) = vmstructs::bool_flag(c"DebugNonSafepoints") {
        if (flag.default_origin || NON_SAFEPOINT_DEBUG_PINNED_OFF.load(Relaxed)) && !flag.get() {
            flag.set(true);
            DEBUG_INFO.store(DEBUG_INFO_FLAG_SET, Relaxed);
        } else {
            DEBUG_INFO.store(DEBUG_INFO_FLAG_GIVEN, Relaxed);
        }
        return Ok(());
    }
    DEBUG_INFO.store(DEBUG_INFO_EVENT, Relaxed);
    let potential = env.potential_capabilities().map_err(|e| format!("GetPotentialCapabilities: {e}"))?;
    if potential.can_generate_compiled_method_load_events() != 0 {
        let mut caps = jvmtiCapabilities::default();
        caps.set_can_generate_compiled_method_load_events(1);
        env.add_capabilities(&caps).map_err(|e| format!("AddCapabilities: {e}"))?;
        // Fails without its capability; nothing else depends on it.
        let _ = env.set_event(JVMTI_EVENT_COMPILED_METHOD_LOAD, true);
    }
    Ok(())
}

/// kprof marked `DebugNonSafepoints` off as the VM's own choice ([`keep_non_safepoint_debug_off`]): an
/// engine that needs it may still turn it on.
static NON_SAFEPOINT_DEBUG_PINNED_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For an agent that enables CompiledMethodLoad events for what they say, not to make the JIT keep debug
/// information at every PC (`stack=fp` reads only calls' return addresses): HotSpot records it for every
/// compilation while such events are enabled and `DebugNonSafepoints` is at its default, which costs
/// compile time, code cache and larger events. Marks the flag, where it is off at its default, as the
/// VM's choice; an engine that wants the information ([`enable_stack_walks`]) turns it on all the same.
pub fn keep_non_safepoint_debug_off() {
    use std::sync::atomic::Ordering::Relaxed;
    if let Some(mut flag) = vmstructs::bool_flag(c"DebugNonSafepoints") {
        if flag.default_origin && !flag.get() {
            NON_SAFEPOINT_DEBUG_PINNED_OFF.store(true, Relaxed);
            flag.mark_ergonomic();
        }
    }
}

/// AsyncGetCallTrace of the calling thread, from a native method it called (its state is `in native`, its
/// last Java frame set, so the walk starts there and needs no signal context): fills `frames` innermost
/// first and returns how many, or None where the walk gave none (the caller then walks another way).
/// Needs [`enable_own_stack_walks`] first.
pub fn own_stack(jni: Jni, frames: &mut [CallFrame]) -> Option<usize> {
    static ASGCT: OnceLock<Option<AsgctFn>> = OnceLock::new();
    let asgct = (*ASGCT.get_or_init(find_asgct))?;
    if frames.is_empty() {
        return None;
    }
    let depth = frames.len().min(i32::MAX as usize) as i32;
    let mut trace = CallTrace { env: jni.raw() as *mut c_void, num_frames: 0, frames: frames.as_mut_ptr() };
    // SAFETY: `jni` is the calling thread's JNIEnv (a `Jni` is only made from one), `trace.frames` a
    // buffer of `depth` frames it owns for the call. With a null context AsyncGetCallTrace walks from the
    // thread's last Java frame, which a thread in a native method has set; on any other thread it gives
    // an error code, not a walk.
    unsafe { asgct(&mut trace, depth, std::ptr::null_mut()) };
    (trace.num_frames > 0).then_some(trace.num_frames as usize)
}

unsafe extern "C" fn on_class_load(_jvmti: *mut jvmtiEnv, _jni: *mut JNIEnv, _thread: jthread, _klass: jclass) {}

unsafe extern "C" fn on_compiled_method_load(
    _jvmti: *mut jvmtiEnv,
    _method: jmethodID,
    _code_size: jint,
    _code_addr: *const c_void,
    _map_length: jint,
    _map: *const jvmtiAddrLocationMap,
    _compile_info: *const c_void,
) {
}

/// What a walk found: the frames (callee first) or AsyncGetCallTrace's (non-positive) result code.
pub enum Walk<'a> {
    Stack {
        frames: &'a [CallFrame],
        /// The stack was at least `depth` deep: outer frames are cut.
        truncated: bool,
        /// The first walk failed and a walk from the caller's frame succeeded.
        recovered: bool,
    },
    Failed(i32),
}

/// AsyncGetCallTrace with a depth limit.
#[derive(Clone, Copy)]
pub struct Walker {
    asgct: AsgctFn,
    pub depth: u32,
}

impl Walker {
    pub fn new(depth: u32) -> Result<Walker, String> {
        let asgct = find_asgct().ok_or("AsyncGetCallTrace not found in this JVM")?;
        Ok(Walker { asgct, depth })
    }

    /// Walks the interrupted thread's stack into its slot's frame buffer. When the top frame is not
    /// walkable (-5, -6: typically a stub or a method prologue that has not set up its frame yet), walks
    /// again as if the top function had returned: its caller usually is walkable.
    ///
    /// # Safety
    /// Runs in a signal handler on the thread `slot` belongs to; `ucontext` is the interrupted context
    /// the kernel passed to the handler.
    pub unsafe fn walk<'a>(&self, slot: &'a Entered, ucontext: *mut c_void) -> Walk<'a> {
        let (frames, len) = slot.frames();
        let depth = len.min(self.depth);
        let mut trace = CallTrace { env: slot.env(), num_frames: 0, frames };
        // SAFETY: `trace` points to this thread's JNIEnv and a buffer of `depth` frames owned by the slot
        // (never freed); `ucontext` is the interrupted context. AsyncGetCallTrace is designed to run in a
        // signal handler on the sampled thread.
        unsafe { (self.asgct)(&mut trace, depth as i32, ucontext) };
        let mut recovered = false;
        if matches!(trace.num_frames, -5 | -6) {
            let first = trace.num_frames;
            for words in [1, 2] {
                // SAFETY: `ucontext` is the interrupted context; the copy reads a word or two at the stack
                // pointer (mapped stack memory).
                let Some(mut uc) = (unsafe { caller_context(ucontext, words) }) else { break };
                trace.num_frames = 0;
                // SAFETY: as for the first call, with a context that describes the caller.
                unsafe { (self.asgct)(&mut trace, depth as i32, &mut uc as *mut libc::ucontext_t as *mut c_void) };
                if trace.num_frames > 0 {
                    recovered = true;
                    break;
                }
            }
            if trace.num_frames <= 0 {
                trace.num_frames = first;
            }
        }
        if trace.num_frames > 0 {
            let n = (trace.num_frames as usize).min(depth as usize);
            // SAFETY: AsyncGetCallTrace filled `num_frames` (<= depth) entries of the buffer.
            let frames = unsafe { std::slice::from_raw_parts(frames, n) };
            Walk::Stack { frames, truncated: trace.num_frames as u32 >= depth, recovered }
        } else {
            Walk::Failed(trace.num_frames)
        }
    }
}

/// The node of a walk below `root`: the stack's innermost frame, or the pseudo-frame of a failed walk.
/// Walks the CCT only from where the stack differs from the thread's previous sample (Komorium's path
/// cache): hash probes are cache misses, and consecutive samples of a thread mostly share their outer
/// frames. Each frame's callsite is the bci its caller was executing.
pub fn record_stack(cct: &Cct, slot: &Entered, root: NodeId, walk: &Walk) -> NodeId {
    let (stack, truncated) = match walk {
        Walk::Stack { frames, truncated, .. } => (*frames, *truncated),
        Walk::Failed(code) => {
            return cct.child(root, FrameId::pseudo(Pseudo::from_asgct(*code)), -1).unwrap_or(cct.overflow())
        }
    };
    let base = if truncated {
        cct.child(root, FrameId::pseudo(Pseudo::Truncated), -1).unwrap_or(cct.overflow())
    } else {
        root
    };
    let (path, cached_base, cached_len) = slot.path();
    let mut valid = if cached_base == base { cached_len.min(path.len()) } else { 0 };
    let mut node = base;
    let mut len = 0;
    for (k, i) in (0..stack.len()).rev().enumerate() {
        if node == cct.overflow() || k >= path.len() {
            break;
        }
        let f = stack[i];
        let callsite = stack.get(i + 1).map_or(-1, |caller| caller.lineno.max(-1));
        let id = if f.method_id.is_null() {
            FrameId::pseudo(Pseudo::UnknownJava)
        } else if f.lineno == -3 {
            FrameId::jnative(f.method_id as u64)
        } else {
            FrameId::jmethod(f.method_id as u64)
        };
        if k < valid && path[k].frame == id.0 && path[k].callsite == callsite {
            node = path[k].node;
        } else {
            valid = 0;
            node = cct.child(node, id, callsite).unwrap_or(cct.overflow());
            path[k] = PathEntry { frame: id.0, callsite, node };
        }
        len = k + 1;
    }
    slot.set_path(base, if node == cct.overflow() { 0 } else { len });
    node
}

/// A copy of `ucontext` that describes the state right after the interrupted function returns: the
/// return address at the stack pointer becomes the PC (x86-64), or the link register does (aarch64).
/// Exact at a function's first instruction and in frameless stubs; elsewhere AsyncGetCallTrace rejects
/// the made-up state, which costs nothing but the retry.
///
/// # Safety
/// `ucontext` must be the context the kernel passed to the signal handler.
#[allow(unused_variables)]
unsafe fn caller_context(ucontext: *mut c_void, words: usize) -> Option<libc::ucontext_t> {
    if ucontext.is_null() {
        return None;
    }
    // SAFETY: the kernel's ucontext is a valid, initialised ucontext_t.
    let mut uc: libc::ucontext_t = unsafe { std::ptr::read(ucontext as *const libc::ucontext_t) };
    #[cfg(target_arch = "x86_64")]
    {
        let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize;
        if sp == 0 || sp % 8 != 0 {
            return None;
        }
        // SAFETY: the interrupted thread's stack pointer points into its mapped, readable stack.
        let ret = unsafe { (sp as *const usize).add(words - 1).read() };
        if words == 2 {
            // The word below the return address is the caller's saved frame pointer.
            // SAFETY: as above.
            uc.uc_mcontext.gregs[libc::REG_RBP as usize] = unsafe { (sp as *const i64).read() };
        }
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] = ret as i64;
        uc.uc_mcontext.gregs[libc::REG_RSP as usize] = (sp + 8 * words) as i64;
        Some(uc)
    }
    #[cfg(target_arch = "aarch64")]
    {
        if words != 1 {
            return None;
        }
        uc.uc_mcontext.pc = uc.uc_mcontext.regs[30];
        Some(uc)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

/// Saves and restores `errno` around a handler's work: the interrupted code must find it as it left it.
pub struct ErrnoGuard(i32);

impl ErrnoGuard {
    #[inline]
    pub fn save() -> ErrnoGuard {
        // SAFETY: errno is thread-local and always addressable.
        ErrnoGuard(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = self.0 };
    }
}
