//! mode=wall on real JVMs (every JDK under /usr/lib/jvm): wall shares of a thread that sleeps, computes,
//! parks and waits in a split it measures itself; idle threads whose samples stay in their idle frame
//! with their state; a thousand idle threads at a bounded rate and cost; the cpu and wall engines
//! together on the same threads; bad options; and a wall session started, dumped and stopped through
//! `kprof`.

mod common;

use common::*;
use kprof_profile::output::read_profile;
use kprof_profile::{Metric, Profile};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The tests of this file run one at a time: their accuracy depends on the CPUs they can get (the
/// machine is shared already), and a thousand signalled threads would take them from the others.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The phases of kprof.harness.WallSplit's "phases" thread: its method and the state label its samples
/// must carry.
const PHASES: [(&str, &str, &str); 4] = [
    ("sleep", "WallSplit.sleepPhase(", "[state sleeping]"),
    ("compute", "WallSplit.computePhase(", "[state running]"),
    ("park", "WallSplit.parkPhase(", "[state parked]"),
    ("wait", "WallSplit.waitPhase(", "[state waiting]"),
];

/// Every leaf context of `profile` with its self value of `metric`: (frame names root first, value).
fn stacks(profile: &Profile, metric: Metric) -> Vec<(Vec<String>, u64)> {
    let parents = profile.parents();
    let names: Vec<String> = profile.frames.iter().map(|f| f.display_name()).collect();
    (1..profile.nodes.len() as u32)
        .filter(|&n| profile.value(n, metric) > 0)
        .map(|n| {
            let path = profile.path(n, &parents);
            (
                path.iter().map(|&p| names[profile.nodes[p as usize].frame as usize].clone()).collect(),
                profile.value(n, metric),
            )
        })
        .collect()
}

/// What one thread of a profile shows, by phase: (share by frame, share by label), in percent of the
/// thread's phase samples, weighted by wall time.
struct PhaseShares {
    measured: BTreeMap<&'static str, f64>,
    by_frame: BTreeMap<&'static str, f64>,
    by_label: BTreeMap<&'static str, f64>,
    /// Wall time of the thread in the profile, and as the program measured it (ms).
    profiled_ms: f64,
    measured_ms: f64,
    /// Cycles of the four phases the program ran.
    cycles: f64,
}

fn phase_shares(stdout: &str, stacks: &[(Vec<String>, u64)]) -> PhaseShares {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("wallsplit: sleep_ms="))
        .unwrap_or_else(|| panic!("no wallsplit result in:\n{stdout}"));
    let program: BTreeMap<&str, f64> =
        line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k, v.parse().unwrap())).collect();
    let mut measured = BTreeMap::new();
    let ms = |k: &str| program[format!("{k}_ms").as_str()];
    let measured_ms: f64 = PHASES.iter().map(|(k, _, _)| ms(k)).sum();
    for (k, _, _) in PHASES {
        measured.insert(k, 100.0 * ms(k) / measured_ms);
    }
    let phases: Vec<&(Vec<String>, u64)> = stacks.iter().filter(|(s, _)| s[0] == "[thread phases]").collect();
    let in_frame = |f: &str| phases.iter().filter(|(s, _)| has_frame(s, f)).map(|(_, n)| *n).sum::<u64>() as f64;
    let with_label =
        |l: &str| phases.iter().filter(|(s, _)| s.last().unwrap() == l).map(|(_, n)| *n).sum::<u64>() as f64;
    let frame_total: f64 = PHASES.iter().map(|(_, f, _)| in_frame(f)).sum();
    let label_total: f64 = PHASES.iter().map(|(_, _, l)| with_label(l)).sum();
    let mut by_frame = BTreeMap::new();
    let mut by_label = BTreeMap::new();
    for (k, f, l) in PHASES {
        by_frame.insert(k, 100.0 * in_frame(f) / frame_total);
        by_label.insert(k, 100.0 * with_label(l) / label_total);
    }
    let profiled_ms = phases.iter().map(|(_, n)| *n).sum::<u64>() as f64 / 1e6;
    PhaseShares { measured, by_frame, by_label, profiled_ms, measured_ms, cycles: program["cycles"] }
}

/// Runs WallSplit for `seconds` with `opts` (a JSON file added); returns the run and the profile.
fn wall_split(jdk: &Jdk, name: &str, opts: &str, seconds: &str) -> (Run, Profile) {
    let dir = scratch(&format!("{name}-{}", jdk.label()));
    let json = dir.join("wall.json");
    let run = run_java(
        jdk,
        Some(&format!("{opts},threads,file={}", json.display())),
        &[],
        "kprof.harness.WallSplit",
        &[seconds],
    );
    run.assert_ok();
    let profile = read_profile(&json).unwrap_or_else(|e| panic!("{e}"));
    (run, profile)
}

/// Whether every share of `s` is within `tolerance` points of the measured one; the first that is not.
fn shares_within(s: &PhaseShares, tolerance: f64) -> Result<(), String> {
    for (k, _, _) in PHASES {
        let want = s.measured[k];
        for (how, got) in [("frame", s.by_frame[k]), ("label", s.by_label[k])] {
            if (got - want).abs() > tolerance {
                return Err(format!("{k} by {how} {got:.2}% vs measured {want:.2}%"));
            }
        }
    }
    Ok(())
}

/// How far from the measured shares a profile may be, in points: 2, and what the sampler's own lateness
/// explains. A pick weighs half the time to each neighbouring pick, so a state change between two picks
/// moves at most half their distance to the wrong state; a sampler held up (a loaded machine) makes
/// that distance longer than an interval. Each phase begins and ends once a cycle: its share may move
/// by the ticks' mean delay per cycle (the profile's `wall_tick_delay_ns` over `wall_ticks`).
fn tolerance(profile: &Profile, s: &PhaseShares) -> f64 {
    let c = &profile.meta.counters;
    let count = |k: &str| c.get(k).copied().unwrap_or(0) as f64;
    let mean_delay_ms = count("wall_tick_delay_ns") / count("wall_ticks").max(1.0) / 1e6;
    let cycle_ms = s.measured_ms / s.cycles.max(1.0);
    let tolerance = 2.0 + 100.0 * mean_delay_ms / cycle_ms;
    eprintln!(
        "  sampler: ticks {mean_delay_ms:.2} ms late on average, {} of {} more than an interval; cycle \
         {cycle_ms:.0} ms: within {tolerance:.2} points",
        count("wall_late_ticks"),
        count("wall_ticks")
    );
    tolerance
}

fn report(label: &str, s: &PhaseShares) {
    let show = |m: &BTreeMap<&str, f64>| {
        PHASES.iter().map(|(k, _, _)| format!("{k} {:.2}", m[k])).collect::<Vec<_>>().join(", ")
    };
    eprintln!(
        "{label}: measured {}; by frame {}; by label {}; {:.0} ms profiled of {:.0} ms measured",
        show(&s.measured),
        show(&s.by_frame),
        show(&s.by_label),
        s.profiled_ms,
        s.measured_ms
    );
}

#[test]
fn a_thread_that_sleeps_computes_parks_and_waits_gets_its_measured_wall_shares_within_two_points() {
    let _one = one_at_a_time();
    for_each_jdk(|jdk| {
        for (interval, seconds) in [("10ms", "12"), ("1ms", "6")] {
            // A run is a measurement on a shared machine as much as kprof's: a sampler thread that the
            // scheduler holds up for tens of milliseconds cannot tell where in that time the sampled
            // thread changed state. The shares hold if one of three runs is within 2 points (and what the
            // sampler's own lateness explains: see `tolerance`).
            let mut errors = Vec::new();
            for attempt in 1..=3 {
                let (run, profile) =
                    wall_split(jdk, &format!("split-{interval}"), &format!("mode=wall,interval={interval}"), seconds);
                let s = phase_shares(&run.stdout, &stacks(&profile, Metric::Wall));
                let label = format!("{} interval={interval} run {attempt}", jdk.label());
                report(&label, &s);
                // The weights add up to the thread's time (each pick weighs the time since the last one).
                let ratio = s.profiled_ms / s.measured_ms;
                assert!(
                    (0.97..=1.03).contains(&ratio),
                    "{label}: profiled {:.0} ms of {:.0}",
                    s.profiled_ms,
                    s.measured_ms
                );
                let summary = run.summary();
                assert_eq!((summary["mode"].as_str(), summary["interval"].as_str()), ("wall", interval), "{summary:?}");
                match shares_within(&s, tolerance(&profile, &s)) {
                    Ok(()) => break,
                    Err(e) => errors.push(format!("{label}: {e}")),
                }
                assert!(attempt < 3, "no run within 2 points: {errors:?}");
            }
        }
    });
}

#[test]
fn idle_threads_stay_in_their_idle_frame_with_their_state() {
    let _one = one_at_a_time();
    // Each idle thread: the method it idles in, the JDK frame it waits in, its state.
    let idle = [
        ("idle-sleep", "WallSplit.idleSleep(", "java.lang.Thread.sleep", "[state sleeping]"),
        ("idle-park", "WallSplit.idlePark(", "jdk.internal.misc.Unsafe.park(", "[state parked]"),
        ("idle-wait", "WallSplit.idleWait(", "java.lang.Object.wait", "[state waiting]"),
        ("blocked", "WallSplit.blockedEnter(", "WallSplit.blockedEnter(", "[state blocked]"),
        ("holder", "WallSplit.holdMonitor(", "java.lang.Thread.sleep", "[state sleeping]"),
        // The JVM's own thread that waits for signals inside the VM, runnable to JVMTI, runs no Java code.
        ("Signal Dispatcher", "[not_java]", "[not_java]", "[state vm_wait]"),
    ];
    for_each_jdk(|jdk| {
        let (_, profile) = wall_split(jdk, "idle", "mode=wall,interval=10ms", "3");
        let all = stacks(&profile, Metric::Wall);
        for (thread, method, waits_in, state) in idle {
            let root = format!("[thread {thread}]");
            let mine: Vec<&(Vec<String>, u64)> = all.iter().filter(|(s, _)| s[0] == root).collect();
            let total: u64 = mine.iter().map(|(_, n)| n).sum();
            let idle_ns: u64 = mine
                .iter()
                .filter(|(s, _)| has_frame(s, method) && has_frame(s, waits_in) && s.last().unwrap() == state)
                .map(|(_, n)| n)
                .sum();
            let share = 100.0 * idle_ns as f64 / total.max(1) as f64;
            eprintln!(
                "{}: {thread}: {share:.2}% of {:.0} ms in {method} {waits_in} {state}",
                jdk.label(),
                total as f64 / 1e6
            );
            // The thread starts and ends outside its idle frame: a sample or two of some 300.
            assert!(total > 2_000_000_000, "{}: {thread} has {total} ns of wall samples", jdk.label());
            assert!(share >= 97.0, "{}: {thread}: {share:.2}% in its idle frame with {state}", jdk.label());
        }
        // Threads waiting inside the VM are read, not signalled: few signals beside the running threads'.
        let counters = &profile.meta.counters;
        assert!(counters["wall_vm_waits"] > 100, "{}: {counters:?}", jdk.label());
    });
}

/// A profiled run's summary line and its profile's counters.
type Profiled = (BTreeMap<String, String>, BTreeMap<String, u64>);

/// One IdleThreads run (1000 idle threads, the main thread working): its progress rate (units per
/// second) and, when profiled, the summary and the profile's counters (`json` is added to the files).
fn idle_threads(jdk: &Jdk, agent: Option<&str>, json: &Path) -> (f64, Option<Profiled>) {
    let opts = agent.map(|a| format!("{a},file={}", json.display()));
    let run = run_java(jdk, opts.as_deref(), &[], "kprof.harness.IdleThreads", &["1000", "3"]);
    run.assert_ok();
    let rate: f64 = program_line(&run.stdout, "idlethreads:")["units_per_s"].parse().unwrap();
    (rate, agent.map(|_| (run.summary(), wall_profile(json).meta.counters)))
}

#[test]
fn a_thousand_idle_threads_are_sampled_at_a_bounded_rate_and_cost() {
    let _one = one_at_a_time();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("idle-threads-{}", jdk.label()));
        let file = dir.join("idle.collapsed");
        for batch in [16u32, 64] {
            let opts = format!("mode=wall,interval=10ms,batch={batch},file={}", file.display());
            // Interleaved, two of each: the machine is shared, so the figures are reported and the
            // assertion on progress is loose.
            let mut without = Vec::new();
            let mut with = Vec::new();
            let mut summary = BTreeMap::new();
            let mut counters = BTreeMap::new();
            let json = dir.join("idle.json");
            for _ in 0..2 {
                without.push(idle_threads(jdk, None, &json).0);
                let (rate, s) = idle_threads(jdk, Some(&opts), &json);
                with.push(rate);
                (summary, counters) = s.unwrap();
            }
            let num = |k: &str| -> f64 {
                summary[k].trim_end_matches("/s").trim_end_matches('s').trim_end_matches('%').parse().unwrap()
            };
            let count = |k: &str| counters.get(k).copied().unwrap_or(0) as f64;
            let (base, profiled) = (median(&without), median(&with));
            let per_tick = batch as f64 / 0.010;
            let (ticks, samples) = (count("wall_ticks"), count("wall_samples"));
            let nominal_ticks = count("wall_elapsed_ns") / 10e6;
            eprintln!(
                "{}: 1000 idle threads, batch={batch}: {} samples/s (bound {per_tick:.0}/s), {} signals, {} read, {} unchanged, {} threads, sampler \
                 {}s, handlers {}s, {ticks} ticks of {nominal_ticks:.0}; progress {profiled:.1} units/s profiled vs \
                 {base:.1} without ({:+.1} %)",
                jdk.label(),
                summary["rate"],
                summary["signals"],
                summary["read"],
                summary["unchanged"],
                summary["threads"],
                summary["sampler_cpu"],
                summary["handler_time"],
                100.0 * (profiled / base - 1.0)
            );
            assert!(num("threads") >= 1000.0, "{summary:?}");
            // At most `batch` threads per tick and a tick per interval, whatever the number of threads.
            let rate = num("rate");
            assert!(rate <= per_tick * 1.02, "{}: {rate} samples/s above {per_tick}", jdk.label());
            assert!(samples <= batch as f64 * ticks, "{}: {samples} samples in {ticks} ticks", jdk.label());
            // Each tick samples a whole batch. A sampler that the machine's load holds up makes fewer ticks
            // than intervals (a late one is not made up for), but ticks do happen.
            assert!(samples >= 0.8 * batch as f64 * ticks, "{}: {samples} samples in {ticks} ticks", jdk.label());
            assert!(ticks >= 0.1 * nominal_ticks, "{}: {ticks} ticks of {nominal_ticks:.0}", jdk.label());
            // Idle threads are not woken: the sampler reads their stacks, once (they use no CPU time after
            // that, so the stack read stays theirs); only the working thread (one of the 1,001) gets signals.
            let signals = count("wall_signals");
            let (read, unchanged) = (count("wall_stacks_read"), count("wall_stacks_unchanged"));
            assert!(read + unchanged >= 0.9 * samples, "{}: {read} + {unchanged} of {samples}", jdk.label());
            assert!(unchanged >= 0.5 * samples, "{}: {unchanged} unchanged stacks of {samples}", jdk.label());
            assert!(signals <= 0.1 * samples, "{}: {signals} signals for {samples} samples", jdk.label());
            assert!(profiled >= 0.5 * base, "{}: progress {profiled:.1} units/s profiled vs {base:.1}", jdk.label());
        }
        let stacks = read_collapsed(&file);
        let parked =
            count_where(&stacks, |s| has_frame(s, "IdleThreads.idlePark(") && s.last().unwrap() == "[state parked]");
        let asleep =
            count_where(&stacks, |s| has_frame(s, "IdleThreads.idleSleep(") && s.last().unwrap() == "[state sleeping]");
        let total = count_where(&stacks, |_| true);
        assert!(
            (parked + asleep) as f64 >= 0.5 * total as f64,
            "{}: idle threads' samples {parked} + {asleep} of {total}",
            jdk.label()
        );
    });
}

#[test]
fn cpu_and_wall_engines_sample_the_same_threads_together() {
    let _one = one_at_a_time();
    for_each_jdk(|jdk| {
        let mut errors = Vec::new();
        for attempt in 1..=3 {
            let (run, profile) = wall_split(jdk, "asgct-wall", "mode=asgct+wall,interval=1ms", "6");
            let s = run.summary();
            assert_eq!(s["mode"], "asgct+wall", "{s:?}");
            for key in ["asgct.samples", "asgct.timer", "wall.samples", "wall.signals"] {
                assert!(s.contains_key(key), "summary lacks {key}: {s:?}");
            }
            assert_eq!(profile.metrics(), [Metric::Samples, Metric::Cpu, Metric::WallSamples, Metric::Wall]);
            // CPU samples of the phases thread: in its compute phase (the others barely use the CPU), and
            // never with a state label.
            let cpu = stacks(&profile, Metric::Samples);
            let phases: Vec<&(Vec<String>, u64)> = cpu.iter().filter(|(s, _)| s[0] == "[thread phases]").collect();
            let total: u64 = phases.iter().map(|(_, n)| n).sum();
            let compute: u64 =
                phases.iter().filter(|(s, _)| has_frame(s, "WallSplit.computePhase(")).map(|(_, n)| n).sum();
            assert!(total > 200, "{}: {total} cpu samples of the phases thread", jdk.label());
            assert!(
                compute as f64 >= 0.9 * total as f64,
                "{}: {compute} of {total} cpu samples in compute",
                jdk.label()
            );
            assert!(
                cpu.iter().all(|(s, _)| !s.last().unwrap().starts_with("[state ")),
                "{}: a cpu sample with a state label",
                jdk.label()
            );
            // Wall shares as with the wall engine alone (one of three runs within 2 points and what the sampler's lateness explains, as there).
            let shares = phase_shares(&run.stdout, &stacks(&profile, Metric::Wall));
            let label = format!("{} asgct+wall run {attempt}", jdk.label());
            report(&label, &shares);
            match shares_within(&shares, tolerance(&profile, &shares)) {
                Ok(()) => break,
                Err(e) => errors.push(format!("{label}: {e}")),
            }
            assert!(attempt < 3, "no run within 2 points: {errors:?}");
        }
    });
}

#[test]
fn bad_wall_options_stop_startup_with_one_line_naming_them() {
    let _one = one_at_a_time();
    let jdk = &jdks()[0];
    let cases = [
        ("mode=wall,batch=0", "'batch=0'"),
        ("mode=wall,batch=9000", "'batch=9000'"),
        ("mode=wall,batch=lots", "'batch=lots'"),
        ("mode=wall,batch=", "'batch='"),
        ("mode=asgct,batch=8", "'batch=8'"),
        ("mode=wall,interval=2us", "'interval=2us'"),
        ("mode=wall+wall", "'mode=wall+wall'"),
    ];
    for (opt, needle) in cases {
        let run = run_java(jdk, Some(opt), &[], "kprof.harness.ExitPaths", &["return"]);
        assert!(!run.status.success(), "{opt}: JVM started anyway");
        let ours: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("kprof:")).collect();
        assert_eq!(ours.len(), 1, "{opt}: expected one kprof line, got {ours:?}");
        assert!(ours[0].contains(needle) && ours[0].contains("accepted"), "{opt}: {}", ours[0]);
        assert!(!run.stdout.contains("exitpaths:"), "{opt}: the program ran");
    }
}

/// The `key=value` line kprof prints on success.
fn reply(run: &Run) -> BTreeMap<String, String> {
    run.assert_ok();
    let line =
        run.stdout.lines().find(|l| l.starts_with("pid=")).unwrap_or_else(|| panic!("no result line:\n{}", run.stdout));
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn wall_profile(path: &Path) -> Profile {
    let profile = read_profile(path).unwrap_or_else(|e| panic!("{e}"));
    assert!(profile.has(Metric::Wall), "{}: no wall metric", path.display());
    profile
}

#[test]
fn kprof_starts_dumps_and_stops_a_wall_session() {
    let _one = one_at_a_time();
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("wall-control-{}", jdk.label()));
        let first = dir.join("first.collapsed");
        let mut cmd = Command::new(jdk.java());
        cmd.arg(format!("-agentpath:{}=mode=asgct,file={}", agent_lib().display(), first.display()))
            .arg("-cp")
            .arg(harness_classes())
            .args(["kprof.harness.WallSplit", "60"]);
        let app = Background::spawn(cmd);
        let pid = app.child.id().to_string();
        app.wait_line("wallsplit: started", Duration::from_secs(60), |l| l == "wallsplit: started");
        let kprof = kprof_bin();

        // The cpu session ends (its file written) and a wall session starts.
        let pattern = dir.join("wall-%n.json");
        let start =
            reply(&kprof_at(&kprof, None, &["start", &pid, &format!("mode=wall,threads,file={}", pattern.display())]));
        assert_eq!((start["state"].as_str(), start["mode"].as_str()), ("running", "wall"), "{start:?}");
        assert!(first.exists(), "the first session's profile was not written");
        std::thread::sleep(Duration::from_millis(1500));
        let status = reply(&kprof_at(&kprof, None, &["status", &pid]));
        assert_eq!(status["mode"], "wall", "{status:?}");
        assert!(status.get("wall.samples").is_some_and(|n| n.parse::<u64>().unwrap() > 0), "{status:?}");

        let dump = reply(&kprof_at(&kprof, None, &["dump", &pid]));
        let dumped = wall_profile(Path::new(&dump["files"]));
        let dumped_total = dumped.totals(Metric::Wall)[0];
        std::thread::sleep(Duration::from_millis(1000));
        let stop = reply(&kprof_at(&kprof, None, &["stop", &pid]));
        let last = wall_profile(Path::new(&stop["files"]));
        assert!(last.totals(Metric::Wall)[0] > dumped_total, "the final profile has no more than the dump");
        let all = stacks(&last, Metric::Wall);
        for (thread, state) in
            [("idle-park", "[state parked]"), ("blocked", "[state blocked]"), ("phases", "[state running]")]
        {
            let root = format!("[thread {thread}]");
            assert!(
                all.iter().any(|(s, _)| s[0] == root && s.last().unwrap() == state),
                "{}: no {state} sample of {thread} after kprof start",
                jdk.label()
            );
        }
        let status = reply(&kprof_at(&kprof, None, &["status", &pid]));
        assert_eq!(status["state"], "stopped", "{status:?}");
        assert!(alive(app.child.id()), "the JVM died:\n{}", app.stderr());
    });
}
