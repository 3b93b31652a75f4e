//! The three timers that can drive asgct sampling, as thin wrappers over the Linux system calls.
//!
//! * perf: a per-thread `perf_event_open` software `cpu-clock` event. It is hrtimer based, so it honours
//!   intervals below the kernel tick (HZ=250 here). Each overflow writes a record to the event's ring
//!   buffer and queues the signal to the owning thread (`F_SETSIG`, `F_SETOWN_EX` with `F_OWNER_TID`);
//!   the handler marks the ring read. libc lacks these constants and the attribute struct, so they are
//!   declared here.
//! * ctimer: a per-thread POSIX timer on the thread's CPU clock (`timer_create` with `SIGEV_THREAD_ID`).
//!   Ticks with the scheduler: at most one expiry per tick, the rest reported as overruns.
//! * itimer: the process-wide `setitimer(ITIMER_PROF)`: the signal lands on whichever thread is running.
//!
//! perf and ctimer signal with SIGURG, itimer (which cannot choose) with SIGPROF: SIGPROF is what JDK 25's
//! JFR CPU-time sampler uses, and it refuses to start when another handler holds it. SIGURG is otherwise
//! only sent for a socket's out-of-band data to a process that asked for it (`F_SETOWN`, which the JDK
//! never does), and its default action is to ignore it, so a signal that comes when no handler is
//! installed harms nothing.

pub mod cost;
pub mod signals;

use std::io;

/// Which timer drives asgct sampling.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimerKind {
    /// perf if the kernel allows it, else ctimer.
    Auto,
    /// Per-thread `perf_event_open` software cpu-clock (hrtimer based: honours intervals below the tick).
    Perf,
    /// Per-thread POSIX CPU timer (`timer_create` on the thread's CPU clock): at most one signal per tick.
    Ctimer,
    /// Process-wide `setitimer(ITIMER_PROF)`: the classic baseline; signals land on any thread.
    Itimer,
}

impl TimerKind {
    pub fn name(self) -> &'static str {
        match self {
            TimerKind::Auto => "auto",
            TimerKind::Perf => "perf",
            TimerKind::Ctimer => "ctimer",
            TimerKind::Itimer => "itimer",
        }
    }

    /// The timer called `name` (the inverse of [`TimerKind::name`]).
    pub fn from_name(name: &str) -> Option<TimerKind> {
        [TimerKind::Auto, TimerKind::Perf, TimerKind::Ctimer, TimerKind::Itimer].into_iter().find(|k| k.name() == name)
    }
}

/// The signal of the per-thread timers (perf, ctimer).
pub const SIGNAL: libc::c_int = libc::SIGURG;

/// The signal `kind` delivers: SIGPROF for itimer (ITIMER_PROF cannot send another), [`SIGNAL`] else.
pub fn signal_of(kind: TimerKind) -> libc::c_int {
    match kind {
        TimerKind::Itimer => libc::SIGPROF,
        _ => SIGNAL,
    }
}

const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_RESET: libc::c_ulong = 0x2403;
/// Offsets of `data_head` and `data_tail` in `struct perf_event_mmap_page`.
const MMAP_DATA_HEAD: usize = 1024;
const MMAP_DATA_TAIL: usize = 1032;
/// Bits of `perf_event_attr.flags`.
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;

/// `struct perf_event_attr` up to `config3` (PERF_ATTR_SIZE_VER8, 136 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
    config3: u64,
}

#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// The calling thread's kernel id. Async-signal-safe.
#[inline]
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The CPU-time clock of thread `tid` of this process (the kernel's MAKE_THREAD_CPUCLOCK(tid, SCHED)).
fn thread_cpu_clock(tid: i32) -> libc::clockid_t {
    ((!tid) << 3) | 6
}

/// CPU time consumed so far by thread `tid` of this process, in nanoseconds.
pub fn thread_cpu_ns(tid: i32) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; an invalid clock id just fails with EINVAL.
    let rc = unsafe { libc::clock_gettime(thread_cpu_clock(tid), &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// A per-thread perf cpu-clock event: its descriptor and its ring buffer (one metadata page and one
/// data page). Each overflow writes an empty sample record and queues the signal; the handler consumes
/// the records by moving `data_tail` (a plain store, no system call), and the event stays enabled.
#[derive(Clone, Copy, Debug)]
pub struct PerfTimer {
    pub fd: i32,
    pub ring: usize,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// Whether perf events may count kernel time: unknown (0), yes (1), no (2). Learnt from the first open.
static KERNEL_TICKS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the perf timer also takes the ticks that fall while the thread runs in the kernel (allowed to
/// root, CAP_PERFMON or perf_event_paranoid <= 1). Meaningful once a perf event has been opened.
pub fn perf_counts_kernel_ticks() -> bool {
    KERNEL_TICKS.load(std::sync::atomic::Ordering::Relaxed) == 1
}

fn perf_event_open(attr: &PerfEventAttr, tid: i32) -> io::Result<i32> {
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, attr as *const PerfEventAttr, tid, -1i32, -1i32, PERF_FLAG_FD_CLOEXEC)
    } as i32;
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// Whether this process may open a perf cpu-clock event on thread `tid`. The probe event is never
/// enabled: a tick of it could come before the signal handler is installed, and kill the process.
pub fn perf_probe(tid: i32, period_ns: u64) -> io::Result<()> {
    let fd = perf_event_fd(tid, period_ns)?;
    // SAFETY: closing the descriptor just opened.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Opens a perf cpu-clock event on thread `tid` that signals that thread every `period_ns` of its CPU
/// time. The event starts counting at once.
pub fn perf_open(tid: i32, period_ns: u64) -> io::Result<PerfTimer> {
    let fd = perf_event_fd(tid, period_ns)?;
    let len = 2 * page_size();
    // SAFETY: mapping the event's ring buffer: a fresh shared mapping of our own descriptor.
    let ring =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    if ring == libc::MAP_FAILED {
        let err = io::Error::last_os_error();
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        return Err(err);
    }
    let timer = PerfTimer { fd, ring: ring as usize };
    let owner = FOwnerEx { kind: F_OWNER_TID, pid: tid };
    // SAFETY: `fd` is ours; the fcntl/ioctl arguments are plain integers or a valid pointer to `owner`.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) == 0
            && libc::fcntl(fd, F_SETSIG, SIGNAL) == 0
            && libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) == 0
            && libc::ioctl(fd, PERF_EVENT_IOC_RESET, 0) == 0
            && libc::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) == 0
    };
    if !ok {
        let err = io::Error::last_os_error();
        perf_close(timer);
        return Err(err);
    }
    Ok(timer)
}

/// A perf cpu-clock event on thread `tid` with period `period_ns`, created disabled.
///
/// The event takes the ticks that fall in the kernel too where the system allows it. A user-only event
/// drops every tick that falls while the thread is in the kernel (system calls, page faults, class
/// loading's file reads), although the thread's CPU clock, which weighs and rates the samples, counts
/// that time. A tick taken in the kernel is delivered on the way back to user mode, so the sample lands
/// on the Java frame that made the call.
fn perf_event_fd(tid: i32, period_ns: u64) -> io::Result<i32> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut attr = PerfEventAttr {
        kind: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample_period: period_ns,
        flags: ATTR_DISABLED | ATTR_EXCLUDE_HV,
        wakeup_events: 1,
        ..PerfEventAttr::default()
    };
    let user_only = ATTR_DISABLED | ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV;
    match KERNEL_TICKS.load(Relaxed) {
        2 => {
            attr.flags = user_only;
            perf_event_open(&attr, tid)
        }
        known => match perf_event_open(&attr, tid) {
            Ok(fd) => {
                KERNEL_TICKS.store(1, Relaxed);
                Ok(fd)
            }
            Err(e) if known == 0 && matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                attr.flags = user_only;
                let fd = perf_event_open(&attr, tid)?;
                KERNEL_TICKS.store(2, Relaxed);
                Ok(fd)
            }
            Err(e) => Err(e),
        },
    }
}

/// Marks every record of the ring buffer as read, so the kernel keeps room for the next ones.
/// Async-signal-safe: two memory accesses, no system call.
#[inline]
pub fn perf_consume(ring: usize) {
    if ring == 0 {
        return;
    }
    // SAFETY: `ring` is the live mapping of a perf ring buffer (unmapped only after the slot is
    // deactivated); data_head and data_tail are aligned u64 fields of its metadata page.
    unsafe {
        let head = std::ptr::read_volatile((ring + MMAP_DATA_HEAD) as *const u64);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        std::ptr::write_volatile((ring + MMAP_DATA_TAIL) as *mut u64, head);
    }
}

pub fn perf_close(timer: PerfTimer) {
    // SAFETY: unmapping our own ring buffer and closing our own descriptor.
    unsafe {
        libc::munmap(timer.ring as *mut libc::c_void, 2 * page_size());
        libc::close(timer.fd);
    }
}

/// A POSIX timer on thread `tid`'s CPU clock that sends [`SIGNAL`] to that thread every `period_ns`,
/// carrying `cookie` in `si_value`. Returns the timer id.
pub fn ctimer_create(tid: i32, period_ns: u64, cookie: u64) -> io::Result<usize> {
    // SAFETY: sigevent is plain data; zeroed is a valid starting value.
    let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
    sev.sigev_notify = libc::SIGEV_THREAD_ID;
    sev.sigev_signo = SIGNAL;
    sev.sigev_notify_thread_id = tid;
    sev.sigev_value = libc::sigval { sival_ptr: cookie as usize as *mut libc::c_void };
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: valid pointers to initialised structures.
    if unsafe { libc::timer_create(thread_cpu_clock(tid), &mut sev, &mut timer) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let spec = libc::itimerspec { it_interval: timespec(period_ns), it_value: timespec(period_ns) };
    // SAFETY: `timer` was just created; `spec` is valid.
    if unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) } != 0 {
        let err = io::Error::last_os_error();
        ctimer_delete(timer as usize);
        return Err(err);
    }
    Ok(timer as usize)
}

pub fn ctimer_delete(timer: usize) {
    // SAFETY: deleting a timer id we created; a deleted id just fails.
    unsafe {
        libc::timer_delete(timer as libc::timer_t);
    }
}

/// Starts (`Some(period)`) or stops (`None`) the process-wide profiling interval timer.
pub fn itimer_set(period_ns: Option<u64>) -> io::Result<()> {
    let tv = |ns: u64| libc::timeval { tv_sec: (ns / 1_000_000_000) as _, tv_usec: ((ns % 1_000_000_000) / 1000) as _ };
    let ns = period_ns.unwrap_or(0);
    let value = libc::itimerval { it_interval: tv(ns), it_value: tv(ns) };
    // SAFETY: valid pointer to an initialised itimerval.
    if unsafe { libc::setitimer(libc::ITIMER_PROF, &value, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub use signals::SignalHandler;

/// Installs `handler` for the signal of every timer (SIGURG and SIGPROF), each blocked while it runs:
/// for a process of its own (`kprof timer-cost`), where nothing else handles them.
pub fn install_handler(handler: SignalHandler) -> io::Result<()> {
    let both = [SIGNAL, libc::SIGPROF];
    for sig in both {
        signals::install(sig, handler, &both)?;
    }
    Ok(())
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ }
}

/// Fields of a `siginfo_t` the handler needs, read at their Linux x86-64/aarch64 offsets (the libc
/// crate exposes only some of them).
pub struct SigInfo {
    pub code: i32,
    /// Signals sent by a process (SI_QUEUE, SI_TKILL, SI_USER): the sender's pid (`si_pid`).
    pub pid: i32,
    /// ctimer and SI_QUEUE: the whole `si_value`.
    pub value: u64,
    /// perf: the descriptor that overflowed (`si_fd`).
    pub fd: i32,
    /// ctimer: expirations lost since the last signal (`si_overrun`).
    pub overrun: i32,
}

/// `si_code` values.
pub const SI_TIMER: i32 = -2;
/// A signal the kernel sent on its own (an interval timer's).
pub const SI_KERNEL: i32 = 0x80;
pub const POLL_HUP: i32 = 6;
pub const POLL_IN: i32 = 1;

impl SigInfo {
    /// # Safety
    /// `info` must be the `siginfo_t` pointer the kernel passed to an SA_SIGINFO handler.
    #[inline]
    pub unsafe fn read(info: *const libc::siginfo_t) -> SigInfo {
        let base = info as *const u8;
        // SAFETY: siginfo_t is 128 bytes; the union starts at offset 16 on 64-bit Linux. For timers it is
        // {int tid; int overrun; sigval value}, for SIGPOLL {long band; int fd}, for signals a process sent
        // {int pid; int uid; sigval value}.
        unsafe {
            let code = (base.add(8) as *const i32).read();
            SigInfo {
                code,
                pid: (base.add(16) as *const i32).read(),
                overrun: (base.add(20) as *const i32).read(),
                value: (base.add(24) as *const u64).read(),
                fd: (base.add(24) as *const i32).read(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_attr_has_the_kernel_size() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 136);
    }

    #[test]
    fn thread_cpu_clock_reads_our_own_thread() {
        let tid = gettid();
        let a = thread_cpu_ns(tid).unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let b = thread_cpu_ns(tid).unwrap();
        assert!(b > a);
    }
}
