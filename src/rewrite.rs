//! `kprof rewrite`: shows (and checks) what the agent's class rewriting does to classes.
//!
//! ```text
//! kprof rewrite [--roundtrip] [--mode MODE] [--out DIR] [--budget N] [--policy minimal|agent] INPUT...
//! ```
//! INPUT is a `.class`, `.jar`, `.jmod` or a directory. `--roundtrip` decodes and re-encodes every class without
//! edits and exits non-zero naming each class that differs. `--mode probe` applies the probe rewrite (the
//! default when `--roundtrip` is not given). `--out DIR` writes each rewritten class at its package path under
//! DIR, plus kprof's runtime helper classes, so the directory verifies on its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kprof_classfile::edit::{EditLimits, DEFAULT_BUDGET};
use kprof_classfile::transform::input::{for_each_class, output_path, zip_part, Zip};
use kprof_classfile::transform::natives::wrap_natives;
use kprof_classfile::transform::{Mode, RewriteStats, Rewriter, SkipPolicy};
use kprof_classfile::{roundtrip_rebuild, ClassFile};

const USAGE: &str = "\
usage: kprof rewrite [--roundtrip] [--mode MODE] [--out DIR] [--budget N] [--policy minimal|agent] INPUT...

  INPUT            a .class, .jar, .jmod or a directory of classes
  --roundtrip      decode and re-encode every class without edits; exit 1 naming each class that differs
  --mode MODE      apply the rewrite of MODE (probe: a helper call at every basic block and a prologue that
                   stores a new local; bytecode: what the agent's mode=bytecode does; none: no edit, for
                   control sets); probe is the default unless --roundtrip is given alone
  --out DIR        write each rewritten class at its package path under DIR, with kprof's runtime classes
  --budget N       leave alone methods whose code would cross N bytes (default 8000, HotSpot's HugeMethodLimit)
  --policy P       minimal (skip only what must never change: kprof's own classes, Object.<init>, empty
                   finalize methods; the default of probe and none) or agent (the agent's skip list, the
                   default of bytecode)
  --quiet          print only the summary";

/// The runtime helper classes that rewritten code calls, as built into kprof.
use kprof_runtime::RUNTIME_JAR;

struct Options {
    roundtrip: bool,
    mode: Option<Mode>,
    out: Option<PathBuf>,
    budget: u32,
    policy: SkipPolicy,
    quiet: bool,
    inputs: Vec<PathBuf>,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        roundtrip: false,
        mode: None,
        out: None,
        budget: DEFAULT_BUDGET,
        policy: SkipPolicy::minimal(),
        quiet: false,
        inputs: Vec::new(),
    };
    let mut policy = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--roundtrip" => o.roundtrip = true,
            "--mode" => {
                let v = value("--mode")?;
                o.mode = Some(
                    Mode::parse(&v)
                        .ok_or_else(|| format!("unknown mode '{v}' (accepted: probe, bytecode, exact, none)"))?,
                );
            }
            "--out" => o.out = Some(PathBuf::from(value("--out")?)),
            "--budget" => {
                let v = value("--budget")?;
                o.budget = v.parse().map_err(|_| format!("--budget: '{v}' is not a number"))?;
            }
            "--policy" => {
                policy = Some(match value("--policy")?.as_str() {
                    "minimal" => SkipPolicy::minimal(),
                    "agent" => SkipPolicy::agent(),
                    v => return Err(format!("unknown policy '{v}' (accepted: minimal, agent)")),
                })
            }
            "--quiet" | "-q" => o.quiet = true,
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option '{s}'")),
            s => o.inputs.push(PathBuf::from(s)),
        }
    }
    if o.inputs.is_empty() {
        return Err("no INPUT given".into());
    }
    if o.mode.is_none() && !o.roundtrip {
        o.mode = Some(Mode::Probe);
    }
    if o.out.is_some() && o.mode.is_none() {
        return Err("--out needs --mode".into());
    }
    o.policy = policy.unwrap_or(if matches!(o.mode, Some(Mode::Bytecode | Mode::Exact)) {
        SkipPolicy::agent()
    } else {
        SkipPolicy::minimal()
    });
    Ok(o)
}

/// Runs `kprof rewrite ARGS`.
pub fn main(args: &[String]) -> i32 {
    let o = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            if e.is_empty() {
                println!("{USAGE}");
                return 0;
            }
            eprintln!("kprof rewrite: {e}\n{USAGE}");
            return 2;
        }
    };
    match run(&o) {
        Ok(ok) => {
            if ok {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("kprof rewrite: {e}");
            2
        }
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn run(o: &Options) -> Result<bool, String> {
    let mut ok = true;
    let mut rt_classes = 0u64;
    let mut rt_differ = 0u64;
    let mut rt_bytes = 0u64;
    let mut rt_time = Duration::ZERO;
    let mut stats = RewriteStats::default();
    let mut rw_time = Duration::ZERO;
    let mut rewriter = o.mode.map(|m| Rewriter::new(m, o.policy, EditLimits { budget: o.budget }));
    let mut out = Vec::new();
    let mut rebuilt = Vec::new();
    let mut wrapped_bytes: Vec<u8> = Vec::new();
    let mut stats_natives = 0u64;
    let started = Instant::now();
    for input in &o.inputs {
        let source = input.display().to_string();
        for_each_class(input, &mut |entry, data| {
            if o.roundtrip {
                rt_classes += 1;
                rt_bytes += data.len() as u64;
                rebuilt.clear();
                let t = Instant::now();
                let r = roundtrip_rebuild(data, &mut rebuilt);
                rt_time += t.elapsed();
                match r {
                    Ok(()) if rebuilt == data => {}
                    Ok(()) => {
                        rt_differ += 1;
                        let at =
                            rebuilt.iter().zip(data).position(|(a, b)| a != b).unwrap_or(data.len().min(rebuilt.len()));
                        println!("DIFFERS {source}!{entry} (first difference at byte {at})");
                    }
                    Err(e) => {
                        rt_differ += 1;
                        println!("DIFFERS {source}!{entry} (cannot read: {e})");
                    }
                }
            }
            if let Some(rw) = rewriter.as_mut() {
                let t = Instant::now();
                // Exact mode gives native methods wrappers first, as the agent does at load time.
                let wrapped = (o.mode == Some(Mode::Exact)).then(|| wrap_natives(data).ok().flatten()).flatten();
                let data = match wrapped {
                    Some(w) => {
                        stats_natives += w.wrappers.len() as u64;
                        rw.set_wrappers(w.wrappers);
                        wrapped_bytes = w.bytes;
                        &wrapped_bytes[..]
                    }
                    None => {
                        rw.set_wrappers(Vec::new());
                        data
                    }
                };
                let r = rw.rewrite_class(data, &mut out, &mut stats);
                rw_time += t.elapsed();
                if let Err(e) = &r {
                    if !o.quiet {
                        println!("MALFORMED {source}!{entry}: {e}");
                    }
                }
                if let Some(dir) = &o.out {
                    // A class the engine cannot read is written as it was (the agent would leave it alone).
                    let (bytes, name) = match &r {
                        Ok(_) => (
                            &out[..],
                            ClassFile::parse(data)
                                .ok()
                                .and_then(|c| c.name().ok().map(|n| String::from_utf8_lossy(n).into_owned())),
                        ),
                        Err(_) => (data, None),
                    };
                    let name = name.unwrap_or_else(|| entry.trim_end_matches(".class").to_string());
                    write_file(&dir.join(output_path(entry, &name)), bytes)?;
                }
            }
            Ok(())
        })?;
    }
    if let Some(dir) = &o.out {
        extract_runtime(dir)?;
    }
    if o.roundtrip {
        println!(
            "round trip: {rt_classes} classes ({:.1} MB), {} identical, {rt_differ} differ ({:.1} MB/s decode + re-encode)",
            mb(rt_bytes),
            rt_classes - rt_differ,
            mb(rt_bytes) / rt_time.as_secs_f64().max(1e-9)
        );
        if rt_differ > 0 {
            ok = false;
        }
    }
    if o.mode.is_some() {
        print_stats(&stats, rw_time);
    }
    if o.mode == Some(Mode::Exact) {
        println!("native methods wrapped: {stats_natives}");
    }
    if !o.quiet {
        println!("total time: {:.2} s", started.elapsed().as_secs_f64());
    }
    Ok(ok)
}

fn print_stats(s: &RewriteStats, t: Duration) {
    println!(
        "classes read: {} ({:.1} MB), changed: {}, unreadable: {}",
        s.classes_read,
        mb(s.class_bytes),
        s.classes_changed,
        s.classes_malformed
    );
    println!(
        "methods: {} ({} with code, {} abstract or native)",
        s.methods,
        s.methods_with_code(),
        s.methods_without_code
    );
    println!("methods rewritten: {}", s.methods_rewritten);
    let left = s.left_alone_total();
    let pct = 100.0 * left as f64 / s.methods_with_code().max(1) as f64;
    println!("methods left alone: {left} ({pct:.3} % of methods with code)");
    for (reason, n) in &s.left_alone {
        println!("  {}: {n}", reason.name());
    }
    let secs = t.as_secs_f64().max(1e-9);
    println!("throughput: {:.1} MB/s (parse + rewrite + write, one core, {:.3} s)", mb(s.class_bytes) / secs, secs);
}

fn write_file(path: &Path, data: &[u8]) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, data).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes kprof's runtime helper classes under `dir`.
pub fn extract_runtime(dir: &Path) -> Result<(), String> {
    let zip = Zip::parse(zip_part(RUNTIME_JAR))?;
    for e in &zip.entries {
        if e.name.ends_with(".class") {
            write_file(&dir.join(&e.name), &zip.read(e)?)?;
        }
    }
    Ok(())
}
