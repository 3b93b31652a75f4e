//! The thread states wall samples record, and their labels.

use crate::jvmti::bindings::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// A thread's state as a wall sample records it, from JVMTI `GetThreadState`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum State {
    /// Runnable in Java code or in the VM (on a CPU or waiting for one).
    Running = 0,
    /// Runnable in native code: a JNI method, or a blocking system call (socket and file I/O).
    Native,
    /// In `Thread.sleep`.
    Sleeping,
    /// In `Object.wait` (and `Thread.join`, which waits so), or another indefinite or timed wait.
    Waiting,
    /// Parked (`LockSupport.park`: java.util.concurrent locks, queues, idle pool workers).
    Parked,
    /// Blocked entering a contended `synchronized` monitor.
    Blocked,
    /// Runnable to JVMTI (not in native code) but asleep in the kernel: a wait inside the VM itself, such as
    /// the JVM's own threads' (Signal Dispatcher, Notification Thread, Reference Handler on JDK 25) or a
    /// thread waiting out a safepoint. Found by the sampler ([`super::sampler`]), not by JVMTI.
    VmWait,
    /// The state could not be read.
    Unknown,
}

/// The labels samples carry, by [`State`].
pub const STATE_LABELS: [&str; 8] = [
    "[state running]",
    "[state native]",
    "[state sleeping]",
    "[state waiting]",
    "[state parked]",
    "[state blocked]",
    "[state vm_wait]",
    "[state unknown]",
];

impl State {
    /// Whether a thread in this state runs no Java code until it leaves it (sleeping, waiting, parked,
    /// blocked, in native code or waiting in the VM): its Java stack stays as it is, and HotSpot lets
    /// another thread read it without stopping or waking it.
    pub fn off_java(self) -> bool {
        matches!(
            self,
            State::Native | State::Sleeping | State::Waiting | State::Parked | State::Blocked | State::VmWait
        )
    }

    /// The state of JVMTI state bits `s` (of a live thread).
    pub fn of(s: u32) -> State {
        if s & JVMTI_THREAD_STATE_BLOCKED_ON_MONITOR_ENTER != 0 {
            State::Blocked
        } else if s & JVMTI_THREAD_STATE_SLEEPING != 0 {
            State::Sleeping
        } else if s & JVMTI_THREAD_STATE_PARKED != 0 {
            State::Parked
        } else if s & (JVMTI_THREAD_STATE_WAITING | JVMTI_THREAD_STATE_IN_OBJECT_WAIT) != 0 {
            State::Waiting
        } else if s & JVMTI_THREAD_STATE_RUNNABLE != 0 {
            if s & JVMTI_THREAD_STATE_IN_NATIVE != 0 {
                State::Native
            } else {
                State::Running
            }
        } else {
            State::Unknown
        }
    }

    pub(super) fn from_u8(v: u8) -> State {
        [State::Running, State::Native, State::Sleeping, State::Waiting, State::Parked, State::Blocked, State::VmWait]
            .get(v as usize)
            .copied()
            .unwrap_or(State::Unknown)
    }
}

/// The label frames, made once at the first start (labels are interned under a lock: never in the
/// handler, which reads these).
#[allow(clippy::declare_interior_mutable_const)]
const NO_LABEL: AtomicU64 = AtomicU64::new(0);
pub(super) static LABEL_IDS: [AtomicU64; 8] = [NO_LABEL; 8];

pub(super) fn make_labels() {
    for (i, name) in STATE_LABELS.iter().enumerate() {
        LABEL_IDS[i].store(crate::frame::label(name).0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_the_jvmti_bits() {
        let alive = JVMTI_THREAD_STATE_ALIVE;
        let waiting = alive | JVMTI_THREAD_STATE_WAITING;
        assert_eq!(State::of(alive | JVMTI_THREAD_STATE_RUNNABLE), State::Running);
        assert_eq!(State::of(alive | JVMTI_THREAD_STATE_RUNNABLE | JVMTI_THREAD_STATE_IN_NATIVE), State::Native);
        assert_eq!(
            State::of(waiting | JVMTI_THREAD_STATE_SLEEPING | JVMTI_THREAD_STATE_WAITING_WITH_TIMEOUT),
            State::Sleeping
        );
        assert_eq!(State::of(waiting | JVMTI_THREAD_STATE_IN_OBJECT_WAIT), State::Waiting);
        assert_eq!(
            State::of(waiting | JVMTI_THREAD_STATE_PARKED | JVMTI_THREAD_STATE_WAITING_INDEFINITELY),
            State::Parked
        );
        assert_eq!(State::of(alive | JVMTI_THREAD_STATE_BLOCKED_ON_MONITOR_ENTER), State::Blocked);
        assert_eq!(State::of(alive), State::Unknown);
        for s in [
            State::Running,
            State::Native,
            State::Sleeping,
            State::Waiting,
            State::Parked,
            State::Blocked,
            State::VmWait,
        ] {
            assert_eq!(State::from_u8(s as u8), s);
            assert!(STATE_LABELS[s as usize].starts_with("[state "));
        }
        assert_eq!(State::from_u8(State::Unknown as u8), State::Unknown);
        assert_eq!(STATE_LABELS[State::Unknown as usize], "[state unknown]");
    }
}
