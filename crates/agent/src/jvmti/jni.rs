//! JNI: a thin wrapper of the calling thread's environment.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::bindings::*;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

/// A Java method called through JNI threw (the exception was cleared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JavaException;

/// A JNI environment: valid only on the thread it belongs to, so it is neither `Send` nor `Sync`.
#[derive(Clone, Copy)]
pub struct Jni(pub(super) *mut JNIEnv);

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

    /// A new object of `class`, no constructor run (null on failure, the exception cleared).
    pub fn alloc_object(self, class: jclass) -> jobject {
        let o = jni!(self, AllocObject, class);
        if o.is_null() {
            self.clear_exception();
        }
        o
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

    /// The id of static field `name` of type `sig`, if it exists.
    pub fn static_field_id(self, class: jclass, name: &str, sig: &str) -> Option<jfieldID> {
        let (n, s) = (CString::new(name).ok()?, CString::new(sig).ok()?);
        let id = jni!(self, GetStaticFieldID, class, n.as_ptr(), s.as_ptr());
        if id.is_null() {
            self.clear_exception();
            return None;
        }
        Some(id)
    }

    /// A static reference field's value (a new local reference, or null).
    pub fn static_object_field(self, class: jclass, field: jfieldID) -> jobject {
        jni!(self, GetStaticObjectField, class, field)
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

    /// Whether an exception is pending on this thread (left as it is).
    pub fn exception_pending(self) -> bool {
        jni!(self, ExceptionCheck) != 0
    }

    /// A weak global reference to `obj` (null when the JVM is out of memory: the OutOfMemoryError it
    /// raises is cleared, the caller did not ask for it).
    pub fn new_weak_global_ref(self, obj: jobject) -> jweak {
        let w = jni!(self, NewWeakGlobalRef, obj);
        if w.is_null() {
            self.clear_exception();
        }
        w
    }

    /// Whether the object a weak reference pointed to has been collected.
    pub fn is_collected(self, weak: jweak) -> bool {
        self.is_same_object(weak, ptr::null_mut())
    }

    pub fn delete_weak_global_ref(self, weak: jweak) {
        if !weak.is_null() {
            jni!(self, DeleteWeakGlobalRef, weak);
        }
    }

    pub fn new_global_ref(self, obj: jobject) -> jobject {
        jni!(self, NewGlobalRef, obj)
    }

    /// Deletes a global reference made by [`Jni::new_global_ref`] (on any thread).
    pub fn delete_global_ref(self, obj: jobject) {
        if !obj.is_null() {
            jni!(self, DeleteGlobalRef, obj)
        }
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
