//! mode=bytecode: deterministic bytecode-count sampling (Komorium) by rewriting classes as they load.
//!
//! - At load time the ClassFileLoadHook rewrites each class with [`crate::rewrite::bytecode`]; after
//!   VMInit one batched RetransformClasses covers the classes loaded before, the JDK's included.
//! - The Java runtime (`kprof.runtime.Bc` and `T`, compiled by build.rs, embedded in the library) goes on
//!   the boot class path; every named module is made to read its module (AddModuleReads).
//! - Rewritten code counts bytecodes per thread and, every `gran + r` of them, hands its reified stack to
//!   [`deliver`], a native method that walks the CCT from where the thread's previous sample diverged.
//!
//! Nothing here runs in a signal handler; the hook runs on whichever thread loads a class.

use crate::agent::control::private_dir;
use crate::cct::{Cct, NodeId, ROOT};
use crate::classfile::EditLimits;
use crate::frame::FrameId;
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti};
use crate::options::Options;
use crate::rewrite::bytecode::{BytecodeConfig, BytecodeTransform};
use crate::rewrite::methods::MethodTable;
use crate::rewrite::{RewriteStats, Rewriter, SkipPolicy};
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The runtime classes, built by build.rs.
static RUNTIME_JAR: &[u8] = include_bytes!(env!("KPROF_RUNTIME_JAR"));
const RUNTIME_PREFIX: &str = "kprof/runtime/";

/// Counters of the engine.
#[derive(Default)]
pub struct BytecodeStats {
    pub samples: AtomicU64,
    /// Sum of sample weights: bytecodes counted up to each thread's last sample.
    pub sampled_bytecodes: AtomicU64,
    pub classes_seen: AtomicU64,
    pub classes_rewritten: AtomicU64,
    pub classes_filtered: AtomicU64,
    /// Classes the rewriter could not parse (left as they were).
    pub classes_failed: AtomicU64,
    pub classes_retransformed: AtomicU64,
    pub retransform_failures: AtomicU64,
    /// Samples that found the CCT full.
    pub overflow: AtomicU64,
}

/// The engine: one per agent, created when a bytecode session first starts.
pub struct BytecodeEngine {
    cct: &'static Cct,
    jvmti: Jvmti,
    pub methods: Arc<MethodTable>,
    config: BytecodeConfig,
    options: Options,
    /// Rewriting is active (the runtime is ready).
    rewriting: AtomicBool,
    pub stats: BytecodeStats,
    /// Methods rewritten and left alone, by reason.
    pub rewrite_stats: Mutex<RewriteStats>,
    runtime: OnceLock<Runtime>,
    /// Named modules already made to read the runtime's module: (name, identity hash).
    modules: Mutex<HashSet<(String, i32)>>,
}

/// Global references into the Java runtime.
struct Runtime {
    class: jclass,
    module: jobject,
    thread_ended: jmethodID,
    residual: jmethodID,
    disable: jmethodID,
    module_name: jfieldID,
}

// SAFETY: global references and method/field ids are valid on every thread.
unsafe impl Send for Runtime {}
// SAFETY: see above.
unsafe impl Sync for Runtime {}

static ENGINE: OnceLock<&'static BytecodeEngine> = OnceLock::new();

impl BytecodeEngine {
    /// Capabilities the engine needs, added in Agent_OnLoad (or on attach).
    pub fn capabilities(potential: &jvmtiCapabilities, caps: &mut jvmtiCapabilities) -> Result<(), String> {
        if potential.can_retransform_classes() == 0 {
            return Err("this JVM cannot retransform classes".into());
        }
        caps.set_can_retransform_classes(1);
        if potential.can_generate_all_class_hook_events() != 0 {
            caps.set_can_generate_all_class_hook_events(1);
        }
        Ok(())
    }

    /// Creates the engine and puts the runtime on the boot class path. Call once, before VMInit (or on
    /// attach); the hook stays a pass-through until [`BytecodeEngine::start`].
    pub fn create(cct: &'static Cct, jvmti: Jvmti, options: &Options) -> Result<&'static BytecodeEngine, String> {
        if let Some(e) = ENGINE.get() {
            return Ok(e);
        }
        let jar = extract_runtime()?;
        jvmti.add_to_bootstrap_search(&jar).map_err(|e| format!("AddToBootstrapClassLoaderSearch({jar}): {e}"))?;
        let config = BytecodeConfig { max_path: options.maxpath, callsites: options.callsite, leaf_optimization: true };
        let engine: &'static BytecodeEngine = Box::leak(Box::new(BytecodeEngine {
            cct,
            jvmti,
            methods: Arc::new(MethodTable::new()),
            config,
            options: options.clone(),
            rewriting: AtomicBool::new(false),
            stats: BytecodeStats::default(),
            rewrite_stats: Mutex::new(RewriteStats::default()),
            runtime: OnceLock::new(),
            modules: Mutex::new(HashSet::new()),
        }));
        let _ = ENGINE.set(engine);
        Ok(ENGINE.get().copied().unwrap_or(engine))
    }

    pub fn get() -> Option<&'static BytecodeEngine> {
        ENGINE.get().copied()
    }

    pub fn is_active(&self) -> bool {
        self.rewriting.load(Ordering::Acquire)
    }

    /// The ClassFileLoadHook's work: the rewritten class, or `None` to leave it as it is.
    pub fn transform(&self, name: Option<&str>, data: &[u8]) -> Option<Vec<u8>> {
        if !self.is_active() {
            return None;
        }
        let name = name?;
        if name.starts_with(RUNTIME_PREFIX) {
            return None;
        }
        self.stats.classes_seen.fetch_add(1, Ordering::Relaxed);
        if !self.options.class_selected(&name.replace('/', ".")) {
            self.stats.classes_filtered.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let transform = BytecodeTransform::new(self.config, Arc::clone(&self.methods));
        let mut rewriter = Rewriter::with_transform(Box::new(transform), SkipPolicy::agent(), EditLimits::default());
        let mut stats = RewriteStats::default();
        let mut out = Vec::with_capacity(data.len() + data.len() / 4);
        let result = rewriter.rewrite_class(data, &mut out, &mut stats);
        self.rewrite_stats.lock().unwrap_or_else(|e| e.into_inner()).add(&stats);
        match result {
            Ok(true) => {
                self.stats.classes_rewritten.fetch_add(1, Ordering::Relaxed);
                Some(out)
            }
            Ok(false) => None,
            Err(_) => {
                self.stats.classes_failed.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Makes the runtime ready and rewrites what is already loaded: registers the natives, lets every
    /// named module read the runtime's module, initialises `Bc`, turns rewriting on, and retransforms
    /// every modifiable class loaded so far in one batch.
    pub fn start(&self, jni: Jni, threads: bool) -> Result<(), String> {
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
        let init = jni.static_method_id(rt.class, "init", "(IIZ)V").ok_or("kprof.runtime.Bc.init not found")?;
        let args = [
            jvalue { i: self.options.gran as i32 },
            jvalue { i: self.options.rand as i32 },
            jvalue { z: threads as u8 },
        ];
        jni.call_static_void(rt.class, init, &args).map_err(|_| "kprof.runtime.Bc.init threw".to_string())?;
        self.rewriting.store(true, Ordering::Release);
        self.fix_class_hashes(jni);
        self.retransform_loaded(jni);
        Ok(())
    }

    /// Gives every loaded class its identity hash now, in load order, on this thread. HotSpot computes an
    /// object's identity hash from the thread that first asks for it; JIT compiler threads ask for some
    /// class mirrors at times that vary from run to run, and JDK code keyed by classes (method types,
    /// reflection caches) then takes different paths. Asking first, deterministically, keeps bytecode
    /// counts reproducible.
    fn fix_class_hashes(&self, jni: Jni) {
        if let Ok(classes) = self.jvmti.loaded_classes() {
            for &k in classes.as_slice() {
                let _ = self.jvmti.object_hash(k);
                jni.delete_local_ref(k);
            }
        }
    }

    fn load_runtime(&self, jni: Jni) -> Result<Runtime, String> {
        let local = jni.find_class("kprof/runtime/Bc").ok_or("the runtime class kprof.runtime.Bc cannot be loaded")?;
        let class = jni.new_global_ref(local) as jclass;
        jni.delete_local_ref(local);
        jni.register_natives(
            class,
            &[
                ("deliver", "([I[JIIJI)V", deliver as *mut c_void),
                ("threadRoot", "(Ljava/lang/String;)I", thread_root as *mut c_void),
            ],
        )?;
        let module_local = jni.module_of(class);
        let module = jni.new_global_ref(module_local);
        jni.delete_local_ref(module_local);
        let module_class = jni.find_class("java/lang/Module").ok_or("java.lang.Module not found")?;
        let module_name = jni.field_id(module_class, "name", "Ljava/lang/String;").ok_or("Module.name not found")?;
        jni.delete_local_ref(module_class);
        let method = |name: &str, sig: &str| {
            jni.static_method_id(class, name, sig).ok_or(format!("kprof.runtime.Bc.{name} not found"))
        };
        Ok(Runtime {
            class,
            module,
            thread_ended: method("threadEnded", "()V")?,
            residual: method("residual", "()J")?,
            disable: method("disable", "()V")?,
            module_name,
        })
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

    /// ThreadEnd, on the ending thread: its state leaves the runtime's table (its count is kept).
    pub fn thread_ended(&self, jni: Jni) {
        if let Some(rt) = self.runtime.get() {
            let _ = jni.call_static_void(rt.class, rt.thread_ended, &[]);
        }
    }

    /// Bytecodes counted since each thread's last sample (estimated total = sampled + this).
    pub fn residual(&self, jni: Jni) -> u64 {
        match self.runtime.get() {
            Some(rt) => jni.call_static_long(rt.class, rt.residual, &[]).unwrap_or(0).max(0) as u64,
            None => 0,
        }
    }

    /// Stops counting: rewritten code keeps running but does nothing; with `restore`, classes are
    /// retransformed back to their original code.
    pub fn stop(&self, jni: Jni, restore: bool) {
        if let Some(rt) = self.runtime.get() {
            let _ = jni.call_static_void(rt.class, rt.disable, &[]);
        }
        self.rewriting.store(false, Ordering::Release);
        if restore {
            self.retransform_loaded(jni);
        }
    }
}

/// Writes the embedded runtime jar to `/tmp/.kprof-<uid>/kprof-runtime-<hash>.jar` (a private
/// directory) unless it is already there, and returns its path.
fn extract_runtime() -> Result<String, String> {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = crate::agent::control::socket_dir(uid);
    private_dir(&dir, uid)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in RUNTIME_JAR {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let path = dir.join(format!("kprof-runtime-{h:016x}.jar"));
    if std::fs::read(&path).map(|d| d == RUNTIME_JAR).unwrap_or(false) {
        return Ok(path.display().to_string());
    }
    crate::output::write_atomic(&path, RUNTIME_JAR).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path.display().to_string())
}

/// `Bc.deliver(int[] nodes, long[] frames, int from, int to, long weight, int root)`: see `Bc.java`.
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv.
unsafe extern "C" fn deliver(
    env: *mut JNIEnv,
    _class: jclass,
    nodes: jintArray,
    frames: jlongArray,
    from: jint,
    to: jint,
    weight: jlong,
    root: jint,
) {
    let Some(engine) = BytecodeEngine::get().filter(|e| e.is_active()) else { return };
    // SAFETY: the JVM passes the calling thread's JNIEnv.
    let jni = unsafe { Jni::from_raw(env) };
    let cct = engine.cct;
    let callsites = engine.config.callsites;
    let delivered = jni.with_int_long_arrays(nodes, frames, |nodes, frames| {
        let to = to as usize;
        // A path identical to the previous sample's comes with from = to + 1: its leaf is walked again.
        let from = (from.max(0) as usize).min(to);
        if to >= nodes.len() || to >= frames.len() {
            return None;
        }
        let mut node: NodeId = match from {
            0 if root > 0 => root as NodeId,
            0 => ROOT,
            _ => nodes[from - 1] as NodeId,
        };
        for i in from..=to {
            let method = frames[i] as u32;
            let callsite = if i == 0 || !callsites { -1 } else { (frames[i] >> 32) as i32 };
            node = cct.child(node, FrameId::method(method), callsite).unwrap_or(cct.overflow());
            nodes[i] = node as i32;
        }
        Some(node)
    });
    if let Some(Some(node)) = delivered {
        let weight = weight.max(0) as u64;
        cct.add_sample(node, weight);
        engine.stats.samples.fetch_add(1, Ordering::Relaxed);
        engine.stats.sampled_bytecodes.fetch_add(weight, Ordering::Relaxed);
        if node == cct.overflow() {
            engine.stats.overflow.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `Bc.threadRoot(String name)`: the CCT node of a thread's root (`threads=on`).
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv.
unsafe extern "C" fn thread_root(env: *mut JNIEnv, _class: jclass, name: jstring) -> jint {
    // SAFETY: the JVM passes the calling thread's JNIEnv.
    let jni = unsafe { Jni::from_raw(env) };
    let name = jni.string(name);
    crate::agent::thread_root_for(&name) as jint
}
