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
pub mod vmstructs;

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

    pub fn current_thread(self) -> JvmtiResult<jthread> {
        let mut t: jthread = ptr::null_mut();
        check(call!(self, GetCurrentThread, &mut t))?;
        Ok(t)
    }

    /// The current thread's innermost Java frames, innermost first, into `frames`; returns how many
    /// (`frames.len()` when the stack may hold more). No capability needed, no safepoint on the own thread.
    pub fn own_stack_trace(self, frames: &mut [jvmtiFrameInfo]) -> JvmtiResult<usize> {
        let mut n: jint = 0;
        let max = frames.len().min(i32::MAX as usize) as jint;
        check(call!(self, GetStackTrace, ptr::null_mut(), 0, max, frames.as_mut_ptr(), &mut n))?;
        Ok(n.max(0) as usize)
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

    pub fn phase(self) -> JvmtiResult<jvmtiPhase> {
        let mut phase: jvmtiPhase = 0;
        check(call!(self, GetPhase, &mut phase))?;
        Ok(phase)
    }
}

/// A Java method called through JNI threw (the exception was cleared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JavaException;

/// A JNI environment: valid only on the thread it belongs to, so it is neither `Send` nor `Sync`.
#[derive(Clone, Copy)]
pub struct Jni(*mut JNIEnv);

macro_rules! jni {
    ($env:expr, $f:ident $(, $arg:expr)*) => {{
        let env = $env.0;
        // SAFETY (for every use): `env` is the current thread's JNIEnv (the type is !Send), and every JNI
        // table entry is present.
        unsafe { ((**env).$f.expect(concat!("JNI ", stringify!($f))))(env $(, $arg)*) }
    }};
}

impl Jni {
    /// # Safety
    /// `env` must be the JNIEnv of the calling thread.
    pub unsafe fn from_raw(env: *mut JNIEnv) -> Jni {
        Jni(env)
    }

    pub fn raw(self) -> *mut JNIEnv {
        self.0
    }

    pub fn delete_local_ref(self, obj: jobject) {
        if !obj.is_null() {
            jni!(self, DeleteLocalRef, obj);
        }
    }

    /// Clears a pending exception, if any; returns whether there was one.
    pub fn clear_exception(self) -> bool {
        let pending = jni!(self, ExceptionCheck) != 0;
        if pending {
            jni!(self, ExceptionClear);
        }
        pending
    }

    pub fn find_class(self, name: &str) -> Option<jclass> {
        let cname = CString::new(name).ok()?;
        let k = jni!(self, FindClass, cname.as_ptr());
        if k.is_null() {
            self.clear_exception();
            return None;
        }
        Some(k)
    }

    pub fn object_class(self, obj: jobject) -> jclass {
        jni!(self, GetObjectClass, obj)
    }

    /// The id of instance field `name` of type `sig`, if it exists.
    pub fn field_id(self, class: jclass, name: &str, sig: &str) -> Option<jfieldID> {
        let (n, s) = (CString::new(name).ok()?, CString::new(sig).ok()?);
        let id = jni!(self, GetFieldID, class, n.as_ptr(), s.as_ptr());
        if id.is_null() {
            self.clear_exception();
            return None;
        }
        Some(id)
    }

    pub fn long_field(self, obj: jobject, field: jfieldID) -> i64 {
        jni!(self, GetLongField, obj, field)
    }

    /// A reference field's value (a new local reference, or null).
    pub fn object_field(self, obj: jobject, field: jfieldID) -> jobject {
        jni!(self, GetObjectField, obj, field)
    }

    /// The id of static method `name` with descriptor `sig`.
    pub fn static_method_id(self, class: jclass, name: &str, sig: &str) -> Option<jmethodID> {
        let (n, s) = (CString::new(name).ok()?, CString::new(sig).ok()?);
        let id = jni!(self, GetStaticMethodID, class, n.as_ptr(), s.as_ptr());
        if id.is_null() {
            self.clear_exception();
            return None;
        }
        Some(id)
    }

    /// Calls a static void method; a Java exception it throws is cleared and reported as `Err`.
    pub fn call_static_void(self, class: jclass, method: jmethodID, args: &[jvalue]) -> Result<(), JavaException> {
        jni!(self, CallStaticVoidMethodA, class, method, args.as_ptr());
        if self.clear_exception() {
            Err(JavaException)
        } else {
            Ok(())
        }
    }

    /// Calls a static method returning an object (a local reference, or null when it threw).
    pub fn call_static_object(self, class: jclass, method: jmethodID, args: &[jvalue]) -> jobject {
        let v = jni!(self, CallStaticObjectMethodA, class, method, args.as_ptr());
        if self.clear_exception() {
            return ptr::null_mut();
        }
        v
    }

    /// Calls a static long method; a Java exception it throws is cleared and reported as `Err`.
    pub fn call_static_long(self, class: jclass, method: jmethodID, args: &[jvalue]) -> Result<i64, JavaException> {
        let v = jni!(self, CallStaticLongMethodA, class, method, args.as_ptr());
        if self.clear_exception() {
            Err(JavaException)
        } else {
            Ok(v)
        }
    }

    /// Registers native method implementations: (name, descriptor, function pointer).
    pub fn register_natives(self, class: jclass, methods: &[(&str, &str, *mut c_void)]) -> Result<(), String> {
        let names: Vec<(CString, CString)> = methods
            .iter()
            .map(|(n, s, _)| (CString::new(*n).unwrap_or_default(), CString::new(*s).unwrap_or_default()))
            .collect();
        let table: Vec<JNINativeMethod> = names
            .iter()
            .zip(methods)
            .map(|((n, s), (_, _, f))| JNINativeMethod {
                name: n.as_ptr() as *mut c_char,
                signature: s.as_ptr() as *mut c_char,
                fnPtr: *f,
            })
            .collect();
        let rc = jni!(self, RegisterNatives, class, table.as_ptr(), table.len() as jint);
        if rc != 0 || self.clear_exception() {
            return Err(format!("RegisterNatives failed ({rc})"));
        }
        Ok(())
    }

    /// The module of a class (JNI 9+).
    pub fn module_of(self, class: jclass) -> jobject {
        jni!(self, GetModule, class)
    }

    pub fn is_same_object(self, a: jobject, b: jobject) -> bool {
        jni!(self, IsSameObject, a, b) != 0
    }

    pub fn new_global_ref(self, obj: jobject) -> jobject {
        jni!(self, NewGlobalRef, obj)
    }

    /// The contents of a Java string (modified UTF-8 read as lossy UTF-8).
    pub fn string(self, s: jstring) -> String {
        if s.is_null() {
            return String::new();
        }
        let chars = jni!(self, GetStringUTFChars, s, ptr::null_mut());
        if chars.is_null() {
            self.clear_exception();
            return String::new();
        }
        // SAFETY: GetStringUTFChars returned a NUL-terminated buffer that we release right after copying.
        let out = unsafe { CStr::from_ptr(chars) }.to_string_lossy().into_owned();
        jni!(self, ReleaseStringUTFChars, s, chars);
        out
    }

    /// Runs `f` on the elements of a Java `int[]` (writable) and a `long[]` (read-only), pinned without
    /// copying where the JVM allows (`GetPrimitiveArrayCritical`). `f` must not call JNI. `None` if the
    /// JVM could not pin them.
    pub fn with_int_long_arrays<R>(
        self,
        ints: jintArray,
        longs: jlongArray,
        f: impl FnOnce(&mut [i32], &[i64]) -> R,
    ) -> Option<R> {
        let ni = jni!(self, GetArrayLength, ints).max(0) as usize;
        let nl = jni!(self, GetArrayLength, longs).max(0) as usize;
        let pi = jni!(self, GetPrimitiveArrayCritical, ints, ptr::null_mut());
        if pi.is_null() {
            self.clear_exception();
            return None;
        }
        let pl = jni!(self, GetPrimitiveArrayCritical, longs, ptr::null_mut());
        if pl.is_null() {
            jni!(self, ReleasePrimitiveArrayCritical, ints, pi, JNI_ABORT as jint);
            self.clear_exception();
            return None;
        }
        // SAFETY: both pointers are pinned primitive arrays of the lengths read above; they are distinct
        // Java objects of different element types, so the slices do not alias.
        let r = unsafe {
            f(std::slice::from_raw_parts_mut(pi as *mut i32, ni), std::slice::from_raw_parts(pl as *const i64, nl))
        };
        jni!(self, ReleasePrimitiveArrayCritical, longs, pl, JNI_ABORT as jint);
        jni!(self, ReleasePrimitiveArrayCritical, ints, pi, 0);
        Some(r)
    }

    /// A copy of a Java `int[]`'s elements (empty for null).
    pub fn int_array(self, a: jintArray) -> Vec<i32> {
        if a.is_null() {
            return Vec::new();
        }
        let n = jni!(self, GetArrayLength, a).max(0) as usize;
        let mut v = vec![0i32; n];
        jni!(self, GetIntArrayRegion, a, 0, n as jsize, v.as_mut_ptr());
        self.clear_exception();
        v
    }

    /// A copy of a Java `long[]`'s elements (empty for null).
    pub fn long_array(self, a: jlongArray) -> Vec<i64> {
        if a.is_null() {
            return Vec::new();
        }
        let n = jni!(self, GetArrayLength, a).max(0) as usize;
        let mut v = vec![0i64; n];
        jni!(self, GetLongArrayRegion, a, 0, n as jsize, v.as_mut_ptr());
        self.clear_exception();
        v
    }

    /// Writes `values` into a Java `int[]` from index 0 (as many as fit).
    pub fn set_int_array(self, a: jintArray, values: &[i32]) {
        if a.is_null() {
            return;
        }
        let n = (jni!(self, GetArrayLength, a).max(0) as usize).min(values.len());
        jni!(self, SetIntArrayRegion, a, 0, n as jsize, values.as_ptr());
        self.clear_exception();
    }
}
