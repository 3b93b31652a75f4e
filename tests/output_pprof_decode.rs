//! kprof's pprof output decoded by an independent reader: Python protobuf with the profile.proto in
//! tests/output_pprof/ (compiled at test time with grpcio-tools, or protoc). Needs python3 with
//! `protobuf` and `grpcio-tools`: scripts/install-test-deps installs them.

use kprof_profile::output::pprof;
use kprof_profile::{Frame, FrameKind, Meta, Metric, Profile};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> String {
    std::env::var("KPROF_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kprof-pprof-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the Python decoder on `profile`'s pprof and returns its JSON.
fn decode(profile: &Profile, name: &str) -> Value {
    let dir = scratch(name);
    let file = dir.join("profile.pb.gz");
    std::fs::write(&file, pprof::render(profile)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/output_pprof/decode.py");
    let out = Command::new(python()).arg(&script).arg(&file).output().unwrap_or_else(|e| {
        panic!("cannot run {} ({e}): install the test dependencies with scripts/install-test-deps", python())
    });
    std::fs::remove_dir_all(&dir).ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the pprof decoder failed: {stderr}\n(missing Python packages? run scripts/install-test-deps, which installs \
         protobuf and grpcio-tools)"
    );
    serde_json::from_slice(&out.stdout).expect("decoder output is JSON")
}

/// Root-first display names and callsite lines of every context with a non-zero counter, with its
/// values under `metrics`: what the pprof samples must hold.
fn expected_samples(p: &Profile, metrics: &[Metric]) -> BTreeMap<(Vec<String>, Vec<i64>), Vec<u64>> {
    let parents = p.parents();
    let mut expected = BTreeMap::new();
    for node in 0..p.nodes.len() as u32 {
        let values: Vec<u64> = metrics.iter().map(|&m| p.value(node, m)).collect();
        if values.iter().all(|&v| v == 0) {
            continue;
        }
        let path = p.path(node, &parents);
        let names = path.iter().map(|&n| p.frames[p.nodes[n as usize].frame as usize].display_name()).collect();
        // A frame's line is the callsite (in it) of the next frame down; the leaf's is 0.
        let mut lines: Vec<i64> = path.iter().skip(1).map(|&n| p.nodes[n as usize].callsite.max(0) as i64).collect();
        lines.push(0);
        // Siblings with the same frame and callsite (possible in hand-built trees) make equal stacks.
        let sum = expected.entry((names, lines)).or_insert_with(|| vec![0; metrics.len()]);
        sum.iter_mut().zip(values).for_each(|(s, v)| *s += v);
    }
    expected
}

fn decoded_samples(decoded: &Value) -> BTreeMap<(Vec<String>, Vec<i64>), Vec<u64>> {
    let mut out = BTreeMap::new();
    for s in decoded["samples"].as_array().unwrap() {
        let names = s["stack"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
        let lines = s["lines"].as_array().unwrap().iter().map(|n| n.as_i64().unwrap()).collect();
        let values: Vec<u64> = s["values"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
        let sum = out.entry((names, lines)).or_insert_with(|| vec![0; values.len()]);
        sum.iter_mut().zip(values).for_each(|(s, v)| *s += v);
    }
    out
}

fn assert_consistent(decoded: &Value) {
    assert_eq!(decoded["problems"], Value::Array(vec![]), "decoder found problems");
}

/// A small asgct-like profile: threads, two callsites of one method, recursion, native and pseudo
/// frames, names with quotes, spaces and non-ASCII characters.
fn asgct_profile() -> Profile {
    let mut counters = BTreeMap::new();
    counters.insert("samples".to_string(), 23);
    counters.insert("dropped".to_string(), 1);
    let mut p = Profile::new(
        Meta {
            mode: "asgct".into(),
            default_metric: None,
            interval: 1_000_000,
            timer: "perf".into(),
            jvm: "OpenJDK 64-Bit Server VM 21".into(),
            start_unix_ms: 1_715_000_000_000,
            duration_ns: 3_000_000_000,
            counters,
        },
        &[Metric::Samples, Metric::Cpu],
    );
    let main_t = p.intern(Frame::thread("main"));
    let worker_t = p.intern(Frame::thread("worker \"1\" ü"));
    let main = p.intern(Frame::java("demo.Main", "main", "([Ljava/lang/String;)V"));
    let work = p.intern(Frame::java("demo.Work", "run", "(I)J"));
    let fib = p.intern(Frame::java("demo.Fib", "fib", "(I)I"));
    let sleep = p.intern(Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Thread", "sleep0", "(J)V") });
    let gc = p.intern(Frame::pseudo("[GC_active]"));
    let odd = p.intern(Frame::java("demo.Ünïcode$Inner", "<init>", "(Ljava/lang/String;)V"));
    let t1 = p.add_child(0, main_t, -1);
    let m = p.add_child(t1, main, -1);
    let w1 = p.add_child(m, work, 7);
    let w2 = p.add_child(m, work, 19);
    let f1 = p.add_child(w1, fib, 3);
    let f2 = p.add_child(f1, fib, 12);
    let f3 = p.add_child(f2, fib, 12);
    let s = p.add_child(m, sleep, 25);
    let t2 = p.add_child(0, worker_t, -1);
    let o = p.add_child(t2, odd, -1);
    let g = p.add_child(0, gc, -1);
    for (node, samples) in [(m, 1), (w1, 2), (w2, 3), (f1, 1), (f2, 2), (f3, 5), (s, 1), (o, 4), (g, 4)] {
        p.set(node, Metric::Samples, samples);
        p.set(node, Metric::Cpu, samples * 1_000_000 + 17);
    }
    p
}

#[test]
fn asgct_profile_decodes_with_types_units_totals_and_stacks() {
    let p = asgct_profile();
    let d = decode(&p, "asgct");
    assert_consistent(&d);
    assert_eq!(d["sample_types"], serde_json::json!([["samples", "count"], ["cpu", "nanoseconds"]]));
    assert_eq!(d["period_type"], serde_json::json!(["cpu", "nanoseconds"]));
    assert_eq!(d["period"], 1_000_000);
    assert_eq!(d["time_nanos"], 1_715_000_000_000_000_000u64);
    assert_eq!(d["duration_nanos"], 3_000_000_000u64);
    assert_eq!(d["default_sample_type"], "samples");
    assert_eq!(d["mappings"], 0);
    let comments: Vec<&str> = d["comments"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert!(comments.contains(&"kprof mode=asgct") && comments.contains(&"timer=perf"), "{comments:?}");

    let got = decoded_samples(&d);
    assert_eq!(got, expected_samples(&p, &[Metric::Samples, Metric::Cpu]));
    for (i, metric) in [Metric::Samples, Metric::Cpu].into_iter().enumerate() {
        let total: u64 = got.values().map(|v| v[i]).sum();
        assert_eq!(total, p.totals(metric)[0], "{metric:?} total");
    }
    // One function per distinct frame (the [root] frame is interned but never on a stack, and still
    // gets a function), one location per (function, callsite line).
    assert_eq!(d["functions"], p.frames.len());
    let system_names = d["system_names"].as_array().unwrap();
    assert!(system_names.contains(&Value::from("demo/Main.main([Ljava/lang/String;)V")), "{system_names:?}");
    let locations: std::collections::BTreeSet<(String, i64)> =
        got.keys().flat_map(|(names, lines)| names.iter().cloned().zip(lines.iter().copied())).collect();
    assert_eq!(d["locations"], locations.len());
}

#[test]
fn exact_profile_carries_bytecodes_and_calls() {
    let a = asgct_profile();
    let mut p =
        Profile::new(Meta { mode: "exact".into(), interval: 0, ..a.meta.clone() }, &[Metric::Calls, Metric::Bytecodes]);
    p.frames = a.frames.clone();
    for (i, n) in a.nodes.iter().enumerate() {
        if i > 0 {
            p.push_node(kprof_profile::Node { children: Vec::new(), ..n.clone() });
        }
        p.nodes[i].children = n.children.clone();
        p.set(i as u32, Metric::Calls, a.value(i as u32, Metric::Samples) * 3);
        p.set(i as u32, Metric::Bytecodes, a.value(i as u32, Metric::Cpu));
    }
    let d = decode(&p, "exact");
    assert_consistent(&d);
    assert_eq!(d["sample_types"], serde_json::json!([["calls", "count"], ["bytecodes", "count"]]));
    assert_eq!(d["period_type"], Value::Null);
    assert_eq!(d["default_sample_type"], "calls");
    assert_eq!(decoded_samples(&d), expected_samples(&p, &[Metric::Calls, Metric::Bytecodes]));
}

#[test]
fn a_large_profile_keeps_ids_unique_and_totals() {
    // 20,000 contexts over 300 methods, with a pseudo-random shape that is the same on every run.
    let mut p = Profile::new(
        Meta { mode: "bytecode".into(), interval: 10_000, ..Meta::default() },
        &[Metric::BytecodeSamples, Metric::Bytecodes],
    );
    let frames: Vec<u32> =
        (0..300).map(|i| p.intern(Frame::java(&format!("pkg{}.C{}", i % 7, i), "m", "(I)V"))).collect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 1..20_000u64 {
        let parent = (next() % i) as u32;
        let frame = frames[(next() % 300) as usize];
        let n = p.add_child(parent, frame, (next() % 40) as i32);
        let samples = next() % 3;
        p.set(n, Metric::BytecodeSamples, samples);
        p.set(n, Metric::Bytecodes, samples * 10_000);
    }
    let d = decode(&p, "large");
    assert_consistent(&d);
    assert_eq!(d["period_type"], serde_json::json!(["bytecodes", "count"]));
    assert_eq!(d["period"], 10_000);
    let got = decoded_samples(&d);
    assert_eq!(got, expected_samples(&p, &[Metric::BytecodeSamples, Metric::Bytecodes]));
    assert_eq!(got.values().map(|v| v[0]).sum::<u64>(), p.totals(Metric::BytecodeSamples)[0]);
}
