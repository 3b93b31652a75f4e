//! mode=asgct (the cpu engine): CPU-time sampling of Java threads from a timer signal with
//! AsyncGetCallTrace.
//!
//! Each Java thread gets its own timer ([`timer`]) when it is registered; the signal handler
//! ([`Sampler::on_signal`]) runs on the sampled thread, asks AsyncGetCallTrace for its stack and adds the
//! sample to the CCT. The handler allocates nothing, takes no lock and calls nothing but
//! AsyncGetCallTrace and `gettid`.

pub mod threads;

use crate::cct::{Cct, Metric, NodeId};
use crate::engine::{fields, format_interval, Engine, Host, Phase, OWN_THREAD_PREFIX};
use crate::frame::{FrameId, Pseudo};
use crate::jvmti::bindings::*;
use crate::jvmti::{vmstructs, Jni, Jvmti};
use kprof_profile::Meta;
use kprof_protocol::options::{EngineKind, Options};
use kprof_timers::{self as timer, gettid, TimerKind};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use threads::{CallFrame, ACTIVE, REGISTRY, SLOTS};

/// The cpu engine: the sampler of the current session, and the JVMTI environment that keeps
/// AsyncGetCallTrace working.
pub struct AsgctEngine {
    host: &'static dyn Host,
    /// The session's sampler, once started (samplers are never freed: a late signal may reach one).
    sampler: Mutex<Option<&'static Sampler>>,
}

static ENGINE: OnceLock<AsgctEngine> = OnceLock::new();

/// Creates the cpu engine. Its JVMTI environment enables what AsyncGetCallTrace needs: ClassLoad events
/// (it refuses to walk stacks without them) and CompiledMethodLoad, which makes HotSpot keep debug
/// information at non-safepoint PCs (DebugNonSafepoints), so compiled and inlined frames are attributed
/// precisely.
pub fn create(host: &'static dyn Host, _options: &Options, _phase: Phase) -> Result<&'static dyn Engine, String> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    enable_stack_walks(host)?;
    Ok(ENGINE.get_or_init(|| AsgctEngine { host, sampler: Mutex::new(None) }))
}

/// Sets up, once, the JVMTI environment that AsyncGetCallTrace needs (see [`create`]).
pub fn enable_stack_walks(host: &dyn Host) -> Result<(), String> {
    static ENV: OnceLock<Jvmti> = OnceLock::new();
    if ENV.get().is_some() {
        return Ok(());
    }
    let env = host.vm().jvmti(JVMTI_VERSION_1_2).ok_or("no JVMTI environment")?;
    let potential = env.potential_capabilities().map_err(|e| format!("GetPotentialCapabilities: {e}"))?;
    let mut caps = jvmtiCapabilities::default();
    if potential.can_generate_compiled_method_load_events() != 0 {
        caps.set_can_generate_compiled_method_load_events(1);
    }
    env.add_capabilities(&caps).map_err(|e| format!("AddCapabilities: {e}"))?;
    let callbacks = jvmtiEventCallbacks {
        ClassLoad: Some(on_class_load),
        CompiledMethodLoad: Some(on_compiled_method_load),
        ..Default::default()
    };
    env.set_event_callbacks(&callbacks).map_err(|e| format!("SetEventCallbacks: {e}"))?;
    env.set_event(JVMTI_EVENT_CLASS_LOAD, true).map_err(|e| format!("enabling ClassLoad: {e}"))?;
    // Fails without its capability; nothing else depends on it.
    let _ = env.set_event(JVMTI_EVENT_COMPILED_METHOD_LOAD, true);
    let _ = ENV.set(env);
    Ok(())
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

impl AsgctEngine {
    fn sampler(&self) -> Option<&'static Sampler> {
        *self.sampler.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the threads that already run: the calling thread directly, the others through
    /// `Thread.eetop` and HotSpot's structure table (see [`vmstructs`]). Caller holds the session lock.
    fn register_live_threads(&self, jni: Jni, jvmti: Jvmti) {
        let Some(sampler) = self.sampler() else { return };
        let offsets = vmstructs::thread_offsets();
        let Some(eetop) = jni.find_class("java/lang/Thread").and_then(|k| {
            let f = jni.field_id(k, "eetop", "J");
            jni.delete_local_ref(k);
            f
        }) else {
            self.host.say("cannot read Thread.eetop; only threads that start from now on are sampled");
            return;
        };
        let Ok(current) = jvmti.current_thread() else { return };
        let my_tid = gettid();
        let my_env = jni.raw() as usize;
        let my_eetop = jni.long_field(current, eetop) as usize;
        jni.delete_local_ref(current);
        // The JNIEnv lives inside the JavaThread at the same offset in every thread.
        let env_offset = my_env.wrapping_sub(my_eetop);
        let env_offset_ok = my_eetop != 0 && env_offset < 1 << 16;
        let Ok(threads) = jvmti.all_threads() else { return };
        let mut skipped = 0;
        for &t in threads.as_slice() {
            let name = jvmti.thread_name(t).unwrap_or_default();
            let top = jni.long_field(t, eetop) as usize;
            jni.delete_local_ref(t);
            if name.starts_with(OWN_THREAD_PREFIX) || top == 0 {
                continue;
            }
            let target = if top == my_eetop {
                Some((my_tid, my_env))
            } else if env_offset_ok {
                // SAFETY: `top` is the JavaThread* of a live thread listed by GetAllThreads a moment ago.
                let tid = unsafe { vmstructs::thread_tid(top, offsets) };
                let env = top + env_offset;
                // A JNIEnv's first word is the JNI function table, the same for every thread.
                // SAFETY: both addresses lie inside live JavaThread objects.
                let same_table = unsafe { *(env as *const usize) == *(my_env as *const usize) };
                tid.filter(|_| same_table).map(|tid| (tid, env))
            } else {
                None
            };
            match target {
                Some((tid, env)) => {
                    let root = self.host.thread_root(&name);
                    if let Err(e) = sampler.register(tid, env as *mut c_void, root) {
                        self.host.note_once(&e);
                    }
                }
                None => skipped += 1,
            }
        }
        if skipped > 0 {
            self.host.say(&format!("{skipped} running thread(s) could not be located and are not sampled"));
        }
    }
}

impl Engine for AsgctEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Asgct
    }

    fn check(&self, _options: &Options) -> Result<(), String> {
        find_asgct().map(|_| ()).ok_or_else(|| "AsyncGetCallTrace not found in this JVM".to_string())
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        let host = self.host;
        let sampler = Sampler::start(host.cct(), o.timer, o.interval_ns, o.depth, &mut |n| host.say(&n))?;
        *self.sampler.lock().unwrap_or_else(|e| e.into_inner()) = Some(sampler);
        let jvmti = host.vm().jvmti(JVMTI_VERSION_1_2).ok_or("no JVMTI environment")?;
        self.register_live_threads(jni, jvmti);
        Ok(format!("timer={} interval={}", sampler.timer.name(), format_interval(o.interval_ns)))
    }

    fn stop(&self, _jni: Option<Jni>, _restore: bool) {
        if let Some(s) = self.sampler() {
            s.stop();
        }
    }

    fn thread_start(&self, jni: Jni, _thread: jthread, root: NodeId) {
        let Some(sampler) = self.sampler().filter(|s| s.is_running()) else { return };
        if let Err(e) = sampler.register(gettid(), jni.raw() as *mut c_void, root) {
            self.host.note_once(&e);
        }
    }

    fn thread_end(&self, _jni: Jni, _thread: jthread) {
        if let Some(s) = self.sampler() {
            s.unregister(gettid());
        }
    }

    fn describe(&self, o: &Options, meta: &mut Meta) {
        meta.interval = o.interval_ns;
        let Some(s) = self.sampler() else { return };
        meta.timer = s.timer.name().to_string();
        let c = &mut meta.counters;
        c.insert("samples".into(), s.stats.samples.load(Ordering::Relaxed));
        c.insert("usable_samples".into(), s.stats.usable.load(Ordering::Relaxed));
        c.insert("dropped_samples".into(), s.stats.dropped.load(Ordering::Relaxed));
        c.insert("recovered_samples".into(), s.stats.recovered.load(Ordering::Relaxed));
        c.insert("foreign_thread_samples".into(), s.stats.foreign.load(Ordering::Relaxed));
        c.insert("threads_sampled".into(), s.stats.threads.load(Ordering::Relaxed));
        c.insert("threads_refused".into(), s.stats.threads_refused.load(Ordering::Relaxed));
        c.insert("sampled_cpu_ns".into(), s.sampled_cpu_ns());
    }

    fn summary(&self, meta: &Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        let samples = c("samples");
        let usable = if samples > 0 { 100.0 * c("usable_samples") as f64 / samples as f64 } else { 0.0 };
        let cpu_s = c("sampled_cpu_ns") as f64 / 1e9;
        let rate = if cpu_s > 0.0 { (samples - c("foreign_thread_samples")) as f64 / cpu_s } else { 0.0 };
        let mut timer = if meta.timer.is_empty() { "none" } else { meta.timer.as_str() }.to_string();
        if timer == "perf" {
            // Which ticks the perf event could take: the user's CPU time only under perf_event_paranoid=2.
            timer.push_str(if timer::perf_counts_kernel_ticks() { " ticks=user+kernel" } else { " ticks=user" });
        }
        format!(
            "timer={timer} interval={} samples={samples} usable={usable:.1}% recovered={} rate={rate:.0}/cpu-s cpu={cpu_s:.2}s {}",
            format_interval(meta.interval),
            c("recovered_samples"),
            fields(meta, &[("dropped", "dropped_samples"), ("threads", "threads_sampled")])
        )
    }
}

/// `ASGCT_CallTrace`.
#[repr(C)]
struct CallTrace {
    env: *mut c_void,
    num_frames: i32,
    frames: *mut CallFrame,
}

type AsgctFn = unsafe extern "C" fn(*mut CallTrace, i32, *mut c_void);

/// Sampling counters.
#[derive(Default)]
pub struct SamplerStats {
    /// Samples recorded in the CCT.
    pub samples: AtomicU64,
    /// Samples with at least one Java frame.
    pub usable: AtomicU64,
    /// Signals that could not be turned into a sample (handler busy, thread being removed).
    pub dropped: AtomicU64,
    /// itimer signals that landed on a thread that is not a registered Java thread.
    pub foreign: AtomicU64,
    /// Threads that got a timer.
    pub threads: AtomicU64,
    /// Threads that could not get a timer (no free slot, timer refused).
    pub threads_refused: AtomicU64,
    /// Samples whose first walk failed and that a walk from the caller's frame recovered.
    pub recovered: AtomicU64,
    /// CPU time of sampled threads that have ended or been removed, nanoseconds.
    pub cpu_ns_done: AtomicU64,
}

/// The running sampler. One per process, leaked on start (the handler may run until the process ends).
pub struct Sampler {
    cct: &'static Cct,
    asgct: AsgctFn,
    /// The timer that actually runs (never `Auto`).
    pub timer: TimerKind,
    pub interval_ns: u64,
    depth: u32,
    running: AtomicBool,
    pub stats: SamplerStats,
}

static SAMPLER: AtomicPtr<Sampler> = AtomicPtr::new(std::ptr::null_mut());

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

/// Whether the kernel lets this process open a per-thread perf cpu-clock event.
fn perf_allowed(interval_ns: u64) -> Result<(), String> {
    timer::perf_probe(timer::gettid(), interval_ns).map_err(|e| e.to_string())
}

impl Sampler {
    /// Chooses the timer, installs the signal handler and returns a new sampler (not yet sampling any
    /// thread: see [`Sampler::register`]); it replaces a stopped one, which stays allocated for late
    /// signals. `note` receives one line per decision worth reporting
    /// (a fallback from perf to ctimer, say).
    pub fn start(
        cct: &'static Cct,
        asked: TimerKind,
        interval_ns: u64,
        depth: u32,
        note: &mut dyn FnMut(String),
    ) -> Result<&'static Sampler, String> {
        if Sampler::get().is_some_and(|s| s.is_running()) {
            return Err("already sampling".into());
        }
        let asgct = find_asgct().ok_or("AsyncGetCallTrace not found in this JVM")?;
        let timer = match asked {
            TimerKind::Auto => match perf_allowed(interval_ns) {
                Ok(()) => TimerKind::Perf,
                Err(e) => {
                    note(format!(
                        "perf_event_open refused ({e}); using timer=ctimer (at most one sample per kernel tick)"
                    ));
                    TimerKind::Ctimer
                }
            },
            TimerKind::Perf => {
                perf_allowed(interval_ns)
                    .map_err(|e| format!("timer=perf: perf_event_open refused ({e}); try timer=ctimer"))?;
                TimerKind::Perf
            }
            other => other,
        };
        let sampler: &'static Sampler = Box::leak(Box::new(Sampler {
            cct,
            asgct,
            timer,
            interval_ns,
            depth,
            running: AtomicBool::new(true),
            stats: SamplerStats::default(),
        }));
        SAMPLER.store(sampler as *const Sampler as *mut Sampler, Ordering::Release);
        static HANDLER: std::sync::Once = std::sync::Once::new();
        let mut installed = Ok(());
        HANDLER.call_once(|| installed = install_handler());
        installed?;
        if timer == TimerKind::Itimer {
            timer::itimer_set(Some(interval_ns)).map_err(|e| format!("setitimer: {e}"))?;
        }
        Ok(sampler)
    }

    /// The sampler, once started.
    pub fn get() -> Option<&'static Sampler> {
        let p = SAMPLER.load(Ordering::Acquire);
        // SAFETY: the pointer is either null or a leaked `Sampler` that lives until the process exits.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Starts sampling thread `tid` whose JNIEnv is `env`; its samples go below CCT node `root`.
    pub fn register(&self, tid: i32, env: *mut c_void, root: NodeId) -> Result<(), String> {
        let _guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        if threads::lookup(tid).is_some_and(|s| s.state.load(Ordering::Acquire) == ACTIVE) {
            return Ok(());
        }
        let Some(idx) = threads::claim(tid, env, root, self.depth) else {
            self.stats.threads_refused.fetch_add(1, Ordering::Relaxed);
            return Err(format!("more than {} threads at once", threads::MAX_THREADS));
        };
        let slot = &SLOTS[idx];
        slot.cpu_start_ns.store(timer::thread_cpu_ns(tid).unwrap_or(0), Ordering::Relaxed);
        // Publish the slot before the timer can fire.
        threads::activate(idx);
        let armed = match self.timer {
            TimerKind::Perf => timer::perf_open(tid, self.interval_ns).map(|t| {
                slot.perf_ring.store(t.ring, Ordering::Release);
                slot.perf_fd.store(t.fd, Ordering::Release);
            }),
            TimerKind::Ctimer => timer::ctimer_create(tid, self.interval_ns, idx as i32)
                .map(|t| slot.ctimer.store(t + 1, Ordering::Release)),
            TimerKind::Itimer | TimerKind::Auto => Ok(()),
        };
        match armed {
            Ok(()) => {
                self.stats.threads.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                threads::deactivate(idx);
                threads::release(idx);
                self.stats.threads_refused.fetch_add(1, Ordering::Relaxed);
                Err(format!("{} timer for thread {tid}: {e}", self.timer.name()))
            }
        }
    }

    /// Stops sampling thread `tid` (at ThreadEnd, on the thread itself, or when sampling stops).
    pub fn unregister(&self, tid: i32) {
        let _guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = threads::lookup(tid) {
            let idx = (slot as *const _ as usize - SLOTS.as_ptr() as usize) / std::mem::size_of::<threads::Slot>();
            self.remove_slot(idx);
        }
    }

    /// Caller holds REGISTRY.
    fn remove_slot(&self, idx: usize) {
        let slot = &SLOTS[idx];
        threads::deactivate(idx);
        let fd = slot.perf_fd.swap(-1, Ordering::AcqRel);
        let ring = slot.perf_ring.swap(0, Ordering::AcqRel);
        if fd >= 0 {
            timer::perf_close(timer::PerfTimer { fd, ring });
        }
        let t = slot.ctimer.swap(0, Ordering::AcqRel);
        if t != 0 {
            timer::ctimer_delete(t - 1);
        }
        let tid = slot.tid.load(Ordering::Relaxed);
        if let Some(now) = timer::thread_cpu_ns(tid) {
            let used = now.saturating_sub(slot.cpu_start_ns.load(Ordering::Relaxed));
            self.stats.cpu_ns_done.fetch_add(used, Ordering::Relaxed);
        }
        threads::release(idx);
    }

    /// Stops sampling every thread; the handler stays installed (a late signal is ignored).
    pub fn stop(&self) {
        self.running.store(false, Ordering::Release);
        if self.timer == TimerKind::Itimer {
            let _ = timer::itimer_set(None);
        }
        let _guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        for idx in threads::in_use() {
            self.remove_slot(idx);
        }
    }

    /// CPU time of the sampled threads so far (ended ones plus the live ones), nanoseconds.
    pub fn sampled_cpu_ns(&self) -> u64 {
        let _guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let live: u64 = threads::in_use()
            .into_iter()
            .map(|i| {
                let s = &SLOTS[i];
                timer::thread_cpu_ns(s.tid.load(Ordering::Relaxed))
                    .unwrap_or(0)
                    .saturating_sub(s.cpu_start_ns.load(Ordering::Relaxed))
            })
            .sum();
        live + self.stats.cpu_ns_done.load(Ordering::Relaxed)
    }

    /// The signal handler's work. Runs on the interrupted thread.
    ///
    /// # Safety
    /// `info` and `ucontext` must be what the kernel passed to the SA_SIGINFO handler.
    unsafe fn on_signal(&self, info: *const libc::siginfo_t, ucontext: *mut c_void) {
        // SAFETY: forwarded from the handler's contract.
        let si = unsafe { timer::SigInfo::read(info) };
        let tid = timer::gettid();
        let Some(slot) = threads::lookup(tid) else {
            if self.timer == TimerKind::Itimer && self.is_running() {
                // The process-wide timer hit a thread that runs no Java code (GC, JIT, ...): an unusable
                // sample, counted as the baseline counts it.
                self.stats.foreign.fetch_add(1, Ordering::Relaxed);
                self.record_pseudo(crate::cct::ROOT, Pseudo::NotJava, self.interval_ns);
            } else {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        // Claim the slot before checking that it is active: `threads::deactivate` sets the state and then
        // waits for `busy` to clear (both SeqCst), so either it sees us busy and waits, or we see it ending.
        if slot.busy.swap(true, Ordering::SeqCst) {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if slot.state.load(Ordering::SeqCst) != ACTIVE || !self.is_running() {
            if self.timer == TimerKind::Perf {
                // Keep the ring from filling: a full ring would write no record and send no signal.
                timer::perf_consume(slot.perf_ring.load(Ordering::Acquire));
            }
            slot.busy.store(false, Ordering::Release);
            return;
        }
        let weight = match self.timer {
            TimerKind::Ctimer if si.code == timer::SI_TIMER => {
                self.interval_ns.saturating_mul(1 + si.overrun.max(0) as u64)
            }
            _ => self.interval_ns,
        };
        let frames = slot.frames.load(Ordering::Acquire);
        let depth = slot.frames_len.load(Ordering::Acquire).min(self.depth);
        let mut trace = CallTrace { env: slot.env.load(Ordering::Relaxed), num_frames: 0, frames };
        // SAFETY: `trace` points to this thread's JNIEnv and a buffer of `depth` frames owned by the slot
        // (never freed); `ucontext` is the interrupted context. AsyncGetCallTrace is designed to run in a
        // signal handler on the sampled thread.
        unsafe { (self.asgct)(&mut trace, depth as i32, ucontext) };
        if matches!(trace.num_frames, -5 | -6) {
            // The top frame is not walkable (typically a stub or a method prologue that has not set up
            // its frame yet). Retry as if the top function had returned: its caller usually is walkable.
            // SAFETY: `ucontext` is the interrupted context; `retry_from_caller` reads one word at the
            // stack pointer (mapped stack memory) and works on a copy.
            let first = trace.num_frames;
            for words in [1, 2] {
                // SAFETY: as above.
                let Some(mut uc) = (unsafe { caller_context(ucontext, words) }) else { break };
                trace.num_frames = 0;
                // SAFETY: as for the first call, with a context that describes the caller.
                unsafe { (self.asgct)(&mut trace, depth as i32, &mut uc as *mut libc::ucontext_t as *mut c_void) };
                if trace.num_frames > 0 {
                    self.stats.recovered.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
            if trace.num_frames <= 0 {
                trace.num_frames = first;
            }
        }
        let root = slot.root.load(Ordering::Relaxed);
        if trace.num_frames > 0 {
            // SAFETY: AsyncGetCallTrace filled `num_frames` (<= depth) entries of the buffer.
            let stack = unsafe { std::slice::from_raw_parts(frames, (trace.num_frames as usize).min(depth as usize)) };
            self.record_stack(slot, root, stack, trace.num_frames as u32 >= depth, weight);
            self.stats.usable.fetch_add(1, Ordering::Relaxed);
        } else {
            self.record_pseudo(root, Pseudo::from_asgct(trace.num_frames), weight);
        }
        if self.timer == TimerKind::Perf {
            timer::perf_consume(slot.perf_ring.load(Ordering::Acquire));
        }
        slot.busy.store(false, Ordering::Release);
    }

    fn record_pseudo(&self, root: NodeId, p: Pseudo, weight: u64) {
        let node = self.cct.child(root, FrameId::pseudo(p), -1).unwrap_or(self.cct.overflow());
        self.cct.add_events(node, Metric::Samples, 1, Metric::Cpu, weight);
        self.stats.samples.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a stack (callee first, as AsyncGetCallTrace returns it) below `root`. Each frame's callsite
    /// is the bci its caller was executing. Walks the CCT only from where the stack differs from the
    /// thread's previous sample (Komorium's path cache): hash probes are cache misses, and consecutive
    /// samples of a thread mostly share their outer frames.
    fn record_stack(&self, slot: &threads::Slot, root: NodeId, stack: &[CallFrame], truncated: bool, weight: u64) {
        let base = if truncated {
            self.cct.child(root, FrameId::pseudo(Pseudo::Truncated), -1).unwrap_or(self.cct.overflow())
        } else {
            root
        };
        // SAFETY: we are the handler on the slot's own thread and hold its busy flag.
        let path = unsafe { slot.path() };
        let mut valid = if slot.path_base.load(Ordering::Relaxed) == base {
            (slot.path_len.load(Ordering::Relaxed) as usize).min(path.len())
        } else {
            0
        };
        let mut node = base;
        let mut len = 0;
        for (k, i) in (0..stack.len()).rev().enumerate() {
            if node == self.cct.overflow() || k >= path.len() {
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
                node = self.cct.child(node, id, callsite).unwrap_or(self.cct.overflow());
                path[k] = threads::PathEntry { frame: id.0, callsite, node };
            }
            len = k + 1;
        }
        slot.path_base.store(base, Ordering::Relaxed);
        slot.path_len.store(if node == self.cct.overflow() { 0 } else { len as u32 }, Ordering::Relaxed);
        self.cct.add_events(node, Metric::Samples, 1, Metric::Cpu, weight);
        self.stats.samples.fetch_add(1, Ordering::Relaxed);
    }
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

extern "C" fn handler(_sig: libc::c_int, info: *mut libc::siginfo_t, ucontext: *mut c_void) {
    // SAFETY: errno is thread-local and always addressable; the handler must leave it as it found it.
    let errno = unsafe { *libc::__errno_location() };
    if let Some(s) = Sampler::get() {
        // SAFETY: the kernel passed `info` and `ucontext` to this SA_SIGINFO handler.
        unsafe { s.on_signal(info, ucontext) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn install_handler() -> Result<(), String> {
    timer::install_handler(handler).map_err(|e| format!("sigaction(SIGPROF): {e}"))
}
