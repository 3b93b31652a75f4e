//! `kprof profile [-d DURATION] [-e EVENTS] [-i INTERVAL] [-f FILE]... PID|NAME`: one command that finds
//! a running JVM, loads the agent (or, when it is loaded, starts a session), profiles for the duration or
//! until Ctrl-C, stops, and leaves the files where the caller asked for them.
//!
//! The agent writes into the private directory of the target's user inside the target's own namespace
//! (`/tmp/.kprof-<uid>`, which only that user can enter), where a target in a container can always write;
//! kprof then copies each file to the path the caller gave (relative to the caller's working directory)
//! and removes it there.

mod args;
mod find;

use crate::attach::{self, control, creds, library, sys, Failure, Prepared};
pub use args::USAGE;
use args::{agent_options, bad, extension, parse_args, Args, REPLY_TIMEOUT};
use find::{find_jvm, wait_until_started};
use kprof_profile::output::{write_atomic, Format};
use kprof_protocol::options::Options;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// SIGINT and SIGTERM: the first ends the profile early (the files are still written); a second one
/// ends kprof at once.
extern "C" fn on_interrupt(_signal: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        sys::exit_now(130);
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
        // A JVM without counters is attached as soon as it catches SIGQUIT, which can be before it is live
        // (it loads no agent then): tried again until the timeout, as `wait_until_started` waits.
        let deadline = Instant::now() + a.timeout;
        loop {
            match attach::load_agent(pid, options, a.lib.as_deref(), a.timeout) {
                Err(f) if f.message == attach::not_live(pid) && Instant::now() < deadline => {
                    if INTERRUPTED.load(Ordering::SeqCst) {
                        return Err(f);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                result => {
                    result?;
                    break;
                }
            }
        }
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
