//! The table of sampled threads, read by the signal handler.
//!
//! Everything the handler needs about a thread sits in a static slot filled when the thread is
//! registered (ThreadStart, VMInit or attach): its JNIEnv, its CCT root, its AsyncGetCallTrace frame
//! buffer and its timer. The handler finds the slot from its kernel thread id through a lock-free
//! open-addressing map, so it needs no thread-local storage (which glibc may allocate lazily for a
//! dlopen'ed library) and cannot pick another thread's slot after a descriptor or timer id is reused.
//! Registration and removal happen outside signal handlers, under one mutex.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Threads sampled at the same time, at most. More are counted and not sampled.
pub const MAX_THREADS: usize = 8192;
const MAP_SIZE: usize = MAX_THREADS * 4;
const MAP_EMPTY: u64 = 0;
const MAP_TOMBSTONE: u64 = u64::MAX;

/// One AsyncGetCallTrace frame (`ASGCT_CallFrame`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CallFrame {
    /// The bci, or -3 for a native method.
    pub lineno: i32,
    pub method_id: *mut std::ffi::c_void,
}

/// One level of a thread's last sampled path: the frame, its callsite and the CCT node they led to.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PathEntry {
    pub frame: u64,
    pub callsite: i32,
    pub node: u32,
}

pub const FREE: u8 = 0;
pub const ACTIVE: u8 = 1;
pub const ENDING: u8 = 2;

/// What the handler needs about one thread.
pub struct Slot {
    pub state: AtomicU8,
    /// Set while the handler runs on this thread.
    pub busy: AtomicBool,
    pub tid: AtomicI32,
    pub env: AtomicPtr<std::ffi::c_void>,
    /// CCT node samples of this thread start from.
    pub root: AtomicU32,
    /// perf descriptor, or -1, and the address of its ring buffer, or 0.
    pub perf_fd: AtomicI32,
    pub perf_ring: AtomicUsize,
    /// ctimer id + 1, or 0.
    pub ctimer: AtomicUsize,
    /// The frame buffer (`frames_len` entries), allocated at registration and kept for reuse.
    pub frames: AtomicPtr<CallFrame>,
    pub frames_len: AtomicU32,
    /// The thread's last sampled path (`frames_len` entries), so that the next sample only walks the CCT
    /// from where it differs (consecutive samples of a thread share most of their stack).
    path: AtomicPtr<PathEntry>,
    /// Valid entries of `path`, and the node the path hangs from.
    pub path_len: AtomicU32,
    pub path_base: AtomicU32,
    /// CPU time of the thread when sampling of it began.
    pub cpu_start_ns: AtomicU64,
}

impl Slot {
    /// The thread's last sampled path, for the handler.
    ///
    /// # Safety
    /// Only the signal handler running on the slot's own thread may call this, while it holds the slot's
    /// `busy` flag: nothing else reads or writes the path then. The buffer has `frames_len` entries and is
    /// never freed.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn path(&self) -> &mut [PathEntry] {
        let p = self.path.load(Ordering::Acquire);
        if p.is_null() {
            return &mut [];
        }
        // SAFETY: per the contract above.
        unsafe { std::slice::from_raw_parts_mut(p, self.frames_len.load(Ordering::Acquire) as usize) }
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    state: AtomicU8::new(FREE),
    busy: AtomicBool::new(false),
    tid: AtomicI32::new(0),
    env: AtomicPtr::new(std::ptr::null_mut()),
    root: AtomicU32::new(0),
    perf_fd: AtomicI32::new(-1),
    perf_ring: AtomicUsize::new(0),
    ctimer: AtomicUsize::new(0),
    frames: AtomicPtr::new(std::ptr::null_mut()),
    frames_len: AtomicU32::new(0),
    path: AtomicPtr::new(std::ptr::null_mut()),
    path_len: AtomicU32::new(0),
    path_base: AtomicU32::new(0),
    cpu_start_ns: AtomicU64::new(0),
};

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ENTRY: AtomicU64 = AtomicU64::new(MAP_EMPTY);

pub static SLOTS: [Slot; MAX_THREADS] = [EMPTY_SLOT; MAX_THREADS];
/// tid → slot: entries pack `(tid << 32) | (slot + 1)`.
static MAP: [AtomicU64; MAP_SIZE] = [EMPTY_ENTRY; MAP_SIZE];
/// Serialises registration and removal (never taken in the handler).
pub static REGISTRY: Mutex<()> = Mutex::new(());

fn map_start(tid: i32) -> usize {
    ((tid as u32).wrapping_mul(0x9E37_79B9) as usize) % MAP_SIZE
}

/// The slot of thread `tid`, if registered. Async-signal-safe: atomic loads only.
#[inline]
pub fn lookup(tid: i32) -> Option<&'static Slot> {
    let mut i = map_start(tid);
    for _ in 0..MAP_SIZE {
        let e = MAP[i].load(Ordering::Acquire);
        if e == MAP_EMPTY {
            return None;
        }
        if e != MAP_TOMBSTONE && (e >> 32) as i32 == tid {
            return SLOTS.get((e & 0xffff_ffff) as usize - 1);
        }
        i = (i + 1) % MAP_SIZE;
    }
    None
}

/// Maps `tid` to slot `idx`. Caller holds [`REGISTRY`].
fn map_insert(tid: i32, idx: usize) {
    let packed = ((tid as u32 as u64) << 32) | (idx as u64 + 1);
    let mut i = map_start(tid);
    let mut reuse: Option<usize> = None;
    for _ in 0..MAP_SIZE {
        let e = MAP[i].load(Ordering::Acquire);
        if e != MAP_EMPTY && e != MAP_TOMBSTONE && (e >> 32) as i32 == tid {
            // A stale entry of an earlier thread with the same id.
            MAP[i].store(packed, Ordering::Release);
            return;
        }
        if e == MAP_TOMBSTONE && reuse.is_none() {
            reuse = Some(i);
        }
        if e == MAP_EMPTY {
            MAP[reuse.unwrap_or(i)].store(packed, Ordering::Release);
            return;
        }
        i = (i + 1) % MAP_SIZE;
    }
    if let Some(r) = reuse {
        MAP[r].store(packed, Ordering::Release);
    }
}

/// Removes `tid`. Caller holds [`REGISTRY`].
fn map_remove(tid: i32) {
    let mut i = map_start(tid);
    for _ in 0..MAP_SIZE {
        let e = MAP[i].load(Ordering::Acquire);
        if e == MAP_EMPTY {
            return;
        }
        if e != MAP_TOMBSTONE && (e >> 32) as i32 == tid {
            MAP[i].store(MAP_TOMBSTONE, Ordering::Release);
            // Tombstones right before an empty entry end no probe sequence that the empty entry would not
            // end too: clear them, so churn of short threads cannot fill the map.
            if MAP[(i + 1) % MAP_SIZE].load(Ordering::Acquire) == MAP_EMPTY {
                let mut j = i;
                while MAP[j].load(Ordering::Acquire) == MAP_TOMBSTONE {
                    MAP[j].store(MAP_EMPTY, Ordering::Release);
                    j = (j + MAP_SIZE - 1) % MAP_SIZE;
                }
            }
            return;
        }
        i = (i + 1) % MAP_SIZE;
    }
}

/// Takes a free slot for thread `tid`, with a frame buffer of at least `depth` entries, and maps the
/// thread to it. The slot stays `FREE` (ignored by the handler) until the caller publishes it with
/// [`activate`]. Returns `None` when every slot is taken. Caller holds [`REGISTRY`].
pub fn claim(tid: i32, env: *mut std::ffi::c_void, root: u32, depth: u32) -> Option<usize> {
    let idx =
        SLOTS.iter().position(|s| s.state.load(Ordering::Acquire) == FREE && s.tid.load(Ordering::Relaxed) == 0)?;
    let slot = &SLOTS[idx];
    if slot.frames_len.load(Ordering::Relaxed) < depth {
        // The old, smaller buffer (if any) is leaked on purpose: a handler may have been reading it
        // when the slot was last freed. Slots are reused, so this happens at most once per slot.
        let buf: Box<[CallFrame]> =
            vec![CallFrame { lineno: 0, method_id: std::ptr::null_mut() }; depth as usize].into_boxed_slice();
        let path: Box<[PathEntry]> =
            vec![PathEntry { frame: 0, callsite: 0, node: 0 }; depth as usize].into_boxed_slice();
        slot.frames.store(Box::leak(buf).as_mut_ptr(), Ordering::Release);
        slot.path.store(Box::leak(path).as_mut_ptr(), Ordering::Release);
        slot.frames_len.store(depth, Ordering::Release);
    }
    slot.path_len.store(0, Ordering::Relaxed);
    slot.tid.store(tid, Ordering::Relaxed);
    slot.env.store(env, Ordering::Relaxed);
    slot.root.store(root, Ordering::Relaxed);
    slot.perf_fd.store(-1, Ordering::Relaxed);
    slot.perf_ring.store(0, Ordering::Relaxed);
    slot.ctimer.store(0, Ordering::Relaxed);
    map_insert(tid, idx);
    Some(idx)
}

/// Makes a claimed slot visible to the handler.
pub fn activate(idx: usize) {
    SLOTS[idx].state.store(ACTIVE, Ordering::Release);
}

/// Stops the handler from using slot `idx` and waits (briefly) for a handler that is using it on
/// another CPU. Caller holds [`REGISTRY`].
pub fn deactivate(idx: usize) {
    let slot = &SLOTS[idx];
    slot.state.store(ENDING, Ordering::SeqCst);
    let mut spins = 0u32;
    while slot.busy.load(Ordering::SeqCst) && spins < 1_000_000 {
        std::hint::spin_loop();
        spins += 1;
    }
}

/// Returns a deactivated slot to the free list. Caller holds [`REGISTRY`].
pub fn release(idx: usize) {
    let slot = &SLOTS[idx];
    map_remove(slot.tid.load(Ordering::Relaxed));
    slot.env.store(std::ptr::null_mut(), Ordering::Relaxed);
    slot.tid.store(0, Ordering::Relaxed);
    slot.state.store(FREE, Ordering::Release);
}

/// Indices of slots in use (active or being set up).
pub fn in_use() -> Vec<usize> {
    SLOTS.iter().enumerate().filter(|(_, s)| s.tid.load(Ordering::Relaxed) != 0).map(|(i, _)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_lookup_release_and_reuse() {
        let _g = REGISTRY.lock().unwrap();
        let a = claim(4_000_001, std::ptr::null_mut(), 1, 16).unwrap();
        activate(a);
        let b = claim(4_000_002, std::ptr::null_mut(), 1, 16).unwrap();
        assert_ne!(a, b);
        assert!(std::ptr::eq(lookup(4_000_001).unwrap(), &SLOTS[a]));
        assert!(lookup(4_000_003).is_none());
        deactivate(a);
        release(a);
        assert!(lookup(4_000_001).is_none());
        // The tombstone does not hide entries further along the probe sequence.
        assert!(std::ptr::eq(lookup(4_000_002).unwrap(), &SLOTS[b]));
        release(b);
        for round in 0..20_000 {
            let tid = 3_000_000 + round;
            let s = claim(tid, std::ptr::null_mut(), 1, 16).unwrap();
            assert!(std::ptr::eq(lookup(tid).unwrap(), &SLOTS[s]));
            release(s);
        }
        assert!(lookup(3_000_000).is_none());
    }
}
