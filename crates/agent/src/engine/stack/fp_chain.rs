//! A thread's walk of its own frame-pointer chain: each frame's saved frame pointer and return address,
//! from the calling native function up to the thread's first frame.
//!
//! With `-XX:+PreserveFramePointer` every Java frame keeps `rbp` as its frame pointer (interpreted,
//! compiled, native wrappers, stubs), as does libjvm, and kprof is built with frame pointers
//! (`.cargo/config.toml`). Reading the chain is only sound within the thread's own stack: every word read
//! lies between the walking function's frame and the top of the stack, which is mapped memory the thread
//! is using; a frame pointer that leaves that range, or does not grow, ends the walk as broken.

/// The deepest chain walked.
pub const MAX_CHAIN: usize = 1 << 16;

/// The interpreter keeps a frame's `Method*` three words below its frame pointer
/// (`frame::interpreter_frame_method_offset` on x86-64).
const INTERPRETER_METHOD_SLOT: usize = 3 * 8;

/// The top (highest address, exclusive) of the calling thread's stack, or None.
pub fn stack_top() -> Option<usize> {
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread; pthread_attr_getstack reads it into
    // our locals; the attribute object is destroyed after use.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut base: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut base, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        (ok && !base.is_null()).then(|| base as usize + size)
    }
}

/// The frame pointer of the function this is inlined into.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: reads a register; no memory is touched.
    unsafe { std::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    fp
}

/// How a walk ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Walked {
    /// At the thread's first frame (a saved frame pointer of 0).
    Whole,
    /// Where the caller's `stop` said so, before reading that frame.
    Stopped,
    /// The chain left the stack, did not grow, or was deeper than [`MAX_CHAIN`].
    Broken,
}

/// One step of the chain: the words read at a frame pointer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Link {
    /// The frame pointer the words were read at.
    pub at: usize,
    /// The return address saved there: where in its code the caller stands.
    pub pc: usize,
    /// The caller's frame pointer saved there.
    pub fp: usize,
}

/// A walk of the chain (see [`Chain::walk`]).
pub struct Chain {
    /// The links read, innermost first.
    pub links: Vec<Link>,
    /// The lowest address read: the walk's first frame pointer.
    low: usize,
    /// The stack's top.
    high: usize,
}

impl Chain {
    pub fn new() -> Self {
        Chain { links: Vec::new(), low: 0, high: 0 }
    }

    /// Sets the bounds of the walk [`Chain::walk`] is about to make (for [`Chain::still_above`] before it).
    pub fn begin(&mut self, fp: usize, high: usize) {
        self.low = fp;
        self.high = high;
    }

    /// Walks from the frame pointer `fp` of a function of the calling thread (still running: its frame
    /// and those of its callers are live) towards the frame whose saved frame pointer is 0, the thread's
    /// first; `high` is the top of the thread's stack ([`stack_top`]). Before reading a frame, asks
    /// `stop` whether to end there.
    pub fn walk(&mut self, fp: usize, high: usize, mut stop: impl FnMut(usize) -> bool) -> Walked {
        self.links.clear();
        self.low = fp;
        self.high = high;
        let mut at = fp;
        loop {
            if !self.readable(at, 16) || self.links.len() >= MAX_CHAIN {
                return Walked::Broken;
            }
            if stop(at) {
                return Walked::Stopped;
            }
            // SAFETY: `readable`: two words between the walking function's own frame pointer and the top
            // of this thread's stack, memory of the live part of the stack, mapped and readable.
            let (fp, pc) = unsafe { ((at as *const usize).read(), ((at + 8) as *const usize).read()) };
            self.links.push(Link { at, pc, fp });
            if fp == 0 {
                return Walked::Whole;
            }
            if fp <= at {
                return Walked::Broken;
            }
            at = fp;
        }
    }

    /// Whether `bytes` at `at` lie in the live part of the stack this walk covers, word-aligned.
    fn readable(&self, at: usize, bytes: usize) -> bool {
        at % 8 == 0 && at >= self.low && at.checked_add(bytes).is_some_and(|end| end <= self.high)
    }

    /// Whether the words an earlier walk of this thread (with the same stack top, so `link.at` is aligned
    /// and below it) read for `link` still hold what it says; false for a link below this walk's start.
    #[inline]
    pub fn still_above(&self, link: &Link) -> bool {
        if link.at < self.low {
            return false;
        }
        debug_assert!(self.readable(link.at, 16));
        // SAFETY: `link.at` is word-aligned and two words below the stack's top (an earlier walk's
        // `readable` with the same top), and not below this walk's start: live stack memory.
        unsafe { (link.at as *const usize).read() == link.fp && ((link.at + 8) as *const usize).read() == link.pc }
    }

    /// The `Method*` an interpreter frame whose frame pointer is `fp` (one of this walk's, or of the part
    /// of an earlier walk found unchanged) runs, or 0.
    pub fn interpreter_method(&self, fp: usize) -> usize {
        let Some(slot) = fp.checked_sub(INTERPRETER_METHOD_SLOT) else { return 0 };
        if !self.readable(slot, 8) {
            return 0;
        }
        // SAFETY: `readable`, as in `walk`.
        unsafe { (slot as *const usize).read() }
    }
}

impl Default for Chain {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn walk_here(chain: &mut Chain) -> Walked {
        chain.walk(frame_pointer(), stack_top().expect("stack"), |_| false)
    }

    /// As `stack=fp` walks: checks that `outer` still holds, then walks down to its innermost link.
    #[inline(never)]
    fn walk_to(chain: &mut Chain, outer: &[Link]) -> (bool, Walked) {
        let (fp, top) = (frame_pointer(), stack_top().expect("stack"));
        chain.begin(fp, top);
        let holds = outer.iter().all(|l| chain.still_above(l));
        (holds, chain.walk(fp, top, |at| at == outer[0].at))
    }

    #[test]
    fn a_test_threads_chain_reaches_its_first_frame() {
        // The test binary is built with frame pointers (.cargo/config.toml); the test runner's thread
        // starts in libc, whose first frame has a zero frame pointer.
        let mut chain = Chain::new();
        let walked = walk_here(&mut chain);
        let links = chain.links.clone();
        assert!(links.len() >= 3, "{} links", links.len());
        assert_eq!(walked, Walked::Whole, "chain broken after {} links", links.len());
        assert!(links.windows(2).all(|w| w[0].fp == w[1].at && w[0].at < w[1].at));
        // The links outside this function's frame still hold, and a walk from another call stops at the
        // innermost of them.
        let (holds, walked) = walk_to(&mut chain, &links[2..]);
        assert!(holds && walked == Walked::Stopped, "{holds} {walked:?}");
        assert!(!chain.links.is_empty() && chain.links.iter().all(|l| l.at < links[2].at));
        // A link that no longer holds is seen as such.
        assert!(!chain.still_above(&Link { pc: links[2].pc ^ 1, ..links[2] }));
    }
}
