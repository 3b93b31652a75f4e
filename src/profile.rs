//! `kprof profile [-d DURATION] [-e EVENTS] [-i INTERVAL] [-f FILE]... PID|NAME`: one command that finds
//! a running JVM, loads the agent (or, when it is loaded, starts a session), profiles for the duration or
//! until Ctrl-C, stops, and leaves the files where the caller asked for them.
//!
//! The agent writes into the private directory of the target's user inside the target's own namespace
//! (`/tmp/.kprof-<uid>`, which only that user can enter), where a target in a container can always write;
//! kprof then copies each file to the path the caller gave (relative to the caller's working directory)
//! and removes it there.

use crate::attach::{self, control, creds, library, sys, Failure, Prepared};
use kprof_profile::output::{write_atomic, Format};
use kprof_protocol::options::{parse_duration, EngineKind, Options};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const USAGE: &str = "\
usage: kprof profile [-d DURATION] [-e EVENTS] [-i INTERVAL] [-f FILE]... [-o OPTIONS]... [--signatures]
                     [--lib PATH] [--timeout SECONDS] PID|NAME [OPTIONS]

Profiles a running JVM: loads the agent (or starts a session in the one loaded), profiles for DURATION or
until Ctrl-C, writes the files and prints the summary.
  PID|NAME          a pid, or the main class (full or simple name) or jar file name `kprof list` shows
  -d DURATION       how long: 30s, 500ms, 2m, or seconds; 0 = until Ctrl-C (default 30s)
  -e EVENTS         engines, comma-separated: cpu, wall, alloc, lock, bytecode, exact (default cpu)
  -i INTERVAL       sampling interval, 10us..10s (default: the agent's, 10ms)
  -f FILE           output file, repeatable; the extension names the format: .html .collapsed .folded
                    .json .jfr .pb.gz .pprof .txt (default kprof-PID.html); relative to this directory
  -o OPTIONS        more agent options, key=value,... (kprof attach PID help lists them); repeatable
  --signatures      flame graph frames with signatures (default: Class.method, full name in the tooltip)
  --lib PATH        the agent library (default: libkprof.so next to the kprof binary)
  --timeout SECONDS how long to wait for the JVM to start and for its attach listener (default 10)
A progress line is shown on stderr when it is a terminal. Ctrl-C stops early and still writes the files.";

/// Default profiling time.
const DEFAULT_DURATION: Duration = Duration::from_secs(30);
/// How long to wait for a JVM still starting, and for its attach listener, by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the agent's reply (a stop writes the files).
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);
/// Agent options `kprof profile` sets itself, with the flag to use instead.
const MANAGED: &[(&str, &str)] = &[
    ("mode", "-e"),
    ("interval", "-i"),
    ("file", "-f"),
    ("format", "-f"),
    ("duration", "-d"),
    ("dump", "kprof dump"),
    ("control", "nothing: kprof needs the control socket"),
    ("signatures", "--signatures"),
];

/// What the command line asks for.
#[derive(Debug, PartialEq)]
struct Args {
    /// A pid or a main class / jar name.
    target: String,
    /// Zero: until Ctrl-C.
    duration: Duration,
    /// The agent's `mode=`.
    mode: String,
    interval: Option<String>,
    files: Vec<(PathBuf, Format)>,
    /// More agent options, comma-joined.
    extra: Vec<String>,
    signatures: bool,
    lib: Option<String>,
    timeout: Duration,
}

fn bad(message: String) -> Failure {
    attach::usage_error(message)
}

/// The value of a flag: `-d 5s`, `--duration 5s` or `--duration=5s`. `None` if `args[*i]` is not `flag`.
fn flag_value<'a>(args: &'a [String], i: &mut usize, names: &[&str]) -> Result<Option<&'a str>, Failure> {
    let arg = args[*i].as_str();
    for name in names {
        if arg == *name {
            *i += 1;
            return args.get(*i).map(|v| Some(v.as_str())).ok_or_else(|| bad(format!("{name} needs a value")));
        }
        if let Some(v) = arg.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// `30s`, `500ms`, `2m`, or a number of seconds.
fn parse_profile_duration(v: &str) -> Option<Duration> {
    let ns = match v.parse::<u64>() {
        Ok(secs) => secs.checked_mul(1_000_000_000)?,
        Err(_) => parse_duration(v)?,
    };
    (ns == 0 || (1_000_000..=86_400_000_000_000).contains(&ns)).then(|| Duration::from_nanos(ns))
}

/// `-e cpu,alloc` as the agent's `mode=asgct+alloc`.
fn parse_events(v: &str) -> Result<String, Failure> {
    let accepted: Vec<&str> =
        EngineKind::ALL.iter().map(|e| if *e == EngineKind::Asgct { "cpu" } else { e.name() }).collect();
    let mut engines: Vec<EngineKind> = Vec::new();
    for name in v.split([',', '+']).map(str::trim) {
        let e = EngineKind::parse(name).ok_or_else(|| {
            bad(format!("bad -e '{v}': '{name}' is no engine; accepted: {} (comma-separated)", accepted.join(", ")))
        })?;
        if !engines.contains(&e) {
            engines.push(e);
        }
    }
    Ok(engines.iter().map(|e| e.name()).collect::<Vec<_>>().join("+"))
}

fn parse_args(args: &[String]) -> Result<Args, Failure> {
    let mut a = Args {
        target: String::new(),
        duration: DEFAULT_DURATION,
        mode: "asgct".into(),
        interval: None,
        files: Vec::new(),
        extra: Vec::new(),
        signatures: false,
        lib: None,
        timeout: DEFAULT_TIMEOUT,
    };
    let mut target = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        if let Some(v) = flag_value(args, &mut i, &["-d", "--duration"])? {
            a.duration = parse_profile_duration(v).ok_or_else(|| {
                bad(format!(
                    "bad -d '{v}': accepted: a duration 1ms..24h (30s, 500ms, 2m) or seconds; 0 = until Ctrl-C"
                ))
            })?;
        } else if let Some(v) = flag_value(args, &mut i, &["-e", "--events"])? {
            a.mode = parse_events(v)?;
        } else if let Some(v) = flag_value(args, &mut i, &["-i", "--interval"])? {
            match parse_duration(v) {
                Some(ns) if (10_000..=10_000_000_000).contains(&ns) => a.interval = Some(v.to_string()),
                _ => return Err(bad(format!("bad -i '{v}': accepted: a duration 10us..10s (ns, us, ms, s)"))),
            }
        } else if let Some(v) = flag_value(args, &mut i, &["-f", "--file"])? {
            let format = Format::from_path(v).ok_or_else(|| {
                bad(format!(
                    "bad -f '{v}': the extension names no format; accepted: .html .htm .collapsed .folded .json .jfr \
                     .pb.gz .pprof .pb .txt"
                ))
            })?;
            a.files.push((PathBuf::from(v), format));
        } else if let Some(v) = flag_value(args, &mut i, &["-o", "--options"])? {
            a.extra.push(v.to_string());
        } else if let Some(v) = flag_value(args, &mut i, &["--lib"])? {
            a.lib = Some(v.to_string());
        } else if let Some(v) = flag_value(args, &mut i, &["--timeout"])? {
            let secs: f64 = v
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                .ok_or_else(|| bad(format!("bad --timeout '{v}': accepted: a number of seconds (0..3600]")))?;
            a.timeout = Duration::from_secs_f64(secs);
        } else if arg == "--signatures" {
            a.signatures = true;
        } else if arg.starts_with('-') {
            return Err(bad(format!(
                "unknown option '{arg}' (accepted: -d, -e, -i, -f, -o, --signatures, --lib, --timeout; see kprof \
                 profile --help)"
            )));
        } else if target.is_none() {
            target = Some(arg.to_string());
        } else {
            // Agent options after the target, as `kprof attach PID OPTIONS` takes them.
            a.extra.push(arg.to_string());
        }
        i += 1;
    }
    a.target = target.ok_or_else(|| bad("no PID or main class given (kprof profile --help)".into()))?;
    for item in a.extra.iter().flat_map(|e| e.split(',')) {
        let key = item.split('=').next().unwrap_or("").trim();
        if let Some((_, instead)) = MANAGED.iter().find(|(k, _)| *k == key) {
            return Err(bad(format!("-o {item}: kprof profile sets {key}= itself; use {instead}")));
        }
    }
    Ok(a)
}

/// The agent options of the session: what the flags say, then the extra options, and the files at
/// `inside` (paths in the target's namespace). `safety`: a `duration=` that ends the session by itself
/// should kprof die before stopping it.
fn agent_options(a: &Args, inside: &[String], safety: Option<Duration>) -> String {
    let mut items = vec![format!("mode={}", a.mode)];
    items.extend(a.interval.iter().map(|i| format!("interval={i}")));
    if a.signatures {
        items.push("signatures=on".into());
    }
    items.extend(a.extra.iter().filter(|e| !e.is_empty()).cloned());
    items.extend(safety.map(|d| format!("duration={}ms", d.as_millis())));
    items.extend(inside.iter().map(|p| format!("file={p}")));
    items.join(",")
}

/// The extension kprof gives the agent's file of `format` (the one the agent reads the format from).
fn extension(format: Format) -> &'static str {
    match format {
        Format::Collapsed => "collapsed",
        Format::Html => "html",
        Format::Json => "json",
        Format::Jfr => "jfr",
        Format::Pprof => "pb.gz",
        Format::Text => "txt",
    }
}

/// The first word of a JVM's program (main class, `-jar` file or `module/class`), past `-jar`/`-m`.
fn program_head(program: &str) -> &str {
    let mut words = program.split_whitespace();
    match words.next() {
        Some("-jar" | "-m" | "--module") => words.next().unwrap_or(""),
        Some(w) => w,
        None => "",
    }
}

/// Whether `name` names the JVM running `program`: its main class in full or without the package, its
/// jar by path or file name, or the class of `module/class`.
fn names_program(name: &str, program: &str) -> bool {
    let head = program_head(program);
    if head.is_empty() {
        return false;
    }
    let class = head.rsplit_once('/').map_or(head, |(_, c)| c);
    let simple = class.rsplit_once('.').map_or(class, |(_, c)| c);
    let is_jar = head.ends_with(".jar");
    name == head || name == class || (!is_jar && name == simple)
}

/// The pid of the JVM `target` names: a pid as it is, else the one JVM whose main class or jar it names.
fn find_jvm(target: &str) -> Result<u32, Failure> {
    if let Ok(pid) = target.parse::<u32>() {
        return if pid > 0 { Ok(pid) } else { Err(bad("pid 0 is no process".into())) };
    }
    let jvms = attach::jvms()?;
    let matching: Vec<&attach::Jvm> = jvms.iter().filter(|j| names_program(target, &j.program)).collect();
    let describe = |js: &[&attach::Jvm]| -> String {
        js.iter().map(|j| format!("{} ({})", j.target.pid, program_head(&j.program))).collect::<Vec<_>>().join(", ")
    };
    match matching.len() {
        1 => Ok(matching[0].target.pid),
        0 if jvms.is_empty() => Err(attach::fail(format!("no JVM runs '{target}': kprof sees no JVM from here"))),
        0 => Err(attach::fail(format!(
            "no JVM runs '{target}' (main class or jar); JVMs here: {}",
            describe(&jvms.iter().collect::<Vec<_>>())
        ))),
        _ => {
            Err(attach::fail(format!("'{target}' names {} JVMs: {}; give a pid", matching.len(), describe(&matching))))
        }
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// SIGINT and SIGTERM: the first ends the profile early (the files are still written); a second one
/// ends kprof at once.
extern "C" fn on_interrupt(_signal: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        sys::exit_now(130);
    }
}

/// Waits while the JVM `pid` is still starting (its counters say so, or it does not handle SIGQUIT yet),
/// up to `timeout`: a JVM started a moment ago can be profiled as soon as it can be attached.
fn wait_until_started(pid: u32, timeout: Duration) {
    let start = Instant::now();
    while start.elapsed() < timeout && !INTERRUPTED.load(Ordering::SeqCst) {
        let Ok(target) = attach::target::Target::read(pid) else { return };
        let handles_sigquit = target.sigquit == attach::target::SigquitDisposition::Caught;
        let starting = match target.perfdata().and_then(|p| p.started()) {
            Some(started) => !started,
            // No counters: a VM started with -XX:-UsePerfData (started once it handles SIGQUIT), or one that
            // has not made its counters file yet (HotSpot makes it early in its start-up), or a launcher
            // that has not loaded the VM yet.
            None => match target.maps_libjvm() {
                Ok(true) if attach::target::bool_flag(&target.jvm_options(), "UsePerfData") == Some(false) => {
                    !handles_sigquit
                }
                Ok(true) => true,
                _ => target.cmdline().first().is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "java")),
            },
        };
        if !starting {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The progress line, redrawn in place on a terminal.
struct Progress {
    shown: bool,
}

impl Progress {
    fn draw(&mut self, pid: u32, elapsed: Duration, duration: Duration, samples: Option<u64>) {
        let of = if duration.is_zero() {
            "until Ctrl-C".to_string()
        } else if duration.subsec_nanos() == 0 {
            format!("/ {} s", duration.as_secs())
        } else {
            format!("/ {:.1} s", duration.as_secs_f64())
        };
        let samples = samples.map_or(String::new(), |s| format!(", {} samples", thousands(s)));
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[Kkprof: profiling pid {pid}: {:.1} s {of}{samples} (Ctrl-C stops)",
            elapsed.as_secs_f64()
        );
        let _ = err.flush();
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

fn thousands(n: u64) -> String {
    kprof_profile::output::text::thousands(n)
}

/// How the profiling ended.
enum End {
    /// The duration passed, or Ctrl-C.
    Stop,
    /// The JVM exited meanwhile (its agent wrote the files at its exit).
    Exited,
}

/// `kprof profile ...`.
pub fn main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return 0;
    }
    attach::finish(profile(args))
}

fn profile(args: &[String]) -> Result<(), Failure> {
    let a = parse_args(args)?;
    // The options are checked here, with stand-in files, so that nothing reaches the target on a typo.
    let check = agent_options(&a, &["/x.html".to_string()], None);
    Options::parse(Some(&check)).map_err(|e| bad(e.0.trim_start_matches("kprof: ").to_string()))?;
    let pid = find_jvm(&a.target)?;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        sys::on_signal(signal, on_interrupt).map_err(|e| attach::fail(format!("cannot catch signal {signal}: {e}")))?;
    }
    wait_until_started(pid, a.timeout);
    let pidfd = attach::open_pidfd(pid)?;
    let prepared = attach::prepare(pid)?;
    // A target that fails the checks is not written to (the private directory below) either.
    if !control::present(&prepared.target).unwrap_or(false) {
        // Only a refusal matters here: load_agent takes the verdict on SIGQUIT again when it attaches.
        let _verdict = attach::check_attachable(&prepared.target, &pidfd)?;
    }
    let files = if a.files.is_empty() {
        vec![(PathBuf::from(format!("kprof-{pid}.html")), Format::Html)]
    } else {
        a.files.clone()
    };
    let (dir, shown) =
        creds::run_as(prepared.act_as.as_ref(), || library::private_dir(&prepared.target)).map_err(attach::fail)?;
    let names: Vec<String> = files
        .iter()
        .enumerate()
        .map(|(i, (_, f))| format!("profile-{}-{}.{}", std::process::id(), i + 1, extension(*f)))
        .collect();
    let inside: Vec<String> = names.iter().map(|n| format!("{shown}/{n}")).collect();
    let safety = (!a.duration.is_zero()).then(|| a.duration + Duration::from_secs(10) + a.duration / 10);
    let options = agent_options(&a, &inside, safety);

    let started = start_session(&a, &prepared, pid, &options)?;
    let end = wait(&a, &prepared, &pidfd, pid, started);
    let result = match end {
        End::Stop => stop_and_copy(&prepared, &files, &inside),
        End::Exited => exited_copy(&prepared, pid, &files, &inside),
    };
    // The agent's files are removed from the target whatever happened to the copies.
    let _ = creds::run_as(prepared.act_as.as_ref(), || {
        for n in &names {
            let _ = sys::unlinkat(&dir, n);
        }
        Ok(())
    });
    result
}

/// Starts the session: a command to the agent's control socket when it is loaded, else the agent loaded
/// with the options. Returns when profiling began.
fn start_session(a: &Args, prepared: &Prepared, pid: u32, options: &str) -> Result<Instant, Failure> {
    let target = &prepared.target;
    if control::present(target).unwrap_or(false) {
        let (before, reply) = creds::run_as(prepared.act_as.as_ref(), || {
            let before = control::send(target, "status", REPLY_TIMEOUT).ok();
            let reply = control::send(target, &format!("start {options}"), REPLY_TIMEOUT);
            Ok((before, reply))
        })
        .map_err(attach::fail)?;
        reply.map_err(|e| attach::fail(e.trim_start_matches("kprof: ").to_string()))?;
        if let Some(b) = before.filter(|b| b.get("state") == Some("running")) {
            eprintln!(
                "kprof: pid {pid} had a session running (mode={}); it was ended and its files written: {}",
                b.get("mode").unwrap_or("?"),
                b.get("files").unwrap_or("none")
            );
        }
    } else {
        attach::load_agent(pid, options, a.lib.as_deref(), a.timeout)?;
    }
    Ok(Instant::now())
}

/// Waits for the duration, Ctrl-C or the JVM's exit, drawing the progress line on a terminal.
fn wait(a: &Args, prepared: &Prepared, pidfd: &std::os::fd::OwnedFd, pid: u32, started: Instant) -> End {
    let terminal = std::io::stderr().is_terminal();
    let mut progress = Progress { shown: false };
    let mut samples = None;
    let mut polled: Option<Instant> = None;
    let end = loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break End::Stop;
        }
        let elapsed = started.elapsed();
        if !a.duration.is_zero() && elapsed >= a.duration {
            break End::Stop;
        }
        if sys::pidfd_exited(pidfd) {
            break End::Exited;
        }
        if terminal {
            if polled.is_none_or(|t| t.elapsed() >= Duration::from_millis(500)) {
                polled = Some(Instant::now());
                let status = creds::run_as(prepared.act_as.as_ref(), || {
                    control::send(&prepared.target, "status", Duration::from_secs(2))
                });
                samples = status.ok().and_then(|s| s.get("samples")?.parse().ok()).or(samples);
            }
            progress.draw(pid, elapsed, a.duration, samples);
        }
        let left = if a.duration.is_zero() { Duration::MAX } else { a.duration - elapsed };
        std::thread::sleep(left.min(Duration::from_millis(100)));
    };
    progress.clear();
    end
}

/// Stops the session and copies its files to the caller's paths; prints the summary.
fn stop_and_copy(prepared: &Prepared, files: &[(PathBuf, Format)], inside: &[String]) -> Result<(), Failure> {
    let target = &prepared.target;
    let reply = creds::run_as(prepared.act_as.as_ref(), || control::send(target, "stop", REPLY_TIMEOUT));
    let reply = match reply {
        Ok(r) => r,
        // The session ended by itself (its safety `duration=`, kprof having been held up that long): its
        // files are there all the same.
        Err(e) if e.contains("no session is running") => control::Reply {
            fields: vec![("files".into(), inside.join(","))],
            notes: vec!["the session had ended by itself; its files are copied without its summary".into()],
        },
        Err(e) => return Err(attach::fail(format!("stop: {e}"))),
    };
    let written = copy_files(files, inside, &reply.files(), |p| {
        creds::run_as(prepared.act_as.as_ref(), || library::read_in_target(target, p))
    })?;
    attach::print_reply(target, &reply, &written);
    check_all_written(files, &written)
}

/// The JVM exited while profiled: its agent wrote the session's files at the exit. They can still be read
/// when the target shared this mount namespace (its root is gone with it otherwise).
fn exited_copy(prepared: &Prepared, pid: u32, files: &[(PathBuf, Format)], inside: &[String]) -> Result<(), Failure> {
    if !prepared.target.shares_mounts() {
        return Err(attach::fail(format!(
            "pid {pid} exited while profiled; its profile, written at its exit inside its own namespace, went with it"
        )));
    }
    let written = copy_files(files, inside, inside, |p| {
        creds::run_as(prepared.act_as.as_ref(), || std::fs::read(p).map_err(|e| format!("cannot read {p}: {e}")))
    })?;
    eprintln!("kprof: pid {pid} exited while profiled; the profile written at its exit was copied");
    let reply = control::Reply {
        fields: vec![("state".into(), "exited".into()), ("files".into(), String::new())],
        notes: vec![],
    };
    attach::print_reply(&prepared.target, &reply, &written);
    check_all_written(files, &written)
}

/// Copies each file the agent wrote (`written_inside`, paths in the target) to the caller's path for it.
fn copy_files(
    files: &[(PathBuf, Format)],
    inside: &[String],
    written_inside: &[String],
    read: impl Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Vec<PathBuf>, Failure> {
    let mut out = Vec::new();
    for ((dest, _), path) in files.iter().zip(inside) {
        if !written_inside.iter().any(|w| w == path) {
            continue;
        }
        let bytes = read(path).map_err(attach::fail)?;
        let written =
            write_atomic(dest, &bytes).map_err(|e| attach::fail(format!("cannot write {}: {e}", dest.display())))?;
        out.push(written);
    }
    Ok(out)
}

fn check_all_written(files: &[(PathBuf, Format)], written: &[PathBuf]) -> Result<(), Failure> {
    let missing: Vec<String> = files
        .iter()
        .filter(|(f, _)| !written.iter().any(|w| w.ends_with(f) || Path::new(w) == f.as_path()))
        .map(|(f, _)| f.display().to_string())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(attach::fail(format!(
            "the agent did not write {} (its reason is on the target's standard error)",
            missing.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::strings;

    #[test]
    fn flags_become_agent_options() {
        let a = parse_args(&strings(&[
            "-d",
            "5s",
            "-e",
            "cpu,alloc",
            "-i",
            "1ms",
            "-f",
            "x.html",
            "--file=y.jfr",
            "--signatures",
            "app.Main",
            "threads",
        ]))
        .unwrap();
        assert_eq!(a.duration, Duration::from_secs(5));
        assert_eq!(a.target, "app.Main");
        assert_eq!(a.files, vec![(PathBuf::from("x.html"), Format::Html), (PathBuf::from("y.jfr"), Format::Jfr)]);
        let o = agent_options(&a, &["/tmp/.kprof-0/a.html".into()], Some(Duration::from_secs(15)));
        assert_eq!(o, "mode=asgct+alloc,interval=1ms,signatures=on,threads,duration=15000ms,file=/tmp/.kprof-0/a.html");
        assert!(Options::parse(Some(&o)).is_ok());
        let a = parse_args(&strings(&["1234"])).unwrap();
        assert_eq!((a.duration, a.mode.as_str()), (DEFAULT_DURATION, "asgct"));
        assert_eq!(parse_args(&strings(&["-d", "30", "1"])).unwrap().duration, Duration::from_secs(30));
        assert_eq!(parse_args(&strings(&["-d", "0", "1"])).unwrap().duration, Duration::ZERO);
        assert_eq!(parse_args(&strings(&["-e", "wall,lock,bytecode", "1"])).unwrap().mode, "wall+lock+bytecode");
    }

    #[test]
    fn bad_flags_name_the_flag_and_what_it_accepts() {
        let message = |v: &[&str]| match parse_args(&strings(v)) {
            Err(f) => {
                assert_eq!(f.status, 2, "{v:?}");
                f.message
            }
            Ok(a) => panic!("{v:?} accepted: {a:?}"),
        };
        assert!(message(&["-d", "soon", "1"]).starts_with("bad -d 'soon': accepted: a duration"));
        assert!(message(&["-e", "cpu,gc", "1"]).contains("'gc' is no engine; accepted: cpu, wall, alloc, lock"));
        assert!(message(&["-i", "1h", "1"]).starts_with("bad -i '1h': accepted: a duration 10us..10s"));
        assert!(message(&["-f", "out.png", "1"]).contains("accepted: .html"));
        assert!(message(&["-o", "file=/tmp/x.html", "1"]).contains("use -f"));
        assert!(message(&["1", "mode=exact"]).contains("use -e"));
        assert!(message(&["-x", "1"]).starts_with("unknown option '-x'"));
        assert!(message(&["-d"]).contains("-d needs a value"));
        assert!(message(&[]).starts_with("no PID"));
    }

    #[test]
    fn names_match_main_classes_and_jars() {
        assert!(names_program("app.Main", "app.Main --port 80"));
        assert!(names_program("Main", "app.Main --port 80"));
        assert!(!names_program("app", "app.Main"));
        assert!(names_program("server.jar", "/opt/app/server.jar -v"));
        assert!(names_program("/opt/app/server.jar", "/opt/app/server.jar"));
        assert!(names_program("server.jar", "-jar /opt/app/server.jar"));
        assert!(!names_program("jar", "/opt/app/server.jar"));
        assert!(names_program("com.x.Main", "my.module/com.x.Main"));
        assert!(names_program("Main", "-m my.module/com.x.Main"));
        assert!(!names_program("Main", ""));
    }
}
