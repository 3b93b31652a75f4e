//! The wall signal's handler and the per-thread ring of picks it takes: what the sampler hands each
//! thread (its state at the pick and the pick's weight) and how the handler turns it into samples.

use super::sampler::WallSampler;
use super::state::{State, LABEL_IDS};
use crate::cct::Metric;
use crate::engine::stack::threads::{self, Entry, MAX_THREADS, WALL};
use crate::engine::stack::{self, monotonic_ns, ErrnoGuard, Walk};
use crate::frame::FrameId;
use kprof_timers::{gettid, signals, SigInfo};
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// The top half of the wall signal's `si_value`; the bottom half is the slot.
pub(super) const WALL_TAG: u64 = 0x6b77_616c << 32;

/// Picks of a thread that its handler has not taken yet, at most (a thread that has not run for this many
/// intervals: the sampler waits before it picks it again).
pub(super) const PENDING: usize = 8;

/// What the wall engine keeps per slot of the shared thread table.
pub(super) struct WallSlot {
    /// The slot generation this entry belongs to.
    pub(super) generation: AtomicU32,
    /// A global reference to the `java.lang.Thread` (for `GetThreadState`), or null.
    pub(super) thread: AtomicPtr<c_void>,
    pub(super) tid: AtomicI32,
    /// When the sampler last picked the thread (or registered it). The sampler's alone.
    pub(super) last_pick_ns: AtomicU64,
    /// Picks waiting for the handler, a ring written by the sampler (`head`) and read by the handler on
    /// the thread (`tail`): each the thread's [`State`] at the pick and the time since its previous pick.
    /// A handler that runs late (the thread waited for a CPU, or its signal merged with the next) takes
    /// every pick since, each with its own state and weight, so no pick's time moves to another state.
    pub(super) picks: [AtomicU64; PENDING],
    pub(super) head: AtomicU32,
    pub(super) tail: AtomicU32,
    /// The node of the thread's previous pick (0: none yet). The handler's alone.
    pub(super) last_leaf: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_PICK: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NO_WALL_SLOT: WallSlot = WallSlot {
    generation: AtomicU32::new(0),
    thread: AtomicPtr::new(std::ptr::null_mut()),
    tid: AtomicI32::new(0),
    last_pick_ns: AtomicU64::new(0),
    picks: [NO_PICK; PENDING],
    head: AtomicU32::new(0),
    tail: AtomicU32::new(0),
    last_leaf: AtomicU32::new(0),
};

/// A pick as the ring keeps it: the state in the top byte, the weight (nanoseconds) below.
pub(super) fn pack_pick(state: State, weight_ns: u64) -> u64 {
    ((state as u64) << 56) | weight_ns.min((1 << 56) - 1)
}

fn unpack_pick(p: u64) -> (State, u64) {
    (State::from_u8((p >> 56) as u8), p & ((1 << 56) - 1))
}

pub(super) static WALL_SLOTS: [WallSlot; MAX_THREADS] = [NO_WALL_SLOT; MAX_THREADS];

impl WallSampler {
    /// The signal handler's work: one wall sample of the interrupted thread.
    ///
    /// # Safety
    /// `ucontext` must be what the kernel passed to the SA_SIGINFO handler.
    pub(super) unsafe fn on_signal(&self, ucontext: *mut c_void) {
        let t0 = monotonic_ns();
        let slot = match threads::enter(gettid(), WALL) {
            Entry::In(slot) => slot,
            Entry::Busy | Entry::Unknown => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Entry::Idle => return,
        };
        if !self.running.load(Ordering::Acquire) {
            return;
        }
        let ws = &WALL_SLOTS[slot.idx];
        let tail = ws.tail.load(Ordering::Relaxed);
        let head = ws.head.load(Ordering::Acquire);
        if head == tail {
            // Its picks were taken by the handler of an earlier signal that this one was merged behind.
            return;
        }
        // SAFETY: on the slot's own thread, in its handler, with the kernel's context.
        let walk = unsafe { self.walker.walk(&slot, ucontext) };
        let node = stack::record_stack(self.cct, &slot, slot.root(), &walk);
        let mut taken = 0;
        let mut i = tail;
        while i != head {
            let (state, weight) = unpack_pick(ws.picks[i as usize % PENDING].load(Ordering::Relaxed));
            let label = FrameId(LABEL_IDS[state as usize].load(Ordering::Acquire));
            let leaf = if node == self.cct.overflow() {
                node
            } else {
                self.cct.child(node, label, -1).unwrap_or(self.cct.overflow())
            };
            // The time between two picks is split between them: a state change anywhere in it is then
            // counted right on average, whereas giving it all to the later pick would favour the states
            // that tend to follow a long gap (a sampler held up by a phase that keeps the CPUs busy).
            let previous = ws.last_leaf.swap(leaf, Ordering::Relaxed);
            let own = if previous == 0 { weight } else { weight - weight / 2 };
            if previous != 0 {
                self.cct.add(previous, Metric::Wall, weight / 2);
            }
            self.cct.add_events(leaf, Metric::WallSamples, 1, Metric::Wall, own);
            taken += 1;
            i = i.wrapping_add(1);
        }
        ws.tail.store(head, Ordering::Release);
        if matches!(walk, Walk::Stack { .. }) {
            self.stats.usable.fetch_add(taken, Ordering::Relaxed);
        }
        self.stats.samples.fetch_add(taken, Ordering::Relaxed);
        self.stats.handler_ns.fetch_add(monotonic_ns().saturating_sub(t0), Ordering::Relaxed);
    }
}

/// Whether a signal is the wall sampler's: queued by this process with its tag.
fn is_wall_signal(si: &SigInfo) -> bool {
    si.code == signals::SI_QUEUE && si.pid == signals::process_id() && si.value & !0xffff_ffff == WALL_TAG
}

pub(super) extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ucontext: *mut c_void) {
    let _errno = ErrnoGuard::save();
    // SAFETY: the kernel passed `info` to this SA_SIGINFO handler.
    let si = unsafe { SigInfo::read(info) };
    if !is_wall_signal(&si) {
        // SAFETY: forwarded from the kernel.
        unsafe { signals::chain(sig, info, ucontext) };
        return;
    }
    if let Some(s) = WallSampler::get() {
        // SAFETY: the kernel passed `ucontext` to this SA_SIGINFO handler.
        unsafe { s.on_signal(ucontext) };
    }
}
