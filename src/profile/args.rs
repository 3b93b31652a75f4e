//! The command line of `kprof profile` and the agent options it makes of it.

use crate::attach::{self, Failure};
use kprof_profile::output::Format;
use kprof_protocol::options::{parse_duration, EngineKind};
use std::path::PathBuf;
use std::time::Duration;

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
pub(super) const DEFAULT_DURATION: Duration = Duration::from_secs(30);
/// How long to wait for a JVM still starting, and for its attach listener, by default.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the agent's reply (a stop writes the files).
pub(super) const REPLY_TIMEOUT: Duration = Duration::from_secs(120);
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
pub(super) struct Args {
    /// A pid or a main class / jar name.
    pub target: String,
    /// Zero: until Ctrl-C.
    pub duration: Duration,
    /// The agent's `mode=`.
    pub mode: String,
    pub interval: Option<String>,
    pub files: Vec<(PathBuf, Format)>,
    /// More agent options, comma-joined.
    pub extra: Vec<String>,
    pub signatures: bool,
    pub lib: Option<String>,
    pub timeout: Duration,
}

pub(super) fn bad(message: String) -> Failure {
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

pub(super) fn parse_args(args: &[String]) -> Result<Args, Failure> {
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
pub(super) fn agent_options(a: &Args, inside: &[String], safety: Option<Duration>) -> String {
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
pub(super) fn extension(format: Format) -> &'static str {
    match format {
        Format::Collapsed => "collapsed",
        Format::Html => "html",
        Format::Json => "json",
        Format::Jfr => "jfr",
        Format::Pprof => "pb.gz",
        Format::Text => "txt",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::strings;
    use kprof_protocol::options::Options;

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
}
