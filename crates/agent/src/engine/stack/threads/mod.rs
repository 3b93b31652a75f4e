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

mod map;

use map::{lookup, map_insert, map_remove};

/// Threads sampled at the same time, at most. More are counted and not sampled.
pub const MAX_THREADS: usize = 8192;

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

static SLOTS: [Slot; MAX_THREADS] = [EMPTY_SLOT; MAX_THREADS];
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
mod tests;
