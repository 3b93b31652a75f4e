//! The client of the agent's control channel: a Unix stream socket at `/tmp/.kprof-<uid>/<nspid>.sock`
//! inside the target's mount namespace (uid: the target's effective uid; nspid: its pid in its own PID
//! namespace). One request per connection: the line `COMMAND[ OPTIONS]\n`, then the client shuts its
//! write half and reads to the end. The reply's last line is `ok[ key=value ...]` or `error <message>`.

use super::target::Target;
use std::fs;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The control socket of the agent in a process of `uid` with pid `nspid` in its own namespace, as a path of
/// that process's namespace (the agent's own definition).
pub fn socket_path(uid: u32, nspid: u32) -> String {
    kprof_protocol::control::socket_path(uid, nspid).to_string_lossy().into_owned()
}

/// A successful reply: the `key=value` pairs of its `ok` line, in order, and any lines before it.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Reply {
    pub fields: Vec<(String, String)>,
    pub notes: Vec<String>,
}

impl Reply {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The `files=` list (comma-separated paths inside the target's namespace).
    pub fn files(&self) -> Vec<String> {
        self.get("files")
            .map(|f| f.split(',').filter(|p| !p.is_empty()).map(str::to_string).collect())
            .unwrap_or_default()
    }
}

/// Parses a reply. Err: the agent's `error` message, or a description of a malformed reply.
pub fn parse_reply(text: &str) -> Result<Reply, String> {
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines.pop().ok_or("the agent closed the connection without replying")?;
    let notes = lines.iter().map(|l| l.to_string()).collect();
    if let Some(msg) = last.strip_prefix("error") {
        return Err(msg.trim().to_string());
    }
    let rest = last.strip_prefix("ok").ok_or_else(|| format!("unexpected reply from the agent: {last:?}"))?;
    if !rest.is_empty() && !rest.starts_with(' ') {
        return Err(format!("unexpected reply from the agent: {last:?}"));
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    for token in rest.split(' ').filter(|t| !t.is_empty()) {
        match token.split_once('=') {
            Some((k, v)) => fields.push((k.to_string(), v.to_string())),
            // A value with a space in it (a file name): the word belongs to the previous value.
            None => match fields.last_mut() {
                Some((_, v)) => {
                    v.push(' ');
                    v.push_str(token);
                }
                None => return Err(format!("unexpected reply from the agent: {last:?}")),
            },
        }
    }
    Ok(Reply { fields, notes })
}

/// Whether an agent's control socket exists in `target` (without connecting).
pub fn present(target: &Target) -> io::Result<bool> {
    match fs::symlink_metadata(target.in_root(&socket_path(target.creds.uid, target.nspid))) {
        Ok(m) => Ok(m.file_type().is_socket()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sends `line` (a command and its options, without the newline) to the agent in `target` and returns its
/// reply. Run as the target's user or root.
pub fn send(target: &Target, line: &str, timeout: Duration) -> Result<Reply, String> {
    let inside = socket_path(target.creds.uid, target.nspid);
    let path = target.in_root(&inside);
    let meta = fs::symlink_metadata(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => {
            format!("no kprof agent in pid {} (no {inside} in its namespace); load one with `kprof attach`", target.pid)
        }
        _ => format!("cannot reach the agent's socket {}: {e}", path.display()),
    })?;
    if !meta.file_type().is_socket() || meta.uid() != target.creds.uid {
        return Err(format!(
            "{inside} in pid {} is not the agent's socket (not a socket of uid {})",
            target.pid, target.creds.uid
        ));
    }
    let mut stream = UnixStream::connect(&path).map_err(|e| match e.kind() {
        io::ErrorKind::ConnectionRefused => {
            format!(
                "the kprof agent of pid {} does not answer on {inside} (a stale socket of an exited JVM?)",
                target.pid
            )
        }
        _ => format!("cannot connect to the agent of pid {}: {e}", target.pid),
    })?;
    stream.set_read_timeout(Some(timeout)).and_then(|_| stream.set_write_timeout(Some(timeout))).ok();
    stream
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|_| stream.shutdown(Shutdown::Write))
        .map_err(|e| format!("cannot send to the agent of pid {}: {e}", target.pid))?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("no reply from the agent of pid {} within {:.0} s", target.pid, timeout.as_secs_f64())
        }
        _ => format!("cannot read the agent's reply: {e}"),
    })?;
    parse_reply(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_into_fields_and_errors() {
        let r = parse_reply(
            "ok state=running mode=asgct timer=perf interval=1ms samples=12 files=/tmp/a.html,/tmp/b.json\n",
        )
        .unwrap();
        assert_eq!(r.get("state"), Some("running"));
        assert_eq!(r.get("samples"), Some("12"));
        assert_eq!(r.files(), vec!["/tmp/a.html", "/tmp/b.json"]);
        assert_eq!(parse_reply("ok\n").unwrap(), Reply::default());
        let noted = parse_reply("kprof: wrote 2 files\nok files=/x/my profile.html state=stopped").unwrap();
        assert_eq!(noted.notes, vec!["kprof: wrote 2 files"]);
        assert_eq!(noted.files(), vec!["/x/my profile.html"]);
        assert_eq!(parse_reply("error interval: '0ms' is below 10us\n").unwrap_err(), "interval: '0ms' is below 10us");
        assert!(parse_reply("").is_err());
        assert!(parse_reply("okay").is_err());
        assert!(parse_reply("hello").is_err());
    }

    #[test]
    fn the_socket_path_is_per_user_and_namespace_pid() {
        assert_eq!(socket_path(1000, 1), "/tmp/.kprof-1000/1.sock");
    }
}
