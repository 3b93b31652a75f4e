//! A thread's walk of its own stack from a native call of its own (an allocation sample, the end of a
//! lock wait, bytecode mode's sample), in JVMTI's frame format (innermost first, native methods at
//! location -1).
//!
//! AsyncGetCallTrace ([`super::own_stack`]) reads the frames from the stack, some 0.16–0.19 µs a frame
//! here, where JVMTI GetStackTrace builds a Java frame object for each (0.3 µs, docs/bytecode.md); both
//! report the same methods and bcis. AsyncGetCallTrace may end a walk early without saying so (a frame
//! whose sender it does not trust: Java code the VM called from a runtime stub, as when compiled code
//! throws an exception the VM makes), and on a virtual thread sees only the frames on its carrier's
//! stack, so a walk counts only where its outermost method is the one of the thread's last walk that
//! JVMTI made or confirmed, and the caller's check of the frames (bytecode mode's: no carrier frame)
//! passes; any other walk, and one with a frame without a method id, is made again by JVMTI. A thread
//! whose walks keep disagreeing with JVMTI's (a carrier of virtual threads) goes to JVMTI directly.
//!
//! AsyncGetCallTrace walks only from a last Java frame HotSpot has marked walkable: a JNI call's (the lock
//! engine's parks and bytecode mode's samples, which end in a native method), the interpreter's; not a
//! runtime call's from compiled code (most allocation samples, monitors entered from compiled code),
//! where it returns at once without frames and JVMTI walks.

use super::threads::CallFrame;
use crate::jvmti::bindings::*;
use crate::jvmti::{Jni, Jvmti, JvmtiResult};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Frames asked for first; a deeper stack is asked for again, with room for all of it (up to `want`).
const INITIAL_FRAMES: usize = 128;

/// Walks made by the walkers that count into it, and of them those JVMTI made.
pub(crate) struct WalkCounts {
    walks: AtomicU64,
    by_jvmti: AtomicU64,
}

impl WalkCounts {
    pub(crate) const fn new() -> Self {
        Self { walks: AtomicU64::new(0), by_jvmti: AtomicU64::new(0) }
    }

    /// (walks, walks JVMTI made) since the agent started.
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.walks.load(Relaxed), self.by_jvmti.load(Relaxed))
    }
}

/// The walks of the engines that record at an event on the thread (alloc, lock).
pub(crate) static EVENT_WALKS: WalkCounts = WalkCounts::new();

/// Walks in a row whose outermost frame AsyncGetCallTrace and JVMTI disagreed on, after which a thread
/// walks with JVMTI only.
const MISSES_TO_GIVE_UP: u32 = 8;

/// Per-thread state of own-stack walks: buffers, and what the last trusted walk ended in.
pub(crate) struct OwnStack {
    counts: &'static WalkCounts,
    frames: Vec<jvmtiFrameInfo>,
    call_frames: Vec<CallFrame>,
    /// The outermost method of the thread's last walk JVMTI made or confirmed.
    bottom: Option<jmethodID>,
    misses: u32,
    /// The last AsyncGetCallTrace call gave frames (it gives none, cheaply, where the thread's last Java
    /// frame is not marked walkable: at an allocation or a monitor entered from compiled code's runtime
    /// calls, which JVMTI then walks).
    walked: bool,
}

/// A walk: the frames, innermost first, and whether AsyncGetCallTrace made it.
pub(crate) struct Walk<'a> {
    pub frames: &'a [jvmtiFrameInfo],
    pub by_asgct: bool,
}

impl OwnStack {
    /// A thread's walker, counting its walks into `counts`.
    pub(crate) fn new(counts: &'static WalkCounts) -> Self {
        Self { counts, frames: Vec::new(), call_frames: Vec::new(), bottom: None, misses: 0, walked: false }
    }

    /// The calling thread's stack, up to `want` frames (innermost first). `fast`: AsyncGetCallTrace may be
    /// tried ([`super::enable_own_stack_walks`] succeeded); its walk is kept only if `trust` holds for its
    /// frames as well.
    pub(crate) fn walk(
        &mut self,
        jni: Jni,
        jvmti: Jvmti,
        want: usize,
        fast: bool,
        trust: &mut dyn FnMut(&[jvmtiFrameInfo]) -> bool,
    ) -> JvmtiResult<Walk<'_>> {
        self.counts.walks.fetch_add(1, Relaxed);
        self.walked = false;
        // A walk cut at `want` frames needs no earlier walk to check its end against (a thread's first
        // walks may be such, from stack=fp); a whole one without it is made again by JVMTI below.
        if fast && self.misses < MISSES_TO_GIVE_UP {
            if let Some(n) = self.by_asgct(jni, want) {
                if trust(&self.frames[..n]) {
                    self.misses = 0;
                    return Ok(Walk { frames: &self.frames[..n], by_asgct: true });
                }
            }
        }
        self.counts.by_jvmti.fetch_add(1, Relaxed);
        let n = self.by_jvmti(jvmti, want)?;
        let frames = &self.frames[..n];
        if n < want {
            // The whole stack: its outermost frame is the thread's.
            let outermost = frames.last().map(|f| f.method);
            if fast && self.walked && self.bottom.is_some() {
                // AsyncGetCallTrace's walk was refused although the thread's stack still ends where it did.
                self.misses = if outermost == self.bottom { self.misses + 1 } else { 0 };
            }
            self.bottom = outermost;
        }
        Ok(Walk { frames, by_asgct: false })
    }

    /// The walk by AsyncGetCallTrace into `frames`, if it ends where it should and has a method for every
    /// frame; its length.
    fn by_asgct(&mut self, jni: Jni, want: usize) -> Option<usize> {
        let blank = CallFrame { lineno: 0, method_id: std::ptr::null_mut() };
        if self.call_frames.is_empty() {
            self.call_frames.resize(want.min(INITIAL_FRAMES), blank);
        }
        let n = loop {
            let len = self.call_frames.len().min(want);
            let n = super::own_stack(jni, &mut self.call_frames[..len])?;
            self.walked = true;
            if n < len || len >= want {
                break n;
            }
            self.call_frames.resize((len * 4).min(want), blank);
        };
        let walked = &self.call_frames[..n];
        // A walk cut at `want` frames ends where the cut is, not early; a whole walk must end where the
        // thread's trusted walks end. Java frames have a bci (0 or more), native ones -3.
        let whole = n < want;

        if (whole && walked.last().map(|f| f.method_id as jmethodID) != self.bottom)
            || walked.iter().any(|f| f.method_id.is_null() || (f.lineno < 0 && f.lineno != -3))
        {
            return None;
        }
        self.frames.clear();
        self.frames.extend(walked.iter().map(|f| jvmtiFrameInfo {
            method: f.method_id as jmethodID,
            location: if f.lineno == -3 { -1 } else { f.lineno as jlocation },
        }));
        Some(n)
    }

    /// JVMTI GetStackTrace of the calling thread into `frames`; its length.
    fn by_jvmti(&mut self, jvmti: Jvmti, want: usize) -> JvmtiResult<usize> {
        if self.frames.len() < want.min(INITIAL_FRAMES) {
            self.frames.resize(want.min(INITIAL_FRAMES), jvmtiFrameInfo::default());
        }
        loop {
            let len = self.frames.len().min(want);
            let n = jvmti.current_stack_trace(&mut self.frames[..len])?;
            if n < len || len >= want {
                return Ok(n);
            }
            self.frames.resize((len * 4).min(want), jvmtiFrameInfo::default());
        }
    }
}
