//! mode=asgct (the cpu engine): CPU-time sampling of Java threads from a timer signal with
//! AsyncGetCallTrace.
//!
//! Each Java thread gets its own timer when it is registered (perf or ctimer, signalling SIGURG; or the
//! process-wide itimer, signalling SIGPROF); the signal handler ([`Sampler::on_signal`]) runs on the
//! sampled thread, asks AsyncGetCallTrace for its stack and adds the sample to the CCT. The thread
//! table, the walk and the path cache are shared with the wall engine ([`crate::engine::stack`]); what is
//! the cpu engine's alone (its timers) sits in [`CPU_SLOTS`], indexed like the shared table. Signals
//! that are not kprof's timers' are passed on to the handler kprof replaced.

use crate::cct::{Cct, Metric, NodeId};
use crate::engine::stack::threads::{self, Entry, Left, Origin, CPU, MAX_THREADS};
use crate::engine::stack::{self, live, ErrnoGuard, Walk, Walker};
use crate::engine::{fields, format_interval, Engine, Host, Phase};
use crate::frame::{FrameId, Pseudo};
use crate::jvmti::bindings::*;
use crate::jvmti::Jni;
use kprof_profile::Meta;
use kprof_protocol::options::{EngineKind, Options};
use kprof_timers::{self as timer, gettid, signals, TimerKind};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The cpu engine: the sampler of the current session, and the JVMTI environment that keeps
/// AsyncGetCallTrace working.
pub struct AsgctEngine {
    host: &'static dyn Host,
    /// The session's sampler, once started (samplers are never freed: a late signal may reach one).
    sampler: Mutex<Option<&'static Sampler>>,
}

static ENGINE: OnceLock<AsgctEngine> = OnceLock::new();

/// Creates the cpu engine (and, once, the JVMTI environment AsyncGetCallTrace needs).
pub fn create(host: &'static dyn Host, _options: &Options, _phase: Phase) -> Result<&'static dyn Engine, String> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    stack::enable_stack_walks(host)?;
    threads::set_evict_hook(CPU, evict);
    Ok(ENGINE.get_or_init(|| AsgctEngine { host, sampler: Mutex::new(None) }))
}

/// The top half of ctimer cookies (`si_value`): tells kprof's timers from other POSIX timers that signal
/// the same signal. The bottom half is the slot.
const CTIMER_TAG: u64 = 0x6b70_7266 << 32;

/// What the cpu engine keeps per slot of the shared thread table.
struct CpuSlot {
    /// The slot generation the timer below was made for; `armed` while it exists.
    generation: AtomicU32,
    armed: AtomicBool,
    tid: AtomicI32,
    /// perf descriptor, or -1, and the address of its ring buffer, or 0.
    perf_fd: AtomicI32,
    perf_ring: AtomicUsize,
    /// ctimer id + 1, or 0.
    ctimer: AtomicUsize,
    /// CPU time of the thread when sampling of it began.
    cpu_start_ns: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_CPU_SLOT: CpuSlot = CpuSlot {
    generation: AtomicU32::new(0),
    armed: AtomicBool::new(false),
    tid: AtomicI32::new(0),
    perf_fd: AtomicI32::new(-1),
    perf_ring: AtomicUsize::new(0),
    ctimer: AtomicUsize::new(0),
    cpu_start_ns: AtomicU64::new(0),
};

static CPU_SLOTS: [CpuSlot; MAX_THREADS] = [NO_CPU_SLOT; MAX_THREADS];

/// The JVM's feature version (17, 25), 0 if unknown.
fn jdk_feature(host: &dyn Host) -> u32 {
    host.vm()
        .jvmti(JVMTI_VERSION_1_2)
        .and_then(|j| j.system_property("java.vm.specification.version"))
        .and_then(|v| v.split('.').next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// The slot was given to another thread: the old thread's timer goes.
fn evict(idx: usize) {
    if let Some(s) = Sampler::get() {
        s.disarm(idx);
    }
}

impl AsgctEngine {
    fn sampler(&self) -> Option<&'static Sampler> {
        *self.sampler.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the threads that already run (see [`live`]). Caller holds the session lock.
    fn register_live_threads(&self, jni: Jni) {
        let Some(sampler) = self.sampler() else { return };
        let Some(jvmti) = self.host.vm().jvmti(JVMTI_VERSION_1_2) else { return };
        let search = match live::Search::run(jni, jvmti) {
            Ok(s) => s,
            Err(e) => {
                self.host.say(&e);
                return;
            }
        };
        for f in &search.found {
            let root = self.host.thread_root(&f.name);
            if let Err(e) = sampler.register(f.tid, f.env, root, Origin::Found) {
                self.host.note_once(&e);
            }
        }
        // Checked after registering: a thread that ended in between is taken off.
        for f in search.found.iter().filter(|f| !search.still_running(f)) {
            let mut reg = threads::registry();
            if let Some(idx) = reg.find_with_env(f.tid, f.env, CPU) {
                sampler.remove(&mut reg, idx);
            }
        }
        if search.skipped > 0 {
            self.host.say(&format!("{} running thread(s) could not be located and are not sampled", search.skipped));
        }
    }
}

impl Engine for AsgctEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Asgct
    }

    fn check(&self, _options: &Options) -> Result<(), String> {
        stack::check_asgct()
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        let host = self.host;
        let sampler = Sampler::start(host.cct(), o.timer, o.interval_ns, o.depth, &mut |n| host.say(&n))?;
        *self.sampler.lock().unwrap_or_else(|e| e.into_inner()) = Some(sampler);
        if sampler.timer == TimerKind::Itimer && jdk_feature(host) >= 25 {
            // kprof's handler takes SIGPROF now; JFR refuses to share it.
            host.say(
                "timer=itimer takes SIGPROF, which JFR's CPU-time sampler (jdk.CPUTimeSample) needs too: a JFR \
                 recording that starts while this session runs records no CPU-time samples",
            );
        }
        self.register_live_threads(jni);
        Ok(format!("timer={} interval={}", sampler.timer.name(), format_interval(o.interval_ns)))
    }

    fn stop(&self, _jni: Option<Jni>, _restore: bool) {
        if let Some(s) = self.sampler() {
            s.stop();
        }
    }

    fn thread_start(&self, jni: Jni, _thread: jthread, root: NodeId) {
        let Some(sampler) = self.sampler().filter(|s| s.is_running()) else { return };
        if let Err(e) = sampler.register(gettid(), jni.raw() as *mut c_void, root, Origin::Started) {
            self.host.note_once(&e);
        }
        sampler.check_handler(self.host);
    }

    fn thread_end(&self, _jni: Jni, _thread: jthread) {
        let tid = gettid();
        threads::registry().note_ended(tid);
        if let Some(s) = self.sampler() {
            s.unregister(tid);
        }
    }

    fn describe(&self, o: &Options, meta: &mut Meta) {
        meta.interval = o.interval_ns;
        let Some(s) = self.sampler() else { return };
        meta.timer = s.timer.name().to_string();
        let c = &mut meta.counters;
        c.insert("samples".into(), s.stats.samples.load(Ordering::Relaxed));
        c.insert("debug_info_at_every_pc".into(), crate::engine::stack::debug_info_way());
        c.insert("usable_samples".into(), s.stats.usable.load(Ordering::Relaxed));
        c.insert("dropped_samples".into(), s.stats.dropped.load(Ordering::Relaxed));
        c.insert("recovered_samples".into(), s.stats.recovered.load(Ordering::Relaxed));
        c.insert("foreign_thread_samples".into(), s.stats.foreign.load(Ordering::Relaxed));
        c.insert("threads_sampled".into(), s.stats.threads.load(Ordering::Relaxed));
        c.insert("threads_refused".into(), s.stats.threads_refused.load(Ordering::Relaxed));
        c.insert("sampled_cpu_ns".into(), s.sampled_cpu_ns());
        c.insert("threads_quarantined".into(), threads::quarantined());
        s.check_handler(self.host);
        c.insert("handler_replaced".into(), s.stats.handler_replaced.load(Ordering::Relaxed));
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
        let mut line = format!(
            "timer={timer} interval={} samples={samples} usable={usable:.1}% recovered={} rate={rate:.0}/cpu-s cpu={cpu_s:.2}s {}",
            format_interval(meta.interval),
            c("recovered_samples"),
            fields(meta, &[("dropped", "dropped_samples"), ("threads", "threads_sampled")])
        );
        if c("handler_replaced") != 0 {
            // Another component replaced the timer signal's handler: kprof's timer signals go to it.
            let sig = if meta.timer == "itimer" { libc::SIGPROF } else { timer::SIGNAL };
            line.push_str(&format!(" handler=replaced({})", signals::name(sig)));
        }
        line
    }
}

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
    /// The timer signal's handler was found replaced by another (1), or not (0).
    pub handler_replaced: AtomicU64,
}

/// The running sampler. One per session, leaked on start (the handler may run until the process ends).
pub struct Sampler {
    cct: &'static Cct,
    walker: Walker,
    /// The timer that actually runs (never `Auto`).
    pub timer: TimerKind,
    pub interval_ns: u64,
    running: AtomicBool,
    pub stats: SamplerStats,
}

static SAMPLER: AtomicPtr<Sampler> = AtomicPtr::new(std::ptr::null_mut());
/// An itimer has run in this process: SIGPROF from the kernel is kprof's (late ones included).
static ITIMER_USED: AtomicBool = AtomicBool::new(false);

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
        let walker = Walker::new(depth)?;
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
        install_handler(timer::signal_of(timer))?;
        let sampler: &'static Sampler = Box::leak(Box::new(Sampler {
            cct,
            walker,
            timer,
            interval_ns,
            running: AtomicBool::new(true),
            stats: SamplerStats::default(),
        }));
        SAMPLER.store(sampler as *const Sampler as *mut Sampler, Ordering::Release);
        if timer == TimerKind::Itimer {
            ITIMER_USED.store(true, Ordering::Release);
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

    /// Notices, once, that another component replaced the handler of the timer's signal: kprof's timer
    /// signals then go to that handler, and the cpu engine gets no samples.
    fn check_handler(&self, host: &dyn Host) {
        let sig = timer::signal_of(self.timer);
        if self.stats.handler_replaced.load(Ordering::Relaxed) == 0 && signals::replaced(sig) {
            self.stats.handler_replaced.store(1, Ordering::Relaxed);
            host.say(&format!(
                "the {} handler was replaced by another component: mode=asgct gets no more samples",
                signals::name(sig)
            ));
        }
    }

    /// Starts sampling thread `tid` whose JNIEnv is `env`; its samples go below CCT node `root`.
    pub fn register(&self, tid: i32, env: *mut c_void, root: NodeId, origin: Origin) -> Result<(), String> {
        let mut reg = threads::registry();
        let joined = match reg.join(tid, env, root, self.walker.depth, CPU, origin) {
            Ok(j) => j,
            Err(threads::Refused::Full) => {
                self.stats.threads_refused.fetch_add(1, Ordering::Relaxed);
                return Err(threads::Refused::Full.message());
            }
            // A thread that is gone: nothing to sample, nothing to report.
            Err(_) => return Ok(()),
        };
        let cs = &CPU_SLOTS[joined.idx];
        if cs.armed.load(Ordering::Acquire) {
            if cs.generation.load(Ordering::Relaxed) == joined.generation {
                return Ok(());
            }
            self.disarm(joined.idx);
        }
        cs.tid.store(tid, Ordering::Relaxed);
        cs.generation.store(joined.generation, Ordering::Relaxed);
        cs.cpu_start_ns.store(timer::thread_cpu_ns(tid).unwrap_or(0), Ordering::Relaxed);
        let armed = match self.timer {
            TimerKind::Perf => timer::perf_open(tid, self.interval_ns).map(|t| {
                cs.perf_ring.store(t.ring, Ordering::Release);
                cs.perf_fd.store(t.fd, Ordering::Release);
            }),
            TimerKind::Ctimer => timer::ctimer_create(tid, self.interval_ns, CTIMER_TAG | joined.idx as u64)
                .map(|t| cs.ctimer.store(t + 1, Ordering::Release)),
            TimerKind::Itimer | TimerKind::Auto => Ok(()),
        };
        cs.armed.store(true, Ordering::Release);
        match armed {
            Ok(()) => {
                self.stats.threads.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.remove(&mut reg, joined.idx);
                self.stats.threads_refused.fetch_add(1, Ordering::Relaxed);
                Err(format!("{} timer for thread {tid}: {e}", self.timer.name()))
            }
        }
    }

    /// Stops sampling thread `tid` (at ThreadEnd, on the thread itself).
    pub fn unregister(&self, tid: i32) {
        let mut reg = threads::registry();
        if let Some(idx) = reg.find(tid, CPU) {
            self.remove(&mut reg, idx);
        }
    }

    /// Takes the cpu engine off slot `idx` and, once no handler can touch them, closes its timers.
    fn remove(&self, reg: &mut threads::Registry, idx: usize) {
        match reg.leave(idx, CPU) {
            Left::Quiet => self.disarm(idx),
            // A handler may still read the ring: it stays mapped (and the descriptor open) for good.
            Left::Quarantined => CPU_SLOTS[idx].armed.store(false, Ordering::Release),
        }
    }

    /// Closes the timers of slot `idx` and accounts its thread's CPU time. Caller holds the registry and
    /// no cpu handler can be inside the slot.
    fn disarm(&self, idx: usize) {
        let cs = &CPU_SLOTS[idx];
        if !cs.armed.swap(false, Ordering::AcqRel) || threads::is_quarantined(idx) {
            return;
        }
        let fd = cs.perf_fd.swap(-1, Ordering::AcqRel);
        let ring = cs.perf_ring.swap(0, Ordering::AcqRel);
        if fd >= 0 {
            timer::perf_close(timer::PerfTimer { fd, ring });
        }
        let t = cs.ctimer.swap(0, Ordering::AcqRel);
        if t != 0 {
            timer::ctimer_delete(t - 1);
        }
        if let Some(now) = timer::thread_cpu_ns(cs.tid.load(Ordering::Relaxed)) {
            let used = now.saturating_sub(cs.cpu_start_ns.load(Ordering::Relaxed));
            self.stats.cpu_ns_done.fetch_add(used, Ordering::Relaxed);
        }
    }

    /// Stops sampling every thread. The perf and ctimer handler stays installed (a late signal is ignored);
    /// SIGPROF goes back to what it was before kprof (`SIG_IGN` for the default): it is the one signal
    /// another profiler in the process (JFR's CPU-time sampler) needs, and JFR takes it only from no handler.
    pub fn stop(&self) {
        self.running.store(false, Ordering::Release);
        if self.timer == TimerKind::Itimer {
            let _ = timer::itimer_set(None);
            if let Err(e) = signals::uninstall(libc::SIGPROF) {
                crate::guard::say(&format!("sigaction(SIGPROF): {e}: kprof's handler stays"));
            }
        }
        let mut reg = threads::registry();
        for idx in reg.members(CPU) {
            self.remove(&mut reg, idx);
        }
    }

    /// CPU time of the sampled threads so far (ended ones plus the live ones), nanoseconds.
    pub fn sampled_cpu_ns(&self) -> u64 {
        let reg = threads::registry();
        let live: u64 = reg
            .members(CPU)
            .into_iter()
            .map(|i| {
                let cs = &CPU_SLOTS[i];
                timer::thread_cpu_ns(cs.tid.load(Ordering::Relaxed))
                    .unwrap_or(0)
                    .saturating_sub(cs.cpu_start_ns.load(Ordering::Relaxed))
            })
            .sum();
        live + self.stats.cpu_ns_done.load(Ordering::Relaxed)
    }

    /// The signal handler's work for one of kprof's timer signals. Runs on the interrupted thread.
    ///
    /// # Safety
    /// `ucontext` must be what the kernel passed to the SA_SIGINFO handler.
    unsafe fn on_signal(&self, si: &timer::SigInfo, ucontext: *mut c_void) {
        let slot = match threads::enter(gettid(), CPU) {
            Entry::In(slot) => slot,
            Entry::Unknown if self.timer == TimerKind::Itimer && self.is_running() => {
                // The process-wide timer hit a thread that runs no Java code (GC, JIT, ...): an unusable
                // sample, counted as the baseline counts it.
                self.stats.foreign.fetch_add(1, Ordering::Relaxed);
                let node = self.cct.child(crate::cct::ROOT, FrameId::pseudo(Pseudo::NotJava), -1);
                self.count(node.unwrap_or(self.cct.overflow()), self.interval_ns);
                return;
            }
            Entry::Busy | Entry::Unknown => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // The thread is leaving: its timer is being closed.
            Entry::Idle => return,
        };
        if !self.is_running() {
            return;
        }
        let weight = match self.timer {
            TimerKind::Ctimer if si.code == timer::SI_TIMER => {
                self.interval_ns.saturating_mul(1 + si.overrun.max(0) as u64)
            }
            _ => self.interval_ns,
        };
        // SAFETY: on the slot's own thread, in its handler, with the kernel's context.
        let walk = unsafe { self.walker.walk(&slot, ucontext) };
        let node = stack::record_stack(self.cct, &slot, slot.root(), &walk);
        if let Walk::Stack { recovered, .. } = walk {
            self.stats.usable.fetch_add(1, Ordering::Relaxed);
            if recovered {
                self.stats.recovered.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count(node, weight);
        if self.timer == TimerKind::Perf {
            // Keep the ring from filling: a full ring would write no record and send no signal. The slot
            // has the cpu engine's bit, so its ring is mapped until this handler leaves.
            timer::perf_consume(CPU_SLOTS[slot.idx].perf_ring.load(Ordering::Acquire));
        }
    }

    fn count(&self, node: NodeId, weight: u64) {
        self.cct.add_events(node, Metric::Samples, 1, Metric::Cpu, weight);
        self.stats.samples.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether a signal is one of kprof's cpu timers': a perf event's (SIGURG with a POLL code, which only
/// `F_SETSIG` produces), a kprof ctimer's (its cookie), or the kernel's ITIMER_PROF SIGPROF once kprof
/// has run an itimer (the timer is process-wide: while kprof's runs, no one else's can).
fn is_timer_signal(sig: libc::c_int, si: &timer::SigInfo) -> bool {
    if si.code == timer::SI_TIMER {
        return si.value & !0xffff_ffff == CTIMER_TAG;
    }
    if sig == timer::SIGNAL {
        return (timer::POLL_IN..=timer::POLL_HUP).contains(&si.code);
    }
    sig == libc::SIGPROF && si.code == timer::SI_KERNEL && ITIMER_USED.load(Ordering::Acquire)
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ucontext: *mut c_void) {
    let _errno = ErrnoGuard::save();
    // SAFETY: the kernel passed `info` to this SA_SIGINFO handler.
    let si = unsafe { timer::SigInfo::read(info) };
    if !is_timer_signal(sig, &si) {
        // SAFETY: forwarded from the kernel.
        unsafe { signals::chain(sig, info, ucontext) };
        return;
    }
    if let Some(s) = Sampler::get() {
        // SAFETY: the kernel passed `ucontext` to this SA_SIGINFO handler.
        unsafe { s.on_signal(&si, ucontext) };
    }
}

/// Installs the handler for `sig`, once; the handlers of kprof's signals block each other, so two never
/// nest on a thread (they share its slot).
fn install_handler(sig: libc::c_int) -> Result<(), String> {
    signals::install(sig, handler, &stack::SIGNALS).map_err(|e| format!("sigaction({}): {e}", signals::name(sig)))
}
