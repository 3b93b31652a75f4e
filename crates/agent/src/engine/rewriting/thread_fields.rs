//! Per-thread counters as fields of `java.lang.Thread`.
//!
//! Rewritten code needs its thread's state on every invocation (bytecode mode: its counter and reified stack;
//! exact mode: its calling context tree). A lookup keyed by thread
//! id (a hashed table, or ThreadLocal) costs a third of xalan's run time by itself (array bounds and null checks
//! and a compare in every prologue, which the JIT compilers must compile into every method); a field of the
//! thread object costs one load after `Thread.currentThread()`, which the JIT turns into a register read.
//! So when the agent starts with the JVM, a second JVMTI environment, which cannot retransform, adds these
//! fields to `java.lang.Thread` as the boot loader first defines it (in the primordial phase, so it needs the
//! early ClassFileLoadHook). Because that environment cannot retransform, HotSpot keeps its result as the
//! class's original bytes: every later retransformation, kprof's own included, starts from a Thread that has
//! the fields. The fields are primitive or null by default, so code reading them before the runtime is ready
//! reads zeros. On attach the class exists already and cannot gain fields: rewritten code then finds its
//! state through the table instead ([`kprof_classfile::transform::bytecode`]).
//!
//! The same environment gives `java.util.ImmutableCollections` a fixed iteration seed as it is defined
//! ([`seed`]): its class initializer runs long before the agent can rewrite anything else.

use crate::jvmti::bindings::*;
use crate::jvmti::{JavaVm, Jvmti};
use kprof_classfile::transform::seed;
use kprof_classfile::{add_fields, NewField};
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

const ACC_PUBLIC: u16 = 0x0001;
const ACC_TRANSIENT: u16 = 0x0080;
const ACC_SYNTHETIC: u16 = 0x1000;
const FLAGS: u16 = ACC_PUBLIC | ACC_TRANSIENT | ACC_SYNTHETIC;

/// The fields, as the runtime's Java code names them (it is compiled against a stub Thread with the same):
/// bytecode mode's per-thread state, counter, stack depth, stack address and stack capacity (`T.java`), and
/// exact mode's per-thread state (`Ef.java`).
pub const FIELDS: [NewField<'static>; 6] = [
    NewField { access_flags: FLAGS, name: "kprof$t", descriptor: "Lkprof/runtime/T;" },
    NewField { access_flags: FLAGS, name: "kprof$c", descriptor: "I" },
    NewField { access_flags: FLAGS, name: "kprof$sp", descriptor: "I" },
    NewField { access_flags: FLAGS, name: "kprof$st", descriptor: "J" },
    NewField { access_flags: FLAGS, name: "kprof$cap", descriptor: "I" },
    NewField { access_flags: FLAGS, name: "kprof$x", descriptor: "Lkprof/runtime/ExactState;" },
];

/// `java.lang.Thread` was defined with the fields.
static ADDED: AtomicBool = AtomicBool::new(false);
/// The environment that adds them (disposed of, in effect, once Thread is defined: its hook is disabled).
static ENV: std::sync::OnceLock<Jvmti> = std::sync::OnceLock::new();

/// Whether this JVM's `java.lang.Thread` has kprof's fields.
pub fn added() -> bool {
    ADDED.load(Ordering::Acquire)
}

/// Sets up the environment that adds the fields. Call in Agent_OnLoad (the primordial phase). An error leaves
/// Thread as it is: rewritten code then uses the table.
pub fn install(vm: JavaVm) -> Result<(), String> {
    let env = vm.jvmti(JVMTI_VERSION_1_2).ok_or("no second JVMTI environment")?;
    let potential = env.potential_capabilities().map_err(|e| format!("GetPotentialCapabilities: {e}"))?;
    if potential.can_generate_early_class_hook_events() == 0 || potential.can_generate_all_class_hook_events() == 0 {
        return Err("this JVM has no early ClassFileLoadHook".into());
    }
    let mut caps = jvmtiCapabilities::default();
    caps.set_can_generate_early_class_hook_events(1);
    caps.set_can_generate_all_class_hook_events(1);
    env.add_capabilities(&caps).map_err(|e| format!("AddCapabilities: {e}"))?;
    let callbacks = jvmtiEventCallbacks { ClassFileLoadHook: Some(on_class_file_load_hook), ..Default::default() };
    env.set_event_callbacks(&callbacks).map_err(|e| format!("SetEventCallbacks: {e}"))?;
    env.set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, true).map_err(|e| format!("ClassFileLoadHook: {e}"))?;
    let _ = ENV.set(env);
    Ok(())
}

/// Turns the hook off (after VMInit nothing more can gain fields).
pub fn finish() {
    if let Some(env) = ENV.get() {
        let _ = env.set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, false);
    }
}

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
    crate::guard::guard((), || {
        if name.is_null() || !loader.is_null() || !class_being_redefined.is_null() || class_data.is_null() {
            return;
        }
        if class_data_len <= 0 {
            return;
        }
        // SAFETY: the JVM passes a NUL-terminated class name.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        // SAFETY: the JVM passes `class_data_len` bytes at `class_data`.
        let data = unsafe { std::slice::from_raw_parts(class_data, class_data_len as usize) };
        let thread = name == b"java/lang/Thread";
        let out = if thread {
            let mut out = Vec::new();
            add_fields(data, &FIELDS, &mut out).ok().map(|_| out)
        } else if name == seed::CLASS.as_bytes() {
            seed::fix_seed(data)
        } else {
            None
        };
        let Some(out) = out else { return };
        // SAFETY: the JVM passes its JVMTI environment.
        let env = unsafe { Jvmti::from_raw(jvmti) };
        if let Ok(p) = env.allocate_copy(&out) {
            // SAFETY: the out-pointers are valid for the duration of the callback.
            unsafe {
                *new_class_data_len = out.len() as jint;
                *new_class_data = p;
            }
            if thread {
                ADDED.store(true, Ordering::Release);
            }
        }
    })
}
