//! HotSpot's exported structure table (`gHotSpotVMStructs`, the one the Serviceability Agent reads).
//!
//! JVMTI cannot run code on a thread that already exists, yet a per-thread timer needs the thread's
//! kernel id and the signal handler needs its JNIEnv. For threads that started before kprof could see
//! them (at VMInit, and every thread on attach), kprof reads the `JavaThread*` from
//! `java.lang.Thread.eetop`, finds the JNIEnv at the same offset the calling thread's own JNIEnv has from
//! its `JavaThread*`, and the kernel thread id through `Thread::_osthread` → `OSThread::_thread_id`,
//! whose offsets this table gives.
//!
//! The same table leads to HotSpot's flags (`JVMFlag::flags`): the ASGCT engines turn on
//! `DebugNonSafepoints` there ([`bool_flag`]) rather than by enabling CompiledMethodLoad events.

use std::ffi::{c_char, c_void, CStr};

/// Offsets read from the table; `None` where the JVM does not export the field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadOffsets {
    /// `Thread::_osthread` (or `JavaThread::_osthread`).
    pub osthread: Option<usize>,
    /// `OSThread::_thread_id`.
    pub thread_id: Option<usize>,
}

/// The address of libjvm's symbol `name`, or null.
pub fn symbol(name: &CStr) -> *mut c_void {
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

/// One entry of the structure table: a field of a HotSpot type, with its offset (an instance field) or
/// its address (a static one).
struct Entry<'a> {
    type_name: &'a [u8],
    field_name: &'a [u8],
    is_static: bool,
    offset: usize,
    address: *const c_void,
}

/// Calls `each` for every entry of the structure table until it returns true. Runs outside any signal
/// handler (it reads libjvm's symbols).
fn find_entry(mut each: impl FnMut(&Entry) -> bool) {
    let table_ptr = symbol(c"gHotSpotVMStructs") as *const *const u8;
    let (Some(type_off), Some(field_off), Some(offset_off), Some(static_off), Some(address_off), Some(stride)) = (
        u64_symbol(c"gHotSpotVMStructEntryTypeNameOffset"),
        u64_symbol(c"gHotSpotVMStructEntryFieldNameOffset"),
        u64_symbol(c"gHotSpotVMStructEntryOffsetOffset"),
        u64_symbol(c"gHotSpotVMStructEntryIsStaticOffset"),
        u64_symbol(c"gHotSpotVMStructEntryAddressOffset"),
        u64_symbol(c"gHotSpotVMStructEntryArrayStride"),
    ) else {
        return;
    };
    if table_ptr.is_null() || stride == 0 {
        return;
    }
    // SAFETY: `gHotSpotVMStructs` holds a pointer to the table (an array of entries of `stride` bytes,
    // ended by an entry whose type name is NULL); the field offsets within an entry come from the same
    // JVM. Strings are NUL-terminated C strings owned by the JVM for its lifetime.
    unsafe {
        let mut entry = table_ptr.read();
        if entry.is_null() {
            return;
        }
        // A bound on the walk in case the table is not what we expect.
        for _ in 0..100_000 {
            let type_name = (entry.add(type_off as usize) as *const *const c_char).read();
            if type_name.is_null() {
                return;
            }
            let field_name = (entry.add(field_off as usize) as *const *const c_char).read();
            if !field_name.is_null() {
                let found = Entry {
                    type_name: CStr::from_ptr(type_name).to_bytes(),
                    field_name: CStr::from_ptr(field_name).to_bytes(),
                    is_static: (entry.add(static_off as usize) as *const i32).read() != 0,
                    offset: (entry.add(offset_off as usize) as *const u64).read() as usize,
                    address: (entry.add(address_off as usize) as *const *const c_void).read(),
                };
                if each(&found) {
                    return;
                }
            }
            entry = entry.add(stride as usize);
        }
    }
}

/// The size of the HotSpot type `name` from the type table (`gHotSpotVMTypes`).
fn type_size(name: &[u8]) -> Option<usize> {
    let table_ptr = symbol(c"gHotSpotVMTypes") as *const *const u8;
    let (Some(name_off), Some(size_off), Some(stride)) = (
        u64_symbol(c"gHotSpotVMTypeEntryTypeNameOffset"),
        u64_symbol(c"gHotSpotVMTypeEntrySizeOffset"),
        u64_symbol(c"gHotSpotVMTypeEntryArrayStride"),
    ) else {
        return None;
    };
    if table_ptr.is_null() || stride == 0 {
        return None;
    }
    // SAFETY: as for the structure table: an array of `stride`-byte entries ended by a NULL type name,
    // offsets and strings from the same JVM.
    unsafe {
        let mut entry = table_ptr.read();
        if entry.is_null() {
            return None;
        }
        for _ in 0..100_000 {
            let type_name = (entry.add(name_off as usize) as *const *const c_char).read();
            if type_name.is_null() {
                return None;
            }
            if CStr::from_ptr(type_name).to_bytes() == name {
                return Some((entry.add(size_off as usize) as *const u64).read() as usize);
            }
            entry = entry.add(stride as usize);
        }
    }
    None
}

/// Looks up the offsets kprof needs. Runs once, outside any signal handler.
pub fn thread_offsets() -> ThreadOffsets {
    let mut out = ThreadOffsets::default();
    find_entry(|e| {
        match (e.type_name, e.field_name, e.is_static) {
            (b"Thread" | b"JavaThread", b"_osthread", false) => out.osthread = Some(e.offset),
            (b"OSThread", b"_thread_id", false) => out.thread_id = Some(e.offset),
            _ => {}
        }
        false
    });
    out
}

/// Where the code cache's static fields `CodeCache::_low_bound` and `CodeCache::_high_bound` are: every
/// piece of code the JVM generates (interpreter, stubs, compiled methods) lies between the two addresses
/// they hold once the code cache is set up. None where the table does not have them.
pub fn code_cache_bound_fields() -> Option<(usize, usize)> {
    let (mut low, mut high) = (None, None);
    find_entry(|e| {
        match (e.type_name, e.field_name, e.is_static) {
            (b"CodeCache", b"_low_bound", true) => low = Some(e.address as usize),
            (b"CodeCache", b"_high_bound", true) => high = Some(e.address as usize),
            _ => {}
        }
        low.is_some() && high.is_some()
    });
    Some((low.filter(|&a| a != 0)?, high.filter(|&a| a != 0)?))
}

/// The path from a `Method*` to its jmethodID as HotSpot itself takes it for a frame it reports
/// (`Method::find_jmethod_id_or_null`, what AsyncGetCallTrace calls for every frame it walks): the
/// method's `ConstMethod`, its constant pool and method number, the pool's holder class, and that
/// class's array of jmethodIDs (its length first, then one per method number; null where none was made).
#[derive(Clone, Copy, Debug)]
pub struct MethodIdPath {
    const_method: usize,
    constants: usize,
    idnum: usize,
    pool_holder: usize,
    jmethod_ids: usize,
}

/// The offsets of [`MethodIdPath`], or None where the structure table lacks one of them.
pub fn method_id_path() -> Option<MethodIdPath> {
    let (mut const_method, mut constants, mut idnum, mut pool_holder, mut jmethod_ids) = (None, None, None, None, None);
    find_entry(|e| {
        match (e.type_name, e.field_name, e.is_static) {
            (b"Method", b"_constMethod", false) => const_method = Some(e.offset),
            (b"ConstMethod", b"_constants", false) => constants = Some(e.offset),
            (b"ConstMethod", b"_method_idnum", false) => idnum = Some(e.offset),
            (b"ConstantPool", b"_pool_holder", false) => pool_holder = Some(e.offset),
            (b"InstanceKlass", b"_methods_jmethod_ids", false) => jmethod_ids = Some(e.offset),
            _ => {}
        }
        false
    });
    Some(MethodIdPath {
        const_method: const_method?,
        constants: constants?,
        idnum: idnum?,
        pool_holder: pool_holder?,
        jmethod_ids: jmethod_ids?,
    })
}

impl MethodIdPath {
    /// The jmethodID of `method` (0: none made yet, or a link of the path missing).
    ///
    /// # Safety
    /// `method` must be a live `Method*`: one in an interpreter frame of the calling thread's own stack,
    /// which keeps its class loaded and the method from being freed while the frame is there.
    pub unsafe fn jmethod_id(&self, method: usize) -> usize {
        let word = |at: usize| if at < 4096 { 0 } else { (at as *const usize).read() };
        let const_method = word(method + self.const_method);
        if const_method == 0 {
            return 0;
        }
        let idnum = ((const_method + self.idnum) as *const u16).read() as usize;
        let holder = word(word(const_method + self.constants) + self.pool_holder);
        let ids = if holder == 0 { 0 } else { word(holder + self.jmethod_ids) };
        // The array may be replaced by a longer one while this reads it (HotSpot's readers of it, as
        // AsyncGetCallTrace, live with that too): its length comes first, then the ids.
        if ids == 0 || word(ids) <= idnum {
            return 0;
        }
        word(ids + 8 * (idnum + 1))
    }
}

/// A boolean `-XX:` flag of the running JVM, found in HotSpot's flag table.
#[derive(Clone, Copy, Debug)]
pub struct BoolFlag {
    value: *mut u8,
    /// The low byte of the flag's `_flags`, whose low four bits are the value's origin.
    origin: *mut u8,
    /// The value is the JVM's default, not one a command line, file or tool set.
    pub default_origin: bool,
}

// SAFETY: the value's address is a global of libjvm's, alive as long as the process.
unsafe impl Send for BoolFlag {}

impl BoolFlag {
    pub fn get(&self) -> bool {
        // SAFETY: `value` is the address of the flag's `bool` in libjvm (see `bool_flag`); HotSpot reads
        // and writes it as a plain byte, as this does.
        unsafe { self.value.read_volatile() != 0 }
    }

    /// Sets the value. HotSpot's compiler threads read such a flag once per compilation: a compilation
    /// under way keeps the value it read.
    pub fn set(&self, on: bool) {
        // SAFETY: as in `get`; a one-byte store is atomic on every platform HotSpot runs on.
        unsafe { self.value.write_volatile(on as u8) }
    }

    /// Marks the value as the VM's own choice (origin `ERGONOMIC`), no longer the default: HotSpot treats
    /// some flags at their default as a wish other settings may override.
    pub fn mark_ergonomic(&mut self) {
        const ORIGIN_MASK: u8 = 0xf;
        const ERGONOMIC: u8 = 5;
        // SAFETY: `origin` is the low byte of the flag's `_flags` in libjvm's flag table (see
        // `bool_flag`; little-endian), which HotSpot writes only when a flag is set through its API.
        unsafe { self.origin.write_volatile((self.origin.read_volatile() & !ORIGIN_MASK) | ERGONOMIC) };
        self.default_origin = false;
    }
}

/// The boolean flag `name` (`JVMFlag::flags`, an array of `JVMFlag::numFlags` entries of the size the
/// type table gives, each with its `_name`, the address of its value `_addr`, and `_flags`, whose low
/// four bits are the value's origin, 0 for the default, and `_type`, 0 for `bool`). None where this JVM does not export the table,
/// or has no such flag.
pub fn bool_flag(name: &CStr) -> Option<BoolFlag> {
    let (mut flags_at, mut count_at) = (std::ptr::null::<c_void>(), std::ptr::null::<c_void>());
    let (mut name_off, mut addr_off, mut origin_off, mut type_off) = (None, None, None, None);
    find_entry(|e| {
        if e.type_name == b"JVMFlag" {
            match (e.field_name, e.is_static) {
                (b"flags", true) => flags_at = e.address,
                (b"numFlags", true) => count_at = e.address,
                (b"_name", false) => name_off = Some(e.offset),
                (b"_addr", false) => addr_off = Some(e.offset),
                (b"_flags", false) => origin_off = Some(e.offset),
                (b"_type", false) => type_off = Some(e.offset),
                _ => {}
            }
        }
        false
    });
    let (name_off, addr_off, origin_off) = (name_off?, addr_off?, origin_off?);
    let size = type_size(b"JVMFlag")?;
    if flags_at.is_null() || count_at.is_null() || size == 0 {
        return None;
    }
    // SAFETY: `flags_at` and `count_at` are the addresses of the statics `JVMFlag::flags` (a pointer to
    // the array) and `JVMFlag::numFlags` (a size_t) the table gives; every entry is `size` bytes with
    // fields at the offsets the same table gives; names are C strings and `_addr` points at the value.
    unsafe {
        let flags = (flags_at as *const *const u8).read();
        let count = (count_at as *const usize).read();
        if flags.is_null() || count > 10_000 {
            return None;
        }
        for i in 0..count {
            let flag = flags.add(i * size);
            let flag_name = (flag.add(name_off) as *const *const c_char).read();
            if flag_name.is_null() || CStr::from_ptr(flag_name) != name {
                continue;
            }
            // `_type` 0 is `bool` (the first of HotSpot's flag types); a table without it is trusted.
            // `_type` and `_flags` are ints in some JDKs and shorts in others: their low 16 bits (first,
            // on the little-endian machines kprof runs on) hold the values in both.
            if type_off.is_some_and(|t| (flag.add(t) as *const u16).read_unaligned() != 0) {
                return None;
            }
            let value = (flag.add(addr_off) as *const *mut u8).read();
            let origin_at = flag.add(origin_off) as *mut u8;
            let origin = (origin_at as *const u16).read_unaligned() & 0xf;
            return (!value.is_null()).then_some(BoolFlag { value, origin: origin_at, default_origin: origin == 0 });
        }
    }
    None
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
