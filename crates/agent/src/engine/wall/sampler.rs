//! The wall sampler: the session's thread (`kprof-wall`) that picks the next `batch` registered threads
//! every interval, reads their states and signals them, and the list of threads it takes in turn.

use super::handler::{pack_pick, WallSlot, PENDING, WALL_SLOTS, WALL_TAG};
use super::state::{State, LABEL_IDS};
use super::{lock, ENGINE};
use crate::cct::{Cct, NodeId};
use crate::engine::stack::jvmti_path::record_frames;
use crate::engine::stack::threads::{self, Left, Origin, WALL};
use crate::engine::stack::{monotonic_ns, Walker, WALL_SIGNAL};
use crate::engine::Host;
use crate::frame::FrameId;
use crate::jvmti::bindings::*;
use crate::jvmti::{JavaVm, Jni, Jvmti};
use kprof_protocol::options::Options;
use kprof_timers::{gettid, signals, thread_cpu_ns};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

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
    /// Samples of threads off Java code (sleeping, waiting, parked, blocked, in native code) whose stack
    /// the sampler read itself (JVMTI GetStackTrace), with no signal.
    pub read: AtomicU64,
    /// Samples of threads off Java code that had used no CPU time since their stack was last read, in the
    /// same state: the stack read then is theirs still, and is not read again.
    pub unchanged: AtomicU64,
    /// Picks of threads JVMTI called runnable that were found asleep in the kernel, waiting inside the VM
    /// ([`State::VmWait`]): read as threads off Java code are, with no signal.
    pub vm_waits: AtomicU64,
    /// Picks put off because the thread had not run for [`PENDING`] picks.
    pub deferred: AtomicU64,
    /// Ticks the sampler ran, and ticks it skipped because it woke more than an interval late.
    pub ticks: AtomicU64,
    pub late_ticks: AtomicU64,
    /// How late the ticks came, in all (nanoseconds after their time): a sampler held up cannot tell
    /// where in that time a thread changed state.
    pub tick_delay_ns: AtomicU64,
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

/// What the sampler knows of a slot's thread (for the slot generation it was for): from its last stack
/// read, the path of that stack in the tree (frame, callsite, node) and its base, the thread's CPU time
/// just before the read with the state and the leaf the read gave, and whether it had a Java frame; and,
/// for a runnable thread, its CPU time at its last pick and when that was.
#[derive(Default)]
struct LastRead {
    generation: u32,
    path: Vec<(u64, i32, NodeId)>,
    base: NodeId,
    cpu_ns: Option<u64>,
    state: Option<State>,
    leaf: NodeId,
    usable: bool,
    pick_cpu_ns: Option<u64>,
    pick_ns: u64,
}

/// What the sampler keeps to read the stacks of threads off Java code: a frame buffer, and per slot what
/// it knows of its thread (so that a thread that sleeps where it slept walks no tree).
pub(super) struct OffJava {
    frames: Vec<jvmtiFrameInfo>,
    last: HashMap<usize, LastRead>,
}

impl OffJava {
    pub(super) fn new(depth: u32) -> OffJava {
        let none = jvmtiFrameInfo { method: std::ptr::null_mut(), location: 0 };
        OffJava { frames: vec![none; depth as usize + 1], last: HashMap::new() }
    }
}

/// What `last` knows of slot `idx`'s thread, forgotten when the slot holds another thread now.
fn last_of<'a>(last: &'a mut HashMap<usize, LastRead>, idx: usize, ws: &WallSlot) -> &'a mut LastRead {
    let generation = ws.generation.load(Ordering::Relaxed);
    let known = last.entry(idx).or_default();
    if known.generation != generation {
        *known = LastRead { generation, ..LastRead::default() };
    }
    known
}

/// A runnable thread that used less than this share of the time since its last pick on a CPU is asked
/// whether it sleeps in the kernel (a read of /proc); one that used more is taken as running (a clock
/// read). A signal's handler, and the wait it interrupts starting again, take tens of microseconds.
const MOSTLY_IDLE: u64 = 8;

/// Whether thread `tid` sleeps in the kernel now (state `S` in /proc: an interruptible wait), read from
/// the start of its stat line: `tid (comm) S ...`, where comm has at most 15 bytes.
fn sleeps_in_kernel(tid: i32) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let Ok(mut file) = std::fs::File::open(format!("/proc/self/task/{tid}/stat")) else { return false };
    let Ok(n) = file.read(&mut head) else { return false };
    let head = &head[..n];
    let Some(close) = head.iter().rposition(|&b| b == b')') else { return false };
    head.get(close + 2) == Some(&b'S')
}

/// The registered threads, in the order the sampler takes them.
struct Members {
    pub(super) slots: Vec<usize>,
    pub(super) cursor: usize,
}

/// The running wall sampler. One per session, leaked on start (a late signal may reach it).
pub struct WallSampler {
    pub(super) cct: &'static Cct,
    pub(super) walker: Walker,
    pub(super) interval_ns: u64,
    pub(super) batch: usize,
    pub(super) running: AtomicBool,
    members: Mutex<Members>,
    /// Wakes the sampler thread early when the session stops.
    stop_lock: Mutex<bool>,
    wake: Condvar,
    pub(super) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    sampler_tid: AtomicI32,
    started_ns: u64,
    stopped_ns: AtomicU64,
    pub stats: WallStats,
}

static SAMPLER: AtomicPtr<WallSampler> = AtomicPtr::new(std::ptr::null_mut());

impl WallSampler {
    /// The threads it samples now.
    pub(super) fn live_threads(&self) -> usize {
        lock(&self.members).slots.len()
    }

    /// A new sampler for a session with options `o`, sampling no thread yet (see
    /// [`WallSampler::register`]) and with no thread of its own yet (see [`WallSampler::run`]); it
    /// replaces the last one for the handler, which stays allocated for late signals.
    pub(super) fn start(cct: &'static Cct, o: &Options) -> Result<&'static WallSampler, String> {
        let sampler: &'static WallSampler = Box::leak(Box::new(WallSampler {
            cct,
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
        Ok(sampler)
    }

    /// The sampler, once started.
    pub(super) fn get() -> Option<&'static WallSampler> {
        let p = SAMPLER.load(Ordering::Acquire);
        // SAFETY: the pointer is either null or a leaked `WallSampler` that lives until the process exits.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    pub(super) fn elapsed_ns(&self) -> u64 {
        let end = match self.stopped_ns.load(Ordering::Acquire) {
            0 => monotonic_ns(),
            t => t,
        };
        end.saturating_sub(self.started_ns)
    }

    pub(super) fn sampler_cpu_ns(&self) -> u64 {
        match self.sampler_tid.load(Ordering::Acquire) {
            0 => self.stats.sampler_cpu_ns.load(Ordering::Relaxed),
            tid => thread_cpu_ns(tid).unwrap_or(0),
        }
    }

    /// Notices, once, that another component replaced the wall signal's handler.
    pub(super) fn check_handler(&self, host: &dyn Host) {
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
    pub(super) fn register(
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
        ws.root.store(root, Ordering::Relaxed);
        ws.thread.store(thread as *mut c_void, Ordering::Release);
        lock(&self.members).slots.push(joined.idx);
        self.stats.threads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Takes the wall engine off slot `idx` (its thread ended, or the session stops).
    /// The handler never reads what the engine keeps for the slot beyond its atomics, so the entry goes
    /// even if the slot was quarantined.
    pub(super) fn remove(&self, reg: &mut threads::Registry, idx: usize, jni: Option<Jni>) {
        let _: Left = reg.leave(idx, WALL);
        self.forget(idx, jni);
    }

    /// Drops the wall engine's entry of slot `idx`: out of the sampler's list (after which the sampler no
    /// longer reads its thread reference), the reference deleted. The handler never reads the reference.
    pub(super) fn forget(&self, idx: usize, jni: Option<Jni>) {
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
    pub(super) fn stop(&self, jni: Option<Jni>) {
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
    pub(super) fn run(&'static self, vm: JavaVm) {
        let Some(jni) = vm.attach_daemon("kprof-wall") else {
            crate::guard::say("mode=wall: the sampler thread cannot attach to the JVM; no wall samples");
            return;
        };
        let jvmti = vm.jvmti(JVMTI_VERSION_1_2);
        let tid = gettid();
        self.sampler_tid.store(tid, Ordering::Release);
        let mut next = monotonic_ns() + self.interval_ns;
        let mut dead = Vec::with_capacity(self.batch);
        let mut off_java = OffJava::new(self.walker.depth);
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
            self.stats.tick_delay_ns.fetch_add(now - next, Ordering::Relaxed);
            // A tick more than an interval late is not made up for with a burst: the next one is an
            // interval from now (the weights count the time anyway).
            next = if now > next + self.interval_ns {
                self.stats.late_ticks.fetch_add(1, Ordering::Relaxed);
                now + self.interval_ns
            } else {
                next + self.interval_ns
            };
            if let Some(jvmti) = jvmti {
                self.tick(jvmti, &mut dead, &mut off_java);
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

    /// One tick: the next `batch` threads each get their state read; a thread off Java code has its
    /// stack read here, the others get a signal. Threads found ended go to `dead`.
    pub(super) fn tick(&self, jvmti: Jvmti, dead: &mut Vec<usize>, off_java: &mut OffJava) {
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
            let state = if state == State::Running && self.waits_in_vm(ws, idx, now, off_java) {
                self.stats.vm_waits.fetch_add(1, Ordering::Relaxed);
                State::VmWait
            } else {
                state
            };
            let head = ws.head.load(Ordering::Relaxed);
            let tail = ws.tail.load(Ordering::Acquire);
            if state.off_java() && head == tail && self.read_off_java(jvmti, idx, ws, thread, state, now, off_java) {
                continue;
            }
            if head.wrapping_sub(tail) as usize >= PENDING {
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

    /// Whether a thread JVMTI calls runnable, not in native code, waits inside the VM: asleep in the kernel
    /// now, having used little CPU time since its last pick. JVMTI reports the JVM's own waits (Signal
    /// Dispatcher, Notification Thread; Reference Handler's on JDK 25) and a thread waiting out a safepoint
    /// as runnable; signalled, such a thread would be sampled as running, and have its wait interrupted
    /// at every pick. A thread on a CPU, or runnable and waiting for one, is running.
    fn waits_in_vm(&self, ws: &WallSlot, idx: usize, now: u64, off_java: &mut OffJava) -> bool {
        let tid = ws.tid.load(Ordering::Relaxed);
        let cpu_ns = thread_cpu_ns(tid);
        let last = last_of(&mut off_java.last, idx, ws);
        let before = last.pick_cpu_ns.map(|c| (c, last.pick_ns));
        (last.pick_cpu_ns, last.pick_ns) = (cpu_ns, now);
        match (cpu_ns, before) {
            (Some(cpu), Some((was, at))) => {
                cpu.saturating_sub(was).saturating_mul(MOSTLY_IDLE) < now.saturating_sub(at) && sleeps_in_kernel(tid)
            }
            _ => false,
        }
    }

    /// One sample of a thread off Java code, its stack read here rather than by a signal's handler on the
    /// thread: a sleeping, waiting, parked or blocked thread (or one in native code) runs no Java code, so
    /// its Java stack is the one the handler would walk, and reading it does not wake the thread (a
    /// handshake HotSpot lets this thread run for it). Only with the thread's ring empty: no handler can be
    /// at its picks then (signals come from this thread alone, and a late one finds nothing to take), so
    /// the pick is counted here, in order. Returns false to fall back to the signal (the stack could not
    /// be read).
    #[allow(clippy::too_many_arguments)]
    fn read_off_java(
        &self,
        jvmti: Jvmti,
        idx: usize,
        ws: &WallSlot,
        thread: *mut c_void,
        state: State,
        now: u64,
        off_java: &mut OffJava,
    ) -> bool {
        let last = last_of(&mut off_java.last, idx, ws);
        // A thread that has used no CPU time since its stack was read has not run: its stack is the one
        // read then. (Exact: the kernel adds every moment on a CPU to the thread's clock.) A thread found
        // waiting in the VM had its clock read a moment ago, for this pick ([`Self::waits_in_vm`]).
        let cpu_ns = match state {
            State::VmWait => last.pick_cpu_ns,
            _ => thread_cpu_ns(ws.tid.load(Ordering::Relaxed)),
        };
        let weight = |ws: &WallSlot| now.saturating_sub(ws.last_pick_ns.swap(now, Ordering::Relaxed));
        if cpu_ns.is_some()
            && cpu_ns == last.cpu_ns
            && last.state == Some(state)
            && last.leaf != 0
            && ws.last_leaf.load(Ordering::Relaxed) == last.leaf
        {
            self.count_pick(ws, last.leaf, weight(ws));
            self.stats.unchanged.fetch_add(1, Ordering::Relaxed);
            self.stats.samples.fetch_add(1, Ordering::Relaxed);
            if last.usable {
                self.stats.usable.fetch_add(1, Ordering::Relaxed);
            }
            return true;
        }
        let Ok(n) = jvmti.stack_trace_of(thread as jthread, &mut off_java.frames) else { return false };
        let depth = self.walker.depth as usize;
        let root = ws.root.load(Ordering::Relaxed);
        let overflow = self.cct.overflow();
        let node = if n == 0 {
            // A thread with no Java frame yet (or any more): as the handler's failed walk would have it.
            self.cct.child(root, FrameId::pseudo(crate::frame::Pseudo::NotJava), -1).unwrap_or(overflow)
        } else {
            let frames = &off_java.frames[..n.min(depth)];
            record_frames(self.cct, &mut last.path, &mut last.base, root, frames, n > depth)
        };
        let label = FrameId(LABEL_IDS[state as usize].load(Ordering::Acquire));
        let leaf = if node == overflow { node } else { self.cct.child(node, label, -1).unwrap_or(overflow) };
        // Reused where a stack was read (a thread with no Java frame too: the VM's own threads that wait in
        // it, which have none); not the overflow node, where the read's frames were not kept.
        (last.cpu_ns, last.state, last.usable) = (cpu_ns, Some(state), n > 0);
        last.leaf = if node != overflow { leaf } else { 0 };
        self.count_pick(ws, leaf, weight(ws));
        self.stats.read.fetch_add(1, Ordering::Relaxed);
        self.stats.samples.fetch_add(1, Ordering::Relaxed);
        if n > 0 {
            self.stats.usable.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Takes off threads that ended without their ThreadEnd reaching kprof (found at a session's start
    /// while ending).
    pub(super) fn retire(&self, dead: &mut Vec<usize>, jni: Jni) {
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
}
