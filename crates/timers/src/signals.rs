//! Signal handlers that share their signal with the rest of the process, as thin wrappers over
//! `sigaction`, `rt_tgsigqueueinfo` and `tgkill`.
//!
//! A profiler's signal is rarely its alone: JDK 25's JFR CPU-time sampler and other agents use SIGPROF,
//! an application may handle any signal through `jdk.internal.misc.Signal`. So a handler is installed
//! once per signal, remembers the handler it replaced, and passes on every signal that is not its own
//! ([`chain`]); and since another component may in turn replace it, [`replaced`] tells whether it is
//! still the one installed.

use std::ffi::c_void;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A handler as the kernel calls it with `SA_SIGINFO`.
pub type SignalHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);

/// Signals 1..64.
const SIGNALS: usize = 65;

/// The disposition a handler replaced: the previous handler's address and whether it takes siginfo.
struct Previous {
    handler: AtomicUsize,
    siginfo: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_PREVIOUS: Previous = Previous { handler: AtomicUsize::new(0), siginfo: AtomicBool::new(false) };
#[allow(clippy::declare_interior_mutable_const)]
const NONE: AtomicUsize = AtomicUsize::new(0);

static PREVIOUS: [Previous; SIGNALS] = [NO_PREVIOUS; SIGNALS];
/// Our handler per signal (0: none installed).
static OURS: [AtomicUsize; SIGNALS] = [NONE; SIGNALS];

fn index(sig: libc::c_int) -> io::Result<usize> {
    usize::try_from(sig)
        .ok()
        .filter(|&s| s > 0 && s < SIGNALS)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Installs `handler` for `sig` (once: a second call for the same handler does nothing), with
/// `SA_RESTART` so that interrupted system calls of the application resume, and with `block` blocked
/// while it runs (the other signals of the same handlers, so that two of them never nest on a thread).
/// The handler it replaces is kept for [`chain`].
pub fn install(sig: libc::c_int, handler: SignalHandler, block: &[libc::c_int]) -> io::Result<()> {
    let i = index(sig)?;
    if OURS[i].load(Ordering::Acquire) == handler as usize {
        return Ok(());
    }
    // SAFETY: a zeroed sigaction is valid; we fill the handler, flags and mask.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: valid pointers to initialised structures; `handler` has the SA_SIGINFO signature.
    let rc = unsafe {
        libc::sigemptyset(&mut sa.sa_mask);
        for &b in block {
            libc::sigaddset(&mut sa.sa_mask, b);
        }
        libc::sigaction(sig, &sa, &mut old)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // The previous disposition is published before our own handler is recorded as installed; a signal
    // that comes in between finds the previous one already (or, before, nothing to chain to).
    saved_actions().retain(|(s, _)| *s != sig);
    saved_actions().push((sig, old));
    PREVIOUS[i].siginfo.store(old.sa_flags & libc::SA_SIGINFO != 0, Ordering::Release);
    PREVIOUS[i].handler.store(old.sa_sigaction, Ordering::Release);
    OURS[i].store(handler as usize, Ordering::Release);
    Ok(())
}

/// The complete dispositions [`install`] replaced, for [`uninstall`] (never read in a handler).
fn saved_actions() -> std::sync::MutexGuard<'static, Vec<(libc::c_int, libc::sigaction)>> {
    static SAVED: std::sync::Mutex<Vec<(libc::c_int, libc::sigaction)>> = std::sync::Mutex::new(Vec::new());
    SAVED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Gives `sig` back the disposition [`install`] replaced, if our handler is still the one installed (a
/// handler installed over ours is left as it is). A replaced `SIG_DFL` comes back as `SIG_IGN`: a late
/// signal of ours (an expiry already under way when the timer was disarmed) must not end the process.
/// Returns whether it gave the signal back. Not for a handler: it takes a lock.
pub fn uninstall(sig: libc::c_int) -> io::Result<bool> {
    let i = index(sig)?;
    let ours = OURS[i].load(Ordering::Acquire);
    if ours == 0 || replaced(sig) {
        return Ok(false);
    }
    let mut saved = saved_actions();
    let Some(at) = saved.iter().position(|(s, _)| *s == sig) else { return Ok(false) };
    let mut action = saved[at].1;
    if action.sa_sigaction == libc::SIG_DFL {
        action.sa_sigaction = libc::SIG_IGN;
    }
    // SAFETY: `action` is the initialised disposition the kernel gave us when ours was installed.
    if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    saved.remove(at);
    OURS[i].store(0, Ordering::Release);
    Ok(true)
}

/// Passes a signal that is not ours to the handler [`install`] replaced. A previous disposition of
/// `SIG_DFL` or `SIG_IGN` drops it: a stray signal must not end the program because kprof is loaded
/// (the signals kprof uses are ignored by default, or killed it before kprof's handler existed).
/// Async-signal-safe. Returns whether a previous handler ran.
///
/// # Safety
/// `info` and `ucontext` must be what the kernel passed to the handler of `sig`.
pub unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ucontext: *mut c_void) -> bool {
    let Ok(i) = index(sig) else { return false };
    let p = &PREVIOUS[i];
    let h = p.handler.load(Ordering::Acquire);
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return false;
    }
    if p.siginfo.load(Ordering::Acquire) {
        // SAFETY: the previous disposition had SA_SIGINFO, so `h` is a three-argument handler; we pass it
        // what the kernel passed us.
        let f = unsafe { std::mem::transmute::<usize, SignalHandler>(h) };
        f(sig, info, ucontext);
    } else {
        // SAFETY: without SA_SIGINFO the previous handler takes the signal number alone.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(h) };
        f(sig);
    }
    true
}

/// Whether our handler of `sig` was installed and another one has replaced it since.
pub fn replaced(sig: libc::c_int) -> bool {
    let Ok(i) = index(sig) else { return false };
    let ours = OURS[i].load(Ordering::Acquire);
    if ours == 0 {
        return false;
    }
    // SAFETY: a zeroed sigaction is a valid out-parameter; a NULL new action only queries.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) };
    rc == 0 && cur.sa_sigaction != ours
}

/// The name of `sig` as the summary line shows it (`SIGPROF`).
pub fn name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGPROF => "SIGPROF".into(),
        libc::SIGURG => "SIGURG".into(),
        libc::SIGVTALRM => "SIGVTALRM".into(),
        other => format!("signal {other}"),
    }
}

/// `si_code` of a signal sent with `sigqueue`-like calls.
pub const SI_QUEUE: i32 = -1;

/// The id of this process, cached for signal handlers (`getpid` is a system call).
pub fn process_id() -> i32 {
    static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: getpid has no preconditions.
    let p = unsafe { libc::getpid() };
    PID.store(p, Ordering::Relaxed);
    p
}

/// Sends `sig` to thread `tid` of this process, carrying `value` (`si_value`) with `si_code` SI_QUEUE,
/// so that its handler can tell it from the same signal sent by anyone else. Never reaches another
/// process: the kernel checks that `tid` belongs to this one.
pub fn queue_to_thread(tid: i32, sig: libc::c_int, value: u64) -> io::Result<()> {
    // SAFETY: siginfo_t is plain data; zeroed is a valid starting value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let base = &mut info as *mut libc::siginfo_t as *mut u8;
    // SAFETY: the writes lie inside the 128-byte siginfo_t at the Linux 64-bit offsets of si_signo (0),
    // si_code (8) and, for SI_QUEUE, si_pid (16), si_uid (20) and si_value (24).
    unsafe {
        (base as *mut i32).write(sig);
        (base.add(8) as *mut i32).write(SI_QUEUE);
        (base.add(16) as *mut i32).write(process_id());
        (base.add(20) as *mut u32).write(libc::getuid());
        (base.add(24) as *mut u64).write_unaligned(value);
    }
    // SAFETY: a valid siginfo for our own process's thread; the kernel copies it.
    let rc =
        unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, process_id(), tid, sig, &info as *const libc::siginfo_t) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `tid` is a thread of this process now (`tgkill` with signal 0 checks without sending).
pub fn is_own_thread(tid: i32) -> bool {
    if tid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; the call only checks that the thread exists in our group.
    unsafe { libc::syscall(libc::SYS_tgkill, process_id(), tid, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    static OURS_SEEN: AtomicU64 = AtomicU64::new(0);
    static PREVIOUS_SEEN: AtomicU64 = AtomicU64::new(0);

    extern "C" fn previous(_sig: libc::c_int) {
        PREVIOUS_SEEN.fetch_add(1, Ordering::Relaxed);
    }

    extern "C" fn ours(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
        // SAFETY: the kernel's siginfo.
        let si = unsafe { crate::SigInfo::read(info) };
        if si.code == SI_QUEUE && si.value == 0x5eed {
            OURS_SEEN.fetch_add(1, Ordering::Relaxed);
        } else {
            // SAFETY: forwarded from the kernel.
            unsafe { chain(sig, info, uc) };
        }
    }

    #[test]
    fn foreign_signals_reach_the_replaced_handler_and_a_replacement_is_noticed() {
        let sig = libc::SIGWINCH;
        // SAFETY: installing a plain handler for a signal no other test uses.
        unsafe { libc::signal(sig, previous as *const () as usize) };
        install(sig, ours, &[]).unwrap();
        assert!(!replaced(sig));
        let tid = crate::gettid();
        queue_to_thread(tid, sig, 0x5eed).unwrap();
        // SAFETY: raising a handled signal on this thread.
        unsafe { libc::raise(sig) };
        queue_to_thread(tid, sig, 7).unwrap();
        assert_eq!(OURS_SEEN.load(Ordering::Relaxed), 1);
        assert_eq!(PREVIOUS_SEEN.load(Ordering::Relaxed), 2);
        // SAFETY: as above.
        unsafe { libc::signal(sig, previous as *const () as usize) };
        assert!(replaced(sig));
        // SAFETY: restore the default (ignore) disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }

    extern "C" fn quiet(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {}

    fn current(sig: libc::c_int) -> usize {
        // SAFETY: a zeroed sigaction is a valid out-parameter; a NULL new action only queries.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) }, 0);
        cur.sa_sigaction
    }

    #[test]
    fn uninstall_gives_the_signal_back_and_the_default_as_ignored() {
        extern "C" fn before(_: libc::c_int) {}
        let sig = libc::SIGTTIN;
        // SAFETY: dispositions of a signal no other test uses.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        install(sig, quiet, &[]).unwrap();
        assert_eq!(current(sig), quiet as *const () as usize);
        assert!(uninstall(sig).unwrap());
        assert_eq!(current(sig), libc::SIG_IGN, "a late signal must not stop the process");
        assert!(!uninstall(sig).unwrap(), "nothing of ours left to give back");
        // A handler that was there before comes back; one installed over ours is left alone.
        // SAFETY: as above.
        unsafe { libc::signal(sig, before as *const () as usize) };
        install(sig, quiet, &[]).unwrap();
        assert!(uninstall(sig).unwrap());
        assert_eq!(current(sig), before as *const () as usize);
        install(sig, quiet, &[]).unwrap();
        // SAFETY: as above.
        unsafe { libc::signal(sig, before as *const () as usize) };
        assert!(!uninstall(sig).unwrap());
        assert_eq!(current(sig), before as *const () as usize);
        // SAFETY: as above.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }

    #[test]
    fn own_threads_are_told_from_other_processes_threads() {
        assert!(is_own_thread(crate::gettid()));
        let child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(!is_own_thread(child.id() as i32));
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert!(!is_own_thread(0));
    }
}
