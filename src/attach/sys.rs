//! Thin wrappers over the system calls the attach client needs and std does not offer: pidfds (signal
//! exactly the process that was inspected, never a recycled pid), per-thread credentials, and
//! directory-relative opens that never follow a symbolic link planted in a shared directory.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

/// The effective uid of the calling thread.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// A descriptor for process `pid` (as this process sees it). Signals sent through it reach that
/// process or fail with ESRCH once it has exited, even if the number is reused.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor the kernel just gave us and nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Sends `signal` to the process behind `pidfd`.
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) -> io::Result<()> {
    // SAFETY: a valid descriptor, a signal number, a null siginfo (allowed: the kernel fills it) and no flags.
    let rc = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), signal, std::ptr::null::<libc::siginfo_t>(), 0u32)
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the process behind `pidfd` has exited (a pidfd polls readable once it has).
pub fn pidfd_exited(pidfd: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd and a zero timeout.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    rc > 0 && pfd.revents & libc::POLLIN != 0
}

/// Switches the calling thread, and only it, to `uid`, `gid` and supplementary `groups` for good (real,
/// effective and saved ids alike; root's capabilities go with them).
///
/// The raw system calls are the point: glibc's setuid() and friends change every thread of the process,
/// while Linux keeps credentials per thread. The caller runs this on a thread of its own that ends when the
/// work done as that user is finished, so no other code ever runs with these credentials.
pub fn switch_thread_credentials(uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    let groups: Vec<libc::gid_t> = groups.to_vec();
    // SAFETY: `groups` is a live array of `groups.len()` gid_t values; the other arguments are integers.
    // Groups and gids first: once the uid is dropped they can no longer be changed.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens `dir` itself as a directory, refusing a symbolic link as its last component.
pub fn open_dir_nofollow(dir: &Path) -> io::Result<OwnedFd> {
    let c = cstring(dir)?;
    // SAFETY: a NUL-terminated path and integer flags.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`: `name` is one path component.
pub fn openat_nofollow(dir: &OwnedFd, name: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cstring(Path::new(name))?;
    // SAFETY: a valid directory descriptor, a NUL-terminated name, integer flags and mode.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat(dir: &OwnedFd, name: &str, mode: u32) -> io::Result<()> {
    let c = cstring(Path::new(name))?;
    // SAFETY: a valid directory descriptor, a NUL-terminated name and a mode.
    let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `renameat(dir, from, dir, to)`.
pub fn renameat(dir: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
    let (f, t) = (cstring(Path::new(from))?, cstring(Path::new(to))?);
    // SAFETY: a valid directory descriptor and two NUL-terminated names.
    let rc = unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `unlinkat(dir, name, 0)`.
pub fn unlinkat(dir: &OwnedFd, name: &str) -> io::Result<()> {
    let c = cstring(Path::new(name))?;
    // SAFETY: a valid directory descriptor and a NUL-terminated name.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `handler` on `signal` from now on (system calls it interrupts restart). The handler must only do
/// what is async-signal-safe.
pub fn on_signal(signal: i32, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is valid (no flags, no mask); it is filled before use, and `handler` is a
    // plain function with the signature sa_handler expects (SA_SIGINFO is not set).
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut())
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ends the process at once with `status` (no destructors, no buffered output): callable from a signal
/// handler.
pub fn exit_now(status: i32) -> ! {
    // SAFETY: _exit is async-signal-safe and takes a plain integer.
    unsafe { libc::_exit(status) }
}

/// The kernel's `struct open_how` (libc's is non-exhaustive, so it cannot be built field by field).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens `path` for reading as if `root` were `/`: absolute symbolic links and `..` stay inside it, as they
/// would for the process whose root it is (a plain open of `/proc/PID/root/...` resolves absolute links
/// against the caller's root instead).
pub fn open_in_root(root: &OwnedFd, path: &str) -> io::Result<File> {
    let c = cstring(Path::new(path.trim_start_matches('/')))?;
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY) as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a valid directory descriptor, a NUL-terminated path, and a fully initialised open_how of the
    // size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}
