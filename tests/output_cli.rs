//! `kprof report` and `kprof compare` as a user runs them, on JSON and collapsed files with known contents.

use kprof_profile::output::{collapsed, json};
use kprof_profile::{Frame, Meta, Metric, Profile};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn kprof(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_kprof")).args(args).output().expect("run kprof");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("kprof-cli-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self, name: &str, contents: &[u8]) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p.to_str().unwrap().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// An exact-mode profile: main calls f from two callsites (3 and 1 calls) and g (6 calls).
fn exact_profile() -> Profile {
    let mut p = Profile::new(Meta { mode: "exact".into(), ..Meta::default() }, &[Metric::Calls, Metric::Bytecodes]);
    let main = p.intern(Frame::java("t.Main", "main", "([Ljava/lang/String;)V"));
    let f = p.intern(Frame::java("t.Main", "f", "(I)V"));
    let g = p.intern(Frame::java("t.Main", "g", "()I"));
    let m = p.add_child(0, main, -1);
    let f1 = p.add_child(m, f, 5);
    let f2 = p.add_child(m, f, 11);
    let gg = p.add_child(m, g, 17);
    for (n, calls) in [(m, 0), (f1, 3), (f2, 1), (gg, 6)] {
        p.set(n, Metric::Calls, calls);
        p.set(n, Metric::Bytecodes, calls * 10);
    }
    p
}

#[test]
fn compare_gives_known_overlaps() {
    let d = Dir::new("overlap");
    let a = d.file("a.collapsed", b"m;a 5\nm;b 3\nm;c 2\n");
    let b = d.file("b.collapsed", b"m;a 1\nm;b 1\nm;d 2\n");
    let c = d.file("c.collapsed", b"x;y 9\n");

    let r = kprof(&["compare", &a, &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("overlap: 100.00%\n"), "{}", r.stdout);

    let r = kprof(&["compare", &a, &c]);
    assert!(r.stdout.starts_with("overlap: 0.00%\n"), "{}", r.stdout);

    // min(.5,.25) + min(.3,.25) = 50 %; the largest difference is m;d (0 % against 50 %).
    let r = kprof(&["compare", &a, &b, "--top", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], "overlap: 50.00%");
    assert!(lines[3].starts_with("contexts in both: 2 (holding 80.00% of A, 50.00% of B)"), "{}", r.stdout);
    let table: Vec<&str> = lines.iter().skip_while(|l| !l.starts_with("rank")).skip(1).copied().collect();
    assert_eq!(table.len(), 2, "{}", r.stdout);
    assert!(table[0].ends_with("  0.000%  50.000% -50.000%  m;d"), "{}", table[0]);
    assert!(table[1].ends_with(" 50.000%  25.000% +25.000%  m;a"), "{}", table[1]);

    let r = kprof(&["compare", "--json", &a, &b]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["overlap_percent"], 50.0);
    assert_eq!(v["differ_most"][0]["context"], serde_json::json!(["m", "d"]));
}

#[test]
fn a_json_profile_and_its_collapsed_stacks_overlap_fully() {
    let d = Dir::new("formats");
    let p = exact_profile();
    let j = d.file("p.json", &json::render(&p));
    let c = d.file("p.collapsed", &collapsed::render(&p, Metric::Calls));
    let c2 = d.file(
        "p2.collapsed",
        &collapsed::render(
            &collapsed::parse(std::str::from_utf8(&collapsed::render(&p, Metric::Calls)).unwrap()).unwrap(),
            Metric::Samples,
        ),
    );
    // The JSON profile defaults to calls (exact mode), the collapsed file's counts are samples.
    let r = kprof(&["compare", &j, &c]);
    assert!(r.stdout.starts_with("overlap: 100.00%\n"), "{}{}", r.stdout, r.stderr);
    let r = kprof(&["compare", &c, &c2]);
    assert!(r.stdout.starts_with("overlap: 100.00%\n"), "{}{}", r.stdout, r.stderr);
    // Callsites: f@5 has 3 of 10 calls and f@11 1; swap them in B and only the callsite view differs.
    let mut swapped = p.clone();
    swapped.set(2, Metric::Calls, 1);
    swapped.set(3, Metric::Calls, 3);
    let s = d.file("s.json", &json::render(&swapped));
    assert!(kprof(&["compare", &j, &s]).stdout.starts_with("overlap: 100.00%\n"));
    let r = kprof(&["compare", &j, &s, "--callsites"]);
    assert!(r.stdout.starts_with("overlap: 80.00%\n"), "{}", r.stdout);
    assert!(r.stdout.contains("t.Main.main(java.lang.String[])void@-1;t.Main.f(int)void@5"), "{}", r.stdout);
    // Different counters per side: bytecodes (weight) of A are proportional to calls of B.
    let r = kprof(&["compare", &j, &s, "--metric-a", "bytecodes", "--metric-b", "calls"]);
    assert!(r.stdout.starts_with("overlap: 100.00%\n"), "{}", r.stdout);
}

#[test]
fn report_prints_the_tables() {
    let d = Dir::new("report");
    let j = d.file("p.json", &json::render(&exact_profile()));
    let r = kprof(&["report", &j, "--top", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("kprof report: mode exact, metric calls, total 10 calls\n"), "{}", r.stdout);
    assert!(r.stdout.contains("TOP METHODS BY SELF calls"));
    assert!(r.stdout.contains("   1  60.00%  60.00%                6  t.Main.g()int\n"), "{}", r.stdout);
    assert!(r.stdout.contains("   2  40.00% 100.00%                4  t.Main.f(int)void\n"), "{}", r.stdout);
    assert!(r.stdout.contains("   1 100.00%   0.00%               10  t.Main.main(java.lang.String[])void\n"));
    assert!(r.stdout.contains("HOTTEST STACKS"));
    let r = kprof(&["report", &j, "--metric", "bytecodes"]);
    assert!(r.stdout.starts_with("kprof report: mode exact, metric bytecodes, total 100 bytecodes\n"), "{}", r.stdout);
}

#[test]
fn bad_input_gives_one_line_errors() {
    let d = Dir::new("errors");
    let garbage = d.file("bad.collapsed", b"a;b 1\nthis is not a stack\n");
    let good = d.file("good.collapsed", b"a;b 1\n");
    for (args, code, want) in [
        (vec!["compare", good.as_str()], 2, "two profiles expected"),
        (vec!["compare", good.as_str(), good.as_str(), "--metric", "nope"], 2, "--metric 'nope'"),
        (vec!["compare", good.as_str(), good.as_str(), "--top"], 2, "--top needs a value"),
        (vec!["report"], 2, "no FILE"),
        (vec!["report", good.as_str(), "--bogus"], 2, "unknown option '--bogus'"),
        (vec!["report", garbage.as_str()], 1, "line 2: 'stack' is not a whole count"),
        (vec!["compare", good.as_str(), garbage.as_str()], 1, "line 2:"),
        (vec!["compare", good.as_str(), good.as_str(), "--metric", "calls"], 1, "no 'calls' metric (it has: samples)"),
        (vec!["report", "/nonexistent/p.json"], 1, "cannot read /nonexistent/p.json"),
    ] {
        let r = kprof(&args);
        assert_eq!(r.code, code, "{args:?}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
    }
    assert!(Path::new(&good).exists());
}

/// `kprof timer-cost` runs the agent's perf timer on a native loop and reports the platform's cost of a
/// signal: one line of key=value pairs, the rate near the interval's (the cost itself is the benchmark's).
#[test]
fn timer_cost_reports_the_signal_rate_and_cost() {
    let r = kprof(&["timer-cost", "--interval", "1ms", "--runs", "1", "--seconds", "0.4"]);
    if r.code == 1 && r.stderr.contains("perf_event_open") {
        eprintln!("perf refused here, skipped: {}", r.stderr);
        return;
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim();
    assert!(line.starts_with("timer-cost: timer=perf interval_ns=1000000 runs=1 "), "{line}");
    let field = |k: &str| -> f64 {
        let v = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} in {line}"));
        v.trim_end_matches('%').parse().unwrap_or_else(|_| panic!("{k}={v}"))
    };
    let rate = field("signals_per_cpu_s");
    assert!((800.0..=1100.0).contains(&rate), "{line}");
    assert!(field("base_ms") > 100.0 && field("timed_ms") > 100.0, "{line}");
    field("us_per_signal");
    field("overhead");
    let r = kprof(&["timer-cost", "--timer", "auto"]);
    assert_eq!((r.code, r.stderr.lines().count()), (2, 1), "{}", r.stderr);
    assert!(r.stderr.contains("--timer 'auto': accepted: perf, ctimer, itimer"), "{}", r.stderr);
}

/// A profile as `mode=asgct+alloc+lock` makes it: CPU samples and time, allocations and lock waits in one
/// tree. By construction: samples run 6 in compute and 2 in parse; bytes are allocated 3 MiB in parse and
/// 1 MiB in compute; locks are waited for 3 ms in a context (Pool.take) that has no CPU sample at all.
fn multi_metric_profile(scale_locks: u64) -> Profile {
    let meta = Meta { mode: "asgct+alloc+lock".into(), default_metric: Some(Metric::Samples), ..Meta::default() };
    let metrics =
        [Metric::Samples, Metric::Cpu, Metric::AllocCount, Metric::AllocBytes, Metric::LockCount, Metric::LockNs];
    let mut p = Profile::new(meta, &metrics);
    let main = p.intern(Frame::java("t.App", "main", "([Ljava/lang/String;)V"));
    let compute = p.intern(Frame::java("t.App", "compute", "()V"));
    let parse = p.intern(Frame::java("t.App", "parse", "(Ljava/lang/String;)I"));
    let take = p.intern(Frame::java("t.Pool", "take", "()Ljava/lang/Object;"));
    let m = p.add_child(0, main, -1);
    let c = p.add_child(m, compute, 3);
    let r = p.add_child(m, parse, 8);
    let t = p.add_child(m, take, 12);
    for (n, samples, objects, bytes, waits, waited) in [
        (c, 6, 1024, 1 << 20, 0, 0),
        (r, 2, 3072, 3 << 20, 0, 0),
        (t, 0, 0, 0, 3 * scale_locks, 3_000_000 * scale_locks),
    ] {
        p.set(n, Metric::Samples, samples);
        p.set(n, Metric::Cpu, samples * 10_000_000);
        p.set(n, Metric::AllocCount, objects);
        p.set(n, Metric::AllocBytes, bytes);
        p.set(n, Metric::LockCount, waits);
        p.set(n, Metric::LockNs, waited);
    }
    p
}

#[test]
fn a_multi_metric_profile_through_report_and_compare() {
    let d = Dir::new("multi");
    let p = d.file("p.json", &json::render(&multi_metric_profile(1)));
    // The run's metric by default; each metric by name, with its unit and its own top method.
    let r = kprof(&["report", &p, "--top", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with("kprof report: mode asgct+alloc+lock, metric samples, total 8 samples\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(
            "totals: 8 samples; 80,000,000 cpu ns (80.00 ms); 4,096 alloc_count; 4,194,304 alloc_bytes (4.0 MiB); \
             3 lock_count; 3,000,000 lock_ns ns (3.00 ms)\n"
        ),
        "{}",
        r.stdout
    );
    for (metric, header, top) in [
        ("samples", "total 8 samples", "   1  75.00%  75.00%                6  t.App.compute()void"),
        ("cpu", "total 80,000,000 cpu ns (80.00 ms)", "   1  75.00%  75.00%       60,000,000  t.App.compute()void"),
        (
            "alloc_count",
            "total 4,096 alloc_count",
            "   1  75.00%  75.00%            3,072  t.App.parse(java.lang.String)int",
        ),
        (
            "alloc_bytes",
            "total 4,194,304 alloc_bytes (4.0 MiB)",
            "   1  75.00%  75.00%        3,145,728  t.App.parse(java.lang.String)int",
        ),
        ("lock_count", "total 3 lock_count", "   1 100.00% 100.00%                3  t.Pool.take()java.lang.Object"),
        (
            "lock_ns",
            "total 3,000,000 lock_ns ns (3.00 ms)",
            "   1 100.00% 100.00%        3,000,000  t.Pool.take()java.lang.Object",
        ),
    ] {
        let r = kprof(&["report", &p, "--metric", metric, "--top", "1"]);
        assert_eq!(r.code, 0, "{metric}: {}", r.stderr);
        let first = r.stdout.lines().next().unwrap();
        assert_eq!(first, format!("kprof report: mode asgct+alloc+lock, metric {metric}, {header}"));
        let by_self = r.stdout.split("TOP METHODS BY SELF").nth(1).unwrap();
        assert_eq!(by_self.lines().nth(2), Some(top), "{metric}:\n{}", r.stdout);
    }
    // A metric the profile lacks: one line naming the metrics it has.
    let has = "(it has: samples, cpu, alloc_count, alloc_bytes, lock_count, lock_ns)";
    for args in [vec!["report", &p, "--metric", "wall"], vec!["compare", &p, &p, "--metric-b", "wall"]] {
        let r = kprof(&args);
        assert_eq!((r.code, r.stderr.lines().count()), (1, 1), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(&format!("has no 'wall' metric {has}")), "{}", r.stderr);
    }
    // The help texts name every metric.
    for cmd in ["report", "compare"] {
        let r = kprof(&[cmd, "--help"]);
        assert!(r.stdout.contains(Metric::ACCEPTED), "{cmd} --help: {}", r.stdout);
    }

    // B waits four times as long in Pool.take and is otherwise the same: lock metrics keep their single
    // context (100 % overlap), CPU and allocations are identical; with cpu for A and lock_ns for B
    // nothing is shared.
    let q = d.file("q.json", &json::render(&multi_metric_profile(4)));
    for metric in ["samples", "cpu", "alloc_bytes", "alloc_count", "lock_ns", "lock_count"] {
        let r = kprof(&["compare", &p, &q, "--metric", metric]);
        assert!(r.stdout.starts_with("overlap: 100.00%\n"), "{metric}: {}{}", r.stdout, r.stderr);
    }
    let r = kprof(&["compare", &p, &q, "--metric-a", "cpu", "--metric-b", "lock_ns"]);
    assert!(r.stdout.starts_with("overlap: 0.00%\n"), "{}", r.stdout);
    // Bytes against objects: the same 3:1 split.
    let r = kprof(&["compare", &p, &q, "--metric-a", "alloc_bytes", "--metric-b", "alloc_count", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!((v["metric_a"].as_str(), v["metric_b"].as_str()), (Some("alloc_bytes"), Some("alloc_count")));
    assert_eq!(v["overlap_percent"], 100.0);

    // The difference under one metric, as collapsed stacks with A scaled to B's total.
    let folded = d.0.join("diff.collapsed");
    let page = d.0.join("diff.html");
    let r = kprof(&[
        "compare",
        &p,
        &q,
        "--metric-a",
        "samples",
        "--metric-b",
        "alloc_count",
        "--collapsed",
        folded.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("wrote the collapsed difference to") && r.stderr.contains("wrote the differential"));
    // A: compute 6, parse 2 of 8 samples; B: compute 1,024, parse 3,072 of 4,096 objects.
    assert_eq!(
        std::fs::read_to_string(&folded).unwrap(),
        "t.App.main(java.lang.String[])void;t.App.compute()void 3072 1024\n\
         t.App.main(java.lang.String[])void;t.App.parse(java.lang.String)int 1024 3072\n"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("\"label_a\":\"p.json\"") && html.contains("\"name\":\"alloc_count\""), "{html}");
    // An output that cannot be written is one line and exit 1.
    let r = kprof(&["compare", &p, &q, "--html", "/nonexistent-dir/d.html"]);
    assert_eq!((r.code, r.stderr.lines().count()), (1, 1), "{}", r.stderr);
    assert!(r.stderr.contains("cannot write /nonexistent-dir/d.html"), "{}", r.stderr);
}
