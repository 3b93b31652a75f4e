//! kprof's files of real runs opened by the tools people read them with, and checked against
//! `kprof report` on the same profile: Go's pprof (`go tool pprof -top` and `-traces`, every sample type)
//! on the pprof file, and speedscope's web app (its npm package, in headless Chromium from a file URL) on
//! the collapsed stacks. Two runs per JDK of java-harness Split3: CPU sampling alone (`mode=asgct`) and
//! a profile with four metrics (`mode=bytecode+asgct`: bytecode samples and counts, CPU samples and
//! time). Needs Go (Debian `golang-go`), Chromium and speedscope's package: scripts/install-test-deps
//! installs them; KPROF_GO and KPROF_SPEEDSCOPE point at other copies.

mod common;

use common::*;
use kprof_profile::output::{collapsed, read_profile};
use kprof_profile::{Metric, Profile, Unit};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A real run's files: its JSON (what `kprof report` reads), pprof and collapsed stacks.
struct RunFiles {
    what: String,
    json: PathBuf,
    pprof: PathBuf,
    collapsed: PathBuf,
}

fn profile_split3(jdk: &Jdk, dir: &Path, name: &str, options: &str, seconds: &str) -> RunFiles {
    let files = RunFiles {
        what: format!("{} {name}", jdk.label()),
        json: dir.join(format!("{name}.json")),
        pprof: dir.join(format!("{name}.pb.gz")),
        collapsed: dir.join(format!("{name}.collapsed")),
    };
    let opts = format!(
        "{options},file={},file={},file={}",
        files.json.display(),
        files.pprof.display(),
        files.collapsed.display()
    );
    run_java(jdk, Some(&opts), &[], "kprof.harness.Split3", &[seconds]).assert_ok();
    files
}

/// What `kprof report FILE --metric M` prints: the total and, per method, its self and total counts.
struct Report {
    total: u64,
    self_counts: BTreeMap<String, u64>,
    total_counts: BTreeMap<String, u64>,
    /// The methods in the order of the self table.
    by_self: Vec<String>,
}

/// A report row's method name: what follows its rank, two percentages and the count (a wide count
/// moves it right, so it is found after the fourth field, not at a column).
fn report_name(row: &str) -> String {
    let mut rest = row.trim_start();
    for _ in 0..4 {
        rest = rest[rest.find(char::is_whitespace).unwrap_or(rest.len())..].trim_start();
    }
    rest.to_string()
}

fn number(text: &str) -> u64 {
    text.replace(',', "").parse().unwrap_or_else(|_| panic!("not a whole number: {text}"))
}

fn kprof_report(file: &Path, metric: Metric) -> Report {
    let out = Command::new(env!("CARGO_BIN_EXE_kprof"))
        .arg("report")
        .arg(file)
        .args(["--metric", metric.name(), "--top", "1000000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "kprof report: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let first = text.lines().next().unwrap();
    let total = first.split(", total ").nth(1).and_then(|t| t.split(' ').next()).map(number).expect(first);
    let table = |title: &str| -> Vec<(String, u64)> {
        let at = text.find(title).unwrap_or_else(|| panic!("no {title} in\n{text}"));
        text[at..]
            .lines()
            .skip(2)
            .take_while(|l| !l.is_empty())
            .map(|l| (report_name(l), number(l.split_whitespace().nth(3).unwrap())))
            .collect()
    };
    let by_self = table("TOP METHODS BY SELF");
    Report {
        total,
        self_counts: by_self.iter().cloned().collect(),
        total_counts: table("TOP METHODS BY TOTAL").into_iter().collect(),
        by_self: by_self.into_iter().map(|(n, _)| n).collect(),
    }
}

fn go() -> String {
    std::env::var("KPROF_GO").unwrap_or_else(|_| "go".to_string())
}

/// Runs `go tool pprof ARGS FILE` under `metric`'s sample type, values in the metric's base unit.
fn pprof_tool(file: &Path, metric: Metric, args: &[&str]) -> String {
    let mut cmd = Command::new(go());
    cmd.args(["tool", "pprof"]).args(args).arg(format!("-sample_index={}", metric.name()));
    match metric.unit() {
        Unit::Nanoseconds => cmd.arg("-unit=ns"),
        Unit::Bytes => cmd.arg("-unit=B"),
        Unit::Count | Unit::Bytecodes => &mut cmd,
    };
    let out = cmd.arg(file).output().unwrap_or_else(|e| {
        panic!("cannot run {} ({e}): install Go with scripts/install-test-deps (apt-get install golang-go)", go())
    });
    assert!(out.status.success(), "go tool pprof {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A value as `go tool pprof` prints it in the metric's base unit: `1258`, `669000000ns`.
fn pprof_value(text: &str) -> u64 {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    digits.parse().unwrap_or_else(|_| panic!("not a pprof value: {text}"))
}

/// `go tool pprof -top`: the total and every function's flat and cum values.
struct Top {
    total: u64,
    rows: Vec<(String, u64, u64)>,
}

fn pprof_top(file: &Path, metric: Metric) -> Top {
    let text = pprof_tool(file, metric, &["-top", "-nodefraction=0", "-edgefraction=0", "-nodecount=1000000"]);
    let showing = text.lines().find(|l| l.starts_with("Showing nodes accounting for")).expect(&text);
    let total = pprof_value(showing.rsplit(" of ").next().unwrap().trim_end_matches(" total"));
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat  flat%"))
        .skip(1)
        .map(|l| {
            // flat flat% sum% cum cum% NAME, where NAME may hold spaces.
            let mut rest = l.trim_start();
            let mut fields = Vec::new();
            for _ in 0..5 {
                let end = rest.find(' ').unwrap_or_else(|| panic!("bad -top row: {l}"));
                fields.push(&rest[..end]);
                rest = rest[end..].trim_start();
            }
            (rest.to_string(), pprof_value(fields[0]), pprof_value(fields[3]))
        })
        .collect();
    Top { total, rows }
}

/// `go tool pprof -traces`: each non-zero sample's stack (root first, function names) with its value,
/// equal stacks added up.
fn pprof_traces(file: &Path, metric: Metric) -> BTreeMap<Vec<String>, u64> {
    let text = pprof_tool(file, metric, &["-traces"]);
    let mut out = BTreeMap::new();
    for block in text.split("-----------+-------------------------------------------------------").skip(1) {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let Some(first) = lines.next() else { continue };
        let first = first.trim_start();
        let (value, leaf) = first.split_once("   ").unwrap_or_else(|| panic!("bad trace line: {first}"));
        let value = pprof_value(value.trim());
        let mut stack: Vec<String> =
            std::iter::once(leaf.trim().to_string()).chain(lines.map(|l| l.trim().to_string())).collect();
        stack.reverse();
        if value > 0 {
            *out.entry(stack).or_insert(0) += value;
        }
    }
    out
}

/// The same from kprof's collapsed stacks of `profile` under `metric`.
fn kprof_stacks(profile: &Profile, metric: Metric) -> BTreeMap<Vec<String>, u64> {
    let text = String::from_utf8(collapsed::render(profile, metric)).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        *out.entry(stack.split(';').map(str::to_string).collect()).or_insert(0) += number(count);
    }
    out
}

/// `go tool pprof` on the run's pprof file agrees with `kprof report` on its JSON, for every metric: the
/// same total, every function's flat (self) and cum (total, a function counted once per stack) values,
/// the same top function; and `-traces` holds kprof's stacks with their values.
fn check_with_go_pprof(run: &RunFiles) {
    let profile = read_profile(&run.json).unwrap();
    assert!(profile.metrics().len() >= 2, "{}: {:?}", run.what, profile.metrics());
    for metric in profile.metrics() {
        let what = format!("{} {}", run.what, metric.name());
        let report = kprof_report(&run.json, metric);
        let top = pprof_top(&run.pprof, metric);
        assert!(report.total > 0, "{what}: empty");
        assert_eq!(top.total, report.total, "{what}: pprof's total against kprof report's");
        let flat: BTreeMap<String, u64> =
            top.rows.iter().filter(|r| r.1 > 0).map(|(n, f, _)| (n.clone(), *f)).collect();
        let cum: BTreeMap<String, u64> = top.rows.iter().map(|(n, _, c)| (n.clone(), *c)).collect();
        assert_eq!(flat, report.self_counts, "{what}: pprof flat against kprof's self counts");
        assert_eq!(cum, report.total_counts, "{what}: pprof cum against kprof's total counts");
        // The top of both lists: the same function, or one with the same value when they tie.
        let (pprof_first, pprof_flat, _) = &top.rows[0];
        assert_eq!(report.self_counts[&report.by_self[0]], *pprof_flat, "{what}: top values");
        assert_eq!(report.self_counts.get(pprof_first), Some(pprof_flat), "{what}: pprof's top function");
        eprintln!(
            "{what}: total {} in both; top {} = {pprof_flat} in both; {} functions agree",
            report.total,
            report.by_self[0],
            flat.len()
        );

        let traces = pprof_traces(&run.pprof, metric);
        assert_eq!(traces, kprof_stacks(&profile, metric), "{what}: pprof -traces against kprof's stacks");
    }
}

/// Where scripts/install-test-deps put speedscope's package.
fn speedscope_dir() -> PathBuf {
    if let Ok(p) = std::env::var("KPROF_SPEEDSCOPE") {
        return PathBuf::from(p);
    }
    let deps = std::env::var("KPROF_TEST_DEPS").map(PathBuf::from).unwrap_or_else(|_| {
        let cache = std::env::var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache"));
        cache.join("kprof-test-deps")
    });
    let dir = deps.join("speedscope/node_modules/speedscope");
    assert!(
        dir.join("dist/release/index.html").exists(),
        "speedscope's web app is not in {}: run scripts/install-test-deps (npm install speedscope), or point \
         KPROF_SPEEDSCOPE at its package",
        dir.display()
    );
    dir
}

fn base64(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(DIGITS[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Opens the run's collapsed stacks in speedscope's web app as its command line does (a script that
/// hands the file to `speedscope.loadFileFromBase64`, named by `#localProfilePath=`), in its sandwich
/// view, whose table lists every function's total and self weight. They must agree with `kprof report`
/// under the metric the collapsed stacks carry, and the app must log no error.
fn check_with_speedscope(run: &RunFiles, scratch: &Path) {
    let profile = read_profile(&run.json).unwrap();
    let metric = profile.default_metric();
    let name = run.collapsed.file_name().unwrap().to_str().unwrap();
    let loader = scratch.join(format!("{name}.js"));
    let bytes = std::fs::read(&run.collapsed).unwrap();
    std::fs::write(&loader, format!("speedscope.loadFileFromBase64({name:?}, {:?})", base64(&bytes))).unwrap();
    let url = format!(
        "file://{}#localProfilePath={}&view=sandwich",
        speedscope_dir().join("dist/release/index.html").display(),
        loader.display()
    );
    let page = load_page(&url, &scratch.join("chromium-speedscope"));
    let errors: Vec<&String> = page
        .console
        .iter()
        .filter(|l| l.contains("rror") || l.contains("Uncaught") || l.contains("Ignoring invalid"))
        .collect();
    assert!(errors.is_empty(), "{}: speedscope logged errors:\n{errors:?}", run.what);
    assert!(
        page.dom.contains(&format!("<title>{name} - speedscope</title>")),
        "{}: not loaded:\n{}",
        run.what,
        page.dom
    );

    // Rows: <tr><td>TOTAL (P%)...</td><td>SELF (P%)...</td><td>...NAME</td></tr>; the table shows the
    // rows that fit the window, heaviest self weight first.
    let strip = |html: &str| -> String {
        let mut text = String::new();
        let mut in_tag = false;
        for c in html.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => text.push(c),
                _ => {}
            }
        }
        text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&quot;", "\"")
    };
    let rows: Vec<(String, u64, u64)> = page
        .dom
        .split("<tr")
        .filter(|r| r.contains("<td"))
        .map(|r| {
            let cells: Vec<String> = r.split("<td").skip(1).map(|c| strip(&format!("<td{c}"))).collect();
            let value = |c: &str| number(c.split(" (").next().unwrap().trim());
            (cells[2].trim().to_string(), value(&cells[0]), value(&cells[1]))
        })
        .collect();
    assert!(rows.len() >= 5, "{}: speedscope's sandwich table has {} rows", run.what, rows.len());
    let report = kprof_report(&run.json, metric);
    for (name, total, self_weight) in &rows {
        assert_eq!(report.self_counts.get(name).copied().unwrap_or(0), *self_weight, "{}: self of {name}", run.what);
        assert_eq!(report.total_counts.get(name), Some(total), "{}: total of {name}", run.what);
    }
    assert_eq!(rows[0].2, report.self_counts[&report.by_self[0]], "{}: the heaviest self weight", run.what);
    eprintln!(
        "{}: speedscope shows {} functions of {} as kprof report does; first {} (self {})",
        run.what,
        rows.len(),
        metric.name(),
        rows[0].0,
        rows[0].2
    );
}

#[test]
fn go_pprof_and_speedscope_read_real_profiles_as_kprof_report_does() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("readers-{}", jdk.label()));
        let cpu = profile_split3(jdk, &dir, "asgct", "mode=asgct,interval=1ms", "2");
        let multi = profile_split3(jdk, &dir, "bytecode-asgct", "mode=bytecode+asgct,interval=1ms", "1");
        let metrics = read_profile(&multi.json).unwrap().metrics();
        for m in [Metric::BytecodeSamples, Metric::Bytecodes, Metric::Samples, Metric::Cpu] {
            assert!(metrics.contains(&m), "{}: {metrics:?}", multi.what);
        }
        // Wall-clock samples (with their state labels) and exact call counts through the same readers.
        let wall = profile_split3(jdk, &dir, "wall", "mode=wall,interval=5ms", "1");
        let exact = profile_split3(jdk, &dir, "exact", "mode=exact", "0.5");
        for run in [&cpu, &multi, &wall, &exact] {
            check_with_go_pprof(run);
            check_with_speedscope(run, &dir);
        }
    });
}

/// The result line of a workload (`NAME: ok k=v ...`) without its timings (`*_s`), which differ run to run.
fn workload_result(stdout: &str, name: &str) -> String {
    let line =
        stdout.lines().find(|l| l.starts_with(&format!("{name}: ok"))).unwrap_or_else(|| panic!("{name}: {stdout}"));
    line.split_whitespace()
        .filter(|t| !t.split_once('=').is_some_and(|(k, _)| k.ends_with("_s")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the workload script `name` with `agent` options (none: without the agent).
fn run_workload(jdk: &Jdk, name: &str, agent: Option<&str>) -> Run {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var("KPROF_WORKLOADS").map_or_else(|_| root.join("../shared/workloads"), PathBuf::from);
    let mut cmd = Command::new(dir.join(format!("{name}.sh")));
    cmd.env("JAVA", jdk.java());
    // A third of the default requests: the profile still has thousands of contexts, and the test stays short.
    cmd.env("TOMCAT_REQUESTS", "500");
    match agent {
        Some(opts) => cmd.env("JAVA_OPTS", format!("-agentpath:{}={opts}", agent_lib().display())),
        None => cmd.env_remove("JAVA_OPTS"),
    };
    let run = run_with_timeout(cmd, std::time::Duration::from_secs(600));
    assert!(run.status.success(), "{}: {name} failed:\n{}\n{}", jdk.label(), run.stdout, run.stderr);
    run
}

/// A real workload (Tomcat serving its examples to ApacheBench: threads, allocation, locks) with CPU,
/// allocation and lock profiling at once prints the result it prints without kprof, and its JSON, pprof
/// and flame graph carry all six metrics: Go's pprof agrees with `kprof report` on each, and the flame
/// graph's metric selector offers each in Chromium.
#[test]
fn a_real_workload_profiled_for_cpu_allocation_and_locks_at_once_is_unharmed_and_every_output_has_every_metric() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("readers-workload-{}", jdk.label()));
        let files = RunFiles {
            what: format!("{} tomcat asgct+alloc+lock", jdk.label()),
            json: dir.join("t.json"),
            pprof: dir.join("t.pb.gz"),
            collapsed: dir.join("t.collapsed"),
        };
        let html = dir.join("t.html");
        let opts = format!(
            "mode=asgct+alloc+lock,interval=5ms,file={},file={},file={},file={}",
            files.json.display(),
            files.pprof.display(),
            files.collapsed.display(),
            html.display()
        );
        let without = run_workload(jdk, "tomcat", None);
        let with = run_workload(jdk, "tomcat", Some(&opts));
        assert_eq!(
            workload_result(&with.stdout, "tomcat"),
            workload_result(&without.stdout, "tomcat"),
            "{}",
            files.what
        );
        // The workload keeps the JVM's output in its own log; the profile's metrics show the agent ran.
        let metrics = read_profile(&files.json).unwrap().metrics();
        let all =
            [Metric::Samples, Metric::Cpu, Metric::AllocCount, Metric::AllocBytes, Metric::LockCount, Metric::LockNs];
        assert_eq!(metrics, all, "{}", files.what);
        check_with_go_pprof(&files);
        check_with_speedscope(&files, &dir);
        let dom = dump_dom(&format!("file://{}", html.display()), &dir.join("chromium-profile"));
        for m in all {
            assert!(
                dom.contains(&format!(">{} (", m.name())),
                "{}: no {} in the metric selector",
                files.what,
                m.name()
            );
        }
    });
}
