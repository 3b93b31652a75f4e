//! Sidecar profiling: `kprof list`, `kprof attach PID OPTIONS`, and `kprof start|stop|dump|status PID` for
//! an agent already loaded. Works across PID and mount namespaces (containers) through /proc.
//!
//! Before anything reaches the target, kprof checks what it can from outside: the options parse, the
//! caller is the target's user or root, the process is a HotSpot JVM (libjvm.so mapped), it handles SIGQUIT
//! (a process that does not would die of it), and it accepts attach. A target that fails a check is neither
//! signalled nor written to. Every failure is one line on stderr and a non-zero exit status.

pub mod control;
pub mod creds;
pub mod hotspot;
pub mod inside;
pub mod library;
pub mod perfdata;
pub mod sys;
pub mod target;

use creds::Credentials;
use kprof_protocol::options::Options;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use target::{SigquitDisposition, Target};

/// How long to wait for the JVM's attach listener by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for a reply once connected (the agent may be writing large profiles).
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

pub const USAGE: &str = "\
usage: kprof list
       kprof attach PID [OPTIONS] [--lib PATH] [--timeout SECONDS]
       kprof start PID OPTIONS
       kprof stop PID [--copy-to DIR]
       kprof dump PID [file=PATH,...] [--copy-to DIR]
       kprof status PID

PID is the process id as seen from where kprof runs; the JVM may run in another PID and mount namespace.
OPTIONS are the agent's (kprof attach PID help lists them), e.g. mode=asgct,interval=1ms,file=/tmp/app.html.
  --lib PATH          the agent library (default: libkprof.so next to the kprof binary)
  --timeout SECONDS   how long to wait for the JVM's attach listener (default 5)
  --copy-to DIR       copy the files written out of the target into DIR";

/// A failure: the one line to print and the exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub message: String,
    pub status: i32,
}

pub(crate) fn fail(message: impl Into<String>) -> Failure {
    Failure { message: message.into(), status: 1 }
}

pub(crate) fn usage_error(message: impl Into<String>) -> Failure {
    Failure { message: message.into(), status: 2 }
}

pub(crate) fn finish(result: Result<(), Failure>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("kprof: {}", f.message);
            }
            f.status
        }
    }
}

/// Arguments shared by the commands that address one process.
#[derive(Default)]
struct Args {
    pid: u32,
    options: Option<String>,
    lib: Option<String>,
    timeout: Option<Duration>,
    copy_to: Option<PathBuf>,
}

fn parse_args(args: &[String], allowed: &[&str]) -> Result<Args, Failure> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Err(Failure { message: String::new(), status: 0 });
    }
    let mut out = Args::default();
    let mut pid = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let flag =
            ["--lib", "--timeout", "--copy-to"].into_iter().find(|f| arg == *f || arg.starts_with(&format!("{f}=")));
        if let Some(flag) = flag {
            if !allowed.contains(&flag) {
                return Err(usage_error(format!("{flag} does not apply here")));
            }
            let value = super::report::option_value(args, &mut i, flag).map_err(usage_error)?.unwrap_or_default();
            match flag {
                "--lib" => out.lib = Some(value.to_string()),
                "--copy-to" => out.copy_to = Some(PathBuf::from(value)),
                _ => {
                    let secs: f64 =
                        value.parse().ok().filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0).ok_or_else(
                            || usage_error(format!("--timeout '{value}' is not a number of seconds (0..3600]")),
                        )?;
                    out.timeout = Some(Duration::from_secs_f64(secs));
                }
            }
        } else if arg.starts_with("--") {
            return Err(usage_error(format!("unknown option '{arg}'")));
        } else if pid.is_none() {
            pid = Some(
                arg.parse::<u32>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| usage_error(format!("'{arg}' is not a pid")))?,
            );
        } else if out.options.is_none() {
            out.options = Some(arg.to_string());
        } else {
            return Err(usage_error(format!("one OPTIONS argument expected (comma-separated), also got '{arg}'")));
        }
        i += 1;
    }
    out.pid = pid.ok_or_else(|| usage_error(format!("no PID given\n{USAGE}")))?;
    Ok(out)
}

/// A target ready to be talked to: inspected, with the credentials to act as.
pub(crate) struct Prepared {
    pub target: Target,
    pub act_as: Option<Credentials>,
}

pub(crate) fn prepare(pid: u32) -> Result<Prepared, Failure> {
    let target = Target::read(pid).map_err(fail)?;
    if target.state == 'Z' || target.state == 'X' {
        return Err(fail(format!("pid {pid} has exited")));
    }
    let act_as = creds::for_target(&target.creds).map_err(|me| {
        fail(format!(
            "pid {pid} runs as user {} (uid {}) and kprof as uid {me}: only the process's user or root may attach to it",
            target.user_name(),
            target.creds.uid
        ))
    })?;
    Ok(Prepared { target, act_as })
}

/// Refuses targets that must not get SIGQUIT: not a JVM, not handling it, attach disabled, still starting.
fn check_signal_safe(target: &Target, pidfd: &OwnedFd) -> Result<(), String> {
    let pid = target.pid;
    let perf = target.perfdata();
    match target.maps_libjvm() {
        Ok(true) => {}
        Ok(false) if target.still_starting(perf.as_ref()) => {
            return Err(format!(
                "pid {pid} is a java launcher that has not loaded the JVM yet (still starting); try again in a moment"
            ))
        }
        Ok(false) => {
            return Err(format!("pid {pid} ({}) is not a JVM (no libjvm.so mapped); not signalled", target.name))
        }
        Err(_) if sys::pidfd_exited(pidfd) => return Err(format!("pid {pid} exited")),
        Err(e) => return Err(format!("cannot tell whether pid {pid} is a JVM (/proc/{pid}/maps: {e}); not signalled")),
    }
    let options = target.jvm_options();
    if perf.as_ref().and_then(|p| p.attach_supported()) == Some(false)
        || target::bool_flag(&options, "DisableAttachMechanism") == Some(true)
    {
        return Err(format!(
            "pid {pid} is a JVM started with -XX:+DisableAttachMechanism: it cannot be attached; not signalled"
        ));
    }
    if options.iter().any(|o| o == "-Xrs") || target::bool_flag(&options, "ReduceSignalUsage") == Some(true) {
        return Err(format!(
            "pid {pid} is a JVM started with -Xrs (ReduceSignalUsage) and its attach listener is not up: SIGQUIT \
             would kill it; not signalled"
        ));
    }
    if target.still_starting(perf.as_ref()) {
        return Err(format!("pid {pid} is a JVM that is still starting; try again in a moment"));
    }
    match target.sigquit {
        SigquitDisposition::Caught => Ok(()),
        SigquitDisposition::Ignored => {
            Err(format!("pid {pid} ignores SIGQUIT, so its attach listener cannot be started"))
        }
        SigquitDisposition::Default => Err(format!(
            "pid {pid} does not handle SIGQUIT yet (a JVM still starting, or one whose handler was removed): it would \
             die of it; not signalled"
        )),
    }
}

/// Checks, from outside, that `target` (behind `pidfd`) can be attached to: Ok with the verdict on
/// SIGQUIT (an Err inside: attach only through a listener already up), Err when it must not be touched.
pub(crate) fn check_attachable(target: &Target, pidfd: &OwnedFd) -> Result<Result<(), String>, Failure> {
    let signal_safe = check_signal_safe(target, pidfd);
    if sys::pidfd_exited(pidfd) {
        return Err(fail(format!("pid {} exited", target.pid)));
    }
    if let Err(e) = &signal_safe {
        // Without a listener already up there is nothing to talk to: refuse before touching the target.
        if !hotspot::listener_present(target) {
            return Err(fail(e.clone()));
        }
    }
    Ok(signal_safe)
}

/// Validates agent options here, so that a typo never reaches the target, nor options longer than
/// HotSpot takes in one attach argument.
fn validate_options(text: &str) -> Result<(), Failure> {
    // The agent's messages start with "kprof: " already.
    let parsed =
        Options::parse(Some(text)).map_err(|e| usage_error(e.to_string().trim_start_matches("kprof: ").to_string()))?;
    if parsed.help {
        println!("{}", kprof_protocol::options::help_text());
        return Err(Failure { message: String::new(), status: 0 });
    }
    if text.len() > hotspot::ARG_MAX {
        return Err(usage_error(format!("OPTIONS {}", hotspot::too_long(text))));
    }
    Ok(())
}

/// Prints the outcome of a command as one `key=value` line: the target, then the agent's reply with the
/// files as paths the caller can read.
pub(crate) fn print_reply(target: &Target, reply: &control::Reply, files: &[PathBuf]) {
    let mut line = format!("pid={} nspid={} user={}", target.pid, target.nspid, target.user_name());
    for (k, v) in &reply.fields {
        if k != "files" {
            line.push_str(&format!(" {k}={v}"));
        }
    }
    if !files.is_empty() || reply.get("files").is_some() {
        let shown: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        line.push_str(&format!(" files={}", shown.join(",")));
    }
    for note in &reply.notes {
        eprintln!("kprof: agent: {note}");
    }
    println!("{line}");
}

/// The files of a reply as the caller can read them, copied to `copy_to` if given.
fn readable_files(
    prepared: &Prepared,
    reply: &control::Reply,
    copy_to: Option<&Path>,
) -> Result<Vec<PathBuf>, Failure> {
    let target = &prepared.target;
    let files = reply.files();
    let Some(dir) = copy_to else {
        let shares = target.shares_mounts();
        return Ok(files.iter().map(|f| target.readable_path(f, shares)).collect());
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    let contents = creds::run_as(prepared.act_as.as_ref(), || {
        files
            .iter()
            .map(|f| library::read_in_target(target, f).map(|bytes| (f.clone(), bytes)))
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(fail)?;
    let mut out: Vec<PathBuf> = Vec::new();
    for (inside, bytes) in contents {
        let base = Path::new(&inside)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "profile".into());
        let mut dest = dir.join(&base);
        let mut n = 1;
        while out.contains(&dest) {
            n += 1;
            dest = dir.join(format!("{n}-{base}"));
        }
        let written = kprof_profile::output::write_atomic(&dest, &bytes)
            .map_err(|e| fail(format!("cannot write {}: {e}", dest.display())))?;
        out.push(written);
    }
    Ok(out)
}

/// `kprof attach PID [OPTIONS]`: loads the agent into a running JVM (or, if it is loaded, starts a new
/// session) and prints its state.
pub fn attach_main(args: &[String]) -> i32 {
    finish(attach(args))
}

fn attach(args: &[String]) -> Result<(), Failure> {
    let a = parse_args(args, &["--lib", "--timeout"])?;
    let options = a.options.clone().unwrap_or_default();
    validate_options(&options)?;
    let (prepared, reply) = load_agent(a.pid, &options, a.lib.as_deref(), a.timeout.unwrap_or(DEFAULT_TIMEOUT))?;
    let files = readable_files(&prepared, &reply, None)?;
    print_reply(&prepared.target, &reply, &files);
    Ok(())
}

/// Opens a pidfd of `pid`. It comes before the checks: what /proc shows afterwards belongs to the process
/// behind it as long as that process is still alive after them (a recycled pid would leave the pidfd
/// reporting the exit).
pub(crate) fn open_pidfd(pid: u32) -> Result<OwnedFd, Failure> {
    sys::pidfd_open(pid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => fail(format!("no process with pid {pid}")),
        _ => fail(format!("cannot open pid {pid}: {e}")),
    })
}

/// Loads the agent with `options` (already validated) into the JVM `pid`, or, when the agent is loaded
/// already, has it start a new session with them; returns the target and the agent's status reply.
pub(crate) fn load_agent(
    pid: u32,
    options: &str,
    lib: Option<&str>,
    timeout: Duration,
) -> Result<(Prepared, control::Reply), Failure> {
    let lib = library::AgentLibrary::locate(lib).map_err(fail)?;
    let pidfd = open_pidfd(pid)?;
    let prepared = prepare(pid)?;
    let target = &prepared.target;
    let signal_safe = check_attachable(target, &pidfd)?;
    let (lib_path, reply) = creds::run_as(prepared.act_as.as_ref(), || {
        let lib_path = library::visible_path(target, &lib)?;
        let request = hotspot::request("load", &[&lib_path, "true", options])?;
        let stream = hotspot::connect(target, &pidfd, timeout, signal_safe.clone())?;
        let reply = hotspot::exchange(stream, &request, REPLY_TIMEOUT)?;
        Ok((lib_path, hotspot::parse_load_reply(&reply)))
    })
    .map_err(fail)?;
    match reply {
        hotspot::LoadReply::AgentReturned(0) => {}
        hotspot::LoadReply::AgentReturned(kprof_protocol::control::ATTACHED_BEFORE_LIVE) => {
            return Err(fail(not_live(pid)))
        }
        hotspot::LoadReply::AgentReturned(code) => {
            // A loaded agent that refused the session still serves its control socket: asked again there,
            // it answers with the reason, which otherwise only the target's standard error shows.
            if control::present(target).unwrap_or(false) {
                let line = format!("start {options}");
                let again = creds::run_as(prepared.act_as.as_ref(), || control::send(target, &line, REPLY_TIMEOUT));
                match again {
                    Err(reason) => return Err(fail(reason.trim_start_matches("kprof: ").to_string())),
                    Ok(reply) => return Ok((prepared, reply)),
                }
            }
            return Err(fail(format!(
                "the kprof agent in pid {pid} refused to start (Agent_OnAttach returned {code}); its message is on \
                 the target's standard error"
            )));
        }
        hotspot::LoadReply::NotLoaded(msg) => return Err(fail(not_loaded(pid, &lib_path, &msg))),
    }
    // The agent answers on its control socket once Agent_OnAttach has returned.
    let reply = creds::run_as(prepared.act_as.as_ref(), || control::send(target, "status", REPLY_TIMEOUT))
        .map_err(|e| fail(format!("the agent was loaded into pid {pid} but its status is unavailable: {e}")))?;
    Ok((prepared, reply))
}

/// Why the JVM `pid` did not load the agent: a JVM whose attach listener answers before it is live (its
/// startup not over) refuses agents then, which is a JVM still starting, to try again in a moment.
fn not_loaded(pid: u32, lib_path: &str, msg: &str) -> String {
    if msg.contains("only permitted in the live phase") {
        not_live(pid)
    } else {
        format!("pid {pid} did not load the agent {lib_path}: {msg}")
    }
}

/// The refusal of a JVM whose start-up is not over (it loads no agent yet): one to try again.
pub(crate) fn not_live(pid: u32) -> String {
    format!("pid {pid} is a JVM that is still starting (not yet live, so it loads no agent); try again in a moment")
}

/// `kprof start|stop|dump|status PID [...]`: one command to an agent already loaded.
pub fn control_main(command: &str, args: &[String]) -> i32 {
    finish(control_command(command, args))
}

fn control_command(command: &str, args: &[String]) -> Result<(), Failure> {
    let allowed: &[&str] = match command {
        "stop" | "dump" => &["--copy-to"],
        _ => &[],
    };
    let a = parse_args(args, allowed)?;
    let options = a.options.clone().unwrap_or_default();
    match command {
        "start" | "dump" => validate_options(&options)?,
        _ if !options.is_empty() => return Err(usage_error(format!("{command} takes no options, got '{options}'"))),
        _ => {}
    }
    if command == "start" && options.is_empty() {
        return Err(usage_error("start needs OPTIONS (e.g. mode=asgct,interval=1ms,file=/tmp/app.html)"));
    }
    let prepared = prepare(a.pid)?;
    let line = if options.is_empty() { command.to_string() } else { format!("{command} {options}") };
    let reply = creds::run_as(prepared.act_as.as_ref(), || control::send(&prepared.target, &line, REPLY_TIMEOUT))
        .map_err(|e| fail(format!("{command}: {e}")))?;
    match readable_files(&prepared, &reply, a.copy_to.as_deref()) {
        Ok(files) => print_reply(&prepared.target, &reply, &files),
        Err(copy_failed) => {
            // The command itself succeeded: say where the files are before reporting the failed copy.
            print_reply(&prepared.target, &reply, &readable_files(&prepared, &reply, None)?);
            return Err(copy_failed);
        }
    }
    Ok(())
}

/// `kprof list`: the JVMs this process can see.
pub fn list_main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return 0;
    }
    if let Some(a) = args.first() {
        return finish(Err(usage_error(format!("list takes no arguments, got '{a}'"))));
    }
    let jvms = match jvms() {
        Ok(j) => j,
        Err(e) => return finish(Err(e)),
    };
    println!("{:>8} {:>8}  {:<12} {:<6} {:<10} MAIN CLASS OR JAR, ARGUMENTS", "PID", "NSPID", "USER", "AGENT", "JAVA");
    for jvm in jvms {
        println!(
            "{:>8} {:>8}  {:<12} {:<6} {:<10} {}",
            jvm.target.pid,
            jvm.target.nspid,
            jvm.target.user_name(),
            jvm.agent,
            jvm.version,
            jvm.program
        );
    }
    0
}

/// A JVM this process can see.
pub(crate) struct Jvm {
    pub target: Target,
    /// Whether the kprof agent is loaded: `yes`, `-` or `?` (its socket cannot be looked at).
    pub agent: &'static str,
    pub version: String,
    /// The main class (or jar) and its arguments.
    pub program: String,
}

/// The JVMs this process can see (in any namespace), by pid, without kprof itself.
pub(crate) fn jvms() -> Result<Vec<Jvm>, Failure> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map_err(|e| fail(format!("cannot read /proc: {e}")))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let me = std::process::id();
    let mut out = Vec::new();
    for pid in pids.into_iter().filter(|&p| p != me) {
        // Processes come and go while the list is made: any read that fails skips the process.
        let Ok(target) = Target::read(pid) else { continue };
        if target.state == 'Z' || !looks_like_jvm(&target) {
            continue;
        }
        let perf = target.perfdata();
        let agent = match control::present(&target) {
            Ok(true) => "yes",
            Ok(false) => "-",
            Err(_) => "?",
        };
        let version = perf.as_ref().and_then(|p| p.java_version()).unwrap_or("?").to_string();
        let program = target.program(perf.as_ref());
        out.push(Jvm { target, agent, version, program });
    }
    Ok(out)
}

/// Whether a process is a HotSpot JVM: libjvm.so in its maps, or, when they are not readable (another
/// user's process), a counters file in its /tmp or a `java` executable.
fn looks_like_jvm(target: &Target) -> bool {
    match target.maps_libjvm() {
        Ok(found) => found,
        Err(_) => target.perfdata().is_some() || target.is_java_launcher(),
    }
}

#[cfg(test)]
mod tests {
    use super::not_loaded;

    #[test]
    fn a_jvm_not_yet_live_is_one_still_starting() {
        let early = not_loaded(7, "/x/libkprof.so", "Dynamic agent loading is only permitted in the live phase");
        assert!(early.contains("still starting"), "{early}");
        let other = not_loaded(7, "/x/libkprof.so", "agent library failed Agent_OnLoad");
        assert_eq!(other, "pid 7 did not load the agent /x/libkprof.so: agent library failed Agent_OnLoad");
    }
}
