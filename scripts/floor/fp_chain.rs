//! scripts/bytecode-floor's `fpwalk` variant (a measurement, not part of the agent): what a sample's walk of
//! the frame-pointer chain costs, the first half of a design that would decode only the frames that
//! changed since the thread's previous sample (docs/BENCHMARKS.md, 2026-11-29, "the frame-pointer chain").
//!
//! `Bc.walk` calls [`probe`] instead of the AsyncGetCallTrace walk and records no context: the variant's
//! profiles are meaningless, its time is the chain's cost. The build is made with frame pointers
//! (`-C force-frame-pointers=yes`) and run with `-XX:+PreserveFramePointer`, so that the chain runs from
//! this function through the JNI wrapper and every Java frame, compiled ones included.
//!
//! Each walk lists (frame pointer, return address) pairs from the top and compares them with the thread's
//! previous walk from the bottom; the frames above the longest common part are those a decoder would
//! have to read. With `KPROF_FLOOR_STATS=DIR` it writes, every 2^18 walks, the walks, frames and such
//! differing frames so far, and a histogram of the differing frames per walk, to `DIR/fpwalk.PID`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The chain is not followed further than this.
const MAX_FRAMES: usize = 4096;

struct Chain {
    previous: Vec<(usize, usize)>,
    current: Vec<(usize, usize)>,
    /// The highest address of the thread's stack (0 until read).
    stack_end: usize,
}

thread_local! {
    static CHAIN: RefCell<Chain> = const { RefCell::new(Chain { previous: Vec::new(), current: Vec::new(), stack_end: 0 }) };
}

static WALKS: AtomicU64 = AtomicU64::new(0);
static FRAMES: AtomicU64 = AtomicU64::new(0);
static DIFFERING: AtomicU64 = AtomicU64::new(0);
/// Walks whose differing frames were 0, 1, 2, 3, 4, 5-8, 9-16, 17 or more.
static HISTOGRAM: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

fn stack_end() -> usize {
    // SAFETY: pthread_getattr_np fills the zeroed attribute object of the calling thread, which is then
    // read and destroyed; no pointer outlives the block.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return 0;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if ok {
            addr as usize + size
        } else {
            0
        }
    }
}

/// Walks the calling thread's frame-pointer chain and compares it with its previous walk.
#[inline(never)]
pub(crate) fn probe() {
    let mut fp: usize;
    // SAFETY: reads the frame-pointer register; with frame pointers forced it is this function's frame.
    unsafe { std::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags)) };
    CHAIN.with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else { return };
        if c.stack_end == 0 {
            c.stack_end = stack_end();
        }
        let end = c.stack_end;
        let Chain { previous, current, .. } = &mut *c;
        current.clear();
        let mut low = fp;
        // Only addresses inside this thread's stack, above the frame before, aligned, are read.
        while fp >= low && fp & 7 == 0 && fp + 16 <= end && current.len() < MAX_FRAMES {
            // SAFETY: fp and fp + 8 lie in the calling thread's own stack, between this function's frame and
            // the stack's end (checked above), which is mapped for as long as the thread runs.
            let (next, ret) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
            current.push((fp, ret));
            low = fp + 16;
            fp = next;
        }
        let (a, b) = (current.len(), previous.len());
        let mut common = 0;
        while common < a && common < b && current[a - 1 - common] == previous[b - 1 - common] {
            common += 1;
        }
        let differing = a - common;
        std::mem::swap(previous, current);
        let walks = WALKS.fetch_add(1, Ordering::Relaxed) + 1;
        FRAMES.fetch_add(a as u64, Ordering::Relaxed);
        DIFFERING.fetch_add(differing as u64, Ordering::Relaxed);
        let bucket = match differing {
            0..=4 => differing,
            5..=8 => 5,
            9..=16 => 6,
            _ => 7,
        };
        HISTOGRAM[bucket].fetch_add(1, Ordering::Relaxed);
        if walks & 0x3FFFF == 0 {
            report(walks);
        }
    });
}

fn report(walks: u64) {
    static DIR: OnceLock<Option<String>> = OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| std::env::var("KPROF_FLOOR_STATS").ok()) else { return };
    let histogram: Vec<u64> = HISTOGRAM.iter().map(|h| h.load(Ordering::Relaxed)).collect();
    let line = format!(
        "walks={walks} frames={} differing={} histogram(0,1,2,3,4,5-8,9-16,17+)={histogram:?}\n",
        FRAMES.load(Ordering::Relaxed),
        DIFFERING.load(Ordering::Relaxed)
    );
    let _ = std::fs::write(format!("{dir}/fpwalk.{}", std::process::id()), line);
}
