//! The thread id → slot map of the thread table: open addressing over atomics, read by signal handlers
//! without a lock, written under the registry.

use super::MAX_THREADS;
use std::sync::atomic::{AtomicU64, Ordering};

pub(super) const MAP_SIZE: usize = MAX_THREADS * 4;
const MAP_EMPTY: u64 = 0;
const MAP_TOMBSTONE: u64 = u64::MAX;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ENTRY: AtomicU64 = AtomicU64::new(MAP_EMPTY);

/// tid → slot: entries pack `(tid << 32) | (slot + 1)`.
static MAP: [AtomicU64; MAP_SIZE] = [EMPTY_ENTRY; MAP_SIZE];

fn map_start(tid: i32) -> usize {
    ((tid as u32).wrapping_mul(0x9E37_79B9) as usize) % MAP_SIZE
}

/// The slot index of thread `tid`, if mapped. Async-signal-safe: atomic loads only.
#[inline]
pub(super) fn lookup(tid: i32) -> Option<usize> {
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
pub(super) fn map_insert(tid: i32, idx: usize) {
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
pub(super) fn map_remove(tid: i32, idx: usize) {
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
