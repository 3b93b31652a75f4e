//! The client of the agent's control channel: a Unix stream socket at `/tmp/.kprof-<uid>/<nspid>.sock`
//! inside the target's mount namespace (uid: the target's effective uid in its own user namespace; nspid:
//! its pid in its own PID namespace; see [`connect`] for the other names the socket may have). One request per connection: the line `COMMAND[ OPTIONS]\n`, then the client shuts its
//! write half and reads to the end. The reply's last line is `ok[ key=value ...]` or `error <message>`.

use super::inside::TargetFs;
use super::sys;
use super::target::Target;
use kprof_protocol::control as agent;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The control socket of the agent in a process of `uid` with pid `nspid` in its own namespace, as a path of
/// that process's namespace (the agent's own definition).
pub fn socket_path(uid: u32, nspid: u32) -> String {
    kprof_protocol::control::socket_path(uid, nspid).to_string_lossy().into_owned()
}

pub use kprof_protocol::control::{parse_reply, Reply};

/// How long a connect may wait for a listener whose queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Connects to the control socket of the agent in `target`. The agent binds `<nspid>.sock` in the directory
/// of its uid (as the target sees its uid: see [`Target::ns_uid`]), or, when a live agent of another JVM
/// with the same pid in its own namespace holds that name (JVMs in different PID namespaces sharing one
/// /tmp), `<nspid>.<k>.sock`: each candidate is a socket of the target's user, and the one whose listener
/// is the target itself (`SO_PEERCRED`, in this PID namespace) is the target's. Run as the target's user
/// or root.
pub fn connect(target: &Target) -> Result<UnixStream, String> {
    let inside = socket_path(target.ns_uid, target.nspid);
    let fs = TargetFs::open(target)?;
    let dir = agent::socket_dir(target.ns_uid).to_string_lossy().into_owned();
    let mut names = vec![agent::socket_name(target.nspid, 1)];
    if let Ok(all) = fs.names(&dir) {
        let mut others: Vec<(u32, String)> = all
            .into_iter()
            .filter_map(|n| {
                let k = n.strip_prefix(&format!("{}.", target.nspid))?.strip_suffix(".sock")?.parse().ok()?;
                (k > 1).then_some((k, n))
            })
            .collect();
        others.sort();
        names.extend(others.into_iter().map(|(_, n)| n));
    }
    let mut others = Vec::new();
    let mut first_error = None;
    for name in names {
        let path = format!("{dir}/{name}");
        match fs.connect(&path, target.creds.uid, CONNECT_TIMEOUT) {
            Ok(stream) => match sys::peer_pid(&stream) {
                Some(pid) if pid == target.pid => return Ok(stream),
                pid => others.push(format!("{path} is pid {}'s", pid.unwrap_or(0))),
            },
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some((path, e));
                }
            }
        }
    }
    if !others.is_empty() {
        return Err(format!(
            "no kprof agent in pid {} (the agent sockets in its /tmp belong to other processes with its pid in \
             their namespaces: {}); load one with `kprof attach`",
            target.pid,
            others.join(", ")
        ));
    }
    Err(match first_error {
        Some((_, e)) if e.kind() == io::ErrorKind::NotFound => {
            format!("no kprof agent in pid {} (no {inside} in its namespace); load one with `kprof attach`", target.pid)
        }
        // Nothing listens on the file: a live agent's full queue makes a connect wait, never refuse. The
        // file is left by an exited process that had this pid (containers reuse pids); an agent loaded
        // later replaces it.
        Some((path, e)) if e.kind() == io::ErrorKind::ConnectionRefused => format!(
            "no kprof agent in pid {} ({path} is a stale socket: nothing listens on it, an exited process with \
             the same pid left it); load one with `kprof attach`",
            target.pid
        ),
        Some((path, e)) if e.kind() == io::ErrorKind::PermissionDenied => {
            format!("{path} in pid {} is not the agent's socket ({e})", target.pid)
        }
        Some((path, e)) => format!("cannot connect to the agent of pid {} ({path}): {e}", target.pid),
        None => format!("no kprof agent in pid {} (no {inside} in its namespace)", target.pid),
    })
}

/// Whether an agent of `target` answers on a control socket (a connection is made and closed at once).
pub fn present(target: &Target) -> io::Result<bool> {
    TargetFs::open(target).map_err(io::Error::other)?;
    Ok(connect(target).is_ok())
}

/// Sends `line` (a command and its options, without the newline) to the agent in `target` and returns its
/// reply. Run as the target's user or root.
pub fn send(target: &Target, line: &str, timeout: Duration) -> Result<Reply, String> {
    let mut stream = connect(target)?;
    stream.set_read_timeout(Some(timeout)).and_then(|_| stream.set_write_timeout(Some(timeout))).ok();
    stream
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|_| stream.shutdown(Shutdown::Write))
        .map_err(|e| format!("cannot send to the agent of pid {}: {e}", target.pid))?;
    // A reply is one short line and a few notes: more than this is no agent's.
    let mut reply = Vec::new();
    stream.take(REPLY_CAP).read_to_end(&mut reply).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("no reply from the agent of pid {} within {:.0} s", target.pid, timeout.as_secs_f64())
        }
        _ => format!("cannot read the agent's reply: {e}"),
    })?;
    parse_reply(&String::from_utf8_lossy(&reply))
}

/// The most bytes of a reply kprof reads.
const REPLY_CAP: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_path_is_per_user_and_namespace_pid() {
        assert_eq!(socket_path(1000, 1), "/tmp/.kprof-1000/1.sock");
    }
}
