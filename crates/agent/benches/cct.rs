//! CCT micro-benchmark: inserts per second from two threads, and bytes per node.
//!
//! `cargo bench --bench cct`. Each thread records 2,000,000 stacks of depth 16 drawn from a fixed
//! population of call paths (most already present, as in a running profiler), then both repeat with
//! stacks that are all new. An "insert" is one `Cct::child` step (find or create).

use kprof::cct::{Cct, Metric, ROOT};
use kprof::frame::FrameId;
use std::sync::Arc;
use std::time::Instant;

const DEPTH: u64 = 16;

fn run(cct: &Arc<Cct>, threads: u64, stacks_per_thread: u64, distinct: u64) -> f64 {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let cct = Arc::clone(cct);
            std::thread::spawn(move || {
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                for _ in 0..stacks_per_thread {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let path = x % distinct;
                    let frames =
                        (0..DEPTH).map(|d| (FrameId::jmethod(0x1000 + ((path >> d) % 64) * 8 + d * 4096), d as i32));
                    let (leaf, _) = cct.path(ROOT, frames);
                    cct.add_events(leaf, Metric::Samples, 1, Metric::Cpu, 1_000_000);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    (threads * stacks_per_thread * DEPTH) as f64 / secs
}

fn main() {
    let cct = Arc::new(Cct::with_bytes(512 << 20).expect("arena"));
    cct.enable(Metric::Samples).expect("counters");
    cct.enable(Metric::Cpu).expect("counters");
    let warm = run(&cct, 2, 2_000_000, 50_000);
    let nodes_after_warm = cct.stats().nodes;
    let hot = run(&cct, 2, 2_000_000, 50_000);
    let fresh = run(&cct, 2, 200_000, u64::MAX);
    let stats = cct.stats();
    println!("cct benchmark (2 threads, stacks of depth {DEPTH})");
    println!("  inserts/s, paths mostly new (first pass):  {:>12.0}", warm);
    println!("  inserts/s, paths already present:          {:>12.0}", hot);
    println!("  inserts/s, every path new:                 {:>12.0}", fresh);
    println!(
        "  nodes after first pass: {nodes_after_warm}, at end: {}, wasted by races: {}",
        stats.nodes, stats.wasted_nodes
    );
    println!("  bytes per node: {} (node, hash slots and two counters)", Cct::BYTES_PER_NODE);
}
