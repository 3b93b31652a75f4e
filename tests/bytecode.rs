//! mode=bytecode on real JVMs, every JDK under /usr/lib/jvm, always with full verification: reproducible
//! profiles and totals, the same profile on JDK 17 and 25 (projected onto the application's frames),
//! calling contexts that stay right through exceptions, native callbacks, deep recursion, many threads and
//! virtual threads, methods near HotSpot's 8000-byte limit, and the effect of every option.

mod common;

use common::*;
use kprof_profile::output::compare::{compare_with, CompareOptions};
use kprof_profile::output::read_profile;
use kprof_profile::{Metric, Profile};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Boot classes are not verified by default: these make HotSpot verify every class, the JDK's included.
const VERIFY: [&str; 3] =
    ["-XX:+UnlockDiagnosticVMOptions", "-XX:+BytecodeVerificationLocal", "-XX:+BytecodeVerificationRemote"];
const HARNESS_PREFIX: &str = "kprof.harness.";

/// The harness class path for `jdk` (with the JDK 21+ programs when it can run them).
fn classpath(jdk: &Jdk) -> String {
    let mut cp = harness_classes().display().to_string();
    if let Some(h21) = harness21_classes().filter(|_| jdk.version >= 21) {
        cp = format!("{cp}:{}", h21.display());
    }
    cp
}

/// Runs `main` with the verifier flags, `jvm` options and (if given) the agent with `agent` options.
fn run_verified(jdk: &Jdk, agent: Option<&str>, jvm: &[&str], main: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new(jdk.java());
    cmd.args(VERIFY).args(jvm);
    if let Some(opts) = agent {
        cmd.arg(format!("-agentpath:{}={}", agent_lib().display(), opts));
    }
    cmd.arg("-cp").arg(classpath(jdk)).arg(main).args(args);
    let run = run_with_timeout(cmd, Duration::from_secs(300));
    for bad in ["VerifyError", "ClassFormatError", "internal error", "hs_err_pid"] {
        assert!(!run.stderr.contains(bad), "{}: {bad} running {main}:\n{}", jdk.label(), run.stderr);
    }
    run
}

/// Profiles `main` into `dir/name.collapsed` with `opts` (mode=bytecode added); returns the run and the file.
fn profile(jdk: &Jdk, dir: &Path, name: &str, opts: &str, jvm: &[&str], main: &str, args: &[&str]) -> (Run, PathBuf) {
    let file = dir.join(format!("{name}.collapsed"));
    let sep = if opts.is_empty() { "" } else { "," };
    let run = run_verified(jdk, Some(&format!("mode=bytecode{sep}{opts},file={}", file.display())), jvm, main, args);
    run.assert_ok();
    assert!(file.exists(), "{}: {} not written\n{}", jdk.label(), file.display(), run.stderr);
    (run, file)
}

/// Panics unless the profiles `a` and `b` (files of the runs `ra` and `rb`) are byte-identical, naming
/// the lines only one of them has and both summary lines: a determinism failure seen only on another
/// machine must say where the runs parted.
fn assert_same_profile(label: &str, (ra, a): (&Run, &Path), (rb, b): (&Run, &Path)) {
    let (ta, tb) = (std::fs::read_to_string(a).unwrap(), std::fs::read_to_string(b).unwrap());
    if ta == tb {
        return;
    }
    let only = |x: &str, y: &str| -> String {
        let ys: std::collections::HashSet<&str> = y.lines().collect();
        x.lines().filter(|l| !ys.contains(l)).take(6).collect::<Vec<_>>().join("\n")
    };
    panic!(
        "{label}: {} and {} differ\nonly in the first:\n{}\nonly in the second:\n{}\nsummaries:\n{}\n{}",
        a.display(),
        b.display(),
        only(&ta, &tb),
        only(&tb, &ta),
        ra.summary_line().unwrap_or(""),
        rb.summary_line().unwrap_or("")
    );
}

/// Profiles `main` (no arguments) into `dir/name.json` with `opts` (mode=bytecode added); returns the run
/// and the profile read back.
fn profile_json(jdk: &Jdk, dir: &Path, name: &str, opts: &str, main: &str) -> (Run, Profile) {
    let file = dir.join(format!("{name}.json"));
    let run = run_verified(jdk, Some(&format!("mode=bytecode,{opts},file={}", file.display())), &[], main, &[]);
    run.assert_ok();
    (run, read_profile(&file).unwrap())
}

/// The program's own output: stdout without the JVM's warnings.
fn program_output(run: &Run) -> &str {
    run.stdout.as_str()
}

fn short(frame: &str) -> &str {
    let name = frame.strip_prefix(HARNESS_PREFIX).unwrap_or(frame);
    name.split('(').next().unwrap_or(name)
}

/// The harness frames of a stack, short names (`Class.method`), root first.
fn app_path(stack: &[String]) -> Vec<&str> {
    stack.iter().filter(|f| f.starts_with(HARNESS_PREFIX)).map(|f| short(f)).collect()
}

/// The stacks (short harness names only) that contain a frame named `needle`, with their counts.
fn app_paths_with(stacks: &[(Vec<String>, u64)], needle: &str) -> Vec<(Vec<String>, u64)> {
    stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| short(f) == needle))
        .map(|(s, n)| (app_path(s).into_iter().map(str::to_string).collect(), *n))
        .collect()
}

fn overlap_on_harness(a: &Profile, b: &Profile) -> f64 {
    let options = CompareOptions { callsites: false, top: 0, only: vec![HARNESS_PREFIX.to_string()] };
    let samples = |p: &Profile| p.resolve_metric(Metric::Samples).unwrap();
    compare_with(a, samples(a), b, samples(b), &options).overlap_percent
}

/// A thread whose ring is full (its drain fell behind: on a loaded machine at gran=1000, or here at gran=5,
/// a sample every few dozen bytecodes, faster than any drain) drains it itself: no sample is dropped and two
/// runs still give one profile, byte for byte. With the reified stack, whose samples are the cheapest to
/// take, so that the thread outruns the drain on any machine (a sample read from the frame-pointer chain
/// takes long enough for the drain to keep up on some).
#[test]
fn full_rings_are_drained_by_their_threads_and_lose_nothing() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-fullring-{}", jdk.label()));
        let opts = "gran=5,stack=reified";
        let (r1, a) = profile(jdk, &dir, "a", opts, &[], "kprof.harness.Deterministic", &[]);
        let (r2, b) = profile(jdk, &dir, "b", opts, &[], "kprof.harness.Deterministic", &[]);
        for r in [&r1, &r2] {
            let s = r.summary();
            assert_eq!(s["dropped"], "0", "{}: {}", jdk.label(), r.summary_line().unwrap_or(""));
            let drains: u64 = s["self_drained"].parse().unwrap();
            assert!(drains > 0, "{}: no ring filled: {}", jdk.label(), r.summary_line().unwrap_or(""));
        }
        assert_same_profile(&format!("{}: gran=5, two runs", jdk.label()), (&r1, &a), (&r2, &b));
        assert_eq!(r1.summary()["samples"], r2.summary()["samples"]);
        assert_eq!(program_output(&r1), program_output(&r2));
    });
}

#[test]
fn the_same_run_twice_gives_byte_identical_profiles_and_totals() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-repeat-{}", jdk.label()));
        let (r1, a) = profile(jdk, &dir, "a", "", &[], "kprof.harness.Deterministic", &[]);
        let (r2, b) = profile(jdk, &dir, "b", "", &[], "kprof.harness.Deterministic", &[]);
        assert_same_profile(&format!("{}: two runs", jdk.label()), (&r1, &a), (&r2, &b));
        let text_a = std::fs::read(&a).unwrap();
        let (s1, s2) = (r1.summary(), r2.summary());
        assert_eq!(s1["rand"], "100");
        assert_eq!(s1["bytecodes"], s2["bytecodes"], "{}: estimated totals differ", jdk.label());
        assert_eq!(s1["samples"], s2["samples"]);
        assert_eq!(program_output(&r1), program_output(&r2));
        // Every sample is one period of gran + r, r uniform in [0, 100): the total is about samples × 10,050.
        let samples: f64 = s1["samples"].parse().unwrap();
        let bytecodes: f64 = s1["bytecodes"].parse().unwrap();
        assert!(samples > 5000.0, "{}: {samples} samples", jdk.label());
        let per_sample = bytecodes / samples;
        assert!((per_sample - 10_050.0).abs() < 20.0, "{}: {per_sample} bytecodes per sample", jdk.label());
        // The weights (bytecodes per context) are as reproducible as the sample counts.
        let (_, c) = profile(jdk, &dir, "c", "metric=bytecodes", &[], "kprof.harness.Deterministic", &[]);
        let (_, d) = profile(jdk, &dir, "d", "metric=bytecodes", &[], "kprof.harness.Deterministic", &[]);
        let weights = std::fs::read(&c).unwrap();
        assert_eq!(weights, std::fs::read(&d).unwrap(), "{}: metric=bytecodes profiles differ", jdk.label());
        assert_ne!(weights, text_a);
        let total: u64 = read_collapsed(&c).iter().map(|(_, n)| n).sum();
        assert!(
            total as f64 <= bytecodes && total as f64 > 0.99 * bytecodes,
            "{}: {total} vs {bytecodes}",
            jdk.label()
        );
        // The interpreter alone counts exactly what compiled code counts, and so do C1 alone, C2 alone, other
        // collectors and object layouts. (Not -Xcomp: on JDK 25 more JDK classes load before kprof can
        // rewrite them as they load, and the count moves by some hundred bytecodes.)
        // The main thread's own bytecodes too, context by context and in total: its contexts' weights with
        // a root per thread. (The estimated total of the summary line also counts the JDK's
        // reference-handling threads, whose work follows the collector and when it runs.)
        let main_weights = |name: &str, jvm: &[&str]| -> Vec<(Vec<String>, u64)> {
            let opts = "threads=on,metric=bytecodes";
            let (_, f) = profile(jdk, &dir, &format!("{name}-main"), opts, jvm, "kprof.harness.Deterministic", &[]);
            let mut main: Vec<_> = read_collapsed(&f)
                .into_iter()
                .filter(|(s, _)| s.first().is_some_and(|r| r == "[thread main]"))
                .collect();
            main.sort();
            main
        };
        let main0 = main_weights("default", &[]);
        let main_total: u64 = main0.iter().map(|(_, n)| n).sum();
        assert!(main_total as f64 > 0.9 * bytecodes, "{}: main thread {main_total} of {bytecodes}", jdk.label());
        for (name, jvm) in VM_CONFIGS {
            let (_, x) = profile(jdk, &dir, name, "", jvm, "kprof.harness.Deterministic", &[]);
            assert_eq!(
                text_a,
                std::fs::read(&x).unwrap(),
                "{}: the {name} profile differs from the default's",
                jdk.label()
            );
            let main = main_weights(name, jvm);
            let total: u64 = main.iter().map(|(_, n)| n).sum();
            assert_eq!(total, main_total, "{} {name}: the main thread's bytecodes", jdk.label());
            assert!(main == main0, "{} {name}: the main thread's bytecodes per context differ", jdk.label());
        }
    });
}

#[test]
fn deterministic_overlaps_across_jdks_on_application_frames() {
    let jdks = jdks();
    let (old, new) = (&jdks[0], &jdks[jdks.len() - 1]);
    if old.version == new.version {
        eprintln!("only JDK {} installed: nothing to compare", old.version);
        return;
    }
    let dir = scratch("bc-across");
    let mut full = Vec::new();
    let mut app_only = Vec::new();
    for jdk in [old, new] {
        let (_, f) = profile(jdk, &dir, &format!("full-{}", jdk.label()), "", &[], "kprof.harness.Deterministic", &[]);
        full.push(read_profile(&f).unwrap());
        let (run, f) = profile(
            jdk,
            &dir,
            &format!("app-{}", jdk.label()),
            "include=kprof.harness.*",
            &[],
            "kprof.harness.Deterministic",
            &[],
        );
        assert_eq!(run.summary()["left_alone"], "0", "{}", run.stderr);
        app_only.push(read_profile(&f).unwrap());
    }
    // Counting only the application's classes, the two JDKs run the same bytecodes: the same profile.
    let app = overlap_on_harness(&app_only[0], &app_only[1]);
    assert!(app >= 99.0, "application classes only: overlap {app:.2}% < 99%");
    // Counting the JDK too, each JDK's own library code (String, HashMap, TimSort differ between 17 and
    // 25) weighs on the application frame that called it; the application's shape still dominates.
    let projected = overlap_on_harness(&full[0], &full[1]);
    eprintln!("overlap on kprof.harness frames: {app:.2}% (application classes rewritten), {projected:.2}% (all)");
    assert!(projected >= 90.0, "everything rewritten, projected onto kprof.harness: {projected:.2}% < 90%");
    // Without the projection the JDKs' frames differ: the projection is what makes them comparable.
    let raw =
        compare_with(&full[0], Metric::BytecodeSamples, &full[1], Metric::BytecodeSamples, &CompareOptions::default());
    assert!(raw.overlap_percent < projected, "raw {} vs projected {projected}", raw.overlap_percent);
}

#[test]
fn exceptions_thrown_through_rewritten_frames_leave_contexts_right() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-throw-{}", jdk.label()));
        let base = run_verified(jdk, None, &[], "kprof.harness.Throwing", &[]);
        base.assert_ok();
        let (run, file) = profile(jdk, &dir, "t", "gran=1000", &[], "kprof.harness.Throwing", &[]);
        assert_eq!(program_output(&run), program_output(&base));
        assert!(run.stdout.contains("caught=1600"), "{}", run.stdout);
        let stacks = read_collapsed(&file);
        let work = app_paths_with(&stacks, "Throwing.work");
        let total: u64 = work.iter().map(|(_, n)| n).sum();
        assert!(total > 1000, "{}: {total} samples in work", jdk.label());
        let at_top = ["Throwing.main", "Throwing.caughtAtTop", "Throwing.work"];
        let inside = [
            "Throwing.main",
            "Throwing.caughtInside",
            "Throwing.caughtInside",
            "Throwing.caughtInside",
            "Throwing.caughtInside",
            "Throwing.work",
        ];
        let mut seen = [0u64; 2];
        for (path, n) in &work {
            match path {
                p if p == &at_top => seen[0] += n,
                p if p == &inside => seen[1] += n,
                p => panic!("{}: work sampled under {p:?}", jdk.label()),
            }
        }
        assert!(seen[0] > 0 && seen[1] > 0, "{}: {seen:?}", jdk.label());
        // The dives themselves (exception construction included) are sampled below dive frames only.
        let dive = app_paths_with(&stacks, "Throwing.dive");
        assert!(!dive.is_empty(), "{}: no samples in dive", jdk.label());
        for (path, _) in dive {
            let first_dive = path.iter().position(|f| f == "Throwing.dive").unwrap();
            assert!(path[first_dive..].iter().all(|f| f == "Throwing.dive"), "{}: {path:?}", jdk.label());
        }
    });
}

#[test]
fn java_called_back_from_native_code_keeps_its_context() {
    let Some(lib) = option_env!("KPROF_HARNESS_JNI_LIB") else {
        panic!("the harness JNI library was not built (no C compiler at build time)");
    };
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-native-{}", jdk.label()));
        let prop = format!("-Dkprof.harness.jni={lib}");
        let mut jvm = vec![prop.as_str()];
        if jdk.version >= 21 {
            jvm.push("--enable-native-access=ALL-UNNAMED");
        }
        let base = run_verified(jdk, None, &jvm, "kprof.harness.NativeCallbacks", &[]);
        base.assert_ok();
        assert!(base.stdout.contains("jni=on"), "{}", base.stdout);
        let (run, file) = profile(jdk, &dir, "n", "gran=1000", &jvm, "kprof.harness.NativeCallbacks", &[]);
        assert_eq!(program_output(&run), program_output(&base));
        let stacks = read_collapsed(&file);
        // main → chain → up × 7 (one Java frame per native round trip) → work.
        let mut want: Vec<String> = ["NativeCallbacks.main", "NativeCallbacks.chain"].map(String::from).to_vec();
        want.extend(vec!["NativeCallbacks.up".to_string(); 7]);
        want.push("NativeCallbacks.work".into());
        let after = ["NativeCallbacks.main", "NativeCallbacks.chain", "NativeCallbacks.afterThrow"];
        let reflected = ["NativeCallbacks.main", "NativeCallbacks.viaReflection", "NativeCallbacks.reflected"];
        for (leaf, expected) in [
            ("NativeCallbacks.work", want.clone()),
            ("NativeCallbacks.afterThrow", after.map(String::from).to_vec()),
            ("NativeCallbacks.reflected", reflected.map(String::from).to_vec()),
        ] {
            let paths = app_paths_with(&stacks, leaf);
            let n: u64 = paths.iter().map(|(_, n)| n).sum();
            assert!(n > 100, "{}: {n} samples in {leaf}", jdk.label());
            for (path, _) in paths {
                assert_eq!(path, expected, "{}: {leaf} under the wrong context", jdk.label());
            }
        }
        // Reflection's own frames (rewritten java.lang.reflect code) sit between viaReflection and reflected.
        assert!(
            stacks.iter().any(|(s, _)| has_frame(s, "java.lang.reflect.Method.invoke") && has_frame(s, "reflected")),
            "{}: no Method.invoke frame above reflected",
            jdk.label()
        );
    });
}

#[test]
fn recursion_deep_and_deeper_than_the_reified_stack() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-deep-{}", jdk.label()));
        // Deep burns CPU at the bottom of 1000 frames of down(), under the default depth cap (2048 entries).
        let (run, file) = profile(jdk, &dir, "d", "", &[], "kprof.harness.Deep", &["1000", "0.5"]);
        assert!(run.stdout.contains("deep: depth=1000"), "{}", run.stdout);
        let stacks = read_collapsed(&file);
        let mut bottom = 0;
        let mut total = 0;
        for (s, n) in &stacks {
            let downs = s.iter().filter(|f| f.contains("Deep.down(")).count();
            if downs == 0 {
                continue;
            }
            total += n;
            let first = s.iter().position(|f| f.contains("Deep.down(")).unwrap();
            assert!(s[first - 1].contains("Deep.main("), "{}: down not called by main: {:?}", jdk.label(), &s[..first]);
            assert!(s[first..first + downs].iter().all(|f| f.contains("Deep.down(")), "{}: frames mixed", jdk.label());
            assert!(downs <= 1001, "{}: {downs} down frames", jdk.label());
            if downs == 1001 {
                bottom += n;
            }
        }
        assert!(total > 100, "{}: {total} samples in down", jdk.label());
        assert!(bottom as f64 >= 0.95 * total as f64, "{}: {bottom} of {total} at the bottom", jdk.label());

        // Deeper than the reified stack holds (depth=300 entries): the samples at the bottom keep the outer
        // 300 entries, then [truncated], then the method that ran; the program and the totals are unchanged.
        let (capped, file) = profile(jdk, &dir, "capped", "depth=300", &[], "kprof.harness.Deep", &["1000", "0.5"]);
        assert!(capped.stdout.contains("deep: depth=1000"), "{}", capped.stdout);
        let summary = capped.summary();
        assert!(summary["truncated"].parse::<u64>().unwrap() > 100, "{}: {summary:?}", jdk.label());
        // Measured against the capped run's own samples in `down`: the two runs are timed, so their totals
        // differ with the machine's load.
        let mut cut = 0;
        let mut capped_total = 0;
        for (s, n) in &read_collapsed(&file) {
            if s.iter().any(|f| f.contains("Deep.down(")) {
                capped_total += n;
            }
            if let Some(at) = s.iter().position(|f| f == "[truncated]") {
                assert_eq!(at, 300, "{}: [truncated] after {at} frames: {:?}", jdk.label(), &s[..at.min(5)]);
                assert_eq!(s.len(), 302, "{}: one frame below [truncated]: {:?}", jdk.label(), &s[at..]);
                cut += n;
            }
        }
        assert!(capped_total > 100, "{}: {capped_total} samples in down", jdk.label());
        assert!(
            cut as f64 >= 0.9 * capped_total as f64,
            "{}: {cut} truncated samples against {capped_total}",
            jdk.label()
        );
    });
}

#[test]
fn many_threads_get_counts_proportional_to_their_work() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-threads-{}", jdk.label()));
        let base = run_verified(jdk, None, &[], "kprof.harness.ManyThreads", &["64"]);
        base.assert_ok();
        let (run, file) =
            profile(jdk, &dir, "m", "gran=1000,threads,metric=bytecodes", &[], "kprof.harness.ManyThreads", &["64"]);
        assert_eq!(program_output(&run), program_output(&base));
        let stacks = read_collapsed(&file);
        let mut per_unit = Vec::new();
        for i in 0..64 {
            let root = format!("[thread mt-{i}]");
            let mine: Vec<_> = stacks.iter().filter(|(s, _)| s[0] == root).collect();
            for (s, _) in &mine {
                // (Samples without harness frames come from the JDK's thread exit.)
                let path = app_path(s);
                assert!(
                    path.is_empty() || (path[0] == "ManyThreads$Worker.run" && path.len() <= 2),
                    "{}: {root} sampled in {path:?}",
                    jdk.label()
                );
            }
            let weight: u64 = mine.iter().map(|(_, n)| n).sum();
            let units = 1 + i % 4;
            per_unit.push(weight as f64 / units as f64);
        }
        // Each thread's weight stops at its last sample (at most gran + rand short of its count).
        let lo = per_unit.iter().cloned().fold(f64::MAX, f64::min);
        let hi = per_unit.iter().cloned().fold(0.0, f64::max);
        assert!(lo > 500_000.0, "{}: {lo} bytecodes per unit", jdk.label());
        assert!(hi / lo < 1.005, "{}: bytecodes per unit range {lo}..{hi}", jdk.label());
    });
}

#[test]
fn virtual_threads_have_a_stack_each_reified_or_walked() {
    let ran = std::cell::Cell::new(false);
    for_each_jdk(|jdk| {
        if jdk.version < 21 || harness21_classes().is_none() {
            return;
        }
        ran.set(true);
        let dir = scratch(&format!("bc-vthreads-{}", jdk.label()));
        // One carrier: every yield lets another task run in the middle of this one's stack.
        let one = "-Djdk.virtualThreadScheduler.parallelism=1";
        let base = run_verified(jdk, None, &[one], "kprof.harness.VirtualThreads", &[]);
        base.assert_ok();
        // The reified stack is the virtual thread's own; a walk must not see the carrier's frames below it:
        // what sits above the first harness frame is the same either way.
        let mut outer_reified = std::collections::BTreeSet::new();
        for (name, opts) in [("v", "gran=1000"), ("vw", "gran=1000,stack=walk"), ("vf", "gran=1000,stack=fpcheck")] {
            let (run, file) = profile(jdk, &dir, name, opts, &[one], "kprof.harness.VirtualThreads", &[]);
            assert_eq!(program_output(&run), program_output(&base));
            if name == "vf" {
                // stack=fpcheck: the chain's contexts (a virtual thread's samples go to the walk) are the walk's.
                assert_eq!(run.summary()["fp_mismatches"], "0", "{}: {}", jdk.label(), run.stderr);
            }
            let stacks = read_collapsed(&file);
            for (stack, _) in stacks.iter().filter(|(s, _)| s.iter().any(|f| short(f) == "VirtualThreads.slice")) {
                let outer: Vec<String> = stack.iter().take_while(|f| !f.starts_with(HARNESS_PREFIX)).cloned().collect();
                if name == "v" {
                    outer_reified.insert(outer);
                } else {
                    assert!(outer_reified.contains(&outer), "{} {opts}: slice walked under {outer:?}", jdk.label());
                }
            }
            let slices = app_paths_with(&stacks, "VirtualThreads.slice");
            let mut depths = std::collections::BTreeSet::new();
            let mut total = 0;
            for (path, n) in &slices {
                total += n;
                let descends = path.len().saturating_sub(2);
                assert!(
                    path[0] == "VirtualThreads$Task.run"
                        && path[1..=descends].iter().all(|f| f == "VirtualThreads.descend")
                        && path.last().map(String::as_str) == Some("VirtualThreads.slice")
                        && (3..=10).contains(&descends),
                    "{} {opts}: slice sampled under {path:?}",
                    jdk.label()
                );
                depths.insert(descends);
            }
            assert!(total > 1000, "{} {opts}: {total} samples in slice", jdk.label());
            assert_eq!(depths.len(), 8, "{} {opts}: depths seen {depths:?}", jdk.label());
        }
    });
    if !ran.get() {
        eprintln!("no JDK 21+ (or no harness21 classes): virtual threads not tested");
    }
}

/// `lines` statements `x = x * 31 + C;` (C from 1000 up: sipush), each 6 bytecodes in 9 bytes.
fn straight_lines(src: &mut String, lines: usize) {
    for i in 0..lines {
        src.push_str(&format!("        x = x * 31 + {};\n", 1000 + i));
    }
}

/// A class of methods whose code is `len` bytes for each `len` in `sizes` (straight-line arithmetic),
/// plus a main that calls each of them; compiled with `jdk`'s javac into `dir`.
fn near_budget_class(jdk: &Jdk, dir: &Path, sizes: &[usize]) {
    let mut src = String::from("public final class NearBudget {\n");
    for (k, &len) in sizes.iter().enumerate() {
        // `x = x * 31 + C;` is iload_0 bipush imul sipush iadd istore_0: 9 bytes; iload_0 ireturn: 2 more.
        src.push_str(&format!("    static int m{k}_{len}(int x) {{\n"));
        straight_lines(&mut src, (len - 2) / 9);
        src.push_str("        return x;\n    }\n");
    }
    src.push_str("    public static void main(String[] args) {\n        int s = 0;\n");
    src.push_str("        for (int r = 0; r < 300; r++) {\n");
    for (k, &len) in sizes.iter().enumerate() {
        src.push_str(&format!("            s = s * 7 + m{k}_{len}(r);\n"));
    }
    src.push_str("        }\n        System.out.println(\"nearbudget: \" + s);\n    }\n}\n");
    compile_into(jdk, dir, "NearBudget", &src);
}

/// Writes `src` as class `name`'s source into `dir` and compiles it there with `jdk`'s javac.
fn compile_into(jdk: &Jdk, dir: &Path, name: &str, src: &str) {
    let file = dir.join(format!("{name}.java"));
    std::fs::write(&file, src).unwrap();
    let status = Command::new(jdk.home.join("bin/javac")).args(["--release", "17", "-d"]).arg(dir).arg(&file).status();
    assert!(status.unwrap().success(), "javac {name}");
}

/// Runs class `main` of `dir` with the verifier flags and mode=bytecode with `opts`, profile to `file`.
fn run_generated(jdk: &Jdk, dir: &Path, main: &str, opts: &str, file: &Path) -> Run {
    let mut cmd = Command::new(jdk.java());
    cmd.args(VERIFY)
        .arg(format!("-agentpath:{}=mode=bytecode,{opts},file={}", agent_lib().display(), file.display()))
        .arg("-cp")
        .arg(dir)
        .arg(main);
    let run = run_with_timeout(cmd, Duration::from_secs(120));
    run.assert_ok();
    run
}

#[test]
fn methods_near_the_8000_byte_limit_are_rewritten_or_left_alone_and_counted() {
    use kprof_classfile::transform::bytecode::{BytecodeConfig, BytecodeTransform};
    use kprof_classfile::transform::methods::MethodTable;
    use kprof_classfile::transform::{RewriteStats, Rewriter, SkipPolicy};
    use kprof_classfile::{ClassFile, EditLimits};
    let sizes = [4000, 6000, 7000, 7200, 7400, 7700, 7900, 7990];
    let jdk0 = &jdks()[0];
    let dir = scratch("bc-budget");
    near_budget_class(jdk0, &dir, &sizes);
    let data = std::fs::read(dir.join("NearBudget.class")).unwrap();
    // What the agent's rewrite does to each method, offline.
    let transform = BytecodeTransform::new(BytecodeConfig::default(), std::sync::Arc::new(MethodTable::new()));
    let mut rw = Rewriter::with_transform(Box::new(transform), SkipPolicy::agent(), EditLimits::default());
    let mut stats = RewriteStats::default();
    let mut out = Vec::new();
    rw.rewrite_class(&data, &mut out, &mut stats).unwrap();
    let (before, after) = (ClassFile::parse(&data).unwrap(), ClassFile::parse(&out).unwrap());
    let mut rewritten = Vec::new();
    let mut left = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let name = format!("m{i}_{len}");
        let index =
            before.methods.iter().position(|m| before.member_name(m).unwrap() == name.as_bytes()).expect("method");
        let old = before.method_code(index).unwrap().unwrap().code.len();
        assert!(old <= len && old + 9 > len, "{name}: {old} bytes");
        let new = after.method_code(index).unwrap().unwrap().code.len();
        if new == old {
            left.push(name);
        } else {
            assert!(new <= 8000, "{name} grew to {new}");
            rewritten.push(name);
        }
    }
    assert!(rewritten.len() >= 2 && left.len() >= 2, "rewritten {rewritten:?}, left alone {left:?}");
    assert!(rewritten.iter().any(|n| n.starts_with("m2_")), "a 7000-byte method is rewritten: {rewritten:?}");
    let crossed = stats.left_alone.iter().find(|(r, _)| r.name() == "byte-budget-crossed").map(|(_, n)| *n);
    assert_eq!(crossed, Some(left.len() as u64));
    for_each_jdk(|jdk| {
        let mut cmd = Command::new(jdk.java());
        cmd.args(VERIFY).arg("-cp").arg(&dir).arg("NearBudget");
        let base = run_with_timeout(cmd, Duration::from_secs(120));
        base.assert_ok();
        let file = dir.join(format!("nb-{}.collapsed", jdk.label()));
        let run = run_generated(jdk, &dir, "NearBudget", "include=NearBudget,gran=1000", &file);
        assert_eq!(run.stdout, base.stdout, "{}: output changed", jdk.label());
        let s = run.summary();
        assert_eq!(s["left_alone"], left.len().to_string(), "{}: {s:?}", jdk.label());
        assert!(run.stderr.contains(&format!("(byte-budget-crossed:{})", left.len())), "{}", run.stderr);
        let stacks = read_collapsed(&file);
        for name in &rewritten {
            let n = count_where(&stacks, |s| has_frame(s, &format!("NearBudget.{name}(")));
            assert!(n > 0, "{}: no samples in rewritten {name}", jdk.label());
        }
        for name in &left {
            let n = count_where(&stacks, |s| has_frame(s, &format!("NearBudget.{name}(")));
            assert_eq!(n, 0, "{}: {name} was left alone but sampled", jdk.label());
        }
    });
}

#[test]
fn gran_sets_the_sampling_period() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-gran-{}", jdk.label()));
        let (fine, _) = profile(jdk, &dir, "fine", "gran=2000,rand=0", &[], "kprof.harness.Deterministic", &[]);
        let (coarse, _) = profile(jdk, &dir, "coarse", "gran=100000,rand=0", &[], "kprof.harness.Deterministic", &[]);
        let samples = |r: &Run| r.summary_f64("samples");
        let ratio = samples(&fine) / samples(&coarse);
        assert!((ratio - 50.0).abs() < 1.0, "{}: samples ratio {ratio}", jdk.label());
        // The estimated total does not depend on the period.
        assert_eq!(fine.summary()["bytecodes"], coarse.summary()["bytecodes"], "{}", jdk.label());
    });
}

#[test]
fn rand_moves_the_sample_points_but_keeps_totals_and_reproducibility() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-rand-{}", jdk.label()));
        let main = "kprof.harness.Deterministic";
        let (r0, f0) = profile(jdk, &dir, "r0", "rand=0,metric=bytecodes", &[], main, &[]);
        let (r1, f1) = profile(jdk, &dir, "r1", "rand=5000,metric=bytecodes", &[], main, &[]);
        let (_, f2) = profile(jdk, &dir, "r2", "rand=5000,metric=bytecodes", &[], main, &[]);
        assert_eq!(r0.summary()["bytecodes"], r1.summary()["bytecodes"], "{}", jdk.label());
        let (a, b) = (std::fs::read(&f0).unwrap(), std::fs::read(&f1).unwrap());
        assert_ne!(a, b, "{}: rand=5000 sampled where rand=0 did", jdk.label());
        assert_eq!(b, std::fs::read(&f2).unwrap(), "{}: rand is not reproducible", jdk.label());
        // A sample weighs its period plus the few bytecodes counted past zero before the next check:
        // periods of exactly 10,000 with rand=0, of 10,000..14,999 with rand=5000.
        let per0 = r0.summary_f64("bytecodes") / r0.summary_f64("samples");
        assert!((10_000.0..10_050.0).contains(&per0), "{}: {per0} bytecodes per sample", jdk.label());
        let per = r1.summary_f64("bytecodes") / r1.summary_f64("samples");
        assert!((per - 12_500.0).abs() < 150.0, "{}: {per} bytecodes per sample", jdk.label());
    });
}

#[test]
fn sample_points_sit_every_period_however_long_the_commits() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-period-{}", jdk.label()));
        let main = "kprof.harness.Deterministic";
        let counters = |name: &str, opts: &str| profile_json(jdk, &dir, name, opts, main).1.meta.counters;
        // A commit that ends a period stands for that period; what it brought past the end opens the next
        // one. So with rand=0 every sample weighs exactly gran, however many bytecodes each method holds
        // before it commits (maxpath=auto: 100 and 1,000 here, and 5,000 given).
        let mut totals = Vec::new();
        for (name, opts, gran) in [
            ("g1e4", "gran=10000,rand=0", 10_000),
            ("g1e5", "gran=100000,rand=0", 100_000),
            ("g1e5m", "gran=100000,rand=0,maxpath=5000", 100_000),
        ] {
            let c = counters(name, opts);
            // Deterministic counts some 196 M bytecodes: its sample points cover all but each thread's last period.
            assert!(c["samples"] * gran > 190_000_000, "{}: {name}: {c:?}", jdk.label());
            assert_eq!(c["sampled_bytecodes"], c["samples"] * gran, "{}: {name}: {c:?}", jdk.label());
            // What each thread counted after its last sample point: less than one period a thread.
            assert!(c["residual_bytecodes"] < c["threads_sampled"] * gran, "{}: {name}: {c:?}", jdk.label());
            totals.push(c["estimated_bytecodes"]);
        }
        // Commits longer than a period (no bound, gran=100): each weighs on its one sample, more than gran;
        // the total is every bytecode counted all the same.
        let c = counters("g100m0", "gran=100,rand=0,maxpath=0");
        assert!(c["sampled_bytecodes"] > c["samples"] * 100, "{}: {c:?}", jdk.label());
        totals.push(c["estimated_bytecodes"]);
        assert!(totals.windows(2).all(|w| w[0] == w[1]), "{}: totals {totals:?}", jdk.label());
    });
}

#[test]
fn maxpath_places_more_or_fewer_checks_but_counts_the_same() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-maxpath-{}", jdk.label()));
        let main = "kprof.harness.Deterministic";
        let (a, fa) = profile(jdk, &dir, "m50", "include=kprof.harness.*,gran=1000", &[], main, &[]);
        let (b, fb) = profile(jdk, &dir, "m3", "include=kprof.harness.*,gran=1000,maxpath=3", &[], main, &[]);
        let (c, _) = profile(jdk, &dir, "m0", "include=kprof.harness.*,gran=1000,maxpath=0", &[], main, &[]);
        let total = a.summary()["bytecodes"].clone();
        assert_eq!(b.summary()["bytecodes"], total, "{}", jdk.label());
        assert_eq!(c.summary()["bytecodes"], total, "{}", jdk.label());
        // Checks every 3 bytecodes sample nearer to where each period ends: other sample points.
        assert_ne!(std::fs::read(&fa).unwrap(), std::fs::read(&fb).unwrap(), "{}", jdk.label());
    });
}

#[test]
fn callsite_off_merges_contexts_that_differ_only_by_callsite() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-callsite-{}", jdk.label()));
        let main = "kprof.harness.Deterministic";
        let leaf_work_nodes = |opts: &str, name: &str| {
            let (run, p) = profile_json(jdk, &dir, name, &format!("include=kprof.harness.*,{opts}"), main);
            let mut sites: Vec<i32> = p
                .nodes
                .iter()
                .filter(|n| p.frames[n.frame as usize].display_name().contains("Deterministic.leafWork("))
                .map(|n| n.callsite)
                .collect();
            sites.sort();
            (sites, run.summary()["bytecodes"].clone())
        };
        // round() calls leafWork from two callsites.
        let (on, total_on) = leaf_work_nodes("callsite=on", "on");
        let (off, total_off) = leaf_work_nodes("callsite=off", "off");
        assert_eq!(on.len(), 2, "{}: {on:?}", jdk.label());
        assert_ne!(on[0], on[1]);
        assert!(on.iter().all(|&s| s > 0));
        assert_eq!(off, [-1], "{}", jdk.label());
        assert_eq!(total_on, total_off);
    });
}

#[test]
fn include_restricts_rewriting_and_exclude_removes_frames() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-filter-{}", jdk.label()));
        let main = "kprof.harness.Deterministic";
        let (all, f_all) = profile(jdk, &dir, "all", "", &[], main, &[]);
        let (inc, f_inc) = profile(jdk, &dir, "inc", "include=kprof.harness.*", &[], main, &[]);
        let (_, f_exc) =
            profile(jdk, &dir, "exc", "exclude=java.util.*:kprof.harness.Deterministic$ByKeyThenName", &[], main, &[]);
        let n = |r: &Run, k: &str| r.summary_f64(k);
        assert!(n(&all, "classes_rewritten") > 300.0, "{}", all.stderr);
        assert_eq!(n(&inc, "classes_rewritten"), 3.0, "{}: {}", jdk.label(), inc.stderr);
        assert!(n(&inc, "filtered") > 300.0);
        assert!(n(&inc, "bytecodes") < n(&all, "bytecodes") / 2.0);
        let s_all = read_collapsed(&f_all);
        let s_inc = read_collapsed(&f_inc);
        let s_exc = read_collapsed(&f_exc);
        let frames_with = |s: &[(Vec<String>, u64)], p: &str| count_where(s, |st| st.iter().any(|f| f.starts_with(p)));
        assert!(frames_with(&s_all, "java.util.") > 0);
        assert!(frames_with(&s_all, "kprof.harness.Deterministic$ByKeyThenName") > 0);
        // Only harness frames with include; no java.util frames and no comparator with exclude.
        assert!(s_inc.iter().all(|(s, _)| s.iter().all(|f| f.starts_with(HARNESS_PREFIX))), "{}", jdk.label());
        assert_eq!(frames_with(&s_exc, "java.util."), 0, "{}", jdk.label());
        assert_eq!(frames_with(&s_exc, "kprof.harness.Deterministic$ByKeyThenName"), 0, "{}", jdk.label());
        assert!(frames_with(&s_exc, "java.lang.String") > 0, "{}: other JDK classes are still counted", jdk.label());
    });
}

#[test]
fn bad_option_values_stop_the_jvm_with_one_line() {
    let jdk = &jdks()[0];
    for (opts, line) in [
        ("gran=0", "kprof: bad option 'gran=0': accepted: 1..1000000000"),
        ("gran=lots", "kprof: bad option 'gran=lots': accepted: 1..1000000000"),
        ("rand=-1", "kprof: bad option 'rand=-1': accepted: 0..1000000000"),
        ("maxpath=70000", "kprof: bad option 'maxpath=70000': accepted: auto | 0..65535 (0 = no limit)"),
        ("callsite=maybe", "kprof: bad option 'callsite=maybe': accepted: on | off"),
        ("checks=some", "kprof: bad option 'checks=some': accepted: calls | loops"),
        ("include=", "kprof: bad option 'include=': accepted: class pattern"),
        ("exclude", "kprof: bad option 'exclude=': accepted: class pattern"),
    ] {
        let run = run_verified(jdk, Some(&format!("mode=bytecode,{opts}")), &[], "kprof.harness.Deterministic", &[]);
        assert!(!run.status.success(), "{opts}: the JVM started");
        let ours: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("kprof:")).collect();
        assert_eq!(ours.len(), 1, "{opts}: {}", run.stderr);
        assert!(ours[0].starts_with(line), "{opts}: {}", ours[0]);
        assert!(!run.stdout.contains("deterministic:"), "{opts}: the program ran");
    }
}

/// javac's `synchronized` and `finally` handlers are covered by their own exception range. Code inserted at
/// such a handler, under that range, made C1 refuse the whole method ("exception handler covers itself";
/// left out of the range, "invalid parsing", as the handler may still hold the monitor), so hot JDK and
/// application methods ran interpreted until C2 took them. Both counting modes now count those handlers
/// after the range; no method may hit either bailout.
#[test]
fn handlers_that_cover_themselves_stay_compilable_by_c1() {
    for_each_jdk(|jdk| {
        let base = run_verified(jdk, None, &[], "kprof.harness.Locking", &["300000"]);
        base.assert_ok();
        for mode in ["bytecode", "exact"] {
            let dir = scratch(&format!("c1-{mode}-{}", jdk.version));
            let opts = format!("mode={mode},file={}", dir.join("p.collapsed").display());
            let run = run_verified(jdk, Some(&opts), &["-XX:+PrintCompilation"], "kprof.harness.Locking", &["300000"]);
            run.assert_ok();
            // PrintCompilation writes to stdout from the compiler threads: the program's line may follow part of
            // one of theirs.
            let result = |out: &str| out.lines().find_map(|l| l.find("locking:").map(|i| l[i..].to_owned()));
            assert_eq!(result(&run.stdout), result(&base.stdout), "{} {mode}", jdk.label());
            let bailouts: Vec<&str> = run
                .stdout
                .lines()
                .filter(|l| l.contains("exception handler covers itself") || l.contains("invalid parsing"))
                .collect();
            assert!(bailouts.is_empty(), "{} {mode}: C1 bailouts:\n{}", jdk.label(), bailouts.join("\n"));
            // Both hot methods reached compiled code (C1 tiers 1-3 or C2).
            for m in ["kprof.harness.Locking::locked", "kprof.harness.Locking::guarded"] {
                assert!(run.stdout.lines().any(|l| l.contains(m)), "{} {mode}: {m} never compiled", jdk.label());
            }
        }
    });
}

#[test]
fn samples_split_between_caller_callee_and_leaf_as_their_bytecodes() {
    // leaf: 32 bytecodes; mid: ten times 30 bytecodes and a call of leaf; caller: the same calling mid. A
    // call every 33 bytecodes puts one in every MaxPath stretch, so the periods run out at checks before
    // calls, at leaf returns and at the exits of mid and caller, with the counts of every frame committed
    // in between: recorded in the context each ran out in, caller, mid and leaf take their shares of the
    // bytecodes by construction (332, 3,320 and 3,200 of every 6,852).
    let jdk0 = &jdks()[0];
    let dir = scratch("bc-split");
    let mut src = String::from("public final class CallSplit {\n    static int leaf(int x) {\n");
    straight_lines(&mut src, 5);
    src.push_str("        return x;\n    }\n");
    for (name, callee) in [("mid", "leaf"), ("caller", "mid")] {
        src.push_str(&format!("    static int {name}(int x) {{\n"));
        for _ in 0..10 {
            straight_lines(&mut src, 5);
            src.push_str(&format!("        x = {callee}(x);\n"));
        }
        src.push_str("        return x;\n    }\n");
    }
    src.push_str("    public static void main(String[] args) {\n        int s = 0;\n");
    src.push_str("        for (int i = 0; i < 100000; i++) {\n            s += caller(i);\n        }\n");
    src.push_str("        System.out.println(\"split: \" + s);\n    }\n}\n");
    compile_into(jdk0, &dir, "CallSplit", &src);
    for_each_jdk(|jdk| {
        let file = dir.join(format!("split-{}.collapsed", jdk.label()));
        run_generated(jdk, &dir, "CallSplit", "include=CallSplit", &file);
        let stacks = read_collapsed(&file);
        let leaf_is = |name: &str| {
            let frame = format!("CallSplit.{name}(");
            count_where(&stacks, |s| s.last().is_some_and(|f| f.starts_with(&frame))) as f64
        };
        let (caller, mid, leaf) = (leaf_is("caller"), leaf_is("mid"), leaf_is("leaf"));
        let total = caller + mid + leaf;
        assert!(total > 60_000.0, "{}: {total} samples", jdk.label());
        for (name, n, bytecodes) in [("caller", caller, 332.0), ("mid", mid, 3320.0), ("leaf", leaf, 3200.0)] {
            let share = bytecodes / 6852.0;
            assert!((n / total - share).abs() < 0.01, "{}: {name} has {n} of {total} samples", jdk.label());
        }
        // Every sample sits in its own context, below its callers.
        let nested = count_where(&stacks, |s| {
            let names: Vec<&str> = s.iter().filter(|f| f.starts_with("CallSplit.")).map(|f| short(f)).collect();
            ["CallSplit.main", "CallSplit.caller", "CallSplit.mid", "CallSplit.leaf"].starts_with(&names)
        });
        assert_eq!(nested as f64, total + leaf_is("main"), "{}: samples outside main;caller;mid;leaf", jdk.label());
    });
}

/// Same program, same input, same profile, through first-time linkage of lambdas, method references,
/// string switches, records, string concatenation, a ClassValue and a ThreadLocal. Samples at fixed points
/// every thousand bytecodes (`gran=1000,rand=0`), so that a count that moves by a few bytecodes moves a
/// sample; two JVMs at a time, because what broke determinism was a race at JVM start-up that a loaded
/// machine makes likely (docs/bytecode.md, "Determinism through first-time linkage": before the fix, 6 of
/// 30 runs on JDK 17 gave another profile). The last four walk the thread's stack instead (`stack=walk`,
/// `stack=fp`), which sees the frames of threads started before kprof: the same profile among them.
#[test]
fn first_time_linkage_gives_the_same_profile_in_ten_runs() {
    // Method references and lambdas linked inside the profiled methods, records' toString/equals/hashCode,
    // string concatenation through StringConcatFactory, a string switch, a ClassValue and a ThreadLocal with
    // an initial value: the JDK links and initializes them on first use through java.lang.invoke, whose
    // caches follow identity hashes and other threads; the profile must not.
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-linkage-{}", jdk.label()));
        let runs: Vec<(Run, PathBuf)> = (0..5)
            .flat_map(|pair| {
                let dir = &dir;
                std::thread::scope(|s| {
                    let both: Vec<_> = (0..2)
                        .map(|k| {
                            let name = format!("r{}", pair * 2 + k);
                            // The last two pairs walk the thread's stack, with AsyncGetCallTrace and along
                            // its frame-pointer chain: the same profile as each other (the reified stack's
                            // but for the frames of threads that ran before kprof started).
                            let opts = match pair {
                                3 => "gran=1000,rand=0,stack=walk",
                                4 => "gran=1000,rand=0,stack=fp",
                                _ => "gran=1000,rand=0",
                            };
                            s.spawn(move || profile(jdk, dir, &name, opts, &[], "kprof.harness.Linkage", &[]))
                        })
                        .collect();
                    both.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
                })
            })
            .collect();
        let (run0, file0) = &runs[0];
        for (i, (run, file)) in runs.iter().enumerate() {
            let line = program_line(program_output(run), "linkage:");
            assert_eq!(line["rounds"], "3", "{}: {}", jdk.label(), run.stdout);
            assert!(read_collapsed(file).iter().map(|(_, n)| n).sum::<u64>() > 50_000, "{}: few samples", jdk.label());
            assert_eq!(program_output(run0), program_output(run), "{}: the program's output differs", jdk.label());
            let (first, (run0, file0)) = if i < 6 { (0, (run0, file0)) } else { (6, (&runs[6].0, &runs[6].1)) };
            assert_same_profile(&format!("{}: run {first} against run {i}", jdk.label()), (run0, file0), (run, file));
        }
    });
}

/// An attached bytecode session (states found through the runtime's thread table, not Thread fields) in a
/// program whose threads start and end all the time: a thread ending (which releases its state) and one
/// starting to count (which makes its state) take the runtime's two locks; they must never wait on each
/// other. The program must run to its end.
#[test]
fn threads_starting_and_ending_in_an_attached_session_never_deadlock() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bytecode-churn-attach-{}", jdk.label()));
        let mut cmd = Command::new(jdk.java());
        cmd.arg("-cp").arg(harness_classes()).args(["kprof.harness.ThreadChurn", "12000"]);
        let program = Background::spawn(cmd);
        let pid = program.child.id().to_string();
        let opts = format!("mode=bytecode,file={}", dir.join("churn.collapsed").display());
        let mut attached = false;
        for _ in 0..100 {
            let run = kprof_at(&kprof_bin(), None, &["attach", &pid, &opts]);
            if run.status.success() {
                attached = true;
                break;
            }
            assert!(run.stderr.contains("still starting"), "{}: {}", jdk.label(), run.stderr);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(attached, "{}: never attached", jdk.label());
        let line = program.wait_line("'threadchurn:'", Duration::from_secs(600), |l| l.starts_with("threadchurn:"));
        assert!(line.contains("threads=12000"), "{}: {line}", jdk.label());
    });
}

/// stack=walk keeps no reified stack: a sample walks the thread's own stack and keeps the frames of
/// rewritten methods that call, which are the entries the reified stack holds. So the profiles are the same
/// byte for byte (the counting is the same), through exceptions too; `stack=fp`, which reads the same
/// frames from the frame-pointer chain, gives them too; `stack=auto` walks at coarse granularities; deeper
/// than `depth`, the outer entries are kept as with the reified stack.
#[test]
fn stack_walk_gives_the_profiles_of_the_reified_stack() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-walk-{}", jdk.label()));
        for (program, gran) in [("kprof.harness.Deterministic", 10_000), ("kprof.harness.Throwing", 1000)] {
            let mut runs = Vec::new();
            for stack in ["reified", "walk", "fp"] {
                let name = format!("{}-{stack}", short(program));
                let opts = format!("gran={gran},stack={stack}");
                let (run, file) = profile(jdk, &dir, &name, &opts, &[], program, &[]);
                assert_eq!(run.summary()["stack"], stack, "{}: {}", jdk.label(), run.stderr);
                runs.push((run, std::fs::read(&file).unwrap()));
            }
            let reified = &runs[0];
            assert!(reified.1.len() > 1000, "{}: {program}: a small profile", jdk.label());
            for (stack, other) in ["walk", "fp"].iter().zip(&runs[1..]) {
                assert_eq!(program_output(&reified.0), program_output(&other.0));
                if program.ends_with("Throwing") {
                    // Throwing links string concatenations for the first time inside the profiled code, whose
                    // JDK-side count can still move from run to run whatever the stack: compared on the
                    // harness's frames.
                    let read = |name: &str| read_profile(&dir.join(format!("Throwing-{name}.collapsed"))).unwrap();
                    let overlap = overlap_on_harness(&read("reified"), &read(stack));
                    assert!(overlap > 99.5, "{}: {program}: stack={stack}: overlap {overlap:.2} %", jdk.label());
                    continue;
                }
                assert!(
                    reified.1 == other.1,
                    "{}: {program}: stack={stack} and stack=reified profiles differ",
                    jdk.label()
                );
                assert_eq!(reified.0.summary()["bytecodes"], other.0.summary()["bytecodes"], "{}", jdk.label());
            }
        }
        // auto walks from gran=100000 up (and gives the reified stack's profile there too).
        let program = "kprof.harness.Deterministic";
        let (auto, a) = profile(jdk, &dir, "auto", "gran=100000", &[], program, &[]);
        let (_, r) = profile(jdk, &dir, "reified", "gran=100000,stack=reified", &[], program, &[]);
        assert_eq!(auto.summary()["stack"], "walk", "{}", jdk.label());
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&r).unwrap(), "{}: auto at gran=100000", jdk.label());
        // Below it, auto follows the frame-pointer chain when kprof starts with the JVM (and gives the same
        // profile); with callsite=on it keeps the reified stack.
        let (small, s) = profile(jdk, &dir, "auto-small", "gran=10000", &[], program, &[]);
        assert_eq!(small.summary()["stack"], "fp", "{}", jdk.label());
        let (_, r) = profile(jdk, &dir, "reified-small", "gran=10000,stack=reified", &[], program, &[]);
        assert!(std::fs::read(&s).unwrap() == std::fs::read(&r).unwrap(), "{}: auto at gran=10000", jdk.label());
        let (sites, _) = profile(jdk, &dir, "auto-sites", "gran=10000,callsite=on", &[], program, &[]);
        assert_eq!(sites.summary()["stack"], "reified", "{}", jdk.label());
        // A -XX:-PreserveFramePointer on the command line is the user's: auto keeps the reified stack.
        let (no_fp, _) = profile(jdk, &dir, "auto-nofp", "gran=10000", &["-XX:-PreserveFramePointer"], program, &[]);
        assert_eq!(no_fp.summary()["stack"], "reified", "{}", jdk.label());

        // Deeper than `depth`: the outer 300 entries, [truncated], the method that ran.
        let (deep, file) =
            profile(jdk, &dir, "deep", "gran=100000,stack=walk,depth=300", &[], "kprof.harness.Deep", &["1000", "0.3"]);
        assert!(deep.stdout.contains("deep: depth=1000"), "{}", deep.stdout);
        let stacks = read_collapsed(&file);
        let cut = count_where(&stacks, |s| s.iter().any(|f| f == "[truncated]"));
        assert!(cut > 10, "{}: {cut} truncated samples", jdk.label());
        for (s, _) in &stacks {
            if let Some(at) = s.iter().position(|f| f == "[truncated]") {
                assert_eq!(at, 300, "{}: [truncated] after {at} frames", jdk.label());
                assert_eq!(s.len(), 302, "{}: one frame below [truncated]: {:?}", jdk.label(), &s[at..]);
                assert!(s[..at].iter().skip(1).all(|f| f.contains("Deep.down(")), "{}", jdk.label());
            }
        }
    });
}

/// stack=fp reads each sample's context from the thread's frame-pointer chain, decoding only the frames
/// that changed since its previous sample; `stack=fpcheck` also walks as `stack=walk` does and counts the
/// samples where the two contexts differ. None may, on programs that link call sites for the first time,
/// throw through rewritten frames, recurse past `depth`, run virtual threads, and call Java back from JNI
/// code that keeps no frame pointer (whose samples go to the walk: `left_to_walk`), every rewritten class
/// verified. Most samples must come from the chain without a walk.
#[test]
fn stack_fp_gives_the_walks_contexts() {
    let Some(lib) = option_env!("KPROF_HARNESS_JNI_LIB") else {
        panic!("the harness JNI library was not built (no C compiler at build time)");
    };
    let prop = format!("-Dkprof.harness.jni={lib}");
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-fp-{}", jdk.label()));
        let mut cases: Vec<(&str, &str, Vec<&str>, Vec<&str>)> = vec![
            ("kprof.harness.Deterministic", "gran=1000", vec![], vec![]),
            ("kprof.harness.Throwing", "gran=1000", vec![], vec![]),
            ("kprof.harness.Linkage", "gran=1000", vec![], vec![]),
            ("kprof.harness.Deep", "gran=10000,depth=300", vec![], vec!["1000", "0.3"]),
            ("kprof.harness.NativeCallbacks", "gran=1000", vec![prop.as_str()], vec![]),
        ];
        if jdk.version >= 21 {
            cases[4].2.push("--enable-native-access=ALL-UNNAMED");
        }
        for (main, opts, jvm, args) in &cases {
            let label = format!("{}: {main} {opts}", jdk.label());
            let base = run_verified(jdk, None, jvm, main, args);
            base.assert_ok();
            let (run, _) = profile(jdk, &dir, short(main), &format!("{opts},stack=fpcheck"), jvm, main, args);
            assert_eq!(program_output(&run), program_output(&base), "{label}");
            let s = run.summary();
            let n = |k: &str| s[k].parse::<u64>().unwrap_or_else(|_| panic!("{label}: {k}={}", s[k]));
            assert_eq!(s["stack"], "fp", "{label}");
            assert_eq!(n("fp_mismatches"), 0, "{label}: {}", run.stderr);
            let (samples, walked, left) = (n("samples"), n("fp_walked"), n("left_to_walk"));
            assert!(samples > 1000, "{label}: {samples} samples");
            let from_chain = samples - walked - left;
            if main.ends_with("NativeCallbacks") {
                assert!(left > 100, "{label}: {left} samples left to the walk");
            }
            // Linkage runs mostly code the JIT has not compiled yet: its interpreter frames are placed by
            // their methods read from the frames, once that read has agreed with the walks often enough.
            let share = if main.ends_with("Linkage") { 4 } else { 2 };
            assert!(from_chain * share > samples, "{label}: {from_chain} of {samples} samples from the chain alone");
            let (innermost, read) = (n("walked_innermost"), n("interpreted_read"));
            assert!(innermost <= walked, "{label}: {innermost} of {walked} walks");
            if main.ends_with("Linkage") {
                assert!(read > 1000, "{label}: {read} interpreter frames read without a walk");
            }
            eprintln!(
                "{label}: {from_chain} of {samples} from the chain, {walked} also walked ({innermost} only the \
                 changed frames), {read} interpreter frames read, {left} left to walk"
            );
        }
    });
}

/// count=chords puts the counter updates on the chords of a spanning tree of each method's flow graph
/// instead of one per basic block; granularity checks and exits read the same counts at the same places, so
/// the main thread's profile is the same, context by context and bytecode by bytecode, with either stack,
/// through exceptions and first-time linkage, with every rewritten class (the JDK's too) verified. And the
/// rewrite holds fewer updates, on a program of loops and branches and over the JDK's classes.
#[test]
fn chord_counting_gives_the_profiles_of_block_counting_with_fewer_updates() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-chords-{}", jdk.label()));
        let cases = [
            ("kprof.harness.Deterministic", "gran=10000,stack=reified"),
            ("kprof.harness.Deterministic", "gran=1000000,stack=walk"),
            ("kprof.harness.Throwing", "gran=1000,rand=0,stack=walk"),
            ("kprof.harness.Linkage", "gran=1000,rand=0,stack=reified,callsite=on"),
        ];
        for (program, opts) in cases {
            let mut runs = Vec::new();
            for count in ["blocks", "chords"] {
                let name = format!("{}-{}-{count}", short(program), runs.len());
                let all = format!("{opts},count={count},threads=on,metric=bytecodes");
                let (run, file) = profile(jdk, &dir, &name, &all, &[], program, &[]);
                let mut main: Vec<_> = read_collapsed(&file)
                    .into_iter()
                    .filter(|(s, _)| s.first().is_some_and(|r| r == "[thread main]"))
                    .collect();
                main.sort();
                runs.push((run, main));
            }
            let ((blocks, b), (chords, c)) = (&runs[0], &runs[1]);
            let label = format!("{}: {program} {opts}", jdk.label());
            assert_eq!(program_output(blocks), program_output(chords), "{label}");
            assert!(b.iter().map(|(_, n)| n).sum::<u64>() > 100_000, "{label}: few bytecodes");
            assert!(b == c, "{label}: count=chords gives another main-thread profile than count=blocks");
            let (sb, sc) = (blocks.summary(), chords.summary());
            assert_eq!(sb["count"], "blocks", "{label}");
            assert_eq!(sc["count"], "chords", "{label}");
            let on_chords: u64 = sc["on_chords"].parse().unwrap();
            let by_blocks: u64 = sc["by_blocks"].parse().unwrap();
            assert!(on_chords > 10 * by_blocks, "{label}: {on_chords} methods on chords, {by_blocks} by blocks");
            let updates = |s: &std::collections::BTreeMap<String, String>| s["counter_updates"].parse::<u64>().unwrap();
            assert!(
                (updates(&sc) as f64) < 0.95 * updates(&sb) as f64,
                "{label}: {} updates on chords against {} by blocks",
                updates(&sc),
                updates(&sb)
            );
        }
    });
}

/// checks=loops leaves out the granularity checks before calls (Komorium's places) and keeps those at
/// loop headers and on long paths: fewer checks, the same total of bytecodes, a profile that is the same
/// run after run and close to the one with checks at calls (the commits come in another order, each still
/// holding one invocation's bytecodes), every rewritten class verified, with either stack.
#[test]
fn checks_at_loops_only_count_the_same_with_fewer_checks() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-loopchecks-{}", jdk.label()));
        let program = "kprof.harness.Deterministic";
        for stack in ["reified", "walk"] {
            let label = format!("{}: stack={stack}", jdk.label());
            let mut runs = Vec::new();
            for (i, checks) in ["calls", "loops", "loops"].into_iter().enumerate() {
                let opts = format!("gran=1000,stack={stack},checks={checks}");
                let (run, file) = profile(jdk, &dir, &format!("{stack}-{checks}-{i}"), &opts, &[], program, &[]);
                assert_eq!(run.summary()["checks"], checks, "{label}");
                runs.push((run, file));
            }
            let ((calls, fc), (loops, fl), (again, fa)) = (&runs[0], &runs[1], &runs[2]);
            assert_eq!(program_output(calls), program_output(loops), "{label}");
            assert_same_profile(&format!("{label}: checks=loops, two runs"), (loops, fl), (again, fa));
            assert_eq!(loops.summary()["bytecodes"], again.summary()["bytecodes"], "{label}");
            assert_eq!(calls.summary()["bytecodes"], loops.summary()["bytecodes"], "{label}: totals differ");
            let placed = |r: &Run| r.summary()["checks_placed"].parse::<u64>().unwrap();
            assert!(
                (placed(loops) as f64) < 0.9 * placed(calls) as f64,
                "{label}: {} checks at loops only against {} with calls",
                placed(loops),
                placed(calls)
            );
            let all = CompareOptions { callsites: false, top: 0, only: Vec::new() };
            let (a, b) = (read_profile(fc).unwrap(), read_profile(fl).unwrap());
            let samples = |p: &Profile| p.resolve_metric(Metric::Samples).unwrap();
            let overlap = compare_with(&a, samples(&a), &b, samples(&b), &all).overlap_percent;
            // Two samplings of the same run (196,000 samples each), not one: their overlap is what the
            // sampling's spread leaves, some 2 % apart.
            assert!(overlap > 96.0, "{label}: overlap {overlap:.2} % between checks=calls and checks=loops");
            eprintln!("{label}: checks {} -> {}, overlap {overlap:.2} %", placed(calls), placed(loops));
        }
    });
}

/// Java called back from native code, under stack=walk and stack=fp (which leaves the samples taken under
/// native code that may keep no frame pointer to the walk): the contexts of the native-callback test, and
/// one the reified stack cannot give: code that native code calls after it caught an exception thrown
/// through rewritten frames sits below the frames still on the thread's stack (main → chain, then the
/// native method, which is not rewritten), not below the frames the exception unwound.
#[test]
fn stack_walk_keeps_contexts_through_native_code() {
    let Some(lib) = option_env!("KPROF_HARNESS_JNI_LIB") else {
        panic!("the harness JNI library was not built (no C compiler at build time)");
    };
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("bc-walk-native-{}", jdk.label()));
        let prop = format!("-Dkprof.harness.jni={lib}");
        let mut jvm = vec![prop.as_str()];
        if jdk.version >= 21 {
            jvm.push("--enable-native-access=ALL-UNNAMED");
        }
        for stack in ["walk", "fp"] {
            let (run, file) = profile(
                jdk,
                &dir,
                stack,
                &format!("gran=1000,stack={stack}"),
                &jvm,
                "kprof.harness.NativeCallbacks",
                &[],
            );
            assert!(run.stdout.contains("jni=on"), "{}", run.stdout);
            let stacks = read_collapsed(&file);
            let mut up: Vec<String> = ["NativeCallbacks.main", "NativeCallbacks.chain"].map(String::from).to_vec();
            up.extend(vec!["NativeCallbacks.up".to_string(); 7]);
            up.push("NativeCallbacks.work".into());
            let path = |p: &[&str]| p.iter().map(|f| format!("NativeCallbacks.{f}")).collect::<Vec<_>>();
            for (leaf, expected) in [
                ("NativeCallbacks.work", up),
                ("NativeCallbacks.afterThrow", path(&["main", "chain", "afterThrow"])),
                ("NativeCallbacks.reflected", path(&["main", "viaReflection", "reflected"])),
                ("NativeCallbacks.afterCatch", path(&["main", "chain", "afterCatch"])),
            ] {
                let paths = app_paths_with(&stacks, leaf);
                let n: u64 = paths.iter().map(|(_, n)| n).sum();
                assert!(n > 100, "{}: stack={stack}: {n} samples in {leaf}", jdk.label());
                for (p, _) in paths {
                    assert_eq!(p, expected, "{}: stack={stack}: {leaf} under the wrong context", jdk.label());
                }
            }
        }
    });
}
