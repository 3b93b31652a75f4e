//! The control socket: how `kprof start|stop|dump|status PID` talk to a loaded agent.
//!
//! A Unix stream socket at `/tmp/.kprof-<uid>/<pid>.sock` inside the JVM's own mount namespace (uid is
//! the JVM's effective uid, pid its pid in its own PID namespace), or `<pid>.<k>.sock` when another live
//! JVM with the same pid in its namespace shares the directory ([`ControlSocket::bind`]). The directory is created 0700 and
//! checked (a directory, not a symlink, owned by us, no group or other access) before use, so nobody
//! else can plant or reach the socket; the peer's credentials are checked again on every connection
//! (`SO_PEERCRED`: our uid or root).
//!
//! Protocol: the client writes one line, `COMMAND[ OPTIONS]`, and reads until end of stream. The
//! reply's last line is `ok[ key=value ...]` or `error MESSAGE`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `Agent_OnAttach` returns when the JVM is not live yet (its start-up not over: JDK 17 loads an
/// agent then, but gives it no JVMTI environment): `kprof attach` reports a JVM still starting, to try
/// again. JNI's own code for "not attached yet".
pub const ATTACHED_BEFORE_LIVE: i32 = -2;

/// The directory of the control sockets of user `uid`.
pub fn socket_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/.kprof-{uid}"))
}

/// The control socket of the JVM with pid `nspid` (in its own namespace) run by `uid`.
pub fn socket_path(uid: u32, nspid: u32) -> PathBuf {
    socket_dir(uid).join(socket_name(nspid, 1))
}

/// The `k`-th name a JVM with pid `nspid` tries for its socket: `<nspid>.sock`, then `<nspid>.<k>.sock`
/// while the names before are live sockets of other JVMs with the same pid in their own PID namespaces
/// (containers sharing one /tmp). `kprof` tells them apart by the pid of the process listening.
pub fn socket_name(nspid: u32, k: u32) -> String {
    if k <= 1 {
        format!("{nspid}.sock")
    } else {
        format!("{nspid}.{k}.sock")
    }
}

/// How many names [`socket_name`] gives a JVM.
pub const SOCKET_NAMES: u32 = 64;

/// Creates `dir` (mode 0700) or checks that the existing one is a real directory owned by `uid` that
/// only its owner can use.
pub fn private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(format!("{} is not a directory (a symlink?); refusing to use it", dir.display()));
    }
    if meta.uid() != uid {
        return Err(format!("{} belongs to uid {}, not {uid}; refusing to use it", dir.display(), meta.uid()));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{} is open to other users (mode {:o}); refusing to use it",
            dir.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    Ok(())
}

/// The listening control socket; the file is removed on drop.
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

impl ControlSocket {
    /// Binds the socket of this process: the first of its names ([`socket_name`]) that is free or holds
    /// a stale socket (nothing listens: an earlier process with the same pid, as containers reuse pids),
    /// never one on which another process listens. The choice is made under a lock on the directory's
    /// `.lock` file, so two JVMs starting together cannot both take one name.
    pub fn bind() -> Result<ControlSocket, String> {
        let uid = euid();
        let dir = socket_dir(uid);
        private_dir(&dir, uid)?;
        let _lock = DirLock::take(&dir);
        let pid = std::process::id();
        for k in 1..=SOCKET_NAMES {
            let path = dir.join(socket_name(pid, k));
            match UnixListener::bind(&path) {
                Ok(listener) => return ControlSocket::listening(listener, path),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
                Err(e) => return Err(format!("cannot bind {}: {e}", path.display())),
            }
            let is_socket = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket());
            if is_socket && !someone_listens(&path) {
                let _ = std::fs::remove_file(&path);
                match UnixListener::bind(&path) {
                    Ok(listener) => return ControlSocket::listening(listener, path),
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
                    Err(e) => return Err(format!("cannot bind {}: {e}", path.display())),
                }
            }
        }
        Err(format!("{} has {SOCKET_NAMES} live sockets of other processes with pid {pid}", dir.display()))
    }

    fn listening(listener: UnixListener, path: PathBuf) -> Result<ControlSocket, String> {
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(ControlSocket { listener, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits up to `timeout` for a connection.
    pub fn accept(&self, timeout: Duration) -> Option<UnixStream> {
        let mut pfd = libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for a descriptor we own.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n <= 0 {
            return None;
        }
        let (stream, _) = self.listener.accept().ok()?;
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
        Some(stream)
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether a process listens on the socket at `path`: a connection that is not refused. Non-blocking, so a
/// listener whose queue is full (it counts as one) cannot hold the JVM's thread.
fn someone_listens(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: an all-zero sockaddr_un is valid; the path is copied in below within its bounds.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return true;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    // SAFETY: integer arguments only.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return true;
    }
    // SAFETY: `fd` is a socket we own (closed below) and `addr` a sockaddr_un of the size passed.
    let rc = unsafe {
        libc::connect(
            fd,
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    let refused = rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECONNREFUSED);
    // SAFETY: closes the socket opened above, which nothing else uses.
    unsafe { libc::close(fd) };
    !refused
}

/// An exclusive `flock` on `<dir>/.lock`, released when dropped. Taken without blocking, retried for up
/// to a second: a process of the same user that holds it longer cannot stall the JVM; past that the socket
/// is chosen without the lock.
struct DirLock(Option<std::fs::File>);

impl DirLock {
    fn take(dir: &Path) -> DirLock {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(".lock"));
        let Ok(file) = file else { return DirLock(None) };
        for _ in 0..100 {
            // SAFETY: flock on a descriptor we own, with integer flags.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return DirLock(Some(file));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        DirLock(None)
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            // SAFETY: unlocks a descriptor we own (closing it would too; said explicitly).
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

/// The uid of the process at the other end of `stream`.
pub fn peer_uid(stream: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the size we pass.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0).then_some(cred.uid)
}

/// A parsed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Start(String),
    Stop,
    Dump(String),
    Status,
}

/// Reads the request line of a connection, checking who sent it.
pub fn read_request(stream: &UnixStream) -> Result<Request, String> {
    match peer_uid(stream) {
        Some(uid) if uid == euid() || uid == 0 => {}
        Some(uid) => return Err(format!("permission denied: uid {uid} may not control this JVM")),
        None => return Err("permission denied: unknown peer".into()),
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(|e| format!("reading the request: {e}"))?;
    parse_request(line.trim_end_matches(['\n', '\r']))
}

/// Parses `COMMAND[ OPTIONS]`.
pub fn parse_request(line: &str) -> Result<Request, String> {
    let (cmd, rest) = line.split_once(' ').unwrap_or((line, ""));
    let rest = rest.trim().to_string();
    match cmd {
        "start" => Ok(Request::Start(rest)),
        "stop" if rest.is_empty() => Ok(Request::Stop),
        "dump" => Ok(Request::Dump(rest)),
        "status" if rest.is_empty() => Ok(Request::Status),
        "stop" | "status" => Err(format!("'{cmd}' takes no options")),
        _ => Err(format!("unknown command '{cmd}' (accepted: start, stop, dump, status)")),
    }
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

/// Writes the reply (`Ok(text)`: its lines then `ok ...` from the last line; `Err`: `error MESSAGE`).
pub fn reply(mut stream: &UnixStream, result: Result<String, String>) {
    let text = match result {
        Ok(s) if s.starts_with("ok") => format!("{s}\n"),
        Ok(s) => format!("ok {s}\n"),
        Err(e) => format!("error {}\n", e.replace('\n', " ")),
    };
    let _ = stream.write_all(text.as_bytes());
    let _ = stream.flush();
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
    fn requests_parse() {
        assert_eq!(parse_request("status"), Ok(Request::Status));
        assert_eq!(parse_request("stop"), Ok(Request::Stop));
        assert_eq!(parse_request("dump"), Ok(Request::Dump(String::new())));
        assert_eq!(parse_request("dump file=/tmp/x.json"), Ok(Request::Dump("file=/tmp/x.json".into())));
        assert_eq!(
            parse_request("start interval=1ms,file=/tmp/a.html"),
            Ok(Request::Start("interval=1ms,file=/tmp/a.html".into()))
        );
        assert!(parse_request("stop now").is_err());
        assert!(parse_request("reboot").unwrap_err().contains("unknown command 'reboot'"));
    }

    #[test]
    fn a_live_socket_of_another_process_is_kept_and_a_stale_one_replaced() {
        let (uid, pid) = (euid(), std::process::id());
        private_dir(&socket_dir(uid), uid).unwrap();
        let first = socket_path(uid, pid);
        let _ = std::fs::remove_file(&first);
        // Another JVM with this pid in its own namespace, sharing the directory, listens on the first name.
        let other = UnixListener::bind(&first).unwrap();
        let mine = ControlSocket::bind().unwrap();
        assert_eq!(mine.path(), socket_dir(uid).join(socket_name(pid, 2)));
        assert!(UnixStream::connect(&first).is_ok(), "the other process's socket was taken over");
        drop(mine);
        // It exits without removing its socket: a stale file, reused.
        drop(other);
        assert!(first.exists());
        let again = ControlSocket::bind().unwrap();
        assert_eq!(again.path(), first);
        drop(again);
        assert!(!first.exists());
    }

    #[test]
    fn private_dir_refuses_a_directory_others_can_use() {
        let dir = std::env::temp_dir().join(format!("kprof-ctl-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        private_dir(&dir, euid()).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(private_dir(&dir, euid()).unwrap_err().contains("open to other users"));
        std::fs::remove_dir_all(&dir).unwrap();
        let link = std::env::temp_dir().join(format!("kprof-ctl-link-{}", std::process::id()));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/", &link).unwrap();
        assert!(private_dir(&link, euid()).unwrap_err().contains("not a directory"));
        std::fs::remove_file(&link).unwrap();
    }
}
