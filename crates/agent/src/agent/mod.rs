//! The agent: JVMTI entry points, event callbacks, profiling sessions, and writing the profile out.
//!
//! Every callback runs inside [`guard`], so a bug in kprof becomes a message on stderr, never an unwind
//! into the JVM. The agent is created once (`Agent_OnLoad` or `Agent_OnAttach`) and leaked: callbacks
//! and the signal handler may run until the process is gone.
//!
//! A *session* is one profiling run with one set of options: it starts at VMInit (or on attach, or on
//! `kprof start`) and ends at VM death, after `duration=`, or on `kprof stop`; each end writes the
//! session's files and prints the summary line. The calling context tree lives as long as the agent;
//! a new session resets its counters.

pub mod resolve;

use crate::cct::{Cct, ROOT};
use crate::engine::asgct::Sampler;
use crate::engine::rewriting::RewritingEngine;
use crate::frame::FrameId;
use crate::jvmti::bindings::*;
use crate::jvmti::{vmstructs, JavaVm, Jni, Jvmti};
use kprof_profile::output;
use kprof_profile::{Meta, WeightUnit};
use kprof_protocol::control;
use kprof_protocol::options::{expand_path, Mode, Options, OutputFile};
use kprof_timers::gettid;
use resolve::{NameSources, Resolver};
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Names of threads kprof starts itself; they are never sampled.
const OWN_THREAD_PREFIX: &str = "kprof-";

/// One profiling run.
struct Session {
    options: Options,
    started: Instant,
    start_unix_ms: u64,
    /// The asgct sampler of this session, once started.
    sampler: Option<&'static Sampler>,
    running: bool,
    /// Files written so far in this session (`%n` of the next write is this plus one).
    writes: u32,
    /// The session's end has been written (by stop, duration or VM death).
    ended: bool,
    /// When the next periodic dump is due.
    next_dump: Option<Instant>,
    /// bytecode: bytecodes counted since each thread's last sample, read when the session ended.
    residual: u64,
}

impl Session {
    fn new(options: Options) -> Session {
        Session {
            options,
            started: Instant::now(),
            start_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            sampler: None,
            running: false,
            writes: 0,
            ended: false,
            next_dump: None,
            residual: 0,
        }
    }

    fn deadline(&self) -> Option<Instant> {
        (self.running && self.options.duration_ns > 0)
            .then(|| self.started + Duration::from_nanos(self.options.duration_ns))
    }
}

/// What a write needs from the session, copied so that the session lock is not held while writing.
struct WriteJob {
    files: Vec<OutputFile>,
    meta: Meta,
    metric: kprof_profile::Metric,
    start_secs: u64,
    number: u32,
    interval_ns: u64,
    /// Print the summary line (the session ended).
    summary: bool,
}

/// Everything the agent knows.
pub struct Agent {
    vm: JavaVm,
    jvmti: Jvmti,
    cct: &'static Cct,
    session: Mutex<Session>,
    /// Thread names by thread number (roots with `threads=on`).
    thread_names: Mutex<Vec<String>>,
    resolver: Mutex<Resolver>,
    /// Serialises writing the profile.
    write_lock: Mutex<()>,
    /// The VM is dying: no more sessions, dumps or commands.
    dead: AtomicBool,
    control_started: AtomicBool,
    /// The control socket's path, removed at VM death (the control thread does not outlive the VM).
    control_path: OnceLock<std::path::PathBuf>,
    /// Global references to the system and platform class loaders: classes of other loaders can be
    /// unloaded, so their methods are named as soon as they are prepared (asgct mode).
    permanent_loaders: OnceLock<Vec<usize>>,
}

static AGENT: OnceLock<&'static Agent> = OnceLock::new();

/// Runs `f`, turning a panic into a message and `fallback`.
pub(crate) fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn option_text(options: *mut c_char) -> Option<String> {
    // SAFETY: the JVM passes a NUL-terminated string or NULL.
    (!options.is_null()).then(|| unsafe { CStr::from_ptr(options) }.to_string_lossy().into_owned())
}

/// # Safety
/// Called by the JVM with its JavaVM and the option string after `=` in `-agentpath`.
#[no_mangle]
pub unsafe extern "C" fn Agent_OnLoad(vm: *mut JavaVM, options: *mut c_char, _reserved: *mut c_void) -> jint {
    guard(JNI_ERR, || {
        // SAFETY: `vm` is the JVM's JavaVM.
        match on_load(unsafe { JavaVm::from_raw(vm) }, option_text(options).as_deref()) {
            Ok(()) => JNI_OK as jint,
            Err(line) => {
                eprintln!("{line}");
                JNI_ERR
            }
        }
    })
}

/// # Safety
/// Called by the JVM's attach listener with its JavaVM and the options of the `load` command.
#[no_mangle]
pub unsafe extern "C" fn Agent_OnAttach(vm: *mut JavaVM, options: *mut c_char, _reserved: *mut c_void) -> jint {
    guard(JNI_ERR, || {
        // SAFETY: `vm` is the JVM's JavaVM.
        match on_attach(unsafe { JavaVm::from_raw(vm) }, option_text(options).as_deref()) {
            Ok(line) => {
                say(&format!("attached: {}", line.trim_start_matches("ok ")));
                JNI_OK as jint
            }
            Err(line) => {
                eprintln!("{line}");
                JNI_ERR
            }
        }
    })
}

fn parse_options(text: Option<&str>) -> Result<Options, String> {
    let options = Options::parse(text).map_err(|e| e.0)?;
    if options.help {
        print!("{}", kprof_protocol::options::help_text());
    }
    Ok(options)
}

/// `at_start`: called from Agent_OnLoad (the VM has not started: native methods can be wrapped).
fn create_agent(vm: JavaVm, options: Options, at_start: bool) -> Result<&'static Agent, String> {
    let jvmti = vm.jvmti(JVMTI_VERSION_1_2).ok_or("kprof: cannot get a JVMTI environment (JVMTI 1.2+ needed)")?;
    let cct_bytes = options.cct_mb() as usize * 1024 * 1024;
    let cct: &'static Cct =
        Box::leak(Box::new(Cct::with_bytes(cct_bytes).ok_or_else(|| {
            format!("kprof: bad option 'cct_mb={}': cannot reserve that much memory", options.cct_mb())
        })?));
    let agent: &'static Agent = Box::leak(Box::new(Agent {
        vm,
        jvmti,
        cct,
        session: Mutex::new(Session::new(options)),
        thread_names: Mutex::new(Vec::new()),
        resolver: Mutex::new(Resolver::default()),
        write_lock: Mutex::new(()),
        dead: AtomicBool::new(false),
        control_started: AtomicBool::new(false),
        control_path: OnceLock::new(),
        permanent_loaders: OnceLock::new(),
    }));
    AGENT.set(agent).map_err(|_| "kprof: loaded twice")?;
    let mode = lock(&agent.session).options.clone();
    agent.setup_events(&mode, at_start)?;
    Ok(agent)
}

fn on_load(vm: JavaVm, text: Option<&str>) -> Result<(), String> {
    let options = parse_options(text)?;
    if options.help {
        std::process::exit(0);
    }
    for f in &options.files {
        check_writable(&expand_path(&f.path, std::process::id(), 0, 1));
    }
    // The rewriting modes find each thread's state in fields of java.lang.Thread (thread_fields.rs). The early
    // hook this needs makes HotSpot start without class data sharing (slower start-up, and more JDK
    // start-up code runs and is counted); mode=asgct needs none of it.
    if matches!(options.mode, Mode::Bytecode | Mode::Exact) {
        if let Err(e) = crate::engine::rewriting::thread_fields::install(vm) {
            say(&format!("note: per-thread fields not added to java.lang.Thread ({e}); rewritten code uses a table"));
        }
    }
    create_agent(vm, options, true)?;
    Ok(())
}

fn on_attach(vm: JavaVm, text: Option<&str>) -> Result<String, String> {
    let options = parse_options(text)?;
    if options.help {
        return Ok("help printed".into());
    }
    let jni = vm.jni().ok_or("kprof: the attach thread has no JNI environment")?;
    let agent = match AGENT.get() {
        Some(a) => a,
        None => create_agent(vm, options.clone(), false)?,
    };
    let result = agent.start_session(jni, options);
    if agent.session_control() {
        agent.spawn_control_thread();
    }
    result
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
        say(&format!(
            "warning: cannot write file={path} ({}: {err}); the application runs on, the profile will not be saved there",
            dir.display()
        ));
    }
}

/// Events that only a running session needs; switched off when sampling stops so that a stopped agent
/// costs the application nothing.
const SESSION_EVENTS: [jvmtiEvent; 4] =
    [JVMTI_EVENT_THREAD_START, JVMTI_EVENT_THREAD_END, JVMTI_EVENT_CLASS_PREPARE, JVMTI_EVENT_COMPILED_METHOD_LOAD];

impl Agent {
    fn setup_events(&self, options: &Options, at_start: bool) -> Result<(), String> {
        let potential =
            self.jvmti.potential_capabilities().map_err(|e| format!("kprof: GetPotentialCapabilities: {e}"))?;
        let mut caps = jvmtiCapabilities::default();
        let rewriting = matches!(options.mode, Mode::Bytecode | Mode::Exact);
        // Native methods get wrappers only when every class can be given them as it is first defined.
        let natives = at_start && options.mode == Mode::Exact;
        if rewriting {
            RewritingEngine::capabilities(&potential, &mut caps, natives)
                .map_err(|e| format!("kprof: mode={}: {e}", options.mode.name()))?;
        }
        // Lets HotSpot record debug info at non-safepoint PCs (DebugNonSafepoints), so AsyncGetCallTrace
        // attributes compiled and inlined frames precisely.
        if potential.can_generate_compiled_method_load_events() != 0 {
            caps.set_can_generate_compiled_method_load_events(1);
        }
        // Bytecode mode keeps a state per virtual thread, given at VirtualThreadStart (JDK 21+).
        let virtual_threads = options.mode == Mode::Bytecode && potential.can_support_virtual_threads() != 0;
        if virtual_threads {
            caps.set_can_support_virtual_threads(1);
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
            ClassFileLoadHook: Some(on_class_file_load_hook),
            VirtualThreadStart: Some(on_virtual_thread_start),
            VirtualThreadEnd: Some(on_virtual_thread_end),
            ..Default::default()
        };
        self.jvmti.set_event_callbacks(&callbacks).map_err(|e| format!("kprof: SetEventCallbacks: {e}"))?;
        if rewriting {
            RewritingEngine::create(self.cct, self.jvmti, options, natives)
                .map_err(|e| format!("kprof: mode={}: {e}", options.mode.name()))?;
            self.jvmti
                .set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, true)
                .map_err(|e| format!("kprof: enabling ClassFileLoadHook: {e}"))?;
        }
        // AsyncGetCallTrace refuses to walk stacks unless ClassLoad events are enabled.
        for e in [JVMTI_EVENT_VM_INIT, JVMTI_EVENT_VM_DEATH, JVMTI_EVENT_CLASS_LOAD] {
            self.jvmti.set_event(e, true).map_err(|err| format!("kprof: enabling JVMTI event {e}: {err}"))?;
        }
        if virtual_threads {
            for e in [JVMTI_EVENT_VIRTUAL_THREAD_START, JVMTI_EVENT_VIRTUAL_THREAD_END] {
                self.jvmti.set_event(e, true).map_err(|err| format!("kprof: enabling JVMTI event {e}: {err}"))?;
            }
        }
        self.set_session_events(true);
        Ok(())
    }

    /// The rewriting engine, created on first use: at Agent_OnLoad for mode=bytecode or exact, or later
    /// (attach, `kprof start mode=...` in a JVM that started profiling another way), when the live-phase
    /// capabilities allow it (native methods then get no wrappers).
    fn rewriting_engine(&self, options: &Options) -> Result<&'static RewritingEngine, String> {
        if let Some(e) = RewritingEngine::get() {
            return Ok(e);
        }
        let fail = |e: String| format!("kprof: mode={}: {e}", options.mode.name());
        let potential = self.jvmti.potential_capabilities().map_err(|e| fail(e.to_string()))?;
        let mut caps = jvmtiCapabilities::default();
        RewritingEngine::capabilities(&potential, &mut caps, false).map_err(fail)?;
        self.jvmti.add_capabilities(&caps).map_err(|e| fail(format!("AddCapabilities: {e}")))?;
        let engine = RewritingEngine::create(self.cct, self.jvmti, options, false).map_err(fail)?;
        self.jvmti
            .set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, true)
            .map_err(|e| fail(format!("ClassFileLoadHook: {e}")))?;
        Ok(engine)
    }

    fn set_session_events(&self, on: bool) {
        for e in SESSION_EVENTS {
            // CompiledMethodLoad fails without its capability; nothing else depends on it.
            let _ = self.jvmti.set_event(e, on);
        }
    }

    fn session_control(&self) -> bool {
        lock(&self.session).options.control
    }

    fn vm_init(&'static self, jni: Jni) {
        let options = lock(&self.session).options.clone();
        if let Err(e) = self.start_session(jni, options) {
            say(&e);
        }
        if self.session_control() {
            self.spawn_control_thread();
        }
    }

    /// Starts a session with `options` (ending the running one, unwritten, if any). Returns the
    /// one-line description the control socket replies with.
    fn start_session(&'static self, jni: Jni, options: Options) -> Result<String, String> {
        if self.dead.load(Ordering::Acquire) {
            return Err("the JVM is shutting down".into());
        }
        let mut session = lock(&self.session);
        if session.running {
            if let Some(s) = session.sampler {
                s.stop();
            }
        }
        if session.writes > 0 || session.sampler.is_some() {
            self.cct.reset_counters();
        }
        *session = Session::new(options);
        let o = session.options.clone();
        self.set_session_events(true);
        self.preallocate_method_ids(jni);
        match o.mode {
            Mode::Asgct => {
                self.find_permanent_loaders(jni);
                let sampler = Sampler::start(self.cct, o.timer, o.interval_ns, o.depth, &mut |n| say(&n))
                    .map_err(|e| format!("kprof: sampling not started: {e}"))?;
                session.sampler = Some(sampler);
                session.running = true;
                self.register_live_threads(jni, o.threads);
            }
            Mode::Bytecode | Mode::Exact => {
                let engine = self.rewriting_engine(&o)?;
                engine.start(jni, &o).map_err(|e| format!("kprof: mode={} not started: {e}", o.mode.name()))?;
                session.running = true;
            }
        }
        session.next_dump = (o.dump_ns > 0).then(|| session.started + Duration::from_nanos(o.dump_ns));
        let timer = session.sampler.map(|s| s.timer.name()).unwrap_or("none");
        Ok(match o.mode {
            Mode::Asgct => {
                format!("ok state=running mode=asgct timer={timer} interval={}", format_interval(o.interval_ns))
            }
            Mode::Exact => format!(
                "ok state=running mode=exact bb={} natives={}",
                if o.bb { "on" } else { "off" },
                if RewritingEngine::get().is_some_and(|e| e.wraps_natives()) { "on" } else { "off" }
            ),
            _ => format!("ok state=running mode={} gran={} rand={}", o.mode.name(), o.gran, o.rand),
        })
    }

    /// Ends the running session: stops sampling, writes its files, prints the summary. Returns the
    /// paths written.
    fn stop_session(&self, jni: Option<Jni>, restore: bool) -> Result<Vec<String>, String> {
        let job = {
            let mut session = lock(&self.session);
            if session.ended {
                return Err("no session is running".into());
            }
            if let Some(s) = session.sampler {
                s.stop();
            }
            if matches!(session.options.mode, Mode::Bytecode | Mode::Exact) {
                if let (Some(engine), Some(jni)) = (RewritingEngine::get(), jni) {
                    if session.options.mode == Mode::Bytecode {
                        session.residual = engine.residual(jni);
                    }
                    engine.stop(jni, restore);
                }
            }
            session.running = false;
            session.ended = true;
            self.set_session_events(false);
            self.write_job(&mut session, None, true)
        };
        Ok(self.write(jni, job))
    }

    /// Writes the profile so far without ending the session, to `files` or the session's files.
    fn dump(&self, jni: Option<Jni>, files: Option<Vec<OutputFile>>) -> Result<Vec<String>, String> {
        let job = {
            let mut session = lock(&self.session);
            if session.running && matches!(session.options.mode, Mode::Exact | Mode::Bytecode) {
                if let (Some(engine), Some(jni)) = (RewritingEngine::get(), jni) {
                    engine.before_write(jni);
                }
            }
            self.write_job(&mut session, files, false)
        };
        Ok(self.write(jni, job))
    }

    fn write_job(&self, session: &mut Session, files: Option<Vec<OutputFile>>, summary: bool) -> WriteJob {
        session.writes += 1;
        WriteJob {
            files: files.unwrap_or_else(|| session.options.files.clone()),
            meta: self.meta(session),
            metric: session.options.effective_metric(),
            start_secs: session.start_unix_ms / 1000,
            number: session.writes,
            interval_ns: session.options.interval_ns,
            summary,
        }
    }

    fn status(&self) -> String {
        let session = lock(&self.session);
        let meta = self.meta(&session);
        let files: Vec<String> = session
            .options
            .files
            .iter()
            .map(|f| {
                absolute(&expand_path(&f.path, std::process::id(), session.start_unix_ms / 1000, session.writes + 1))
            })
            .collect();
        format!(
            "ok state={} mode={} timer={} interval={} samples={} elapsed_ms={} files={}",
            if session.running { "running" } else { "stopped" },
            session.options.mode.name(),
            if meta.timer.is_empty() { "none" } else { &meta.timer },
            format_interval(session.options.interval_ns),
            meta.counters.get("samples").copied().unwrap_or(0),
            session.started.elapsed().as_millis(),
            files.join(",")
        )
    }

    fn find_permanent_loaders(&self, jni: Jni) {
        if self.permanent_loaders.get().is_some() {
            return;
        }
        let mut loaders = Vec::new();
        if let Some(k) = jni.find_class("java/lang/ClassLoader") {
            for name in ["getSystemClassLoader", "getPlatformClassLoader"] {
                if let Some(m) = jni.static_method_id(k, name, "()Ljava/lang/ClassLoader;") {
                    let l = jni.call_static_object(k, m, &[]);
                    if !l.is_null() {
                        loaders.push(jni.new_global_ref(l) as usize);
                        jni.delete_local_ref(l);
                    }
                }
            }
            jni.delete_local_ref(k);
        }
        let _ = self.permanent_loaders.set(loaders);
    }

    /// ClassPrepare in asgct mode: jmethodIDs for the class's methods (AsyncGetCallTrace needs them), and
    /// their names at once when the class's loader can be collected: a method whose class is unloaded
    /// before the profile is written would otherwise show as `[unknown_method]`.
    fn class_prepared(&self, jni: Jni, klass: jclass) {
        let Ok(methods) = self.jvmti.class_methods(klass) else { return };
        let Ok(loader) = self.jvmti.class_loader(klass) else { return };
        if loader.is_null() {
            return;
        }
        let permanent =
            self.permanent_loaders.get().is_some_and(|ls| ls.iter().any(|&l| jni.is_same_object(loader, l as jobject)));
        jni.delete_local_ref(loader);
        if permanent || self.dead.load(Ordering::Acquire) {
            return;
        }
        let names = lock(&self.thread_names).clone();
        let sources = NameSources { jvmti: self.jvmti, jni: Some(jni), threads: &names, methods: None };
        let mut resolver = lock(&self.resolver);
        for &m in methods.as_slice() {
            resolver.frame(FrameId::jmethod(m as u64), &sources);
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
        let session = lock(&self.session);
        let Some(sampler) = session.sampler.filter(|_| session.running) else { return };
        let name = self.jvmti.thread_name(thread).unwrap_or_default();
        if name.starts_with(OWN_THREAD_PREFIX) {
            return;
        }
        let root = self.thread_root(&name, session.options.threads);
        if let Err(e) = sampler.register(gettid(), jni.raw() as *mut c_void, root) {
            self.note_once(&e);
        }
    }

    /// The CCT node a thread's samples start from: the root, or with `threads=on` a node for the thread.
    fn thread_root(&self, name: &str, per_thread: bool) -> u32 {
        if !per_thread {
            return ROOT;
        }
        let mut names = lock(&self.thread_names);
        let number = match names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                names.push(name.to_string());
                names.len() - 1
            }
        };
        self.cct.child(ROOT, FrameId::thread(number as u32), -1).unwrap_or(self.cct.overflow())
    }

    /// Registers the threads that already run: the calling thread directly, the others through
    /// `Thread.eetop` and HotSpot's structure table (see [`vmstructs`]). Caller holds the session lock.
    fn register_live_threads(&self, jni: Jni, per_thread: bool) {
        let Some(sampler) = Sampler::get() else { return };
        let offsets = vmstructs::thread_offsets();
        let Some(eetop) = jni.find_class("java/lang/Thread").and_then(|k| {
            let f = jni.field_id(k, "eetop", "J");
            jni.delete_local_ref(k);
            f
        }) else {
            say("cannot read Thread.eetop; only threads that start from now on are sampled");
            return;
        };
        let Ok(current) = self.jvmti.current_thread() else { return };
        let my_tid = gettid();
        let my_env = jni.raw() as usize;
        let my_eetop = jni.long_field(current, eetop) as usize;
        jni.delete_local_ref(current);
        // The JNIEnv lives inside the JavaThread at the same offset in every thread.
        let env_offset = my_env.wrapping_sub(my_eetop);
        let env_offset_ok = my_eetop != 0 && env_offset < 1 << 16;
        let Ok(threads) = self.jvmti.all_threads() else { return };
        let mut skipped = 0;
        for &t in threads.as_slice() {
            let name = self.jvmti.thread_name(t).unwrap_or_default();
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
                    let root = self.thread_root(&name, per_thread);
                    if let Err(e) = sampler.register(tid, env as *mut c_void, root) {
                        self.note_once(&e);
                    }
                }
                None => skipped += 1,
            }
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

    /// The control thread: serves the control socket and ends sessions at `duration=` and writes
    /// `dump=` snapshots. One per agent; attached to the JVM as a daemon (it resolves names).
    fn spawn_control_thread(&'static self) {
        if self.control_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let socket = match control::ControlSocket::bind() {
            Ok(s) => {
                let _ = self.control_path.set(s.path().to_path_buf());
                Some(s)
            }
            Err(e) => {
                say(&format!("no control socket ({e}); kprof start/stop/dump/status will not reach this JVM"));
                None
            }
        };
        let spawned = std::thread::Builder::new().name("kprof-control".into()).spawn(move || {
            guard((), || {
                self.control_loop(socket.as_ref());
                drop(socket);
            })
        });
        if let Err(e) = spawned {
            say(&format!("cannot start the control thread ({e}); duration=, dump= and kprof commands are ignored"));
        }
    }

    /// Runs `work` on this thread attached to the JVM (as a daemon, named kprof-control), detached again
    /// afterwards. The thread waits detached: HotSpot's exit waits up to 300 ms for attached threads that
    /// sit in native code, which an idle control thread would be.
    fn attached<R>(&self, work: impl FnOnce(Jni) -> R) -> Option<R> {
        let jni = self.vm.attach_daemon("kprof-control")?;
        let r = guard(None, || Some(work(jni)));
        self.vm.detach();
        r
    }

    fn control_loop(&self, socket: Option<&control::ControlSocket>) {
        while !self.dead.load(Ordering::Acquire) {
            let (deadline, next_dump) = {
                let s = lock(&self.session);
                (s.deadline(), s.next_dump.filter(|_| s.running))
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                self.attached(|jni| drop(self.stop_session(Some(jni), false)));
                continue;
            }
            if let Some(t) = next_dump.filter(|t| now >= *t) {
                self.attached(|jni| drop(self.dump(Some(jni), None)));
                let mut s = lock(&self.session);
                let interval = Duration::from_nanos(s.options.dump_ns.max(1));
                s.next_dump = Some(t + interval).map(|n| if n < now { now + interval } else { n });
                continue;
            }
            let wake = [deadline, next_dump].into_iter().flatten().min();
            let wait = wake
                .map_or(Duration::from_millis(500), |w| w.saturating_duration_since(now))
                .min(Duration::from_millis(500));
            match socket {
                Some(sock) => {
                    if let Some(stream) = sock.accept(wait) {
                        if self.attached(|jni| self.serve(jni, &stream)).is_none() {
                            control::reply(&stream, Err("the JVM is shutting down".into()));
                        }
                    }
                }
                None => std::thread::sleep(wait),
            }
        }
    }

    fn serve(&self, jni: Jni, stream: &std::os::unix::net::UnixStream) {
        let result = control::read_request(stream).and_then(|request| match request {
            control::Request::Status => Ok(self.status()),
            control::Request::Stop => {
                self.stop_session(Some(jni), true).map(|files| format!("ok files={}", files.join(",")))
            }
            control::Request::Dump(text) => {
                let files = if text.is_empty() {
                    None
                } else {
                    let o = Options::parse(Some(&text)).map_err(|e| e.0)?;
                    Some(o.files)
                };
                self.dump(Some(jni), files).map(|files| format!("ok files={}", files.join(",")))
            }
            control::Request::Start(text) => {
                let options = Options::parse(Some(&text)).map_err(|e| e.0)?;
                let me: &'static Agent = agent().ok_or("no agent")?;
                me.start_session(jni, options)
            }
        });
        control::reply(stream, result);
    }

    fn meta(&self, session: &Session) -> Meta {
        let o = &session.options;
        let mut meta = Meta {
            mode: o.mode.name().to_string(),
            weight_unit: WeightUnit::CpuNanos,
            default_metric: Some(o.effective_metric()),
            interval: o.interval_ns,
            jvm: format!(
                "{} {}",
                self.jvmti.system_property("java.vm.name").unwrap_or_default(),
                self.jvmti.system_property("java.vm.version").unwrap_or_default()
            ),
            start_unix_ms: session.start_unix_ms,
            duration_ns: session.started.elapsed().as_nanos() as u64,
            ..Meta::default()
        };
        if let Some(s) = session.sampler {
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
        if matches!(o.mode, Mode::Bytecode | Mode::Exact) {
            meta.weight_unit = WeightUnit::Bytecodes;
            if let Some(e) = RewritingEngine::get() {
                let c = &mut meta.counters;
                if o.mode == Mode::Bytecode {
                    meta.interval = o.gran as u64;
                    let st = &e.bytecode;
                    let sampled = st.sampled_bytecodes.load(Ordering::Relaxed);
                    c.insert("samples".into(), st.samples.load(Ordering::Relaxed));
                    c.insert("sampled_bytecodes".into(), sampled);
                    c.insert("residual_bytecodes".into(), session.residual);
                    let dropped = st.dropped_bytecodes.load(Ordering::Relaxed);
                    c.insert("dropped_bytecodes".into(), dropped);
                    c.insert("estimated_bytecodes".into(), sampled + dropped + session.residual);
                    c.insert("dropped_samples".into(), st.dropped.load(Ordering::Relaxed));
                    c.insert("truncated_samples".into(), st.truncated.load(Ordering::Relaxed));
                    c.insert("threads_sampled".into(), st.threads.load(Ordering::Relaxed));
                    c.insert("gran".into(), o.gran as u64);
                    c.insert("rand".into(), o.rand as u64);
                } else {
                    meta.interval = 0;
                    let st = &e.exact;
                    c.insert("calls".into(), st.calls.load(Ordering::Relaxed));
                    c.insert("bytecodes".into(), st.bytecodes.load(Ordering::Relaxed));
                    c.insert("tree_merges".into(), st.merges.load(Ordering::Relaxed));
                    c.insert("merge_ms".into(), st.merge_ns.load(Ordering::Relaxed) / 1_000_000);
                    c.insert("merge_helpers".into(), st.merge_helpers.load(Ordering::Relaxed));
                    c.insert("overflow_calls".into(), st.overflow_calls.load(Ordering::Relaxed));
                    c.insert("tree_bytes_peak".into(), st.mapped_peak.load(Ordering::Relaxed));
                    c.insert("bb".into(), o.bb as u64);
                    c.insert("natives".into(), e.wraps_natives() as u64);
                    c.insert("natives_wrapped".into(), e.stats.natives_wrapped.load(Ordering::Relaxed));
                    c.insert("native_catches".into(), st.native_catches.load(Ordering::Relaxed));
                    c.insert(
                        "classes_with_natives_wrapped".into(),
                        e.stats.classes_with_natives_wrapped.load(Ordering::Relaxed),
                    );
                }
                let st = &e.stats;
                c.insert("classes_seen".into(), st.classes_seen.load(Ordering::Relaxed));
                c.insert("classes_rewritten".into(), st.classes_rewritten.load(Ordering::Relaxed));
                c.insert("classes_retransformed".into(), st.classes_retransformed.load(Ordering::Relaxed));
                c.insert("classes_filtered".into(), st.classes_filtered.load(Ordering::Relaxed));
                c.insert("classes_failed".into(), st.classes_failed.load(Ordering::Relaxed));
                c.insert("retransform_failures".into(), st.retransform_failures.load(Ordering::Relaxed));
                let rs = lock(&e.rewrite_stats);
                c.insert("methods_rewritten".into(), rs.methods_rewritten);
                c.insert("methods_left_alone".into(), rs.left_alone_total());
                for (reason, n) in &rs.left_alone {
                    c.insert(format!("left_alone.{}", reason.name()), *n);
                }
            }
        }
        let cs = self.cct.stats();
        meta.counters.insert("cct_nodes".into(), cs.nodes as u64);
        meta.counters.insert("cct_overflow_samples".into(), cs.overflow_samples);
        meta
    }

    /// Resolves names and writes every file of `job`. Returns the absolute paths written.
    fn write(&self, jni: Option<Jni>, job: WriteJob) -> Vec<String> {
        let _g = lock(&self.write_lock);
        let t0 = Instant::now();
        let snapshot = self.cct.snapshot();
        if job.summary && self.dead.load(Ordering::Acquire) {
            // The VM's exit: the tree is not needed any more, and what the write allocates next (the
            // file's page cache above all) takes its pages back (see `Cct::discard`).
            self.cct.discard();
        }
        let names = lock(&self.thread_names).clone();
        let exact_blocks = job.meta.mode == "exact" && job.meta.counters.get("bb").is_some_and(|&b| b != 0);
        let methods = RewritingEngine::get().map(|e| &*e.methods);
        let sources = NameSources { jvmti: self.jvmti, jni, threads: &names, methods };
        // JSON alone (what exact profiles of millions of contexts are written as) is written from the
        // snapshot itself; other formats and block counts need the profile.
        let json_only = !exact_blocks && job.files.iter().all(|f| f.format == output::Format::Json);
        let tree = if json_only { lock(&self.resolver).resolved_snapshot(&snapshot, &sources) } else { None };
        let resolved = match tree {
            Some(tree) => {
                let totals = tree.totals();
                Resolved::Tree(tree, totals)
            }
            None => {
                let mut profile = lock(&self.resolver).profile(&snapshot, job.meta.clone(), &sources);
                if exact_blocks {
                    if let Some(e) = RewritingEngine::get() {
                        attach_blocks(&mut profile, &snapshot, e);
                    }
                }
                Resolved::Profile(profile)
            }
        };
        let mut written = Vec::new();
        for f in &job.files {
            let path = expand_path(&f.path, std::process::id(), job.start_secs, job.number);
            let target = std::path::Path::new(&path);
            let result = match &resolved {
                Resolved::Tree(tree, [samples, weight, calls]) => output::write_atomic_with(target, |out| {
                    output::json::write_tree_to(&job.meta, &tree.frames, tree, [samples, weight, calls], out)
                }),
                Resolved::Profile(profile) => output::write_profile(target, profile, f.format, job.metric),
            };
            match result {
                Ok(abs) => written.push(abs.display().to_string()),
                Err(e) => say(&format!("cannot write {path}: {e}")),
            }
        }
        if job.summary {
            let contexts = snapshot.iter().filter(|n| n.calls > 0).count();
            print_summary(&job.meta, job.interval_ns, contexts, &written, t0.elapsed());
        }
        if self.dead.load(Ordering::Acquire) {
            // The VM is exiting: freeing millions of nodes one by one only delays the exit.
            std::mem::forget(resolved);
            std::mem::forget(snapshot);
        }
        written
    }

    fn vm_death(&self, jni: Jni) {
        self.dead.store(true, Ordering::Release);
        if let Some(p) = self.control_path.get() {
            let _ = std::fs::remove_file(p);
        }
        let ended = lock(&self.session).ended;
        if !ended {
            let _ = self.stop_session(Some(jni), false);
        }
    }
}

/// A snapshot made ready to write: named as it is, with its inclusive totals (JSON), or as a profile.
enum Resolved<'a> {
    Tree(resolve::ResolvedSnapshot<'a>, [Vec<u64>; 3]),
    Profile(kprof_profile::Profile),
}

/// Exact mode, `bb=on`: each context's block counts with the blocks' bytecode ranges. The profile's nodes
/// are the snapshot's, in the same order.
fn attach_blocks(profile: &mut kprof_profile::Profile, snapshot: &[crate::cct::SnapNode], e: &RewritingEngine) {
    let all = e.exact.all_blocks();
    for (i, sn) in snapshot.iter().enumerate() {
        let Some(counts) = all.get(&sn.node) else { continue };
        let Some(crate::frame::FrameRef::Method(id)) = sn.frame.decode() else { continue };
        let Some(layout) = e.methods.blocks(id) else { continue };
        profile.nodes[i].blocks = layout
            .spans
            .iter()
            .zip(counts)
            .map(|(span, &count)| kprof_profile::BlockCount { start_bci: span.start_bci, end_bci: span.end_bci, count })
            .collect();
    }
}

fn absolute(path: &str) -> String {
    let p = std::path::Path::new(path);
    if p.is_absolute() {
        return path.to_string();
    }
    std::env::current_dir().map(|d| d.join(p).display().to_string()).unwrap_or_else(|_| path.to_string())
}

/// `contexts`: calling contexts with calls (exact mode).
fn print_summary(meta: &Meta, interval_ns: u64, contexts: usize, written: &[String], write_time: Duration) {
    let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
    if meta.mode == "exact" {
        let reasons: Vec<String> = meta
            .counters
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("left_alone.").map(|r| format!("{r}:{v}")))
            .collect();
        let files = if written.is_empty() { "none".to_string() } else { written.join(",") };
        let on_off = |k: &str| if c(k) != 0 { "on" } else { "off" };
        say(&format!(
            "mode=exact bb={} natives={} calls={} bytecodes={} contexts={} classes_rewritten={} retransformed={} filtered={} failed={} methods_rewritten={} natives_wrapped={} left_alone={} ({}) overflow={} tree_mb={} merge_ms={} write_ms={} files={}",
            on_off("bb"),
            on_off("natives"),
            c("calls"),
            c("bytecodes"),
            contexts,
            c("classes_rewritten"),
            c("classes_retransformed"),
            c("classes_filtered"),
            c("classes_failed") + c("retransform_failures"),
            c("methods_rewritten"),
            c("natives_wrapped"),
            c("methods_left_alone"),
            if reasons.is_empty() { "none".to_string() } else { reasons.join(",") },
            c("overflow_calls"),
            c("tree_bytes_peak").div_ceil(1 << 20),
            c("merge_ms"),
            write_time.as_millis(),
            files
        ));
        return;
    }
    if meta.mode == "bytecode" {
        let reasons: Vec<String> = meta
            .counters
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("left_alone.").map(|r| format!("{r}:{v}")))
            .collect();
        let files = if written.is_empty() { "none".to_string() } else { written.join(",") };
        say(&format!(
            "mode=bytecode gran={} rand={} samples={} dropped={} truncated={} threads={} bytecodes={} classes_rewritten={} retransformed={} filtered={} failed={} methods_rewritten={} left_alone={} ({}) overflow={} write_ms={} files={}",
            c("gran"),
            c("rand"),
            c("samples"),
            c("dropped_samples"),
            c("truncated_samples"),
            c("threads_sampled"),
            c("estimated_bytecodes"),
            c("classes_rewritten"),
            c("classes_retransformed"),
            c("classes_filtered"),
            c("classes_failed") + c("retransform_failures"),
            c("methods_rewritten"),
            c("methods_left_alone"),
            if reasons.is_empty() { "none".to_string() } else { reasons.join(",") },
            c("cct_overflow_samples"),
            write_time.as_millis(),
            files
        ));
        return;
    }
    let samples = c("samples");
    let usable = if samples > 0 { 100.0 * c("usable_samples") as f64 / samples as f64 } else { 0.0 };
    let cpu_s = c("sampled_cpu_ns") as f64 / 1e9;
    let rate = if cpu_s > 0.0 { (samples - c("foreign_thread_samples")) as f64 / cpu_s } else { 0.0 };
    let files = if written.is_empty() { "none".to_string() } else { written.join(",") };
    let mut timer = if meta.timer.is_empty() { "none" } else { meta.timer.as_str() }.to_string();
    if timer == "perf" {
        // Which ticks the perf event could take: the user's CPU time only under perf_event_paranoid=2.
        let ticks = if kprof_timers::perf_counts_kernel_ticks() { "user+kernel" } else { "user" };
        timer.push_str(" ticks=");
        timer.push_str(ticks);
    }
    say(&format!(
        "mode={} timer={} interval={} samples={} usable={:.1}% recovered={} rate={:.0}/cpu-s cpu={:.2}s dropped={} overflow={} threads={} write_ms={} files={}",
        meta.mode,
        timer,
        format_interval(interval_ns),
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

/// The CCT node of thread `name`'s root (bytecode mode's `Bc.threadRoot`).
pub fn thread_root_for(name: &str) -> u32 {
    match agent() {
        Some(a) => a.thread_root(name, true),
        None => ROOT,
    }
}

unsafe extern "C" fn on_vm_init(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, _thread: jthread) {
    guard((), || {
        if let Some(a) = agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.vm_init(unsafe { Jni::from_raw(jni) });
        }
    })
}

unsafe extern "C" fn on_vm_death(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv) {
    guard((), || {
        if let Some(a) = agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.vm_death(unsafe { Jni::from_raw(jni) });
        }
    })
}

unsafe extern "C" fn on_thread_start(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    guard((), || {
        // SAFETY: the JVM passes the calling thread's JNIEnv.
        let jni = unsafe { Jni::from_raw(jni) };
        if let Some(a) = agent() {
            a.thread_started(jni, thread);
        }
        if let Some(e) = RewritingEngine::get() {
            e.thread_started(jni);
        }
    })
}

unsafe extern "C" fn on_thread_end(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, _thread: jthread) {
    guard((), || {
        if let Some(s) = Sampler::get() {
            s.unregister(gettid());
        }
        on_rewritten_thread_end(jni);
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
    guard((), || on_rewritten_thread_end(jni))
}

/// A thread ends: exact mode merges its tree (while the session runs); bytecode mode releases its block
/// (whether the session runs or not: the block lives as long as its thread).
fn on_rewritten_thread_end(jni: *mut JNIEnv) {
    if let Some(e) = RewritingEngine::get().filter(|e| e.is_active() || e.mode() == Mode::Bytecode) {
        // SAFETY: the JVM passes the calling thread's JNIEnv.
        e.thread_ended(unsafe { Jni::from_raw(jni) });
    }
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

unsafe extern "C" fn on_class_load(_jvmti: *mut jvmtiEnv, _jni: *mut JNIEnv, _thread: jthread, _klass: jclass) {}

unsafe extern "C" fn on_class_prepare(jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, _thread: jthread, klass: jclass) {
    guard((), || {
        if let Some(e) = RewritingEngine::get() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            e.class_prepared(unsafe { Jni::from_raw(jni) }, klass);
            return;
        }
        match agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            Some(a) => a.class_prepared(unsafe { Jni::from_raw(jni) }, klass),
            None => {
                // SAFETY: the JVM passes its JVMTI environment.
                drop(unsafe { Jvmti::from_raw(jvmti) }.class_methods(klass));
            }
        }
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
