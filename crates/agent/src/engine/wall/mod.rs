//! mode=wall: wall-clock sampling of every Java thread, running or not (sleeping, waiting, parked,
//! blocked on a monitor, in native code or a system call).
//!
//! A sampler thread (`kprof-wall`, attached to the JVM as a daemon) wakes every `interval` and picks the
//! next `batch` registered threads in turn. For each pick it reads the thread's state with JVMTI
//! `GetThreadState` (not async-signal-safe, so here rather than in the handler), queues the pick (the
//! state and its weight) in the thread's ring and signals the thread ([`WALL_SIGNAL`], queued with a tag
//! that tells it from anyone else's). The handler, on the thread, walks its stack with AsyncGetCallTrace
//! like the cpu engine and adds each pending pick with its state as a leaf label (`[state sleeping]`); a
//! walk that fails still counts, as the walk's pseudo-frame with the state below it. A thread that gets
//! its signal late (it waited for a CPU, or the signal merged with the next one) takes every pick since,
//! each with its own state and weight, so no pick is lost and none takes another's time.
//!
//! Weights: a pick weighs the wall time since the thread's previous pick, measured by the sampler, so a
//! thread's weights add up to the time it was sampled (to within half an interval) whatever the batch
//! rotation, a late tick (the machine busy with the very threads it samples) or a late signal. That
//! time is split between the two picks that bound it, half each: a state change falls anywhere in it,
//! and half each is right on average. A fixed weight (interval × threads / batch) would be exact only if
//! every tick came on time and every signal arrived: when the program keeps the CPUs busy the sampler
//! wakes late, and the running phases get fewer samples at the same weight (under-sampled).
//!
//! Cost: at most `batch` state reads and signals per interval, whatever the number of threads, plus the
//! handler on each signalled thread (waking an idle thread costs it a context switch). The summary line
//! reports the sampler's CPU time and the handlers' time.

use crate::cct::{Cct, Metric, NodeId};
use crate::engine::stack::threads::{self, Entry, Left, Origin, MAX_THREADS, WALL};
use crate::engine::stack::{self, live, monotonic_ns, ErrnoGuard, Walk, Walker, WALL_SIGNAL};
use crate::engine::{format_interval, Engine, Host, Phase};
use crate::frame::FrameId;
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::{JavaVm, Jni, Jvmti};
use kprof_profile::Meta;
use kprof_protocol::options::{EngineKind, Options};
use kprof_timers::{gettid, signals, thread_cpu_ns, SigInfo};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// A thread's state as a wall sample records it, from JVMTI `GetThreadState`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum State {
    /// Runnable in Java code or in the VM (on a CPU or waiting for one).
    Running = 0,
    /// Runnable in native code: a JNI method, or a blocking system call (socket and file I/O).
    Native,
    /// In `Thread.sleep`.
    Sleeping,
    /// In `Object.wait` (and `Thread.join`, which waits so), or another indefinite or timed wait.
    Waiting,
    /// Parked (`LockSupport.park`: java.util.concurrent locks, queues, idle pool workers).
    Parked,
    /// Blocked entering a contended `synchronized` monitor.
    Blocked,
    /// The state could not be read.
    Unknown,
}

/// The labels samples carry, by [`State`].
pub const STATE_LABELS: [&str; 7] = [
    "[state running]",
    "[state native]",
    "[state sleeping]",
    "[state waiting]",
    "[state parked]",
    "[state blocked]",
    "[state unknown]",
];

impl State {
    /// The state of JVMTI state bits `s` (of a live thread).
    pub fn of(s: u32) -> State {
        if s & JVMTI_THREAD_STATE_BLOCKED_ON_MONITOR_ENTER != 0 {
            State::Blocked
        } else if s & JVMTI_THREAD_STATE_SLEEPING != 0 {
            State::Sleeping
        } else if s & JVMTI_THREAD_STATE_PARKED != 0 {
            State::Parked
        } else if s & (JVMTI_THREAD_STATE_WAITING | JVMTI_THREAD_STATE_IN_OBJECT_WAIT) != 0 {
            State::Waiting
        } else if s & JVMTI_THREAD_STATE_RUNNABLE != 0 {
            if s & JVMTI_THREAD_STATE_IN_NATIVE != 0 {
                State::Native
            } else {
                State::Running
            }
        } else {
            State::Unknown
        }
    }

    fn from_u8(v: u8) -> State {
        [State::Running, State::Native, State::Sleeping, State::Waiting, State::Parked, State::Blocked]
            .get(v as usize)
            .copied()
            .unwrap_or(State::Unknown)
    }
}

/// The label frames, made once at the first start (labels are interned under a lock: never in the
/// handler, which reads these).
#[allow(clippy::declare_interior_mutable_const)]
const NO_LABEL: AtomicU64 = AtomicU64::new(0);
static LABEL_IDS: [AtomicU64; 7] = [NO_LABEL; 7];

fn make_labels() {
    for (i, name) in STATE_LABELS.iter().enumerate() {
        LABEL_IDS[i].store(crate::frame::label(name).0, Ordering::Release);
    }
}

/// The top half of the wall signal's `si_value`; the bottom half is the slot.
const WALL_TAG: u64 = 0x6b77_616c << 32;

/// Picks of a thread that its handler has not taken yet, at most (a thread that has not run for this many
/// intervals: the sampler waits before it picks it again).
const PENDING: usize = 8;

/// What the wall engine keeps per slot of the shared thread table.
struct WallSlot {
    /// The slot generation this entry belongs to.
    generation: AtomicU32,
    /// A global reference to the `java.lang.Thread` (for `GetThreadState`), or null.
    thread: AtomicPtr<c_void>,
    tid: AtomicI32,
    /// When the sampler last picked the thread (or registered it). The sampler's alone.
    last_pick_ns: AtomicU64,
    /// Picks waiting for the handler, a ring written by the sampler (`head`) and read by the handler on
    /// the thread (`tail`): each the thread's [`State`] at the pick and the time since its previous pick.
    /// A handler that runs late (the thread waited for a CPU, or its signal merged with the next) takes
    /// every pick since, each with its own state and weight, so no pick's time moves to another state.
    picks: [AtomicU64; PENDING],
    head: AtomicU32,
    tail: AtomicU32,
    /// The node of the thread's previous pick (0: none yet). The handler's alone.
    last_leaf: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_PICK: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NO_WALL_SLOT: WallSlot = WallSlot {
    generation: AtomicU32::new(0),
    thread: AtomicPtr::new(std::ptr::null_mut()),
    tid: AtomicI32::new(0),
    last_pick_ns: AtomicU64::new(0),
    picks: [NO_PICK; PENDING],
    head: AtomicU32::new(0),
    tail: AtomicU32::new(0),
    last_leaf: AtomicU32::new(0),
};

/// A pick as the ring keeps it: the state in the top byte, the weight (nanoseconds) below.
fn pack_pick(state: State, weight_ns: u64) -> u64 {
    ((state as u64) << 56) | weight_ns.min((1 << 56) - 1)
}

fn unpack_pick(p: u64) -> (State, u64) {
    (State::from_u8((p >> 56) as u8), p & ((1 << 56) - 1))
}

static WALL_SLOTS: [WallSlot; MAX_THREADS] = [NO_WALL_SLOT; MAX_THREADS];

/// The wall engine: the sampler of the current session.
pub struct WallEngine {
    host: &'static dyn Host,
    /// The session's sampler, once started (samplers are never freed: a late signal may reach one).
    sampler: Mutex<Option<&'static WallSampler>>,
}

static ENGINE: OnceLock<WallEngine> = OnceLock::new();

/// Creates the wall engine (and, once, the JVMTI environment AsyncGetCallTrace needs).
pub fn create(host: &'static dyn Host, _options: &Options, _phase: Phase) -> Result<&'static dyn Engine, String> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    stack::enable_stack_walks(host)?;
    threads::set_evict_hook(WALL, evict);
    Ok(ENGINE.get_or_init(|| WallEngine { host, sampler: Mutex::new(None) }))
}

/// The slot was given to another thread (its tid reused): the old thread's entry goes. Runs on a thread
/// attached to the JVM (one that registers itself).
fn evict(idx: usize) {
    let Some(s) = WallSampler::get() else { return };
    let jni = ENGINE.get().and_then(|e| e.host.vm().jni());
    s.forget(idx, jni);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counters of the wall engine.
#[derive(Default)]
pub struct WallStats {
    /// Samples recorded.
    pub samples: AtomicU64,
    /// Samples with at least one Java frame.
    pub usable: AtomicU64,
    /// Signals that could not become a sample (slot busy, thread leaving).
    pub dropped: AtomicU64,
    /// Signals sent.
    pub signals: AtomicU64,
    /// Picks put off because the thread had not run for [`PENDING`] picks.
    pub deferred: AtomicU64,
    /// Ticks the sampler ran, and ticks it skipped because it woke more than an interval late.
    pub ticks: AtomicU64,
    pub late_ticks: AtomicU64,
    /// Threads registered, refused, and taken off because they had ended.
    pub threads: AtomicU64,
    pub threads_refused: AtomicU64,
    pub threads_retired: AtomicU64,
    /// CPU time of the sampler thread, and the handlers' time (wall clock inside them), nanoseconds.
    pub sampler_cpu_ns: AtomicU64,
    pub handler_ns: AtomicU64,
    /// The signal's handler was found replaced by another (1), or not (0).
    pub handler_replaced: AtomicU64,
}

/// The registered threads, in the order the sampler takes them.
struct Members {
    slots: Vec<usize>,
    cursor: usize,
}

/// The running wall sampler. One per session, leaked on start (a late signal may reach it).
pub struct WallSampler {
    cct: &'static Cct,
    walker: Walker,
    interval_ns: u64,
    batch: usize,
    running: AtomicBool,
    members: Mutex<Members>,
    /// Wakes the sampler thread early when the session stops.
    stop_lock: Mutex<bool>,
    wake: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    sampler_tid: AtomicI32,
    started_ns: u64,
    stopped_ns: AtomicU64,
    pub stats: WallStats,
}

static SAMPLER: AtomicPtr<WallSampler> = AtomicPtr::new(std::ptr::null_mut());

impl WallEngine {
    fn sampler(&self) -> Option<&'static WallSampler> {
        *lock(&self.sampler)
    }

    /// Registers the threads that already run (see [`live`]). Caller holds the session lock.
    fn register_live_threads(&self, sampler: &'static WallSampler, jni: Jni) {
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
            let thread = jni.new_global_ref(f.thread());
            if let Err(e) = sampler.register(jni, f.tid, f.env, root, Origin::Found, thread) {
                self.host.note_once(&e);
            }
        }
        // Checked after registering: a thread that ended in between is taken off.
        for f in search.found.iter().filter(|f| !search.still_running(f)) {
            let mut reg = threads::registry();
            if let Some(idx) = reg.find_with_env(f.tid, f.env, WALL) {
                sampler.remove(&mut reg, idx, Some(jni));
            }
        }
    }
}

impl Engine for WallEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Wall
    }

    fn check(&self, _options: &Options) -> Result<(), String> {
        stack::check_asgct()
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        if self.sampler().is_some_and(|s| s.running.load(Ordering::Acquire)) {
            return Err("already sampling".into());
        }
        make_labels();
        signals::install(WALL_SIGNAL, handler, &stack::SIGNALS)
            .map_err(|e| format!("sigaction({}): {e}", signals::name(WALL_SIGNAL)))?;
        let sampler: &'static WallSampler = Box::leak(Box::new(WallSampler {
            cct: self.host.cct(),
            walker: Walker::new(o.depth)?,
            interval_ns: o.interval_ns,
            batch: o.wall_batch as usize,
            running: AtomicBool::new(true),
            members: Mutex::new(Members { slots: Vec::new(), cursor: 0 }),
            stop_lock: Mutex::new(false),
            wake: Condvar::new(),
            thread: Mutex::new(None),
            sampler_tid: AtomicI32::new(0),
            started_ns: monotonic_ns(),
            stopped_ns: AtomicU64::new(0),
            stats: WallStats::default(),
        }));
        SAMPLER.store(sampler as *const WallSampler as *mut WallSampler, Ordering::Release);
        *lock(&self.sampler) = Some(sampler);
        self.register_live_threads(sampler, jni);
        let vm = self.host.vm();
        let spawned = std::thread::Builder::new().name("kprof-wall".into()).spawn(move || {
            guard((), || sampler.run(vm));
        });
        match spawned {
            Ok(h) => *lock(&sampler.thread) = Some(h),
            Err(e) => {
                sampler.stop(Some(jni));
                return Err(format!("cannot start the sampler thread: {e}"));
            }
        }
        Ok(format!("interval={} batch={}", format_interval(o.interval_ns), o.wall_batch))
    }

    fn stop(&self, jni: Option<Jni>, _restore: bool) {
        if let Some(s) = self.sampler() {
            s.stop(jni);
        }
    }

    fn thread_start(&self, jni: Jni, thread: jthread, root: NodeId) {
        let Some(sampler) = self.sampler().filter(|s| s.running.load(Ordering::Acquire)) else { return };
        let global = jni.new_global_ref(thread);
        if let Err(e) = sampler.register(jni, gettid(), jni.raw() as *mut c_void, root, Origin::Started, global) {
            self.host.note_once(&e);
        }
    }

    fn thread_end(&self, jni: Jni, _thread: jthread) {
        let tid = gettid();
        let mut reg = threads::registry();
        reg.note_ended(tid);
        let Some(sampler) = self.sampler() else { return };
        if let Some(idx) = reg.find(tid, WALL) {
            sampler.remove(&mut reg, idx, Some(jni));
        }
    }

    fn describe(&self, o: &Options, meta: &mut Meta) {
        meta.interval = o.interval_ns;
        let Some(s) = self.sampler() else { return };
        s.check_handler(self.host);
        let c = &mut meta.counters;
        let st = &s.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        c.insert("wall_samples".into(), load(&st.samples));
        c.insert("wall_usable_samples".into(), load(&st.usable));
        c.insert("wall_dropped_samples".into(), load(&st.dropped));
        c.insert("wall_signals".into(), load(&st.signals));
        c.insert("wall_deferred_picks".into(), load(&st.deferred));
        c.insert("wall_ticks".into(), load(&st.ticks));
        c.insert("wall_late_ticks".into(), load(&st.late_ticks));
        c.insert("wall_threads_sampled".into(), load(&st.threads));
        c.insert("wall_threads_refused".into(), load(&st.threads_refused));
        c.insert("wall_threads_retired".into(), load(&st.threads_retired));
        c.insert("wall_threads_live".into(), lock(&s.members).slots.len() as u64);
        c.insert("wall_batch".into(), s.batch as u64);
        c.insert("wall_interval_ns".into(), s.interval_ns);
        c.insert("wall_elapsed_ns".into(), s.elapsed_ns());
        c.insert("wall_sampler_cpu_ns".into(), s.sampler_cpu_ns());
        c.insert("wall_handler_ns".into(), load(&st.handler_ns));
        c.insert("wall_handler_replaced".into(), load(&st.handler_replaced));
    }

    fn summary(&self, meta: &Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        let samples = c("wall_samples");
        let usable = if samples > 0 { 100.0 * c("wall_usable_samples") as f64 / samples as f64 } else { 0.0 };
        let secs = c("wall_elapsed_ns") as f64 / 1e9;
        let rate = if secs > 0.0 { samples as f64 / secs } else { 0.0 };
        let mut line = format!(
            "interval={} batch={} samples={samples} usable={usable:.1}% rate={rate:.0}/s signals={} dropped={} \
             threads={} sampler_cpu={:.3}s handler_time={:.3}s",
            format_interval(c("wall_interval_ns")),
            c("wall_batch"),
            c("wall_signals"),
            c("wall_dropped_samples"),
            c("wall_threads_sampled"),
            c("wall_sampler_cpu_ns") as f64 / 1e9,
            c("wall_handler_ns") as f64 / 1e9,
        );
        if c("wall_handler_replaced") != 0 {
            line.push_str(&format!(" handler=replaced({})", signals::name(WALL_SIGNAL)));
        }
        line
    }
}

impl WallSampler {
    /// The sampler, once started.
    fn get() -> Option<&'static WallSampler> {
        let p = SAMPLER.load(Ordering::Acquire);
        // SAFETY: the pointer is either null or a leaked `WallSampler` that lives until the process exits.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    fn elapsed_ns(&self) -> u64 {
        let end = match self.stopped_ns.load(Ordering::Acquire) {
            0 => monotonic_ns(),
            t => t,
        };
        end.saturating_sub(self.started_ns)
    }

    fn sampler_cpu_ns(&self) -> u64 {
        match self.sampler_tid.load(Ordering::Acquire) {
            0 => self.stats.sampler_cpu_ns.load(Ordering::Relaxed),
            tid => thread_cpu_ns(tid).unwrap_or(0),
        }
    }

    /// Notices, once, that another component replaced the wall signal's handler.
    fn check_handler(&self, host: &dyn Host) {
        if self.stats.handler_replaced.load(Ordering::Relaxed) == 0 && signals::replaced(WALL_SIGNAL) {
            self.stats.handler_replaced.store(1, Ordering::Relaxed);
            host.say(&format!(
                "the {} handler was replaced by another component: mode=wall gets no more samples",
                signals::name(WALL_SIGNAL)
            ));
        }
    }

    /// Starts sampling thread `tid` (JNIEnv `env`, samples below `root`); `thread` is a global reference
    /// to its `java.lang.Thread`, which the sampler keeps (or deletes when refused).
    fn register(
        &self,
        jni: Jni,
        tid: i32,
        env: *mut c_void,
        root: NodeId,
        origin: Origin,
        thread: jobject,
    ) -> Result<(), String> {
        let mut reg = threads::registry();
        let joined = match reg.join(tid, env, root, self.walker.depth, WALL, origin) {
            Ok(j) => j,
            Err(refused) => {
                jni.delete_global_ref(thread);
                if refused == threads::Refused::Full {
                    self.stats.threads_refused.fetch_add(1, Ordering::Relaxed);
                    return Err(refused.message());
                }
                return Ok(());
            }
        };
        let ws = &WALL_SLOTS[joined.idx];
        if !ws.thread.load(Ordering::Acquire).is_null() {
            if ws.generation.load(Ordering::Relaxed) == joined.generation {
                // Registered already (found at the start, then its ThreadStart).
                jni.delete_global_ref(thread);
                return Ok(());
            }
            self.forget(joined.idx, Some(jni));
        }
        ws.generation.store(joined.generation, Ordering::Relaxed);
        ws.tid.store(tid, Ordering::Relaxed);
        ws.last_pick_ns.store(monotonic_ns(), Ordering::Relaxed);
        ws.last_leaf.store(0, Ordering::Relaxed);
        ws.thread.store(thread as *mut c_void, Ordering::Release);
        lock(&self.members).slots.push(joined.idx);
        self.stats.threads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Takes the wall engine off slot `idx` (its thread ended, or the session stops).
    /// The handler never reads what the engine keeps for the slot beyond its atomics, so the entry goes
    /// even if the slot was quarantined.
    fn remove(&self, reg: &mut threads::Registry, idx: usize, jni: Option<Jni>) {
        let _: Left = reg.leave(idx, WALL);
        self.forget(idx, jni);
    }

    /// Drops the wall engine's entry of slot `idx`: out of the sampler's list (after which the sampler no
    /// longer reads its thread reference), the reference deleted. The handler never reads the reference.
    fn forget(&self, idx: usize, jni: Option<Jni>) {
        {
            let mut m = lock(&self.members);
            if let Some(at) = m.slots.iter().position(|&i| i == idx) {
                m.slots.swap_remove(at);
            }
        }
        let ws = &WALL_SLOTS[idx];
        // Out of the list the sampler no longer writes the ring; the handler cannot be inside (the slot
        // has left the table, or is given to another thread): what is pending is dropped.
        ws.tail.store(ws.head.load(Ordering::Acquire), Ordering::Release);
        let thread = ws.thread.swap(std::ptr::null_mut(), Ordering::AcqRel);
        // Without a JNIEnv (no thread attached) the reference is left: a small leak at the VM's end.
        if let Some(jni) = jni {
            jni.delete_global_ref(thread as jobject);
        }
    }

    /// Stops the sampler thread and takes every thread off.
    fn stop(&self, jni: Option<Jni>) {
        self.running.store(false, Ordering::Release);
        *lock(&self.stop_lock) = true;
        self.wake.notify_all();
        if let Some(h) = lock(&self.thread).take() {
            let _ = h.join();
        }
        self.stopped_ns.store(monotonic_ns(), Ordering::Release);
        let mut reg = threads::registry();
        for idx in reg.members(WALL) {
            self.remove(&mut reg, idx, jni);
        }
        let leftover: Vec<usize> = lock(&self.members).slots.drain(..).collect();
        for idx in leftover {
            self.forget(idx, jni);
        }
    }

    /// The sampler thread: a tick every interval until the session stops.
    fn run(&'static self, vm: JavaVm) {
        let Some(jni) = vm.attach_daemon("kprof-wall") else {
            crate::guard::say("mode=wall: the sampler thread cannot attach to the JVM; no wall samples");
            return;
        };
        let jvmti = vm.jvmti(JVMTI_VERSION_1_2);
        let tid = gettid();
        self.sampler_tid.store(tid, Ordering::Release);
        let mut next = monotonic_ns() + self.interval_ns;
        let mut dead = Vec::with_capacity(self.batch);
        let mut last_check = 0u64;
        while self.running.load(Ordering::Acquire) {
            let now = monotonic_ns();
            if now < next {
                let stop = lock(&self.stop_lock);
                let (stop, _) = self
                    .wake
                    .wait_timeout_while(stop, Duration::from_nanos(next - now), |stopped| {
                        !*stopped && monotonic_ns() < next
                    })
                    .unwrap_or_else(|e| e.into_inner());
                if *stop {
                    break;
                }
                continue;
            }
            // A tick more than an interval late is not made up for with a burst: the next one is an
            // interval from now (the weights count the time anyway).
            next = if now > next + self.interval_ns {
                self.stats.late_ticks.fetch_add(1, Ordering::Relaxed);
                now + self.interval_ns
            } else {
                next + self.interval_ns
            };
            if let Some(jvmti) = jvmti {
                self.tick(jvmti, &mut dead);
                if !dead.is_empty() {
                    self.retire(&mut dead, jni);
                }
            }
            self.stats.ticks.fetch_add(1, Ordering::Relaxed);
            if now - last_check > 1_000_000_000 {
                last_check = now;
                if let Some(e) = ENGINE.get() {
                    self.check_handler(e.host);
                }
            }
        }
        self.stats.sampler_cpu_ns.store(thread_cpu_ns(tid).unwrap_or(0), Ordering::Relaxed);
        self.sampler_tid.store(0, Ordering::Release);
        vm.detach();
    }

    /// One tick: the next `batch` threads each get their state read and a signal. Threads found ended
    /// go to `dead`.
    fn tick(&self, jvmti: Jvmti, dead: &mut Vec<usize>) {
        let mut m = lock(&self.members);
        let n = m.slots.len();
        if n == 0 {
            return;
        }
        let take = self.batch.min(n);
        for k in 0..take {
            let idx = m.slots[(m.cursor + k) % n];
            let ws = &WALL_SLOTS[idx];
            let thread = ws.thread.load(Ordering::Acquire);
            // The reference is deleted only after the slot leaves this list, under this lock.
            let state = match jvmti.thread_state(thread as jthread) {
                Ok(s) if s & JVMTI_THREAD_STATE_ALIVE != 0 => State::of(s),
                Ok(_) => {
                    dead.push(idx);
                    continue;
                }
                Err(_) => State::Unknown,
            };
            let now = monotonic_ns();
            let head = ws.head.load(Ordering::Relaxed);
            if head.wrapping_sub(ws.tail.load(Ordering::Acquire)) as usize >= PENDING {
                // The thread has not run since its last picks: this one's time goes to its next pick.
                self.stats.deferred.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let weight = now.saturating_sub(ws.last_pick_ns.swap(now, Ordering::Relaxed));
            ws.picks[head as usize % PENDING].store(pack_pick(state, weight), Ordering::Relaxed);
            ws.head.store(head.wrapping_add(1), Ordering::Release);
            let tid = ws.tid.load(Ordering::Relaxed);
            match signals::queue_to_thread(tid, WALL_SIGNAL, WALL_TAG | idx as u64) {
                Ok(()) => {
                    self.stats.signals.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => dead.push(idx),
                Err(_) => {}
            }
        }
        m.cursor = (m.cursor + take) % n;
    }

    /// Takes off threads that ended without their ThreadEnd reaching kprof (found at a session's start
    /// while ending).
    fn retire(&self, dead: &mut Vec<usize>, jni: Jni) {
        let mut reg = threads::registry();
        for idx in dead.drain(..) {
            let ws = &WALL_SLOTS[idx];
            if reg.find(threads::tid_of(idx), WALL) == Some(idx)
                && ws.tid.load(Ordering::Relaxed) == threads::tid_of(idx)
            {
                self.remove(&mut reg, idx, Some(jni));
                self.stats.threads_retired.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The signal handler's work: one wall sample of the interrupted thread.
    ///
    /// # Safety
    /// `ucontext` must be what the kernel passed to the SA_SIGINFO handler.
    unsafe fn on_signal(&self, ucontext: *mut c_void) {
        let t0 = monotonic_ns();
        let slot = match threads::enter(gettid(), WALL) {
            Entry::In(slot) => slot,
            Entry::Busy | Entry::Unknown => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Entry::Idle => return,
        };
        if !self.running.load(Ordering::Acquire) {
            return;
        }
        let ws = &WALL_SLOTS[slot.idx];
        let tail = ws.tail.load(Ordering::Relaxed);
        let head = ws.head.load(Ordering::Acquire);
        if head == tail {
            // Its picks were taken by the handler of an earlier signal that this one was merged behind.
            return;
        }
        // SAFETY: on the slot's own thread, in its handler, with the kernel's context.
        let walk = unsafe { self.walker.walk(&slot, ucontext) };
        let node = stack::record_stack(self.cct, &slot, slot.root(), &walk);
        let mut taken = 0;
        let mut i = tail;
        while i != head {
            let (state, weight) = unpack_pick(ws.picks[i as usize % PENDING].load(Ordering::Relaxed));
            let label = FrameId(LABEL_IDS[state as usize].load(Ordering::Acquire));
            let leaf = if node == self.cct.overflow() {
                node
            } else {
                self.cct.child(node, label, -1).unwrap_or(self.cct.overflow())
            };
            // The time between two picks is split between them: a state change anywhere in it is then
            // counted right on average, whereas giving it all to the later pick would favour the states
            // that tend to follow a long gap (a sampler held up by a phase that keeps the CPUs busy).
            let previous = ws.last_leaf.swap(leaf, Ordering::Relaxed);
            let own = if previous == 0 { weight } else { weight - weight / 2 };
            if previous != 0 {
                self.cct.add(previous, Metric::Wall, weight / 2);
            }
            self.cct.add_events(leaf, Metric::WallSamples, 1, Metric::Wall, own);
            taken += 1;
            i = i.wrapping_add(1);
        }
        ws.tail.store(head, Ordering::Release);
        if matches!(walk, Walk::Stack { .. }) {
            self.stats.usable.fetch_add(taken, Ordering::Relaxed);
        }
        self.stats.samples.fetch_add(taken, Ordering::Relaxed);
        self.stats.handler_ns.fetch_add(monotonic_ns().saturating_sub(t0), Ordering::Relaxed);
    }
}

/// Whether a signal is the wall sampler's: queued by this process with its tag.
fn is_wall_signal(si: &SigInfo) -> bool {
    si.code == signals::SI_QUEUE && si.pid == signals::process_id() && si.value & !0xffff_ffff == WALL_TAG
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ucontext: *mut c_void) {
    let _errno = ErrnoGuard::save();
    // SAFETY: the kernel passed `info` to this SA_SIGINFO handler.
    let si = unsafe { SigInfo::read(info) };
    if !is_wall_signal(&si) {
        // SAFETY: forwarded from the kernel.
        unsafe { signals::chain(sig, info, ucontext) };
        return;
    }
    if let Some(s) = WallSampler::get() {
        // SAFETY: the kernel passed `ucontext` to this SA_SIGINFO handler.
        unsafe { s.on_signal(ucontext) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_the_jvmti_bits() {
        let alive = JVMTI_THREAD_STATE_ALIVE;
        let waiting = alive | JVMTI_THREAD_STATE_WAITING;
        assert_eq!(State::of(alive | JVMTI_THREAD_STATE_RUNNABLE), State::Running);
        assert_eq!(State::of(alive | JVMTI_THREAD_STATE_RUNNABLE | JVMTI_THREAD_STATE_IN_NATIVE), State::Native);
        assert_eq!(
            State::of(waiting | JVMTI_THREAD_STATE_SLEEPING | JVMTI_THREAD_STATE_WAITING_WITH_TIMEOUT),
            State::Sleeping
        );
        assert_eq!(State::of(waiting | JVMTI_THREAD_STATE_IN_OBJECT_WAIT), State::Waiting);
        assert_eq!(
            State::of(waiting | JVMTI_THREAD_STATE_PARKED | JVMTI_THREAD_STATE_WAITING_INDEFINITELY),
            State::Parked
        );
        assert_eq!(State::of(alive | JVMTI_THREAD_STATE_BLOCKED_ON_MONITOR_ENTER), State::Blocked);
        assert_eq!(State::of(alive), State::Unknown);
        for s in [State::Running, State::Native, State::Sleeping, State::Waiting, State::Parked, State::Blocked] {
            assert_eq!(State::from_u8(s as u8), s);
            assert!(STATE_LABELS[s as usize].starts_with("[state "));
        }
    }
}
