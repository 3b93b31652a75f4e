//! What the JVM's generated code is, by address: the Java methods (inlined ones included) at each call's
//! return address in compiled code, the native method a native wrapper calls, the interpreter, and the
//! stubs. A walk of a thread's frame-pointer chain ([`super::fp_chain`]) places each frame by its return
//! address with it.
//!
//! Filled from JVMTI's `CompiledMethodLoad` (its inline records: the methods at each of the compiled
//! method's recorded pcs, innermost first), `CompiledMethodUnload` and `DynamicCodeGenerated`, replayed
//! at start for what was generated before ([`start`]). Only the pcs that follow a call instruction are
//! kept: a frame below the top of a stack stands at one, and the others (with `DebugNonSafepoints`,
//! which the event turns on, most of a method's pcs) would cost memory for nothing.
//!
//! The table is behind a mutex that the JVM's threads posting the events hold briefly; a sampling thread
//! only tries it ([`lookup`]) and, when it is taken, walks another way: a sample never waits. Every
//! `CompiledMethodUnload` moves [`epoch`] on, so that what threads keep of the table is dropped before
//! freed code can be reused.

use crate::engine::Host;
use crate::jvmti::bindings::*;
use crate::jvmti::{vmstructs, Jvmti};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// What a code address is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeAt {
    /// A compiled method's call: the methods there, innermost first (a native wrapper: its native method).
    Java(Box<[usize]>),
    /// The template interpreter: the frame's method is in the frame.
    Interpreter,
    /// Generated code that is no Java frame (stubs, adapters, the call stub).
    Stub,
    /// Not the JVM's generated code: a native library's (libjvm's, kprof's), no Java frame.
    Native,
    /// Generated code the table cannot place (a compiled method whose event has not come yet, a
    /// deoptimized frame's patched return address), or the table was busy.
    Unknown,
}

/// What is known of a range of generated code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Range {
    Interpreter,
    Stub,
    /// A native method's wrapper, with the method's jmethodID.
    NativeWrapper(usize),
}

#[derive(Default)]
struct Table {
    /// Return address -> (the compiled method's code address, the methods there innermost first).
    calls: HashMap<usize, (usize, Box<[usize]>)>,
    /// Compiled method's code address -> its call return addresses, to forget them when it is unloaded.
    compiled: HashMap<usize, Vec<usize>>,
    /// Start -> (end, what) of the interpreter, stubs and native wrappers.
    ranges: BTreeMap<usize, (usize, Range)>,
}

impl Table {
    fn range_at(&self, pc: usize) -> Option<Range> {
        let (_, &(end, range)) = self.ranges.range(..=pc).next_back()?;
        (pc < end).then_some(range)
    }

    fn add_range(&mut self, start: usize, end: usize, range: Range) {
        if end <= start {
            return;
        }
        // Ranges overlapping the new one are gone: their code was freed and the space reused.
        let stale: Vec<usize> = self.ranges.range(..end).filter(|(_, &(e, _))| e > start).map(|(&s, _)| s).collect();
        for s in stale {
            self.ranges.remove(&s);
        }
        self.ranges.insert(start, (end, range));
    }

    fn forget_compiled(&mut self, code: usize) {
        if let Some(pcs) = self.compiled.remove(&code) {
            for pc in pcs {
                if self.calls.get(&pc).is_some_and(|(owner, _)| *owner == code) {
                    self.calls.remove(&pc);
                }
            }
        }
        if matches!(self.ranges.get(&code), Some((_, Range::NativeWrapper(_)))) {
            self.ranges.remove(&code);
        }
    }
}

static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
static EPOCH: AtomicU64 = AtomicU64::new(1);
/// The events are on.
static STARTED: AtomicBool = AtomicBool::new(false);
/// The JVMTI environment of the events.
static ENV: AtomicUsize = AtomicUsize::new(0);
/// The code cache's bounds once read (0: not yet).
static CODE_LOW: AtomicUsize = AtomicUsize::new(0);
static CODE_HIGH: AtomicUsize = AtomicUsize::new(0);
static INTERPRETER_LOW: AtomicUsize = AtomicUsize::new(0);
static INTERPRETER_HIGH: AtomicUsize = AtomicUsize::new(0);

fn table() -> &'static Mutex<Table> {
    TABLE.get_or_init(|| Mutex::new(Table::default()))
}

/// Moves on whenever code the table knew is freed: what a thread kept of the table from an earlier epoch
/// is stale.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Sets up the events (once). The table fills as the JVM generates code; [`replay`] adds what it
/// generated before.
pub fn enable(host: &dyn Host) -> Result<(), String> {
    if STARTED.load(Ordering::Acquire) {
        return Ok(());
    }
    static LOCK: Mutex<()> = Mutex::new(());
    let _once = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if STARTED.load(Ordering::Acquire) {
        return Ok(());
    }
    vmstructs::code_cache_bound_fields().ok_or("this JVM does not say where its code cache is")?;
    let env = host.vm().jvmti(JVMTI_VERSION_1_2).ok_or("no JVMTI environment")?;
    let potential = env.potential_capabilities().map_err(|e| format!("GetPotentialCapabilities: {e}"))?;
    if potential.can_generate_compiled_method_load_events() == 0 {
        return Err("this JVM cannot post CompiledMethodLoad events".into());
    }
    let mut caps = jvmtiCapabilities::default();
    caps.set_can_generate_compiled_method_load_events(1);
    env.add_capabilities(&caps).map_err(|e| format!("AddCapabilities: {e}"))?;
    let callbacks = jvmtiEventCallbacks {
        CompiledMethodLoad: Some(on_compiled_method_load),
        CompiledMethodUnload: Some(on_compiled_method_unload),
        DynamicCodeGenerated: Some(on_dynamic_code_generated),
        ..Default::default()
    };
    env.set_event_callbacks(&callbacks).map_err(|e| format!("SetEventCallbacks: {e}"))?;
    // The events are wanted for calls' return addresses only.
    super::keep_non_safepoint_debug_off();
    for event in
        [JVMTI_EVENT_COMPILED_METHOD_LOAD, JVMTI_EVENT_COMPILED_METHOD_UNLOAD, JVMTI_EVENT_DYNAMIC_CODE_GENERATED]
    {
        env.set_event(event, true).map_err(|e| format!("enabling event {event}: {e}"))?;
    }
    ENV.store(env.raw() as usize, Ordering::Release);
    STARTED.store(true, Ordering::Release);
    Ok(())
}

/// Posts the events again for the code generated before [`enable`] (live phase only; duplicates of
/// events already seen change nothing).
pub fn replay() -> Result<(), String> {
    let raw = ENV.load(Ordering::Acquire);
    if raw == 0 {
        return Err("code map not enabled".into());
    }
    // SAFETY: `raw` is the environment `enable` got from the JVM, never disposed.
    let env = unsafe { Jvmti::from_raw(raw as *mut jvmtiEnv) };
    env.generate_events(JVMTI_EVENT_DYNAMIC_CODE_GENERATED).map_err(|e| format!("GenerateEvents: {e}"))?;
    env.generate_events(JVMTI_EVENT_COMPILED_METHOD_LOAD).map_err(|e| format!("GenerateEvents: {e}"))?;
    Ok(())
}

/// The code cache's bounds, read once it is set up.
fn code_bounds() -> Option<(usize, usize)> {
    let low = CODE_LOW.load(Ordering::Relaxed);
    if low != 0 {
        return Some((low, CODE_HIGH.load(Ordering::Relaxed)));
    }
    let (low_at, high_at) = vmstructs::code_cache_bound_fields()?;
    // SAFETY: the structure table gives the addresses of the two static `address` fields in libjvm's data.
    let (low, high) = unsafe { ((low_at as *const usize).read_volatile(), (high_at as *const usize).read_volatile()) };
    if low == 0 || high <= low {
        return None;
    }
    CODE_HIGH.store(high, Ordering::Relaxed);
    CODE_LOW.store(low, Ordering::Relaxed);
    Some((low, high))
}

/// Whether `pc` is in the interpreter (no lock: its range never changes once generated).
#[inline]
pub fn in_interpreter(pc: usize) -> bool {
    pc >= INTERPRETER_LOW.load(Ordering::Relaxed) && pc < INTERPRETER_HIGH.load(Ordering::Relaxed)
}

/// Whether `pc` may be generated code (no lock): true for every pc while the code cache's bounds are not
/// known yet, where [`lookup`] then places nothing.
#[inline]
pub fn in_code_cache(pc: usize) -> bool {
    match code_bounds() {
        Some((low, high)) => pc >= low && pc < high,
        None => true,
    }
}

/// Whether the native code at `pc` is libjvm's or kprof's, both built to keep frame pointers. Code of
/// another library may not keep one, and clobber the register: a chain that runs through it may go
/// anywhere after it. Calls dladdr (not for signal handlers).
pub fn native_keeps_frame_pointers(pc: usize) -> bool {
    static TRUSTED: OnceLock<[usize; 2]> = OnceLock::new();
    let trusted = TRUSTED.get_or_init(|| {
        let jvm = library_base(vmstructs::symbol(c"JNI_CreateJavaVM") as usize);
        [jvm, library_base(native_keeps_frame_pointers as *const () as usize)]
    });
    let base = library_base(pc);
    base != 0 && trusted.contains(&base)
}

/// The load address of the shared object holding `addr`, or 0.
fn library_base(addr: usize) -> usize {
    if addr == 0 {
        return 0;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables for `addr` (any value) and fills `info`.
    let found = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    if found {
        info.dli_fbase as usize
    } else {
        0
    }
}

/// What is at `pc`, for a thread walking its own stack: never waits for the table.
pub fn lookup(pc: usize) -> CodeAt {
    if !STARTED.load(Ordering::Acquire) {
        return CodeAt::Unknown;
    }
    match code_bounds() {
        Some((low, high)) if pc < low || pc >= high => return CodeAt::Native,
        Some(_) => {}
        None => return CodeAt::Unknown,
    }
    if in_interpreter(pc) {
        return CodeAt::Interpreter;
    }
    let Ok(t) = table().try_lock() else { return CodeAt::Unknown };
    if let Some((_, methods)) = t.calls.get(&pc) {
        return CodeAt::Java(methods.clone());
    }
    match t.range_at(pc) {
        Some(Range::Interpreter) => CodeAt::Interpreter,
        Some(Range::Stub) => CodeAt::Stub,
        Some(Range::NativeWrapper(m)) => CodeAt::Java(Box::new([m])),
        None => CodeAt::Unknown,
    }
}

/// Whether the instruction that ends at `pc` may be a call (x86-64: `call rel32`, `call reg`,
/// `call [rip+disp32]`). `code` is the code `pc` lies in, from `start`.
fn follows_call(code: &[u8], start: usize, pc: usize) -> bool {
    let Some(at) = pc.checked_sub(start) else { return false };
    let byte = |back: usize| at.checked_sub(back).and_then(|i| code.get(i)).copied();
    byte(5) == Some(0xE8)
        || (byte(2) == Some(0xFF) && byte(1).is_some_and(|b| (0xD0..=0xD7).contains(&b)))
        || (byte(3) == Some(0x41) && byte(2) == Some(0xFF) && byte(1).is_some_and(|b| (0xD0..=0xD7).contains(&b)))
        || (byte(6) == Some(0xFF) && byte(5) == Some(0x15))
}

/// `jvmtiCompiledMethodLoadRecordHeader` (jvmticmlr.h).
#[repr(C)]
struct RecordHeader {
    kind: i32,
    major: jint,
    minor: jint,
    next: *const RecordHeader,
}

/// `PCStackInfo`.
#[repr(C)]
struct PcStackInfo {
    pc: *const c_void,
    frames: jint,
    methods: *const jmethodID,
    bcis: *const jint,
}

/// `jvmtiCompiledMethodLoadInlineRecord`.
#[repr(C)]
struct InlineRecord {
    header: RecordHeader,
    pcs: jint,
    info: *const PcStackInfo,
}

/// `JVMTI_CMLR_INLINE_INFO`.
const CMLR_INLINE_INFO: i32 = 2;
/// `JVM_ACC_NATIVE`.
const ACC_NATIVE: i32 = 0x100;

unsafe extern "C" fn on_compiled_method_load(
    jvmti: *mut jvmtiEnv,
    method: jmethodID,
    code_size: jint,
    code_addr: *const c_void,
    _map_length: jint,
    _map: *const jvmtiAddrLocationMap,
    compile_info: *const c_void,
) {
    crate::guard::guard((), || {
        let (start, size) = (code_addr as usize, code_size.max(0) as usize);
        if start == 0 || size == 0 {
            return;
        }
        // SAFETY: the JVM passes its environment to the callback.
        let env = unsafe { Jvmti::from_raw(jvmti) };
        let native = env.method_modifiers(method).is_ok_and(|m| m & ACC_NATIVE != 0);
        let mut calls: Vec<(usize, Box<[usize]>)> = Vec::new();
        if !native {
            // SAFETY: the JVM's code of the method lies at `code_addr` for `code_size` bytes while the
            // event is posted (the method cannot be unloaded during its own load event).
            let code = unsafe { std::slice::from_raw_parts(start as *const u8, size) };
            let mut record = compile_info as *const RecordHeader;
            let mut records = 0;
            while !record.is_null() && records < 64 {
                records += 1;
                // SAFETY: `compile_info` is the JVM's list of records (jvmticmlr.h), alive for the callback;
                // each begins with the header, and a record of kind INLINE_INFO is an `InlineRecord` whose
                // `info` points at `pcs` entries, each with `frames` method ids.
                unsafe {
                    if (*record).kind == CMLR_INLINE_INFO {
                        let inline = &*(record as *const InlineRecord);
                        for i in 0..inline.pcs.max(0) as usize {
                            let info = &*inline.info.add(i);
                            let pc = info.pc as usize;
                            if info.frames <= 0 || info.methods.is_null() || !follows_call(code, start, pc) {
                                continue;
                            }
                            let methods = std::slice::from_raw_parts(info.methods, info.frames as usize);
                            calls.push((pc, methods.iter().map(|&m| m as usize).collect()));
                        }
                    }
                    record = (*record).next;
                }
            }
        }
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        // Code at this address before was freed (its unload may come later): forget it first.
        t.forget_compiled(start);
        if native {
            t.add_range(start, start + size, Range::NativeWrapper(method as usize));
            t.compiled.insert(start, Vec::new());
            return;
        }
        let pcs = calls.iter().map(|(pc, _)| *pc).collect();
        for (pc, methods) in calls {
            t.calls.insert(pc, (start, methods));
        }
        t.compiled.insert(start, pcs);
    })
}

unsafe extern "C" fn on_compiled_method_unload(_jvmti: *mut jvmtiEnv, _method: jmethodID, code_addr: *const c_void) {
    crate::guard::guard((), || {
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        t.forget_compiled(code_addr as usize);
        EPOCH.fetch_add(1, Ordering::AcqRel);
    })
}

unsafe extern "C" fn on_dynamic_code_generated(
    _jvmti: *mut jvmtiEnv,
    name: *const c_char,
    address: *const c_void,
    length: jint,
) {
    crate::guard::guard((), || {
        let (start, end) = (address as usize, address as usize + length.max(0) as usize);
        // SAFETY: the JVM passes a NUL-terminated name valid for the callback (or null).
        let interpreter = !name.is_null() && unsafe { CStr::from_ptr(name) }.to_bytes() == b"Interpreter";
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        if interpreter {
            INTERPRETER_LOW.store(start, Ordering::Relaxed);
            INTERPRETER_HIGH.store(end, Ordering::Relaxed);
        }
        t.add_range(start, end, if interpreter { Range::Interpreter } else { Range::Stub });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_recognised_by_the_instruction_before_the_return_address() {
        // call rel32 at 0, then a nop; call r10 (41 ff d2) at 6; call rax (ff d0) at 9.
        let code = [0xE8, 1, 2, 3, 4, 0x90, 0x41, 0xFF, 0xD2, 0xFF, 0xD0, 0x90];
        assert!(follows_call(&code, 100, 105));
        assert!(follows_call(&code, 100, 109));
        assert!(follows_call(&code, 100, 111));
        assert!(!follows_call(&code, 100, 106));
        assert!(!follows_call(&code, 100, 102));
        assert!(!follows_call(&code, 100, 99));
    }

    #[test]
    fn ranges_replace_what_they_overlap() {
        let mut t = Table::default();
        t.add_range(100, 200, Range::Stub);
        t.add_range(300, 400, Range::NativeWrapper(7));
        assert_eq!(t.range_at(150), Some(Range::Stub));
        assert_eq!(t.range_at(200), None);
        t.add_range(150, 320, Range::Interpreter);
        assert_eq!(t.range_at(120), None);
        assert_eq!(t.range_at(310), Some(Range::Interpreter));
        assert_eq!(t.range_at(350), None);
        t.add_range(300, 400, Range::NativeWrapper(7));
        t.compiled.insert(300, Vec::new());
        t.forget_compiled(300);
        assert_eq!(t.range_at(350), None);
    }
}
