use super::*;
use std::sync::Arc;

fn f(n: u64) -> FrameId {
    FrameId::jmethod(0x1000 + n * 8)
}

/// A tree counting CPU samples and calls, as the tests below use it.
fn tree(bytes: usize) -> Cct {
    let cct = Cct::with_bytes(bytes).unwrap();
    for m in [Metric::Samples, Metric::Cpu, Metric::Calls, Metric::Bytecodes] {
        cct.enable(m).unwrap();
    }
    cct
}

fn sample(cct: &Cct, node: NodeId, weight: u64) {
    cct.add_events(node, Metric::Samples, 1, Metric::Cpu, weight);
}

#[test]
fn same_key_same_node_distinct_callsites_distinct_nodes() {
    let cct = tree(1 << 20);
    let a = cct.child(ROOT, f(1), -1).unwrap();
    assert_eq!(cct.child(ROOT, f(1), -1), Some(a));
    let b1 = cct.child(a, f(2), 3).unwrap();
    let b2 = cct.child(a, f(2), 9).unwrap();
    assert_ne!(b1, b2);
    assert_eq!(cct.key(b2), (f(2), 9));
    // The same frame under another parent is another context.
    let c = cct.child(b1, f(1), 0).unwrap();
    assert_ne!(c, a);
}

#[test]
fn snapshot_has_parents_before_children_and_counters() {
    let cct = tree(1 << 20);
    let (leaf, ok) = cct.path(ROOT, [(f(1), -1), (f(2), 4), (f(3), 7)]);
    assert!(ok);
    sample(&cct, leaf, 1000);
    sample(&cct, leaf, 1000);
    cct.add(leaf, Metric::Calls, 5);
    let snap = cct.snapshot(&[Metric::Samples, Metric::Cpu, Metric::Calls, Metric::Wall]);
    // root, overflow, f1, f2, f3
    assert_eq!(snap.nodes.len(), 5);
    for (i, n) in snap.nodes.iter().enumerate().skip(1) {
        assert!((n.parent as usize) < i);
    }
    let at = snap.nodes.iter().position(|n| n.frame == f(3)).unwrap();
    let values: Vec<u64> = snap.columns.iter().map(|c| c[at]).collect();
    assert_eq!((values, snap.nodes[at].callsite), (vec![2, 2000, 5, 0], 7));
    assert_eq!(snap.nodes[snap.nodes[at].parent as usize].frame, f(2));
    assert_eq!(snap.column(Metric::Cpu).unwrap()[at], 2000);
}

#[test]
fn a_full_arena_sends_samples_to_the_overflow_node_and_counts_them() {
    let cct = tree(Cct::BYTES_PER_NODE * 16);
    let mut overflowed = 0;
    for i in 0..100 {
        let (node, ok) = cct.path(ROOT, [(f(i), -1)]);
        if !ok {
            overflowed += 1;
            assert_eq!(node, cct.overflow());
        }
        sample(&cct, node, 1);
    }
    let stats = cct.stats();
    assert_eq!(stats.nodes, stats.capacity);
    assert_eq!(stats.overflow_samples, overflowed);
    assert!(overflowed > 80);
    // Existing keys are still found when full.
    assert!(cct.child(ROOT, f(0), -1).is_some());
}

#[test]
fn concurrent_inserts_agree_on_every_node() {
    let cct = Arc::new(tree(64 << 20));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let cct = Arc::clone(&cct);
            std::thread::spawn(move || {
                // Every thread inserts the same 20,000 paths in a different order.
                let mut x: u64 = 0x9E37_79B9 + t;
                for _ in 0..200_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let a = x % 100;
                    let b = (x >> 20) % 200;
                    let (leaf, ok) = cct.path(ROOT, [(f(a), -1), (f(1000 + b), (a % 3) as i32)]);
                    assert!(ok);
                    sample(&cct, leaf, 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let snap = cct.snapshot(&[Metric::Samples]);
    let total: u64 = snap.columns[0].iter().sum();
    assert_eq!(total, 800_000);
    // No key appears twice in the snapshot.
    let mut keys: Vec<_> = snap.nodes.iter().map(|n| (n.parent, n.frame, n.callsite)).collect();
    keys.sort();
    let before = keys.len();
    keys.dedup();
    assert_eq!(before, keys.len());
    // 100 first-level nodes, 100 x 200 second-level nodes, root and overflow.
    assert_eq!(snap.nodes.len(), 2 + 100 + 100 * 200);
}

#[test]
fn threads_inserting_from_reserves_agree_and_give_back_what_they_did_not_use() {
    let cct = Arc::new(tree(64 << 20));
    cct.populate_table();
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let cct = Arc::clone(&cct);
            std::thread::spawn(move || {
                // The same 30,000 keys below the same 30 parents, each thread in another order.
                let mut reserve = NodeReserve::default();
                let mut found = Vec::new();
                for i in 0..30_000u64 {
                    let k = (i * [1, 7, 11][t as usize] * 7919) % 30_000;
                    let parent = cct.child_reserved(ROOT, f(k % 30), -1, &mut reserve).unwrap();
                    let node = cct.child_reserved(parent, f(100 + k), (k % 5) as i32, &mut reserve).unwrap();
                    cct.add(node, Metric::Calls, 1);
                    cct.add(node, Metric::Bytecodes, 2);
                    found.push((k, node));
                }
                cct.release(reserve);
                found.sort();
                found
            })
        })
        .collect();
    let found: Vec<Vec<(u64, NodeId)>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(found.iter().all(|f| *f == found[0]), "every thread found the same node for each key");
    let snap = cct.snapshot(&[Metric::Calls, Metric::Bytecodes]);
    assert_eq!(snap.nodes.len(), 2 + 30 + 30_000);
    let leaves: Vec<usize> = (0..snap.nodes.len()).filter(|&i| snap.nodes[i].callsite >= 0).collect();
    assert!(leaves.iter().all(|&i| (snap.columns[0][i], snap.columns[1][i]) == (3, 6)));
    assert_eq!(leaves.len(), 30_000);
    // Every node taken is in the tree or counted as wasted (unused reserves, lost races).
    let stats = cct.stats();
    assert_eq!(stats.nodes as u64, snap.nodes.len() as u64 + stats.wasted_nodes);
}

#[test]
fn reset_clears_counters_but_keeps_nodes() {
    let cct = tree(1 << 20);
    let (leaf, _) = cct.path(ROOT, [(f(1), -1)]);
    sample(&cct, leaf, 10);
    cct.reset_counters();
    let snap = cct.snapshot(&[Metric::Samples, Metric::Cpu]);
    assert_eq!(snap.nodes.len(), 3);
    assert!(snap.columns.iter().all(|c| c.iter().all(|&v| v == 0)));
}

#[test]
fn reset_metric_zeroes_one_column_only() {
    let cct = tree(1 << 20);
    cct.enable(Metric::AllocCount).unwrap();
    cct.enable(Metric::AllocBytes).unwrap();
    let (a, _) = cct.path(ROOT, [(f(1), -1)]);
    let (b, _) = cct.path(a, [(f(2), 3)]);
    for node in [a, b] {
        sample(&cct, node, 10);
        cct.add_events(node, Metric::AllocCount, 2, Metric::AllocBytes, 64);
    }
    cct.reset_metric(Metric::AllocBytes);
    cct.reset_metric(Metric::LockNs); // no column: nothing to do
    cct.add(b, Metric::AllocBytes, 5);
    let snap = cct.snapshot(&[Metric::Samples, Metric::Cpu, Metric::AllocCount, Metric::AllocBytes]);
    let sums: Vec<u64> = snap.columns.iter().map(|c| c.iter().sum()).collect();
    assert_eq!(sums, vec![2, 20, 4, 5]);
    assert_eq!(snap.nodes.len(), 4, "nodes are kept");
}

#[test]
fn a_metric_without_a_column_counts_nothing_and_reads_as_zero() {
    let cct = Cct::with_bytes(1 << 20).unwrap();
    let (leaf, _) = cct.path(ROOT, [(f(1), -1)]);
    cct.add(leaf, Metric::AllocBytes, 100);
    assert!(!cct.enabled(Metric::AllocBytes));
    cct.enable(Metric::AllocBytes).unwrap();
    cct.add(leaf, Metric::AllocBytes, 7);
    let snap = cct.snapshot(&[Metric::AllocBytes, Metric::LockNs]);
    assert_eq!(snap.columns[0].iter().sum::<u64>(), 7);
    assert_eq!(snap.columns[1].iter().sum::<u64>(), 0);
    let before = cct.stats().bytes;
    cct.enable(Metric::LockNs).unwrap();
    assert_eq!(cct.stats().bytes, before + cct.nodes.len() * 8);
}
