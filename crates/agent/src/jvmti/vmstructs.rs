//! HotSpot's exported structure table (`gHotSpotVMStructs`, the one the Serviceability Agent reads).
//!
//! JVMTI cannot run code on a thread that already exists, yet a per-thread timer needs the thread's
//! kernel id and the signal handler needs its JNIEnv. For threads that started before kprof could see
//! them (at VMInit, and every thread on attach), kprof reads the `JavaThread*` from
//! `java.lang.Thread.eetop`, finds the JNIEnv at the same offset the calling thread's own JNIEnv has from
//! its `JavaThread*`, and the kernel thread id through `Thread::_osthread` → `OSThread::_thread_id`,
//! whose offsets this table gives.

use std::ffi::{c_char, c_void, CStr};

/// Offsets read from the table; `None` where the JVM does not export the field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadOffsets {
    /// `Thread::_osthread` (or `JavaThread::_osthread`).
    pub osthread: Option<usize>,
    /// `OSThread::_thread_id`.
    pub thread_id: Option<usize>,
}

fn symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !p.is_null() {
        return p;
    }
    // SAFETY: RTLD_NOLOAD only returns a handle if libjvm is already loaded (it is: we run inside it).
    let handle = unsafe { libc::dlopen(c"libjvm.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: valid handle and name.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

/// Reads a `uint64_t` global exported by libjvm.
fn u64_symbol(name: &CStr) -> Option<u64> {
    let p = symbol(name) as *const u64;
    // SAFETY: the symbol is a `uint64_t` global in libjvm's data segment (non-null checked).
    (!p.is_null()).then(|| unsafe { p.read() })
}

/// Looks up the offsets kprof needs. Runs once, outside any signal handler.
pub fn thread_offsets() -> ThreadOffsets {
    let mut out = ThreadOffsets::default();
    let table_ptr = symbol(c"gHotSpotVMStructs") as *const *const u8;
    let (Some(type_off), Some(field_off), Some(offset_off), Some(static_off), Some(stride)) = (
        u64_symbol(c"gHotSpotVMStructEntryTypeNameOffset"),
        u64_symbol(c"gHotSpotVMStructEntryFieldNameOffset"),
        u64_symbol(c"gHotSpotVMStructEntryOffsetOffset"),
        u64_symbol(c"gHotSpotVMStructEntryIsStaticOffset"),
        u64_symbol(c"gHotSpotVMStructEntryArrayStride"),
    ) else {
        return out;
    };
    if table_ptr.is_null() || stride == 0 {
        return out;
    }
    // SAFETY: `gHotSpotVMStructs` holds a pointer to the table (an array of entries of `stride` bytes,
    // ended by an entry whose type name is NULL); the field offsets within an entry come from the same
    // JVM. Strings are NUL-terminated C strings owned by the JVM for its lifetime.
    unsafe {
        let mut entry = table_ptr.read();
        if entry.is_null() {
            return out;
        }
        // A bound on the walk in case the table is not what we expect.
        for _ in 0..100_000 {
            let type_name = (entry.add(type_off as usize) as *const *const c_char).read();
            if type_name.is_null() {
                break;
            }
            let field_name = (entry.add(field_off as usize) as *const *const c_char).read();
            let is_static = (entry.add(static_off as usize) as *const i32).read() != 0;
            if !field_name.is_null() && !is_static {
                let t = CStr::from_ptr(type_name).to_bytes();
                let f = CStr::from_ptr(field_name).to_bytes();
                let offset = (entry.add(offset_off as usize) as *const u64).read() as usize;
                match (t, f) {
                    (b"Thread" | b"JavaThread", b"_osthread") => out.osthread = Some(offset),
                    (b"OSThread", b"_thread_id") => out.thread_id = Some(offset),
                    _ => {}
                }
            }
            entry = entry.add(stride as usize);
        }
    }
    out
}

/// The kernel thread id of the JavaThread at `java_thread`, through the offsets.
///
/// # Safety
/// `java_thread` must point to a live HotSpot `JavaThread` (read from `Thread.eetop` of a thread that
/// has not terminated, while the caller keeps it from terminating or accepts a stale read).
pub unsafe fn thread_tid(java_thread: usize, offsets: ThreadOffsets) -> Option<i32> {
    let (osthread_off, tid_off) = (offsets.osthread?, offsets.thread_id?);
    if java_thread == 0 {
        return None;
    }
    // SAFETY: per the contract, `java_thread` is a live JavaThread and the offsets are this JVM's.
    let osthread = ((java_thread + osthread_off) as *const usize).read();
    if osthread == 0 {
        return None;
    }
    // SAFETY: `_osthread` points to the thread's OSThread, alive as long as the thread.
    let tid = ((osthread + tid_off) as *const i32).read();
    (tid > 0).then_some(tid)
}
