//! The table of Java threads that the sampling engines signal, read by their signal handlers.
//!
//! Everything a handler needs about a thread sits in a static slot filled when the thread is registered
//! (ThreadStart, or at a session's start for the threads already running): its JNIEnv, its CCT root,
//! its AsyncGetCallTrace frame buffer and its last sampled path. The handler finds the slot from its
//! kernel thread id through a lock-free open-addressing map, so it needs no thread-local storage (which
//! glibc may allocate lazily for a dlopen'ed library). One slot serves every engine that samples the
//! thread (the cpu and the wall engine may run together): each is a *user* of the slot with a bit of
//! its own, and keeps what only it needs (a timer, a thread reference) in a table of its own indexed
//! like this one. Registration and removal happen outside signal handlers, under one mutex.
//!
//! Teardown against handlers: a handler claims the slot's `busy` flag and only then checks that the
//! slot is active, belongs to its thread and has its user's bit ([`enter`]); a user leaves by clearing
//! its bit and then waiting until `busy` is clear ([`Registry::leave`]). Both sides use sequentially
//! consistent operations, so either the handler sees the bit gone and touches nothing more, or the
//! leaving side sees the handler busy and waits for it. A handler never blocks, so the wait ends; if it
//! has not ended after [`QUIET_WAIT`] (a thread stopped by a debugger inside a handler), the slot is
//! quarantined, never reused, and the leaving engine keeps its resources (a perf ring stays mapped):
//! nothing a handler may still touch is ever released.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Threads sampled at the same time, at most. More are counted and not sampled.
pub const MAX_THREADS: usize = 8192;
const MAP_SIZE: usize = MAX_THREADS * 4;
const MAP_EMPTY: u64 = 0;
const MAP_TOMBSTONE: u64 = u64::MAX;

/// How long a leaving user waits for a busy handler before it quarantines the slot.
pub const QUIET_WAIT: Duration = Duration::from_secs(1);

/// An engine's bit in a slot.
pub type User = u8;
/// The cpu engine (mode=asgct).
pub const CPU: User = 1;
/// The wall-clock engine (mode=wall).
pub const WALL: User = 2;

/// How a registration learnt of the thread.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Origin {
    /// On the thread itself (ThreadStart): its tid and JNIEnv are certain.
    Started,
    /// Found running at a session's start through `Thread.eetop`: the thread may be exiting.
    Found,
}

/// One AsyncGetCallTrace frame (`ASGCT_CallFrame`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CallFrame {
    /// The bci, or -3 for a native method.
    pub lineno: i32,
    pub method_id: *mut c_void,
}

/// One level of a thread's last sampled path: the frame, its callsite and the CCT node they led to.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PathEntry {
    pub frame: u64,
    pub callsite: i32,
    pub node: u32,
}

const FREE: u8 = 0;
const ACTIVE: u8 = 1;
/// Being released, or given to another thread.
const ENDING: u8 = 2;
/// A handler did not leave it within [`QUIET_WAIT`]: never reused.
const QUARANTINED: u8 = 3;

/// What handlers need about one thread.
pub struct Slot {
    state: AtomicU8,
    /// Set while a handler runs on this thread.
    busy: AtomicBool,
    tid: AtomicI32,
    /// The engines sampling the thread ([`User`] bits).
    users: AtomicU8,
    /// Changes whenever the slot is given to another thread: an engine's own per-slot data made for an
    /// older generation belongs to a thread that is gone.
    generation: AtomicU32,
    env: AtomicPtr<c_void>,
    /// CCT node samples of this thread start from.
    root: AtomicU32,
    /// The frame buffer (`frames_len` entries), allocated at registration and kept for reuse.
    frames: AtomicPtr<CallFrame>,
    frames_len: AtomicU32,
    /// The thread's last sampled path (`frames_len` entries), so that the next sample only walks the CCT
    /// from where it differs (consecutive samples of a thread share most of their stack).
    path: AtomicPtr<PathEntry>,
    /// Valid entries of `path`, and the node the path hangs from.
    path_len: AtomicU32,
    path_base: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    state: AtomicU8::new(FREE),
    busy: AtomicBool::new(false),
    tid: AtomicI32::new(0),
    users: AtomicU8::new(0),
    generation: AtomicU32::new(0),
    env: AtomicPtr::new(std::ptr::null_mut()),
    root: AtomicU32::new(0),
    frames: AtomicPtr::new(std::ptr::null_mut()),
    frames_len: AtomicU32::new(0),
    path: AtomicPtr::new(std::ptr::null_mut()),
    path_len: AtomicU32::new(0),
    path_base: AtomicU32::new(0),
};

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ENTRY: AtomicU64 = AtomicU64::new(MAP_EMPTY);

static SLOTS: [Slot; MAX_THREADS] = [EMPTY_SLOT; MAX_THREADS];
/// tid → slot: entries pack `(tid << 32) | (slot + 1)`.
static MAP: [AtomicU64; MAP_SIZE] = [EMPTY_ENTRY; MAP_SIZE];
/// Serialises registration and removal (never taken in a handler).
static REGISTRY: Mutex<RegistryState> = Mutex::new(RegistryState { passes: 0, ended: Vec::new(), ended_lost: false });
/// Slots quarantined so far.
static QUARANTINED_SLOTS: AtomicU64 = AtomicU64::new(0);

/// Per user, what releases the user's own data of a slot that is given to another thread (an
/// [`EvictHook`]); 0 for none. Set once by each engine.
#[allow(clippy::declare_interior_mutable_const)]
const NO_HOOK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static EVICT_HOOKS: [std::sync::atomic::AtomicUsize; 8] = [NO_HOOK; 8];

/// Releases what an engine keeps for slot `idx` (its timer, its thread reference) when the slot is
/// given to another thread under it: called with the registry held and no handler inside the slot.
pub type EvictHook = fn(idx: usize);

/// Sets `user`'s [`EvictHook`].
pub fn set_evict_hook(user: User, hook: EvictHook) {
    EVICT_HOOKS[user.trailing_zeros() as usize % 8].store(hook as usize, Ordering::Release);
}

fn evict(idx: usize, users: User) {
    for (bit, hook) in EVICT_HOOKS.iter().enumerate() {
        if users & (1 << bit) == 0 {
            continue;
        }
        let h = hook.load(Ordering::Acquire);
        if h != 0 {
            // SAFETY: only `set_evict_hook` stores here, and it stores an `EvictHook`.
            let hook = unsafe { std::mem::transmute::<usize, EvictHook>(h) };
            hook(idx);
        }
    }
}

/// Threads that ended while a search for running threads was under way (see [`Registry::note_ended`]).
struct RegistryState {
    passes: u32,
    ended: Vec<i32>,
    /// More threads ended than `ended` keeps: every found thread is refused until the searches end.
    ended_lost: bool,
}

/// At most this many ended threads are remembered during a search.
const ENDED_KEPT: usize = 1 << 16;

fn map_start(tid: i32) -> usize {
    ((tid as u32).wrapping_mul(0x9E37_79B9) as usize) % MAP_SIZE
}

/// The slot index of thread `tid`, if mapped. Async-signal-safe: atomic loads only.
#[inline]
fn lookup(tid: i32) -> Option<usize> {
    let mut i = map_start(tid);
    for _ in 0..MAP_SIZE {
        let e = MAP[i].load(Ordering::Acquire);
        if e == MAP_EMPTY {
            return None;
        }
        if e != MAP_TOMBSTONE && (e >> 32) as i32 == tid {
            let idx = (e & 0xffff_ffff) as usize - 1;
            return (idx < MAX_THREADS).then_some(idx);
        }
        i = (i + 1) % MAP_SIZE;
    }
    None
}

/// Maps `tid` to slot `idx`. Caller holds the registry.
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

/// Removes `tid`'s entry if it names slot `idx`. Caller holds the registry.
fn map_remove(tid: i32, idx: usize) {
    let mut i = map_start(tid);
    for _ in 0..MAP_SIZE {
        let e = MAP[i].load(Ordering::Acquire);
        if e == MAP_EMPTY {
            return;
        }
        if e != MAP_TOMBSTONE && (e >> 32) as i32 == tid {
            if (e & 0xffff_ffff) as usize != idx + 1 {
                return;
            }
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

/// What [`enter`] found.
pub enum Entry {
    /// The handler may sample the thread until the guard drops.
    In(Entered),
    /// Another handler holds the slot (cannot happen on one thread while the handlers block each other's
    /// signals; a late handler of a thread that is gone can hold a reused slot for an instant).
    Busy,
    /// The thread has a slot, but not (or no longer) for this user.
    Idle,
    /// The thread has no slot.
    Unknown,
}

/// A handler's hold on its thread's slot; releases it when dropped.
pub struct Entered {
    slot: &'static Slot,
    pub idx: usize,
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.slot.busy.store(false, Ordering::Release);
    }
}

impl Entered {
    pub fn env(&self) -> *mut c_void {
        self.slot.env.load(Ordering::Relaxed)
    }

    pub fn root(&self) -> u32 {
        self.slot.root.load(Ordering::Relaxed)
    }

    /// The frame buffer and its length.
    pub fn frames(&self) -> (*mut CallFrame, u32) {
        (self.slot.frames.load(Ordering::Acquire), self.slot.frames_len.load(Ordering::Acquire))
    }

    /// The thread's last sampled path, and the node it hangs from and its valid length. For
    /// [`record_stack`](super::record_stack) alone, which takes it once per sample.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn path(&self) -> (&mut [PathEntry], u32, usize) {
        let p = self.slot.path.load(Ordering::Acquire);
        let path: &mut [PathEntry] = if p.is_null() {
            &mut []
        } else {
            // SAFETY: the buffer has `frames_len` entries and is never freed; only the handler on the slot's
            // own thread uses it, while it holds `busy` (this guard), so nothing else reads or writes it,
            // and its one caller takes it once per sample.
            unsafe { std::slice::from_raw_parts_mut(p, self.slot.frames_len.load(Ordering::Acquire) as usize) }
        };
        let base = self.slot.path_base.load(Ordering::Relaxed);
        let len = self.slot.path_len.load(Ordering::Relaxed) as usize;
        (path, base, len)
    }

    pub fn set_path(&self, base: u32, len: usize) {
        self.slot.path_base.store(base, Ordering::Relaxed);
        self.slot.path_len.store(len as u32, Ordering::Relaxed);
    }
}

/// The handler of `user` on thread `tid` takes its slot. Async-signal-safe: atomics only.
#[inline]
pub fn enter(tid: i32, user: User) -> Entry {
    let Some(idx) = lookup(tid) else { return Entry::Unknown };
    let slot = &SLOTS[idx];
    if slot.busy.swap(true, Ordering::SeqCst) {
        return Entry::Busy;
    }
    if slot.state.load(Ordering::SeqCst) != ACTIVE
        || slot.tid.load(Ordering::SeqCst) != tid
        || slot.users.load(Ordering::SeqCst) & user == 0
    {
        slot.busy.store(false, Ordering::Release);
        return Entry::Idle;
    }
    Entry::In(Entered { slot, idx })
}

/// The slot index of thread `tid` when `user` samples it. Async-signal-safe.
pub fn slot_of(tid: i32, user: User) -> Option<usize> {
    let idx = lookup(tid)?;
    let s = &SLOTS[idx];
    (s.state.load(Ordering::Acquire) == ACTIVE && s.users.load(Ordering::Acquire) & user != 0).then_some(idx)
}

/// The thread of slot `idx` now (0: none), without the registry: for a sampler that signals members
/// it keeps track of itself.
pub fn tid_of(idx: usize) -> i32 {
    SLOTS[idx].tid.load(Ordering::Acquire)
}

/// A registration that [`Registry::join`] made.
#[derive(Clone, Copy, Debug)]
pub struct Joined {
    pub idx: usize,
    /// The slot's generation: with the index, what the engine's own per-slot data belongs to.
    pub generation: u32,
    /// The user was not in the slot before: the engine sets up its part (a timer, a reference).
    pub added: bool,
}

/// Why [`Registry::join`] refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Refused {
    /// Every slot is taken.
    Full,
    /// A found thread ended during the search for running threads, or its tid now belongs to a thread
    /// registered on itself: the found registration is stale.
    Ended,
    /// The tid is not (or no longer) a thread of this process.
    NotOurs,
}

impl Refused {
    pub fn message(self) -> String {
        match self {
            Refused::Full => format!("more than {MAX_THREADS} threads at once"),
            Refused::Ended => "the thread ended".into(),
            Refused::NotOurs => "not a thread of this process".into(),
        }
    }
}

/// How [`Registry::leave`] ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Left {
    /// No handler of the slot runs: what the user kept for it may be released.
    Quiet,
    /// A handler still ran after [`QUIET_WAIT`]: keep what it may touch (never release it).
    Quarantined,
}

/// The held registry: registration and removal happen through it.
pub struct Registry(MutexGuard<'static, RegistryState>);

/// Takes the registry (a mutex; never from a signal handler).
pub fn registry() -> Registry {
    Registry(REGISTRY.lock().unwrap_or_else(|e| e.into_inner()))
}

impl Registry {
    /// Registers thread `tid` (JNIEnv `env`, samples below `root`) for `user`, with a frame buffer of at
    /// least `depth` entries. A thread registered on itself (`Started`) replaces a slot with the same tid
    /// and another JNIEnv (the tid of a thread that is gone, reused): every user is taken off it first.
    /// A found thread never replaces anything, and is refused if it ended during the search.
    pub fn join(
        &mut self,
        tid: i32,
        env: *mut c_void,
        root: u32,
        depth: u32,
        user: User,
        origin: Origin,
    ) -> Result<Joined, Refused> {
        if !crate::engine::stack::is_own_thread(tid) {
            return Err(Refused::NotOurs);
        }
        if let Some(idx) = lookup(tid).filter(|&i| SLOTS[i].state.load(Ordering::Acquire) == ACTIVE) {
            let slot = &SLOTS[idx];
            if slot.env.load(Ordering::Relaxed) == env {
                let before = slot.users.fetch_or(user, Ordering::SeqCst);
                return Ok(Joined {
                    idx,
                    generation: slot.generation.load(Ordering::Relaxed),
                    added: before & user == 0,
                });
            }
            if origin == Origin::Found {
                return Err(Refused::Ended);
            }
            // The thread this slot was made for is gone and its tid reused: the slot becomes the new
            // thread's, in a new generation, once no handler uses the old JNIEnv and every engine has
            // released what it kept for the old thread.
            let evicted = slot.users.swap(0, Ordering::SeqCst);
            if !wait_quiet(slot) {
                self.quarantine(idx);
                return self.claim(tid, env, root, depth, user);
            }
            evict(idx, evicted);
            slot.generation.fetch_add(1, Ordering::Relaxed);
            slot.env.store(env, Ordering::Relaxed);
            slot.root.store(root, Ordering::Relaxed);
            slot.path_len.store(0, Ordering::Relaxed);
            ensure_buffers(slot, depth);
            slot.users.store(user, Ordering::SeqCst);
            return Ok(Joined { idx, generation: slot.generation.load(Ordering::Relaxed), added: true });
        }
        if origin == Origin::Found && (self.0.ended_lost || self.0.ended.contains(&tid)) {
            return Err(Refused::Ended);
        }
        self.claim(tid, env, root, depth, user)
    }

    fn claim(&mut self, tid: i32, env: *mut c_void, root: u32, depth: u32, user: User) -> Result<Joined, Refused> {
        let idx = SLOTS
            .iter()
            .position(|s| {
                s.state.load(Ordering::Acquire) == FREE
                    && s.tid.load(Ordering::Relaxed) == 0
                    && !s.busy.load(Ordering::Acquire)
            })
            .ok_or(Refused::Full)?;
        let slot = &SLOTS[idx];
        ensure_buffers(slot, depth);
        slot.path_len.store(0, Ordering::Relaxed);
        slot.generation.fetch_add(1, Ordering::Relaxed);
        slot.tid.store(tid, Ordering::SeqCst);
        slot.env.store(env, Ordering::Relaxed);
        slot.root.store(root, Ordering::Relaxed);
        slot.users.store(user, Ordering::SeqCst);
        map_insert(tid, idx);
        // Published last: a handler checks the state after claiming `busy`, then reads the rest.
        slot.state.store(ACTIVE, Ordering::SeqCst);
        Ok(Joined { idx, generation: slot.generation.load(Ordering::Relaxed), added: true })
    }

    /// Takes `user` off slot `idx` and waits until no handler runs on it; the last user to leave frees the
    /// slot. After `Quiet`, no handler of `user` can touch anything the engine keeps for the slot.
    pub fn leave(&mut self, idx: usize, user: User) -> Left {
        let slot = &SLOTS[idx];
        if slot.state.load(Ordering::Acquire) == QUARANTINED {
            return Left::Quarantined;
        }
        let remaining = slot.users.fetch_and(!user, Ordering::SeqCst) & !user;
        if !wait_quiet(slot) {
            self.quarantine(idx);
            return Left::Quarantined;
        }
        if remaining == 0 && slot.state.load(Ordering::Acquire) == ACTIVE {
            slot.state.store(ENDING, Ordering::SeqCst);
            map_remove(slot.tid.load(Ordering::Relaxed), idx);
            slot.env.store(std::ptr::null_mut(), Ordering::Relaxed);
            slot.tid.store(0, Ordering::SeqCst);
            slot.state.store(FREE, Ordering::Release);
        }
        Left::Quiet
    }

    fn quarantine(&mut self, idx: usize) {
        let slot = &SLOTS[idx];
        slot.users.store(0, Ordering::SeqCst);
        slot.state.store(QUARANTINED, Ordering::SeqCst);
        map_remove(slot.tid.load(Ordering::Relaxed), idx);
        QUARANTINED_SLOTS.fetch_add(1, Ordering::Relaxed);
    }

    /// The slot of thread `tid` that `user` is in.
    pub fn find(&self, tid: i32, user: User) -> Option<usize> {
        lookup(tid).filter(|&i| SLOTS[i].users.load(Ordering::Acquire) & user != 0)
    }

    /// The slot of thread `tid` that `user` is in, if it was registered with JNIEnv `env` (a found
    /// thread's, not another thread's that has its tid since).
    pub fn find_with_env(&self, tid: i32, env: *mut c_void, user: User) -> Option<usize> {
        self.find(tid, user).filter(|&i| SLOTS[i].env.load(Ordering::Relaxed) == env)
    }

    /// The slots `user` is in.
    pub fn members(&self, user: User) -> Vec<usize> {
        (0..MAX_THREADS).filter(|&i| SLOTS[i].users.load(Ordering::Acquire) & user != 0).collect()
    }

    /// Thread `tid` of slot `idx`, and the slot's generation.
    pub fn tid(&self, idx: usize) -> (i32, u32) {
        (SLOTS[idx].tid.load(Ordering::Relaxed), SLOTS[idx].generation.load(Ordering::Relaxed))
    }

    /// A search for running threads starts: from now until [`Registry::end_search`], threads that end are
    /// remembered, and found threads among them refused.
    pub fn begin_search(&mut self) {
        self.0.passes += 1;
    }

    pub fn end_search(&mut self) {
        self.0.passes = self.0.passes.saturating_sub(1);
        if self.0.passes == 0 {
            self.0.ended = Vec::new();
            self.0.ended_lost = false;
        }
    }

    /// Thread `tid` ends (ThreadEnd, on itself). A found registration of it that comes later would hold
    /// a JNIEnv about to be freed: JVMTI posts ThreadEnd before `Thread.eetop` is cleared, so a search
    /// can still find an ending thread.
    pub fn note_ended(&mut self, tid: i32) {
        if self.0.passes == 0 {
            return;
        }
        if self.0.ended.len() < ENDED_KEPT {
            self.0.ended.push(tid);
        } else {
            self.0.ended_lost = true;
        }
    }
}

/// Waits until no handler holds `slot`, for at most [`QUIET_WAIT`]. Handlers never block, so they end;
/// spinning first keeps the common case (no handler, or one about to return) to a few loads.
fn wait_quiet(slot: &Slot) -> bool {
    for _ in 0..1000 {
        if !slot.busy.load(Ordering::SeqCst) {
            return true;
        }
        std::hint::spin_loop();
    }
    let deadline = Instant::now() + QUIET_WAIT;
    while slot.busy.load(Ordering::SeqCst) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Gives `slot` frame and path buffers of at least `depth` entries. An old, smaller buffer is leaked on
/// purpose: a handler may have been reading it. Slots are reused, so this happens at most once per slot
/// and depth.
fn ensure_buffers(slot: &Slot, depth: u32) {
    if slot.frames_len.load(Ordering::Relaxed) >= depth {
        return;
    }
    let buf: Box<[CallFrame]> =
        vec![CallFrame { lineno: 0, method_id: std::ptr::null_mut() }; depth as usize].into_boxed_slice();
    let path: Box<[PathEntry]> = vec![PathEntry { frame: 0, callsite: 0, node: 0 }; depth as usize].into_boxed_slice();
    slot.frames.store(Box::leak(buf).as_mut_ptr(), Ordering::Release);
    slot.path.store(Box::leak(path).as_mut_ptr(), Ordering::Release);
    slot.frames_len.store(depth, Ordering::Release);
}

/// Whether slot `idx` was quarantined: what engines keep for it must never be released.
pub fn is_quarantined(idx: usize) -> bool {
    SLOTS[idx].state.load(Ordering::Acquire) == QUARANTINED
}

/// Slots quarantined since the agent started.
pub fn quarantined() -> u64 {
    QUARANTINED_SLOTS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stack::gettid;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Tests that use the one table run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn own_tids(n: usize) -> (Vec<i32>, impl FnOnce()) {
        // Threads of this process that park until released: registrations need tids that are ours.
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for _ in 0..n {
            let tx = tx.clone();
            let stop = stop.clone();
            handles.push(std::thread::spawn(move || {
                tx.send(gettid()).unwrap();
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }));
        }
        let tids = (0..n).map(|_| rx.recv().unwrap()).collect();
        (tids, move || {
            stop.store(true, Ordering::Release);
            for h in handles {
                h.join().unwrap();
            }
        })
    }

    fn env(n: usize) -> *mut c_void {
        n as *mut c_void
    }

    #[test]
    fn join_lookup_leave_and_reuse() {
        let _s = SERIAL.lock().unwrap();
        let (tids, done) = own_tids(2);
        let mut reg = registry();
        let a = reg.join(tids[0], env(8), 1, 16, CPU, Origin::Started).unwrap();
        let b = reg.join(tids[1], env(16), 1, 16, CPU, Origin::Started).unwrap();
        assert_ne!(a.idx, b.idx);
        assert_eq!(lookup(tids[0]), Some(a.idx));
        // A second engine joins the same slot.
        let w = reg.join(tids[0], env(8), 1, 16, WALL, Origin::Started).unwrap();
        assert_eq!((w.idx, w.added), (a.idx, true));
        assert_eq!(reg.leave(a.idx, CPU), Left::Quiet);
        assert_eq!(lookup(tids[0]), Some(a.idx), "the wall engine still samples it");
        assert!(matches!(enter(tids[0], CPU), Entry::Idle));
        assert_eq!(reg.leave(a.idx, WALL), Left::Quiet);
        assert_eq!(lookup(tids[0]), None);
        // The tombstone does not hide entries further along the probe sequence.
        assert_eq!(lookup(tids[1]), Some(b.idx));
        assert_eq!(reg.leave(b.idx, CPU), Left::Quiet);
        for round in 0..20_000 {
            let j = reg.join(tids[round % 2], env(8), 1, 16, CPU, Origin::Started).unwrap();
            assert_eq!(lookup(tids[round % 2]), Some(j.idx));
            reg.leave(j.idx, CPU);
        }
        assert_eq!(lookup(tids[0]), None);
        drop(reg);
        done();
    }

    #[test]
    fn a_reused_tid_gets_the_new_threads_env_and_a_found_thread_never_replaces_one() {
        let _s = SERIAL.lock().unwrap();
        let (tids, done) = own_tids(1);
        let t = tids[0];
        let mut reg = registry();
        // Found at a session's start with one JNIEnv, then the same tid starts with another: the slot
        // is the new thread's, for the new generation, and the wall engine's old membership is gone.
        let found = reg.join(t, env(8), 1, 16, CPU, Origin::Found).unwrap();
        reg.join(t, env(8), 1, 16, WALL, Origin::Found).unwrap();
        let started = reg.join(t, env(24), 1, 16, CPU, Origin::Started).unwrap();
        assert_eq!(started.idx, found.idx);
        assert!(started.added && started.generation != found.generation);
        match enter(t, CPU) {
            Entry::In(e) => assert_eq!(e.env(), env(24)),
            _ => panic!("the started thread's slot is not active"),
        }
        assert!(matches!(enter(t, WALL), Entry::Idle));
        // A search that finds the tid with a stale JNIEnv changes nothing.
        assert_eq!(reg.join(t, env(8), 1, 16, WALL, Origin::Found).unwrap_err(), Refused::Ended);
        match enter(t, CPU) {
            Entry::In(e) => assert_eq!(e.env(), env(24)),
            _ => panic!("the started thread's slot was replaced"),
        }
        reg.leave(started.idx, CPU);
        drop(reg);
        done();
    }

    #[test]
    fn a_thread_that_ended_during_a_search_is_refused_and_other_processes_threads_too() {
        let _s = SERIAL.lock().unwrap();
        let (tids, done) = own_tids(2);
        let mut reg = registry();
        reg.begin_search();
        reg.note_ended(tids[0]);
        assert_eq!(reg.join(tids[0], env(8), 1, 16, CPU, Origin::Found).unwrap_err(), Refused::Ended);
        let ok = reg.join(tids[1], env(16), 1, 16, CPU, Origin::Found).unwrap();
        reg.end_search();
        reg.leave(ok.idx, CPU);
        let child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert_eq!(reg.join(child.id() as i32, env(8), 1, 16, CPU, Origin::Started).unwrap_err(), Refused::NotOurs);
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        drop(reg);
        done();
    }

    /// The handler protocol against teardown, with real signals: handlers that stay inside a slot for a
    /// long time (as one preempted for milliseconds would) while their slot is left and reused. A handler
    /// checks, on its way out, that the slot still belongs to its thread and generation: a release while
    /// a handler is inside would show as a slot given to another thread under it.
    #[test]
    fn no_slot_is_released_or_reused_while_a_handler_is_inside() {
        static INSIDE_NS: AtomicU64 = AtomicU64::new(0);
        static ENTERED: AtomicUsize = AtomicUsize::new(0);
        static BROKEN: AtomicUsize = AtomicUsize::new(0);
        extern "C" fn handler(_sig: libc::c_int, _info: *mut libc::siginfo_t, _uc: *mut c_void) {
            let tid = gettid();
            if let Entry::In(e) = enter(tid, CPU) {
                ENTERED.fetch_add(1, Ordering::Relaxed);
                let generation = SLOTS[e.idx].generation.load(Ordering::Relaxed);
                let until = crate::engine::stack::monotonic_ns() + INSIDE_NS.load(Ordering::Relaxed);
                while crate::engine::stack::monotonic_ns() < until {
                    std::hint::spin_loop();
                }
                let s = &SLOTS[e.idx];
                if s.tid.load(Ordering::SeqCst) != tid
                    || s.generation.load(Ordering::SeqCst) != generation
                    || s.state.load(Ordering::SeqCst) == FREE
                {
                    BROKEN.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let _s = SERIAL.lock().unwrap();
        let sig = libc::SIGUSR1;
        kprof_timers::signals::install(sig, handler, &[]).unwrap();
        let (tids, done) = own_tids(3);
        // Handlers that stay 300 ms: longer than a bounded spin (a million pauses is some 50 ms here),
        // shorter than the quiet wait.
        INSIDE_NS.store(300_000_000, Ordering::Relaxed);
        let signal_and_wait_inside = |tid: i32| {
            let before = ENTERED.load(Ordering::Relaxed);
            kprof_timers::signals::queue_to_thread(tid, sig, 0).unwrap();
            let t = Instant::now();
            while ENTERED.load(Ordering::Relaxed) == before {
                assert!(t.elapsed() < Duration::from_secs(10), "the handler never ran");
                std::thread::sleep(Duration::from_micros(100));
            }
        };
        for round in 0..6 {
            let victim = tids[round % 2];
            let joined = registry().join(victim, env(8), 1, 16, CPU, Origin::Started).unwrap();
            // Leave while the handler is inside, and at once give the slot to the other thread (the first
            // free slot is the one just freed).
            signal_and_wait_inside(victim);
            let t0 = Instant::now();
            let mut reg = registry();
            assert_eq!(reg.leave(joined.idx, CPU), Left::Quiet);
            let waited = t0.elapsed();
            let next = reg.join(tids[2], env(16), 1, 16, CPU, Origin::Started).unwrap();
            reg.leave(next.idx, CPU);
            drop(reg);
            assert!(waited >= Duration::from_millis(200), "round {round}: leave returned after {waited:?}");
        }
        assert_eq!(BROKEN.load(Ordering::Relaxed), 0, "a slot changed under a handler");

        // A handler that stays longer than the quiet wait: the slot is quarantined, never reused.
        INSIDE_NS.store(QUIET_WAIT.as_nanos() as u64 + 500_000_000, Ordering::Relaxed);
        let before = quarantined();
        let joined = registry().join(tids[0], env(8), 1, 16, CPU, Origin::Started).unwrap();
        signal_and_wait_inside(tids[0]);
        let mut reg = registry();
        assert_eq!(reg.leave(joined.idx, CPU), Left::Quarantined);
        assert_eq!(quarantined(), before + 1);
        let next = reg.join(tids[1], env(16), 1, 16, CPU, Origin::Started).unwrap();
        assert_ne!(next.idx, joined.idx, "a quarantined slot was reused");
        reg.leave(next.idx, CPU);
        drop(reg);
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(BROKEN.load(Ordering::Relaxed), 0, "a slot changed under a handler");
        done();
    }
}
