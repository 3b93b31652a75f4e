//! The agent's lifecycle under stress: what it prints cannot take the JVM down, no write follows the
//! profile of the VM's exit, and a new session ends the running one the way `kprof stop` does.

mod common;

use common::*;
use kprof_profile::output::read_profile;
use kprof_profile::Metric;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs ExitPaths `how` with stdout and stderr pipes whose reading ends are closed at once: everything
/// written to them fails with EPIPE (the JVM ignores SIGPIPE). Returns the exit code.
fn exit_code_with_closed_pipes(jdk: &Jdk, agent: Option<&str>, how: &str) -> Option<i32> {
    let mut cmd = Command::new(jdk.java());
    if let Some(opts) = agent {
        cmd.arg(format!("-agentpath:{}={opts}", agent_lib().display()));
    }
    cmd.arg("-cp").arg(harness_classes()).args(["kprof.harness.ExitPaths", how]);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn java");
    drop(child.stdout.take());
    drop(child.stderr.take());
    let run = wait_within(child, "java with closed pipes", Duration::from_secs(120), String::new);
    run.status.code()
}

#[test]
fn a_closed_stderr_never_changes_the_jvms_exit_status() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("closed-stderr-{}", jdk.label()));
        for how in ["return", "exit", "throw"] {
            let expected = exit_code_with_closed_pipes(jdk, None, how);
            assert!(expected.is_some(), "{how}: the JVM alone ended by a signal");
            // The summary line and a warning (an output path that cannot be written) both go to the
            // closed stderr.
            let opts =
                format!("interval=1ms,file=/nonexistent-kprof/x.html,file={}", dir.join("p.collapsed").display());
            let got = exit_code_with_closed_pipes(jdk, Some(&opts), how);
            assert_eq!(got, expected, "{}: ExitPaths {how}: exit status with kprof", jdk.label());
            assert!(dir.join("p.collapsed").exists(), "{how}: the profile was not written");
        }
    });
}

#[test]
fn a_dump_racing_the_exit_never_replaces_the_final_profile() {
    // dump=1ms keeps the control thread writing snapshots over the same files as the program ends, so that
    // a snapshot is under way or waiting when the VM dies; the file left must be the exit's whole profile.
    // (The window is narrow: after the exit's write the process ends within milliseconds, so a snapshot
    // taken after it seldom reaches its rename; this is a stress test of the exit, and the guarantee is
    // the agent's: once the exit's profile is written, `write` writes nothing.)
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("dump-race-{}", jdk.label()));
        let file = dir.join("p.json");
        for round in 0..8 {
            let opts = format!(
                "interval=1ms,dump=1ms,file={},file={},file={}",
                dir.join("p.html").display(),
                dir.join("p.pb.gz").display(),
                file.display()
            );
            let run = run_java(jdk, Some(&opts), &[], "kprof.harness.ExitPaths", &["return"]);
            run.assert_ok();
            let profile = read_profile(&file).unwrap_or_else(|e| panic!("round {round}: {e}"));
            let in_file = profile.totals(Metric::Samples)[0];
            let summary: u64 = run.summary()["samples"].parse().unwrap();
            assert!(summary > 0, "round {round}: no samples\n{}", run.stderr);
            assert_eq!(
                in_file,
                summary,
                "{} round {round}: the file holds another profile than the exit's",
                jdk.label()
            );
        }
    });
}

/// Starts ExitPaths `wait` with the agent and `opts`; returns it and its pid once it is ready.
fn start_waiting(jdk: &Jdk, opts: &str) -> (Background, String) {
    let mut cmd = Command::new(jdk.java());
    cmd.arg(format!("-agentpath:{}={opts}", agent_lib().display()))
        .arg("-cp")
        .arg(harness_classes())
        .args(["kprof.harness.ExitPaths", "wait"]);
    let jvm = Background::spawn(cmd);
    jvm.wait_line("ready", Duration::from_secs(60), |l| l == "ready");
    let pid = jvm.child.id().to_string();
    (jvm, pid)
}

fn reply(run: &Run) -> std::collections::BTreeMap<String, String> {
    run.assert_ok();
    let line = run.stdout.lines().last().unwrap_or_default();
    line.split(' ').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_new_session_ends_the_running_one_the_way_stop_does() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("new-session-{}", jdk.label()));
        let first = dir.join("first.json");
        let (jvm, pid) = start_waiting(jdk, &format!("mode=bytecode,include=kprof.harness.*,file={}", first.display()));
        std::thread::sleep(Duration::from_millis(500));

        // `start` with a bytecode session running: the bytecode session is written and its engine stops.
        let second = dir.join("second.json");
        let started = kprof_at(
            &kprof_bin(),
            None,
            &["start", &pid, &format!("mode=asgct,interval=1ms,file={}", second.display())],
        );
        assert_eq!(reply(&started)["mode"], "asgct", "{}", started.stdout);
        let p = read_profile(&first).expect("the bytecode session was written when the new one started");
        assert_eq!(p.metrics(), [Metric::BytecodeSamples, Metric::Bytecodes]);
        assert!(p.totals(Metric::BytecodeSamples)[0] > 0);
        std::thread::sleep(Duration::from_millis(800));
        let stop = reply(&kprof_at(&kprof_bin(), None, &["stop", &pid]));
        assert!(stop["files"].contains("second.json"), "{stop:?}");
        let p = read_profile(&second).unwrap();
        assert_eq!(p.metrics(), [Metric::Samples, Metric::Cpu], "only the new session's engine counts");
        assert!(p.totals(Metric::Samples)[0] > 0);
        assert!(
            p.frames.iter().any(|f| f.display_name().starts_with("kprof.harness.ExitPaths.work")),
            "CPU samples of the program"
        );

        // `attach` to a JVM whose agent was loaded with it: a new session, the running one written first.
        let third = dir.join("third.json");
        let fourth = dir.join("fourth.json");
        reply(&kprof_at(&kprof_bin(), None, &["start", &pid, &format!("mode=asgct,file={}", third.display())]));
        std::thread::sleep(Duration::from_millis(300));
        let attached =
            kprof_at(&kprof_bin(), None, &["attach", &pid, &format!("mode=asgct,file={}", fourth.display())]);
        assert_eq!(reply(&attached)["state"], "running", "{}", attached.stdout);
        assert!(read_profile(&third).is_ok(), "the session running at attach was written");
        reply(&kprof_at(&kprof_bin(), None, &["stop", &pid]));
        assert!(read_profile(&fourth).is_ok());

        // A refused session leaves the running one alone.
        reply(&kprof_at(&kprof_bin(), None, &["start", &pid, &format!("mode=asgct,file={}", third.display())]));
        let refused = kprof_at(&kprof_bin(), None, &["start", &pid, "mode=asgct,file=/nonexistent-kprof/x.json"]);
        assert!(
            !refused.status.success() && refused.stderr.contains("file=/nonexistent-kprof/x.json"),
            "{}",
            refused.stderr
        );
        let status = reply(&kprof_at(&kprof_bin(), None, &["status", &pid]));
        assert_eq!(status["state"], "running", "{status:?}");
        assert!(alive(jvm.child.id()), "{}", jvm.stderr());
    });
}

#[test]
fn the_agent_loads_from_java_tool_options_as_from_the_command_line() {
    // Where the java command line cannot be changed (a launcher script, a container image), the agent
    // goes into JAVA_TOOL_OPTIONS, which the JVM reads itself.
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("tool-options-{}", jdk.label()));
        let file = dir.join("p.collapsed");
        let mut cmd = Command::new(jdk.java());
        cmd.env(
            "JAVA_TOOL_OPTIONS",
            format!("-agentpath:{}=mode=asgct,interval=1ms,file={}", agent_lib().display(), file.display()),
        );
        cmd.arg("-cp").arg(harness_classes()).args(["kprof.harness.ExitPaths", "return"]);
        let run = run_with_timeout(cmd, Duration::from_secs(120));
        run.assert_ok();
        assert!(run.stderr.contains("Picked up JAVA_TOOL_OPTIONS"), "{}", run.stderr);
        let s = run.summary();
        assert_eq!(s["mode"], "asgct", "{s:?}");
        let stacks = read_collapsed(&file);
        assert!(count_where(&stacks, |s| has_frame(s, "kprof.harness.ExitPaths.work(long)void")) > 0);
    });
}
