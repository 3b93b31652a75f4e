//! scripts/bytecode-floor's `fpwalk` and `fpdecode` variants (a measurement, not part of the agent): what a
//! sample's walk of the frame-pointer chain costs, the first half of a design that would decode only the
//! frames that changed since the thread's previous sample (docs/bytecode.md, "A third way"; the figures in
//! docs/BENCHMARKS.md, "What a walk from the sample's native call could save at gran=10000").
//!
//! `Bc.walk` calls [`probe`] instead of the AsyncGetCallTrace walk and records no context: the variant's
//! profiles are meaningless, its time is the chain's cost. The build is made with frame pointers
//! (`-C force-frame-pointers=yes`) and run with `-XX:+PreserveFramePointer`, so that the chain runs from
//! this function through the JNI wrapper and every Java frame, compiled ones included.
//!
//! Each walk lists (frame pointer, return address) pairs from the top and compares them with the thread's
//! previous walk from the bottom; the frames above the longest common part are those a decoder would
//! have to read (`fpdecode` also looks each of them up, see [`DECODE`]). With `KPROF_FLOOR_STATS=DIR` it
//! writes, every 2^18 walks, the walks, frames and such differing frames so far, and a histogram of the
//! differing frames per walk, to `DIR/fpwalk.PID` (each thread adds its counts every 2^14 walks).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The chain is not followed further than this.
const MAX_FRAMES: usize = 4096;

struct Chain {
    previous: Vec<(usize, usize)>,
    current: Vec<(usize, usize)>,
    /// The highest address of the thread's stack (0 until read).
    stack_end: usize,
    /// This thread's counts since it last added them to the shared ones (walks, frames, differing, histogram).
    counts: [u64; 11],
    /// `fpdecode`: what a decoder would write out for the context, one entry per frame.
    ids: Vec<u32>,
}

thread_local! {
    static CHAIN: RefCell<Chain> = const {
        RefCell::new(Chain { previous: Vec::new(), current: Vec::new(), stack_end: 0, counts: [0; 11], ids: Vec::new() })
    };
}

/// Walks between two additions of a thread's counts to the shared ones (shared counters touched at every
/// walk would bounce between the cores and be part of what is measured).
const FLUSH: u64 = 1 << 14;

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
        let Chain { previous, current, ids, counts, .. } = &mut *c;
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
        if DECODE {
            // What a decoder's steady state would do: one look-up by return address per frame that
            // changed (kprof's own native frames at the top too, which a decoder would skip), and the
            // context written out.
            for &(_, ret) in &current[..differing] {
                std::hint::black_box(decoded(ret));
            }
            fill(ids, a);
        }
        std::mem::swap(previous, current);
        let bucket = match differing {
            0..=4 => differing,
            5..=8 => 5,
            9..=16 => 6,
            _ => 7,
        };
        counts[0] += 1;
        counts[1] += a as u64;
        counts[2] += differing as u64;
        counts[3 + bucket] += 1;
        if counts[0] == FLUSH {
            let walks = WALKS.fetch_add(FLUSH, Ordering::Relaxed) + FLUSH;
            FRAMES.fetch_add(counts[1], Ordering::Relaxed);
            DIFFERING.fetch_add(counts[2], Ordering::Relaxed);
            for (h, n) in HISTOGRAM.iter().zip(&counts[3..]) {
                h.fetch_add(*n, Ordering::Relaxed);
            }
            *counts = [0; 11];
            if walks & 0x3FFFF == 0 {
                report(walks);
            }
        }
    });
}

/// `fpdecode` (the variant sets it): each walk also looks up every changed frame in a table keyed by
/// return address, as a decoder that remembers what it decoded would, and writes a context out. The
/// table is open addressing over atomic slots, as the walk's method-kind cache (`walk.rs`) is.
const DECODE: bool = false;

/// Slots of the return-address table (a power of two).
const SLOTS: usize = 1 << 16;
/// Probes before a return address is given up (not remembered).
const PROBES: usize = 8;

struct Decoded {
    keys: Box<[AtomicUsize]>,
    values: Box<[AtomicU32]>,
}

/// What the table holds for `ret`, remembering a new value for it if it held none.
fn decoded(ret: usize) -> u32 {
    static TABLE: OnceLock<Decoded> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let table = TABLE.get_or_init(|| Decoded {
        keys: (0..SLOTS).map(|_| AtomicUsize::new(0)).collect(),
        values: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
    });
    let home = (ret.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) & (SLOTS - 1);
    for p in 0..PROBES {
        let slot = (home + p) & (SLOTS - 1);
        let key = table.keys[slot].load(Ordering::Acquire);
        if key == ret {
            return table.values[slot].load(Ordering::Acquire);
        }
        if key == 0 && table.keys[slot].compare_exchange(0, ret, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let value = NEXT.fetch_add(1, Ordering::Relaxed);
            table.values[slot].store(value, Ordering::Release);
            return value;
        }
    }
    0
}

/// Writes `n` entries, as assembling a context of that many ids from the decoded frames would.
fn fill(ids: &mut Vec<u32>, n: usize) {
    ids.clear();
    ids.extend((0..n as u32).map(std::hint::black_box));
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
