//! The target's files as the target sees them. `/proc/PID/root/<path>` looked up the ordinary way resolves
//! an absolute symbolic link in the target's filesystem against kprof's own root: a container could point
//! kprof (often root) at any file or socket of the host. Here every path starts from a descriptor of the
//! target's root (or working directory) and is resolved by `openat2` inside it, so links lead where they
//! would lead the target and nowhere else; what is read must be a regular file, is opened without blocking
//! (a FIFO would wait for a writer) and is read up to a bound; sockets are connected through the descriptor
//! of the socket file itself, never through a path looked up again.

use super::sys;
use super::target::Target;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The target's root and working directory, opened through /proc.
pub struct TargetFs {
    root: OwnedFd,
    cwd: Option<OwnedFd>,
}

/// A regular file read from the target.
pub struct Contents {
    pub bytes: Vec<u8>,
    /// Its owner, as this process sees uids.
    pub uid: u32,
}

fn file_type(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

impl TargetFs {
    /// Opens `/proc/PID/root` and `/proc/PID/cwd` (the working directory may be unreachable: relative
    /// paths then fail).
    pub fn open(target: &Target) -> Result<TargetFs, String> {
        let root = sys::open_proc_dir(&target.root_dir())
            .map_err(|e| format!("cannot open {}: {e}", target.root_dir().display()))?;
        let cwd = sys::open_proc_dir(&target.cwd_dir()).ok();
        Ok(TargetFs { root, cwd })
    }

    /// The target's working directory (an `O_PATH` descriptor).
    pub fn cwd(&self) -> Option<&OwnedFd> {
        self.cwd.as_ref()
    }

    /// Opens `path` of the target's namespace: an absolute path inside its root; a relative one from its
    /// working directory, beneath it (a link or `..` out of it is refused: where it would lead cannot be
    /// told from here without the target's view of its working directory).
    pub fn open_path(&self, path: &str, flags: i32) -> io::Result<OwnedFd> {
        match path.strip_prefix('/') {
            Some(inside) => sys::openat2(&self.root, inside.trim_start_matches('/'), flags, sys::RESOLVE_INSIDE),
            None => match &self.cwd {
                Some(cwd) => sys::openat2(cwd, path, flags, sys::RESOLVE_UNDER),
                None => Err(io::Error::from(io::ErrorKind::NotFound)),
            },
        }
    }

    /// A directory of the target (`O_PATH`).
    pub fn dir(&self, path: &str) -> io::Result<OwnedFd> {
        self.open_path(path, libc::O_PATH | libc::O_DIRECTORY)
    }

    /// Reads the regular file at `path`, at most `cap` bytes and never more than its size when opened.
    /// Anything else (a device such as /dev/zero, a FIFO, a socket, a directory) is an error, found before
    /// a byte is read.
    pub fn read_regular(&self, path: &str, cap: u64) -> io::Result<Contents> {
        let fd = self.open_path(path, libc::O_RDONLY | libc::O_NONBLOCK)?;
        let st = sys::fstat(&fd)?;
        if file_type(&st) != libc::S_IFREG {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        let size = st.st_size.max(0) as u64;
        if size > cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{size} bytes, more than the {cap} kprof reads from a target"),
            ));
        }
        let mut bytes = Vec::with_capacity(size as usize);
        File::from(fd).take(size).read_to_end(&mut bytes)?;
        Ok(Contents { bytes, uid: st.st_uid })
    }

    /// The names in the target's directory `path`.
    pub fn names(&self, path: &str) -> io::Result<Vec<String>> {
        let dir = self.open_path(path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let names = std::fs::read_dir(sys::fd_path(&dir))?
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        Ok(names)
    }

    /// Connects to the Unix socket at `path`, which must be a socket (not a link to one) owned by `uid`.
    pub fn connect(&self, path: &str, uid: u32, timeout: Duration) -> io::Result<UnixStream> {
        let fd = self.open_path(path, libc::O_PATH | libc::O_NOFOLLOW)?;
        let st = sys::fstat(&fd)?;
        if file_type(&st) != libc::S_IFSOCK || st.st_uid != uid {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("not a socket of uid {uid}")));
        }
        sys::connect_unix(&sys::fd_path(&fd), timeout)
    }

    /// Whether `path` is a socket owned by `uid` (no connection made).
    pub fn is_socket_of(&self, path: &str, uid: u32) -> io::Result<bool> {
        match self.open_path(path, libc::O_PATH | libc::O_NOFOLLOW) {
            Ok(fd) => {
                let st = sys::fstat(&fd)?;
                Ok(file_type(&st) == libc::S_IFSOCK && st.st_uid == uid)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}
