//! kprof's JFR recordings read by the JDK's own readers, on every JDK under /usr/lib/jvm: `jfr summary`,
//! `jfr print`, `jfr print --json` and `jdk.jfr.consumer.RecordingFile` (kprof.harness.JfrStacks, with
//! the JDK's assertions on). Each must find the events kprof's own JSON of the same run implies: per event
//! type the same number, and per thread and stack (a calling context) the same events and counts.

mod common;

use common::*;
use kprof_profile::output::jfr::{self, Contexts, Emit, EventDef, FieldDef, FieldValue, Unit};
use kprof_profile::{descriptor_to_java, Frame, FrameKind, Meta, Metric, Profile};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Boot classes are not verified by default: these make HotSpot verify every class, the JDK's included.
const VERIFY: [&str; 3] =
    ["-XX:+UnlockDiagnosticVMOptions", "-XX:+BytecodeVerificationLocal", "-XX:+BytecodeVerificationRemote"];

/// (event type, thread, stack root first, other fields `name=value` sorted) → (events, numeric field sums).
type Seen = BTreeMap<(String, String, String, String), (u64, BTreeMap<String, u64>)>;

/// What the readers print for a name: tabs, line breaks and `;` become `_`.
fn clean(s: &str) -> String {
    s.replace(['\t', '\n', '\r', ';'], "_")
}

/// A frame as JfrStacks prints it: `class.method(ParamTypes)ReturnType`, ` [native]` for native
/// methods; pseudo-frames are methods of the class `kprof` with the descriptor `()V`, and so is a frame
/// without a descriptor.
fn jfr_frame_name(f: &Frame) -> String {
    let descriptor = |sig: &str| descriptor_to_java(if sig.contains(')') { sig } else { "()V" });
    let name = match f.kind {
        FrameKind::Java | FrameKind::Native => {
            let class = if f.class.is_empty() { jfr::PSEUDO_CLASS } else { &f.class };
            let native = if f.kind == FrameKind::Native { " [native]" } else { "" };
            format!("{class}.{}{}{native}", f.method, descriptor(&f.signature))
        }
        FrameKind::Pseudo => format!("{}.{}()void", jfr::PSEUDO_CLASS, f.method),
        FrameKind::Thread => format!("{}.[thread {}]()void", jfr::PSEUDO_CLASS, f.method),
    };
    clean(&name)
}

/// The thread and stack every reader should show for `node`: a thread root becomes the thread.
fn thread_and_stack(p: &Profile, node: u32, parents: &[u32]) -> (String, String) {
    let has_thread_roots =
        p.nodes[0].children.iter().any(|&c| p.frames[p.nodes[c as usize].frame as usize].kind == FrameKind::Thread);
    let path = p.path(node, parents);
    let frame = |n: u32| &p.frames[p.nodes[n as usize].frame as usize];
    let (thread, frames) = match path.first() {
        Some(&first) if frame(first).kind == FrameKind::Thread => (clean(&frame(first).method), &path[1..]),
        _ => ((if has_thread_roots { "[no thread]" } else { "[all threads]" }).to_string(), &path[..]),
    };
    (thread, frames.iter().map(|&n| jfr_frame_name(frame(n))).collect::<Vec<_>>().join(";"))
}

/// (event type, count, numeric field sums, attributes) of one context.
type ExpectedEvent<'a> = (&'a str, u64, Vec<(&'a str, u64)>, String);

/// The events kprof's recording of profile `p` must hold: one `jdk.ExecutionSample` per CPU sample (and
/// per wall sample, with its state, when there is no CPU sample; `kprof.WallSample` with its weight when
/// there is), one `jdk.ObjectAllocationSample` per allocation context with its bytes, one
/// `jdk.JavaMonitorEnter` per monitor wait and one `jdk.ThreadPark` per park with their durations, one
/// `kprof.BytecodeSample` per context with its samples and bytecodes (bytecode), one `kprof.CallCount`
/// per context with its calls and bytecodes (exact). A leaf label that is a field (`[alloc C]`,
/// `[lock C]`, `[park]`, `[state S]`) is not a frame of the event's stack.
fn expected(p: &Profile) -> Seen {
    let parents = p.parents();
    let mut seen = Seen::new();
    for node in 0..p.nodes.len() as u32 {
        let v = |m: Metric| p.value(node, m);
        let path = p.path(node, &parents);
        let frame = |n: u32| &p.frames[p.nodes[n as usize].frame as usize];
        let leaf = path.last().map(|&n| frame(n));
        let leaf_label = leaf.filter(|f| f.kind == FrameKind::Pseudo).map(|f| f.method.as_str()).unwrap_or("");
        // The class a leaf names, as Class.getName() prints it.
        let leaf_class = || match leaf {
            Some(f) if f.kind == FrameKind::Pseudo => {
                match leaf_label.strip_prefix('[').and_then(|l| l.strip_suffix(']')).and_then(|l| l.split_once(' ')) {
                    Some((_, c)) => clean(&jfr::internal_class_name(c).replace('/', ".")),
                    None => "null".to_string(),
                }
            }
            Some(f) => f.class.clone(),
            None => "null".to_string(),
        };
        let parked = path.iter().any(|&n| {
            let f = frame(n);
            (f.class == "java.util.concurrent.locks.LockSupport" && f.method.starts_with("park"))
                || (f.method == "park" && f.class.ends_with(".Unsafe"))
        });
        let state = || jfr::thread_state(leaf_label).to_string();
        let mut events: Vec<ExpectedEvent> = Vec::new();
        if v(Metric::Samples) > 0 {
            events.push(("jdk.ExecutionSample", v(Metric::Samples), vec![], "state=STATE_RUNNABLE".into()));
        }
        if v(Metric::WallSamples) > 0 {
            if p.has(Metric::Samples) {
                let sums = vec![("weight", v(Metric::Wall))];
                events.push(("kprof.WallSample", v(Metric::WallSamples), sums, format!("state={}", state())));
            } else {
                events.push(("jdk.ExecutionSample", v(Metric::WallSamples), vec![], format!("state={}", state())));
            }
        }
        if v(Metric::AllocBytes) > 0 {
            let sums = vec![("weight", v(Metric::AllocBytes))];
            events.push(("jdk.ObjectAllocationSample", 1, sums, format!("objectClass={}", leaf_class())));
        }
        if v(Metric::LockCount) > 0 {
            let sums = vec![("duration", v(Metric::LockNs))];
            if parked {
                events.push(("jdk.ThreadPark", v(Metric::LockCount), sums, format!("parkedClass={}", leaf_class())));
            } else {
                events.push((
                    "jdk.JavaMonitorEnter",
                    v(Metric::LockCount),
                    sums,
                    format!("monitorClass={}", leaf_class()),
                ));
            }
        }
        if p.has(Metric::BytecodeSamples) && (v(Metric::BytecodeSamples) > 0 || v(Metric::Bytecodes) > 0) {
            let sums = vec![("samples", v(Metric::BytecodeSamples)), ("bytecodes", v(Metric::Bytecodes))];
            events.push(("kprof.BytecodeSample", 1, sums, String::new()));
        }
        if p.has(Metric::Calls) && (v(Metric::Calls) > 0 || v(Metric::Bytecodes) > 0) {
            events.push((
                "kprof.CallCount",
                1,
                vec![("calls", v(Metric::Calls)), ("bytecodes", v(Metric::Bytecodes))],
                String::new(),
            ));
        }
        if events.is_empty() {
            continue;
        }
        let (thread, mut stack) = thread_and_stack(p, node, &parents);
        if jfr::is_field_label(leaf_label) {
            // The leaf label is a field, not a frame.
            stack = match stack.rsplit_once(';') {
                Some((above, _)) => above.to_string(),
                None => String::new(),
            };
        }
        for (ty, count, sums, attributes) in events {
            let e = seen.entry((ty.to_string(), thread.clone(), stack.clone(), attributes)).or_default();
            e.0 += count;
            for (k, v) in sums {
                *e.1.entry(k.to_string()).or_default() += v;
            }
        }
    }
    seen
}

fn totals(seen: &Seen) -> BTreeMap<String, u64> {
    let mut t = BTreeMap::new();
    for ((ty, ..), (n, _)) in seen {
        *t.entry(ty.clone()).or_default() += n;
    }
    t
}

fn jfr_tool(jdk: &Jdk, args: &[&str], file: &Path) -> Run {
    let mut cmd = Command::new(jdk.home.join("bin/jfr"));
    cmd.args(args).arg(file);
    let run = run_with_timeout(cmd, Duration::from_secs(300));
    assert!(run.status.success(), "{}: jfr {args:?} failed: {}\n{}", jdk.label(), run.stderr, run.stdout);
    run
}

/// `jfr summary`: events per type (the metadata and checkpoint events left out).
fn summary_counts(jdk: &Jdk, file: &Path) -> BTreeMap<String, u64> {
    let run = jfr_tool(jdk, &["summary"], file);
    assert!(run.stdout.contains(" Version: 2.1") && run.stdout.contains(" Chunks: 1"), "{}", run.stdout);
    let mut counts = BTreeMap::new();
    for line in run.stdout.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if let [name, count, size] = cols[..] {
            if let (Ok(n), Ok(_)) = (count.parse::<u64>(), size.parse::<u64>()) {
                counts.insert(name.to_string(), n);
            }
        }
    }
    assert!(!run.stdout.contains("missing event metadata"), "{}", run.stdout);
    assert_eq!(counts.remove("jdk.Metadata"), Some(1), "{}", run.stdout);
    let checkpoints = counts.remove("jdk.Checkpoint").or_else(|| counts.remove("jdk.CheckPoint"));
    assert_eq!(checkpoints, Some(1), "{}", run.stdout);
    counts.retain(|_, n| *n > 0);
    counts
}

/// What kprof.harness.JfrStacks printed.
struct RecordingFileView {
    seen: Seen,
    totals: BTreeMap<String, u64>,
    /// When there are events: (first start, last end, in order of start).
    time: Option<(u64, u64, bool)>,
}

/// The events as `jdk.jfr.consumer.RecordingFile` reads them (kprof.harness.JfrStacks, JDK assertions on:
/// a constant pool reference to a missing entry fails).
fn read_with_recording_file(jdk: &Jdk, file: &Path) -> RecordingFileView {
    let mut cmd = Command::new(jdk.java());
    cmd.args(["-esa", "-ea", "-cp"]).arg(harness_classes()).arg("kprof.harness.JfrStacks").arg(file);
    let run = run_with_timeout(cmd, Duration::from_secs(300));
    assert!(run.status.success(), "{}: JfrStacks failed: {}", jdk.label(), run.stderr);
    let (mut seen, mut totals, mut time) = (Seen::new(), BTreeMap::new(), None);
    for line in run.stdout.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        match cols[0] {
            "event" => {
                let [_, ty, thread, stack, attributes, count, sums] = cols[..] else { panic!("bad line {line}") };
                let sums = sums
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        let (k, v) = s.split_once('=').unwrap();
                        (k.to_string(), v.parse().unwrap())
                    })
                    .collect();
                let key = (ty.to_string(), thread.to_string(), stack.to_string(), sorted_attributes(attributes));
                assert!(seen.insert(key, (count.parse().unwrap(), sums)).is_none(), "{line}");
            }
            "total" => {
                totals.insert(cols[1].to_string(), cols[2].parse().unwrap());
            }
            "time" => time = Some((cols[1].parse().unwrap(), cols[2].parse().unwrap(), cols[3] == "true")),
            _ => panic!("unexpected line {line}"),
        }
    }
    RecordingFileView { seen, totals, time }
}

fn sorted_attributes(text: &str) -> String {
    let mut a: Vec<&str> = text.split(',').filter(|s| !s.is_empty()).collect();
    a.sort();
    a.join(",")
}

/// `PT0.000123S` → nanoseconds (what `jfr print --json` prints for durations; minutes and hours too).
fn iso_duration_nanos(s: &str) -> u64 {
    let mut rest = s.strip_prefix("PT").unwrap_or_else(|| panic!("duration {s}"));
    let mut nanos = 0f64;
    for (unit, scale) in [('H', 3600e9), ('M', 60e9), ('S', 1e9)] {
        if let Some(i) = rest.find(unit) {
            nanos += rest[..i].parse::<f64>().unwrap() * scale;
            rest = &rest[i + 1..];
        }
    }
    nanos.round() as u64
}

/// The events as `jfr print --json` shows them.
fn read_with_jfr_json(jdk: &Jdk, file: &Path) -> Seen {
    let run = jfr_tool(jdk, &["print", "--json", "--stack-depth", "100000"], file);
    let json: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{}: jfr print --json: {e}", jdk.label()));
    let mut seen = Seen::new();
    for event in json["recording"]["events"].as_array().expect("events") {
        let ty = event["type"].as_str().unwrap().to_string();
        let values = event["values"].as_object().unwrap();
        let thread = values.get("sampledThread").or_else(|| values.get("eventThread")).unwrap();
        let thread = clean(thread["javaName"].as_str().unwrap());
        let mut frames: Vec<String> = values["stackTrace"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let m = &f["method"];
                let native = if f["type"] == "Native" { " [native]" } else { "" };
                clean(&format!(
                    "{}.{}{}{native}",
                    m["type"]["name"].as_str().unwrap().replace('/', "."),
                    m["name"].as_str().unwrap(),
                    descriptor_to_java(m["descriptor"].as_str().unwrap())
                ))
            })
            .collect();
        frames.reverse();
        let (mut attributes, mut sums) = (Vec::new(), BTreeMap::new());
        for (k, v) in values {
            match (k.as_str(), v) {
                ("startTime" | "sampledThread" | "eventThread" | "stackTrace", _) => {}
                ("duration", v) => {
                    sums.insert(k.clone(), iso_duration_nanos(v.as_str().unwrap()));
                }
                (_, Value::Number(n)) => {
                    sums.insert(k.clone(), n.as_u64().unwrap());
                }
                (_, Value::String(s)) => attributes.push(format!("{k}={}", clean(s))),
                (_, Value::Object(o)) => {
                    attributes.push(format!("{k}={}", clean(&o["name"].as_str().unwrap().replace('/', "."))))
                }
                (_, Value::Null) => attributes.push(format!("{k}=null")),
                (_, other) => panic!("{k}: {other}"),
            }
        }
        attributes.sort();
        let e = seen.entry((ty, thread, frames.join(";"), attributes.join(","))).or_default();
        e.0 += 1;
        for (k, v) in sums {
            *e.1.entry(k).or_default() += v;
        }
    }
    seen
}

/// Differences between two sets of events, for a failure message.
fn diff(want: &Seen, got: &Seen) -> String {
    let mut out = String::new();
    for (k, v) in want {
        if got.get(k) != Some(v) {
            out += &format!("  expected {k:?}: {v:?}, got {:?}\n", got.get(k));
        }
    }
    for (k, v) in got {
        if !want.contains_key(k) {
            out += &format!("  unexpected {k:?}: {v:?}\n");
        }
    }
    out.chars().take(6000).collect()
}

/// Every reader of `jdk` finds `want` in `file`, a recording whose span is `start_ns` + `duration_ns`.
fn check_readers(jdk: &Jdk, file: &Path, want: &Seen, start_ns: u64, duration_ns: u64) {
    let label = jdk.label();
    let want_totals = totals(want);
    assert!(!want_totals.is_empty(), "{label}: nothing to compare");

    assert_eq!(summary_counts(jdk, file), want_totals, "{label}: jfr summary of {}", file.display());

    let text = jfr_tool(jdk, &["print"], file).stdout;
    for (ty, n) in &want_totals {
        let printed = text.lines().filter(|l| *l == format!("{ty} {{")).count() as u64;
        assert_eq!(printed, *n, "{label}: jfr print shows {printed} {ty} events");
    }

    let json = read_with_jfr_json(jdk, file);
    assert!(json == *want, "{label}: jfr print --json differs from kprof's profile:\n{}", diff(want, &json));

    let RecordingFileView { seen, totals, time } = read_with_recording_file(jdk, file);
    let (first, last, ordered) = time.expect("a time line");
    assert!(seen == *want, "{label}: RecordingFile differs from kprof's profile:\n{}", diff(want, &seen));
    assert_eq!(totals, want_totals, "{label}");
    assert!(ordered, "{label}: events out of time order");
    let end = start_ns + duration_ns.max(1);
    assert!(first >= start_ns && last <= end, "{label}: events from {first} to {last}, recording {start_ns}..{end}");
}

/// Profiles `main` with `opts` into a recording and kprof's JSON, and checks every reader against the JSON.
/// Returns the profile and the recording.
fn profile_and_check(jdk: &Jdk, name: &str, opts: &str, jvm: &[&str], main: &str, args: &[&str]) -> (Profile, PathBuf) {
    let dir = scratch(&format!("jfr-{name}-{}", jdk.label()));
    let (recording, json) = (dir.join("p.jfr"), dir.join("p.json"));
    let agent = format!("{opts},file={},file={}", recording.display(), json.display());
    let mut cmd = Command::new(jdk.java());
    cmd.args(jvm).arg(format!("-agentpath:{}={agent}", agent_lib().display()));
    cmd.arg("-cp").arg(harness_classes()).arg(main).args(args);
    let run = run_with_timeout(cmd, Duration::from_secs(300));
    run.assert_ok();
    for bad in ["VerifyError", "ClassFormatError", "internal error", "hs_err_pid"] {
        assert!(!run.stderr.contains(bad), "{}: {bad} running {main}:\n{}", jdk.label(), run.stderr);
    }
    let profile = kprof_profile::output::read_profile(&json).unwrap_or_else(|e| panic!("{e}"));
    let want = expected(&profile);
    let start_ns = profile.meta.start_unix_ms * 1_000_000;
    check_readers(jdk, &recording, &want, start_ns, profile.meta.duration_ns);
    (profile, recording)
}

#[test]
fn cpu_samples_are_execution_samples_with_kprofs_stacks_and_threads() {
    for_each_jdk(|jdk| {
        let (p, file) =
            profile_and_check(jdk, "asgct", "interval=1ms,threads=on", &[], "kprof.harness.ThreadSplit", &["1"]);
        let want = expected(&p);
        let threads: std::collections::BTreeSet<&str> = want.keys().map(|k| k.1.as_str()).collect();
        assert!(threads.contains("worker-2x") && threads.contains("worker-1x"), "{}: {threads:?}", jdk.label());
        let samples = totals(&want)["jdk.ExecutionSample"];
        assert!(samples > 1000, "{}: only {samples} samples", jdk.label());
        if jdk.version >= 21 {
            // `jfr view hot-methods` (JDK 21+) counts samples by top frame: the method kprof saw most as
            // the leaf has as many there.
            let mut by_leaf: BTreeMap<u32, u64> = BTreeMap::new();
            for (i, n) in p.nodes.iter().enumerate() {
                if p.frames[n.frame as usize].kind == FrameKind::Java {
                    *by_leaf.entry(n.frame).or_default() += p.value(i as u32, Metric::Samples);
                }
            }
            let (&top, &count) = by_leaf.iter().max_by_key(|(_, &c)| c).unwrap();
            let f = &p.frames[top as usize];
            let view = jfr_tool(jdk, &["view", "--width", "250", "hot-methods"], &file).stdout;
            let prefix = format!("{}.{}(", f.class, f.method);
            let row = view.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {prefix} in\n{view}"));
            let cols: Vec<&str> = row.split_whitespace().collect();
            // The count is printed with the locale's digit grouping.
            let shown: String = cols[cols.len() - 2].chars().filter(char::is_ascii_digit).collect();
            assert_eq!(shown, count.to_string(), "{}: {row}", jdk.label());
        }
    });
}

#[test]
fn bytecode_samples_are_one_event_per_context_with_their_counts() {
    for_each_jdk(|jdk| {
        let (p, _) = profile_and_check(jdk, "bytecode", "mode=bytecode", &VERIFY, "kprof.harness.Deterministic", &[]);
        let want = expected(&p);
        assert!(want.keys().all(|k| k.1 == "[all threads]"));
        let samples: u64 = want.values().map(|v| v.1["samples"]).sum();
        assert!(samples > 1000, "{}: {samples} samples", jdk.label());
    });
}

#[test]
fn exact_counts_are_one_event_per_context_with_calls_and_bytecodes() {
    let Some(lib) = option_env!("KPROF_HARNESS_JNI_LIB") else {
        panic!("the harness JNI library was not built (no C compiler at build time)");
    };
    for_each_jdk(|jdk| {
        let prop = format!("-Dkprof.harness.jni={lib}");
        let mut jvm = VERIFY.to_vec();
        jvm.push(&prop);
        if jdk.version >= 21 {
            jvm.push("--enable-native-access=ALL-UNNAMED");
        }
        // Only the harness's classes are counted: every JDK method's contexts would make some 20,000
        // events, and `jfr print --json` of them hundreds of megabytes.
        let opts = "mode=exact,include=kprof.harness.*";
        let (p, _) = profile_and_check(jdk, "exact", opts, &jvm, "kprof.harness.NativeCallbacks", &["3"]);
        let want = expected(&p);
        assert!(want.keys().any(|k| k.2.contains("NativeCallbacks.callUp(") && k.2.contains(" [native]")));
        let calls: u64 = want.values().map(|v| v.1["calls"]).sum();
        assert!(calls > 50, "{}: {calls} calls", jdk.label());
    });
}

/// CPU samples, allocations, monitor waits and parks of one run (`mode=asgct+alloc+lock`) as the JDK's
/// own event types, each with kprof's stacks, classes and durations.
#[test]
fn cpu_allocation_and_lock_events_of_one_run_are_the_jdks_events() {
    for_each_jdk(|jdk| {
        let opts = "mode=asgct+alloc+lock,interval=1ms,alloc=1k,lock=0,threads=on";
        let (p, _) = profile_and_check(jdk, "cpu-alloc-lock", opts, &[], "kprof.harness.LockSites", &["20"]);
        let t = totals(&expected(&p));
        for ty in ["jdk.ExecutionSample", "jdk.ObjectAllocationSample", "jdk.JavaMonitorEnter", "jdk.ThreadPark"] {
            assert!(t.get(ty).is_some_and(|&n| n > 0), "{}: no {ty}: {t:?}", jdk.label());
        }
        let want = expected(&p);
        let monitor_classes: std::collections::BTreeSet<&str> =
            want.keys().filter(|k| k.0 == "jdk.JavaMonitorEnter").map(|k| k.3.as_str()).collect();
        assert!(monitor_classes.contains("monitorClass=java.lang.Object"), "{}: {monitor_classes:?}", jdk.label());
        assert!(
            want.keys().any(|k| k.0 == "jdk.ThreadPark" && k.3.contains("ReentrantLock")),
            "{}: no park on the ReentrantLock",
            jdk.label()
        );
    });
}

/// Wall-clock samples are execution samples with the state the thread was in.
#[test]
fn wall_samples_are_execution_samples_with_their_thread_state() {
    for_each_jdk(|jdk| {
        let (p, _) =
            profile_and_check(jdk, "wall", "mode=wall,interval=5ms,threads=on", &[], "kprof.harness.WallSplit", &["2"]);
        let want = expected(&p);
        let states: std::collections::BTreeSet<&str> =
            want.keys().filter(|k| k.0 == "jdk.ExecutionSample").map(|k| k.3.as_str()).collect();
        for s in ["state=STATE_RUNNABLE", "state=STATE_SLEEPING", "state=STATE_PARKED", "state=STATE_IN_OBJECT_WAIT"] {
            assert!(states.contains(s), "{}: no {s}: {states:?}", jdk.label());
        }
    });
}

/// A profile with the names that trip readers up: non-ASCII and very long names, inner, hidden and
/// array classes, the unnamed package, lambdas, constructors, a frame without descriptor, native and
/// pseudo-frames, thread names with separators, a 600-deep stack, and contexts at a thread root and
/// outside any thread.
fn odd_profile(mode: &str) -> Profile {
    let metrics = match mode {
        "asgct" => [Metric::Samples, Metric::Cpu],
        "bytecode" => [Metric::BytecodeSamples, Metric::Bytecodes],
        _ => [Metric::Calls, Metric::Bytecodes],
    };
    let mut p = Profile::new(
        Meta { mode: mode.into(), start_unix_ms: 1_700_000_000_123, duration_ns: 1_500_000_000, ..Meta::default() },
        &metrics,
    );
    let mut intern = |f: Frame| p.intern(f);
    let t1 = intern(Frame::thread("pool-1 😀 <worker>"));
    let t2 = intern(Frame::thread("odd;name\twith tab"));
    let main = intern(Frame::java("Top", "main", "([Ljava/lang/String;)V"));
    let frames = [
        intern(Frame::java("a.Ünïcödé$Inner", "日本語", "([[I[Ljava/lang/String;)[J")),
        intern(Frame::java("a.B$$Lambda", "run", "()V")),
        intern(Frame::java("a.B", "lambda$main$0", "(Ljava/lang/Object;)V")),
        intern(Frame::java("[Ljava.lang.Object;", "clone", "()Ljava/lang/Object;")),
        intern(Frame::java("[I", "clone", "()Ljava/lang/Object;")),
        intern(Frame::java("a.B", "<init>", "(IJDZ)V")),
        intern(Frame::java("a.NoSignature", "m", "")),
        intern(Frame::java("a.Long", &"x".repeat(5000), "()V")),
        intern(Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Thread", "sleep", "(J)V") }),
        intern(Frame::pseudo("[GC_active]")),
        intern(Frame::pseudo("[alloc byte[]]")),
        intern(Frame::pseudo("[unknown_method]")),
    ];
    let deep = intern(Frame::java("a.Deep", "down", "(I)V"));
    let truncated = intern(Frame::pseudo("[truncated]"));
    let not_java = intern(Frame::pseudo("[not_java]"));
    let r1 = p.child(0, t1, -1);
    let r2 = p.child(0, t2, -1);
    let m1 = p.child(r1, main, -1);
    let m2 = p.child(r2, main, -1);
    let mut counted = vec![r1, p.child(0, not_java, -1)];
    for (i, &f) in frames.iter().enumerate() {
        counted.push(p.child(m1, f, i as i32));
        counted.push(p.child(m2, f, -1));
    }
    // Two callsites of one frame: two contexts, one stack.
    counted.push(p.child(m1, frames[0], 77));
    let mut n = p.child(r1, truncated, -1);
    for depth in 0..600 {
        n = p.child(n, deep, depth % 7);
    }
    counted.push(n);
    for (i, &node) in counted.iter().enumerate() {
        let count = if mode == "exact" {
            if i % 5 == 0 {
                0
            } else {
                i as u64
            }
        } else {
            1 + i as u64 % 4
        };
        p.set(node, metrics[0], count);
        p.set(node, metrics[1], 1000 * (i as u64 + 1));
    }
    p
}

#[test]
fn odd_names_read_back_unchanged_in_every_reader() {
    let dir = scratch("jfr-odd");
    let profiles: Vec<(String, Profile)> =
        ["asgct", "bytecode", "exact"].iter().map(|m| (m.to_string(), odd_profile(m))).collect();
    for (mode, p) in &profiles {
        std::fs::write(dir.join(format!("{mode}.jfr")), jfr::render(p)).unwrap();
    }
    // A recording without a start, duration or events is still one.
    let empty = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples, Metric::Cpu]);
    std::fs::write(dir.join("empty.jfr"), jfr::render(&empty)).unwrap();
    for_each_jdk(|jdk| {
        for (mode, p) in &profiles {
            let want = expected(p);
            assert!(want.keys().any(|k| k.1 == "[no thread]" && k.2 == "kprof.[not_java]()void"));
            assert!(want.keys().any(|k| k.2.ends_with("a.NoSignature.m()void")));
            check_readers(
                jdk,
                &dir.join(format!("{mode}.jfr")),
                &want,
                p.meta.start_unix_ms * 1_000_000,
                p.meta.duration_ns,
            );
        }
        assert!(summary_counts(jdk, &dir.join("empty.jfr")).is_empty());
        let empty = read_with_recording_file(jdk, &dir.join("empty.jfr"));
        assert!(empty.seen.is_empty() && empty.totals.is_empty() && empty.time.is_none());
        jfr_tool(jdk, &["print", "--json"], &dir.join("empty.jfr"));
    });
}

/// Rows for allocation and lock profiles: each sample an allocation of the class its leaf pseudo-frame
/// names, weighing its share of the context's weight; each call a monitor wait as long as its share.
const ALLOC_AND_LOCK: &[EventDef] = &[
    EventDef {
        name: "jdk.ObjectAllocationSample",
        label: "Object Allocation Sample",
        description: "",
        category: &["Java Application"],
        applies: Metric::AllocCount,
        requires: None,
        contexts: Contexts::All,
        emit: Emit::PerUnit(Metric::AllocCount),
        thread_field: "eventThread",
        duration: None,
        fields: &[
            FieldDef { name: "objectClass", label: "Object Class", description: "", value: FieldValue::LeafClass },
            FieldDef {
                name: "weight",
                label: "Sample Weight",
                description: "",
                value: FieldValue::Counter(Metric::AllocBytes, Unit::Bytes),
            },
        ],
    },
    EventDef {
        name: "jdk.JavaMonitorEnter",
        label: "Java Monitor Blocked",
        description: "",
        category: &["Java Application"],
        applies: Metric::LockCount,
        requires: None,
        contexts: Contexts::All,
        emit: Emit::PerUnit(Metric::LockCount),
        thread_field: "eventThread",
        duration: Some(Metric::LockNs),
        fields: &[FieldDef {
            name: "monitorClass",
            label: "Monitor Class",
            description: "",
            value: FieldValue::LeafClass,
        }],
    },
];

#[test]
fn rows_for_allocation_and_lock_events_are_read_as_the_jdks_events() {
    let mut p = Profile::new(
        Meta { mode: "alloc+lock".into(), start_unix_ms: 1_000, duration_ns: 10_000_000, ..Meta::default() },
        &[Metric::AllocCount, Metric::AllocBytes, Metric::LockCount, Metric::LockNs],
    );
    let t = p.intern(Frame::thread("main"));
    let work = p.intern(Frame::java("a.Work", "run", "()V"));
    let bytes = p.intern(Frame::pseudo("[alloc byte[]]"));
    let strings = p.intern(Frame::pseudo("[alloc java.lang.String[][]]"));
    let root = p.child(0, t, -1);
    let w = p.child(root, work, -1);
    let b = p.child(w, bytes, 4);
    let s = p.child(w, strings, 9);
    // Allocations and lock waits share the weight here, as the rows read them: bytes for one, ns for the other.
    for (node, samples, weight, calls) in [(b, 3, 3001, 2), (s, 1, 24, 0), (w, 2, 7, 1)] {
        p.set(node, Metric::AllocCount, samples);
        p.set(node, Metric::AllocBytes, weight);
        p.set(node, Metric::LockCount, calls);
        p.set(node, Metric::LockNs, weight);
    }
    let dir = scratch("jfr-rows");
    let file = dir.join("alloc.jfr");
    std::fs::write(&file, jfr::render_with(&p, ALLOC_AND_LOCK)).unwrap();
    let stack = |leaf: &str| format!("a.Work.run()void{leaf}");
    let entry = |ty: &str, leaf: &str, attribute: &str, n: u64, sums: &[(&str, u64)]| {
        let key = (ty.to_string(), "main".to_string(), stack(leaf), attribute.to_string());
        (key, (n, sums.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>()))
    };
    let alloc = "jdk.ObjectAllocationSample";
    let lock = "jdk.JavaMonitorEnter";
    let want: Seen = [
        // The allocated class is a field of the event, not a frame of its stack.
        entry(alloc, "", "objectClass=[B", 3, &[("weight", 3001)]),
        entry(alloc, "", "objectClass=[[Ljava.lang.String_", 1, &[("weight", 24)]),
        entry(alloc, "", "objectClass=a.Work", 2, &[("weight", 7)]),
        entry(lock, "", "monitorClass=[B", 2, &[("duration", 3001)]),
        entry(lock, "", "monitorClass=a.Work", 1, &[("duration", 7)]),
    ]
    .into_iter()
    .collect();
    for_each_jdk(|jdk| check_readers(jdk, &file, &want, 1_000_000_000, 10_000_000));
}
