//! The agent: JVMTI entry points and the callbacks of its own JVMTI environment.
//!
//! The agent is created once (`Agent_OnLoad` or `Agent_OnAttach`) and leaked: callbacks, signal handlers
//! and rewritten code may run until the process is gone. It keeps the calling context tree, the names of
//! threads and frames, and the profiling session ([`session`]): one run with one set of options and its
//! list of engines. It writes profiles ([`write`]) and serves `kprof` commands ([`control`]). It knows the
//! engines only through [`Engine`](crate::engine::Engine).
//!
//! Every callback runs inside [`guard`], so a bug in kprof becomes a message on stderr, never an unwind
//! into the JVM.

mod control;
pub mod resolve;
mod session;
mod write;

use crate::cct::{Cct, NodeId, ROOT};
use crate::engine::{self, Engine, Host, Phase};
use crate::frame::FrameId;
use crate::guard::{guard, print_line, print_out, say};
use crate::jvmti::bindings::*;
use crate::jvmti::{JavaVm, Jni, Jvmti};
use kprof_protocol::control::ATTACHED_BEFORE_LIVE;
use kprof_protocol::options::{expand_path, help_text, EngineKind, Options};
use resolve::{NameSources, Resolver};
use session::Session;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock};

/// Everything the agent knows.
pub struct Agent {
    vm: JavaVm,
    jvmti: Jvmti,
    cct: &'static Cct,
    session: Mutex<Session>,
    /// The engines of the running session: what thread callbacks call, read without the session lock
    /// (which a write can hold for long).
    running: RwLock<Vec<&'static dyn Engine>>,
    /// Every engine created so far, by kind (thread ends go to all: an engine may keep per-thread
    /// memory past its session).
    created: [OnceLock<&'static dyn Engine>; EngineKind::ALL.len()],
    /// Thread names by thread number (roots with `threads=on`).
    thread_names: Mutex<Vec<String>>,
    /// The session gives each thread a root of its own (`threads=on`); read without the session lock,
    /// which engines starting under it would otherwise need.
    per_thread: AtomicBool,
    /// The session's engines name methods by jmethodID (sampling engines): methods of classes that can
    /// be unloaded are named when they are prepared. Read at ClassPrepare, which can come while the
    /// session lock is held (an engine starting loads classes).
    names_jmethods: AtomicBool,
    resolver: Mutex<Resolver>,
    /// Serialises writing the profile.
    write_lock: Mutex<()>,
    /// The VM is dying: no more sessions, dumps or commands.
    dead: AtomicBool,
    /// The profile of the VM's exit has been written: no write may follow it.
    final_written: AtomicBool,
    control_started: AtomicBool,
    /// The control socket's path, removed at VM death (the control thread does not outlive the VM).
    control_path: OnceLock<std::path::PathBuf>,
    /// Global references to the system and platform class loaders: classes of other loaders can be
    /// unloaded, so their methods are named as soon as they are prepared.
    permanent_loaders: OnceLock<Vec<usize>>,
}

static AGENT: OnceLock<&'static Agent> = OnceLock::new();

fn agent() -> Option<&'static Agent> {
    AGENT.get().copied()
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
                print_line(&format!("{line}\n"));
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
            Err(AttachRefusal::NotLive) => {
                print_line(
                    "kprof: the JVM is still starting (not in its live phase, so no JVMTI environment yet); attach \
                     again in a moment\n",
                );
                ATTACHED_BEFORE_LIVE
            }
            Err(AttachRefusal::Other(line)) => {
                print_line(&format!("{line}\n"));
                JNI_ERR
            }
        }
    })
}

fn parse_options(text: Option<&str>) -> Result<Options, String> {
    let options = Options::parse(text).map_err(|e| e.0)?;
    if options.help {
        print_out(&help_text());
    }
    Ok(options)
}

fn on_load(vm: JavaVm, text: Option<&str>) -> Result<(), String> {
    let mut options = parse_options(text)?;
    engine::resolve_options(&mut options, Phase::OnLoad);
    if options.help {
        std::process::exit(0);
    }
    for f in &options.files {
        if let Err(e) = write::check_writable(&expand_path(&f.path, std::process::id(), 0, 1)) {
            say(&format!(
                "warning: cannot write file={} ({e}); the application runs on, the profile will not be saved there",
                f.path
            ));
        }
    }
    let jvmti = vm.jvmti(JVMTI_VERSION_1_2).ok_or("kprof: cannot get a JVMTI environment (JVMTI 1.2+ needed)")?;
    let agent = create_agent(vm, jvmti, &options)?;
    // Engines that need the start-up phase (early class hooks, native method prefixes) are made now.
    for &kind in &options.engines {
        agent.engine(kind, &options, Phase::OnLoad).map_err(|e| format!("kprof: mode={}: {e}", kind.name()))?;
    }
    *lock(&agent.session) = Session::pending(options);
    Ok(())
}

/// Why `Agent_OnAttach` did not start a session.
enum AttachRefusal {
    /// The JVM is not live yet: JVMTI gives no environment before (JDK 17's attach listener, started by
    /// an early SIGQUIT, loads agents then; later JDKs refuse the load themselves).
    NotLive,
    Other(String),
}

impl From<String> for AttachRefusal {
    fn from(line: String) -> Self {
        AttachRefusal::Other(line)
    }
}

fn on_attach(vm: JavaVm, text: Option<&str>) -> Result<String, AttachRefusal> {
    let options = parse_options(text)?;
    if options.help {
        return Ok("help printed".into());
    }
    let jni = vm.jni().ok_or_else(|| "kprof: the attach thread has no JNI environment".to_string())?;
    let agent = match AGENT.get() {
        Some(a) => a,
        None => create_agent(vm, vm.jvmti(JVMTI_VERSION_1_2).ok_or(AttachRefusal::NotLive)?, &options)?,
    };
    let result = agent.start_session(jni, options, true);
    if agent.session_control() {
        agent.spawn_control_thread();
    }
    Ok(result?)
}

/// Creates the agent with its JVMTI environment and events.
fn create_agent(vm: JavaVm, jvmti: Jvmti, options: &Options) -> Result<&'static Agent, String> {
    let cct_bytes = options.cct_mb() as usize * 1024 * 1024;
    let cct: &'static Cct =
        Box::leak(Box::new(Cct::with_bytes(cct_bytes).ok_or_else(|| {
            format!("kprof: bad option 'cct_mb={}': cannot reserve that much memory", options.cct_mb())
        })?));
    let agent: &'static Agent = Box::leak(Box::new(Agent {
        vm,
        jvmti,
        cct,
        session: Mutex::new(Session::pending(options.clone())),
        running: RwLock::new(Vec::new()),
        created: Default::default(),
        thread_names: Mutex::new(Vec::new()),
        per_thread: AtomicBool::new(options.threads),
        names_jmethods: AtomicBool::new(false),
        resolver: Mutex::new(Resolver::default()),
        write_lock: Mutex::new(()),
        dead: AtomicBool::new(false),
        final_written: AtomicBool::new(false),
        control_started: AtomicBool::new(false),
        control_path: OnceLock::new(),
        permanent_loaders: OnceLock::new(),
    }));
    AGENT.set(agent).map_err(|_| "kprof: loaded twice")?;
    agent.setup_events()?;
    Ok(agent)
}

/// Events that only a running session needs; switched off when it stops so that a stopped agent costs
/// the application nothing.
const SESSION_EVENTS: [jvmtiEvent; 3] = [JVMTI_EVENT_THREAD_START, JVMTI_EVENT_THREAD_END, JVMTI_EVENT_CLASS_PREPARE];

impl Agent {
    fn setup_events(&self) -> Result<(), String> {
        let callbacks = jvmtiEventCallbacks {
            VMInit: Some(on_vm_init),
            VMDeath: Some(on_vm_death),
            ThreadStart: Some(on_thread_start),
            ThreadEnd: Some(on_thread_end),
            ClassPrepare: Some(on_class_prepare),
            ..Default::default()
        };
        self.jvmti.set_event_callbacks(&callbacks).map_err(|e| format!("kprof: SetEventCallbacks: {e}"))?;
        for e in [JVMTI_EVENT_VM_INIT, JVMTI_EVENT_VM_DEATH] {
            self.jvmti.set_event(e, true).map_err(|err| format!("kprof: enabling JVMTI event {e}: {err}"))?;
        }
        self.set_session_events(true);
        Ok(())
    }

    fn set_session_events(&self, on: bool) {
        for e in SESSION_EVENTS {
            let _ = self.jvmti.set_event(e, on);
        }
    }

    /// The engine of `kind`, created on first use.
    fn engine(&'static self, kind: EngineKind, options: &Options, phase: Phase) -> Result<&'static dyn Engine, String> {
        let index = EngineKind::ALL.iter().position(|&k| k == kind).expect("every kind is listed");
        if let Some(e) = self.created[index].get() {
            return Ok(*e);
        }
        let e = engine::create(kind, self, options, phase)?;
        Ok(*self.created[index].get_or_init(|| e))
    }

    fn created_engines(&self) -> impl Iterator<Item = &'static dyn Engine> + '_ {
        self.created.iter().filter_map(|e| e.get().copied())
    }

    fn running_engines(&self) -> Vec<&'static dyn Engine> {
        self.running.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn session_control(&self) -> bool {
        lock(&self.session).options.control
    }

    fn vm_init(&'static self, jni: Jni) {
        let options = lock(&self.session).options.clone();
        // Output paths were checked (and warned about) at load: the program runs whatever they are.
        if let Err(e) = self.start_session(jni, options, false) {
            say(&e);
        }
        if self.session_control() {
            self.spawn_control_thread();
        }
    }

    fn vm_death(&self, jni: Jni) {
        self.dead.store(true, Ordering::Release);
        if let Some(p) = self.control_path.get() {
            let _ = std::fs::remove_file(p);
        }
        let _ = self.stop_session(Some(jni), false);
    }

    /// The node a thread's contexts start from: the root, or with `threads=on` a node for the thread.
    fn thread_root(&self, name: &str, per_thread: bool) -> NodeId {
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

    /// A Java thread starts, on itself: the running engines hear of it with its root.
    fn thread_started(&self, jni: Jni, thread: jthread) {
        let engines = self.running_engines();
        if engines.is_empty() {
            return;
        }
        let name = self.jvmti.thread_name(thread).unwrap_or_default();
        if name.starts_with(engine::OWN_THREAD_PREFIX) {
            return;
        }
        let root = self.thread_root(&name, self.per_thread.load(Ordering::Acquire));
        for e in engines {
            e.thread_start(jni, thread, root);
        }
    }

    fn thread_ended(&self, jni: Jni, thread: jthread) {
        for e in self.created_engines() {
            e.thread_end(jni, thread);
        }
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

    /// ClassPrepare: jmethodIDs for the class's methods (AsyncGetCallTrace and stack traces name methods
    /// by them), and their names at once when the class's loader can be collected: a method whose class
    /// is unloaded before the profile is written would otherwise show as `[unknown_method]`.
    fn class_prepared(&self, jni: Jni, klass: jclass) {
        let Ok(methods) = self.jvmti.class_methods(klass) else { return };
        if self.permanent_loaders.get().is_none() {
            // Before the session starts: the ids are made, the names wait.
            return;
        }
        let Ok(loader) = self.jvmti.class_loader(klass) else { return };
        if loader.is_null() {
            return;
        }
        let permanent =
            self.permanent_loaders.get().is_some_and(|ls| ls.iter().any(|&l| jni.is_same_object(loader, l as jobject)));
        jni.delete_local_ref(loader);
        if permanent || self.dead.load(Ordering::Acquire) || !self.names_jmethods.load(Ordering::Acquire) {
            return;
        }
        let names = lock(&self.thread_names).clone();
        let methods_table = self.created_engines().find_map(|e| e.method_names());
        let sources = NameSources { jvmti: self.jvmti, jni: Some(jni), threads: &names, methods: methods_table };
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

    fn note_once(&self, msg: &str) {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            say(msg);
        }
    }
}

impl Host for Agent {
    fn cct(&self) -> &'static Cct {
        self.cct
    }

    fn vm(&self) -> JavaVm {
        self.vm
    }

    fn thread_root(&self, name: &str) -> NodeId {
        Agent::thread_root(self, name, self.per_thread.load(Ordering::Acquire))
    }

    fn say(&self, line: &str) {
        say(line);
    }

    fn note_once(&self, line: &str) {
        Agent::note_once(self, line);
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
        if let Some(a) = agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.thread_started(unsafe { Jni::from_raw(jni) }, thread);
        }
    })
}

unsafe extern "C" fn on_thread_end(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    guard((), || {
        if let Some(a) = agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.thread_ended(unsafe { Jni::from_raw(jni) }, thread);
        }
    })
}

unsafe extern "C" fn on_class_prepare(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, _thread: jthread, klass: jclass) {
    guard((), || {
        if let Some(a) = agent() {
            // SAFETY: the JVM passes the calling thread's JNIEnv.
            a.class_prepared(unsafe { Jni::from_raw(jni) }, klass);
        }
    })
}
