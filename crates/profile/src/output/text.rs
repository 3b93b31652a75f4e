//! The text report of `kprof report` (hprof's `cpu=samples` table is the model): a header with the
//! run's facts, the top methods by self and by total count, and the hottest stacks.

use crate::model::{FrameKind, Meta, Metric, Profile, Unit};
use std::collections::HashMap;
use std::fmt::Write;

/// How many rows each table shows by default.
pub const DEFAULT_TOP: usize = 30;
/// Frames shown per stack in the hottest-stacks table.
const STACK_FRAMES: usize = 40;

/// A table row: rank, two percentages, count, name (hprof's layout).
macro_rules! row {
    ($out:expr, $rank:expr, $p1:expr, $p2:expr, $count:expr, $name:expr) => {
        writeln!($out, "{:4} {:6.2}% {:6.2}% {:>16}  {}", $rank, $p1, $p2, $count, $name)
    };
}

fn header(out: &mut String, p1: &str, p2: &str, last: &str) {
    let _ = writeln!(out, "rank {p1:>7} {p2:>7} {:>16}  {last}", "count");
}

/// Spaces up to the name column of a row.
const NAME_COLUMN: usize = 4 + 1 + 7 + 1 + 7 + 1 + 16 + 2;

/// One method's counts under a metric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodCounts {
    /// The display name.
    pub name: String,
    pub kind: FrameKind,
    /// Σ self counts of the contexts whose leaf is this method.
    pub self_count: u64,
    /// Σ counts of the stacks that contain this method, each stack counted once however often the
    /// method recurs in it.
    pub total_count: u64,
}

/// Per-method self and total counts under `metric`, by display name, the `[root]` excluded, heaviest
/// self count first (ties by total, then name).
pub fn method_counts(profile: &Profile, metric: Metric) -> Vec<MethodCounts> {
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut methods: Vec<MethodCounts> = Vec::new();
    let method_of_frame: Vec<usize> = profile
        .frames
        .iter()
        .map(|f| {
            let name = f.display_name();
            *ids.entry(name.clone()).or_insert_with(|| {
                methods.push(MethodCounts { name, kind: f.kind, self_count: 0, total_count: 0 });
                methods.len() - 1
            })
        })
        .collect();
    let totals = profile.totals(metric);
    // Depth-first with enter/exit events; `on_stack[m]` counts the occurrences of method m on the
    // current path, so only its outermost occurrence adds the inclusive count.
    let mut on_stack = vec![0u32; methods.len()];
    let mut work: Vec<(u32, bool)> = profile.nodes[0].children.iter().rev().map(|&c| (c, false)).collect();
    while let Some((node, leaving)) = work.pop() {
        let m = method_of_frame[profile.nodes[node as usize].frame as usize];
        if leaving {
            on_stack[m] -= 1;
            continue;
        }
        methods[m].self_count += profile.value(node, metric);
        if on_stack[m] == 0 {
            methods[m].total_count += totals[node as usize];
        }
        on_stack[m] += 1;
        work.push((node, true));
        work.extend(profile.nodes[node as usize].children.iter().rev().map(|&c| (c, false)));
    }
    // The root node itself is not visited: `[root]` appears only if a frame of that name sits below it.
    methods.retain(|m| m.self_count > 0 || m.total_count > 0);
    methods.sort_by(|a, b| {
        b.self_count.cmp(&a.self_count).then(b.total_count.cmp(&a.total_count)).then(a.name.cmp(&b.name))
    });
    methods
}

/// `1234567` → `1,234,567`.
pub fn thousands(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Nanoseconds as a short duration: `850 ns`, `12.5 µs`, `3.20 ms`, `1.234 s`, `2 min 5.0 s`.
pub fn duration(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else if ns < 120_000_000_000 {
        format!("{:.3} s", f / 1e9)
    } else {
        format!("{} min {:.1} s", ns / 60_000_000_000, (ns % 60_000_000_000) as f64 / 1e9)
    }
}

/// A count under `metric` with its unit: `1,234 samples`, `12,000,000 cpu ns (12.00 ms)`,
/// `1,048,576 alloc_bytes (1.0 MiB)`.
pub fn amount(v: u64, metric: Metric) -> String {
    let name = metric.name();
    match metric.unit() {
        Unit::Nanoseconds => format!("{} {name} ns ({})", thousands(v), duration(v)),
        Unit::Bytes => format!("{} {name} ({})", thousands(v), bytes(v)),
        Unit::Count | Unit::Bytecodes => format!("{} {name}", thousands(v)),
    }
}

/// Bytes as a short size: `512 B`, `1.5 KiB`, `12.0 MiB`, `3.25 GiB`.
pub fn bytes(v: u64) -> String {
    let f = v as f64;
    if v < 1 << 10 {
        format!("{v} B")
    } else if v < 1 << 20 {
        format!("{:.1} KiB", f / 1024.0)
    } else if v < 1 << 30 {
        format!("{:.1} MiB", f / 1048576.0)
    } else {
        format!("{:.2} GiB", f / 1073741824.0)
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD hh:mm:ss UTC`.
pub fn utc_time(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian), counting in 400-year eras that
    // start on March 1st so leap days fall at the end of a year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The run's facts in one line (`timer perf; interval 1.00 ms; started ...; duration ...; jvm ...`),
/// empty when the profile has none (e.g. read from collapsed stacks).
pub fn run_summary(meta: &Meta) -> String {
    let mut parts = Vec::new();
    if !meta.timer.is_empty() {
        parts.push(format!("timer {}", meta.timer));
    }
    if meta.interval > 0 {
        parts.push(match meta.mode.as_str() {
            "bytecode" => format!("granularity {} bytecodes", thousands(meta.interval)),
            _ => format!("interval {}", duration(meta.interval)),
        });
    }
    if let Some(gran) = meta.counters.get("gran").filter(|_| meta.mode != "bytecode") {
        parts.push(format!("granularity {} bytecodes", thousands(*gran)));
    }
    if meta.start_unix_ms > 0 {
        parts.push(format!("started {}", utc_time(meta.start_unix_ms)));
    }
    if meta.duration_ns > 0 {
        parts.push(format!("duration {}", duration(meta.duration_ns)));
    }
    if !meta.jvm.is_empty() {
        parts.push(format!("jvm {}", meta.jvm));
    }
    parts.join("; ")
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The report under `metric`, each table at most `top` rows.
pub fn render(profile: &Profile, metric: Metric, top: usize) -> String {
    let meta = &profile.meta;
    let metric_name = metric.name();
    let totals = profile.totals(metric);
    let total = totals[0];
    let mut out = String::new();
    let mode = if meta.mode.is_empty() { "unknown" } else { &meta.mode };
    let _ = writeln!(out, "kprof report: mode {mode}, metric {metric_name}, total {}", amount(total, metric));
    let run = run_summary(meta);
    if !run.is_empty() {
        let _ = writeln!(out, "run: {run}");
    }
    // Every metric the profile has (the chosen one always).
    let mut metrics = profile.metrics();
    if !metrics.contains(&metric) {
        metrics.insert(0, metric);
    }
    let all: Vec<String> = metrics
        .into_iter()
        .map(|m| amount(if m == metric { total } else { profile.column(m).map_or(0, |c| c.iter().sum()) }, m))
        .collect();
    let _ = writeln!(out, "totals: {}", all.join("; "));
    if !meta.counters.is_empty() {
        let counters: Vec<String> = meta.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "counters: {}", counters.join(" "));
    }
    let merged = profile.merged_by_frame();
    let with_counts = (1..merged.nodes.len() as u32).filter(|&n| merged.value(n, metric) > 0).count();
    let methods = method_counts(profile, metric);
    let _ = writeln!(
        out,
        "contexts: {} ({} with {metric_name}; callsites merged), methods: {}",
        thousands(merged.nodes.len() as u64 - 1),
        thousands(with_counts as u64),
        thousands(methods.len() as u64)
    );
    if total == 0 {
        let have: Vec<&str> = profile.metrics().iter().map(|m| m.name()).collect();
        let _ = writeln!(out, "\nno {metric_name} in this profile (it has: {})", have.join(", "));
        return out;
    }

    let _ = writeln!(out, "\nTOP METHODS BY SELF {metric_name} (total = {})", thousands(total));
    header(&mut out, "self", "accum", "method");
    let mut accum = 0u64;
    for (i, m) in methods.iter().filter(|m| m.self_count > 0).take(top).enumerate() {
        accum += m.self_count;
        let (s, a) = (percent(m.self_count, total), percent(accum, total));
        let _ = row!(out, i + 1, s, a, thousands(m.self_count), m.name);
    }

    let mut by_total: Vec<&MethodCounts> = methods.iter().filter(|m| m.kind != FrameKind::Thread).collect();
    by_total.sort_by(|a, b| b.total_count.cmp(&a.total_count).then(b.self_count.cmp(&a.self_count)));
    let _ = writeln!(out, "\nTOP METHODS BY TOTAL {metric_name} (a method counts once per stack; threads left out)");
    header(&mut out, "total", "self", "method");
    for (i, m) in by_total.iter().take(top).enumerate() {
        let (t, s) = (percent(m.total_count, total), percent(m.self_count, total));
        let _ = row!(out, i + 1, t, s, thousands(m.total_count), m.name);
    }

    let _ = writeln!(out, "\nHOTTEST STACKS by self {metric_name} (callsites merged; leaf first)");
    header(&mut out, "self", "accum", "stack");
    let mut hot: Vec<u32> = (1..merged.nodes.len() as u32).filter(|&n| merged.value(n, metric) > 0).collect();
    hot.sort_by_key(|&n| std::cmp::Reverse(merged.value(n, metric)));
    hot.truncate(top);
    let parents = merged.parents();
    let names = super::display_names(&merged);
    let indent = " ".repeat(NAME_COLUMN);
    let mut accum = 0u64;
    for (i, &n) in hot.iter().enumerate() {
        let v = merged.value(n, metric);
        accum += v;
        let mut path = merged.path(n, &parents);
        path.reverse();
        let leaf = &names[merged.nodes[n as usize].frame as usize];
        let _ = row!(out, i + 1, percent(v, total), percent(accum, total), thousands(v), leaf);
        for &f in path.iter().take(STACK_FRAMES).skip(1) {
            let _ = writeln!(out, "{indent}{}", names[merged.nodes[f as usize].frame as usize]);
        }
        if path.len() > STACK_FRAMES {
            let _ = writeln!(out, "{indent}... {} more frames", path.len() - STACK_FRAMES);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Frame;
    use crate::output::collapsed;

    #[test]
    fn recursion_counts_once_in_totals() {
        let p = collapsed::parse("main;f;f;f 4\nmain;f;g 2\nmain;g;f 1\nmain 3\n").unwrap();
        let m = method_counts(&p, Metric::Samples);
        let get = |name: &str| m.iter().find(|x| x.name == name).unwrap().clone();
        assert_eq!((get("main").self_count, get("main").total_count), (3, 10));
        assert_eq!((get("f").self_count, get("f").total_count), (5, 7));
        assert_eq!((get("g").self_count, get("g").total_count), (2, 3));
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].name, "f");
    }

    #[test]
    fn golden_report() {
        let mut p = collapsed::parse("main;f;f;f 4\nmain;f;g 2\nmain;g;f 1\nmain 3\n").unwrap();
        p.meta.counters.insert("dropped".into(), 0);
        let text = render(&p, Metric::Samples, 2);
        let expected = "\
kprof report: mode collapsed, metric samples, total 10 samples
totals: 10 samples
counters: dropped=0
contexts: 7 (4 with samples; callsites merged), methods: 3

TOP METHODS BY SELF samples (total = 10)
rank    self   accum            count  method
   1  50.00%  50.00%                5  f
   2  30.00%  80.00%                3  main

TOP METHODS BY TOTAL samples (a method counts once per stack; threads left out)
rank   total    self            count  method
   1 100.00%  30.00%               10  main
   2  70.00%  50.00%                7  f

HOTTEST STACKS by self samples (callsites merged; leaf first)
rank    self   accum            count  stack
   1  40.00%  40.00%                4  f
                                       f
                                       f
                                       main
   2  30.00%  70.00%                3  main
";
        assert_eq!(text, expected);
    }

    #[test]
    fn header_shows_run_facts_and_cpu_time() {
        let mut p = collapsed::parse("a.B.c()void 3\n").unwrap();
        p.meta = Meta {
            mode: "asgct".into(),
            interval: 1_000_000,
            timer: "perf".into(),
            jvm: "OpenJDK 21".into(),
            start_unix_ms: 1_715_000_000_000,
            duration_ns: 2_500_000_000,
            ..Meta::default()
        };
        p.add(1, Metric::Cpu, 3_000_000);
        let text = render(&p, Metric::Cpu, 5);
        assert!(text.starts_with("kprof report: mode asgct, metric cpu, total 3,000,000 cpu ns (3.00 ms)\n"), "{text}");
        assert!(text.contains("totals: 3 samples; 3,000,000 cpu ns (3.00 ms)\n"), "{text}");
        assert!(
            text.contains(
                "run: timer perf; interval 1.00 ms; started 2024-05-06 12:53:20 UTC; duration 2.500 s; jvm OpenJDK 21\n"
            ),
            "{text}"
        );
        assert!(text.contains("100.00%"));
    }

    #[test]
    fn an_empty_metric_says_so() {
        let p = collapsed::parse("a 1\n").unwrap();
        let text = render(&p, Metric::Calls, 5);
        assert!(text.contains("no calls in this profile (it has: samples)"), "{text}");
    }

    #[test]
    fn helpers_format_numbers_and_dates() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(1_500), "1.5 µs");
        assert_eq!(duration(10_000_000), "10.00 ms");
        assert_eq!(duration(130_000_000_000), "2 min 10.0 s");
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_time(1_709_251_199_000), "2024-02-29 23:59:59 UTC");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.00 GiB");
    }

    #[test]
    fn deep_stacks_are_cut_and_do_not_recurse() {
        let mut p = Profile::new(Meta::default(), &[Metric::Samples]);
        let f = p.intern(Frame::java("A", "r", "()V"));
        let mut n = 0;
        for _ in 0..100_000 {
            n = p.add_child(n, f, 1);
        }
        p.add(n, Metric::Samples, 1);
        let text = render(&p, Metric::Samples, 3);
        assert!(text.contains("... 99960 more frames"), "{}", &text[..text.len().min(2000)]);
        let m = method_counts(&p, Metric::Samples);
        assert_eq!((m[0].self_count, m[0].total_count), (1, 1));
    }
}
