//! The sampling engines' signals beside everything else in a real JVM (every JDK under /usr/lib/jvm
//! unless a test says otherwise): JDK 25's JFR CPU-time sampler (jdk.CPUTimeSample) running beside
//! kprof, whichever starts first; a handler installed before kprof's gets every signal that is not
//! kprof's; a handler that replaces kprof's is noticed and reported (summary line and `kprof status`);
//! and sessions started again and again on a JVM whose threads start and end all the time. The tests
//! that attach need root (as tests/attach.rs).

mod common;

use common::*;
use kprof_profile::output::read_profile;
use kprof_profile::Metric;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// JFR settings that record CPU-time samples every 10 ms of a thread's CPU time, and nothing else.
const CPU_TIME_JFC: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="cpu-time" description="CPU-time samples only">
  <event name="jdk.CPUTimeSample">
    <setting name="enabled">true</setting>
    <setting name="throttle">10ms</setting>
    <setting name="stackTrace">true</setting>
  </event>
</configuration>
"#;

/// The installed JDKs that have JFR's CPU-time sampler (25 and later).
fn jdks_with_cpu_time_sampling() -> Vec<Jdk> {
    let found: Vec<Jdk> = jdks().into_iter().filter(|j| j.version >= 25).collect();
    if found.is_empty() {
        eprintln!("not run: no JDK 25 or later under /usr/lib/jvm (jdk.CPUTimeSample is JDK 25's)");
    }
    found
}

/// The start times of the CPU-time samples in a JFR recording, as seconds of the day (UTC), read by
/// the JDK's own `jfr` tool.
fn cpu_time_samples(jdk: &Jdk, recording: &Path) -> Vec<f64> {
    let out = Command::new(jdk.home.join("bin/jfr"))
        .args(["print", "--json", "--events", "jdk.CPUTimeSample"])
        .arg(recording)
        .output()
        .expect("run jfr");
    assert!(out.status.success(), "jfr print: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("jfr prints JSON");
    json["recording"]["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(|e| e["values"]["startTime"].as_str())
                .filter_map(|t| {
                    // 2026-11-26T21:39:06.407991853Z
                    let clock = t.split('T').nth(1)?.trim_end_matches('Z');
                    let mut parts = clock.split(':');
                    let (h, m, s): (f64, f64, f64) =
                        (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
                    Some(h * 3600.0 + m * 60.0 + s)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn seconds_of_day_now() -> f64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    now % 86_400.0
}

fn write_jfc(dir: &Path) -> std::path::PathBuf {
    let jfc = dir.join("cpu-time.jfc");
    std::fs::write(&jfc, CPU_TIME_JFC).unwrap();
    jfc
}

#[test]
fn kprof_and_a_jfr_cpu_time_recording_started_with_the_jvm_both_get_samples() {
    for jdk in jdks_with_cpu_time_sampling() {
        let dir = scratch(&format!("jfr-beside-{}", jdk.label()));
        let jfc = write_jfc(&dir);
        for timer in ["perf", "ctimer"] {
            let recording = dir.join(format!("{timer}.jfr"));
            let file = dir.join(format!("{timer}.collapsed"));
            let jfr = format!("-XX:StartFlightRecording=filename={},settings={}", recording.display(), jfc.display());
            let run = run_java(
                &jdk,
                Some(&format!("interval=10ms,timer={timer},file={}", file.display())),
                &[&jfr],
                "kprof.harness.Busy",
                &["3"],
            );
            run.assert_ok();
            let jfr_samples = cpu_time_samples(&jdk, &recording).len();
            let rate = run.summary_f64("rate");
            eprintln!(
                "{} timer={timer}: kprof {rate} samples per CPU-second, JFR {jfr_samples} CPU-time samples",
                jdk.label()
            );
            // JFR samples the busy thread every 10 ms of its CPU time: some 300 in 3 s.
            assert!(jfr_samples >= 100, "{} timer={timer}: JFR recorded {jfr_samples} CPU-time samples", jdk.label());
            // And kprof's rate is its own timer's, not doubled by JFR's signals (ctimer is tick-bound).
            let expected = if timer == "perf" { 80.0..=125.0 } else { 50.0..=125.0 };
            assert!(expected.contains(&rate), "{} timer={timer}: kprof rate {rate}/cpu-s", jdk.label());
            assert!(count_where(&read_collapsed(&file), |s| has_frame(s, "kprof.harness.Busy.spin")) > 100);
        }
        // itimer cannot avoid SIGPROF: kprof says at start that a JFR CPU-time recording cannot share it.
        let recording = dir.join("itimer.jfr");
        let jfr = format!("-XX:StartFlightRecording=filename={},settings={}", recording.display(), jfc.display());
        let file = dir.join("itimer.collapsed");
        let run = run_java(
            &jdk,
            Some(&format!("interval=10ms,timer=itimer,file={}", file.display())),
            &[&jfr],
            "kprof.harness.Busy",
            &["1"],
        );
        run.assert_ok();
        assert!(run.stderr.contains("kprof: timer=itimer takes SIGPROF"), "{}", run.stderr);
    }
}

/// The `key=value` line kprof prints on success.
fn reply(run: &Run) -> BTreeMap<String, String> {
    run.assert_ok();
    let line =
        run.stdout.lines().find(|l| l.starts_with("pid=")).unwrap_or_else(|| panic!("no result line:\n{}", run.stdout));
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn kprof_attached_beside_a_running_jfr_cpu_time_recording_passes_it_its_sigprof() {
    assert_eq!(euid(), 0, "this test attaches: it needs root");
    for jdk in jdks_with_cpu_time_sampling() {
        let dir = scratch(&format!("jfr-attach-{}", jdk.label()));
        let jfc = write_jfc(&dir);
        let recording = dir.join("r.jfr");
        let file = dir.join("kprof.collapsed");
        let mut cmd = Command::new(jdk.java());
        cmd.arg(format!("-XX:StartFlightRecording=filename={},settings={}", recording.display(), jfc.display()))
            .arg("-cp")
            .arg(harness_classes())
            .args(["kprof.harness.SignalThief", "count", "7"]);
        let app = Background::spawn(cmd);
        let pid = app.child.id().to_string();
        app.wait_line("ready", Duration::from_secs(60), |l| l == "signalthief: ready");
        let ready_at = seconds_of_day_now();
        std::thread::sleep(Duration::from_millis(2000));
        // itimer: kprof's handler takes SIGPROF from JFR's, and passes JFR's own timer signals on.
        let opts = format!("interval=10ms,timer=itimer,file={}", file.display());
        let attach = reply(&kprof_at(&kprof_bin(), None, &["attach", &pid, &opts]));
        let attached_at = seconds_of_day_now();
        assert_eq!(attach["timer"], "itimer", "{attach:?}");
        std::thread::sleep(Duration::from_millis(3000));
        // Both handlers stay: kprof's installed (it would report another that replaced it), JFR's behind it.
        let status = reply(&kprof_at(&kprof_bin(), None, &["status", &pid]));
        assert_eq!(status.get("asgct.handler"), None, "{status:?}");
        let stop = reply(&kprof_at(&kprof_bin(), None, &["stop", &pid]));
        let stopped_at = seconds_of_day_now();
        let run = app.finish(Duration::from_secs(60));
        run.assert_ok();
        let samples = cpu_time_samples(&jdk, &recording);
        let count = |from: f64, to: f64| samples.iter().filter(|&&t| t > from && t < to).count() as f64;
        let before = count(ready_at + 0.5, attached_at) / (attached_at - ready_at - 0.5);
        let during = count(attached_at, stopped_at);
        let stacks = read_collapsed(Path::new(&stop["files"]));
        let own = count_where(&stacks, |s| has_frame(s, "kprof.harness.SignalThief.work")) as f64;
        let all = count_where(&stacks, |_| true) as f64;
        let rate: f64 = status["asgct.rate"].trim_end_matches("/cpu-s").parse().unwrap();
        eprintln!(
            "{}: JFR CPU-time samples: {before:.0} per second before kprof attached; while kprof sampled with \
             timer=itimer, JFR {during:.0}, kprof {all:.0} ({own:.0} in SignalThief.work, {rate:.0} per CPU-second)",
            jdk.label()
        );
        // JFR and kprof each sample every 10 ms of CPU time, JFR the thread's, kprof the process's. How much
        // CPU the working thread gets depends on the machine's load, so the two are compared over the same
        // time: each gets about as many samples as the other. kprof's SIGPROF is the process's: when it
        // comes together with JFR's, the kernel hands it to another thread while the working thread handles
        // JFR's (a thread that blocks a signal passes the process's pending one on), so only part of
        // kprof's samples are of the working thread.
        assert!(before >= 1.0, "{}: {before:.1} JFR samples per second before kprof", jdk.label());
        assert!(during >= 10.0, "{}: JFR recorded {during} CPU-time samples while kprof sampled", jdk.label());
        assert!(during >= 0.5 * all, "{}: JFR {during} samples, kprof {all}: JFR lost its signals", jdk.label());
        assert!(all >= 0.5 * during, "{}: kprof {all} samples, JFR {during}: kprof lost its own", jdk.label());
        assert!(own >= 0.25 * during, "{}: kprof {own} samples of the working thread, JFR {during}", jdk.label());
    }
}

#[test]
fn a_handler_installed_before_kprof_still_gets_the_signals_that_are_not_kprofs() {
    assert_eq!(euid(), 0, "this test attaches: it needs root");
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("chain-{}", jdk.label()));
        let file = dir.join("kprof.collapsed");
        let mut cmd = Command::new(jdk.java());
        cmd.arg("-cp").arg(harness_classes()).args(["kprof.harness.SignalThief", "count", "8"]);
        let app = Background::spawn(cmd);
        let pid = app.child.id();
        app.wait_line("ready", Duration::from_secs(60), |l| l == "signalthief: ready");
        let seen = |app: &Background| -> u64 {
            app.lines()
                .iter()
                .rev()
                .find_map(|(_, l)| {
                    l.strip_prefix("signalthief: seen=").map(|n| n.split(' ').next().unwrap().parse().unwrap())
                })
                .unwrap_or(0)
        };
        let send = |n: u64, before: u64, app: &Background| {
            for _ in 0..n {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(pid as i32, libc::SIGURG) };
                std::thread::sleep(Duration::from_millis(50));
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen(app) < before + n {
                assert!(Instant::now() < deadline, "the program saw {} SIGURG, expected {}", seen(app), before + n);
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        send(3, 0, &app);
        // kprof's cpu timers signal SIGURG: its handler replaces the program's and passes on what is not
        // a kprof timer's.
        let opts = format!("interval=1ms,file={}", file.display());
        let attach = reply(&kprof_at(&kprof_bin(), None, &["attach", &pid.to_string(), &opts]));
        assert_eq!(attach["timer"], "perf", "{attach:?}");
        std::thread::sleep(Duration::from_millis(500));
        let before = seen(&app);
        assert_eq!(before, 3, "kprof's own timer signals reached the program's handler");
        send(3, 3, &app);
        std::thread::sleep(Duration::from_millis(500));
        let stop = reply(&kprof_at(&kprof_bin(), None, &["stop", &pid.to_string()]));
        let after = seen(&app);
        assert_eq!(after, 6, "the program's handler saw {after} signals: 6 sent to it");
        let stacks = read_collapsed(Path::new(&stop["files"]));
        assert!(count_where(&stacks, |s| has_frame(s, "kprof.harness.SignalThief.work")) > 200, "kprof sampled");
    });
}

#[test]
fn a_handler_that_replaces_kprofs_is_reported_in_the_summary_and_by_kprof_status() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("stolen-{}", jdk.label()));
        let file = dir.join("stolen.collapsed");
        let mut cmd = Command::new(jdk.java());
        cmd.arg(format!("-agentpath:{}=mode=asgct+wall,file={}", agent_lib().display(), file.display()))
            .arg("-cp")
            .arg(harness_classes())
            .args(["kprof.harness.SignalThief", "steal", "URG,VTALRM", "4"]);
        let app = Background::spawn(cmd);
        let pid = app.child.id().to_string();
        app.wait_line("installed", Duration::from_secs(60), |l| l == "signalthief: installed");
        std::thread::sleep(Duration::from_millis(200));
        let status = reply(&kprof_at(&kprof_bin(), None, &["status", &pid]));
        assert_eq!(status.get("asgct.handler").map(String::as_str), Some("replaced(SIGURG)"), "{status:?}");
        assert_eq!(status.get("wall.handler").map(String::as_str), Some("replaced(SIGVTALRM)"), "{status:?}");
        let run = app.finish(Duration::from_secs(60));
        run.assert_ok();
        let s = run.summary();
        assert_eq!(s.get("asgct.handler").map(String::as_str), Some("replaced(SIGURG)"), "{s:?}");
        assert_eq!(s.get("wall.handler").map(String::as_str), Some("replaced(SIGVTALRM)"), "{s:?}");
        assert!(run.stderr.contains("kprof: the SIGURG handler was replaced by another component"), "{}", run.stderr);

        // timer=itimer's SIGPROF, the signal a JFR CPU-time recording would want.
        let file = dir.join("stolen-itimer.collapsed");
        let mut cmd = Command::new(jdk.java());
        cmd.arg(format!("-agentpath:{}=timer=itimer,file={}", agent_lib().display(), file.display()))
            .arg("-cp")
            .arg(harness_classes())
            .args(["kprof.harness.SignalThief", "steal", "PROF", "3"]);
        let app = Background::spawn(cmd);
        let pid = app.child.id().to_string();
        app.wait_line("installed", Duration::from_secs(60), |l| l == "signalthief: installed");
        std::thread::sleep(Duration::from_millis(200));
        let status = reply(&kprof_at(&kprof_bin(), None, &["status", &pid]));
        assert_eq!(status.get("asgct.handler").map(String::as_str), Some("replaced(SIGPROF)"), "{status:?}");
        let run = app.finish(Duration::from_secs(60));
        run.assert_ok();
        assert_eq!(run.summary().get("handler").map(String::as_str), Some("replaced(SIGPROF)"), "{}", run.stderr);
    });
}

#[test]
fn sessions_started_again_and_again_while_threads_start_and_end_leave_the_jvm_whole() {
    assert_eq!(euid(), 0, "this test attaches: it needs root");
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("storm-{}", jdk.label()));
        let mut cmd = Command::new(jdk.java());
        cmd.arg("-cp").arg(harness_classes()).args(["kprof.harness.ThreadStorm", "30", "8"]);
        let app = Background::spawn(cmd);
        let pid = app.child.id().to_string();
        app.wait_line("started", Duration::from_secs(60), |l| l == "threadstorm: started");
        let modes = [
            "mode=asgct,timer=itimer",
            "mode=asgct,timer=perf",
            "mode=asgct,timer=ctimer",
            "mode=wall",
            "mode=asgct+wall",
        ];
        let started = Instant::now();
        let mut round = 0;
        let mut slowest = Duration::ZERO;
        // Each start finds the running threads while some of them end: the search, the registration and
        // the timers of threads that are gone must leave the JVM whole, and every profile readable.
        while started.elapsed() < Duration::from_secs(20) {
            let mode = modes[round % modes.len()];
            let file = dir.join(format!("round-{round}.json"));
            let verb = if round == 0 { "attach" } else { "start" };
            let opts = format!("{mode},interval=1ms,file={}", file.display());
            reply(&kprof_at(&kprof_bin(), None, &[verb, &pid, &opts]));
            let (metric, counter) = if mode.starts_with("mode=wall") {
                (Metric::Wall, "wall.samples")
            } else {
                (Metric::Samples, "samples")
            };
            // A session runs at least 300 ms, and on until its first samples: on a loaded machine the
            // program's threads (or the wall sampler) may not run at all for a few hundred milliseconds.
            // A session that has none after 10 s gets none.
            let round_started = Instant::now();
            std::thread::sleep(Duration::from_millis(300));
            loop {
                let status = reply(&kprof_at(&kprof_bin(), None, &["status", &pid]));
                if status.get(counter).is_some_and(|n| n != "0") {
                    break;
                }
                assert!(round_started.elapsed() < Duration::from_secs(10), "round {round} ({mode}): {status:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
            slowest = slowest.max(round_started.elapsed());
            let stop = reply(&kprof_at(&kprof_bin(), None, &["stop", &pid]));
            let profile = read_profile(Path::new(&stop["files"])).unwrap_or_else(|e| panic!("round {round}: {e}"));
            let c = &profile.meta.counters;
            assert!(profile.totals(metric)[0] > 0, "round {round} ({mode}): no samples; {c:?}");
            assert_eq!(c.get("threads_quarantined").copied().unwrap_or(0), 0, "round {round}: {c:?}");
            round += 1;
        }
        let run = app.finish(Duration::from_secs(120));
        run.assert_ok();
        let line = run.stdout.lines().find(|l| l.starts_with("threadstorm: threads=")).expect("threadstorm result");
        let threads: u64 = line["threadstorm: threads=".len()..].split(' ').next().unwrap().parse().unwrap();
        eprintln!(
            "{}: {round} sessions while {threads} threads started and ended (the slowest to its first samples: \
             {slowest:?})",
            jdk.label()
        );
        assert!(round >= 10 && threads > 1000, "{round} rounds, {threads} threads");
    });
}
