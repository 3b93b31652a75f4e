//! mode=lock on real JVMs (every JDK under /usr/lib/jvm), with full bytecode verification (LockSupport is
//! rewritten): time per lock site against what the program's threads measured themselves, the lock's class
//! as the leaf, the program's result unchanged (interrupts, timeouts, conditions, wait/notify), the
//! threshold, the rewriting engines in the same JVM, bad values, and sessions started, dumped and stopped
//! through `kprof`.

mod common;

use common::*;
use kprof_profile::output::read_profile;
use kprof_profile::{Metric, Profile};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const VERIFY: [&str; 3] =
    ["-XX:+UnlockDiagnosticVMOptions", "-XX:+BytecodeVerificationLocal", "-XX:+BytecodeVerificationRemote"];

const SITES: &str = "kprof.harness.LockSites";
const WAITS: &str = "kprof.harness.LockAndWait";

/// The three sites of LockSites: the program's key, the method that takes the lock, the leaf label.
const SITE_FRAMES: [(&str, &str, &str); 3] = [
    ("a", "kprof.harness.LockSites.monitorA()long", "[lock java.lang.Object]"),
    ("b", "kprof.harness.LockSites.monitorB()long", "[lock kprof.harness.LockSites$Ledger]"),
    ("c", "kprof.harness.LockSites.reentrant()long", "[lock java.util.concurrent.locks.ReentrantLock$NonfairSync]"),
];

/// Runs `main` with full verification and the agent's `opts`; fails on a verification error or a crash.
fn run_verified(jdk: &Jdk, opts: Option<&str>, main: &str, args: &[&str]) -> Run {
    let run = run_java(jdk, opts, &VERIFY, main, args);
    for bad in ["VerifyError", "ClassFormatError", "internal error", "hs_err_pid", "Exception in thread"] {
        assert!(!run.stderr.contains(bad), "{}: {bad} running {main}:\n{}", jdk.label(), run.stderr);
    }
    run.assert_ok();
    run
}

/// The lock summary's figures (`lock.waits` when several engines ran, `waits` alone).
fn lock_figure(summary: &BTreeMap<String, String>, key: &str) -> u64 {
    let v = summary.get(&format!("lock.{key}")).or_else(|| summary.get(key));
    v.unwrap_or_else(|| panic!("no {key} in {summary:?}")).parse().unwrap()
}

/// Each site's share (percent) of the waits the program measured, and of kprof's lock_ns at the site's
/// lock (the leaf below the site's method); checks that the site's waits are that lock's.
fn site_shares(stdout: &str, collapsed: &Path) -> (Vec<f64>, Vec<f64>, u64) {
    let measured = program_line(stdout, "locksites:");
    let stacks = read_collapsed(collapsed);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for (key, frame, label) in SITE_FRAMES {
        theirs.push(measured[&format!("{key}_ns")].parse::<f64>().unwrap());
        let at_site = count_where(&stacks, |s| has_frame(s, frame) && s.last().is_some_and(|l| l == label));
        ours.push(at_site as f64);
        // Below the site, only its lock (what the JDK does while the lock is held may wait a little).
        let below = count_where(&stacks, |s| has_frame(s, frame));
        assert!(below - at_site <= at_site / 50, "{key}: waits not in {label}: {stacks:?}");
    }
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let share = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| 100.0 * x / v.iter().sum::<f64>()).collect() };
    (share(&theirs), share(&ours), total)
}

fn assert_shares_close(what: &str, measured: &[f64], kprof: &[f64]) {
    assert_shares_within(what, measured, kprof, 0.0);
}

/// Each site's share within 2 points of the measured one; the ReentrantLock's (site c) may read up to
/// `c_low` points more below it. Its waiter also runs between and after its parks (it retries, re-queues
/// and spins before it parks again or holds the lock), time the program counts as waiting and no park's
/// duration holds: JFR's `jdk.ThreadPark` events of a run without kprof add up to 0.97-0.99 of the measured
/// time here, as kprof's do; the rewriting engines, which count every bytecode of that code, make it
/// longer (0.94-0.98 of the measured).
fn assert_shares_within(what: &str, measured: &[f64], kprof: &[f64], c_low: f64) {
    eprintln!("{what}: measured shares {measured:.2?}, kprof {kprof:.2?}");
    for (i, (m, k)) in measured.iter().zip(kprof).enumerate() {
        let below = if i == 2 { 2.0 + c_low } else { 2.0 };
        assert!(k - m <= 2.0 && m - k <= below, "{what}: site {} has {k:.2}% of kprof's lock_ns, {m:.2}% measured", i);
    }
}

#[test]
fn three_lock_sites_get_the_shares_of_the_waits_their_threads_measured() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("lock-sites-{}", jdk.label()));
        let collapsed = dir.join("sites.collapsed");
        let json = dir.join("sites.json");
        let opts = format!("mode=lock,file={},file={}", collapsed.display(), json.display());
        let run = run_verified(jdk, Some(&opts), SITES, &["60"]);
        let (measured, kprof, total) = site_shares(&run.stdout, &collapsed);
        assert_shares_close(&jdk.label(), &measured, &kprof);

        // The three sites hold nearly all the time waited, and kprof saw nearly all the time measured.
        let line = program_line(&run.stdout, "locksites:");
        let measured_ns: u64 = ["a_ns", "b_ns", "c_ns"].iter().map(|k| line[*k].parse::<u64>().unwrap()).sum();
        let stacks = read_collapsed(&collapsed);
        let at_sites: u64 = SITE_FRAMES.iter().map(|(_, f, _)| count_where(&stacks, |s| has_frame(s, f))).sum();
        assert!(at_sites as f64 >= 0.95 * total as f64, "{}: {at_sites} of {total} ns at the sites", jdk.label());
        let seen = at_sites as f64 / measured_ns as f64;
        assert!((0.9..=1.02).contains(&seen), "{}: kprof saw {seen:.3} of the measured waits", jdk.label());

        // Counts and facts: one count per wait, every park call of this JDK's LockSupport bracketed.
        let summary = run.summary();
        let profile = read_profile(&json).unwrap();
        assert_eq!(profile.metrics(), [Metric::LockCount, Metric::LockNs]);
        assert_eq!(profile.totals(Metric::LockCount)[0], lock_figure(&summary, "waits"), "{summary:?}");
        assert_eq!(profile.totals(Metric::LockNs)[0], profile.meta.counters["lock_wait_ns"]);
        assert!(lock_figure(&summary, "monitor") > 0 && lock_figure(&summary, "park") > 0, "{summary:?}");
        // A park's wait ends in the helper's native method, where AsyncGetCallTrace walks (JVMTI walks a
        // thread's first, and monitors entered from compiled code): most parks' stacks are its.
        let counters = &profile.meta.counters;
        let by_asgct = counters["event_walks"] - counters["event_walks_jvmti"];
        assert!(
            2 * by_asgct >= lock_figure(&summary, "park"),
            "{}: {by_asgct} walks by AsyncGetCallTrace",
            jdk.label()
        );
        let park_calls = if jdk.version >= 21 { 5 } else { 6 };
        assert_eq!(profile.meta.counters["lock_parks_bracketed"], park_calls, "{}", jdk.label());
        assert_eq!(summary["lock"], "10us");
    });
}

#[test]
fn the_rewriting_engines_and_the_lock_engine_rewrite_lock_support_together() {
    for_each_jdk(|jdk| {
        for mode in ["bytecode+lock", "lock+exact"] {
            let dir = scratch(&format!("lock-rewriting-{}-{mode}", jdk.label()));
            let collapsed = dir.join("sites.collapsed");
            let opts = format!("mode={mode},metric=lock_ns,file={}", collapsed.display());
            let run = run_verified(jdk, Some(&opts), SITES, &["40"]);
            let (measured, kprof, _) = site_shares(&run.stdout, &collapsed);
            assert_shares_within(&format!("{} {mode}", jdk.label()), &measured, &kprof, 1.0);
            let summary = run.summary();
            assert!(lock_figure(&summary, "park") > 0, "{mode}: no park recorded: {summary:?}");
            let rewritten = summary.get("bytecode.classes_rewritten").or(summary.get("exact.classes_rewritten"));
            assert!(rewritten.is_some_and(|n| n.parse::<u64>().unwrap() > 100), "{mode}: {summary:?}");
        }
    });
}

#[test]
fn a_program_that_contends_and_waits_prints_the_same_result_and_the_threshold_holds() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("lock-waits-{}", jdk.label()));
        let expected = program_line(&run_verified(jdk, None, WAITS, &[]).stdout, "lockandwait:");
        assert_eq!(expected["interrupted"], "3");
        assert_eq!(expected["timed_out"], "true");
        let mut waits = BTreeMap::new();
        for threshold in ["0", "10us"] {
            let counts = dir.join(format!("counts-{threshold}.collapsed"));
            let opts = format!("mode=lock,lock={threshold},metric=lock_count,file={}", counts.display());
            let run = run_verified(jdk, Some(&opts), WAITS, &[]);
            assert_eq!(program_line(&run.stdout, "lockandwait:"), expected, "{} lock={threshold}", jdk.label());
            let summary = run.summary();
            let stacks = read_collapsed(&counts);
            // 2000 parks whose permit was set before them: each returns at once.
            let short = count_where(&stacks, |s| has_frame(s, "LockAndWait.shortParks("));
            if threshold == "0" {
                assert_eq!(lock_figure(&summary, "skipped"), 0, "{summary:?}");
                assert!(short >= 2000, "lock=0: {short} short parks recorded");
                let label = |s: &[String]| s.last().is_some_and(|l| l == "[lock java.lang.Object]");
                assert_eq!(count_where(&stacks, |s| has_frame(s, "LockAndWait.shortParks(") && label(s)), short);
            } else {
                assert!(lock_figure(&summary, "skipped") >= 1000, "lock=10us: {summary:?}");
                assert!(short < 1000, "lock=10us: {short} of the short parks recorded");
            }
            // Condition waits are waiting, not contention (as Object.wait is): counted, not recorded.
            let on_condition =
                |s: &[String]| s.last().is_some_and(|l| l.contains("AbstractQueuedSynchronizer$ConditionObject"));
            assert_eq!(
                count_where(&stacks, on_condition),
                0,
                "{} lock={threshold}: condition waits recorded",
                jdk.label()
            );
            assert!(lock_figure(&summary, "conditions") > 0, "{} lock={threshold}: {summary:?}", jdk.label());
            waits.insert(threshold, (lock_figure(&summary, "waits"), lock_figure(&summary, "skipped")));
        }
        // Within each run (the totals of two runs follow how often the threads happened to contend): lock=0
        // records every wait it sees, lock=10us records some and skips the rest, the short parks among them.
        let ((all, none_skipped), (kept, skipped)) = (waits["0"], waits["10us"]);
        assert!(all >= 2000 && none_skipped == 0, "{}: lock=0: {waits:?}", jdk.label());
        assert!(kept > 0 && kept + skipped >= 2000, "{}: lock=10us: {waits:?}", jdk.label());

        // conditions=on records them, named by their class.
        let conditions = dir.join("conditions.collapsed");
        let opts = format!("mode=lock,conditions=on,metric=lock_count,file={}", conditions.display());
        let run = run_verified(jdk, Some(&opts), WAITS, &[]);
        assert_eq!(program_line(&run.stdout, "lockandwait:"), expected, "{} conditions=on", jdk.label());
        assert_eq!(lock_figure(&run.summary(), "conditions"), 0, "{}: {:?}", jdk.label(), run.summary());
        let stacks = read_collapsed(&conditions);
        let on_condition =
            |s: &[String]| s.last().is_some_and(|l| l.contains("AbstractQueuedSynchronizer$ConditionObject"));
        assert!(count_where(&stacks, on_condition) > 0, "{}: conditions=on: no condition waits", jdk.label());

        // The same with the bytecode engine rewriting LockSupport too.
        let opts = format!("mode=bytecode+lock,file={}", dir.join("bytecode.collapsed").display());
        let run = run_verified(jdk, Some(&opts), WAITS, &[]);
        assert_eq!(program_line(&run.stdout, "lockandwait:"), expected, "{} bytecode+lock", jdk.label());
    });
}

#[test]
fn bad_lock_values_stop_startup_with_one_line_naming_them() {
    for_each_jdk(|jdk| {
        for value in ["1h", "5", "11s", "-1us", "soon", ""] {
            let opt = format!("mode=lock,lock={value}");
            let run = run_java(jdk, Some(&opt), &[], WAITS, &[]);
            assert!(!run.status.success(), "{opt}: the JVM started");
            let ours: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("kprof:")).collect();
            assert_eq!(ours.len(), 1, "{opt}: {ours:?}");
            assert!(ours[0].contains(&format!("'lock={value}'")) && ours[0].contains("accepted"), "{}", ours[0]);
            assert!(!run.stdout.contains("lockandwait:"), "{opt}: the program ran");
        }
    });
}

fn reply(run: &Run) -> BTreeMap<String, String> {
    run.assert_ok();
    let line = run.stdout.lines().last().unwrap_or_default();
    line.split(' ').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn lock_profile(path: &Path) -> Profile {
    let p = read_profile(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(p.metrics(), [Metric::LockCount, Metric::LockNs], "{}", path.display());
    p
}

/// The labels of the profile's leaves that name a lock.
fn lock_labels(p: &Profile) -> Vec<String> {
    let mut names: Vec<String> =
        p.frames.iter().map(|f| f.display_name()).filter(|n| n.starts_with("[lock ") || n == "[park]").collect();
    names.sort();
    names
}

#[test]
fn kprof_starts_dumps_and_stops_lock_sessions() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("lock-sessions-{}", jdk.label()));
        let first = dir.join("first.json");
        let mut cmd = Command::new(jdk.java());
        cmd.args(VERIFY)
            .arg(format!("-agentpath:{}=mode=asgct,file={}", agent_lib().display(), first.display()))
            .arg("-cp")
            .arg(harness_classes())
            .args([SITES, "1", "120"]);
        let jvm = Background::spawn(cmd);
        jvm.wait_line("running", Duration::from_secs(60), |l| l == "locksites: running");
        let pid = jvm.child.id().to_string();

        let lock = dir.join("lock.json");
        let started =
            reply(&kprof_at(&kprof_bin(), None, &["start", &pid, &format!("mode=lock,file={}", lock.display())]));
        assert_eq!((started["state"].as_str(), started["mode"].as_str()), ("running", "lock"), "{started:?}");
        assert_eq!(started["lock"], "10us", "{started:?}");
        std::thread::sleep(Duration::from_millis(1500));
        let dumped = reply(&kprof_at(&kprof_bin(), None, &["dump", &pid]));
        assert!(dumped["files"].contains("lock.json"), "{dumped:?}");
        let at_dump = lock_profile(&lock);
        let dumped_ns = at_dump.totals(Metric::LockNs)[0];
        assert!(dumped_ns > 0, "nothing recorded by the dump");
        std::thread::sleep(Duration::from_millis(1000));
        let stopped = reply(&kprof_at(&kprof_bin(), None, &["stop", &pid]));
        assert!(stopped["files"].contains("lock.json"), "{stopped:?}");
        let at_stop = lock_profile(&lock);
        assert!(at_stop.totals(Metric::LockNs)[0] > dumped_ns, "no waits recorded after the dump");
        let expected: Vec<String> = {
            let mut v: Vec<String> = SITE_FRAMES.iter().map(|(_, _, l)| l.to_string()).collect();
            v.sort();
            v
        };
        for label in &expected {
            assert!(lock_labels(&at_stop).contains(label), "{label} missing: {:?}", lock_labels(&at_stop));
        }

        // Stopped, LockSupport has its own code back; a second session brackets it again.
        let again = dir.join("again.collapsed");
        reply(&kprof_at(&kprof_bin(), None, &["start", &pid, &format!("mode=lock,lock=0,file={}", again.display())]));
        std::thread::sleep(Duration::from_millis(1000));
        let status = reply(&kprof_at(&kprof_bin(), None, &["status", &pid]));
        assert_eq!((status["state"].as_str(), status["mode"].as_str()), ("running", "lock"), "{status:?}");
        reply(&kprof_at(&kprof_bin(), None, &["stop", &pid]));
        let stacks = read_collapsed(&again);
        for (_, frame, label) in SITE_FRAMES {
            let n = count_where(&stacks, |s| has_frame(s, frame) && s.last().is_some_and(|l| l == label));
            assert!(n > 0, "second session: no waits at {frame}");
        }
        assert!(alive(jvm.child.id()), "{}", jvm.stderr());
        assert!(!jvm.stderr().contains("VerifyError"), "{}", jvm.stderr());
    });
}

#[test]
fn cpu_and_lock_engines_in_one_run_give_both_metrics() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("lock-asgct-{}", jdk.label()));
        let json = dir.join("both.json");
        let collapsed = dir.join("both.collapsed");
        let opts =
            format!("mode=asgct+lock,interval=1ms,threads=on,file={},file={}", json.display(), collapsed.display());
        let run = run_verified(jdk, Some(&opts), WAITS, &[]);
        let summary = run.summary();
        assert_eq!(summary["mode"], "asgct+lock");
        let p = read_profile(&json).unwrap();
        assert_eq!(p.metrics(), [Metric::Samples, Metric::Cpu, Metric::LockCount, Metric::LockNs]);
        let samples: u64 = summary["asgct.samples"].parse().unwrap();
        assert!(samples > 0 && p.totals(Metric::Samples)[0] == samples, "{summary:?}");
        assert_eq!(p.totals(Metric::LockCount)[0], lock_figure(&summary, "waits"), "{summary:?}");
        assert!(p.totals(Metric::LockNs)[0] > 0);
        // The first engine's metric is the default view; waits hang below their threads' roots.
        let stacks = read_collapsed(&collapsed);
        assert!(count_where(&stacks, |s| s[0].starts_with("[thread producer-")) > 0, "no producer samples");
        let json_text = std::fs::read_to_string(&json).unwrap();
        assert!(json_text.contains("[lock "), "no lock label in the JSON");
    });
}

#[test]
fn virtual_threads_waits_are_timed_and_rooted_per_virtual_thread() {
    let ran = std::cell::Cell::new(false);
    for_each_jdk(|jdk| {
        let Some(h21) = harness21_classes().filter(|_| jdk.version >= 21) else { return };
        ran.set(true);
        let dir = scratch(&format!("lock-vthreads-{}", jdk.label()));
        let collapsed = dir.join("v.collapsed");
        let cp = format!("{}:{}", harness_classes().display(), h21.display());
        let mut cmd = Command::new(jdk.java());
        cmd.args(VERIFY)
            .arg(format!("-agentpath:{}=mode=lock,threads=on,file={}", agent_lib().display(), collapsed.display()))
            .args(["-cp", &cp, "kprof.harness.VirtualLocks"]);
        let run = run_with_timeout(cmd, Duration::from_secs(300));
        run.assert_ok();
        let measured: f64 = program_line(&run.stdout, "vlocks:")["waited_ns"].parse().unwrap();
        let stacks = read_collapsed(&collapsed);
        let site = |s: &[String]| {
            has_frame(s, "VirtualLocks.locked()") && s.last().is_some_and(|l| l == "[lock java.lang.Object]")
        };
        // From JDK 24 on, a virtual thread blocked on a monitor leaves its carrier: the wait is timed on the
        // virtual thread, wherever it resumes, and hangs below its own root.
        let seen = count_where(&stacks, site) as f64 / measured;
        assert!((0.9..=1.02).contains(&seen), "{}: kprof saw {seen:.3} of the measured waits", jdk.label());
        let roots: std::collections::BTreeSet<&str> =
            stacks.iter().filter(|(s, _)| site(s)).map(|(s, _)| s[0].as_str()).collect();
        assert!(roots.iter().all(|r| r.starts_with("[thread vlock-")), "{roots:?}");
        assert!(roots.len() >= 4, "{}: waits of {} virtual threads: {roots:?}", jdk.label(), roots.len());
    });
    if !ran.get() {
        eprintln!("no JDK 21+ (or no harness21 classes): virtual threads not tested");
    }
}
