//! The agent: JVMTI entry points, event callbacks, and writing the profile out.
//!
//! Every callback runs inside [`guard`], so a bug in kprof becomes a message on stderr, never an unwind
//! into the JVM. The agent state is created once in `Agent_OnLoad` and leaked: callbacks and the signal
//! handler may run until the process is gone.

pub mod resolve;

use crate::cct::{Cct, ROOT};
use crate::engine::asgct::Sampler;
use crate::frame::FrameId;
use crate::jvmti::bindings::*;
use crate::jvmti::{vmstructs, JavaVm, Jni, Jvmti};
use crate::options::{expand_path, Mode, Options, TimerKind};
use crate::output;
use crate::profile::{Meta, WeightUnit};
use resolve::{NameSources, Resolver};
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Names of threads kprof starts itself; they are never sampled.
const OWN_THREAD_PREFIX: &str = "kprof-";

/// Everything the agent knows, created in `Agent_OnLoad`.
pub struct Agent {
    vm: JavaVm,
    jvmti: Jvmti,
    options: Options,
    cct: &'static Cct,
    started: Instant,
    start_unix_ms: u64,
    /// Thread names by thread number (roots with `threads=on`).
    thread_names: Mutex<Vec<String>>,
    resolver: Mutex<Resolver>,
    /// Serialises writing the profile (exit, periodic dumps).
    write_lock: Mutex<()>,
    /// Set once the final profile is being written; later dumps do nothing.
    finished: AtomicBool,
}

static AGENT: OnceLock<&'static Agent> = OnceLock::new();

/// Runs `f`, turning a panic into a message and `fallback`.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let msg = e.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| e.downcast_ref::<String>().cloned());
            eprintln!("kprof: internal error: {}", msg.unwrap_or_else(|| "panic".into()));
            fallback
        }
    }
}

fn say(line: &str) {
    eprintln!("kprof: {line}");
}

/// # Safety
/// Called by the JVM with its JavaVM and the option string after `=` in `-agentpath`.
#[no_mangle]
pub unsafe extern "C" fn Agent_OnLoad(vm: *mut JavaVM, options: *mut c_char, _reserved: *mut c_void) -> jint {
    guard(JNI_ERR, || {
        // SAFETY: the JVM passes a NUL-terminated string or NULL.
        let text = (!options.is_null()).then(|| unsafe { CStr::from_ptr(options) }.to_string_lossy().into_owned());
        // SAFETY: `vm` is the JVM's JavaVM.
        match on_load(unsafe { JavaVm::from_raw(vm) }, text.as_deref()) {
            Ok(()) => JNI_OK as jint,
            Err(line) => {
                eprintln!("{line}");
                JNI_ERR
            }
        }
    })
}

fn on_load(vm: JavaVm, text: Option<&str>) -> Result<(), String> {
    let options = Options::parse(text).map_err(|e| e.0)?;
    if options.help {
        print!("{}", crate::options::help_text());
        std::process::exit(0);
    }
    let jvmti = vm.jvmti(JVMTI_VERSION_1_2).ok_or("kprof: cannot get a JVMTI environment (JVMTI 1.2+ needed)")?;
    let cct_bytes = options.cct_mb as usize * 1024 * 1024;
    let cct: &'static Cct =
        Box::leak(Box::new(Cct::with_bytes(cct_bytes).ok_or_else(|| {
            format!("kprof: bad option 'cct_mb={}': cannot reserve that much memory", options.cct_mb)
        })?));
    for f in &options.files {
        check_writable(&expand_path(&f.path, std::process::id(), 0));
    }
    let agent: &'static Agent = Box::leak(Box::new(Agent {
        vm,
        jvmti,
        options,
        cct,
        started: Instant::now(),
        start_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        thread_names: Mutex::new(Vec::new()),
        resolver: Mutex::new(Resolver::default()),
        write_lock: Mutex::new(()),
        finished: AtomicBool::new(false),
    }));
    AGENT.set(agent).map_err(|_| "kprof: loaded twice")?;
    agent.setup_events()
}

/// Warns (once, at start) when an output file cannot be created, so the user learns it before the run.
fn check_writable(path: &str) {
    let p = std::path::Path::new(path);
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let Ok(cdir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return };
    // SAFETY: access() with a NUL-terminated path.
    if unsafe { libc::access(cdir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let err = std::io::Error::last_os_error();
        say(&format!("warning: cannot write file={path} ({}: {err}); the application runs on, the profile will not be saved there", dir.display()));
    }
}

impl Agent {
    fn setup_events(&self) -> Result<(), String> {
        let potential =
            self.jvmti.potential_capabilities().map_err(|e| format!("kprof: GetPotentialCapabilities: {e}"))?;
        let mut caps = jvmtiCapabilities::default();
        // Lets HotSpot record debug info at non-safepoint PCs (DebugNonSafepoints), so AsyncGetCallTrace
        // attributes compiled and inlined frames precisely.
        if potential.can_generate_compiled_method_load_events() != 0 {
            caps.set_can_generate_compiled_method_load_events(1);
        }
        self.jvmti.add_capabilities(&caps).map_err(|e| format!("kprof: AddCapabilities: {e}"))?;
        let callbacks = jvmtiEventCallbacks {
            VMInit: Some(on_vm_init),
            VMDeath: Some(on_vm_death),
            ThreadStart: Some(on_thread_start),
            ThreadEnd: Some(on_thread_end),
            ClassLoad: Some(on_class_load),
            ClassPrepare: Some(on_class_prepare),
            CompiledMethodLoad: Some(on_compiled_method_load),
            ..Default::default()
        };
        self.jvmti.set_event_callbacks(&callbacks).map_err(|e| format!("kprof: SetEventCallbacks: {e}"))?;
        let mut events = vec![
            JVMTI_EVENT_VM_INIT,
            JVMTI_EVENT_VM_DEATH,
            JVMTI_EVENT_THREAD_START,
            JVMTI_EVENT_THREAD_END,
            // AsyncGetCallTrace refuses to walk stacks unless ClassLoad events are enabled.
            JVMTI_EVENT_CLASS_LOAD,
            // jmethodIDs must exist before AsyncGetCallTrace meets a method: created at ClassPrepare.
            JVMTI_EVENT_CLASS_PREPARE,
        ];
        if caps.can_generate_compiled_method_load_events() != 0 {
            events.push(JVMTI_EVENT_COMPILED_METHOD_LOAD);
        }
        for e in events {
            self.jvmti.set_event(e, true).map_err(|err| format!("kprof: enabling JVMTI event {e}: {err}"))?;
        }
        Ok(())
    }

    fn vm_init(&'static self, jni: Jni, thread: jthread) {
        self.preallocate_method_ids(jni);
        match self.options.mode {
            Mode::Asgct => {
                let started = Sampler::start(
                    self.cct,
                    self.options.timer,
                    self.options.interval_ns,
                    self.options.depth,
                    &mut |n| say(&n),
                );
                match started {
                    Ok(_) => self.register_live_threads(jni, thread),
                    Err(e) => say(&format!("sampling disabled: {e}")),
                }
            }
            Mode::Bytecode | Mode::Exact => {}
        }
        if self.options.duration_ns > 0 || self.options.dump_ns > 0 {
            self.spawn_control_thread();
        }
    }

    /// Creates jmethodIDs for the methods of every class loaded so far.
    fn preallocate_method_ids(&self, jni: Jni) {
        if let Ok(classes) = self.jvmti.loaded_classes() {
            for &k in classes.as_slice() {
                drop(self.jvmti.class_methods(k));
                jni.delete_local_ref(k);
            }
        }
    }

    /// Registers `thread` (running now, on this thread) for sampling.
    fn thread_started(&self, jni: Jni, thread: jthread) {
        let Some(sampler) = Sampler::get().filter(|s| s.is_running()) else { return };
        let name = self.jvmti.thread_name(thread).unwrap_or_default();
        if name.starts_with(OWN_THREAD_PREFIX) {
            return;
        }
        let tid = crate::engine::asgct::timer::gettid();
        let root = self.thread_root(&name);
        if let Err(e) = sampler.register(tid, jni.raw() as *mut c_void, root) {
            self.note_once(&e);
        }
    }

    /// The CCT node a thread's samples start from: the root, or with `threads=on` a node for the thread.
    fn thread_root(&self, name: &str) -> u32 {
        if !self.options.threads {
            return ROOT;
        }
        let mut names = self.thread_names.lock().unwrap_or_else(|e| e.into_inner());
        names.push(name.to_string());
        self.cct.child(ROOT, FrameId::thread((names.len() - 1) as u32), -1).unwrap_or(self.cct.overflow())
    }

    /// Registers the threads that already run: the calling thread directly, the others through
    /// `Thread.eetop` and HotSpot's structure table (see [`vmstructs`]).
    fn register_live_threads(&self, jni: Jni, current: jthread) {
        let Some(sampler) = Sampler::get() else { return };
        let offsets = vmstructs::thread_offsets();
        let eetop = jni.find_class("java/lang/Thread").and_then(|k| {
            let f = jni.field_id(k, "eetop", "J");
            jni.delete_local_ref(k);
            f
        });
        let my_tid = crate::engine::asgct::timer::gettid();
        let my_env = jni.raw() as usize;
        let my_eetop = eetop.map(|f| jni.long_field(current, f) as usize).unwrap_or(0);
        // The JNIEnv lives inside the JavaThread at the same offset in every thread.
        let env_offset = my_env.wrapping_sub(my_eetop);
        let env_offset_ok = my_eetop != 0 && env_offset < 1 << 16;
        let Ok(threads) = self.jvmti.all_threads() else { return };
        let mut skipped = 0;
        for &t in threads.as_slice() {
            let name = self.jvmti.thread_name(t).unwrap_or_default();
            let top = eetop.map(|f| jni.long_field(t, f) as usize).unwrap_or(0);
            let target = if top == my_eetop && top != 0 {
                Some((my_tid, my_env))
            } else if env_offset_ok && top != 0 && !name.starts_with(OWN_THREAD_PREFIX) {
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
                Some((tid, env)) if !name.starts_with(OWN_THREAD_PREFIX) => {
                    let root = self.thread_root(&name);
                    if let Err(e) = sampler.register(tid, env as *mut c_void, root) {
                        self.note_once(&e);
                    }
                }
                Some(_) => {}
                None => skipped += 1,
            }
            jni.delete_local_ref(t);
        }
        if skipped > 0 {
            say(&format!("{skipped} running thread(s) could not be located and are not sampled"));
        }
    }

    fn note_once(&self, msg: &str) {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            say(msg);
        }
    }

    fn spawn_control_thread(&'static self) {
        let vm = self.vm;
        let spawned = std::thread::Builder::new().name("kprof-control".into()).spawn(move || {
            guard((), || {
                let Some(jni) = vm.attach_daemon("kprof-control") else { return };
                let start = Instant::now();
                let dump = (self.options.dump_ns > 0).then(|| Duration::from_nanos(self.options.dump_ns));
                let stop_at =
                    (self.options.duration_ns > 0).then(|| start + Duration::from_nanos(self.options.duration_ns));
                let mut next_dump = dump.map(|d| start + d);
                loop {
                    let wake = [next_dump, stop_at].into_iter().flatten().min();
                    let Some(wake) = wake else { break };
                    std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                    if self.finished.load(Ordering::Acquire) {
                        break;
                    }
                    if stop_at.is_some_and(|t| Instant::now() >= t) {
                        if let Some(s) = Sampler::get() {
                            s.stop();
                        }
                        self.write_outputs(Some(jni), true);
                        break;
                    }
                    if let (Some(d), Some(t)) = (dump, next_dump) {
                        if Instant::now() >= t {
                            self.write_outputs(Some(jni), false);
                            next_dump = Some(t + d);
                        }
                    }
                }
                vm.detach();
            })
        });
        if let Err(e) = spawned {
            say(&format!("cannot start the control thread ({e}); duration= and dump= are ignored"));
        }
    }

    fn meta(&self) -> Meta {
        let mut meta = Meta {
            mode: self.options.mode.name().to_string(),
            weight_unit: WeightUnit::CpuNanos,
            default_metric: Some(self.options.effective_metric()),
            interval: self.options.interval_ns,
            jvm: format!(
                "{} {}",
                self.jvmti.system_property("java.vm.name").unwrap_or_default(),
                self.jvmti.system_property("java.vm.version").unwrap_or_default()
            ),
            start_unix_ms: self.start_unix_ms,
            duration_ns: self.started.elapsed().as_nanos() as u64,
            ..Meta::default()
        };
        if let Some(s) = Sampler::get() {
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
        let cs = self.cct.stats();
        meta.counters.insert("cct_nodes".into(), cs.nodes as u64);
        meta.counters.insert("cct_overflow_samples".into(), cs.overflow_samples);
        meta
    }

    /// Resolves and writes every output file. Returns the paths written. With `last`, also prints the
    /// summary line and makes later calls do nothing.
    fn write_outputs(&self, jni: Option<Jni>, last: bool) -> Vec<String> {
        let _g = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.finished.load(Ordering::Acquire) {
            return Vec::new();
        }
        if last {
            self.finished.store(true, Ordering::Release);
        }
        let t0 = Instant::now();
        let meta = self.meta();
        let snapshot = self.cct.snapshot();
        let names = self.thread_names.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let profile = {
            let mut resolver = self.resolver.lock().unwrap_or_else(|e| e.into_inner());
            resolver.profile(&snapshot, meta, &NameSources { jvmti: self.jvmti, jni, threads: &names })
        };
        let metric = self.options.effective_metric();
        let mut written = Vec::new();
        for f in &self.options.files {
            let path = expand_path(&f.path, std::process::id(), self.start_unix_ms / 1000);
            let bytes = output::render(&profile, f.format, metric);
            match output::write_atomic(std::path::Path::new(&path), &bytes) {
                Ok(abs) => written.push(abs.display().to_string()),
                Err(e) => say(&format!("cannot write {path}: {e}")),
            }
        }
        if last {
            self.print_summary(&profile.meta, &written, t0.elapsed());
        }
        written
    }

    fn print_summary(&self, meta: &Meta, written: &[String], write_time: Duration) {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        let samples = c("samples");
        let usable = if samples > 0 { 100.0 * c("usable_samples") as f64 / samples as f64 } else { 0.0 };
        let cpu_s = c("sampled_cpu_ns") as f64 / 1e9;
        let rate = if cpu_s > 0.0 { (samples - c("foreign_thread_samples")) as f64 / cpu_s } else { 0.0 };
        let files = if written.is_empty() { "none".to_string() } else { written.join(",") };
        let timer = if meta.timer.is_empty() { "none" } else { meta.timer.as_str() };
        say(&format!(
            "mode={} timer={} interval={} samples={} usable={:.1}% recovered={} rate={:.0}/cpu-s cpu={:.2}s dropped={} overflow={} threads={} write_ms={} files={}",
            meta.mode,
            timer,
            format_interval(self.options.interval_ns),
            samples,
            usable,
            c("recovered_samples"),
            rate,
            cpu_s,
            c("dropped_samples"),
            c("cct_overflow_samples"),
            c("threads_sampled"),
            write_time.as_millis(),
            files
        ));
    }
}

fn format_interval(ns: u64) -> String {
    if ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns % 1000 == 0 {
        format!("{}us", ns / 1000)
    } else {
        format!("{ns}ns")
    }
}

fn agent() -> Option<&'static Agent> {
    AGENT.get().copied()
}

unsafe extern "C" fn on_vm_init(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    guard((), || {
        if let Some(a) = agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.vm_init(unsafe { Jni::from_raw(jni) }, thread);
        }
    })
}

unsafe extern "C" fn on_vm_death(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv) {
    guard((), || {
        if let Some(a) = agent() {
            if let Some(s) = Sampler::get() {
                s.stop();
            }
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.write_outputs(Some(unsafe { Jni::from_raw(jni) }), true);
        }
    })
}

unsafe extern "C" fn on_thread_start(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    guard((), || {
        if let Some(a) = agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.thread_started(unsafe { Jni::from_raw(jni) }, thread);
        }
    })
}

unsafe extern "C" fn on_thread_end(_jvmti: *mut jvmtiEnv, _jni: *mut JNIEnv, _thread: jthread) {
    guard((), || {
        if let Some(s) = Sampler::get() {
            s.unregister(crate::engine::asgct::timer::gettid());
        }
    })
}

unsafe extern "C" fn on_class_load(_jvmti: *mut jvmtiEnv, _jni: *mut JNIEnv, _thread: jthread, _klass: jclass) {}

unsafe extern "C" fn on_class_prepare(jvmti: *mut jvmtiEnv, _jni: *mut JNIEnv, _thread: jthread, klass: jclass) {
    guard((), || {
        // SAFETY: the JVM passes its JVMTI environment.
        let jvmti = unsafe { Jvmti::from_raw(jvmti) };
        drop(jvmti.class_methods(klass));
    })
}

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

/// Whether `timer` names a timer the summary may report; used by tests of the summary format.
pub fn timer_label(t: TimerKind) -> &'static str {
    t.name()
}
