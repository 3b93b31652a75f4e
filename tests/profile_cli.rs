//! `kprof profile` and `kprof list` on real JVMs (every JDK under /usr/lib/jvm): a real workload profiled by
//! pid for 5 s into a flame graph and a JFR recording (read by Chromium and the JDK's `jfr`), the workload
//! running on and computing what it computes alone; a JVM found by its main class, profiled again once
//! the agent is loaded, stopped early by Ctrl-C; the progress line on a terminal only; ambiguous names and
//! bad arguments refused with one line.

mod common;

use common::*;
use kprof_profile::output::read_profile;
use kprof_profile::Metric;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `kprof ARGS` in `cwd` (relative output paths are the caller's), with a time limit.
fn kprof_in(cwd: &Path, args: &[&str]) -> Run {
    kprof_in_with_pid(cwd, args).0
}

/// [`kprof_in`], also returning the pid `kprof` ran as.
fn kprof_in_with_pid(cwd: &Path, args: &[&str]) -> (Run, u32) {
    let mut cmd = Command::new(kprof_bin());
    cmd.args(args).current_dir(cwd).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn kprof");
    let pid = child.id();
    (wait_within(child, &format!("kprof {args:?}"), Duration::from_secs(120), String::new), pid)
}

/// Asserts a refusal: exit `status`, nothing on stdout, one line on stderr containing `needle`.
fn one_line_error(run: &Run, status: i32, needle: &str) {
    assert_eq!(run.status.code(), Some(status), "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert_eq!(run.stdout, "", "stdout of a refusal");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected on stderr, got:\n{}", run.stderr);
    assert!(lines[0].starts_with("kprof: ") && lines[0].contains(needle), "'{needle}' expected in: {}", lines[0]);
}

/// The `key=value` fields of the line `kprof profile` prints on success.
fn fields(run: &Run) -> std::collections::BTreeMap<String, String> {
    run.assert_ok();
    let line =
        run.stdout.lines().find(|l| l.starts_with("pid=")).unwrap_or_else(|| panic!("no result:\n{}", run.stdout));
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The real workloads: `../shared/workloads` beside the checkout, or `KPROF_WORKLOADS`.
fn workloads_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::env::var("KPROF_WORKLOADS").map_or_else(|_| root.join("../shared/workloads"), Into::into)
}

/// Runs the xalan workload on `jdk` and returns it and its JVM's pid once that JVM is up.
fn start_xalan(jdk: &Jdk) -> (Background, u32) {
    let mut cmd = Command::new("bash");
    cmd.arg(workloads_dir().join("xalan.sh")).env("JAVA", jdk.java());
    let mut script = Background::spawn(cmd);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = script.child.try_wait() {
            panic!("the xalan script ended ({status}) before its JVM was seen\n{}", script.stderr());
        }
        let java = children(script.child.id())
            .into_iter()
            .find(|&p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "java"));
        // Once it handles SIGQUIT the VM has (nearly) finished starting: what is timed is the profile.
        if let Some(pid) = java.filter(|&p| handles_sigquit(p)) {
            return (script, pid);
        }
        assert!(Instant::now() < deadline, "xalan's JVM did not start\n{}", script.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` has a SIGQUIT handler (bit 3 of SigCgt in /proc/PID/status).
fn handles_sigquit(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << 2) != 0)
}

/// The workload's result line without its timing: `xalan: ok out_bytes=... out_md5=...`.
fn result_of(script: &Background) -> String {
    let line = script.wait_line("'xalan: ok'", Duration::from_secs(300), |l| l.starts_with("xalan: "));
    assert!(line.starts_with("xalan: ok "), "{line}\n{}", script.stderr());
    line.split_whitespace().filter(|w| !w.starts_with("jvm_wall_s=")).collect::<Vec<_>>().join(" ")
}

#[test]
fn five_seconds_of_a_running_workload_into_html_and_jfr_by_pid() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("profile-xalan-{}", jdk.label()));
        // What the workload computes alone.
        let (alone, _) = start_xalan(jdk);
        let expected = result_of(&alone);
        drop(alone);

        let (script, pid) = start_xalan(jdk);
        // Files an earlier kprof of the same pid left (pids are reused within a run) are not this one's; a
        // file this one left is a new inode even under an old name (the agent writes by rename).
        let agent_dir = format!("/tmp/.kprof-{}", euid());
        let files_in = |dir: &str| -> Vec<(std::ffi::OsString, u64)> {
            use std::os::unix::fs::MetadataExt;
            std::fs::read_dir(dir)
                .map(|d| d.flatten().filter_map(|e| Some((e.file_name(), e.metadata().ok()?.ino()))).collect())
                .unwrap_or_default()
        };
        let before = files_in(&agent_dir);
        let started = Instant::now();
        let (run, kprof_pid) = kprof_in_with_pid(
            &dir,
            &["profile", "-d", "5s", "-e", "cpu", "-f", "x.html", "-f", "x.jfr", &pid.to_string()],
        );
        let took = started.elapsed();
        eprintln!("{}: kprof profile -d 5s -e cpu -f x.html -f x.jfr {pid}: {took:?}", jdk.label());
        let f = fields(&run);
        assert!(alive(pid), "{}: the workload's JVM died\n{}", jdk.label(), script.stderr());
        assert!(took < Duration::from_secs(7), "{}: kprof profile -d 5s took {took:?}", jdk.label());
        assert!(took >= Duration::from_secs(5), "{}: stopped early: {took:?}", jdk.label());
        assert_eq!((f["pid"].as_str(), f["mode"].as_str()), (pid.to_string().as_str(), "asgct"), "{f:?}");
        assert!(f["samples"].parse::<u64>().unwrap() > 0, "{f:?}");
        let (html, jfr) = (dir.join("x.html"), dir.join("x.jfr"));
        let listed: Vec<PathBuf> = f["files"].split(',').map(PathBuf::from).collect();
        assert_eq!(listed, [html.clone(), jfr.clone()], "the caller's paths, in order");
        assert_eq!(run.stderr, "", "no progress line when stderr is not a terminal");

        // The flame graph: Chromium draws xalan's frames, short names on the frames.
        let dom = dump_dom(&format!("file://{}", html.display()), &dir.join("chromium"));
        assert!(dom.contains(">Process.main</div>"), "{}: xalan's main is not drawn as Process.main", jdk.label());
        assert!(dom.contains("org.apache.xalan.xslt.Process.main"), "the full name is the page's");
        // The recording: the JDK's jfr reads it and counts the CPU samples.
        let mut cmd = Command::new(jdk.home.join("bin/jfr"));
        cmd.arg("summary").arg(&jfr);
        let summary = run_with_timeout(cmd, Duration::from_secs(120));
        summary.assert_ok();
        let samples: u64 = summary
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("jdk.ExecutionSample")?.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no jdk.ExecutionSample in:\n{}", summary.stdout));
        assert!(samples > 0, "{}", summary.stdout);

        // The workload finishes with the result it has alone; nothing is left in the target's directory.
        assert_eq!(result_of(&script), expected, "{}: the workload's output changed", jdk.label());
        assert!(std::path::Path::new(&agent_dir).is_dir(), "{agent_dir} is gone");
        let leftover: Vec<_> = files_in(&agent_dir)
            .into_iter()
            .filter(|(name, _)| name.to_string_lossy().starts_with(&format!("profile-{kprof_pid}-")))
            .filter(|f| !before.contains(f))
            .collect();
        assert!(leftover.is_empty(), "{leftover:?}");
    });
}

/// Compiles a main class of a name no other JVM on the machine has, which runs kprof.harness.Service.
fn unique_main(jdk: &Jdk, dir: &Path, name: &str) -> PathBuf {
    let src = dir.join(format!("{name}.java"));
    std::fs::write(
        &src,
        format!("public class {name} {{ public static void main(String[] a) throws Exception {{ kprof.harness.Service.main(a); }} }}\n"),
    )
    .unwrap();
    let out = dir.join("classes");
    let mut javac = Command::new(jdk.home.join("bin/javac"));
    javac.arg("-cp").arg(harness_classes()).arg("-d").arg(&out).arg(&src);
    run_with_timeout(javac, Duration::from_secs(120)).assert_ok();
    out
}

fn start_unique(jdk: &Jdk, classes: &Path, name: &str) -> Background {
    let mut cmd = Command::new(jdk.java());
    cmd.arg("-cp").arg(format!("{}:{}", classes.display(), harness_classes().display())).arg(name);
    let jvm = Background::spawn(cmd);
    jvm.wait_line("'service: started'", Duration::from_secs(60), |l| l.starts_with("service: started"));
    jvm
}

/// The `kprof list` row of `pid`, split in columns.
fn list_row(pid: u32) -> Vec<String> {
    let list = kprof_at(&kprof_bin(), None, &["list"]);
    list.assert_ok();
    let row = list
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
        .unwrap_or_else(|| panic!("pid {pid} not listed:\n{}", list.stdout));
    row.split_whitespace().map(str::to_string).collect()
}

/// A JVM without counters (`-XX:-UsePerfData`) profiled by pid the moment it is launched: nothing tells
/// kprof it is starting once it catches SIGQUIT, so the agent can reach it before it is live (JDK 17 loads
/// it then, with no JVMTI environment); `kprof profile` tries again and profiles it. The old kprof failed
/// 3 of 10 such runs on JDK 17 ("refused to start").
#[test]
fn a_jvm_without_counters_is_profiled_from_its_first_milliseconds() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("profile-early-{}", jdk.label()));
        for round in 0..6 {
            let mut cmd = Command::new(jdk.java());
            cmd.arg("-XX:-UsePerfData").arg("-cp").arg(harness_classes()).arg("kprof.harness.Service");
            let jvm = Background::spawn(cmd);
            let pid = jvm.child.id().to_string();
            let file = format!("r{round}.collapsed");
            let run = kprof_in(&dir, &["profile", "-d", "300ms", "-f", &file, &pid]);
            assert!(run.status.success(), "{} round {round}: {}", jdk.label(), run.stderr);
            assert!(fields(&run).contains_key("files"), "{}", run.stdout);
            assert!(dir.join(&file).exists(), "{} round {round}: no {file}", jdk.label());
            assert!(!jvm.stdout().contains("Full thread dump"), "{} round {round}: SIGQUIT dumped", jdk.label());
        }
    });
}

#[test]
fn by_main_class_again_with_the_agent_loaded_and_ctrl_c_stops_early() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("profile-name-{}", jdk.label()));
        let name = format!("KprofProfileTarget{}{}", std::process::id(), jdk.version);
        let classes = unique_main(jdk, &dir, &name);
        let jvm = start_unique(jdk, &classes, &name);
        let pid = jvm.child.id();
        let user = target_user();
        let row = list_row(pid);
        assert_eq!((row[2].as_str(), row[3].as_str(), row[5].as_str()), (user.as_str(), "-", name.as_str()), "{row:?}");

        // By the main class's name: the agent is loaded for it.
        let run = kprof_in(&dir, &["profile", "-d", "2s", "-f", "a.collapsed", "-f", "a.json", &name]);
        let f = fields(&run);
        assert_eq!(f["pid"], pid.to_string());
        let stacks = read_collapsed(&dir.join("a.collapsed"));
        assert!(count_where(&stacks, |s| has_frame(s, "kprof.harness.Service.handle(long)long")) > 0, "{stacks:?}");
        let json = read_profile(&dir.join("a.json")).unwrap();
        assert_eq!(json.totals(Metric::Samples)[0], f["samples"].parse::<u64>().unwrap(), "the summary is the file's");
        assert_eq!(list_row(pid)[3], "yes", "kprof list shows the agent loaded");

        // Again, the agent loaded: a new session through its control socket; Ctrl-C before the 60 s end.
        let mut cmd = Command::new(kprof_bin());
        cmd.args([
            "profile",
            "-d",
            "60s",
            "-i",
            "1ms",
            "-f",
            "b.html",
            "-f",
            "b.json",
            "-f",
            "b.pb.gz",
            &pid.to_string(),
        ])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let started = Instant::now();
        let child = cmd.spawn().unwrap();
        let kprof_pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = kprof_at(&kprof_bin(), None, &["status", &pid.to_string()]);
            if status.status.success()
                && status.stdout.contains("state=running")
                && status.stdout.contains("interval=1ms")
            {
                break;
            }
            assert!(Instant::now() < deadline, "the session did not start: {}", status.stdout);
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(1));
        let rc = send_signal(kprof_pid, "INT");
        assert!(rc, "kill -INT {kprof_pid}");
        let run = wait_within(child, "kprof profile -d 60s", Duration::from_secs(60), String::new);
        let took = started.elapsed();
        eprintln!("{}: kprof profile stopped by SIGINT after {took:?}", jdk.label());
        let f = fields(&run);
        assert!(took < Duration::from_secs(30), "Ctrl-C did not stop it: {took:?}");
        assert_eq!(f["interval"], "1ms", "{f:?}");
        let json = read_profile(&dir.join("b.json")).unwrap();
        assert_eq!(json.totals(Metric::Samples)[0], f["samples"].parse::<u64>().unwrap(), "{f:?}");
        assert!(json.totals(Metric::Samples)[0] > 0, "{f:?}");
        dump_dom(&format!("file://{}", dir.join("b.html").display()), &dir.join("chromium"));
        let pprof = decode_pprof(&dir.join("b.pb.gz"));
        assert_eq!(pprof["problems"].as_array().map(Vec::len), Some(0), "{pprof}");

        // On a terminal (a pseudo-terminal from `script`), the progress line is drawn and redrawn in place.
        let command = format!("{} profile -d 2s -f c.txt {pid}", kprof_bin().display());
        let mut script = Command::new("script");
        script.args(["-qefc", &command, "/dev/null"]).current_dir(&dir);
        let tty = run_with_timeout(script, Duration::from_secs(120));
        tty.assert_ok();
        assert!(tty.stdout.contains(&format!("\r\x1b[Kkprof: profiling pid {pid}: ")), "{:?}", tty.stdout);
        assert!(tty.stdout.contains(" / 2 s, ") && tty.stdout.contains(" samples (Ctrl-C stops)"), "{:?}", tty.stdout);
        assert!(std::fs::read_to_string(dir.join("c.txt")).unwrap().contains("kprof.harness.Service.handle"));

        // The JVM runs on and keeps reporting.
        let reports = jvm.lines().len();
        jvm.wait_line("a new report", Duration::from_secs(30), |_| jvm.lines().len() > reports);
        assert!(alive(pid), "{}", jvm.stderr());
        assert!(!jvm.stderr().contains("Exception"), "{}", jvm.stderr());
    });
}

/// Sends SIGNAL to `pid` with kill(1).
fn send_signal(pid: u32, signal: &str) -> bool {
    Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().is_ok_and(|s| s.success())
}

/// The user name `kprof list` shows for processes of the tests' user.
fn target_user() -> String {
    let uid = euid();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2)?.parse::<u32>().ok()? == uid).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

#[test]
fn names_that_match_several_jvms_or_none_and_bad_arguments_are_refused_with_one_line() {
    let jdk = &jdks()[0];
    let dir = scratch("profile-refusals");
    let name = format!("KprofProfileTwin{}", std::process::id());
    let classes = unique_main(jdk, &dir, &name);
    let (a, b) = (start_unique(jdk, &classes, &name), start_unique(jdk, &classes, &name));
    let run = kprof_in(&dir, &["profile", "-d", "1s", &name]);
    one_line_error(&run, 1, &format!("'{name}' names 2 JVMs: "));
    for jvm in [&a, &b] {
        assert!(run.stderr.contains(&format!("{} ({name})", jvm.child.id())), "{}", run.stderr);
    }
    let run = kprof_in(&dir, &["profile", "-d", "1s", "NoSuchMainClassAnywhere"]);
    one_line_error(&run, 1, "no JVM runs 'NoSuchMainClassAnywhere' (main class or jar); JVMs here: ");
    assert!(run.stderr.contains(&format!("{} ({name})", a.child.id())), "{}", run.stderr);

    let pid = a.child.id().to_string();
    for (args, needle) in [
        (vec!["-d", "soon"], "bad -d 'soon': accepted: a duration"),
        (vec!["-e", "cpu,gc"], "'gc' is no engine; accepted: cpu, wall, alloc, lock, bytecode, exact"),
        (vec!["-i", "1h"], "bad -i '1h': accepted: a duration 10us..10s"),
        (vec!["-f", "out.png"], "bad -f 'out.png': the extension names no format; accepted: .html"),
        (vec!["-o", "file=/tmp/x.html"], "use -f"),
        (vec!["-o", "depth=0"], "bad option 'depth=0': accepted: 1..8192"),
        (vec!["-e", "bytecode,exact"], "bytecode and exact"),
        (vec!["--frobnicate"], "unknown option '--frobnicate'"),
    ] {
        let mut all = vec!["profile"];
        all.extend(&args);
        all.push(&pid);
        one_line_error(&kprof_in(&dir, &all), 2, needle);
    }
    one_line_error(&kprof_in(&dir, &["profile"]), 2, "no PID or main class given");
    // A process that is no JVM is refused before anything is sent or written to it.
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let run = kprof_in(&dir, &["profile", "-d", "1s", &sleeper.id().to_string()]);
    one_line_error(&run, 1, "is not a JVM (no libjvm.so mapped); not signalled");
    assert!(sleeper.try_wait().unwrap().is_none(), "sleep was harmed");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // Nothing reached the JVM: no agent was loaded.
    assert_eq!(list_row(a.child.id())[3], "-");
    assert!(alive(a.child.id()) && alive(b.child.id()));
}
