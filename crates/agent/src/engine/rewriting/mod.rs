//! The rewriting engines, mode=bytecode and mode=exact: both profile by rewriting classes as they load,
//! and share everything but the transform and the Java runtime class they call.
//!
//! - At load time the ClassFileLoadHook rewrites each class with the session's transform
//!   ([`kprof_classfile::transform::bytecode`] or [`kprof_classfile::transform::exact`]); when a session starts, one batched
//!   RetransformClasses covers the classes loaded before, the JDK's included.
//! - The Java runtime (`kprof.runtime.Bc`/`T` and `Exact`/`ExactState`, compiled by build.rs, embedded
//!   in the library) goes on the boot class path; every named module is made to read its module
//!   (AddModuleReads).
//! - Bytecode mode ([`crate::engine::bytecode`]): rewritten code counts bytecodes per thread and hands its
//!   reified stack to a native method every `gran + r` of them. Exact mode ([`crate::engine::exact`]):
//!   rewritten code counts every call and block in a per-thread tree that is merged into the CCT when a
//!   thread ends and before a write.
//! - With `mode=exact` at start-up, native methods get wrappers when their classes are first defined
//!   ([`kprof_classfile::transform::natives`]); the engine then wraps in every rewrite of those classes, whatever the
//!   session, since a retransformation may not change a class's methods.
//!
//! The engine has a JVMTI environment of its own: its class-file load hook, ClassPrepare and virtual
//! thread events are no one else's concern. Nothing here runs in a signal handler; the hook runs on
//! whichever thread loads a class.

pub mod thread_fields;

use crate::cct::Cct;
use crate::engine::bytecode::runtime as bytecode;
use crate::engine::exact::runtime as exact;
use crate::engine::{Host, Phase};
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti};
use kprof_classfile::transform::bytecode::{BytecodeConfig, BytecodeTransform};
use kprof_classfile::transform::exact::{ExactConfig, ExactTransform};
use kprof_classfile::transform::flow::CheckPlaces;
use kprof_classfile::transform::methods::MethodTable;
use kprof_classfile::transform::natives::{wrap_natives, NATIVE_PREFIX};
use kprof_classfile::transform::{MethodTransform, RewriteStats, Rewriter, SkipPolicy};
use kprof_classfile::EditLimits;
use kprof_protocol::control::private_dir;
use kprof_protocol::options::{EngineKind, Options};
use std::collections::HashSet;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use kprof_runtime::RUNTIME_JAR;
const RUNTIME_PREFIX: &str = "kprof/runtime/";

/// Counters of the class rewriting (both modes).
#[derive(Default)]
pub struct ClassStats {
    pub classes_seen: AtomicU64,
    pub classes_rewritten: AtomicU64,
    pub classes_filtered: AtomicU64,
    /// Classes the rewriter could not parse (left as they were).
    pub classes_failed: AtomicU64,
    pub classes_retransformed: AtomicU64,
    pub retransform_failures: AtomicU64,
    /// Native methods given a wrapper, and their classes (first definitions only).
    pub natives_wrapped: AtomicU64,
    pub classes_with_natives_wrapped: AtomicU64,
}

/// What the session's transform needs; set when a session starts.
#[derive(Clone)]
struct SessionConfig {
    mode: EngineKind,
    options: Options,
}

/// The engine: one per agent, created when a rewriting session first starts.
pub struct RewritingEngine {
    host: &'static dyn Host,
    cct: &'static Cct,
    pub(crate) jvmti: Jvmti,
    pub methods: Arc<MethodTable>,
    /// Native methods are wrapped when their classes are defined (fixed for the agent's lifetime).
    wrap_natives: bool,
    config: RwLock<SessionConfig>,
    /// Rewriting is active (the runtime is ready).
    rewriting: AtomicBool,
    /// The session keeps callsites apart (read on every sample and merge).
    callsites: AtomicBool,
    pub stats: ClassStats,
    /// Methods rewritten and left alone, by reason.
    pub rewrite_stats: Mutex<RewriteStats>,
    pub bytecode: bytecode::BytecodeStats,
    /// Bytecode mode's per-thread blocks and the drain that takes their samples into the CCT.
    pub rings: bytecode::Rings,
    pub exact: exact::ExactStore,
    pub(crate) runtime: OnceLock<Runtime>,
    /// Named modules already made to read the runtime's module: (name, identity hash).
    modules: Mutex<HashSet<(String, i32)>>,
    /// Boot classes defined in the primordial phase: their natives keep no wrapper (see `transform`).
    primordial: Mutex<HashSet<String>>,
}

/// Global references into the Java runtime.
pub(crate) struct Runtime {
    module: jobject,
    module_name: jfieldID,
    pub(crate) bc: bytecode::BcRuntime,
    pub(crate) exact: exact::ExactRuntime,
}

// SAFETY: global references and method/field ids are valid on every thread.
unsafe impl Send for Runtime {}
// SAFETY: see above.
unsafe impl Sync for Runtime {}

static ENGINE: OnceLock<&'static RewritingEngine> = OnceLock::new();
/// The JVM's main thread (kernel id), where the agent was loaded at start-up; 0 on attach.
static MAIN_TID: AtomicI32 = AtomicI32::new(0);
/// The thread that linked `jdk.internal.misc.VM` (ClassPrepare); 0 until seen, -1 once the first start
/// has looked ([`RewritingEngine::even_out_start_race`]).
static VM_LINKER: AtomicI32 = AtomicI32::new(0);

impl RewritingEngine {
    /// Capabilities the engine needs, added in Agent_OnLoad (or on attach). `natives`: also those that
    /// wrapping native methods needs (only at start-up).
    pub fn capabilities(
        potential: &jvmtiCapabilities,
        caps: &mut jvmtiCapabilities,
        natives: bool,
    ) -> Result<(), String> {
        if potential.can_retransform_classes() == 0 {
            return Err("this JVM cannot retransform classes".into());
        }
        caps.set_can_retransform_classes(1);
        if !natives && potential.can_generate_early_vmstart() != 0 {
            // ClassPrepare events from the start of java.lang's initialization, so that the engine sees which
            // thread links `jdk.internal.misc.VM` (`even_out_start_race`); no VMStart callback is set. Not
            // with native wrappers: HotSpot then resolves the prefixed natives of the first classes through
            // `ClassLoader.findNative` before it can run, and the JVM does not start.
            caps.set_can_generate_early_vmstart(1);
        }
        if potential.can_generate_all_class_hook_events() != 0 {
            caps.set_can_generate_all_class_hook_events(1);
        }
        if natives {
            if potential.can_set_native_method_prefix() == 0 || potential.can_generate_early_class_hook_events() == 0 {
                return Err("this JVM cannot prefix native methods early (mode=exact needs it at start-up)".into());
            }
            caps.set_can_set_native_method_prefix(1);
            caps.set_can_generate_early_class_hook_events(1);
        }
        Ok(())
    }

    /// Creates the engine and puts the runtime on the boot class path. Call once, before VMInit (or on
    /// attach); the hook only wraps natives (with `natives`) until [`RewritingEngine::start`].
    pub fn create(
        host: &'static dyn Host,
        options: &Options,
        phase: Phase,
    ) -> Result<&'static RewritingEngine, String> {
        if let Some(e) = ENGINE.get() {
            return Ok(e);
        }
        // Native methods get wrappers only when every class can be given them as it is first defined.
        let natives = phase == Phase::OnLoad && options.has(EngineKind::Exact);
        if phase == Phase::OnLoad {
            // Agent_OnLoad runs on the thread that creates the JVM: its main thread.
            MAIN_TID.store(kprof_timers::gettid(), Ordering::Release);
            // Each thread's state in fields of java.lang.Thread (thread_fields.rs). The early hook this
            // needs makes HotSpot start without class data sharing (slower start-up, and more JDK start-up
            // code runs and is counted); engines that rewrite nothing need none of it.
            if let Err(e) = thread_fields::install(host.vm()) {
                host.say(&format!(
                    "note: per-thread fields not added to java.lang.Thread ({e}); rewritten code uses a table"
                ));
            }
        }
        let jvmti = host.vm().jvmti(JVMTI_VERSION_1_2).ok_or("no JVMTI environment")?;
        let potential = jvmti.potential_capabilities().map_err(|e| format!("GetPotentialCapabilities: {e}"))?;
        let mut caps = jvmtiCapabilities::default();
        RewritingEngine::capabilities(&potential, &mut caps, natives)?;
        // Bytecode mode keeps a state per virtual thread, given at VirtualThreadStart (JDK 21+).
        let virtual_threads = options.has(EngineKind::Bytecode) && potential.can_support_virtual_threads() != 0;
        if virtual_threads {
            caps.set_can_support_virtual_threads(1);
        }
        jvmti.add_capabilities(&caps).map_err(|e| format!("AddCapabilities: {e}"))?;
        let callbacks = jvmtiEventCallbacks {
            ClassFileLoadHook: Some(on_class_file_load_hook),
            ClassPrepare: Some(on_class_prepare),
            VirtualThreadStart: Some(on_virtual_thread_start),
            VirtualThreadEnd: Some(on_virtual_thread_end),
            ..Default::default()
        };
        jvmti.set_event_callbacks(&callbacks).map_err(|e| format!("SetEventCallbacks: {e}"))?;
        let cct = host.cct();
        boot_runtime(jvmti)?;
        if natives {
            jvmti.set_native_method_prefix(NATIVE_PREFIX).map_err(|e| format!("SetNativeMethodPrefix: {e}"))?;
        }
        let engine: &'static RewritingEngine = Box::leak(Box::new(RewritingEngine {
            host,
            cct,
            jvmti,
            methods: Arc::new(MethodTable::new()),
            wrap_natives: natives,
            config: RwLock::new(SessionConfig {
                mode: options.rewriting().unwrap_or(EngineKind::Bytecode),
                options: options.clone(),
            }),
            rewriting: AtomicBool::new(false),
            callsites: AtomicBool::new(options.callsite),
            stats: ClassStats::default(),
            rewrite_stats: Mutex::new(RewriteStats::default()),
            bytecode: bytecode::BytecodeStats::default(),
            rings: bytecode::Rings::default(),
            exact: exact::ExactStore::default(),
            runtime: OnceLock::new(),
            modules: Mutex::new(HashSet::new()),
            primordial: Mutex::new(HashSet::new()),
        }));
        let _ = ENGINE.set(engine);
        let engine = ENGINE.get().copied().unwrap_or(engine);
        for e in [JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, JVMTI_EVENT_CLASS_PREPARE] {
            jvmti.set_event(e, true).map_err(|err| format!("enabling JVMTI event {e}: {err}"))?;
        }
        if virtual_threads {
            for e in [JVMTI_EVENT_VIRTUAL_THREAD_START, JVMTI_EVENT_VIRTUAL_THREAD_END] {
                jvmti.set_event(e, true).map_err(|err| format!("enabling JVMTI event {e}: {err}"))?;
            }
        }
        Ok(engine)
    }

    pub fn get() -> Option<&'static RewritingEngine> {
        ENGINE.get().copied()
    }

    pub fn is_active(&self) -> bool {
        self.rewriting.load(Ordering::Acquire)
    }

    /// Native methods get nodes (the agent was loaded at start-up with mode=exact).
    pub fn wraps_natives(&self) -> bool {
        self.wrap_natives
    }

    /// Whether the natives of this class may get wrappers. Not those of boot classes defined in the
    /// primordial phase: HotSpot looks a boot class's native up by its prefixed JNI name first, and when
    /// the boot library lacks it, asks `ClassLoader.findNative`, which cannot run that early (the JVM
    /// crashes starting). Those classes are remembered, so their retransformations add no wrappers either.
    fn may_wrap(&self, name: &str, first: bool, boot: bool) -> bool {
        if !boot {
            return true;
        }
        let mut primordial = self.primordial.lock().unwrap_or_else(|e| e.into_inner());
        if first && self.jvmti.phase().is_ok_and(|p| p == JVMTI_PHASE_PRIMORDIAL) {
            primordial.insert(name.to_string());
            return false;
        }
        !primordial.contains(name)
    }

    fn config(&self) -> SessionConfig {
        self.config.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The rewriting engine of the current (or last) session: bytecode or exact.
    pub fn mode(&self) -> EngineKind {
        self.config.read().unwrap_or_else(|e| e.into_inner()).mode
    }

    /// The ClassFileLoadHook's work: the rewritten class, or `None` to leave it as it is. `first`: the class
    /// is being defined (not retransformed); `boot`: by the boot loader.
    pub fn transform(&self, name: Option<&str>, data: &[u8], first: bool, boot: bool) -> Option<Vec<u8>> {
        let name = name?;
        if name.starts_with(RUNTIME_PREFIX) {
            return None;
        }
        let wrapped = if self.wrap_natives && self.may_wrap(name, first, boot) {
            wrap_natives(data).ok().flatten()
        } else {
            None
        };
        if first {
            if let Some(w) = &wrapped {
                self.stats.classes_with_natives_wrapped.fetch_add(1, Ordering::Relaxed);
                self.stats.natives_wrapped.fetch_add(w.wrappers.len() as u64, Ordering::Relaxed);
            }
        }
        if !self.is_active() {
            return wrapped.map(|w| w.bytes);
        }
        self.stats.classes_seen.fetch_add(1, Ordering::Relaxed);
        let config = self.config();
        if !config.options.class_selected(&name.replace('/', ".")) {
            self.stats.classes_filtered.fetch_add(1, Ordering::Relaxed);
            return wrapped.map(|w| w.bytes);
        }
        let (input, wrappers) = match &wrapped {
            Some(w) => (&w.bytes[..], w.wrappers.clone()),
            None => (data, Vec::new()),
        };
        let o = &config.options;
        let transform: Box<dyn MethodTransform> = match config.mode {
            EngineKind::Exact => {
                let c = ExactConfig {
                    max_path: o.exact_maxpath(),
                    callsites: o.callsite,
                    blocks: o.bb,
                    thread_fields: thread_fields::added(),
                };
                Box::new(ExactTransform::new(c, Arc::clone(&self.methods)))
            }
            _ => {
                let c = BytecodeConfig {
                    max_path: o.bytecode_maxpath(),
                    callsites: o.callsite,
                    leaf_optimization: true,
                    thread_fields: thread_fields::added(),
                    reified_stack: !o.stack_walks(),
                    chords: o.chords,
                    check_places: if o.loop_checks_only { CheckPlaces::Loops } else { CheckPlaces::CallsAndLoops },
                };
                Box::new(BytecodeTransform::new(c, Arc::clone(&self.methods)))
            }
        };
        let mut rewriter = Rewriter::with_transform(transform, SkipPolicy::agent(), EditLimits::default());
        rewriter.set_wrappers(wrappers);
        let mut stats = RewriteStats::default();
        let mut out = Vec::with_capacity(input.len() + input.len() / 4);
        let result = rewriter.rewrite_class(input, &mut out, &mut stats);
        self.rewrite_stats.lock().unwrap_or_else(|e| e.into_inner()).add(&stats);
        match result {
            Ok(true) => {
                self.stats.classes_rewritten.fetch_add(1, Ordering::Relaxed);
                Some(out)
            }
            Ok(false) => wrapped.map(|w| w.bytes),
            Err(_) => {
                self.stats.classes_failed.fetch_add(1, Ordering::Relaxed);
                wrapped.map(|w| w.bytes)
            }
        }
    }

    /// Makes the runtime ready for a session of `options` and rewrites what is already loaded: registers
    /// the natives, lets every named module read the runtime's module, initialises the mode's runtime
    /// class, turns rewriting on, and retransforms every modifiable class loaded so far in one batch.
    pub fn start(&self, jni: Jni, mode: EngineKind, options: &Options) -> Result<(), String> {
        let rt = match self.runtime.get() {
            Some(rt) => rt,
            None => {
                let rt = self.load_runtime(jni)?;
                self.runtime.get_or_init(|| rt)
            }
        };
        if let Ok(modules) = self.jvmti.all_modules() {
            for &m in modules.as_slice() {
                self.module_reads(jni, rt, m);
                jni.delete_local_ref(m);
            }
        }
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = SessionConfig { mode, options: options.clone() };
        self.callsites.store(options.callsite, Ordering::Release);
        match mode {
            EngineKind::Exact => {
                self.exact.reset(options.bb);
                let budget = exact::tree_budget(options.cct_mb());
                rt.exact.init(jni, options.threads, thread_fields::added(), options.bb, budget)?;
                if self.wrap_natives {
                    exact::intercept_native_catches(self.jvmti)?;
                }
            }
            _ => {
                bytecode::reset(self);
                crate::engine::bytecode::walk::begin_session();
                let fields = thread_fields::added();
                rt.bc.init(jni, options, fields)?;
                if fields {
                    // Threads already running get their state before any of their code is rewritten.
                    if let Ok(threads) = self.jvmti.all_threads() {
                        for &t in threads.as_slice() {
                            rt.bc.adopt(jni, t);
                            jni.delete_local_ref(t);
                        }
                    }
                }
                if let Some(me) = RewritingEngine::get() {
                    me.rings.start_drain(me);
                }
            }
        }
        self.rewriting.store(true, Ordering::Release);
        self.even_out_start_race(jni);
        self.fix_class_hashes(jni);
        self.retransform_loaded(jni);
        crate::engine::bytecode::walk::settled();
        Ok(())
    }

    /// At the first start (VMInit, on the main thread): makes the main thread draw the identity hash it
    /// draws when it wins the start-up race over `jdk.internal.misc.VM`, in the runs where it lost.
    /// HotSpot's verifier gives a class's mirror its identity hash on the thread that links the class, and
    /// the finalizer thread's first act (`VM.initLevel()`) races the main thread's `System.initPhase1` to
    /// link `VM`. When the main thread wins, it has drawn one more hash, and every later hash it draws
    /// (class mirrors, enum constants, keys of the JDK's identity-keyed tables) differs from a run where it
    /// lost, and so do the paths through those tables: with the agent slowing start-up, about one run in
    /// four on a loaded machine (JDK 17). Which thread linked `VM` is the thread its ClassPrepare came on
    /// (`class_prepared`). Nothing is done where that was not seen (a JVM the agent attached to).
    fn even_out_start_race(&self, jni: Jni) {
        let linker = VM_LINKER.swap(-1, Ordering::AcqRel);
        let main = MAIN_TID.load(Ordering::Acquire);
        if linker <= 0 || main == 0 || linker == main || kprof_timers::gettid() != main {
            return;
        }
        let Some(object) = jni.find_class("java/lang/Object") else { return };
        let o = jni.alloc_object(object);
        if !o.is_null() {
            let _ = self.jvmti.object_hash(o);
            jni.delete_local_ref(o);
        }
        jni.delete_local_ref(object);
    }

    /// Gives every loaded class its identity hash now, on this thread, in the order of their names.
    /// HotSpot computes an object's identity hash from the thread that first asks for it; JIT compiler
    /// threads ask for some class mirrors at times that vary from run to run, and JDK code keyed by classes
    /// (method types, reflection caches, the record methods' tables) then takes different paths. Asking
    /// first, deterministically, keeps bytecode counts reproducible. Not in the order the JVM lists them:
    /// that is load order, and the JDK's own threads (reference handler, finalizer, signal dispatcher)
    /// load some classes at start while the main thread loads others, in an order that varies. The JVM
    /// does not list the primitive types' classes (`int.class`, keys of JDK tables too): they come first.
    fn fix_class_hashes(&self, jni: Jni) {
        let mut named: Vec<(String, jclass)> = Vec::new();
        for (wrapper, sig) in PRIMITIVES {
            let Some(class) = jni.find_class(wrapper) else { continue };
            if let Some(field) = jni.static_field_id(class, "TYPE", "Ljava/lang/Class;") {
                let primitive = jni.static_object_field(class, field);
                if !primitive.is_null() {
                    named.push((sig.to_string(), primitive));
                }
            }
            jni.delete_local_ref(class);
        }
        if let Ok(classes) = self.jvmti.loaded_classes() {
            named.extend(classes.as_slice().iter().map(|&k| (self.jvmti.class_signature(k).unwrap_or_default(), k)));
        }
        // Stable: classes of one name (several loaders) keep their relative order.
        named.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, k) in named {
            let _ = self.jvmti.object_hash(k);
            jni.delete_local_ref(k);
        }
    }

    fn load_runtime(&self, jni: Jni) -> Result<Runtime, String> {
        // The helpers write the reified stack with Unsafe (raw memory: no application array aliases it, so
        // the JIT keeps the application's loads across the store).
        let module = runtime_module(jni, self.jvmti)?;
        let bc = bytecode::BcRuntime::load(jni)?;
        let exact = exact::ExactRuntime::load(jni)?;
        let module_class = jni.find_class("java/lang/Module").ok_or("java.lang.Module not found")?;
        let module_name = jni.field_id(module_class, "name", "Ljava/lang/String;").ok_or("Module.name not found")?;
        jni.delete_local_ref(module_class);
        Ok(Runtime { module, module_name, bc, exact })
    }

    /// Lets `module` read the runtime's module, once per named module.
    fn module_reads(&self, jni: Jni, rt: &Runtime, module: jobject) {
        if module.is_null() {
            return;
        }
        let name_obj = jni.object_field(module, rt.module_name);
        if name_obj.is_null() {
            // Unnamed modules read every module already.
            return;
        }
        let name = jni.string(name_obj);
        jni.delete_local_ref(name_obj);
        let key = (name, self.jvmti.object_hash(module).unwrap_or(0));
        let mut seen = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(&key) {
            return;
        }
        if self.jvmti.add_module_reads(module, rt.module).is_ok() {
            seen.insert(key);
        }
    }

    /// ClassPrepare: a class of a module defined after start (a new layer) needs that module to read
    /// the runtime before its rewritten code runs; preparation comes before any of its code runs.
    pub fn class_prepared(&self, jni: Jni, class: jclass) {
        // Until the first start: note which thread linked `jdk.internal.misc.VM` (see `even_out_start_race`).
        if VM_LINKER.load(Ordering::Relaxed) == 0
            && self.jvmti.class_signature(class).is_ok_and(|s| s == "Ljdk/internal/misc/VM;")
        {
            let _ = VM_LINKER.compare_exchange(0, kprof_timers::gettid(), Ordering::AcqRel, Ordering::Relaxed);
        }
        // Give the class its identity hash now, on the thread that loads it (see `fix_class_hashes`).
        let _ = self.jvmti.object_hash(class);
        if !self.is_active() {
            return;
        }
        let Some(rt) = self.runtime.get() else { return };
        let module = jni.module_of(class);
        self.module_reads(jni, rt, module);
        jni.delete_local_ref(module);
    }

    fn retransform_loaded(&self, jni: Jni) {
        let Ok(classes) = self.jvmti.loaded_classes() else { return };
        let mut batch: Vec<jclass> = Vec::new();
        for &k in classes.as_slice() {
            let skip = !self.jvmti.is_modifiable_class(k)
                || self
                    .jvmti
                    .class_signature(k)
                    .map(|s| s.starts_with("Lkprof/runtime/") || s.starts_with('['))
                    .unwrap_or(true);
            if skip {
                jni.delete_local_ref(k);
            } else {
                batch.push(k);
            }
        }
        if self.jvmti.retransform_classes(&batch).is_ok() {
            self.stats.classes_retransformed.fetch_add(batch.len() as u64, Ordering::Relaxed);
        } else {
            // One class the JVM refuses fails the whole batch: retry one by one and count refusals.
            for &k in &batch {
                match self.jvmti.retransform_classes(&[k]) {
                    Ok(()) => self.stats.classes_retransformed.fetch_add(1, Ordering::Relaxed),
                    Err(_) => self.stats.retransform_failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
        for k in batch {
            jni.delete_local_ref(k);
        }
    }

    /// ThreadStart (and VirtualThreadStart), on the new thread: bytecode mode gives it its state.
    pub fn thread_started(&self, jni: Jni) {
        if let (Some(rt), true, EngineKind::Bytecode) = (self.runtime.get(), self.is_active(), self.mode()) {
            rt.bc.started(jni);
        }
    }

    /// ThreadEnd and VirtualThreadEnd, whether a session runs or not: exact mode merges the thread's tree
    /// while its session runs; bytecode mode releases the thread's block in any case (the block lives as
    /// long as its thread).
    pub fn thread_ended_any(&self, jni: Jni) {
        if self.is_active() || self.mode() == EngineKind::Bytecode {
            self.thread_ended(jni);
        }
    }

    /// ThreadEnd (and VirtualThreadEnd), on the ending thread: bytecode mode keeps its count and drains and
    /// frees its block; exact mode merges its tree into the CCT.
    fn thread_ended(&self, jni: Jni) {
        if let Some(rt) = self.runtime.get() {
            match self.mode() {
                EngineKind::Exact => rt.exact.thread_ended(jni),
                _ => rt.bc.finish(jni),
            }
        }
    }

    /// Bytecodes counted since each thread's last sample (bytecode mode: estimated total = sampled + this).
    pub fn residual(&self, jni: Jni) -> u64 {
        match self.runtime.get() {
            Some(rt) => rt.bc.residual(jni),
            None => 0,
        }
    }

    /// Before the profile is written while the session runs: exact mode merges every live thread's tree.
    pub fn before_write(&self, jni: Jni) {
        match (self.runtime.get(), self.is_active(), self.mode()) {
            (Some(rt), true, EngineKind::Exact) => rt.exact.merge_all(jni),
            (_, _, EngineKind::Bytecode) => {
                self.rings.drain_all(self);
            }
            _ => {}
        }
    }

    /// Stops counting (exact mode merges what is left first): rewritten code keeps running but does
    /// nothing; with `restore`, classes are retransformed back to their original code (native wrappers
    /// stay, uncounted).
    pub fn stop(&self, jni: Jni, restore: bool) {
        if let Some(rt) = self.runtime.get() {
            match self.mode() {
                EngineKind::Exact => rt.exact.disable(jni),
                _ => {
                    rt.bc.disable(jni);
                    self.rings.drain_all(self);
                }
            }
        }
        self.rewriting.store(false, Ordering::Release);
        if restore {
            self.retransform_loaded(jni);
        }
    }

    /// The class rewriting's figures, for the profile's counters.
    pub fn describe_classes(&self, meta: &mut kprof_profile::Meta) {
        let st = &self.stats;
        let c = &mut meta.counters;
        c.insert("classes_seen".into(), st.classes_seen.load(Ordering::Relaxed));
        c.insert("classes_rewritten".into(), st.classes_rewritten.load(Ordering::Relaxed));
        c.insert("classes_retransformed".into(), st.classes_retransformed.load(Ordering::Relaxed));
        c.insert("classes_filtered".into(), st.classes_filtered.load(Ordering::Relaxed));
        c.insert("classes_failed".into(), st.classes_failed.load(Ordering::Relaxed));
        c.insert("retransform_failures".into(), st.retransform_failures.load(Ordering::Relaxed));
        let rs = self.rewrite_stats.lock().unwrap_or_else(|e| e.into_inner());
        c.insert("methods_rewritten".into(), rs.methods_rewritten);
        c.insert("methods_left_alone".into(), rs.left_alone_total());
        c.insert("counter_updates".into(), rs.counter_updates);
        c.insert("granularity_checks".into(), rs.granularity_checks);
        if rs.counted_on_chords + rs.counted_by_blocks > 0 {
            c.insert("counted_on_chords".into(), rs.counted_on_chords);
            c.insert("counted_by_blocks".into(), rs.counted_by_blocks);
        }
        for (reason, n) in &rs.left_alone {
            c.insert(format!("left_alone.{}", reason.name()), *n);
        }
    }

    /// `classes_rewritten=... methods_rewritten=...` of a summary line.
    pub fn summary_classes(meta: &kprof_profile::Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        format!(
            "classes_rewritten={} retransformed={} filtered={} failed={} methods_rewritten={}",
            c("classes_rewritten"),
            c("classes_retransformed"),
            c("classes_filtered"),
            c("classes_failed") + c("retransform_failures"),
            c("methods_rewritten"),
        )
    }

    /// `left_alone=N (reason:n,...)` of a summary line.
    pub fn summary_left_alone(meta: &kprof_profile::Meta) -> String {
        let reasons: Vec<String> = meta
            .counters
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("left_alone.").map(|r| format!("{r}:{v}")))
            .collect();
        format!(
            "left_alone={} ({})",
            meta.counters.get("methods_left_alone").copied().unwrap_or(0),
            if reasons.is_empty() { "none".to_string() } else { reasons.join(",") }
        )
    }

    pub(crate) fn callsites(&self) -> bool {
        self.callsites.load(Ordering::Acquire)
    }

    pub(crate) fn cct(&self) -> &'static Cct {
        self.cct
    }
}

/// Puts the Java runtime (the embedded jar) on the boot class path, once per process: every engine with
/// Java helpers (the rewriting engines, the lock engine) calls this before it loads one of them.
pub(crate) fn boot_runtime(jvmti: Jvmti) -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let jar = extract_runtime()?;
        jvmti.add_to_bootstrap_search(&jar).map_err(|e| format!("AddToBootstrapClassLoaderSearch({jar}): {e}"))
    })
    .clone()
}

/// The runtime's module (the boot loader's unnamed module, a global reference), once java.base exports
/// `jdk.internal.misc` to it: the helpers use `Unsafe`. Found from a class whose initialisation needs
/// nothing (the others' need `Unsafe`). Call after [`boot_runtime`], on a thread attached to the JVM.
pub(crate) fn runtime_module(jni: Jni, jvmti: Jvmti) -> Result<jobject, String> {
    static MODULE: OnceLock<usize> = OnceLock::new();
    if let Some(&m) = MODULE.get() {
        return Ok(m as jobject);
    }
    let state =
        jni.find_class(&format!("{RUNTIME_PREFIX}T")).ok_or("the runtime class kprof/runtime/T cannot be loaded")?;
    let module_local = jni.module_of(state);
    jni.delete_local_ref(state);
    let module = jni.new_global_ref(module_local);
    jni.delete_local_ref(module_local);
    let object = jni.find_class("java/lang/Object").ok_or("java.lang.Object not found")?;
    let base = jni.module_of(object);
    jni.delete_local_ref(object);
    let exported = jvmti.add_module_exports(base, "jdk.internal.misc", module);
    jni.delete_local_ref(base);
    exported.map_err(|e| format!("AddModuleExports(java.base, jdk.internal.misc): {e}"))?;
    Ok(*MODULE.get_or_init(|| module as usize) as jobject)
}

/// The wrapper classes whose `TYPE` is a primitive type's class, with that type's signature.
const PRIMITIVES: [(&str, &str); 9] = [
    ("java/lang/Boolean", "Z"),
    ("java/lang/Byte", "B"),
    ("java/lang/Character", "C"),
    ("java/lang/Short", "S"),
    ("java/lang/Integer", "I"),
    ("java/lang/Long", "J"),
    ("java/lang/Float", "F"),
    ("java/lang/Double", "D"),
    ("java/lang/Void", "V"),
];

/// Writes the embedded runtime jar to `/tmp/.kprof-<uid>/kprof-runtime-<hash>.jar` (a private
/// directory) unless it is already there, and returns its path.
fn extract_runtime() -> Result<String, String> {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = kprof_protocol::control::socket_dir(uid);
    private_dir(&dir, uid)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in RUNTIME_JAR {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let path = dir.join(format!("kprof-runtime-{h:016x}.jar"));
    if std::fs::read(&path).map(|d| d == RUNTIME_JAR).unwrap_or(false) {
        return Ok(path.display().to_string());
    }
    kprof_profile::output::write_atomic(&path, RUNTIME_JAR)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path.display().to_string())
}

/// Registers `natives` on `class` and returns a global reference to it.
pub(crate) fn runtime_class(jni: Jni, name: &str, natives: &[(&str, &str, *mut c_void)]) -> Result<jclass, String> {
    let local = jni.find_class(name).ok_or(format!("the runtime class {name} cannot be loaded"))?;
    let class = jni.new_global_ref(local) as jclass;
    jni.delete_local_ref(local);
    if !natives.is_empty() {
        jni.register_natives(class, natives)?;
    }
    Ok(class)
}

/// `threadRoot(String name)` of both runtime classes: the CCT node of a thread's root (`threads=on`).
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv.
pub(crate) unsafe extern "C" fn thread_root(env: *mut JNIEnv, _class: jclass, name: jstring) -> jint {
    crate::guard::guard(crate::cct::ROOT as jint, || {
        // SAFETY: the JVM passes the calling thread's JNIEnv.
        let jni = unsafe { Jni::from_raw(env) };
        let name = jni.string(name);
        match ENGINE.get() {
            Some(e) => e.host.thread_root(&name) as jint,
            None => crate::cct::ROOT as jint,
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_class_file_load_hook(
    jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    class_being_redefined: jclass,
    loader: jobject,
    name: *const c_char,
    _protection_domain: jobject,
    class_data_len: jint,
    class_data: *const u8,
    new_class_data_len: *mut jint,
    new_class_data: *mut *mut u8,
) {
    guard((), || {
        let Some(engine) = RewritingEngine::get() else { return };
        if class_data.is_null() || class_data_len <= 0 || new_class_data.is_null() || new_class_data_len.is_null() {
            return;
        }
        // SAFETY: the JVM passes a NUL-terminated name or NULL, and `class_data_len` bytes at `class_data`.
        let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_string_lossy());
        // SAFETY: as above.
        let data = unsafe { std::slice::from_raw_parts(class_data, class_data_len as usize) };
        if let Some(out) = engine.transform(name.as_deref(), data, class_being_redefined.is_null(), loader.is_null()) {
            // SAFETY: the JVM passes its JVMTI environment.
            let jvmti = unsafe { Jvmti::from_raw(jvmti) };
            if let Ok(p) = jvmti.allocate_copy(&out) {
                // SAFETY: the out-pointers are valid for the duration of the callback.
                unsafe {
                    *new_class_data_len = out.len() as jint;
                    *new_class_data = p;
                }
            }
        }
    })
}

unsafe extern "C" fn on_class_prepare(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, _thread: jthread, klass: jclass) {
    guard((), || {
        if let Some(e) = RewritingEngine::get() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            e.class_prepared(unsafe { Jni::from_raw(jni) }, klass);
        }
    })
}

/// VirtualThreadStart (JDK 21+): bytecode mode gives the virtual thread its state.
unsafe extern "C" fn on_virtual_thread_start(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, _thread: jthread) {
    guard((), || {
        if let Some(e) = RewritingEngine::get() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            e.thread_started(unsafe { Jni::from_raw(jni) });
        }
    })
}

unsafe extern "C" fn on_virtual_thread_end(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, _thread: jthread) {
    guard((), || {
        if let Some(e) = RewritingEngine::get() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            e.thread_ended_any(unsafe { Jni::from_raw(jni) });
        }
    })
}
