//! HotSpot's dynamic attach on Linux, protocol 1, as the JDK's own tools speak it.
//!
//! The JVM starts its attach listener when it gets SIGQUIT and finds a file `.attach_pid<pid>` (its own
//! pid, in its namespace) owned by its user or root, in its working directory or in /tmp. The listener
//! creates the Unix socket `/tmp/.java_pid<pid>`, accepts only peers with the JVM's uid and gid or root,
//! and reads one request: `1\0<command>\0<arg1>\0<arg2>\0<arg3>\0` (each argument at most 1024 bytes).
//! The reply is the command's status on the first line, then its output, then the socket closes.
//!
//! For `load <lib> true <options>` (an absolute library path) the reply, measured on JDK 17.0.21 and 25.0.3:
//!
//! | case | JDK 17 | JDK 25 |
//! |---|---|---|
//! | loaded, Agent_OnAttach returned N | `0\nreturn code: N\n` | `0\nreturn code: N\n` |
//! | library not loadable | `-1\n<lib> was not loaded.\n<dlerror>\n` | `0\n<lib> was not loaded.\n<dlerror>\n` |
//!
//! JDK 17 builds before the "return code:" prefix was backported print the bare number on the second line.

use super::inside::TargetFs;
use super::sys;
use super::target::{SigquitDisposition, Target};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// HotSpot's limit on the length of one request argument.
pub const ARG_MAX: usize = 1024;

/// The outcome of a `load` request.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum LoadReply {
    /// The library was loaded and `Agent_OnAttach` returned this code (0 = success).
    AgentReturned(i32),
    /// The JVM could not load the library or refused the request: its message, on one line.
    NotLoaded(String),
}

/// Reads the reply to a `load` request.
pub fn parse_load_reply(reply: &[u8]) -> LoadReply {
    let text = String::from_utf8_lossy(reply);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let status = lines.next().and_then(|l| l.parse::<i32>().ok());
    let rest: Vec<&str> = lines.collect();
    let code = rest.first().and_then(|l| l.strip_prefix("return code:").unwrap_or(l).trim().parse::<i32>().ok());
    match (status, code) {
        (Some(0), Some(code)) if rest.len() == 1 => LoadReply::AgentReturned(code),
        (None, _) => LoadReply::NotLoaded(format!("unexpected reply from the JVM: {:?}", text.trim())),
        _ if rest.is_empty() => {
            LoadReply::NotLoaded(format!("the JVM answered status {} without a message", status.unwrap()))
        }
        _ if rest.len() == 1 => LoadReply::NotLoaded(rest[0].to_string()),
        _ => LoadReply::NotLoaded(format!("{} ({})", rest[0], rest[1..].join("; "))),
    }
}

/// The message for an attach argument past [`ARG_MAX`]: its start (whole characters) and its length.
pub fn too_long(arg: &str) -> String {
    let shown: String = arg.chars().take(40).collect();
    format!("'{shown}…' is {} bytes long, more than the {ARG_MAX} bytes HotSpot accepts", arg.len())
}

/// The request bytes of `command` with up to three arguments.
pub fn request(command: &str, args: &[&str]) -> Result<Vec<u8>, String> {
    let mut out = b"1\0".to_vec();
    out.extend_from_slice(command.as_bytes());
    out.push(0);
    for i in 0..3 {
        let arg = args.get(i).copied().unwrap_or("");
        if arg.len() > ARG_MAX {
            return Err(too_long(arg));
        }
        if arg.contains('\0') {
            return Err("an attach argument contains a NUL byte".into());
        }
        out.extend_from_slice(arg.as_bytes());
        out.push(0);
    }
    Ok(out)
}

/// The listener socket of `target`, as a path of its namespace.
pub fn socket_inside(target: &Target) -> String {
    format!("/tmp/.java_pid{}", target.nspid)
}

/// How long a connect may wait for a listener whose queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long kprof waits for the listener socket before it signals once more (at most half the timeout).
/// A SIGQUIT in a JVM's first milliseconds can start a listener whose socket the VM then removes as a
/// stale one of an earlier process, as it starts; a second SIGQUIT makes HotSpot, seeing its socket gone,
/// start the listener again (with the socket there it would print a thread dump: see [`connect`]).
const SIGNAL_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// Whether a listener socket of the target's user is there (no connection made).
pub fn listener_present(target: &Target) -> bool {
    TargetFs::open(target).is_ok_and(|fs| fs.is_socket_of(&socket_inside(target), target.creds.uid).unwrap_or(false))
}

/// Connects to the listener socket if one is up, owned by the target's user (a socket of another owner is
/// not the JVM's: never send it anything) and listened on by the target itself: JVMs in different PID
/// namespaces sharing one /tmp can have the same pid there, and so the same socket name.
fn try_connect(target: &Target, fs: &TargetFs) -> io::Result<UnixStream> {
    let stream = fs.connect(&socket_inside(target), target.creds.uid, CONNECT_TIMEOUT)?;
    match sys::peer_pid(&stream) {
        Some(pid) if pid == target.pid => Ok(stream),
        pid => Err(io::Error::other(format!(
            "it is the listener of another process ({})",
            pid.filter(|&p| p != 0).map_or("not visible here".to_string(), |p| format!("pid {p}"))
        ))),
    }
}

/// A trigger file kprof created (its directory and name), removed when dropped.
struct Trigger(Option<(OwnedFd, String)>);

impl Drop for Trigger {
    fn drop(&mut self) {
        if let Some((dir, name)) = self.0.take() {
            let _ = sys::unlinkat(&dir, &name);
        }
    }
}

/// Creates `.attach_pid<nspid>` in the target's working directory, else in its /tmp (both reached inside
/// the target, see [`TargetFs`]); never follows a symbolic link. An existing trigger of the target's user is
/// used as it is (and left in place).
fn create_trigger(target: &Target, fs: &TargetFs) -> Result<Trigger, String> {
    let name = format!(".attach_pid{}", target.nspid);
    let mut errors = Vec::new();
    let tmp = fs.dir("/tmp");
    let dirs = [("its working directory", fs.cwd().map(|d| d.try_clone()).transpose()), ("/tmp", tmp.map(Some))];
    for (shown, dir) in dirs {
        let dir = match dir {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                errors.push(format!("{shown}: {e}"));
                continue;
            }
        };
        match sys::openat_nofollow(&dir, &name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600) {
            Ok(_) => return Ok(Trigger(Some((dir, name)))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let existing = sys::openat_nofollow(&dir, &name, libc::O_PATH, 0).and_then(|fd| sys::fstat(&fd));
                match existing {
                    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_uid == target.creds.uid => {
                        return Ok(Trigger(None))
                    }
                    _ => errors.push(format!("{shown}/{name}: exists and is not a file of uid {}", target.creds.uid)),
                }
            }
            Err(e) => errors.push(format!("{shown}/{name}: {e}")),
        }
    }
    Err(format!("cannot create the attach trigger file ({})", errors.join("; ")))
}

/// Sends SIGQUIT through the pidfd (never to a process that took the pid over since).
fn send_sigquit(target: &Target, pidfd: &OwnedFd) -> Result<(), String> {
    sys::pidfd_send_signal(pidfd, libc::SIGQUIT).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => format!("pid {} exited", target.pid),
        _ => format!("cannot signal pid {}: {e}", target.pid),
    })
}

/// Connects to the target's attach listener, starting it first if needed (trigger file and SIGQUIT through
/// `pidfd`). `signal_safe` is the caller's verdict on whether the target may get SIGQUIT (a JVM that
/// handles it and accepts attach): when it is an error, only a listener already up is used.
pub fn connect(
    target: &Target,
    pidfd: &OwnedFd,
    timeout: Duration,
    signal_safe: Result<(), String>,
) -> Result<UnixStream, String> {
    let fs = TargetFs::open(target)?;
    let first_error = match try_connect(target, &fs) {
        Ok(stream) => return Ok(stream),
        Err(e) => e,
    };
    if let Err(refusal) = signal_safe {
        return Err(match first_error.kind() {
            io::ErrorKind::NotFound => refusal,
            _ => format!("{refusal} ({}: {first_error})", socket_inside(target)),
        });
    }
    let trigger = create_trigger(target, &fs)?;
    send_sigquit(target, pidfd)?;
    let start = Instant::now();
    let mut signalled_again = false;
    loop {
        let last_error = match try_connect(target, &fs) {
            Ok(stream) => {
                drop(trigger);
                return Ok(stream);
            }
            Err(e) => e,
        };
        if sys::pidfd_exited(pidfd) {
            return Err(format!("pid {} exited while kprof was attaching", target.pid));
        }
        // Once, and only while there is no socket at all: a JVM whose listener is up with its socket in
        // place takes SIGQUIT for a thread dump. (The pidfd says the process is alive, so /proc/PID is
        // still it.)
        if !signalled_again
            && start.elapsed() >= SIGNAL_AGAIN_AFTER.min(timeout / 2)
            && last_error.kind() == io::ErrorKind::NotFound
            && Target::read(target.pid).is_ok_and(|now| now.sigquit == SigquitDisposition::Caught)
        {
            signalled_again = true;
            // The socket may have appeared since the check above: look once more, just before the signal.
            if let Ok(stream) = try_connect(target, &fs) {
                drop(trigger);
                return Ok(stream);
            }
            send_sigquit(target, pidfd)?;
        }
        if start.elapsed() >= timeout {
            return Err(format!(
                "the JVM did not start its attach listener within {:.1} s ({} in its namespace: {last_error}); it \
                 may run with -XX:+DisableAttachMechanism or be too busy",
                timeout.as_secs_f64(),
                socket_inside(target)
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends one request on `stream` and reads the whole reply (the JVM closes the socket after it).
pub fn exchange(mut stream: UnixStream, request: &[u8], timeout: Duration) -> Result<Vec<u8>, String> {
    stream.set_read_timeout(Some(timeout)).and_then(|_| stream.set_write_timeout(Some(timeout))).ok();
    stream.write_all(request).map_err(|e| format!("cannot send the attach request: {e}"))?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("no complete reply from the JVM within {:.0} s", timeout.as_secs_f64())
        }
        _ => format!("cannot read the JVM's reply: {e}"),
    })?;
    if reply.is_empty() {
        return Err("the JVM closed the attach connection without replying (it checks that the peer runs as \
                    its own uid and gid, or root)"
            .into());
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_replies_of_jdk_17_and_25() {
        assert_eq!(parse_load_reply(b"0\nreturn code: 0\n"), LoadReply::AgentReturned(0));
        assert_eq!(parse_load_reply(b"0\nreturn code: 7\n"), LoadReply::AgentReturned(7));
        assert_eq!(parse_load_reply(b"0\n-1\n"), LoadReply::AgentReturned(-1), "bare number of older JDK 17");
        let missing = b"-1\n/x/lib.so was not loaded.\n/x/lib.so: cannot open shared object file: No such file\n";
        assert_eq!(
            parse_load_reply(missing),
            LoadReply::NotLoaded(
                "/x/lib.so was not loaded. (/x/lib.so: cannot open shared object file: No such file)".into()
            )
        );
        let jdk25 = b"0\n/x/lib.so was not loaded.\n/x/lib.so: cannot open shared object file\n";
        assert!(matches!(parse_load_reply(jdk25), LoadReply::NotLoaded(m) if m.contains("was not loaded")));
        assert!(
            matches!(parse_load_reply(b"-1\nOperation bogus not recognized!"), LoadReply::NotLoaded(m) if m.contains("bogus"))
        );
        assert!(matches!(parse_load_reply(b""), LoadReply::NotLoaded(_)));
        assert!(matches!(parse_load_reply(b"-1\n"), LoadReply::NotLoaded(_)));
    }

    #[test]
    fn requests_have_three_arguments_and_a_length_limit() {
        assert_eq!(request("load", &["/l.so", "true", "a=b"]).unwrap(), b"1\0load\0/l.so\0true\0a=b\0");
        assert_eq!(request("properties", &[]).unwrap(), b"1\0properties\0\0\0\0");
        assert!(request("load", &["/l.so", "true", &"x".repeat(ARG_MAX + 1)]).is_err());
        // Cut at 40 characters, not 40 bytes (which would fall inside a character here).
        let accented = format!("file=/tmp/{}.html", "é".repeat(600));
        let e = request("load", &["/l.so", "true", &accented]).unwrap_err();
        assert!(e.starts_with("'file=/tmp/ééé") && e.contains("1215 bytes long"), "{e}");
    }
}
