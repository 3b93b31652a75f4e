//! mode=lock: where threads wait for locks, and how long.
//!
//! Two sources, both measured on the waiting thread itself, which then records its own stack (JVMTI
//! GetStackTrace) below its root with a leaf label naming the lock's class (`[lock java.lang.Object]`),
//! counting one wait (`lock_count`) of its nanoseconds (`lock_ns`):
//! - contended `synchronized`: JVMTI MonitorContendedEnter (the thread finds the monitor taken) and
//!   MonitorContendedEntered (it has the monitor now) in the engine's own JVMTI environment; the time
//!   between the two is the wait, kept per thread in between.
//! - `java.util.concurrent` locks, semaphores, latches and conditions, which park the thread in
//!   `Unsafe.park` through `LockSupport`: [`park`] rewrites LockSupport's park calls to go through a Java
//!   helper that times them and hands waits to the engine with the park blocker (the object the thread
//!   waits for, which names the lock: `[lock java.util.concurrent.locks.ReentrantLock$NonfairSync]`;
//!   `[park]` without one).
//!
//! Waits shorter than `lock=` (default 10us; 0 records every wait) are only counted. A wait costs the
//! waiting thread its stack walk, after the wait: nothing is added to a thread that does not wait.

mod park;

use crate::cct::{Metric, NodeId, ROOT};
use crate::engine::stack::jvmti_path::record_path;
use crate::engine::stack::{self, own, own::OwnStack};
use crate::engine::{fields, format_interval, Engine, Host, Phase, OWN_THREAD_PREFIX};
use crate::frame::{self, FrameId};
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti};
use kprof_profile::Meta;
use kprof_protocol::options::{EngineKind, Options};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// What the engine counts.
#[derive(Default)]
struct LockStats {
    monitor_waits: AtomicU64,
    park_waits: AtomicU64,
    /// Nanoseconds of the recorded waits.
    wait_ns: AtomicU64,
    /// Monitor waits below the threshold (those of parks are counted by the Java helper, [`park::SKIPPED`]).
    monitor_skipped: AtomicU64,
    /// Waits that could not be recorded (no stack, a pending exception, the thread's state in use).
    dropped: AtomicU64,
}

/// What an OS thread keeps for the Java thread it runs (a carrier runs many virtual threads in turn: the
/// cached root is checked against the thread that records).
struct ThreadState {
    /// The session its root and kind belong to (0: none yet).
    generation: u64,
    /// The Java thread `root` and `own` are of: a weak global reference (0: none).
    thread: usize,
    root: NodeId,
    /// One of kprof's own threads (never recorded).
    own: bool,
    stack: Option<OwnStack>,
    /// The nodes of the last recorded stack, root side first: (frame, callsite, node), below `path_base`.
    path: Vec<(u64, i32, NodeId)>,
    path_base: NodeId,
}

thread_local! {
    static THREAD: RefCell<ThreadState> = const {
        RefCell::new(ThreadState {
            generation: 0,
            thread: 0,
            root: ROOT,
            own: false,
            stack: None,
            path: Vec::new(),
            path_base: ROOT,
        })
    };
}

/// The lock engine.
pub struct LockEngine {
    host: &'static dyn Host,
    jvmti: Jvmti,
    running: AtomicBool,
    /// Numbers the sessions the engine ran, so that per-thread state of an earlier one is not taken for
    /// this one's.
    generation: AtomicU64,
    /// When the session started, in [`now_ns`] time.
    started_ns: AtomicU64,
    threshold_ns: AtomicU64,
    depth: AtomicU32,
    stats: LockStats,
    /// Labels of lock classes by the class's identity hash: (weak reference to the class, its label).
    classes: Mutex<HashMap<i32, Vec<(usize, FrameId)>>>,
    park: park::Parks,
    /// Stacks may be walked by AsyncGetCallTrace ([`OwnStack`]).
    fast_walks: bool,
}

static ENGINE: OnceLock<LockEngine> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates the lock engine: its JVMTI environment with monitor events and the class-file hook that
/// brackets LockSupport's parks (both capabilities are available at start-up and on attach alike).
pub fn create(host: &'static dyn Host, _options: &Options, _phase: Phase) -> Result<&'static dyn Engine, String> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let jvmti = host.vm().jvmti(JVMTI_VERSION_1_2).ok_or("no JVMTI environment")?;
    let potential = jvmti.potential_capabilities().map_err(|e| format!("GetPotentialCapabilities: {e}"))?;
    if potential.can_generate_monitor_events() == 0 {
        return Err("this JVM cannot report monitor contention (can_generate_monitor_events)".into());
    }
    if potential.can_retransform_classes() == 0 {
        return Err("this JVM cannot retransform classes (needed to time LockSupport's parks)".into());
    }
    let mut caps = jvmtiCapabilities::default();
    caps.set_can_generate_monitor_events(1);
    caps.set_can_retransform_classes(1);
    jvmti.add_capabilities(&caps).map_err(|e| format!("AddCapabilities: {e}"))?;
    let callbacks = jvmtiEventCallbacks {
        MonitorContendedEnter: Some(on_monitor_contended_enter),
        MonitorContendedEntered: Some(on_monitor_contended_entered),
        ClassFileLoadHook: Some(park::on_class_file_load_hook),
        ..Default::default()
    };
    jvmti.set_event_callbacks(&callbacks).map_err(|e| format!("SetEventCallbacks: {e}"))?;
    crate::engine::rewriting::boot_runtime(jvmti)?;
    let fast_walks = stack::enable_own_stack_walks(host).is_ok();
    Ok(ENGINE.get_or_init(|| LockEngine {
        host,
        jvmti,
        running: AtomicBool::new(false),
        generation: AtomicU64::new(0),
        started_ns: AtomicU64::new(0),
        threshold_ns: AtomicU64::new(0),
        depth: AtomicU32::new(0),
        stats: LockStats::default(),
        classes: Mutex::new(HashMap::new()),
        park: park::Parks::default(),
        fast_walks,
    }))
}

impl LockEngine {
    fn get() -> Option<&'static LockEngine> {
        ENGINE.get()
    }

    fn monitor_events(&self, on: bool) -> Result<(), String> {
        for e in [JVMTI_EVENT_MONITOR_CONTENDED_ENTER, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED] {
            self.jvmti.set_event(e, on).map_err(|err| format!("enabling JVMTI event {e}: {err}"))?;
        }
        Ok(())
    }

    /// MonitorContendedEnter, on the thread that is about to wait: the time, in the thread's JVMTI
    /// thread-local word (a virtual thread's own: it may resume on another carrier).
    fn contended_enter(&self) {
        if self.running.load(Ordering::Acquire) {
            let _ = self.jvmti.set_thread_local_word(now_ns() as usize);
        }
    }

    /// MonitorContendedEntered, on the thread that waited: records the wait if it was long enough.
    fn contended_entered(&self, jni: Jni, thread: jthread, object: jobject) {
        let now = now_ns();
        let Ok(entered) = self.jvmti.thread_local_word() else { return };
        if entered == 0 {
            return;
        }
        let _ = self.jvmti.set_thread_local_word(0);
        // A wait that began before this session (the events were off in between) is not this session's.
        if !self.running.load(Ordering::Acquire) || (entered as u64) < self.started_ns.load(Ordering::Acquire) {
            return;
        }
        let waited = now.saturating_sub(entered as u64);
        if waited < self.threshold_ns.load(Ordering::Relaxed) {
            self.stats.monitor_skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let recorded = THREAD.try_with(|cell| {
            let Ok(mut state) = cell.try_borrow_mut() else { return false };
            // JNI allows almost no call while an exception is pending, and it is not ours to clear.
            if jni.exception_pending() {
                return false;
            }
            let Some(label) = self.class_label(jni, object) else { return false };
            let recorded = self.record(jni, &mut state, Some(thread), label, &|_| false, waited);
            if recorded == Some(true) {
                self.stats.monitor_waits.fetch_add(1, Ordering::Relaxed);
            }
            recorded.is_some()
        });
        if recorded != Ok(true) {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A park of `waited` ns that reached the threshold, from the Java helper (on the thread that
    /// parked); `blocker` is its park blocker (may be null), `skip` what to leave out of the top of the
    /// stack (the helper's frames).
    fn parked(&self, jni: Jni, waited: u64, blocker: jobject, skip: &dyn Fn(jmethodID) -> bool) {
        if !self.running.load(Ordering::Acquire) {
            return;
        }
        let recorded = THREAD.try_with(|cell| {
            let Ok(mut state) = cell.try_borrow_mut() else { return false };
            let label = if blocker.is_null() { Some(self.park.unnamed()) } else { self.class_label(jni, blocker) };
            let Some(label) = label else { return false };
            let recorded = self.record(jni, &mut state, None, label, skip, waited);
            if recorded == Some(true) {
                self.stats.park_waits.fetch_add(1, Ordering::Relaxed);
            }
            recorded.is_some()
        });
        if recorded != Ok(true) {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The root of the calling thread (`thread`, or the current one) for the running session, found from
    /// its name once per session and thread; `None` for kprof's own threads.
    fn root(&self, jni: Jni, state: &mut ThreadState, thread: Option<jthread>) -> Option<NodeId> {
        let generation = self.generation.load(Ordering::Acquire);
        let current = match thread {
            Some(t) => t,
            None => self.jvmti.current_thread().unwrap_or(std::ptr::null_mut()),
        };
        let same = state.generation == generation
            && state.thread != 0
            && !current.is_null()
            && jni.is_same_object(current, state.thread as jobject);
        if !same {
            let name =
                if current.is_null() { String::new() } else { self.jvmti.thread_name(current).unwrap_or_default() };
            state.own = name.starts_with(OWN_THREAD_PREFIX);
            state.root = if state.own { ROOT } else { self.host.thread_root(&name) };
            state.generation = generation;
            jni.delete_weak_global_ref(state.thread as jweak);
            state.thread = if current.is_null() { 0 } else { jni.new_weak_global_ref(current) as usize };
        }
        if thread.is_none() {
            jni.delete_local_ref(current);
        }
        (!state.own).then_some(state.root)
    }

    /// Records a wait of `waited` ns: the thread's stack, less its top frames for which `skip` holds, below
    /// its root, then `label`. `Some(false)`: a wait of one of kprof's own threads, left out; `None`: it
    /// could not be recorded.
    fn record(
        &self,
        jni: Jni,
        state: &mut ThreadState,
        thread: Option<jthread>,
        label: FrameId,
        skip: &dyn Fn(jmethodID) -> bool,
        waited: u64,
    ) -> Option<bool> {
        let Some(root) = self.root(jni, state, thread) else { return Some(false) };
        let depth = self.depth.load(Ordering::Relaxed) as usize;
        let ThreadState { stack, path, path_base, .. } = state;
        // Room for the helper's frames on top of `depth` of the application's, and one more to see a cut.
        let walker = stack.get_or_insert_with(|| OwnStack::new(&own::EVENT_WALKS));
        let frames = walker.walk(jni, self.jvmti, depth + 4, self.fast_walks, &mut |_| true).ok()?.frames;
        let top = frames.iter().take_while(|f| skip(f.method)).count();
        let stack = &frames[top..];
        let truncated = stack.len() > depth;
        let node =
            record_path(self.host.cct(), path, path_base, root, &stack[..stack.len().min(depth)], truncated, label);
        self.host.cct().add_events(node, Metric::LockCount, 1, Metric::LockNs, waited);
        self.stats.wait_ns.fetch_add(waited, Ordering::Relaxed);
        Some(true)
    }

    /// The label of an object's class (`[lock java.lang.Object]`), made once per class.
    fn class_label(&self, jni: Jni, object: jobject) -> Option<FrameId> {
        let class = jni.object_class(object);
        if class.is_null() {
            return None;
        }
        let label = self.label_of_class(jni, class);
        jni.delete_local_ref(class);
        label
    }

    fn label_of_class(&self, jni: Jni, class: jclass) -> Option<FrameId> {
        let hash = self.jvmti.object_hash(class).ok()?;
        let mut classes = lock(&self.classes);
        let known = classes.entry(hash).or_default();
        if let Some(&(_, label)) = known.iter().find(|(weak, _)| jni.is_same_object(class, *weak as jobject)) {
            return Some(label);
        }
        // Entries of unloaded classes that had the same hash go now.
        known.retain(|&(weak, _)| {
            let gone = jni.is_collected(weak as jweak);
            if gone {
                jni.delete_weak_global_ref(weak as jweak);
            }
            !gone
        });
        let signature = self.jvmti.class_signature(class).ok()?;
        let label = frame::label(&format!("[lock {}]", java_type_name(&signature)));
        let weak = jni.new_weak_global_ref(class);
        if !weak.is_null() {
            known.push((weak as usize, label));
        }
        Some(label)
    }
}

/// Monotonic nanoseconds since the engine's first use, from 1 (0 stands for none).
fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

/// A class signature as Java spells the type: `Ljava/lang/Object;` → `java.lang.Object`, `[I` → `int[]`.
fn java_type_name(signature: &str) -> String {
    let dims = signature.bytes().take_while(|&b| b == b'[').count();
    let element = &signature[dims..];
    let base = match element {
        "Z" => "boolean".to_string(),
        "B" => "byte".to_string(),
        "C" => "char".to_string(),
        "S" => "short".to_string(),
        "I" => "int".to_string(),
        "J" => "long".to_string(),
        "F" => "float".to_string(),
        "D" => "double".to_string(),
        _ => element.strip_prefix('L').and_then(|s| s.strip_suffix(';')).unwrap_or(element).replace('/', "."),
    };
    format!("{base}{}", "[]".repeat(dims))
}

/// `10us` as `lock=` spells it (`0` for every wait).
fn threshold_text(ns: u64) -> String {
    if ns == 0 {
        "0".into()
    } else {
        format_interval(ns)
    }
}

impl Engine for LockEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Lock
    }

    fn check(&self, _options: &Options) -> Result<(), String> {
        Ok(())
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        let st = &self.stats;
        for c in [&st.monitor_waits, &st.park_waits, &st.wait_ns, &st.monitor_skipped, &st.dropped] {
            c.store(0, Ordering::Relaxed);
        }
        self.threshold_ns.store(o.lock_ns, Ordering::Relaxed);
        self.depth.store(o.depth, Ordering::Relaxed);
        self.started_ns.store(now_ns(), Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.running.store(true, Ordering::Release);
        if let Err(e) = self.monitor_events(true) {
            self.running.store(false, Ordering::Release);
            return Err(e);
        }
        // Without the helper, monitors are still recorded: say why parks are not.
        if let Err(e) = self.park.start(jni, self.jvmti, o.lock_ns, o.conditions) {
            self.host.say(&format!("mode=lock: waits in LockSupport.park are not recorded: {e}"));
        }
        Ok(format!("lock={} conditions={}", threshold_text(o.lock_ns), if o.conditions { "on" } else { "off" }))
    }

    fn stop(&self, jni: Option<Jni>, restore: bool) {
        self.running.store(false, Ordering::Release);
        let _ = self.monitor_events(false);
        self.park.stop(jni, self.jvmti, restore);
    }

    // Roots are found when a thread first waits (`root`): threads that never wait cost nothing.

    /// The thread's weak reference goes with it.
    fn thread_end(&self, jni: Jni, _thread: jthread) {
        let _ = THREAD.try_with(|cell| {
            if let Ok(mut state) = cell.try_borrow_mut() {
                jni.delete_weak_global_ref(state.thread as jweak);
                state.thread = 0;
                state.generation = 0;
            }
        });
    }

    fn describe(&self, o: &Options, meta: &mut Meta) {
        let st = &self.stats;
        let monitor = st.monitor_waits.load(Ordering::Relaxed);
        let parks = st.park_waits.load(Ordering::Relaxed);
        let c = &mut meta.counters;
        c.insert("lock_threshold_ns".into(), o.lock_ns);
        c.insert("lock_waits".into(), monitor + parks);
        c.insert("lock_monitor_waits".into(), monitor);
        c.insert("lock_park_waits".into(), parks);
        c.insert("lock_skipped".into(), st.monitor_skipped.load(Ordering::Relaxed) + self.park.skipped());
        c.insert("lock_wait_ns".into(), st.wait_ns.load(Ordering::Relaxed));
        c.insert("lock_dropped".into(), st.dropped.load(Ordering::Relaxed));
        c.insert("lock_parks_bracketed".into(), self.park.bracketed());
        let (walks, by_jvmti) = own::EVENT_WALKS.get();
        c.insert("event_walks".into(), walks);
        c.insert("event_walks_jvmti".into(), by_jvmti);
        c.insert("lock_conditions".into(), o.conditions as u64);
        c.insert("lock_condition_waits_unrecorded".into(), self.park.condition_waits());
    }

    fn summary(&self, meta: &Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        format!(
            "lock={} {} ms={}",
            threshold_text(c("lock_threshold_ns")),
            fields(
                meta,
                &[
                    ("waits", "lock_waits"),
                    ("monitor", "lock_monitor_waits"),
                    ("park", "lock_park_waits"),
                    ("skipped", "lock_skipped"),
                    ("conditions", "lock_condition_waits_unrecorded"),
                    ("dropped", "lock_dropped"),
                ]
            ),
            c("lock_wait_ns") / 1_000_000
        )
    }
}

unsafe extern "C" fn on_monitor_contended_enter(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    _object: jobject,
) {
    guard((), || {
        if let Some(e) = LockEngine::get() {
            e.contended_enter();
        }
    })
}

unsafe extern "C" fn on_monitor_contended_entered(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    guard((), || {
        if let Some(e) = LockEngine::get() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            e.contended_entered(unsafe { Jni::from_raw(jni) }, thread, object);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names() {
        assert_eq!(java_type_name("Ljava/lang/Object;"), "java.lang.Object");
        assert_eq!(
            java_type_name("Ljava/util/concurrent/locks/ReentrantLock$NonfairSync;"),
            "java.util.concurrent.locks.ReentrantLock$NonfairSync"
        );
        assert_eq!(java_type_name("[I"), "int[]");
        assert_eq!(java_type_name("[[Ljava/lang/String;"), "java.lang.String[][]");
    }

    #[test]
    fn thresholds() {
        assert_eq!(threshold_text(0), "0");
        assert_eq!(threshold_text(10_000), "10us");
        assert_eq!(threshold_text(1_500), "1500ns");
        assert_eq!(threshold_text(2_000_000), "2ms");
    }
}
