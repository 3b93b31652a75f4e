//! A fixed-size, zero-initialised array allocated once. The only `unsafe` of the CCT lives here.

use std::alloc::{self, Layout};
use std::ops::Index;
use std::ptr::NonNull;

/// `len` values of `T`, all bits zero at creation, never reallocated or moved.
///
/// `T` must be a type for which all-zero bytes are a valid value: the CCT only stores atomics here,
/// which are plain integers.
pub(super) struct Arena<T> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the arena owns its memory like a `Box<[T]>`; it is shared across threads only through `&T`,
// which needs `T: Sync` (atomics are).
unsafe impl<T: Send> Send for Arena<T> {}
// SAFETY: see above.
unsafe impl<T: Sync> Sync for Arena<T> {}

/// Types for which the all-zero bit pattern is a valid value.
///
/// # Safety
/// Implementors must be valid when zeroed.
#[allow(dead_code)] // only used as a bound, which the lint does not count
pub(super) unsafe trait Zeroable {}
// SAFETY: atomics are integers; zero is a valid value.
unsafe impl Zeroable for std::sync::atomic::AtomicU32 {}
// SAFETY: as above.
unsafe impl Zeroable for std::sync::atomic::AtomicU64 {}
// SAFETY: the CCT node is a struct of atomics only.
unsafe impl Zeroable for super::Node {}

impl<T: Zeroable> Arena<T> {
    /// Reserves `len` zeroed values; `None` if the memory cannot be had. Large zeroed allocations come
    /// from fresh anonymous mappings, so untouched pages cost nothing.
    pub(super) fn zeroed(len: usize) -> Option<Arena<T>> {
        let layout = Layout::array::<T>(len.max(1)).ok()?;
        // SAFETY: the layout has a non-zero size (len >= 1 and T is not zero-sized for our uses).
        let raw = unsafe { alloc::alloc_zeroed(layout) } as *mut T;
        NonNull::new(raw).map(|ptr| Arena { ptr, len: len.max(1) })
    }
}

impl<T> Arena<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Commits the pages of values `range` now, a few MiB per system call (Linux 5.14+; elsewhere nothing),
    /// rather than by a page fault at each first touch: for a thread about to touch most of them in random
    /// order, and alongside another doing the same, whose faults would contend with its own. Not in one call:
    /// the kernel holds the process's memory-map lock through each, and every thread that starts or ends
    /// (its stack is mapped and unmapped) would wait for all of a large table, a second or more.
    pub(super) fn populate(&self, range: std::ops::Range<usize>) {
        /// `MADV_POPULATE_WRITE` (not in every libc release).
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        const PAGE: usize = 4096;
        const CHUNK: usize = 4 << 20;
        let size = std::mem::size_of::<T>();
        let base = self.ptr.as_ptr() as usize;
        let start = base + range.start.min(self.len) * size;
        let end = base + range.end.min(self.len) * size;
        // Whole pages inside the range: the pages at its ends may hold other values, which fault as usual.
        let (start, end) = (start.next_multiple_of(PAGE), end & !(PAGE - 1));
        let mut at = start;
        while at < end {
            let len = CHUNK.min(end - at);
            // SAFETY: [at, at + len) lies inside this arena's allocation, which is readable and writable;
            // populating for write faults pages in (zeroed where new) without changing any value.
            unsafe { libc::madvise(at as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
            at += len;
        }
    }

    /// Gives the arena's whole pages back to the kernel: each value in them reads as zero afterwards
    /// (a valid value: `T` is [`Zeroable`]), and touching it again takes a fresh page.
    pub(super) fn discard(&self)
    where
        T: Zeroable,
    {
        const PAGE: usize = 4096;
        let base = self.ptr.as_ptr() as usize;
        let (start, end) = (base.next_multiple_of(PAGE), (base + self.bytes()) & !(PAGE - 1));
        if end > start {
            // SAFETY: [start, end) lies inside this arena's allocation and stays mapped; MADV_DONTNEED on
            // private anonymous memory only replaces its contents with zeros, a valid value of every `T`
            // here, which concurrent readers see as they would a store of zero to each atomic.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }

    /// A hint to load value `i` into the cache; out-of-range indices are ignored.
    #[inline]
    pub(super) fn prefetch(&self, i: usize) {
        if i < self.len {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch never faults and has no effect on memory; the address is in bounds anyway.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(self.ptr.as_ptr().add(i) as *const i8);
            }
        }
    }
}

impl<T> Index<usize> for Arena<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        assert!(i < self.len, "arena index out of range");
        // SAFETY: `i` is in bounds and the memory holds `len` initialised (zeroed, `Zeroable`) values that
        // live as long as `self`.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }
}

impl<T> Drop for Arena<T> {
    fn drop(&mut self) {
        let layout = Layout::array::<T>(self.len).expect("layout was valid at allocation");
        // SAFETY: allocated in `zeroed` with this same layout; the values need no drop (atomics).
        unsafe { alloc::dealloc(self.ptr.as_ptr() as *mut u8, layout) }
    }
}
