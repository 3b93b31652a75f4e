//! Sidecar profiling on real JVMs (every JDK under /usr/lib/jvm): `kprof attach` from outside into a JVM
//! that runs as another user in its own PID and mount namespace with a private /tmp, `dump` while it
//! runs, `stop`, and the service's throughput before, during and after; and the targets kprof must refuse
//! (not a JVM, another user's JVM, -XX:+DisableAttachMechanism, -Xrs, bad options) with one line, a
//! non-zero status and the target unharmed. Needs root (unshare, setpriv).

mod common;

use common::*;
use kprof_profile::output::read_profile;
use kprof_profile::{Metric, Profile};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SERVICE: &str = "kprof.harness.Service";
const NOBODY: u32 = 65534;

fn require_root() {
    assert_eq!(euid(), 0, "the attach tests need root (unshare, setpriv)");
}

/// One 500 ms throughput report of the Service: when it arrived, requests per CPU-second of the worker
/// and per wall-clock second.
struct Rate {
    at: Instant,
    cpu: f64,
    wall: f64,
}

fn rates(service: &Background) -> Vec<Rate> {
    service
        .lines()
        .into_iter()
        .filter(|(_, l)| l.starts_with("service: t_ms="))
        .map(|(at, l)| {
            let kv = program_line(&l, "service:");
            Rate { at, cpu: kv["ops_per_cpu_s"].parse().unwrap(), wall: kv["ops_per_s"].parse().unwrap() }
        })
        .collect()
}

/// Median rates (per CPU-second, per second) of the reports whose whole period lies in [from, to].
fn rate_between(service: &Background, from: Instant, to: Instant) -> (f64, f64, usize) {
    let period = Duration::from_millis(520);
    let inside: Vec<Rate> = rates(service).into_iter().filter(|r| r.at >= from + period && r.at <= to).collect();
    let cpu: Vec<f64> = inside.iter().map(|r| r.cpu).collect();
    let wall: Vec<f64> = inside.iter().map(|r| r.wall).collect();
    (median(&cpu), median(&wall), inside.len())
}

/// Waits until the service has printed reports for `until` after its start.
fn wait_reports(service: &Background, until: Duration) {
    let ms = until.as_millis() as u64;
    service.wait_line(&format!("with t_ms >= {ms}"), until + Duration::from_secs(60), |l| {
        l.strip_prefix("service: t_ms=")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|t| t.parse::<u64>().ok())
            .is_some_and(|t| t >= ms)
    });
}

/// The `key=value` line kprof prints on success.
fn fields(run: &Run) -> BTreeMap<String, String> {
    run.assert_ok();
    let line =
        run.stdout.lines().find(|l| l.starts_with("pid=")).unwrap_or_else(|| panic!("no result line:\n{}", run.stdout));
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn files(f: &BTreeMap<String, String>) -> Vec<PathBuf> {
    f.get("files").map(|v| v.split(',').map(PathBuf::from).collect()).unwrap_or_default()
}

/// Asserts a refusal: non-zero status, nothing on stdout, exactly one line on stderr that contains
/// `needle`. Returns the line.
fn one_line_error(run: &Run, needle: &str) -> String {
    assert!(!run.status.success(), "expected a failure, got success:\n{}", run.stdout);
    assert_eq!(run.stdout, "", "stdout of a refusal");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected on stderr, got:\n{}", run.stderr);
    assert!(lines[0].starts_with("kprof: ") && lines[0].contains(needle), "'{needle}' expected in: {}", lines[0]);
    lines[0].to_string()
}

/// A valid profile of the Service: parses, has samples, shows the request handler.
fn check_profile(path: &Path) -> Profile {
    let profile = read_profile(path).unwrap_or_else(|e| panic!("{e}"));
    let total = samples(&profile);
    assert!(total > 0, "{}: no samples", path.display());
    assert!(
        profile.frames.iter().any(|f| f.display_name().contains("kprof.harness.Service.handle(")),
        "{}: no Service.handle frame",
        path.display()
    );
    profile
}

fn samples(profile: &Profile) -> u64 {
    // CPU samples, or the bytecode engine's where the profile has no CPU samples.
    profile.totals(profile.resolve_metric(Metric::Samples).unwrap())[0]
}

/// Starts `java [jvm_args] -cp harness Service` (as a plain child, in this namespace) and waits until it
/// reports.
fn start_service(jdk: &Jdk, jvm_args: &[&str], env: &[(&str, &str)]) -> (Background, u32) {
    let mut cmd = Command::new(jdk.java());
    cmd.args(jvm_args).arg("-cp").arg(harness_classes()).arg(SERVICE);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let service = Background::spawn(cmd);
    let pid = service.child.id();
    wait_reports(&service, Duration::from_millis(500));
    (service, pid)
}

/// The Service prints a report after `since`: it still runs.
fn assert_still_reporting(service: &Background, pid: u32, since: Instant) {
    assert!(alive(pid), "pid {pid} died\nstderr:\n{}", service.stderr());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rates(service).iter().any(|r| r.at > since) {
        assert!(Instant::now() < deadline, "pid {pid} stopped reporting\nstderr:\n{}", service.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn attach_into_a_container_dump_stop_and_the_service_keeps_its_speed() {
    require_root();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-container-{}", jdk.label()));
        // kprof and its library in a directory the container covers with an empty tmpfs: the target
        // cannot see the library there, so kprof must copy it in.
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(kprof_bin(), bin.join("kprof")).unwrap();
        std::fs::copy(agent_lib(), bin.join("libkprof.so")).unwrap();
        let kprof = bin.join("kprof");
        let out = dir.join("out");

        let classes = harness_classes();
        let java = jdk.java();
        let program = [java.to_str().unwrap(), "-cp", classes.to_str().unwrap(), SERVICE];
        let mut service = Background::spawn(container(&[&bin], Some(NOBODY), &program));
        service.wait_line("'service: started'", Duration::from_secs(60), |l| l.starts_with("service: started"));
        let pid = *children(service.child.id()).first().expect("the JVM in the container");
        service.also_kill.push(pid);

        // `kprof list` sees it, with its pid inside the container.
        let list = kprof_at(&kprof, None, &["list"]);
        list.assert_ok();
        let row = list
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("pid {pid} not listed:\n{}", list.stdout));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((cols[1], cols[2], cols[3]), ("1", "nobody", "-"), "{row}");
        assert!(row.contains(SERVICE), "{row}");

        // Baseline: the warmed-up service without kprof.
        wait_reports(&service, Duration::from_secs(6));
        let baseline_end = Instant::now();
        let (before, before_wall, n_before) =
            rate_between(&service, baseline_end - Duration::from_millis(3100), baseline_end);
        assert!(n_before >= 4, "too few baseline reports: {n_before}");

        // Attach, then poll status until the first sample.
        let t0 = Instant::now();
        let opts = "mode=asgct,interval=1ms,file=/tmp/svc-%n.collapsed,file=/tmp/svc-%n.json";
        let attach = kprof_at(&kprof, None, &["attach", &pid.to_string(), opts]);
        let attach_ms = t0.elapsed().as_secs_f64() * 1e3;
        let f = fields(&attach);
        assert_eq!((f["pid"].as_str(), f["nspid"].as_str(), f["user"].as_str()), (&*pid.to_string(), "1", "nobody"));
        assert_eq!((f["state"].as_str(), f["mode"].as_str(), f["interval"].as_str()), ("running", "asgct", "1ms"));
        let root = format!("/proc/{pid}/root/tmp/");
        assert!(files(&f).iter().all(|p| p.starts_with(&root)), "paths readable from outside expected: {f:?}");
        let first_sample_ms = loop {
            let status = fields(&kprof_at(&kprof, None, &["status", &pid.to_string()]));
            if status["samples"].parse::<u64>().unwrap() > 0 {
                break t0.elapsed().as_secs_f64() * 1e3;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "no sample 5 s after attach: {status:?}");
        };
        let attached = Instant::now();

        // The library was copied into the container's /tmp, privately, as the target's user; the attach
        // trigger file is gone.
        let private = PathBuf::from(format!("/proc/{pid}/root/tmp/.kprof-{NOBODY}"));
        let meta = std::fs::symlink_metadata(&private).unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (NOBODY, 0o700));
        let copies: Vec<_> = std::fs::read_dir(&private)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("libkprof-"))
            .collect();
        assert_eq!(copies.len(), 1, "one copy of the library expected");
        assert_eq!(copies[0].metadata().unwrap().uid(), NOBODY);
        for trigger in [format!("/proc/{pid}/cwd/.attach_pid1"), format!("/proc/{pid}/root/tmp/.attach_pid1")] {
            assert!(!Path::new(&trigger).exists(), "{trigger} left behind");
        }

        // Two dumps while it runs: each a valid profile, the second with more samples.
        let mut last = 0;
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(1500));
            let t = Instant::now();
            let dump = fields(&kprof_at(&kprof, None, &["dump", &pid.to_string()]));
            let dump_ms = t.elapsed().as_secs_f64() * 1e3;
            let written = files(&dump);
            assert_eq!(written.len(), 2, "{dump:?}");
            for file in &written {
                let n = samples(&check_profile(file));
                assert!(n > last, "{}: {n} samples, not more than the previous dump's {last}", file.display());
            }
            last = samples(&check_profile(&written[0]));
            eprintln!("{}: dump in {dump_ms:.0} ms, {last} samples", jdk.label());
        }

        // Stop, copying the files out.
        let stop_at = Instant::now();
        let stop = fields(&kprof_at(&kprof, None, &["stop", &pid.to_string(), "--copy-to", out.to_str().unwrap()]));
        let copied = files(&stop);
        assert_eq!(copied.len(), 2, "{stop:?}");
        for file in &copied {
            assert!(file.starts_with(&out), "{} not in {}", file.display(), out.display());
            assert!(samples(&check_profile(file)) >= last);
        }
        let (during, during_wall, n_during) = rate_between(&service, attached, stop_at);
        let status = fields(&kprof_at(&kprof, None, &["status", &pid.to_string()]));
        assert_eq!(status["state"], "stopped", "{status:?}");
        // After stop, a dump writes the stopped session's profile again; a file it cannot write is a
        // one-line error that names it.
        let again = fields(&kprof_at(&kprof, None, &["dump", &pid.to_string(), "file=/tmp/svc-again.collapsed"]));
        assert_eq!(files(&again), vec![PathBuf::from(format!("{root}svc-again.collapsed"))], "{again:?}");
        assert!(samples(&check_profile(&files(&again)[0])) >= last);
        let bad = kprof_at(&kprof, None, &["dump", &pid.to_string(), "file=/nonexistent/kprof/x.collapsed"]);
        one_line_error(&bad, "cannot write /nonexistent/kprof/x.collapsed");

        // After stop: back to the speed it had before kprof came. Other processes on the machine can only
        // slow the service down, so a disturbed 3 s window is measured again, for up to 15 s: the test
        // asks whether the service gets back to its speed, not whether the machine stays quiet.
        let settled = stop_at + Duration::from_secs(1);
        let (mut after, mut after_wall, mut first_after, mut windows) = (0.0f64, 0.0, None, 0);
        while Instant::now() < settled + Duration::from_secs(18) {
            std::thread::sleep(Duration::from_millis(500));
            let now = Instant::now();
            if now < settled + Duration::from_millis(3100) {
                continue;
            }
            let (cpu, wall, n) = rate_between(&service, now - Duration::from_millis(3100), now);
            assert!(n >= 4, "too few reports after stop: {n}");
            windows += 1;
            first_after.get_or_insert(cpu);
            if cpu > after {
                (after, after_wall) = (cpu, wall);
            }
            if after >= 0.95 * before {
                break;
            }
        }
        assert_still_reporting(&service, pid, settled);
        eprintln!(
            "{}: attach {attach_ms:.0} ms, first sample {first_sample_ms:.0} ms after the attach command started; \
             requests per CPU-second before {before:.0}, during {during:.0} ({n_during} reports), after stop {after:.0} \
             (after/before {:.3}; first 3 s window after stop {:.3}, {windows} window(s)); per second \
             {before_wall:.0} / {during_wall:.0} / {after_wall:.0}",
            jdk.label(),
            after / before,
            first_after.unwrap_or(f64::NAN) / before
        );
        assert!(first_sample_ms < 1000.0, "attach to first sample took {first_sample_ms:.0} ms");
        assert!(
            after >= 0.90 * before,
            "after stop the service runs at {after:.0} requests per CPU-second, below 90% of its {before:.0} before"
        );

        // A new session in the same agent, then `attach` again: the loaded agent treats it as `start`.
        let start =
            fields(&kprof_at(&kprof, None, &["start", &pid.to_string(), "interval=10ms,file=/tmp/second.collapsed"]));
        assert_eq!((start["state"].as_str(), start["interval"].as_str()), ("running", "10ms"), "{start:?}");
        let again =
            fields(&kprof_at(&kprof, None, &["attach", &pid.to_string(), "interval=1ms,file=/tmp/third.collapsed"]));
        assert_eq!((again["state"].as_str(), again["interval"].as_str()), ("running", "1ms"), "{again:?}");
        std::thread::sleep(Duration::from_millis(500));
        let third = fields(&kprof_at(&kprof, None, &["stop", &pid.to_string()]));
        assert_eq!(files(&third), vec![PathBuf::from(format!("/proc/{pid}/root/tmp/third.collapsed"))]);
        check_profile(&files(&third)[0]);
        assert_still_reporting(&service, pid, Instant::now());

        // The copies outlive the target.
        drop(service);
        for file in &copied {
            check_profile(file);
        }
    });
}

/// A JVM attached from its first milliseconds on, as a script that starts it and attaches at once does:
/// until it can take an agent, every attempt is refused as still starting (a launcher that has not loaded
/// the VM yet, a VM that has not written its counters yet, one whose counters say it is starting) and the
/// JVM is not signalled: HotSpot catches SIGQUIT some milliseconds before it writes its counters, and a
/// SIGQUIT then started no attach listener (kprof waited 5 s for it, and refused). Twenty JVMs per JDK,
/// the first attempt 0, 1, ... 19 ms after the launcher starts, so that one falls in each moment of the
/// start-up; then ten without counters (`-XX:-UsePerfData`), which kprof signals as soon as they catch
/// SIGQUIT: JDK 17 may then load the agent before the VM is live, which must be refused as still
/// starting too (not as an agent that failed), and the next attempt must attach.
#[test]
fn a_jvm_attached_from_its_first_millisecond_is_refused_as_starting_until_it_is_attached() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-early-{}", jdk.label()));
        for round in 0..30 {
            let mut cmd = Command::new(jdk.java());
            // Rounds 20.. without counters: nothing tells kprof the VM is starting once it catches SIGQUIT,
            // so it signals, maybe before the VM is live.
            if round >= 20 {
                cmd.arg("-XX:-UsePerfData");
            }
            cmd.arg("-cp").arg(harness_classes()).arg(SERVICE);
            let service = Background::spawn(cmd);
            std::thread::sleep(Duration::from_millis(round % 20));
            let pid = service.child.id().to_string();
            let opts = format!("interval=10ms,file={}", dir.join(format!("r{round}.collapsed")).display());
            let start = Instant::now();
            let mut refusals = 0;
            loop {
                let run = kprof_at(&kprof_bin(), None, &["attach", &pid, &opts]);
                if run.status.success() {
                    break;
                }
                let line = one_line_error(&run, "still starting");
                refusals += 1;
                assert!(start.elapsed() < Duration::from_secs(60), "{} round {round}: {line}", jdk.label());
            }
            let stop = kprof_at(&kprof_bin(), None, &["stop", &pid]);
            assert!(stop.status.success(), "{} round {round}: {}", jdk.label(), stop.stderr);
            assert!(!service.stdout().contains("Full thread dump"), "{} round {round}: SIGQUIT dumped", jdk.label());
            eprintln!("{} round {round}: attached after {refusals} refusals, {:?}", jdk.label(), start.elapsed());
        }
    });
}

#[test]
fn the_counters_file_an_exited_jvm_left_under_a_reused_pid_is_not_the_targets() {
    require_root();
    for_each_jdk(|jdk| {
        // A JVM that cannot be attached writes its counters (they say so), and is killed: its file stays.
        let (gone, gone_pid) = start_service(jdk, &["-XX:+DisableAttachMechanism"], &[]);
        let counters = std::fs::read(format!("/tmp/hsperfdata_root/{gone_pid}")).unwrap();
        drop(gone);
        // Its pid comes round again for another JVM (one without counters of its own, so that the file
        // stays as the exited JVM left it): the reuse is staged by copying the file to the new pid.
        std::thread::sleep(Duration::from_millis(1500));
        let (service, pid) = start_service(jdk, &["-XX:-UsePerfData"], &[]);
        let planted = PathBuf::from(format!("/tmp/hsperfdata_root/{pid}"));
        std::fs::write(&planted, &counters).unwrap();
        let p = pid.to_string();
        let attach = kprof_at(&kprof_bin(), None, &["attach", &p, "interval=1ms"]);
        let _ = std::fs::remove_file(&planted);
        assert_eq!(fields(&attach)["state"], "running", "{}", jdk.label());
        fields(&kprof_at(&kprof_bin(), None, &["stop", &p]));
        assert!(!service.stdout().contains("Full thread dump"), "the JVM printed a thread dump");
    });
}

#[test]
fn a_process_that_is_not_a_jvm_is_refused_and_never_signalled() {
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id().to_string();
    std::thread::sleep(Duration::from_millis(100));
    for args in [vec!["attach", &pid, "interval=1ms"], vec!["attach", &pid]] {
        let run = kprof_at(&kprof_bin(), None, &args);
        one_line_error(&run, "is not a JVM");
    }
    let status = kprof_at(&kprof_bin(), None, &["status", &pid]);
    one_line_error(&status, "no kprof agent");
    assert!(sleeper.try_wait().unwrap().is_none(), "sleep died");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();

    // A pid that does not exist, and one that is not a number.
    one_line_error(&kprof_at(&kprof_bin(), None, &["attach", "999999999"]), "no process with pid 999999999");
    let bad = kprof_at(&kprof_bin(), None, &["attach", "nope"]);
    assert_eq!(bad.status.code(), Some(2));
    one_line_error(&bad, "'nope' is not a pid");
}

#[test]
fn another_users_jvm_and_bad_options_are_refused_with_the_target_unharmed() {
    require_root();
    for_each_jdk(|jdk| {
        let (service, pid) = start_service(jdk, &[], &[]);
        let p = pid.to_string();
        let socket = PathBuf::from(format!("/tmp/.java_pid{pid}"));
        // A listener socket an earlier, killed JVM with this pid left (pids are reused) is not this JVM's:
        // this one has not been signalled, so the file says nothing yet about what kprof does to it.
        let _ = std::fs::remove_file(&socket);
        let since = Instant::now();

        // Bad options: refused before the target is touched (no attach listener was started).
        let bad = kprof_at(&kprof_bin(), None, &["attach", &p, "interval=1ms,mode=bogus"]);
        assert_eq!(bad.status.code(), Some(2));
        one_line_error(&bad, "bad option 'mode=bogus'");
        // Options past HotSpot's 1024 bytes, in characters of two bytes: one line, not a panic.
        let long = format!("interval=1ms,file=/tmp/{}.collapsed", "é".repeat(600));
        let run = kprof_at(&kprof_bin(), None, &["attach", &p, &long]);
        assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
        one_line_error(&run, "more than the 1024 bytes HotSpot accepts");
        assert!(!socket.exists(), "bad options reached the target");

        // No agent loaded yet.
        one_line_error(&kprof_at(&kprof_bin(), None, &["stop", &p]), "no kprof agent");
        // No agent, but the socket file an exited process with this pid left (pids are reused: CI's
        // containers reuse them within one run): still "no agent", and the attach below replaces it.
        let agent_dir = PathBuf::from("/tmp/.kprof-0");
        if !agent_dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&agent_dir).unwrap();
        }
        let stale = agent_dir.join(format!("{pid}.sock"));
        let _ = std::fs::remove_file(&stale);
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        for command in ["stop", "status"] {
            let line = one_line_error(&kprof_at(&kprof_bin(), None, &[command, &p]), "no kprof agent");
            assert!(line.contains("stale socket"), "{line}");
        }

        // kprof as nobody against root's JVM.
        for args in [vec!["attach", &p, "interval=1ms"], vec!["status", &p], vec!["stop", &p]] {
            let run = kprof_at(&kprof_bin(), Some(NOBODY), &args);
            one_line_error(&run, "only the process's user or root may attach");
        }
        assert!(!socket.exists(), "kprof signalled another user's JVM");
        assert_still_reporting(&service, pid, since);
        assert!(!service.stdout().contains("Full thread dump"), "the JVM got SIGQUIT");

        // Unharmed: the same JVM takes an attach from its own user (root, in this namespace: no copy).
        let f =
            fields(&kprof_at(&kprof_bin(), None, &["attach", &p, "interval=1ms,file=/tmp/kprof-test-%p.collapsed"]));
        assert_eq!(f["state"], "running");
        std::thread::sleep(Duration::from_millis(300));
        let stop = fields(&kprof_at(&kprof_bin(), None, &["stop", &p]));
        let written = files(&stop);
        assert_eq!(written, vec![PathBuf::from(format!("/tmp/kprof-test-{pid}.collapsed"))]);
        check_profile(&written[0]);
        let _ = std::fs::remove_file(&written[0]);
        assert!(!service.stdout().contains("Full thread dump"), "the JVM printed a thread dump");
        if jdk.version >= 21 {
            assert!(service.stderr().contains("A JVM TI agent has been loaded dynamically"), "{}", service.stderr());
        }
    });
}

#[test]
fn jvms_that_cannot_be_attached_are_refused_and_never_signalled() {
    require_root();
    for_each_jdk(|jdk| {
        let argfile = scratch(&format!("argfile-{}", jdk.label())).join("jvm.args");
        std::fs::write(&argfile, "-XX:+DisableAttachMechanism\n").unwrap();
        let at_argfile = format!("@{}", argfile.display());
        // (what, JVM options, environment, what the refusal names)
        type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
        let cases: Vec<Case> = vec![
            ("flag", vec!["-XX:+DisableAttachMechanism"], vec![], "DisableAttachMechanism"),
            (
                "JAVA_TOOL_OPTIONS, no counters file",
                vec!["-XX:-UsePerfData"],
                vec![("JAVA_TOOL_OPTIONS", "-XX:+DisableAttachMechanism")],
                "DisableAttachMechanism",
            ),
            ("@argfile, no counters file", vec!["-XX:-UsePerfData", &at_argfile], vec![], "DisableAttachMechanism"),
            ("-Xrs", vec!["-Xrs"], vec![], "-Xrs"),
        ];
        for (what, jvm_args, env, needle) in cases {
            let (service, pid) = start_service(jdk, &jvm_args, &env);
            let p = pid.to_string();
            if what == "-Xrs" {
                // With -Xrs HotSpot starts its listener at start-up (it cannot be signalled later). Once its
                // socket is gone, SIGQUIT would kill the JVM: kprof must refuse.
                let _ = std::fs::remove_file(format!("/tmp/.java_pid{pid}"));
            }
            let since = Instant::now();
            let run = kprof_at(&kprof_bin(), None, &["attach", &p, "interval=1ms"]);
            let line = one_line_error(&run, needle);
            assert!(line.contains("not signalled"), "{what}: {line}");
            std::thread::sleep(Duration::from_millis(300));
            assert_still_reporting(&service, pid, since);
            assert!(!service.stdout().contains("Full thread dump"), "{what}: the JVM got SIGQUIT");
            eprintln!("{} {what}: {line}", jdk.label());
        }
    });
}

#[test]
fn a_planted_private_directory_in_the_targets_tmp_is_refused() {
    require_root();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-planted-{}", jdk.label()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(kprof_bin(), bin.join("kprof")).unwrap();
        std::fs::copy(agent_lib(), bin.join("libkprof.so")).unwrap();
        let kprof = bin.join("kprof");
        let classes = harness_classes();
        let java = jdk.java();
        let program = [java.to_str().unwrap(), "-cp", classes.to_str().unwrap(), SERVICE];
        let mut service = Background::spawn(container(&[&bin], Some(NOBODY), &program));
        service.wait_line("'service: started'", Duration::from_secs(60), |l| l.starts_with("service: started"));
        let pid = *children(service.child.id()).first().expect("the JVM in the container");
        service.also_kill.push(pid);
        let private = PathBuf::from(format!("/proc/{pid}/root/tmp/.kprof-{NOBODY}"));
        let p = pid.to_string();

        // A symbolic link where the private directory goes: never followed.
        let victim = dir.join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, &private).unwrap();
        let opts = "interval=1ms,file=/tmp/planted.collapsed";
        let run = kprof_at(&kprof, None, &["attach", &p, opts]);
        one_line_error(&run, "symbolic link");
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "kprof wrote through the link");

        // A directory of another user: refused.
        std::fs::remove_file(&private).unwrap();
        std::fs::create_dir(&private).unwrap();
        let run = kprof_at(&kprof, None, &["attach", &p, opts]);
        one_line_error(&run, "belongs to uid 0");
        assert_still_reporting(&service, pid, Instant::now());
        assert!(!service.stdout().contains("Full thread dump"), "the JVM got SIGQUIT");
    });
}

#[test]
fn attach_with_duration_and_dump_writes_snapshots_and_stops_by_itself() {
    require_root();
    for_each_jdk(|jdk| {
        let (service, pid) = start_service(jdk, &[], &[]);
        let p = pid.to_string();
        let dir = scratch(&format!("attach-duration-{}", jdk.label()));
        let pattern = dir.join("snap-%n.collapsed");
        let opts = format!("interval=1ms,duration=2s,dump=500ms,file={}", pattern.display());
        let started = Instant::now();
        let f = fields(&kprof_at(&kprof_bin(), None, &["attach", &p, &opts]));
        assert_eq!(f["state"], "running");
        loop {
            let status = fields(&kprof_at(&kprof_bin(), None, &["status", &p]));
            if status["state"] == "stopped" {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "still running 10 s after duration=2s: {status:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(1900), "stopped after {elapsed:?}, before duration=2s");
        // Snapshots every 500 ms, then the final write: files 1, 2, 3, ... each a valid profile with at least
        // the samples of the one before.
        let mut n = 0;
        let mut last = 0;
        while dir.join(format!("snap-{}.collapsed", n + 1)).exists() {
            n += 1;
            let count = samples(&check_profile(&dir.join(format!("snap-{n}.collapsed"))));
            assert!(count >= last, "snapshot {n}: {count} samples after {last}");
            last = count;
        }
        assert!(n >= 3, "{n} snapshots in {}", dir.display());
        assert_still_reporting(&service, pid, Instant::now());
    });
}

#[test]
fn attach_in_bytecode_mode_rewrites_loaded_classes_and_stop_restores_them() {
    require_root();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-bytecode-{}", jdk.label()));
        let (service, pid) = start_service(jdk, &[], &[]);
        wait_reports(&service, Duration::from_secs(5));
        let t = Instant::now();
        let (before, _, n) = rate_between(&service, t - Duration::from_millis(3100), t);
        assert!(n >= 4, "too few baseline reports: {n}");

        let file = dir.join("bc.collapsed");
        let json = dir.join("bc.json");
        let opts = format!("mode=bytecode,file={},file={}", file.display(), json.display());
        let attach = kprof_at(&kprof_bin(), None, &["attach", &pid.to_string(), &opts]);
        let f = fields(&attach);
        assert_eq!((f["state"].as_str(), f["mode"].as_str()), ("running", "bytecode"), "{f:?}");
        std::thread::sleep(Duration::from_secs(2));
        let stop = kprof_at(&kprof_bin(), None, &["stop", &pid.to_string()]);
        stop.assert_ok();
        let stopped = Instant::now();

        // Classes loaded before the attach were rewritten: the service's request path is in the profile
        // (the frame that was already running when kprof attached keeps its old code, so stacks start below
        // it), weighted in bytecodes.
        let profile = check_profile(&json);
        assert_eq!(profile.meta.mode.as_str(), "bytecode");
        assert_eq!(profile.metrics(), [Metric::BytecodeSamples, Metric::Bytecodes]);
        // stack=auto at gran=10000 on a JVM started without frame pointers: the reified stack.
        let c = &profile.meta.counters;
        assert!(c.get("stack_walk") == Some(&0) && !c.contains_key("fp_samples"), "{}: {c:?}", jdk.label());
        let stacks = read_collapsed(&file);
        let handled = count_where(&stacks, |s| has_frame(s, "kprof.harness.Service.handle(long)long"));
        assert!(handled > 100, "{}: {handled} samples in Service.handle", jdk.label());

        // After stop the classes are retransformed back: the service returns to its speed once the JIT has
        // compiled the original code again, which takes longer while other tests load the machine: the
        // speed of a 3-second window must come back within 30 seconds (rewritten code runs at half of it).
        let mut waited = Duration::from_secs(9);
        let after = loop {
            wait_reports(&service, stopped.duration_since(t) + waited);
            let end = Instant::now();
            let (after, _, n) = rate_between(&service, end - Duration::from_millis(3100), end);
            assert!(n >= 4, "too few reports after stop: {n}");
            if after >= 0.85 * before || waited >= Duration::from_secs(30) {
                break after;
            }
            waited += Duration::from_secs(3);
        };
        assert_still_reporting(&service, pid, stopped);
        assert!(after >= 0.85 * before, "{}: after stop {after:.0} ops/cpu-s, before {before:.0}", jdk.label());

        // stack=fp follows frame pointers that code compiled without -XX:+PreserveFramePointer does not
        // keep: refused on this JVM, in one line, and the JVM runs on.
        let refused = kprof_at(&kprof_bin(), None, &["start", &pid.to_string(), "mode=bytecode,stack=fp"]);
        assert!(!refused.status.success(), "{}", refused.stdout);
        let line = refused.stderr.trim();
        assert!(
            line.lines().count() == 1 && line.contains("stack=fp") && line.contains("-XX:+PreserveFramePointer"),
            "{line}"
        );
        assert_still_reporting(&service, pid, Instant::now());
    });
}

/// The pid of the `java` process among the descendants of `pid` (a launcher chain such as runuser,
/// unshare and sh in front of it), waiting up to 30 s for it.
fn descendant_java(pid: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut queue = vec![pid];
        while let Some(p) = queue.pop() {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            if comm.trim() == "java" {
                return p;
            }
            queue.extend(children(p));
        }
        assert!(Instant::now() < deadline, "no java process below pid {pid}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A listening Unix socket at `path` owned by `uid`, standing for a service of the host that a container
/// must not be able to point kprof at. Non-blocking: `connections` counts who came.
struct HostSocket(std::os::unix::net::UnixListener);

impl HostSocket {
    fn at(path: &Path, uid: u32) -> HostSocket {
        let _ = std::fs::remove_file(path);
        let l = std::os::unix::net::UnixListener::bind(path).unwrap();
        l.set_nonblocking(true).unwrap();
        std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
        HostSocket(l)
    }

    fn connections(&self) -> usize {
        let mut n = 0;
        while self.0.accept().is_ok() {
            n += 1;
        }
        n
    }
}

/// A directory on the host that `uid` can use, standing for a place a container must not reach.
fn host_dir(path: &Path, uid: u32) -> PathBuf {
    std::fs::create_dir_all(path).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

/// A HotSpot counters file (little-endian) saying the JVM was started with -XX:+DisableAttachMechanism.
fn counters_refusing_attach() -> Vec<u8> {
    let (name, value) =
        (b"sun.rt.jvmCapabilities\0", b"0000000000000000000000000000000000000000000000000000000000000000\0");
    let mut out = vec![0xca, 0xfe, 0xc0, 0xc0, 1, 2, 0, 1];
    out.extend_from_slice(&[0; 16]);
    out.extend_from_slice(&32i32.to_le_bytes());
    out.extend_from_slice(&1i32.to_le_bytes());
    let len = 20 + name.len() + value.len();
    out.extend_from_slice(&(len as i32).to_le_bytes());
    out.extend_from_slice(&20i32.to_le_bytes());
    out.extend_from_slice(&(value.len() as i32).to_le_bytes());
    out.extend_from_slice(&[b'B', 0, 0, 0]);
    out.extend_from_slice(&((20 + name.len()) as i32).to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
    out
}

/// kprof (at `bin`) with its address space limited to 2 GiB, so that a read without a bound ends there
/// instead of in the machine's memory; its peak resident set must stay below 200 MB.
fn kprof_capped(bin: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new("prlimit");
    cmd.args(["--as=2147483648", "--"]).arg(bin).args(args);
    let (run, rss_kb) = run_with_peak_rss(cmd, Duration::from_secs(120));
    assert!(rss_kb < 200 * 1024, "kprof {args:?} peaked at {} MB:\n{}", rss_kb / 1024, run.stderr);
    run
}

/// The files a container's JVM has are reached inside the container: an absolute link in its /tmp to a
/// host directory (the agent's directory, a counters directory), an `@argfile` that became a link to a
/// host file, to /dev/zero, or a FIFO: kprof never reads, connects to or is stalled by what they point at
/// on the host. (The container shares the host's files but /tmp and the directories it hides: the links
/// point into a hidden one, which on the host holds what the container must not make kprof use.)
#[test]
fn links_in_the_targets_files_resolve_inside_it() {
    require_root();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-links-{}", jdk.label()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(kprof_bin(), bin.join("kprof")).unwrap();
        std::fs::copy(agent_lib(), bin.join("libkprof.so")).unwrap();
        let kprof = bin.join("kprof");
        let host_only = host_dir(&dir.join("host-only"), NOBODY);
        let classes = harness_classes();
        // The JVM reads its options from /tmp/jvm.args; no counters file, so kprof reads the argfile.
        let script = format!(
            "echo -XX:+UseSerialGC > /tmp/jvm.args && exec {} @/tmp/jvm.args -XX:-UsePerfData -cp {} {SERVICE}",
            jdk.java().display(),
            classes.display()
        );
        let mut service = Background::spawn(container(&[&bin, &host_only], Some(NOBODY), &["sh", "-c", &script]));
        service.wait_line("'service: started'", Duration::from_secs(60), |l| l.starts_with("service: started"));
        let pid = descendant_java(service.child.id());
        service.also_kill.push(pid);
        let p = pid.to_string();
        let tmp = PathBuf::from(format!("/proc/{pid}/root/tmp"));
        let since = Instant::now();

        // The agent's directory in the container is a link to a host directory where something of the
        // same uid listens: kprof finds no agent, and nothing connects to the host's socket.
        let host_agent_dir = host_dir(&host_only.join("agent-dir"), NOBODY);
        let host_socket = HostSocket::at(&host_agent_dir.join("1.sock"), NOBODY);
        std::os::unix::fs::symlink(&host_agent_dir, tmp.join(format!(".kprof-{NOBODY}"))).unwrap();
        for command in ["status", "stop", "dump"] {
            one_line_error(&kprof_at(&kprof, None, &[command, &p]), "no kprof agent");
        }
        assert_eq!(host_socket.connections(), 0, "kprof connected to a socket of the host");
        std::fs::remove_file(tmp.join(format!(".kprof-{NOBODY}"))).unwrap();

        // A counters directory that links to a host directory whose counters say attach is disabled: not
        // the JVM's, so not read.
        let host_counters = host_dir(&host_only.join("counters"), NOBODY);
        std::fs::write(host_counters.join("1"), counters_refusing_attach()).unwrap();
        std::os::unix::fs::chown(host_counters.join("1"), Some(NOBODY), Some(NOBODY)).unwrap();
        std::os::unix::fs::symlink(&host_counters, tmp.join("hsperfdata_nobody")).unwrap();

        // The argfile as a link to a host file that disables attach: the link resolves inside the
        // container, where there is no such file; the attach goes ahead.
        let host_args = host_only.join("jvm.args");
        std::fs::write(&host_args, "-XX:+DisableAttachMechanism\n").unwrap();
        let args = tmp.join("jvm.args");
        std::fs::remove_file(&args).unwrap();
        std::os::unix::fs::symlink(&host_args, &args).unwrap();
        let opts = "interval=1ms,file=/tmp/links.collapsed";
        let f = fields(&kprof_capped(&kprof, &["attach", &p, opts]));
        assert_eq!(f["state"], "running", "{f:?}");
        let status = fields(&kprof_at(&kprof, None, &["status", &p]));
        assert_eq!((status["state"].as_str(), files(&status)), ("running", vec![tmp.join("links.collapsed")]));

        // The argfile as a link to /dev/zero and as a FIFO: neither is read nor waited on.
        std::fs::remove_file(&args).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &args).unwrap();
        let f = fields(&kprof_capped(&kprof, &["attach", &p, opts]));
        assert_eq!(f["state"], "running", "{f:?}");
        std::fs::remove_file(&args).unwrap();
        assert!(Command::new("mkfifo").arg(&args).status().unwrap().success());
        let f = fields(&kprof_capped(&kprof, &["attach", &p, opts]));
        assert_eq!(f["state"], "running", "{f:?}");
        std::thread::sleep(Duration::from_millis(300));
        let stop = fields(&kprof_at(&kprof, None, &["stop", &p]));
        check_profile(&files(&stop)[0]);
        assert_still_reporting(&service, pid, since);
        assert!(!service.stdout().contains("Full thread dump"), "the JVM printed a thread dump");
    });
}

/// A container with a root of its own whose /tmp is an absolute link (`/tmp -> /some/dir`): HotSpot's
/// trigger file and socket, the agent's directory and its socket are all where the JVM finds them through
/// that link inside the container, not where the same path leads on the host, which here holds a socket of
/// the JVM's user under the name of HotSpot's (a host service the container must not make kprof talk to).
#[test]
fn a_container_whose_tmp_is_an_absolute_link_is_attached_inside_it() {
    require_root();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-tmp-link-{}", jdk.label()));
        let bin = host_dir(&dir.join("bin"), NOBODY);
        std::fs::copy(kprof_bin(), bin.join("kprof")).unwrap();
        std::fs::copy(agent_lib(), bin.join("libkprof.so")).unwrap();
        let kprof = bin.join("kprof");
        let out = dir.join("out");
        // On the host, the link's target holds a "service" socket of the JVM's user.
        let victim = host_dir(&dir.join("victim"), NOBODY);
        let host_socket = HostSocket::at(&victim.join(".java_pid1"), NOBODY);
        // The container's root: the host's /usr, /etc and /dev, the harness classes and kprof's directory
        // (so the JVM can load kprof's library where it is) at their own paths, and /tmp -> <victim>,
        // which inside the root is a directory of its own.
        let root = dir.join("root");
        for d in ["usr", "etc", "dev", "proc"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for (link, to) in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")] {
            std::os::unix::fs::symlink(to, root.join(link)).unwrap();
        }
        let inside = |p: &Path| root.join(p.strip_prefix("/").unwrap());
        let classes = harness_classes();
        for d in [&classes, &bin] {
            std::fs::create_dir_all(inside(d)).unwrap();
        }
        std::fs::create_dir_all(inside(&victim)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(inside(&victim), std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::os::unix::fs::symlink(&victim, root.join("tmp")).unwrap();
        let script = format!(
            "mount --rbind /usr {r}/usr && mount --bind /etc {r}/etc && mount --rbind /dev {r}/dev && \
             mount --bind {c} {r}{c} && mount --bind {b} {r}{b} && mount -t proc proc {r}/proc && \
             exec chroot {r} setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups {java} -cp {c} {SERVICE}",
            r = root.display(),
            c = classes.display(),
            b = bin.display(),
            java = jdk.java().display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--mount", "--fork", "--kill-child", "sh", "-c", &script]);
        let mut service = Background::spawn(cmd);
        service.wait_line("'service: started'", Duration::from_secs(60), |l| l.starts_with("service: started"));
        let pid = descendant_java(service.child.id());
        service.also_kill.push(pid);
        let p = pid.to_string();
        let since = Instant::now();

        let f = fields(&kprof_at(&kprof, None, &["attach", &p, "interval=1ms,file=/tmp/t.collapsed"]));
        assert_eq!(f["state"], "running", "{f:?}");
        std::thread::sleep(Duration::from_millis(500));
        let dump = fields(&kprof_at(&kprof, None, &["dump", &p, "--copy-to", out.to_str().unwrap()]));
        check_profile(&files(&dump)[0]);
        let stop = fields(&kprof_at(&kprof, None, &["stop", &p, "--copy-to", out.to_str().unwrap()]));
        check_profile(&files(&stop)[0]);
        // Everything happened in the container's /tmp.
        let in_container: Vec<String> = std::fs::read_dir(inside(&victim))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        for name in [".java_pid1", &format!(".kprof-{NOBODY}"), "t.collapsed"] {
            assert!(in_container.iter().any(|n| n == name), "{name} not in the container's /tmp: {in_container:?}");
        }
        assert_eq!(host_socket.connections(), 0, "kprof connected to the host's socket");
        let on_host: Vec<String> = std::fs::read_dir(&victim)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(on_host, vec![".java_pid1".to_string()], "kprof wrote in the host's directory");
        assert_still_reporting(&service, pid, since);
        assert!(!service.stdout().contains("Full thread dump"), "the JVM printed a thread dump");
    });
}

/// A process that answers on the agent's socket with `files=` naming /dev/zero and then a FIFO: `kprof stop
/// --copy-to` reads neither (one line each, at once, within bounded memory).
#[test]
fn copying_files_that_are_not_regular_files_is_refused() {
    require_root();
    let dir = scratch("attach-fake-agent");
    let out = dir.join("out");
    let fake = format!(
        r#"
import os, socket
os.makedirs('/tmp/.kprof-{NOBODY}', mode=0o700)
os.mkfifo('/tmp/fifo')
s = socket.socket(socket.AF_UNIX)
s.bind('/tmp/.kprof-{NOBODY}/1.sock')
s.listen(8)
print('ready', flush=True)
n = 0
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(('ok files=' + ['/dev/zero', '/tmp/fifo'][n % 2] + '\n').encode())
    c.close()
    n += 1
"#
    );
    let mut agent = Background::spawn(container(&[], Some(NOBODY), &["/usr/bin/python3", "-c", &fake]));
    agent.wait_line("'ready'", Duration::from_secs(30), |l| l == "ready");
    let pid = *children(agent.child.id()).first().expect("the fake agent");
    agent.also_kill.push(pid);
    let p = pid.to_string();
    for (what, needle) in [("/dev/zero", "not a regular file"), ("/tmp/fifo", "not a regular file")] {
        let started = Instant::now();
        let run = kprof_capped(&kprof_bin(), &["stop", &p, "--copy-to", out.to_str().unwrap()]);
        assert!(!run.status.success(), "{what}: {}", run.stdout);
        let line = run.stderr.lines().last().unwrap_or_default().to_string();
        assert!(line.contains(what) && line.contains(needle), "{what}: {}", run.stderr);
        assert!(run.status.code() == Some(1), "{what}: exit {:?}\n{}", run.status, run.stderr);
        eprintln!("{what}: refused in {:?}: {line}", started.elapsed());
    }
}

/// A JVM in a rootless container (a user namespace where it is root, mapped to nobody outside): `kprof
/// attach`, `status`, `dump`, `stop` from the host as root and as the namespace's owner, `kprof list`
/// reading its counters file.
#[test]
fn a_jvm_in_a_user_namespace_is_attached_and_controlled() {
    require_root();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-userns-{}", jdk.label()));
        let bin = host_dir(&dir.join("bin"), NOBODY);
        std::fs::copy(kprof_bin(), bin.join("kprof")).unwrap();
        std::fs::copy(agent_lib(), bin.join("libkprof.so")).unwrap();
        let kprof = bin.join("kprof");
        let script = format!(
            "mount -t tmpfs none /tmp && cd /tmp && exec {} -cp {} {SERVICE}",
            jdk.java().display(),
            harness_classes().display()
        );
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "nobody", "--", "unshare", "--user", "--map-root-user", "--pid", "--mount", "--fork"]);
        cmd.args(["--mount-proc", "--kill-child", "sh", "-c", &script]);
        let mut service = Background::spawn(cmd);
        service.wait_line("'service: started'", Duration::from_secs(60), |l| l.starts_with("service: started"));
        let pid = descendant_java(service.child.id());
        service.also_kill.push(pid);
        let p = pid.to_string();
        let since = Instant::now();

        // As root.
        let f = fields(&kprof_at(&kprof, None, &["attach", &p, "interval=1ms,file=/tmp/root-%n.collapsed"]));
        assert_eq!((f["state"].as_str(), f["nspid"].as_str(), f["user"].as_str()), ("running", "1", "nobody"));
        let socket = PathBuf::from(format!("/proc/{pid}/root/tmp/.kprof-0/1.sock"));
        assert!(socket.exists(), "the agent names its directory by its uid in its namespace (0)");
        let list = kprof_at(&kprof, None, &["list"]);
        let row = list.stdout.lines().find(|l| l.split_whitespace().next() == Some(p.as_str())).unwrap().to_string();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((cols[3], cols[4].starts_with(&jdk.version.to_string())), ("yes", true), "{row}");
        std::thread::sleep(Duration::from_millis(500));
        let dump = fields(&kprof_at(&kprof, None, &["dump", &p]));
        check_profile(&files(&dump)[0]);
        let stop = fields(&kprof_at(&kprof, None, &["stop", &p]));
        check_profile(&files(&stop)[0]);

        // As nobody, the user that owns the namespace: a new session, then attach again.
        let start = fields(&kprof_at(&kprof, Some(NOBODY), &["start", &p, "interval=1ms,file=/tmp/owner.collapsed"]));
        assert_eq!(start["state"], "running", "{start:?}");
        let again = fields(&kprof_at(&kprof, Some(NOBODY), &["attach", &p, "interval=1ms,file=/tmp/owner2.collapsed"]));
        assert_eq!(again["state"], "running", "{again:?}");
        std::thread::sleep(Duration::from_millis(500));
        let status = fields(&kprof_at(&kprof, Some(NOBODY), &["status", &p]));
        assert!(status["samples"].parse::<u64>().unwrap() > 0, "{status:?}");
        let stop = fields(&kprof_at(&kprof, Some(NOBODY), &["stop", &p]));
        assert_eq!(files(&stop), vec![PathBuf::from(format!("/proc/{pid}/root/tmp/owner2.collapsed"))]);
        check_profile(&files(&stop)[0]);
        assert_still_reporting(&service, pid, since);
        assert!(!service.stdout().contains("Full thread dump"), "the JVM printed a thread dump");
    });
}

/// Two JVMs in two PID namespaces, both pid 1 there, sharing one /tmp (two containers of a pod sharing a
/// volume there): each gets its own agent and each kprof command reaches the JVM it names.
#[test]
fn two_jvms_with_the_same_pid_sharing_tmp_keep_their_own_agents() {
    require_root();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("attach-shared-tmp-{}", jdk.label()));
        let shared = dir.join("tmp");
        std::fs::create_dir_all(&shared).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let start = |name: &str| {
            let script = format!(
                "mount --bind {} /tmp && exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups {} -cp {} \
                 {SERVICE}",
                shared.display(),
                jdk.java().display(),
                harness_classes().display()
            );
            let mut cmd = Command::new("unshare");
            cmd.args(["--pid", "--mount", "--fork", "--mount-proc", "--kill-child", "sh", "-c", &script]);
            let mut service = Background::spawn(cmd);
            service.wait_line("'service: started'", Duration::from_secs(60), |l| l.starts_with("service: started"));
            let pid = descendant_java(service.child.id());
            service.also_kill.push(pid);
            eprintln!("{name}: pid {pid}");
            (service, pid)
        };
        let (a, pid_a) = start("a");
        let (b, pid_b) = start("b");
        let (pa, pb) = (pid_a.to_string(), pid_b.to_string());
        let since = Instant::now();
        let fa = fields(&kprof_at(&kprof_bin(), None, &["attach", &pa, "interval=1ms,file=/tmp/a.collapsed"]));
        let fb = fields(&kprof_at(&kprof_bin(), None, &["attach", &pb, "interval=7ms,file=/tmp/b.collapsed"]));
        assert_eq!((fa["interval"].as_str(), fb["interval"].as_str()), ("1ms", "7ms"));
        let sockets: Vec<String> = std::fs::read_dir(shared.join(format!(".kprof-{NOBODY}")))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sock"))
            .collect();
        assert_eq!(sockets.len(), 2, "{sockets:?}");
        std::thread::sleep(Duration::from_millis(500));
        for (p, interval, file) in [(&pa, "1ms", "a.collapsed"), (&pb, "7ms", "b.collapsed")] {
            let status = fields(&kprof_at(&kprof_bin(), None, &["status", p]));
            assert_eq!(status["interval"], interval, "pid {p}: {status:?}");
            let stop = fields(&kprof_at(&kprof_bin(), None, &["stop", p]));
            assert_eq!(files(&stop), vec![PathBuf::from(format!("/proc/{p}/root/tmp/{file}"))]);
            check_profile(&shared.join(file));
        }
        assert_still_reporting(&a, pid_a, since);
        assert_still_reporting(&b, pid_b, since);
    });
}
