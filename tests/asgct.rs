//! mode=asgct on real JVMs: sampling rates per timer, CPU shares of programs whose split is known by
//! construction, every way a JVM ends, bad options, unwritable outputs, class-loader and thread churn.
//! Every test runs on every JDK under /usr/lib/jvm.

mod common;

use common::*;
use kprof_profile::output::read_profile;
use std::collections::BTreeMap;
use std::time::Duration;

fn busy_rate(jdk: &Jdk, opts: &str, seconds: &str) -> Run {
    let dir = scratch(&format!("rate-{}", jdk.label()));
    let file = dir.join("busy.collapsed");
    let run = run_java(jdk, Some(&format!("{opts},file={}", file.display())), &[], "kprof.harness.Busy", &[seconds]);
    run.assert_ok();
    assert!(file.exists(), "profile not written");
    run
}

#[test]
fn perf_timer_gives_a_thousand_samples_per_cpu_second_at_1ms() {
    for_each_jdk(|jdk| {
        let run = busy_rate(jdk, "interval=1ms", "3");
        let s = run.summary();
        assert_eq!(s["timer"], "perf", "{s:?}");
        let rate = run.summary_f64("rate");
        assert!(rate >= 950.0, "{}: rate {rate} < 950/cpu-s", jdk.label());
        let usable = run.summary_f64("usable");
        assert!(usable >= 99.0, "{}: usable {usable}% < 99%", jdk.label());
    });
}

#[test]
fn perf_timer_honours_100us() {
    for_each_jdk(|jdk| {
        // Each run is a platform measurement as much as kprof's: on a virtual machine the host's noise
        // (steal, slow interrupts) has cost a single 2-second run a tenth of its ticks. The sampler
        // honours the interval if one of three runs gets 9,000 per CPU-second.
        let mut rates = Vec::new();
        for _ in 0..3 {
            let run = busy_rate(jdk, "interval=100us", "2");
            let s = run.summary();
            assert_eq!(s["timer"], "perf", "{s:?}");
            assert!(matches!(s["ticks"].as_str(), "user" | "user+kernel"), "{s:?}");
            rates.push(run.summary_f64("rate"));
            if rates.last().is_some_and(|&r| r >= 9000.0) {
                return;
            }
        }
        panic!("{}: rates {rates:?} per CPU-second, none >= 9000", jdk.label());
    });
}

/// Runs kprof.harness.KernelBusy (a thread that reads /dev/zero a byte per system call) at 1 ms, as uid
/// `user` when given; returns the summary, the profiled rate and the program's user-mode share of its CPU.
fn kernel_busy(jdk: &Jdk, user: Option<u32>) -> (BTreeMap<String, String>, f64, f64) {
    let dir = scratch(&format!("kernel-busy-{}-{}", jdk.label(), user.map_or("root".into(), |u| u.to_string())));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = dir.join("kernel.collapsed");
    let mut cmd = as_user(&jdk.java(), user);
    cmd.arg(format!("-agentpath:{}=interval=1ms,file={}", agent_lib().display(), file.display()))
        .arg("-cp")
        .arg(harness_classes())
        .args(["kprof.harness.KernelBusy", "2"])
        .current_dir(&dir);
    let run = run_with_timeout(cmd, Duration::from_secs(120));
    run.assert_ok();
    assert!(file.exists(), "profile not written");
    let program = program_line(&run.stdout, "kernelbusy:");
    let cpu: f64 = program["cpu_ns"].parse().unwrap();
    let user_ns: f64 = program["user_ns"].parse().unwrap();
    (run.summary(), run.summary_f64("rate"), user_ns / cpu)
}

#[test]
fn perf_timer_samples_time_in_the_kernel_where_allowed_and_says_which() {
    let paranoid: i32 =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap().trim().parse().unwrap();
    if euid() != 0 || paranoid < 2 {
        // Both kinds need root here: one run that may take kernel ticks, one as a user that may not.
        eprintln!("not run: needs root and perf_event_paranoid >= 2 (euid {}, paranoid {paranoid})", euid());
        return;
    }
    for_each_jdk(|jdk| {
        let (root, root_rate, user_share) = kernel_busy(jdk, None);
        assert_eq!((root["timer"].as_str(), root["ticks"].as_str()), ("perf", "user+kernel"), "{root:?}");
        // The thread is in the kernel for a good part of its CPU time, and the samples follow its CPU clock.
        assert!(user_share < 0.8, "{}: KernelBusy spent {:.0} % in user mode", jdk.label(), 100.0 * user_share);
        assert!(root_rate >= 900.0, "{}: rate {root_rate} with kernel ticks", jdk.label());
        // As nobody the event takes user-mode ticks only: about the user-mode share of the rate.
        let (nobody, nobody_rate, _) = kernel_busy(jdk, Some(65534));
        assert_eq!((nobody["timer"].as_str(), nobody["ticks"].as_str()), ("perf", "user"), "{nobody:?}");
        eprintln!(
            "{}: KernelBusy {:.0} % user mode; {root_rate} samples per CPU-second with kernel ticks, {nobody_rate} \
             without",
            jdk.label(),
            100.0 * user_share
        );
        assert!(
            nobody_rate < 0.9 * root_rate,
            "{}: user-only rate {nobody_rate} not below kernel-tick rate {root_rate}",
            jdk.label()
        );
    });
}

#[test]
fn itimer_is_held_to_the_kernel_tick_and_says_so() {
    for_each_jdk(|jdk| {
        let run = busy_rate(jdk, "interval=1ms,timer=itimer", "2");
        assert_eq!(run.summary()["timer"], "itimer");
        let rate = run.summary_f64("rate");
        // HZ=250 on this machine kind: about 250 samples per CPU-second whatever the interval, never the
        // 1,000 asked for. (With other heavy jobs on both cores it has read as low as 122.)
        assert!((150.0..=350.0).contains(&rate), "{}: itimer rate {rate}", jdk.label());
    });
}

#[test]
fn ctimer_weights_samples_by_overruns_so_cpu_totals_stay_right() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("ctimer-{}", jdk.label()));
        let file = dir.join("busy.collapsed");
        let run = run_java(
            jdk,
            Some(&format!("interval=1ms,timer=ctimer,metric=cpu,file={}", file.display())),
            &[],
            "kprof.harness.Busy",
            &["2"],
        );
        run.assert_ok();
        assert_eq!(run.summary()["timer"], "ctimer");
        let rate = run.summary_f64("rate");
        assert!(rate < 400.0, "ctimer should be tick-bound, got {rate}");
        // The busy loop's CPU time as the program measured it, against the weights in the profile.
        let cpu_ns: f64 = program_line(&run.stdout, "busy:")["cpu_ns"].parse().unwrap();
        let stacks = read_collapsed(&file);
        let weighted = count_where(&stacks, |s| has_frame(s, "kprof.harness.Busy.main")) as f64;
        let ratio = weighted / cpu_ns;
        assert!((0.95..=1.06).contains(&ratio), "{}: weighted CPU {weighted} vs measured {cpu_ns}", jdk.label());
    });
}

#[test]
fn three_methods_split_50_30_20_within_one_point() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("split3-{}", jdk.label()));
        let file = dir.join("split3.collapsed");
        let run =
            run_java(jdk, Some(&format!("interval=1ms,file={}", file.display())), &[], "kprof.harness.Split3", &["4"]);
        run.assert_ok();
        let measured = program_line(&run.stdout, "split3:");
        let stacks = read_collapsed(&file);
        let a = count_where(&stacks, |s| has_frame(s, "Split3.methodA(")) as f64;
        let b = count_where(&stacks, |s| has_frame(s, "Split3.methodB(")) as f64;
        let c = count_where(&stacks, |s| has_frame(s, "Split3.methodC(")) as f64;
        let total = a + b + c;
        assert!(total > 3000.0, "too few samples: {total}");
        for (name, got) in [("a", a), ("b", b), ("c", c)] {
            let want: f64 = measured[name].parse().unwrap();
            let share = 100.0 * got / total;
            assert!((share - want).abs() <= 1.0, "{}: method{name} {share:.2}% vs measured {want:.2}%", jdk.label());
        }
    });
}

#[test]
fn two_busy_threads_split_2_to_1_and_the_sleeper_gets_nothing() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("threads-{}", jdk.label()));
        let file = dir.join("t.collapsed");
        let run = run_java(
            jdk,
            Some(&format!("interval=1ms,threads,file={}", file.display())),
            &[],
            "kprof.harness.ThreadSplit",
            &["1.5"],
        );
        run.assert_ok();
        let measured = program_line(&run.stdout, "threadsplit:");
        let w2: f64 = measured["w2"].parse().unwrap();
        let w1: f64 = measured["w1"].parse().unwrap();
        let sl: f64 = measured["sleeper"].parse().unwrap();
        let stacks = read_collapsed(&file);
        let root = |name: &str| count_where(&stacks, |s| s[0] == format!("[thread {name}]")) as f64;
        let (p2, p1, ps) = (root("worker-2x"), root("worker-1x"), root("sleeper"));
        let total = p2 + p1 + ps;
        let want2 = 100.0 * w2 / (w2 + w1 + sl);
        let want1 = 100.0 * w1 / (w2 + w1 + sl);
        assert!(
            (100.0 * p2 / total - want2).abs() <= 1.0,
            "{}: worker-2x {:.2}% vs {want2:.2}%",
            jdk.label(),
            100.0 * p2 / total
        );
        assert!(
            (100.0 * p1 / total - want1).abs() <= 1.0,
            "{}: worker-1x {:.2}% vs {want1:.2}%",
            jdk.label(),
            100.0 * p1 / total
        );
        // The sleeper runs only to start, sleep and end (its thread exit can spin on a contended monitor when
        // the machine is loaded): ~0 of the samples, where sampling wall time would give it a third.
        assert!(100.0 * ps / total <= 0.5, "{}: the sleeping thread got {ps} of {total} samples", jdk.label());
        // And none while it sleeps (a wall-clock sampler would put all of its share there); one at most, for
        // the microseconds of CPU time that Thread.sleep's own Java code takes.
        let asleep = count_where(&stacks, |s| s[0] == "[thread sleeper]" && has_frame(s, "java.lang.Thread.sleep"));
        assert!(asleep <= 1, "{}: {asleep} samples of the sleeper inside Thread.sleep", jdk.label());
    });
}

fn assert_profile_of_exit_paths(file: &std::path::Path) {
    let stacks = read_collapsed(file);
    assert!(
        count_where(&stacks, |s| has_frame(s, "kprof.harness.ExitPaths.work(long)void")) > 0,
        "no samples in work()"
    );
}

#[test]
fn profile_is_written_on_return_system_exit_and_uncaught_exception() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exit-{}", jdk.label()));
        for (how, code) in [("return", 0), ("exit", 3), ("throw", 1)] {
            let file = dir.join(format!("{how}.collapsed"));
            let run = run_java(
                jdk,
                Some(&format!("interval=1ms,file={}", file.display())),
                &[],
                "kprof.harness.ExitPaths",
                &[how],
            );
            assert_eq!(run.status.code(), Some(code), "{how}: {}", run.stderr);
            assert_profile_of_exit_paths(&file);
            assert!(run.summary()["files"].contains(&format!("{how}.collapsed")));
        }
    });
}

#[test]
fn profile_is_written_on_sigterm_and_sigint() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("signal-{}", jdk.label()));
        for (sig, name) in [(libc::SIGTERM, "term"), (libc::SIGINT, "int")] {
            let file = dir.join(format!("{name}.collapsed"));
            let mut cmd = Command::new(jdk.java());
            cmd.arg(format!("-agentpath:{}=interval=1ms,file={}", agent_lib().display(), file.display()))
                .arg("-cp")
                .arg(harness_classes())
                .args(["kprof.harness.ExitPaths", "wait"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            // A JVM leaves a shutdown signal alone that it inherits ignored (as a shell's background job
            // inherits SIGINT): the child gets the default dispositions, whatever started the tests.
            // SAFETY: signal() is async-signal-safe, so it may run between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    libc::signal(libc::SIGTERM, libc::SIG_DFL);
                    Ok(())
                });
            }
            let mut child = cmd.spawn().unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready");
            std::thread::sleep(std::time::Duration::from_millis(300));
            let pid = child.id();
            // SAFETY: sending a signal to our own child process.
            unsafe { libc::kill(pid as i32, sig) };
            let out = wait_within(
                child,
                &format!("{name}: the JVM after the signal"),
                std::time::Duration::from_secs(60),
                || native_stacks(pid),
            );
            let stderr = &out.stderr;
            assert!(stderr.contains("kprof: mode=asgct"), "{name}: no summary: {stderr}");
            assert_profile_of_exit_paths(&file);
        }
    });
}

#[test]
fn each_kind_of_bad_option_stops_startup_with_one_line_naming_it() {
    let jdk = &jdks()[0];
    let cases = [
        ("bogus=1", "unknown option 'bogus'"),
        ("mode=turbo", "'mode=turbo'"),
        ("interval=7", "'interval=7'"),
        ("interval=1ns", "'interval=1ns'"),
        ("interval=1h", "'interval=1h'"),
        ("timer=rdtsc", "'timer=rdtsc'"),
        ("file=/tmp/out.xyz", "'file=/tmp/out.xyz'"),
        ("format=svg", "'format=svg'"),
        ("metric=heat", "'metric=heat'"),
        ("threads=sometimes", "'threads=sometimes'"),
        ("depth=0", "'depth=0'"),
        ("cct_mb=-4", "'cct_mb=-4'"),
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

#[test]
fn help_lists_the_options_and_exits() {
    let jdk = &jdks()[0];
    let run = run_java(jdk, Some("help"), &[], "kprof.harness.ExitPaths", &["return"]);
    assert!(run.status.success());
    for key in ["mode", "interval", "timer", "file", "metric", "threads", "depth", "cct_mb"] {
        assert!(run.stdout.contains(&format!("  {key} ")), "help lacks {key}:\n{}", run.stdout);
    }
}

#[test]
fn an_unwritable_output_path_is_reported_and_the_application_still_runs() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("unwritable-{}", jdk.label()));
        let good = dir.join("ok.collapsed");
        let opts = format!("file=/nonexistent-kprof/x.html,file={}", good.display());
        let run = run_java(jdk, Some(&opts), &[], "kprof.harness.ExitPaths", &["return"]);
        run.assert_ok();
        assert!(run.stdout.contains("exitpaths: returning"));
        assert!(run.stderr.contains("kprof: warning: cannot write file=/nonexistent-kprof/x.html"), "{}", run.stderr);
        assert!(run.stderr.contains("kprof: cannot write /nonexistent-kprof/x.html"), "{}", run.stderr);
        assert!(good.exists(), "the writable output was not written");
    });
}

#[test]
fn thousands_of_class_loaders_end_with_a_valid_profile() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("loaders-{}", jdk.label()));
        let file = dir.join("l.collapsed");
        let run = run_java(
            jdk,
            Some(&format!("interval=1ms,file={}", file.display())),
            &[],
            "kprof.harness.ClassLoaderChurn",
            &["3000"],
        );
        run.assert_ok();
        assert!(run.stdout.contains("classloaderchurn: loaders=3000"));
        let stacks = read_collapsed(&file);
        assert!(count_where(&stacks, |s| has_frame(s, "ClassLoaderChurn.main")) > 100, "too few samples");
        // The churned classes were unloaded long before the profile was written; their methods were named
        // when the classes were prepared.
        let churned = count_where(&stacks, |s| has_frame(s, "kprof.harness.ChurnTarget.applyAsLong(long)long"));
        let unknown = count_where(&stacks, |s| has_frame(s, "[unknown_method]"));
        assert!(churned > 100 && unknown == 0, "{}: ChurnTarget samples {churned}, unknown {unknown}", jdk.label());
    });
}

#[test]
fn thousands_of_short_threads_end_with_a_valid_profile() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("churn-{}", jdk.label()));
        let file = dir.join("t.collapsed");
        let run = run_java(
            jdk,
            Some(&format!("interval=100us,threads,file={}", file.display())),
            &[],
            "kprof.harness.ThreadChurn",
            &["5000"],
        );
        run.assert_ok();
        assert!(run.stdout.contains("threadchurn: threads=5000"));
        let threads: u64 = run.summary()["threads"].parse().unwrap();
        assert!(threads >= 5000, "only {threads} threads were sampled");
        let stacks = read_collapsed(&file);
        let churn = count_where(&stacks, |s| s[0].starts_with("[thread churn-") && has_frame(s, "ThreadChurn.work"));
        assert!(churn > 50, "too few samples in the short threads: {churn}");
    });
}

#[test]
fn stacks_deeper_than_depth_are_cut_and_marked() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("depth-{}", jdk.label()));
        let file = dir.join("d.collapsed");
        let run = run_java(
            jdk,
            Some(&format!("interval=1ms,depth=32,file={}", file.display())),
            &[],
            "kprof.harness.Deep",
            &["300", "1"],
        );
        run.assert_ok();
        let stacks = read_collapsed(&file);
        let deep = count_where(&stacks, |s| has_frame(s, "Deep.down"));
        let marked = count_where(&stacks, |s| s[0] == "[truncated]" && s.len() == 33);
        assert!(
            deep > 500 && marked as f64 >= 0.95 * deep as f64,
            "{}: {marked} of {deep} deep samples marked",
            jdk.label()
        );
    });
}

/// While kprof walks stacks from signals the JIT keeps debug information at every PC (HotSpot records
/// it while an agent has CompiledMethodLoad events enabled and the flag DebugNonSafepoints is at its
/// default): a sample that interrupts a small method inlined into a hot loop goes to that method. With the
/// flag set off on the command line, the same samples go to the loop: the test sees the debug information
/// at work, and kprof leaving the user's choice as it is.
#[test]
fn samples_in_inlined_code_land_in_the_inlined_method() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("inlined-{}", jdk.label()));
        // The share of the loop's samples in the inlined method, and how the debug information was had.
        let share = |jvm: &[&str], name: &str| -> (f64, u64) {
            let file = dir.join(format!("{name}.collapsed"));
            let json = dir.join(format!("{name}.json"));
            let run = run_java(
                jdk,
                Some(&format!("interval=1ms,file={},file={}", file.display(), json.display())),
                jvm,
                "kprof.harness.Inlined",
                &["2"],
            );
            run.assert_ok();
            let way = read_profile(&json).unwrap().meta.counters["debug_info_at_every_pc"];
            let stacks = read_collapsed(&file);
            let in_loop = count_where(&stacks, |s| has_frame(s, "kprof.harness.Inlined.loop("));
            let in_mix =
                count_where(&stacks, |s| s.last().is_some_and(|f| f.starts_with("kprof.harness.Inlined.mix(")));
            // About 2,000 CPU samples in 2 s on an idle machine; fewer where other tests share the cores (the
            // loop gets less CPU time). A few hundred decide the shares below (0.99 against 0.003).
            assert!(in_loop > 500, "{}: {in_loop} samples in the loop", jdk.label());
            (in_mix as f64 / in_loop as f64, way)
        };
        let (on, way_on) = share(&[], "on");
        let (off, way_off) = share(&["-XX:+UnlockDiagnosticVMOptions", "-XX:-DebugNonSafepoints"], "off");
        // kprof set the flag in HotSpot's table (1) and left one given on the command line as it was (2).
        assert_eq!((way_on, way_off), (1, 2), "{}: debug_info_at_every_pc", jdk.label());
        assert!(
            on > 0.8 && off < 0.5,
            "{}: share of the loop's samples in the inlined method {on:.3} with debug information at every PC, {off:.3} without",
            jdk.label()
        );
        eprintln!("{}: inlined share {on:.3} (flag off: {off:.3})", jdk.label());
    });
}
