//! JVMTI and JNI: the bindgen-generated declarations ([`bindings`]) and thin, commented wrappers.
//!
//! Every wrapper calls one function-table entry. They are sound as long as the environment pointers they
//! hold came from the JVM (`GetEnv`, an event callback) and, for JNI, are used on the thread they belong
//! to; the types below make those the only ways to build them. Object and method handles (`jclass`,
//! `jthread`, `jmethodID`) are opaque: kprof passes on only handles the JVM gave it, and the JVM checks
//! them, hence the `not_unsafe_ptr_arg_deref` allowance.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

#[allow(clippy::all)]
#[rustfmt::skip]
pub mod bindings;
mod jni;
pub mod vmstructs;

pub use jni::{JavaException, Jni};

use bindings::*;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

/// A JVMTI error code, with its name for messages.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct JvmtiError(pub jvmtiError);

impl std::fmt::Display for JvmtiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            JVMTI_ERROR_INVALID_THREAD => "INVALID_THREAD",
            JVMTI_ERROR_INVALID_METHODID => "INVALID_METHODID",
            JVMTI_ERROR_INVALID_CLASS => "INVALID_CLASS",
            JVMTI_ERROR_CLASS_NOT_PREPARED => "CLASS_NOT_PREPARED",
            JVMTI_ERROR_WRONG_PHASE => "WRONG_PHASE",
            JVMTI_ERROR_NOT_AVAILABLE => "NOT_AVAILABLE",
            JVMTI_ERROR_MUST_POSSESS_CAPABILITY => "MUST_POSSESS_CAPABILITY",
            JVMTI_ERROR_UNMODIFIABLE_CLASS => "UNMODIFIABLE_CLASS",
            JVMTI_ERROR_OUT_OF_MEMORY => "OUT_OF_MEMORY",
            JVMTI_ERROR_ABSENT_INFORMATION => "ABSENT_INFORMATION",
            JVMTI_ERROR_THREAD_NOT_ALIVE => "THREAD_NOT_ALIVE",
            _ => "",
        };
        if name.is_empty() {
            write!(f, "JVMTI error {}", self.0)
        } else {
            write!(f, "JVMTI_ERROR_{name}")
        }
    }
}

pub type JvmtiResult<T> = Result<T, JvmtiError>;

fn check(err: jvmtiError) -> JvmtiResult<()> {
    if err == JVMTI_ERROR_NONE {
        Ok(())
    } else {
        Err(JvmtiError(err))
    }
}

/// The JavaVM. Usable from any thread.
#[derive(Clone, Copy)]
pub struct JavaVm(*mut JavaVM);

// SAFETY: a JavaVM pointer is process-global and the invocation interface is thread-safe.
unsafe impl Send for JavaVm {}
// SAFETY: see above.
unsafe impl Sync for JavaVm {}

impl JavaVm {
    /// # Safety
    /// `vm` must be the pointer the JVM passed to `Agent_OnLoad`/`Agent_OnAttach`.
    pub unsafe fn from_raw(vm: *mut JavaVM) -> JavaVm {
        JavaVm(vm)
    }

    pub fn raw(self) -> *mut JavaVM {
        self.0
    }

    /// A JVMTI environment of `version` (e.g. `JVMTI_VERSION_1_2`).
    pub fn jvmti(self, version: u32) -> Option<Jvmti> {
        let mut env: *mut c_void = ptr::null_mut();
        // SAFETY: `self.0` is the JVM's JavaVM and GetEnv is always present in its function table.
        let rc = unsafe { ((**self.0).GetEnv?)(self.0, &mut env, version as jint) };
        (rc == JNI_OK as jint && !env.is_null()).then_some(Jvmti(env as *mut jvmtiEnv))
    }

    /// The JNI environment of the calling thread, if it is attached.
    pub fn jni(self) -> Option<Jni> {
        let mut env: *mut c_void = ptr::null_mut();
        // SAFETY: as in `jvmti`. Never called from a signal handler.
        let rc = unsafe { ((**self.0).GetEnv?)(self.0, &mut env, JNI_VERSION_1_8 as jint) };
        (rc == JNI_OK as jint && !env.is_null()).then_some(Jni(env as *mut JNIEnv))
    }

    /// Attaches the calling (native) thread as a daemon thread named `name`.
    pub fn attach_daemon(self, name: &str) -> Option<Jni> {
        let cname = CString::new(name).ok()?;
        let mut args = JavaVMAttachArgs {
            version: JNI_VERSION_1_8 as jint,
            name: cname.as_ptr() as *mut c_char,
            group: ptr::null_mut(),
        };
        let mut env: *mut c_void = ptr::null_mut();
        // SAFETY: valid JavaVM; `args` and the name outlive the call.
        let rc =
            unsafe { ((**self.0).AttachCurrentThreadAsDaemon?)(self.0, &mut env, &mut args as *mut _ as *mut c_void) };
        (rc == JNI_OK as jint && !env.is_null()).then_some(Jni(env as *mut JNIEnv))
    }

    /// Detaches the calling thread (attached with [`JavaVm::attach_daemon`]).
    pub fn detach(self) {
        // SAFETY: valid JavaVM; detaching an attached native thread is always allowed.
        unsafe {
            if let Some(f) = (**self.0).DetachCurrentThread {
                f(self.0);
            }
        }
    }
}

/// A JVMTI environment. JVMTI functions may be called from any thread (in the phases they allow).
#[derive(Clone, Copy)]
pub struct Jvmti(*mut jvmtiEnv);

// SAFETY: JVMTI environments are valid on every thread.
unsafe impl Send for Jvmti {}
// SAFETY: see above.
unsafe impl Sync for Jvmti {}

/// Memory that JVMTI allocated and the agent must `Deallocate`; frees itself on drop.
pub struct JvmtiBuf<T> {
    env: Jvmti,
    ptr: *mut T,
    len: usize,
}

impl<T> JvmtiBuf<T> {
    pub fn as_slice(&self) -> &[T] {
        if self.ptr.is_null() || self.len == 0 {
            return &[];
        }
        // SAFETY: JVMTI returned `len` initialised elements at `ptr`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> Drop for JvmtiBuf<T> {
    fn drop(&mut self) {
        self.env.deallocate(self.ptr as *mut u8);
    }
}

macro_rules! call {
    ($env:expr, $f:ident $(, $arg:expr)*) => {{
        let env = $env.0;
        // SAFETY (for every use): `env` is a JVMTI environment from the JVM, whose function table has
        // every entry of the version we requested; arguments are valid for the duration of the call.
        match unsafe { (**env).$f } {
            Some(f) => unsafe { f(env $(, $arg)*) },
            None => JVMTI_ERROR_NOT_AVAILABLE,
        }
    }};
}

impl Jvmti {
    /// # Safety
    /// `env` must be a JVMTI environment pointer obtained from the JVM.
    pub unsafe fn from_raw(env: *mut jvmtiEnv) -> Jvmti {
        Jvmti(env)
    }

    pub fn raw(self) -> *mut jvmtiEnv {
        self.0
    }

    pub fn potential_capabilities(self) -> JvmtiResult<jvmtiCapabilities> {
        let mut caps = jvmtiCapabilities::default();
        check(call!(self, GetPotentialCapabilities, &mut caps))?;
        Ok(caps)
    }

    pub fn add_capabilities(self, caps: &jvmtiCapabilities) -> JvmtiResult<()> {
        check(call!(self, AddCapabilities, caps))
    }

    pub fn set_event_callbacks(self, callbacks: &jvmtiEventCallbacks) -> JvmtiResult<()> {
        check(call!(self, SetEventCallbacks, callbacks, std::mem::size_of::<jvmtiEventCallbacks>() as jint))
    }

    /// Enables (`on`) or disables an event for all threads.
    pub fn set_event(self, event: jvmtiEvent, on: bool) -> JvmtiResult<()> {
        let mode = if on { JVMTI_ENABLE } else { JVMTI_DISABLE };
        check(call!(self, SetEventNotificationMode, mode, event, ptr::null_mut::<_jobject>()))
    }

    /// Sends the events of `event` for what already exists (compiled methods, generated code), on the
    /// calling thread, as if it had just been made.
    pub fn generate_events(self, event: jvmtiEvent) -> JvmtiResult<()> {
        check(call!(self, GenerateEvents, event))
    }

    pub fn deallocate(self, p: *mut u8) {
        if !p.is_null() {
            call!(self, Deallocate, p);
        }
    }

    fn take_string(self, p: *mut c_char) -> String {
        if p.is_null() {
            return String::new();
        }
        // SAFETY: JVMTI returns NUL-terminated modified UTF-8, which we read as lossy UTF-8.
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        self.deallocate(p as *mut u8);
        s
    }

    pub fn loaded_classes(self) -> JvmtiResult<JvmtiBuf<jclass>> {
        let mut n: jint = 0;
        let mut p: *mut jclass = ptr::null_mut();
        check(call!(self, GetLoadedClasses, &mut n, &mut p))?;
        Ok(JvmtiBuf { env: self, ptr: p, len: n.max(0) as usize })
    }

    /// The class's methods; as a side effect the JVM creates a jmethodID for each (AsyncGetCallTrace
    /// needs them to exist before it runs).
    pub fn class_methods(self, klass: jclass) -> JvmtiResult<JvmtiBuf<jmethodID>> {
        let mut n: jint = 0;
        let mut p: *mut jmethodID = ptr::null_mut();
        check(call!(self, GetClassMethods, klass, &mut n, &mut p))?;
        Ok(JvmtiBuf { env: self, ptr: p, len: n.max(0) as usize })
    }

    /// (name, signature) of a method.
    pub fn method_name(self, m: jmethodID) -> JvmtiResult<(String, String)> {
        let mut name: *mut c_char = ptr::null_mut();
        let mut sig: *mut c_char = ptr::null_mut();
        check(call!(self, GetMethodName, m, &mut name, &mut sig, ptr::null_mut()))?;
        Ok((self.take_string(name), self.take_string(sig)))
    }

    pub fn method_declaring_class(self, m: jmethodID) -> JvmtiResult<jclass> {
        let mut k: jclass = ptr::null_mut();
        check(call!(self, GetMethodDeclaringClass, m, &mut k))?;
        Ok(k)
    }

    pub fn method_modifiers(self, m: jmethodID) -> JvmtiResult<i32> {
        let mut mods: jint = 0;
        check(call!(self, GetMethodModifiers, m, &mut mods))?;
        Ok(mods)
    }

    /// The class's JVM signature (`Ljava/lang/String;`).
    pub fn class_signature(self, k: jclass) -> JvmtiResult<String> {
        let mut sig: *mut c_char = ptr::null_mut();
        check(call!(self, GetClassSignature, k, &mut sig, ptr::null_mut()))?;
        Ok(self.take_string(sig))
    }

    /// The thread's name.
    pub fn thread_name(self, t: jthread) -> JvmtiResult<String> {
        let mut info = jvmtiThreadInfo::default();
        check(call!(self, GetThreadInfo, t, &mut info))?;
        Ok(self.take_string(info.name))
    }

    /// The thread's JVMTI state bits (`JVMTI_THREAD_STATE_*`). Callable from any attached thread.
    pub fn thread_state(self, t: jthread) -> JvmtiResult<u32> {
        let mut state: jint = 0;
        check(call!(self, GetThreadState, t, &mut state))?;
        Ok(state as u32)
    }

    pub fn current_thread(self) -> JvmtiResult<jthread> {
        let mut t: jthread = ptr::null_mut();
        check(call!(self, GetCurrentThread, &mut t))?;
        Ok(t)
    }

    /// The method of the current thread's innermost Java frame (a native method's own frame counts).
    pub fn current_frame_method(self) -> JvmtiResult<jmethodID> {
        let mut m: jmethodID = ptr::null_mut();
        let mut location: jlocation = 0;
        check(call!(self, GetFrameLocation, ptr::null_mut(), 0, &mut m, &mut location))?;
        Ok(m)
    }

    /// A copy of the JNI function table every thread uses now.
    pub fn jni_function_table(self) -> JvmtiResult<JNINativeInterface_> {
        let mut p: *mut JNINativeInterface_ = ptr::null_mut();
        check(call!(self, GetJNIFunctionTable, &mut p))?;
        if p.is_null() {
            return Err(JvmtiError(JVMTI_ERROR_INTERNAL));
        }
        // SAFETY: JVMTI returned a pointer to a complete table it allocated; we copy it and free it.
        let table = unsafe { *p };
        self.deallocate(p as *mut u8);
        Ok(table)
    }

    /// Makes `table` the JNI function table of every thread (the JVM copies it).
    pub fn set_jni_function_table(self, table: &JNINativeInterface_) -> JvmtiResult<()> {
        check(call!(self, SetJNIFunctionTable, table))
    }

    pub fn all_threads(self) -> JvmtiResult<JvmtiBuf<jthread>> {
        let mut n: jint = 0;
        let mut p: *mut jthread = ptr::null_mut();
        check(call!(self, GetAllThreads, &mut n, &mut p))?;
        Ok(JvmtiBuf { env: self, ptr: p, len: n.max(0) as usize })
    }

    pub fn system_property(self, name: &str) -> Option<String> {
        let cname = CString::new(name).ok()?;
        let mut value: *mut c_char = ptr::null_mut();
        check(call!(self, GetSystemProperty, cname.as_ptr(), &mut value)).ok()?;
        Some(self.take_string(value))
    }

    /// Appends a jar (or directory) to the bootstrap class path.
    pub fn add_to_bootstrap_search(self, path: &str) -> JvmtiResult<()> {
        let c = CString::new(path).map_err(|_| JvmtiError(JVMTI_ERROR_ILLEGAL_ARGUMENT))?;
        check(call!(self, AddToBootstrapClassLoaderSearch, c.as_ptr()))
    }

    pub fn is_modifiable_class(self, k: jclass) -> bool {
        let mut b: jboolean = 0;
        check(call!(self, IsModifiableClass, k, &mut b)).is_ok() && b != 0
    }

    pub fn retransform_classes(self, classes: &[jclass]) -> JvmtiResult<()> {
        if classes.is_empty() {
            return Ok(());
        }
        check(call!(self, RetransformClasses, classes.len() as jint, classes.as_ptr()))
    }

    pub fn all_modules(self) -> JvmtiResult<JvmtiBuf<jobject>> {
        let mut n: jint = 0;
        let mut p: *mut jobject = ptr::null_mut();
        check(call!(self, GetAllModules, &mut n, &mut p))?;
        Ok(JvmtiBuf { env: self, ptr: p, len: n.max(0) as usize })
    }

    /// Makes `module` read `to`.
    pub fn add_module_reads(self, module: jobject, to: jobject) -> JvmtiResult<()> {
        check(call!(self, AddModuleReads, module, to))
    }

    /// Exports package `pkg` (dotted name) of `module` to module `to`.
    pub fn add_module_exports(self, module: jobject, pkg: &str, to: jobject) -> JvmtiResult<()> {
        let c = CString::new(pkg).map_err(|_| JvmtiError(JVMTI_ERROR_ILLEGAL_ARGUMENT))?;
        check(call!(self, AddModuleExports, module, c.as_ptr(), to))
    }

    /// Copies `bytes` into memory JVMTI allocated (the form ClassFileLoadHook must return new bytes in).
    pub fn allocate_copy(self, bytes: &[u8]) -> JvmtiResult<*mut u8> {
        let mut p: *mut u8 = ptr::null_mut();
        check(call!(self, Allocate, bytes.len() as jlong, &mut p))?;
        // SAFETY: JVMTI returned `bytes.len()` writable bytes at `p`.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        Ok(p)
    }

    pub fn set_native_method_prefix(self, prefix: &str) -> JvmtiResult<()> {
        let c = CString::new(prefix).map_err(|_| JvmtiError(JVMTI_ERROR_ILLEGAL_ARGUMENT))?;
        check(call!(self, SetNativeMethodPrefix, c.as_ptr()))
    }

    /// The class loader of a class (null for the boot loader).
    pub fn class_loader(self, k: jclass) -> JvmtiResult<jobject> {
        let mut l: jobject = ptr::null_mut();
        check(call!(self, GetClassLoader, k, &mut l))?;
        Ok(l)
    }

    /// The identity hash code of an object.
    pub fn object_hash(self, obj: jobject) -> JvmtiResult<i32> {
        let mut h: jint = 0;
        check(call!(self, GetObjectHashCode, obj, &mut h))?;
        Ok(h)
    }

    /// Sets the mean number of bytes a thread allocates between two SampledObjectAlloc events (0: every
    /// allocation). Process-wide: the JVM has one interval, whatever the environment.
    pub fn set_heap_sampling_interval(self, bytes: i32) -> JvmtiResult<()> {
        check(call!(self, SetHeapSamplingInterval, bytes))
    }

    /// The calling thread's stack, innermost frame first, into `frames` (as many as fit). Returns how many
    /// frames were written (`frames.len()` when the stack may hold more). No capability needed, no
    /// safepoint on the own thread.
    pub fn current_stack_trace(self, frames: &mut [jvmtiFrameInfo]) -> JvmtiResult<usize> {
        let mut count: jint = 0;
        let max = frames.len().min(i32::MAX as usize) as jint;
        check(call!(self, GetStackTrace, ptr::null_mut::<_jobject>(), 0, max, frames.as_mut_ptr(), &mut count))?;
        Ok((count.max(0) as usize).min(frames.len()))
    }

    /// Another thread's stack, innermost frame first, into `frames` (as many as fit); returns how many
    /// frames were written. HotSpot takes it in a handshake, which the calling thread runs by itself when
    /// `thread` is blocked or in native code: the thread is not woken.
    pub fn stack_trace_of(self, thread: jthread, frames: &mut [jvmtiFrameInfo]) -> JvmtiResult<usize> {
        let mut count: jint = 0;
        let max = frames.len().min(i32::MAX as usize) as jint;
        check(call!(self, GetStackTrace, thread, 0, max, frames.as_mut_ptr(), &mut count))?;
        Ok((count.max(0) as usize).min(frames.len()))
    }

    /// This environment's word of thread-local storage of the current thread (a virtual thread's own
    /// while one is mounted); 0 until set.
    pub fn thread_local_word(self) -> JvmtiResult<usize> {
        let mut p: *mut c_void = ptr::null_mut();
        check(call!(self, GetThreadLocalStorage, ptr::null_mut::<_jobject>(), &mut p))?;
        Ok(p as usize)
    }

    /// Sets this environment's word of thread-local storage of the current thread.
    pub fn set_thread_local_word(self, value: usize) -> JvmtiResult<()> {
        check(call!(self, SetThreadLocalStorage, ptr::null_mut::<_jobject>(), value as *const c_void))
    }

    /// A full garbage collection; returns when it is done (finalizers are not run).
    pub fn force_garbage_collection(self) -> JvmtiResult<()> {
        check(call!(self, ForceGarbageCollection))
    }

    pub fn phase(self) -> JvmtiResult<jvmtiPhase> {
        let mut phase: jvmtiPhase = 0;
        check(call!(self, GetPhase, &mut phase))?;
        Ok(phase)
    }
}
