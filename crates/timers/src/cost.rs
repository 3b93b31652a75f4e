//! The platform's share of a sample: what a timer signal costs a CPU-bound thread when the handler does
//! nothing (`kprof timer-cost`).
//!
//! asgct mode's overhead at short intervals is mostly per signal: the timer interrupt, the signal frame
//! and the return from the handler, before AsyncGetCallTrace or the CCT do anything. What that costs
//! depends on the kernel and, on a virtual machine, on the hypervisor (each timer interrupt may be a VM
//! exit), and it varies between hosts of the same machine kind by a factor of ten. This module measures
//! it with the agent's own timers ([`super::timer`]) and a handler that only counts and consumes the
//! perf ring, so that a benchmark can put kprof's cost per sample beside the platform's.

use crate::PerfTimer;
use crate::TimerKind;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Signals the counting handler has seen.
static SIGNALS: AtomicU64 = AtomicU64::new(0);
/// The perf ring the handler consumes (0: none).
static RING: AtomicUsize = AtomicUsize::new(0);

extern "C" fn counting_handler(_sig: libc::c_int, _info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {
    SIGNALS.fetch_add(1, Ordering::Relaxed);
    crate::perf_consume(RING.load(Ordering::Relaxed));
}

/// One measurement: the same fixed work without and with the timer.
#[derive(Clone, Copy, Debug)]
pub struct TimerCost {
    /// Wall time of the work without a timer, nanoseconds.
    pub base_ns: u64,
    /// Wall time of the same work with the timer running.
    pub timed_ns: u64,
    /// CPU time of the thread during the timed work.
    pub timed_cpu_ns: u64,
    /// Signals the handler saw during the timed work.
    pub signals: u64,
}

impl TimerCost {
    /// Signals per CPU-second of the timed work.
    pub fn rate(&self) -> f64 {
        self.signals as f64 / (self.timed_cpu_ns.max(1) as f64 / 1e9)
    }

    /// Extra wall time per signal, nanoseconds (negative within noise).
    pub fn ns_per_signal(&self) -> f64 {
        (self.timed_ns as f64 - self.base_ns as f64) / self.signals.max(1) as f64
    }

    /// Extra wall time relative to the untimed work.
    pub fn overhead(&self) -> f64 {
        self.timed_ns as f64 / self.base_ns.max(1) as f64 - 1.0
    }
}

/// CPU-bound work of `steps` dependent steps (a xorshift generator and a small table, so that it is
/// neither all registers nor all memory).
pub fn work(steps: u64) -> u64 {
    let mut table = [0u64; 256];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..steps {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let slot = (x & 255) as usize;
        table[slot] = table[slot].wrapping_add(i);
        x = black_box(x ^ table[(x >> 56) as usize]);
    }
    table.iter().fold(x, |a, &b| a.wrapping_add(b))
}

/// Steps of [`work`] that take about `ns` on this thread.
pub fn calibrate(ns: u64) -> u64 {
    let mut steps = 1u64 << 20;
    loop {
        let t = Instant::now();
        black_box(work(steps));
        let took = t.elapsed().as_nanos() as u64;
        if took >= 50_000_000 || steps >= 1 << 40 {
            return (steps as u128 * ns as u128 / took.max(1) as u128).max(1) as u64;
        }
        steps *= 4;
    }
}

/// Runs `steps` of work on the calling thread without a timer, then with `kind` signalling the thread
/// every `interval_ns` of its CPU time (perf, ctimer) or of the process's (itimer), into a handler that
/// only counts. Installs that handler for the timer signal: for a process of its own (the CLI), never
/// inside the agent.
pub fn measure(kind: TimerKind, interval_ns: u64, steps: u64) -> Result<TimerCost, String> {
    install_counting_handler()?;
    let t = Instant::now();
    black_box(work(steps));
    let base_ns = t.elapsed().as_nanos() as u64;

    let tid = crate::gettid();
    let running = start(kind, tid, interval_ns)?;
    let before = SIGNALS.load(Ordering::Relaxed);
    let cpu0 = crate::thread_cpu_ns(tid).unwrap_or(0);
    let t = Instant::now();
    black_box(work(steps));
    let timed_ns = t.elapsed().as_nanos() as u64;
    let timed_cpu_ns = crate::thread_cpu_ns(tid).unwrap_or(0).saturating_sub(cpu0);
    let signals = SIGNALS.load(Ordering::Relaxed) - before;
    stop(running);
    Ok(TimerCost { base_ns, timed_ns, timed_cpu_ns, signals })
}

enum Running {
    Perf(PerfTimer),
    Ctimer(usize),
    Itimer,
}

fn start(kind: TimerKind, tid: i32, interval_ns: u64) -> Result<Running, String> {
    match kind {
        TimerKind::Perf | TimerKind::Auto => {
            let t = crate::perf_open(tid, interval_ns).map_err(|e| format!("perf_event_open: {e}"))?;
            RING.store(t.ring, Ordering::Relaxed);
            Ok(Running::Perf(t))
        }
        TimerKind::Ctimer => {
            crate::ctimer_create(tid, interval_ns, 0).map(Running::Ctimer).map_err(|e| format!("timer_create: {e}"))
        }
        TimerKind::Itimer => {
            crate::itimer_set(Some(interval_ns)).map_err(|e| format!("setitimer: {e}"))?;
            Ok(Running::Itimer)
        }
    }
}

fn stop(running: Running) {
    match running {
        Running::Perf(t) => {
            RING.store(0, Ordering::Relaxed);
            crate::perf_close(t);
        }
        Running::Ctimer(id) => crate::ctimer_delete(id),
        Running::Itimer => {
            let _ = crate::itimer_set(None);
        }
    }
}

fn install_counting_handler() -> Result<(), String> {
    crate::install_handler(counting_handler).map_err(|e| format!("sigaction: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_deterministic_and_calibrates() {
        assert_eq!(work(1000), work(1000));
        assert_ne!(work(1000), work(1001));
        let steps = calibrate(20_000_000);
        assert!(steps > 1000, "{steps} steps for 20 ms");
    }

    #[test]
    fn perf_timer_signals_the_working_thread_at_its_interval() {
        if crate::perf_probe(crate::gettid(), 1_000_000).is_err() {
            eprintln!("perf_event_open refused here; skipped");
            return;
        }
        // 1 ms over ~300 ms of CPU: some 300 signals; the handler counts each.
        let cost = measure(TimerKind::Perf, 1_000_000, calibrate(300_000_000)).unwrap();
        let rate = cost.rate();
        assert!((800.0..=1100.0).contains(&rate), "{rate} signals per CPU-second at 1 ms: {cost:?}");
    }
}
