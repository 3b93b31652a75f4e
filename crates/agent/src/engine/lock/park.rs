//! Timing `java.util.concurrent`'s parks: LockSupport's calls to `Unsafe.park` go through the Java helper
//! `kprof.runtime.Lk` ([`kprof_classfile::transform::park`] rewrites them in place), which measures each park
//! with `System.nanoTime` and calls [`waited`] for those that reach the threshold.
//!
//! Why this way: `Unsafe.park` is a native method of the JDK's own, bound before any agent can attach, so
//! re-binding it (NativeMethodBind) works only for an agent loaded with the JVM; LockSupport is the one
//! class every `java.util.concurrent` synchronizer parks through (the few JDK 25 classes that call
//! `Unsafe.park` directly are idle pool workers and back-off sleeps, not lock waits), and a class can be
//! retransformed at any time. The park call keeps its receiver and arguments and nothing is caught, so
//! interrupts, timeouts and spurious wakeups behave as before.
//!
//! The class-file hook of the engine's JVMTI environment rewrites LockSupport while a session runs: when it
//! loads, and when it is retransformed (the engine retransforms it when a session starts, and back when it
//! stops; the rewriting engines' retransformations pass through this hook too, so their rewrite and this
//! one compose). The hook is on only while a session runs.

use super::LockEngine;
use crate::engine::rewriting::{boot_runtime, runtime_module};
use crate::frame::{self, FrameId};
use crate::guard::guard;
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti};
use kprof_classfile::transform::park::{bracket_parks, HELPER_DESCRIPTOR, LOCK_SUPPORT};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

const HELPER: &str = "kprof/runtime/Lk";
const WAITED: (&str, &str) = ("waited", "(JLjava/lang/Object;)V");

/// Parks shorter than the threshold, counted by the helper (it adds to this address with `Unsafe`).
static SKIPPED: AtomicU64 = AtomicU64::new(0);
/// Parks on a condition at the threshold, not recorded (without `conditions=on`), counted the same way.
static CONDITION_WAITS: AtomicU64 = AtomicU64::new(0);

/// The helper class and its methods (global reference and ids, as integers: valid on every thread).
struct Helper {
    class: usize,
    enable: usize,
    disable: usize,
    /// The helper's own frames (`park`, `record`, `waited`), left out of the stacks it records.
    frames: [usize; 3],
}

/// The park half of the lock engine.
#[derive(Default)]
pub(super) struct Parks {
    helper: OnceLock<Helper>,
    /// The hook rewrites LockSupport.
    bracketing: AtomicBool,
    /// Park calls redirected in the last rewrite of LockSupport.
    bracketed: AtomicU64,
    unnamed: OnceLock<FrameId>,
}

impl Parks {
    /// The label of a park without a blocker.
    pub(super) fn unnamed(&self) -> FrameId {
        *self.unnamed.get_or_init(|| frame::label("[park]"))
    }

    pub(super) fn skipped(&self) -> u64 {
        SKIPPED.load(Ordering::Relaxed)
    }

    pub(super) fn condition_waits(&self) -> u64 {
        CONDITION_WAITS.load(Ordering::Relaxed)
    }

    pub(super) fn bracketed(&self) -> u64 {
        self.bracketed.load(Ordering::Relaxed)
    }

    fn helper(&self, jni: Jni, jvmti: Jvmti) -> Result<&Helper, String> {
        if let Some(h) = self.helper.get() {
            return Ok(h);
        }
        boot_runtime(jvmti)?;
        let module = runtime_module(jni, jvmti)?;
        // LockSupport's module must read the helper's (an unnamed module reads every module already).
        let object = jni.find_class("java/lang/Object").ok_or("java.lang.Object not found")?;
        let base = jni.module_of(object);
        jni.delete_local_ref(object);
        let reads = jvmti.add_module_reads(base, module);
        jni.delete_local_ref(base);
        reads.map_err(|e| format!("AddModuleReads(java.base, kprof runtime): {e}"))?;
        let local = jni.find_class(HELPER).ok_or(format!("the runtime class {HELPER} cannot be loaded"))?;
        let class = jni.new_global_ref(local) as jclass;
        jni.delete_local_ref(local);
        jni.register_natives(class, &[(WAITED.0, WAITED.1, waited as *mut c_void)])?;
        let method = |name: &str, sig: &str| {
            jni.static_method_id(class, name, sig).map(|m| m as usize).ok_or(format!("{HELPER}.{name}{sig} not found"))
        };
        let helper = Helper {
            class: class as usize,
            enable: method("enable", "(JJJZ)V")?,
            disable: method("disable", "()V")?,
            frames: [method("park", HELPER_DESCRIPTOR)?, method("record", "(J)V")?, method(WAITED.0, WAITED.1)?],
        };
        Ok(self.helper.get_or_init(|| helper))
    }

    /// Makes the helper time parks against `threshold_ns` (recording condition waits too if `conditions`)
    /// and rewrites LockSupport (now if it is loaded, else when it loads).
    pub(super) fn start(&self, jni: Jni, jvmti: Jvmti, threshold_ns: u64, conditions: bool) -> Result<(), String> {
        let helper = self.helper(jni, jvmti)?;
        SKIPPED.store(0, Ordering::Relaxed);
        CONDITION_WAITS.store(0, Ordering::Relaxed);
        let args = [
            jvalue { j: threshold_ns as jlong },
            jvalue { j: SKIPPED.as_ptr() as jlong },
            jvalue { j: CONDITION_WAITS.as_ptr() as jlong },
            jvalue { z: conditions as jboolean },
        ];
        jni.call_static_void(helper.class as jclass, helper.enable as jmethodID, &args)
            .map_err(|_| format!("{HELPER}.enable threw"))?;
        self.bracketing.store(true, Ordering::Release);
        jvmti
            .set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, true)
            .map_err(|e| format!("enabling the class-file load hook: {e}"))?;
        self.retransform(jni, jvmti)
    }

    /// Stops timing; with `restore`, LockSupport gets its own code back.
    pub(super) fn stop(&self, jni: Option<Jni>, jvmti: Jvmti, restore: bool) {
        self.bracketing.store(false, Ordering::Release);
        let _ = jvmti.set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, false);
        // Without a thread attached nothing runs Java code; the engine then ignores what the helper hands it.
        let (Some(helper), Some(jni)) = (self.helper.get(), jni) else { return };
        let _ = jni.call_static_void(helper.class as jclass, helper.disable as jmethodID, &[]);
        if restore {
            let _ = self.retransform(jni, jvmti);
        }
    }

    /// Retransforms LockSupport if it is loaded.
    fn retransform(&self, jni: Jni, jvmti: Jvmti) -> Result<(), String> {
        let classes = jvmti.loaded_classes().map_err(|e| format!("GetLoadedClasses: {e}"))?;
        let wanted = format!("L{LOCK_SUPPORT};");
        let mut found = None;
        for &k in classes.as_slice() {
            if found.is_none() && jvmti.class_signature(k).is_ok_and(|s| s == wanted) {
                found = Some(k);
            } else {
                jni.delete_local_ref(k);
            }
        }
        let Some(k) = found else { return Ok(()) };
        let done = jvmti.retransform_classes(&[k]);
        jni.delete_local_ref(k);
        done.map_err(|e| format!("RetransformClasses(LockSupport): {e}"))
    }

    /// The hook's work: LockSupport with its parks bracketed, or `None`.
    fn transform(&self, name: &str, data: &[u8]) -> Option<Vec<u8>> {
        if name != LOCK_SUPPORT || !self.bracketing.load(Ordering::Acquire) {
            return None;
        }
        let out = bracket_parks(data).ok().flatten();
        self.bracketed.store(out.as_ref().map_or(0, |o| o.calls as u64), Ordering::Relaxed);
        out.map(|o| o.bytes)
    }

    fn is_helper_frame(&self, m: jmethodID) -> bool {
        self.helper.get().is_some_and(|h| h.frames.contains(&(m as usize)))
    }
}

/// `Lk.waited(long nanos, Object blocker)`: a park of `nanos` that reached the threshold.
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv.
unsafe extern "C" fn waited(env: *mut JNIEnv, _class: jclass, nanos: jlong, blocker: jobject) {
    guard((), || {
        let Some(e) = LockEngine::get() else { return };
        // SAFETY: the JVM passes the calling thread's JNIEnv.
        let jni = unsafe { Jni::from_raw(env) };
        e.parked(jni, nanos.max(0) as u64, blocker, &|m| e.park.is_helper_frame(m));
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn on_class_file_load_hook(
    jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _class_being_redefined: jclass,
    loader: jobject,
    name: *const c_char,
    _protection_domain: jobject,
    class_data_len: jint,
    class_data: *const u8,
    new_class_data_len: *mut jint,
    new_class_data: *mut *mut u8,
) {
    guard((), || {
        let Some(engine) = LockEngine::get() else { return };
        // LockSupport is a boot class; every other class is none of the hook's business.
        if !loader.is_null() || name.is_null() || class_data.is_null() || class_data_len <= 0 {
            return;
        }
        if new_class_data.is_null() || new_class_data_len.is_null() {
            return;
        }
        // SAFETY: the JVM passes a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        if name != LOCK_SUPPORT.as_bytes() {
            return;
        }
        // SAFETY: the JVM passes `class_data_len` bytes at `class_data`.
        let data = unsafe { std::slice::from_raw_parts(class_data, class_data_len as usize) };
        let Some(out) = engine.park.transform(LOCK_SUPPORT, data) else { return };
        // SAFETY: the JVM passes its JVMTI environment.
        let jvmti = unsafe { Jvmti::from_raw(jvmti) };
        if let Ok(p) = jvmti.allocate_copy(&out) {
            // SAFETY: the out-pointers are valid for the duration of the callback.
            unsafe {
                *new_class_data_len = out.len() as jint;
                *new_class_data = p;
            }
        }
    })
}
