//! Shared helpers of the integration tests: the JDKs installed, the agent library, running Java
//! programs with the agent, reading what they wrote.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One installed JDK.
#[derive(Clone, Debug)]
pub struct Jdk {
    pub home: PathBuf,
    /// Feature version (17, 25, ...).
    pub version: u32,
}

impl Jdk {
    pub fn java(&self) -> PathBuf {
        self.home.join("bin/java")
    }

    pub fn label(&self) -> String {
        format!("jdk{}", self.version)
    }
}

/// Every JDK under /usr/lib/jvm (symlinked aliases counted once), oldest first. Panics if none: the
/// integration tests must run on real JVMs.
pub fn jdks() -> Vec<Jdk> {
    let mut found: BTreeMap<PathBuf, Jdk> = BTreeMap::new();
    let dir = std::env::var("KPROF_JDK_ROOT").unwrap_or_else(|_| "/usr/lib/jvm".into());
    for entry in std::fs::read_dir(&dir).expect("read /usr/lib/jvm").flatten() {
        let Ok(home) = std::fs::canonicalize(entry.path()) else { continue };
        if !home.join("bin/java").exists() || found.contains_key(&home) {
            continue;
        }
        let release = std::fs::read_to_string(home.join("release")).unwrap_or_default();
        let version = release
            .lines()
            .find_map(|l| l.strip_prefix("JAVA_VERSION="))
            .and_then(|v| v.trim_matches('"').split(['.', '-', '+']).next().and_then(|s| s.parse().ok()))
            .unwrap_or(0);
        if version >= 17 {
            found.insert(home.clone(), Jdk { home, version });
        }
    }
    let mut list: Vec<Jdk> = found.into_values().collect();
    list.sort_by_key(|j| j.version);
    assert!(!list.is_empty(), "no JDK 17+ under {dir}");
    list
}

/// The directory that holds the test binary's sibling artifacts (target/<profile>).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}

/// The agent library built with the tests. `cargo test` builds it in target/<profile>/deps and copies it
/// up to target/<profile> only on `cargo build`: the newer of the two is the one built from this source.
pub fn agent_lib() -> PathBuf {
    let dir = target_dir();
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let candidates = [dir.join("deps/libkprof.so"), dir.join("libkprof.so")];
    let newest = candidates.iter().filter_map(|p| modified(p).map(|t| (t, p))).max_by_key(|(t, _)| *t);
    match newest {
        Some((_, p)) => p.clone(),
        None => panic!("{} missing: cargo test builds it with the library", candidates[0].display()),
    }
}

/// The `kprof` binary built with the tests, with the agent library it loads (`libkprof.so` in its own
/// directory) put beside it as a release has it: `cargo test` leaves the library in `deps/` only.
pub fn kprof_bin() -> PathBuf {
    static PLACED: std::sync::Once = std::sync::Once::new();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_kprof"));
    PLACED.call_once(|| {
        let lib = agent_lib();
        let beside = bin.with_file_name("libkprof.so");
        if lib != beside {
            // Copy, then rename: test binaries run one after another, but a reader never sees half a file.
            let tmp = bin.with_file_name(format!(".libkprof.so.{}", std::process::id()));
            std::fs::copy(&lib, &tmp).expect("copy the agent library beside kprof");
            std::fs::rename(&tmp, &beside).expect("place the agent library beside kprof");
        }
    });
    bin
}

/// The compiled java-harness classes.
pub fn harness_classes() -> PathBuf {
    PathBuf::from(env!("KPROF_HARNESS_CLASSES"))
}

/// The compiled JDK 21+ java-harness classes, if a JDK 21+ was present at build time.
pub fn harness21_classes() -> Option<PathBuf> {
    option_env!("KPROF_HARNESS21_CLASSES").map(PathBuf::from)
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = target_dir().join("test-scratch").join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// What a run printed.
pub struct Run {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The agent's summary line, if it printed one.
    pub fn summary_line(&self) -> Option<&str> {
        self.stderr.lines().find(|l| l.starts_with("kprof: mode="))
    }

    /// The agent's summary line as key → value.
    pub fn summary(&self) -> BTreeMap<String, String> {
        let line = self.summary_line().unwrap_or_else(|| panic!("no kprof summary line in stderr:\n{}", self.stderr));
        line.trim_start_matches("kprof: ")
            .split(' ')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn summary_f64(&self, key: &str) -> f64 {
        let s = self.summary();
        let v = s.get(key).unwrap_or_else(|| panic!("summary has no {key}: {s:?}"));
        v.trim_end_matches("/cpu-s")
            .trim_end_matches('%')
            .trim_end_matches('s')
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v}"))
    }

    pub fn assert_ok(&self) -> &Run {
        assert!(self.status.success(), "exit {:?}\nstdout:\n{}\nstderr:\n{}", self.status, self.stdout, self.stderr);
        self
    }
}

/// Runs `java [jvm_args] -agentpath:libkprof.so=<agent> -cp harness <main> [args]` with a time limit.
pub fn run_java(jdk: &Jdk, agent: Option<&str>, jvm_args: &[&str], main: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new(jdk.java());
    cmd.args(jvm_args);
    if let Some(opts) = agent {
        cmd.arg(format!("-agentpath:{}={}", agent_lib().display(), opts));
    }
    cmd.arg("-cp").arg(harness_classes()).arg(main).args(args);
    // A run without `file=` writes kprof-<pid>.html into its working directory: keep that out of the tree.
    let cwd = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("java-cwd");
    std::fs::create_dir_all(&cwd).expect("java working directory");
    cmd.current_dir(cwd);
    run_with_timeout(cmd, Duration::from_secs(300))
}

/// Runs `cmd`, killing it after `limit`.
pub fn run_with_timeout(cmd: Command, limit: Duration) -> Run {
    run_with_timeout_or(cmd, limit, String::new)
}

/// [`run_with_timeout`], with `diagnose()` (what the caller can tell about why the command hangs) in the
/// failure message of a timeout.
pub fn run_with_timeout_or(mut cmd: Command, limit: Duration, diagnose: impl FnOnce() -> String) -> Run {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn");
    wait_within(child, &format!("{cmd:?}"), limit, diagnose)
}

/// Waits for `child` (what it has left of its piped output read to the end), killing it after `limit`
/// and failing with `what` and `diagnose()`, taken before the kill.
pub fn wait_within(mut child: Child, what: &str, limit: Duration, diagnose: impl FnOnce() -> String) -> Run {
    let read_all = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || pipe.and_then(|p| std::io::read_to_string(p).ok()).unwrap_or_default())
    };
    let out_t = read_all(child.stdout.take().map(|p| Box::new(p) as _));
    let err_t = read_all(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let diagnosis = diagnose();
            let _ = child.kill();
            let s = child.wait().expect("wait");
            panic!("timed out after {limit:?}: {what} ({s:?}){diagnosis}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run { status, stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap() }
}

/// Runs `cmd` to its end (killed after `limit`) and returns what it printed and its peak resident set, in
/// KiB, as the kernel accounted it for that process alone (`wait4`, which also reaps it).
#[allow(clippy::zombie_processes)]
pub fn run_with_peak_rss(mut cmd: Command, limit: Duration) -> (Run, u64) {
    use std::io::Read;
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = std::time::Instant::now();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own child, not yet reaped (std never waits for it here); the pointers are
        // to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after {limit:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    use std::os::unix::process::ExitStatusExt;
    let run = Run {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    };
    (run, usage.ru_maxrss as u64)
}

pub fn output_of(o: Output) -> Run {
    Run {
        status: o.status,
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// A collapsed-stacks file: (frames root first, count) per line.
pub fn read_collapsed(path: &Path) -> Vec<(Vec<String>, u64)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad collapsed line: {l}"));
            (stack.split(';').map(str::to_string).collect(), n.parse().unwrap_or_else(|_| panic!("bad count: {l}")))
        })
        .collect()
}

/// Sum of counts of stacks for which `pred` holds.
pub fn count_where(stacks: &[(Vec<String>, u64)], pred: impl Fn(&[String]) -> bool) -> u64 {
    stacks.iter().filter(|(s, _)| pred(s)).map(|(_, n)| n).sum()
}

/// Whether a stack contains a frame whose name contains `needle`.
pub fn has_frame(stack: &[String], needle: &str) -> bool {
    stack.iter().any(|f| f.contains(needle))
}

/// Parses `key=value` pairs from the line of `stdout` that starts with `prefix`.
pub fn program_line(stdout: &str, prefix: &str) -> BTreeMap<String, String> {
    let line =
        stdout.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no '{prefix}' line in:\n{stdout}"));
    line[prefix.len()..]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Ways to run the same program that must not change what the counting modes count: each JIT tier alone
/// (the interpreter, C1, C2), another object layout, other collectors. Not `-Xcomp`:
/// tests add it where it holds.
pub const VM_CONFIGS: [(&str, &[&str]); 6] = [
    ("xint", &["-Xint"]),
    ("c1", &["-XX:TieredStopAtLevel=1"]),
    ("c2", &["-XX:-TieredCompilation"]),
    ("no-coops", &["-XX:-UseCompressedOops"]),
    ("serial", &["-XX:+UseSerialGC"]),
    ("zgc", &["-XX:+UseZGC"]),
];

/// Runs `f` once per installed JDK, naming the JDK in any failure.
pub fn for_each_jdk(f: impl Fn(&Jdk)) {
    for jdk in jdks() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&jdk)));
        if let Err(e) = result {
            eprintln!("failed on {} ({})", jdk.label(), jdk.home.display());
            std::panic::resume_unwind(e);
        }
    }
}

/// A long-running program whose output is collected line by line as it comes (each stdout line with the
/// time it arrived); it and `also_kill` are killed when dropped.
pub struct Background {
    pub child: std::process::Child,
    stdout: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// More pids to kill on drop (a JVM inside a PID namespace started through `unshare`).
    pub also_kill: Vec<u32>,
    /// The threads reading its output (joined by [`Background::finish`]).
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn spawn(mut cmd: Command) -> Background {
        use std::io::{BufRead, BufReader, Read};
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let stdout = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let lines = stdout.clone();
        let out_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push((Instant::now(), line));
            }
        });
        let text = stderr.clone();
        let err_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut err = err;
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                text.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Background { child, stdout, stderr, also_kill: Vec::new(), readers: vec![out_reader, err_reader] }
    }

    /// Waits for the program to end by itself (killing it after `limit`, and failing) and returns what it
    /// printed.
    pub fn finish(mut self, limit: Duration) -> Run {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                start.elapsed() < limit,
                "still running after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Run { status, stdout: self.stdout(), stderr: self.stderr() }
    }

    /// The stdout lines so far, with the time each arrived.
    pub fn lines(&self) -> Vec<(Instant, String)> {
        self.stdout.lock().unwrap().clone()
    }

    pub fn stdout(&self) -> String {
        self.lines().into_iter().map(|(_, l)| l + "\n").collect()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until a stdout line satisfies `pred`; panics after `limit`.
    pub fn wait_line(&self, what: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some((_, l)) = self.lines().into_iter().find(|(_, l)| pred(l)) {
                return l;
            }
            assert!(
                start.elapsed() < limit,
                "no line {what} within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for pid in &self.also_kill {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(Stdio::null()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The effective uid of the tests.
pub fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:")).expect("Uid line");
    uids.split_whitespace().nth(1).and_then(|u| u.parse().ok()).expect("effective uid")
}

/// The children of process `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| s.lines().find_map(|l| l.strip_prefix("State:")).is_some_and(|st| !st.trim().starts_with('Z')))
        .unwrap_or(false)
}

/// A command that runs `program` (and its arguments) as pid 1 of a new PID and mount namespace with a
/// private /tmp (a tmpfs), like a container: `hide` lists directories covered by an empty tmpfs inside,
/// `user` a numeric uid (and gid) to run as.
pub fn container(hide: &[&Path], user: Option<u32>, program: &[&str]) -> Command {
    let mut script = String::from("mount -t tmpfs tmpfs /tmp");
    for (i, _) in hide.iter().enumerate() {
        script.push_str(&format!(" && mount -t tmpfs tmpfs \"$KPROF_HIDE_{i}\""));
    }
    script.push_str(" && exec \"$@\"");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--mount", "--fork", "--mount-proc", "--kill-child", "sh", "-c", &script, "sh"]);
    if let Some(uid) = user {
        cmd.args(["setpriv", &format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups"]);
    }
    for (i, dir) in hide.iter().enumerate() {
        cmd.env(format!("KPROF_HIDE_{i}"), dir);
    }
    cmd.args(program);
    cmd
}

/// A command that runs `program` as uid (and gid) `user` when given (setpriv, as root), else as we are.
pub fn as_user(program: &Path, user: Option<u32>) -> Command {
    match user {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups"]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Runs the `kprof` binary at `bin` with `args` (as uid `user` if given), with a time limit.
pub fn kprof_at(bin: &Path, user: Option<u32>, args: &[&str]) -> Run {
    let mut cmd = as_user(bin, user);
    cmd.args(args);
    // `kprof SUBCOMMAND PID ...`: a command that hangs waits for that JVM, whose threads then tell why.
    let target = args.get(1).and_then(|a| a.parse::<u32>().ok());
    run_with_timeout_or(cmd, Duration::from_secs(120), || target.map(native_stacks).unwrap_or_default())
}

/// Every thread's native stack in process `pid` (gdb, which scripts/install-test-deps installs), for the
/// message of a test that timed out waiting for it.
pub fn native_stacks(pid: u32) -> String {
    let mut gdb = Command::new("timeout");
    gdb.args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt 30"]);
    match gdb.output() {
        Ok(o) => format!(
            "\nnative stacks of pid {pid}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("\n(no native stacks of pid {pid}: gdb: {e})"),
    }
}

/// The median of `values` (NaN if empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The headless Chromium binary (`KPROF_CHROMIUM`, else Debian's). Panics with the install command when
/// there is none: the tests that need it must not pass silently.
pub fn chromium() -> PathBuf {
    if let Ok(p) = std::env::var("KPROF_CHROMIUM") {
        return PathBuf::from(p);
    }
    for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!(
        "headless Chromium not found (looked for /usr/bin/chromium): install it with scripts/install-test-deps \
         (apt-get install -y --no-install-recommends chromium), or point KPROF_CHROMIUM at a Chromium binary"
    );
}

/// What headless Chromium made of a page.
pub struct Page {
    /// The DOM after the page's scripts ran.
    pub dom: String,
    /// What the page logged to its console (messages, warnings, errors and uncaught exceptions alike:
    /// Chromium's log does not tell them apart), one entry per message.
    pub console: Vec<String>,
}

/// Headless Chromium's arguments: no network, a fresh profile in `profile_dir`, a fixed window, five
/// seconds of virtual time for the page's scripts, console messages on stderr.
fn chromium_command(profile_dir: &Path) -> Command {
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--window-size=1280,800",
        "--virtual-time-budget=5000",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile_dir.display()));
    cmd
}

/// The console messages in Chromium's log (`...:INFO:CONSOLE:12] "message", source: URL (12)`).
fn console_messages(stderr: &str) -> Vec<String> {
    stderr.lines().filter_map(|l| l.find(":CONSOLE").map(|at| l[at..].to_string())).collect()
}

/// Loads `url` in headless Chromium and returns the DOM after the page's scripts ran, with what the
/// page logged to its console.
pub fn load_page(url: &str, profile_dir: &Path) -> Page {
    let mut cmd = chromium_command(profile_dir);
    cmd.arg("--dump-dom").arg(url);
    let run = run_with_timeout(cmd, Duration::from_secs(90));
    assert!(run.status.success(), "chromium failed on {url}: {:?}\n{}", run.status, run.stderr);
    Page { dom: run.stdout, console: console_messages(&run.stderr) }
}

/// Loads kprof's flame graph page at `url` in headless Chromium (see [`load_page`]) and returns the DOM.
/// Checks that the page's script finished (it sets `data-ready="1"`) and logged nothing: no error, no
/// warning, no uncaught exception.
pub fn dump_dom(url: &str, profile_dir: &Path) -> String {
    let page = load_page(url, profile_dir);
    assert!(page.console.is_empty(), "the page logged to its console on {url}:\n{}", page.console.join("\n"));
    assert!(page.dom.contains("data-ready=\"1\""), "the page's script did not finish on {url}:\n{}", page.dom);
    page.dom
}

/// Takes a PNG screenshot of `url` (1280×800) into `png` with headless Chromium.
pub fn screenshot(url: &str, png: &Path, profile_dir: &Path) {
    let mut cmd = chromium_command(profile_dir);
    cmd.arg(format!("--screenshot={}", png.display())).arg(url);
    let run = run_with_timeout(cmd, Duration::from_secs(90));
    assert!(run.status.success(), "chromium failed to screenshot {url}: {:?}\n{}", run.status, run.stderr);
    let bytes = std::fs::read(png).unwrap_or_else(|e| panic!("no screenshot {}: {e}", png.display()));
    assert!(bytes.starts_with(b"\x89PNG"), "{} is not a PNG", png.display());
}

/// Decodes a pprof file with the independent Python reader (tests/output_pprof/decode.py: Python
/// protobuf and a profile.proto written from the format's documentation) and returns its JSON.
pub fn decode_pprof(path: &Path) -> serde_json::Value {
    let python = std::env::var("KPROF_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/output_pprof/decode.py");
    let out = Command::new(python).arg(script).arg(path).output().expect("run python3 (scripts/install-test-deps)");
    assert!(out.status.success(), "decode.py failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("decode.py prints JSON")
}
