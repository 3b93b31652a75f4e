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

/// Reads the word at `addr` of this process's memory without trusting it: an address that is not mapped
/// (a `JavaThread` freed by a thread that exited meanwhile) gives `None` instead of a crash.
/// `process_vm_readv` on our own pid copies through the kernel, which checks the mapping.
pub fn read_word(addr: usize) -> Option<usize> {
    if addr == 0 || addr % std::mem::align_of::<usize>() != 0 {
        return None;
    }
    let mut word: usize = 0;
    let local = libc::iovec { iov_base: &mut word as *mut usize as *mut c_void, iov_len: std::mem::size_of::<usize>() };
    let remote = libc::iovec { iov_base: addr as *mut c_void, iov_len: std::mem::size_of::<usize>() };
    // SAFETY: `local` is our own word; the kernel reads `remote` on our behalf and fails with EFAULT
    // rather than fault if it is not mapped.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == std::mem::size_of::<usize>() as isize).then_some(word)
}

/// The kernel thread id of the JavaThread at `java_thread`, through the offsets. The JavaThread may be
/// gone (its thread exited after `Thread.eetop` was read): every read is checked ([`read_word`]), and
/// what comes back must still be checked to name a thread of this process.
pub fn thread_tid(java_thread: usize, offsets: ThreadOffsets) -> Option<i32> {
    let (osthread_off, tid_off) = (offsets.osthread?, offsets.thread_id?);
    if java_thread == 0 {
        return None;
    }
    let osthread = read_word(java_thread + osthread_off)?;
    if osthread == 0 {
        return None;
    }
    // `_thread_id` is a 32-bit pid_t: read the aligned word that holds it.
    let at = osthread + tid_off;
    let word = read_word(at & !7)?;
    let tid = (word >> (8 * (at & 7))) as u32 as i32;
    (tid > 0).then_some(tid)
}
