//! mode=alloc: where memory is allocated, from the JVM's allocation sampling (JVMTI SampledObjectAlloc).
//!
//! The JVM samples each thread's allocations about once per `alloc=` bytes (see [`estimate`]) and calls
//! [`on_sampled_object_alloc`] on the allocating thread, in native state (not in a signal handler), with
//! the object, its class and its size. The engine takes the thread's stack with GetStackTrace, walks it
//! into the tree below the thread's root and adds a leaf naming the class (`[alloc byte[]]`); the leaf's
//! callsite is the bci of the allocation, as every frame's callsite is the bci its caller was executing.
//! Each sample adds the objects and bytes it stands for (`alloc_count`, `alloc_bytes`).
//!
//! The tree's counters are integers and a sample's weights are not (a sample of a 512 KiB object at
//! 512k stands for 1.58 objects). Each weight is rounded down or up at random, up with probability equal
//! to its fraction ([`estimate::round_random`]): every context's counts stay unbiased, with no state
//! shared between contexts or threads. Per-thread remainders would keep each thread's total exact but
//! move fractions from one context to the next; fixed point in the tree would change the unit of a
//! column every writer and reader shares. The added spread is at most a quarter of a unit per sample.
//! The summary's totals are kept exactly, in fixed point.
//!
//! live=on keeps a weak reference per sample ([`live`]); before each write the engine collects garbage
//! and recounts its two columns from the samples whose objects are still alive.
//!
//! Per-thread state (the thread's root, its stack buffer and last path) is thread-local: the callback
//! runs on the allocating thread. Allocations of kprof's own threads are not counted.

pub mod estimate;
pub mod live;

use crate::cct::{Metric, NodeId, ROOT};
use crate::engine::stack::jvmti_path::record_path;
use crate::engine::stack::own::{self, OwnStack, Walk};
use crate::engine::{Engine, Host, Phase, OWN_THREAD_PREFIX};
use crate::frame::{self, FrameId};
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti};
use estimate::{format_size, round_random, weights, Rng, FIXED_ONE};
use kprof_profile::Meta;
use kprof_protocol::options::{EngineKind, Options};
use live::LiveSet;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// The allocation engine.
pub struct AllocEngine {
    host: &'static dyn Host,
    /// The engine's own JVMTI environment (SampledObjectAlloc and its capability).
    jvmti: Jvmti,
    running: AtomicBool,
    /// Number of the current session: per-thread state from an earlier one is refreshed.
    generation: AtomicU32,
    /// The session's mean sampling interval, bytes.
    interval: AtomicU64,
    depth: AtomicU32,
    live: AtomicBool,
    stats: Stats,
    /// Class labels by the class's identity hash: (weak reference to the class, its label).
    classes: Mutex<HashMap<i32, Vec<(usize, FrameId)>>>,
    samples: LiveSet,
}

/// The session's figures.
#[derive(Default)]
struct Stats {
    samples: AtomicU64,
    /// Samples that could not be counted (no stack, no class name, a pending exception, no weak reference).
    dropped: AtomicU64,
    /// Samples of kprof's own threads, ignored.
    own_thread: AtomicU64,
    /// Estimated bytes and objects allocated, fixed point ([`FIXED_ONE`]).
    bytes: AtomicU64,
    objects: AtomicU64,
    /// live=on, at the last count: samples whose objects were alive, and what they stand for.
    live_samples: AtomicU64,
    live_bytes: AtomicU64,
    live_objects: AtomicU64,
    /// live=on: time spent collecting garbage before counts, nanoseconds.
    gc_ns: AtomicU64,
}

impl Stats {
    fn reset(&self) {
        for c in [
            &self.samples,
            &self.dropped,
            &self.own_thread,
            &self.bytes,
            &self.objects,
            &self.live_samples,
            &self.live_bytes,
            &self.live_objects,
            &self.gc_ns,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

static ENGINE: OnceLock<AllocEngine> = OnceLock::new();

/// What the engine keeps per thread.
struct ThreadState {
    /// The session this state belongs to (0: none yet).
    generation: u32,
    root: NodeId,
    /// A kprof thread: its allocations are not counted.
    own: bool,
    rng: Option<Rng>,
    stack: Option<OwnStack>,
    /// The path of the thread's previous sample, root side first: (frame, callsite, node). Consecutive
    /// samples of a thread mostly share their outer frames, whose tree lookups this skips.
    path: Vec<(u64, i32, NodeId)>,
    /// The node `path` starts below.
    path_base: NodeId,
}

thread_local! {
    static THREAD: RefCell<ThreadState> = const {
        RefCell::new(ThreadState {
            generation: 0,
            root: ROOT,
            own: false,
            rng: None,
            stack: None,
            path: Vec::new(),
            path_base: 0,
        })
    };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates the allocation engine with its JVMTI environment. The capability is one HotSpot grants in
/// every phase, so the engine works on attach too.
pub fn create(host: &'static dyn Host, _options: &Options, _phase: Phase) -> Result<&'static dyn Engine, String> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let jvmti = host.vm().jvmti(JVMTI_VERSION_1_2).ok_or("no JVMTI environment")?;
    let potential = jvmti.potential_capabilities().map_err(|e| format!("GetPotentialCapabilities: {e}"))?;
    if potential.can_generate_sampled_object_alloc_events() == 0 {
        return Err("this JVM cannot sample allocations (no can_generate_sampled_object_alloc_events)".into());
    }
    let mut caps = jvmtiCapabilities::default();
    caps.set_can_generate_sampled_object_alloc_events(1);
    jvmti.add_capabilities(&caps).map_err(|e| format!("AddCapabilities: {e}"))?;
    let callbacks = jvmtiEventCallbacks { SampledObjectAlloc: Some(on_sampled_object_alloc), ..Default::default() };
    jvmti.set_event_callbacks(&callbacks).map_err(|e| format!("SetEventCallbacks: {e}"))?;
    Ok(ENGINE.get_or_init(|| AllocEngine {
        host,
        jvmti,
        running: AtomicBool::new(false),
        generation: AtomicU32::new(0),
        interval: AtomicU64::new(512 * 1024),
        depth: AtomicU32::new(2048),
        live: AtomicBool::new(false),
        stats: Stats::default(),
        classes: Mutex::new(HashMap::new()),
        samples: LiveSet::new(),
    }))
}

/// SampledObjectAlloc, on the allocating thread.
unsafe extern "C" fn on_sampled_object_alloc(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    klass: jclass,
    size: jlong,
) {
    guard((), || {
        if let Some(e) = ENGINE.get() {
            // SAFETY: the JVM passes the allocating thread's JNIEnv.
            e.sampled(unsafe { Jni::from_raw(jni) }, thread, object, klass, size.max(0) as u64);
        }
    })
}

impl AllocEngine {
    fn sampled(&self, jni: Jni, thread: jthread, object: jobject, klass: jclass, size: u64) {
        if !self.running.load(Ordering::Acquire) {
            return;
        }
        // JNI allows almost no call while an exception is pending, and the exception is not ours to clear.
        if jni.exception_pending() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let counted = THREAD.try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut state) => self.record(jni, &mut state, thread, object, klass, size),
            Err(_) => false,
        });
        if counted != Ok(true) {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one sample; false when it could not be (counted as dropped). Own threads' samples are
    /// ignored (true).
    fn record(
        &self,
        jni: Jni,
        state: &mut ThreadState,
        thread: jthread,
        object: jobject,
        klass: jclass,
        size: u64,
    ) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if state.generation != generation {
            // A thread that was running when the session started (or that ThreadStart did not reach):
            // its name once, for its root and to know kprof's own threads.
            let name = self.jvmti.thread_name(thread).unwrap_or_default();
            state.own = name.starts_with(OWN_THREAD_PREFIX);
            state.root = if state.own { ROOT } else { self.host.thread_root(&name) };
            state.generation = generation;
            state.path.clear();
        }
        if state.own {
            self.stats.own_thread.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let Some(label) = self.class_label(jni, klass) else { return false };
        let depth = self.depth.load(Ordering::Relaxed) as usize;
        let ThreadState { stack, path, path_base, root, rng, .. } = state;
        // JVMTI walks: AsyncGetCallTrace gives no walk from this callback for nearly every sample (compiled
        // code allocates through a runtime call it cannot start from; docs/alloc.md).
        let walker = stack.get_or_insert_with(|| OwnStack::new(&own::EVENT_WALKS));
        let Ok(Walk { frames, .. }) = walker.walk(jni, self.jvmti, depth + 1, false, &mut |_| true) else {
            return false;
        };
        let truncated = frames.len() > depth;
        let node =
            record_path(self.host.cct(), path, path_base, *root, &frames[..frames.len().min(depth)], truncated, label);
        let interval = self.interval.load(Ordering::Relaxed);
        let (objects, bytes) = weights(size, interval);
        let cct = self.host.cct();
        if self.live.load(Ordering::Relaxed) {
            if !self.samples.push(jni, node, object, size) {
                return false;
            }
            if node == cct.overflow() {
                // Counted as overflow now; the column itself is recounted before each write.
                cct.add_events(node, Metric::AllocCount, 1, Metric::AllocBytes, 0);
            }
        } else {
            let rng = rng.get_or_insert_with(|| Rng::new(kprof_timers::gettid() as u64 ^ (size << 32)));
            let (n, b) = (round_random(objects, rng), round_random(bytes, rng));
            cct.add_events(node, Metric::AllocCount, n, Metric::AllocBytes, b);
        }
        self.stats.samples.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes.fetch_add((bytes * FIXED_ONE) as u64, Ordering::Relaxed);
        self.stats.objects.fetch_add((objects * FIXED_ONE) as u64, Ordering::Relaxed);
        true
    }

    /// The label of the allocated class (`[alloc java.lang.String]`), made once per class.
    fn class_label(&self, jni: Jni, klass: jclass) -> Option<FrameId> {
        let hash = self.jvmti.object_hash(klass).ok()?;
        let mut classes = lock(&self.classes);
        let known = classes.entry(hash).or_default();
        if let Some(&(_, label)) = known.iter().find(|(weak, _)| jni.is_same_object(klass, *weak as jobject)) {
            return Some(label);
        }
        // Entries of unloaded classes that shared the hash go now.
        known.retain(|&(weak, _)| {
            let gone = jni.is_collected(weak as jweak);
            if gone {
                jni.delete_weak_global_ref(weak as jweak);
            }
            !gone
        });
        let signature = self.jvmti.class_signature(klass).ok()?;
        let label = frame::label(&format!("[alloc {}]", estimate::java_type_name(&signature)));
        let weak = jni.new_weak_global_ref(klass);
        if !weak.is_null() {
            known.push((weak as usize, label));
        }
        Some(label)
    }

    /// live=on: collects garbage, then recounts the alloc columns from the samples whose objects are
    /// still alive.
    fn count_live(&self, jni: Jni) {
        let t = Instant::now();
        if let Err(e) = self.jvmti.force_garbage_collection() {
            self.host.note_once(&format!("alloc: ForceGarbageCollection: {e}; live objects counted without it"));
        }
        self.stats.gc_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let interval = self.interval.load(Ordering::Relaxed);
        let mut by_node: HashMap<NodeId, (f64, f64)> = HashMap::new();
        let alive = self.samples.count_alive(jni, |s| {
            let (n, b) = weights(s.size, interval);
            let e = by_node.entry(s.node).or_default();
            e.0 += n;
            e.1 += b;
        });
        let cct = self.host.cct();
        cct.reset_metric(Metric::AllocCount);
        cct.reset_metric(Metric::AllocBytes);
        let (mut objects, mut bytes) = (0.0, 0.0);
        for (node, (n, b)) in by_node {
            // A context's sum rounded once: within half a unit.
            cct.add(node, Metric::AllocCount, n.round() as u64);
            cct.add(node, Metric::AllocBytes, b.round() as u64);
            objects += n;
            bytes += b;
        }
        self.stats.live_samples.store(alive as u64, Ordering::Relaxed);
        self.stats.live_objects.store(objects.round() as u64, Ordering::Relaxed);
        self.stats.live_bytes.store(bytes.round() as u64, Ordering::Relaxed);
    }
}

impl Engine for AllocEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Alloc
    }

    fn check(&self, _options: &Options) -> Result<(), String> {
        Ok(())
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        // The option parser keeps the interval in 1..1g: it fits the jint JVMTI takes.
        let interval = i32::try_from(o.alloc_bytes).map_err(|_| format!("alloc={} is too large", o.alloc_bytes))?;
        self.samples.clear(jni);
        self.stats.reset();
        self.interval.store(o.alloc_bytes, Ordering::Relaxed);
        self.depth.store(o.depth, Ordering::Relaxed);
        self.live.store(o.live, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.jvmti.set_heap_sampling_interval(interval).map_err(|e| format!("SetHeapSamplingInterval: {e}"))?;
        self.running.store(true, Ordering::Release);
        if let Err(e) = self.jvmti.set_event(JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, true) {
            self.running.store(false, Ordering::Release);
            return Err(format!("enabling SampledObjectAlloc: {e}"));
        }
        Ok(format!("alloc={} live={}", format_size(o.alloc_bytes), if o.live { "on" } else { "off" }))
    }

    fn stop(&self, jni: Option<Jni>, _restore: bool) {
        let _ = self.jvmti.set_event(JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, false);
        let was_running = self.running.swap(false, Ordering::AcqRel);
        if let (true, true, Some(jni)) = (was_running, self.live.load(Ordering::Relaxed), jni) {
            self.count_live(jni);
        }
    }

    fn thread_start(&self, _jni: Jni, _thread: jthread, root: NodeId) {
        // The agent gives the root (and never calls this for kprof's own threads): no name lookup later.
        let generation = self.generation.load(Ordering::Acquire);
        let _ = THREAD.try_with(|cell| {
            if let Ok(mut state) = cell.try_borrow_mut() {
                state.generation = generation;
                state.root = root;
                state.own = false;
                state.path.clear();
            }
        });
    }

    fn before_write(&self, jni: Option<Jni>) {
        if let (true, true, Some(jni)) = (self.running.load(Ordering::Acquire), self.live.load(Ordering::Relaxed), jni)
        {
            self.count_live(jni);
        }
    }

    fn describe(&self, o: &Options, meta: &mut Meta) {
        let s = &self.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let fixed = |c: &AtomicU64| (c.load(Ordering::Relaxed) as f64 / FIXED_ONE).round() as u64;
        let c = &mut meta.counters;
        c.insert("alloc_interval_bytes".into(), o.alloc_bytes);
        c.insert("alloc_samples".into(), get(&s.samples));
        c.insert("alloc_dropped_samples".into(), get(&s.dropped));
        c.insert("alloc_own_thread_samples".into(), get(&s.own_thread));
        c.insert("alloc_bytes".into(), fixed(&s.bytes));
        c.insert("alloc_objects".into(), fixed(&s.objects));
        c.insert("alloc_live".into(), o.live as u64);
        let (walks, by_jvmti) = own::EVENT_WALKS.get();
        c.insert("event_walks".into(), walks);
        c.insert("event_walks_jvmti".into(), by_jvmti);
        if o.live {
            c.insert("alloc_live_samples".into(), get(&s.live_samples));
            c.insert("alloc_live_bytes".into(), get(&s.live_bytes));
            c.insert("alloc_live_objects".into(), get(&s.live_objects));
            c.insert("alloc_samples_held".into(), self.samples.held() as u64);
            c.insert("alloc_gc_ms".into(), get(&s.gc_ns) / 1_000_000);
        }
    }

    fn summary(&self, meta: &Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        let mut part = format!(
            "alloc={} samples={} bytes={} objects={} dropped={}",
            format_size(c("alloc_interval_bytes")),
            c("alloc_samples"),
            c("alloc_bytes"),
            c("alloc_objects"),
            c("alloc_dropped_samples"),
        );
        if c("alloc_live") != 0 {
            part.push_str(&format!(
                " live=on live_samples={} live_bytes={} live_objects={} gc_ms={}",
                c("alloc_live_samples"),
                c("alloc_live_bytes"),
                c("alloc_live_objects"),
                c("alloc_gc_ms"),
            ));
        }
        part
    }
}
