//! mode=wall: wall-clock sampling of every Java thread, running or not (sleeping, waiting, parked,
//! blocked on a monitor, in native code or a system call).
//!
//! A sampler thread (`kprof-wall`, attached to the JVM as a daemon) wakes every `interval` and picks the
//! next `batch` registered threads in turn. For each pick it reads the thread's state with JVMTI
//! `GetThreadState` (not async-signal-safe, so here rather than in the handler). A thread off Java code
//! (sleeping, waiting, parked, blocked, in native code) has its stack read by the sampler itself with
//! JVMTI `GetStackTrace`: its Java stack cannot change until it leaves that state, and HotSpot runs the
//! read (a handshake) on the sampler's thread without waking it, so an idle thread costs the program
//! nothing; and one that has used no CPU time since its stack was last read, in the same state, has not
//! run, so that stack is counted again without a read. A thread running Java code gets its pick (the state and its weight) queued in its ring and a
//! signal ([`WALL_SIGNAL`], queued with a tag that tells it from anyone else's): a stack read from
//! outside would wait for it to reach a safepoint, and sample there (safepoint bias). The handler, on
//! the thread, walks its stack with AsyncGetCallTrace
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
//! Cost: at most `batch` state reads and signals or stack reads per interval, whatever the number of
//! threads, plus the handler on each signalled (running) thread. The summary line reports the signals,
//! the stacks read (`read=`) and found unchanged (`unchanged=`), the picks of runnable threads found
//! waiting inside the VM (`vm_wait=`, read as the stacks of threads off Java code are), the sampler's
//! CPU time and the handlers' time.

mod handler;
mod sampler;
mod state;

pub use sampler::{WallSampler, WallStats};
pub use state::{State, STATE_LABELS};

use crate::cct::NodeId;
use crate::engine::stack::threads::{self, Origin, WALL};
use crate::engine::stack::{self, live, WALL_SIGNAL};
use crate::engine::{format_interval, Engine, Host, Phase};
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::Jni;
use kprof_profile::Meta;
use kprof_protocol::options::{EngineKind, Options};
use kprof_timers::{gettid, signals};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

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
        state::make_labels();
        signals::install(WALL_SIGNAL, handler::handler, &stack::SIGNALS)
            .map_err(|e| format!("sigaction({}): {e}", signals::name(WALL_SIGNAL)))?;
        let sampler = WallSampler::start(self.host.cct(), o)?;
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
        c.insert("debug_info_at_every_pc".into(), crate::engine::stack::debug_info_way());
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        c.insert("wall_samples".into(), load(&st.samples));
        c.insert("wall_usable_samples".into(), load(&st.usable));
        c.insert("wall_dropped_samples".into(), load(&st.dropped));
        c.insert("wall_signals".into(), load(&st.signals));
        c.insert("wall_stacks_read".into(), load(&st.read));
        c.insert("wall_stacks_unchanged".into(), load(&st.unchanged));
        c.insert("wall_vm_waits".into(), load(&st.vm_waits));
        c.insert("wall_deferred_picks".into(), load(&st.deferred));
        c.insert("wall_ticks".into(), load(&st.ticks));
        c.insert("wall_late_ticks".into(), load(&st.late_ticks));
        c.insert("wall_tick_delay_ns".into(), load(&st.tick_delay_ns));
        c.insert("wall_threads_sampled".into(), load(&st.threads));
        c.insert("wall_threads_refused".into(), load(&st.threads_refused));
        c.insert("wall_threads_retired".into(), load(&st.threads_retired));
        c.insert("wall_threads_live".into(), s.live_threads() as u64);
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
            "interval={} batch={} samples={samples} usable={usable:.1}% rate={rate:.0}/s signals={} read={} \
             unchanged={} vm_wait={} dropped={} threads={} sampler_cpu={:.3}s handler_time={:.3}s",
            format_interval(c("wall_interval_ns")),
            c("wall_batch"),
            c("wall_signals"),
            c("wall_stacks_read"),
            c("wall_stacks_unchanged"),
            c("wall_vm_waits"),
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
