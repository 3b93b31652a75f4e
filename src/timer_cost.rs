//! `kprof timer-cost`: what a sampling timer's signal costs on this machine, before kprof does anything
//! in the handler. asgct mode's overhead at short intervals is mostly this per-signal cost (kernel and,
//! on a virtual machine, hypervisor), and it differs between hosts; `scripts/bench asgct` runs it beside
//! the agent so that kprof's own share of a sample can be told from the platform's.

use kprof_protocol::options::{parse_duration, TimerKind};
use kprof_timers::cost;

const USAGE: &str = "usage: kprof timer-cost [--interval D] [--timer perf|ctimer|itimer] [--seconds S] [--runs N]";

#[derive(Debug, PartialEq)]
struct Args {
    interval_ns: u64,
    timer: TimerKind,
    seconds: f64,
    runs: usize,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args { interval_ns: 100_000, timer: TimerKind::Perf, seconds: 2.0, runs: 5 };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned()).ok_or(format!("{key} needs a value"));
        match key {
            "--interval" => {
                let v = value()?;
                a.interval_ns = parse_duration(&v)
                    .filter(|&ns| (10_000..=1_000_000_000).contains(&ns))
                    .ok_or(format!("--interval '{v}': accepted: a duration from 10us to 1s (100us, 1ms)"))?;
            }
            "--timer" => {
                let v = value()?;
                // Not auto: the measurement is of one named timer.
                a.timer = TimerKind::from_name(&v)
                    .filter(|&k| k != TimerKind::Auto)
                    .ok_or(format!("--timer '{v}': accepted: perf, ctimer, itimer"))?;
            }
            "--seconds" => a.seconds = in_range(key, &value()?, 0.05..=600.0)?,
            "--runs" => a.runs = in_range(key, &value()?, 1..=1000)?,
            other => return Err(format!("unknown option '{other}'")),
        }
    }
    Ok(a)
}

/// `value` parsed as a number within `range`, or the one-line error naming `key` and the range.
fn in_range<T>(key: &str, value: &str, range: std::ops::RangeInclusive<T>) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    value.parse::<T>().ok().filter(|v| range.contains(v)).ok_or(format!(
        "{key} '{value}': accepted: {} to {}",
        range.start(),
        range.end()
    ))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

pub fn main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "{USAGE}\n\nRuns the same CPU-bound work without and with the timer, whose signal goes to a handler that \
             only counts; --runs pairs, medians.\n  --interval D   timer interval (default 100us)\n  --timer T      \
             perf (default), ctimer or itimer: the agent's timers\n  --seconds S    work per run (default 2)\n  \
             --runs N       pairs of runs (default 5)"
        );
        return 0;
    }
    let a = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kprof timer-cost: {e} ({USAGE})");
            return 2;
        }
    };
    let steps = cost::calibrate((a.seconds * 1e9) as u64);
    let mut runs = Vec::with_capacity(a.runs);
    for _ in 0..a.runs {
        match cost::measure(a.timer, a.interval_ns, steps) {
            Ok(c) => runs.push(c),
            Err(e) => {
                eprintln!("kprof timer-cost: {e}");
                return 1;
            }
        }
    }
    let base_ms = median(runs.iter().map(|c| c.base_ns as f64 / 1e6).collect());
    let timed_ms = median(runs.iter().map(|c| c.timed_ns as f64 / 1e6).collect());
    let rate = median(runs.iter().map(|c| c.rate()).collect());
    let per_signal_us = median(runs.iter().map(|c| c.ns_per_signal() / 1e3).collect());
    let overhead = median(runs.iter().map(|c| c.overhead() * 100.0).collect());
    println!(
        "timer-cost: timer={} interval_ns={} runs={} base_ms={base_ms:.0} timed_ms={timed_ms:.0} \
         signals_per_cpu_s={rate:.0} overhead={overhead:+.2}% us_per_signal={per_signal_us:.2}",
        a.timer.name(),
        a.interval_ns,
        a.runs
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::strings;

    #[test]
    fn parses_options_in_both_spellings() {
        let a = parse_args(&strings(&["--interval", "1ms", "--timer=ctimer", "--seconds", "0.5", "--runs=3"])).unwrap();
        assert_eq!(a, Args { interval_ns: 1_000_000, timer: TimerKind::Ctimer, seconds: 0.5, runs: 3 });
        let a = parse_args(&[]).unwrap();
        assert_eq!((a.interval_ns, a.timer, a.runs), (100_000, TimerKind::Perf, 5));
    }

    #[test]
    fn bad_arguments_are_errors() {
        for (args, want) in [
            (&["--interval", "5"][..], "--interval '5'"),
            (&["--interval", "1us"][..], "--interval '1us'"),
            (&["--timer", "auto"][..], "--timer 'auto'"),
            (&["--seconds", "0"][..], "--seconds '0'"),
            (&["--runs", "0"][..], "--runs '0'"),
            (&["--runs"][..], "--runs needs a value"),
            (&["--frobnicate"][..], "unknown option"),
        ] {
            let e = parse_args(&strings(args)).err().unwrap();
            assert!(e.contains(want), "{e}");
        }
        assert_eq!(main(&strings(&["--runs", "x"])), 2);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
