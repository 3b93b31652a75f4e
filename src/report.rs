//! `kprof report FILE [--metric M] [--top N]`: the text report of a profile (JSON or collapsed stacks).

use kprof_profile::output::{read_profile, text};
use kprof_profile::Metric;
use std::path::Path;

const USAGE: &str = "usage: kprof report FILE [--metric M] [--top N]";

/// The value of a `--name VALUE` or `--name=VALUE` option at `args[*i]`, advancing `i` past it.
pub(crate) fn option_value<'a>(args: &'a [String], i: &mut usize, name: &str) -> Result<Option<&'a str>, String> {
    let arg = args[*i].as_str();
    if arg == name {
        *i += 1;
        return args.get(*i).map(|v| Some(v.as_str())).ok_or_else(|| format!("{name} needs a value"));
    }
    Ok(arg.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
}

pub(crate) fn parse_metric(v: &str) -> Result<Metric, String> {
    Metric::parse(v).ok_or_else(|| format!("--metric '{v}' is not one of {}", Metric::ACCEPTED))
}

pub(crate) fn parse_top(v: &str) -> Result<usize, String> {
    v.parse().map_err(|_| format!("--top '{v}' is not a whole number"))
}

struct Args {
    file: String,
    metric: Option<Metric>,
    top: usize,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut file = None;
    let mut metric = None;
    let mut top = text::DEFAULT_TOP;
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = option_value(args, &mut i, "--metric")? {
            metric = Some(parse_metric(v)?);
        } else if let Some(v) = option_value(args, &mut i, "--top")? {
            top = parse_top(v)?;
        } else if args[i].starts_with('-') && args[i] != "-" {
            return Err(format!("unknown option '{}'", args[i]));
        } else if file.is_none() {
            file = Some(args[i].clone());
        } else {
            return Err(format!("one FILE expected, also got '{}'", args[i]));
        }
        i += 1;
    }
    Ok(Args { file: file.ok_or("no FILE given")?, metric, top })
}

/// Runs `kprof report ARGS`: 0 on success, 2 on bad arguments, 1 when the file cannot be read.
pub fn main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "{USAGE}\n  --metric M   the counter the tables show, one the profile has: {} (default: the run's \
             metric; `samples` in a profile without CPU samples means its wall or bytecode samples)\n  \
             --top N      rows per table (default {})",
            Metric::ACCEPTED,
            text::DEFAULT_TOP
        );
        return 0;
    }
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kprof report: {e} ({USAGE})");
            return 2;
        }
    };
    let profile = match read_profile(Path::new(&args.file)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kprof report: {e}");
            return 1;
        }
    };
    let metric = match args.metric.map(|m| profile.resolve_metric(m)) {
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            eprintln!("kprof report: {}: {e}", args.file);
            return 1;
        }
        None => profile.default_metric(),
    };
    print!("{}", text::render(&profile, metric, args.top));
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::strings;

    #[test]
    fn parses_options_in_both_spellings() {
        let a = parse_args(&strings(&["p.json", "--metric", "calls", "--top=5"])).unwrap();
        assert_eq!((a.file.as_str(), a.metric, a.top), ("p.json", Some(Metric::Calls), 5));
        let a = parse_args(&strings(&["--metric=cpu", "p.collapsed"])).unwrap();
        assert_eq!(a.metric, Some(Metric::Cpu));
    }

    #[test]
    fn bad_arguments_are_errors() {
        for (args, want) in [
            (&["p.json", "--metric", "bogus"][..], "--metric 'bogus'"),
            (&["p.json", "--top", "x"][..], "--top 'x'"),
            (&["p.json", "--top"][..], "--top needs a value"),
            (&["p.json", "--frobnicate"][..], "unknown option"),
            (&["a", "b"][..], "one FILE expected"),
            (&[][..], "no FILE"),
        ] {
            let e = parse_args(&strings(args)).err().unwrap();
            assert!(e.contains(want), "{e}");
        }
        assert_eq!(main(&strings(&["--top", "x", "p"])), 2);
        assert_eq!(main(&strings(&["/nonexistent/kprof.json"])), 1);
    }
}
