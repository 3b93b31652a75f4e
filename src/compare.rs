//! `kprof compare A B [--metric M] [--top N] [--only PREFIX]`: the overlap percentage of two profiles
//! (JSON or collapsed stacks) and the calling contexts that differ most, optionally projected onto the
//! frames whose names start with PREFIX; `--html` and `--collapsed` also write the difference as a
//! differential flame graph and as two-column collapsed stacks. The computation is in
//! [`kprof_profile::output::compare`].

use crate::report::{option_value, parse_metric, parse_top};
use kprof_profile::output::compare::{
    compare_with, difference_collapsed, union_tree, CompareOptions, Comparison, ContextShare,
};
use kprof_profile::output::text::thousands;
use kprof_profile::output::{html, read_profile, write_atomic};
use kprof_profile::{Metric, Profile};
use std::path::Path;

const USAGE: &str = "usage: kprof compare A B [--metric M] [--metric-a M] [--metric-b M] [--top N] [--callsites] \
                     [--only PREFIX]... [--json] [--html FILE] [--signatures] [--collapsed FILE]";
const DEFAULT_TOP: usize = 20;

struct Args {
    files: Vec<String>,
    metric_a: Option<Metric>,
    metric_b: Option<Metric>,
    top: usize,
    callsites: bool,
    json: bool,
    /// Frame-name prefixes the contexts are projected onto (`--only`, repeatable).
    only: Vec<String>,
    /// Where to write the differential flame graph (`--html`).
    html: Option<String>,
    /// Frames of the flame graph named with their signatures (`--signatures`).
    signatures: bool,
    /// Where to write the difference as two-column collapsed stacks (`--collapsed`).
    collapsed: Option<String>,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        files: Vec::new(),
        metric_a: None,
        metric_b: None,
        top: DEFAULT_TOP,
        callsites: false,
        json: false,
        only: Vec::new(),
        html: None,
        signatures: false,
        collapsed: None,
    };
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = option_value(args, &mut i, "--metric")? {
            let m = parse_metric(v)?;
            (a.metric_a, a.metric_b) = (Some(m), Some(m));
        } else if let Some(v) = option_value(args, &mut i, "--metric-a")? {
            a.metric_a = Some(parse_metric(v)?);
        } else if let Some(v) = option_value(args, &mut i, "--metric-b")? {
            a.metric_b = Some(parse_metric(v)?);
        } else if let Some(v) = option_value(args, &mut i, "--top")? {
            a.top = parse_top(v)?;
        } else if let Some(v) = option_value(args, &mut i, "--only")? {
            if v.is_empty() {
                return Err("--only needs a frame-name prefix".into());
            }
            a.only.push(v.to_string());
        } else if let Some(v) = option_value(args, &mut i, "--html")? {
            a.html = Some(output_path("--html", v)?);
        } else if let Some(v) = option_value(args, &mut i, "--collapsed")? {
            a.collapsed = Some(output_path("--collapsed", v)?);
        } else if args[i] == "--callsites" {
            a.callsites = true;
        } else if args[i] == "--signatures" {
            a.signatures = true;
        } else if args[i] == "--json" {
            a.json = true;
        } else if args[i].starts_with('-') && args[i] != "-" {
            return Err(format!("unknown option '{}'", args[i]));
        } else {
            a.files.push(args[i].clone());
        }
        i += 1;
    }
    if a.files.len() != 2 {
        return Err(format!("two profiles expected, got {}", a.files.len()));
    }
    Ok(a)
}

fn output_path(option: &str, v: &str) -> Result<String, String> {
    if v.is_empty() {
        return Err(format!("{option} needs a file name"));
    }
    Ok(v.to_string())
}

fn describe(label: &str, file: &str, p: &Profile, metric: Metric, total: u64, contexts: usize) -> String {
    format!(
        "{label}: {file} (mode {}): {} {} in {} contexts",
        if p.meta.mode.is_empty() { "unknown" } else { &p.meta.mode },
        thousands(total),
        metric.name(),
        thousands(contexts as u64)
    )
}

/// A context's label with the middle of long paths elided (`--json` has them whole).
fn short_label(d: &ContextShare) -> String {
    const HEAD: usize = 2;
    const TAIL: usize = 4;
    if d.path.len() <= HEAD + TAIL + 1 {
        return d.label();
    }
    let full = d.label();
    let parts: Vec<&str> = full.split(';').collect();
    format!(
        "{};...{} frames...;{}",
        parts[..HEAD].join(";"),
        parts.len() - HEAD - TAIL,
        parts[parts.len() - TAIL..].join(";")
    )
}

fn text_output(args: &Args, a: &Profile, b: &Profile, c: &Comparison) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "overlap: {:.2}%", c.overlap_percent);
    let _ = writeln!(out, "{}", describe("A", &args.files[0], a, c.metric_a, c.total_a, c.contexts_a));
    let _ = writeln!(out, "{}", describe("B", &args.files[1], b, c.metric_b, c.total_b, c.contexts_b));
    let _ = writeln!(
        out,
        "contexts in both: {} (holding {:.2}% of A, {:.2}% of B); callsites {}",
        thousands(c.common as u64),
        100.0 * c.common_share_a,
        100.0 * c.common_share_b,
        if c.callsites { "compared" } else { "ignored" }
    );
    if !args.only.is_empty() {
        let _ = writeln!(
            out,
            "projected onto frames starting with {}; left out (no such frame on the path): {} of A, {} of B",
            args.only.join(" or "),
            thousands(c.left_out_a),
            thousands(c.left_out_b)
        );
    }
    if c.differ_most.is_empty() {
        let _ = writeln!(out, "\nno context differs in share");
        return out;
    }
    let _ = writeln!(
        out,
        "\nCONTEXTS THAT DIFFER MOST (share of each profile's total; context root first, long ones elided)"
    );
    let _ = writeln!(out, "rank    A rce    B rce     diff  context");
    for (i, d) in c.differ_most.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:4} {:7.3}% {:7.3}% {:+7.3}%  {}",
            i + 1,
            100.0 * d.rce_a,
            100.0 * d.rce_b,
            100.0 * (d.rce_a - d.rce_b),
            short_label(d)
        );
    }
    out
}

fn json_output(args: &Args, c: &Comparison) -> String {
    let contexts: Vec<serde_json::Value> = c
        .differ_most
        .iter()
        .map(|d| {
            serde_json::json!({
                "context": d.path, "callsites": d.callsites,
                "count_a": d.count_a, "count_b": d.count_b, "rce_a": d.rce_a, "rce_b": d.rce_b,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "a": args.files[0], "b": args.files[1],
        "metric_a": c.metric_a.name(), "metric_b": c.metric_b.name(),
        "callsites": c.callsites,
        "only": args.only, "left_out_a": c.left_out_a, "left_out_b": c.left_out_b,
        "overlap_percent": c.overlap_percent,
        "total_a": c.total_a, "total_b": c.total_b,
        "contexts_a": c.contexts_a, "contexts_b": c.contexts_b, "common": c.common,
        "common_share_a": c.common_share_a, "common_share_b": c.common_share_b,
        "differ_most": contexts,
    });
    format!("{doc}\n")
}

/// Writes the differential flame graph and collapsed difference asked for, saying where on stderr.
fn write_difference(args: &Args, a: &Profile, metric_a: Metric, b: &Profile, metric_b: Metric) -> Result<(), String> {
    if args.html.is_none() && args.collapsed.is_none() {
        return Ok(());
    }
    let tree = union_tree(a, metric_a, b, metric_b, &args.only);
    let label = |f: &str| Path::new(f).file_name().map_or(f.to_string(), |n| n.to_string_lossy().into_owned());
    let (label_a, label_b) = (label(&args.files[0]), label(&args.files[1]));
    let mut outputs: Vec<(&String, Vec<u8>, &str)> = Vec::new();
    if let Some(path) = &args.html {
        let side_a = html::Side { profile: a, metric: metric_a, label: &label_a };
        let side_b = html::Side { profile: b, metric: metric_b, label: &label_b };
        let naming = if args.signatures { html::FrameNames::Signatures } else { html::FrameNames::Short };
        outputs.push((path, html::render_difference(&tree, &side_a, &side_b, naming), "differential flame graph"));
    }
    if let Some(path) = &args.collapsed {
        outputs.push((path, difference_collapsed(&tree), "collapsed difference"));
    }
    for (path, bytes, what) in outputs {
        let written = write_atomic(Path::new(path), &bytes).map_err(|e| format!("cannot write {path}: {e}"))?;
        eprintln!("kprof compare: wrote the {what} to {}", written.display());
    }
    Ok(())
}

/// Runs `kprof compare ARGS`: 0 on success, 2 on bad arguments, 1 when a profile cannot be read or has
/// no counts under the metric.
pub fn main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "{USAGE}\n  --metric M            the counter of both profiles: {} (default: each run's metric)\n  \
             --metric-a/-b M       the counter of one side (e.g. bytecode-mode samples against exact bytecodes)\n  \
             --top N               contexts listed (default {DEFAULT_TOP})\n  \
             --callsites           contexts that differ only by callsite count as different\n  \
             --only PREFIX         keep only frames whose names start with PREFIX (repeatable); others count\n                        \
             for the nearest kept frame above them, paths without one are left out\n  \
             --json                print the result as JSON\n  \
             --html FILE           also write a differential flame graph: B's frames coloured by the change of\n                        \
             their share of the total from A (grown, shrunk, new; frames only in A drawn hatched)\n  \
             --signatures          name its frames with their signatures (default: Class.method)\n  \
             --collapsed FILE      also write the difference as collapsed stacks with two counts, `stack A B`\n                        \
             (A's counts scaled to B's total), which flamegraph.pl draws as a differential flame graph",
            Metric::ACCEPTED
        );
        return 0;
    }
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kprof compare: {e} ({USAGE})");
            return 2;
        }
    };
    let mut profiles = Vec::new();
    for f in &args.files {
        match read_profile(Path::new(f)) {
            Ok(p) => profiles.push(p),
            Err(e) => {
                eprintln!("kprof compare: {e}");
                return 1;
            }
        }
    }
    let (a, b) = (&profiles[0], &profiles[1]);
    let resolve = |p: &Profile, file: &str, m: Option<Metric>| match m {
        Some(m) => p.resolve_metric(m).map_err(|e| format!("kprof compare: {file}: {e}")),
        None => Ok(p.default_metric()),
    };
    let (metric_a, metric_b) =
        match (resolve(a, &args.files[0], args.metric_a), resolve(b, &args.files[1], args.metric_b)) {
            (Ok(ma), Ok(mb)) => (ma, mb),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("{e}");
                return 1;
            }
        };
    let options = CompareOptions { callsites: args.callsites, top: args.top, only: args.only.clone() };
    let c = compare_with(a, metric_a, b, metric_b, &options);
    for (file, total, p, m) in [(&args.files[0], c.total_a, a, metric_a), (&args.files[1], c.total_b, b, metric_b)] {
        if total == 0 {
            let have: Vec<&str> = p.metrics().iter().map(|m| m.name()).collect();
            eprintln!("kprof compare: {file} has no {} (it has: {})", m.name(), have.join(", "));
            return 1;
        }
    }
    if let Err(e) = write_difference(&args, a, metric_a, b, metric_b) {
        eprintln!("kprof compare: {e}");
        return 1;
    }
    if args.json {
        print!("{}", json_output(&args, &c));
    } else {
        print!("{}", text_output(&args, a, b, &c));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::strings;

    #[test]
    fn parses_options() {
        let a =
            parse_args(&strings(&["a.json", "b.collapsed", "--metric=calls", "--metric-b", "samples", "--callsites"]))
                .unwrap();
        assert_eq!(a.files, ["a.json", "b.collapsed"]);
        assert_eq!((a.metric_a, a.metric_b), (Some(Metric::Calls), Some(Metric::Samples)));
        assert!(a.callsites && !a.json);
        assert_eq!(a.top, DEFAULT_TOP);
        assert!(a.only.is_empty());
        let a = parse_args(&strings(&["a", "b", "--only", "kprof.harness.", "--only=java.util."])).unwrap();
        assert_eq!(a.only, ["kprof.harness.", "java.util."]);
        assert_eq!((a.html, a.collapsed), (None, None));
        let a = parse_args(&strings(&["a", "b", "--html", "d.html", "--collapsed=d.txt"])).unwrap();
        assert_eq!((a.html.as_deref(), a.collapsed.as_deref()), (Some("d.html"), Some("d.txt")));
    }

    #[test]
    fn long_contexts_are_elided_in_the_middle() {
        let share = |n: usize| ContextShare {
            path: (0..n).map(|i| format!("f{i}")).collect(),
            callsites: Vec::new(),
            count_a: 1,
            count_b: 0,
            rce_a: 1.0,
            rce_b: 0.0,
        };
        assert_eq!(short_label(&share(7)), "f0;f1;f2;f3;f4;f5;f6");
        assert_eq!(short_label(&share(10)), "f0;f1;...4 frames...;f6;f7;f8;f9");
    }

    #[test]
    fn bad_arguments_exit_2() {
        for args in [
            &["a"][..],
            &["a", "b", "c"][..],
            &["a", "b", "--metric", "x"][..],
            &["a", "b", "--top", "-1"][..],
            &["a", "b", "--what"][..],
            &["a", "b", "--only"][..],
            &["a", "b", "--only="][..],
            &["a", "b", "--html"][..],
            &["a", "b", "--collapsed="][..],
        ] {
            assert!(parse_args(&strings(args)).is_err(), "{args:?}");
            assert_eq!(main(&strings(args)), 2, "{args:?}");
        }
        assert_eq!(main(&strings(&["/nonexistent/a.json", "/nonexistent/b.json"])), 1);
    }
}
