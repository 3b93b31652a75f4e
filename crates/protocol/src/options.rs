//! Agent options: `-agentpath:libkprof.so=key=value,key=value,...`.
//!
//! Every problem is reported as one line that names the option and what it accepts; the agent then
//! refuses to start (or, on attach, refuses the command) rather than profile something the user did not
//! ask for.

pub use crate::engines::EngineKind;
use kprof_profile::output::Format;
use kprof_profile::Metric;
pub use kprof_timers::TimerKind;
use std::fmt;

/// One output file: where and in which format.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OutputFile {
    /// The path as given, with `%p` (pid) and `%t` (start time, seconds since the epoch) not yet expanded.
    pub path: String,
    pub format: Format,
}

/// Parsed agent options.
#[derive(Clone, PartialEq, Debug)]
pub struct Options {
    /// The engines of the session, in the order given (the first one's metric is the default view).
    pub engines: Vec<EngineKind>,
    /// Sampling interval in nanoseconds (asgct: CPU time; wall: wall-clock time).
    pub interval_ns: u64,
    pub timer: TimerKind,
    pub files: Vec<OutputFile>,
    /// The counter collapsed stacks and the flame graph show; `None`: the mode's default.
    pub metric: Option<Metric>,
    /// A root per thread.
    pub threads: bool,
    /// Flame graph frames named with their signatures (`Class.method(int)void`, overloads apart) rather
    /// than as `Class.method`.
    pub signatures: bool,
    /// Maximum stack depth recorded; deeper stacks are cut and marked `[truncated]`.
    pub depth: u32,
    /// Arena size of the calling context tree, MiB, as given (0: not given; see [`Options::cct_mb`]).
    pub cct_mb: u32,
    /// Print the option help and exit.
    pub help: bool,
    /// Stop profiling after this long (nanoseconds); 0 = never.
    pub duration_ns: u64,
    /// Write a snapshot of the profile at this interval (nanoseconds); 0 = only at the end.
    pub dump_ns: u64,
    /// Open the control socket (`kprof start|stop|dump|status`).
    pub control: bool,
    /// bytecode: bytecodes between samples.
    pub gran: u32,
    /// bytecode: a random 0..rand added to each period.
    pub rand: u32,
    /// bytecode/exact: longest block and longest unchecked path, in bytecodes (0: no limit); `None`
    /// (`maxpath=auto`, the default): see [`Options::bytecode_maxpath`] and [`Options::exact_maxpath`].
    pub maxpath: Option<u32>,
    /// bytecode/exact: keep callsites apart in the CCT.
    pub callsite: bool,
    /// bytecode: how a sample finds its calling context (see [`StackMode`]).
    pub stack: StackMode,
    /// bytecode: counter updates on the chords of a spanning tree of each method's flow graph (`count=chords`)
    /// instead of one per basic block (`count=blocks`); the profiles are the same.
    pub chords: bool,
    /// bytecode: granularity checks at Komorium's places, calls included (`checks=calls`), or only at
    /// loop headers and long paths (`checks=loops`).
    pub loop_checks_only: bool,
    /// exact: count every basic block per calling context.
    pub bb: bool,
    /// alloc: the mean number of bytes allocated between two samples of a thread.
    pub alloc_bytes: u64,
    /// alloc: report only objects still reachable when the profile is written.
    pub live: bool,
    /// lock: waits shorter than this (nanoseconds) are not recorded.
    pub lock_ns: u64,
    /// lock: waits on conditions (`Condition.await`) are recorded too; by default they are waiting, not
    /// contention, as `Object.wait` is, and only counted.
    pub conditions: bool,
    /// wall: threads signalled per interval, at most.
    pub wall_batch: u32,
    /// bytecode/exact: only classes matching one of these patterns are rewritten (empty: all).
    pub include: Vec<String>,
    /// bytecode/exact: classes matching these patterns are not rewritten.
    pub exclude: Vec<String>,
}

impl Options {
    /// Arena size of the calling context tree, MiB: as given, else by mode. Exact mode's trees hold every
    /// context a program ran (millions for a compiler); untouched pages of the arena cost nothing. Exact
    /// mode's per-thread trees may take as much again, together (no more than a quarter of the machine's
    /// memory).
    pub fn cct_mb(&self) -> u32 {
        match self.cct_mb {
            0 if self.has(EngineKind::Exact) => 1024,
            0 => 256,
            mb => mb,
        }
    }

    /// Whether the session runs `engine`.
    pub fn has(&self, engine: EngineKind) -> bool {
        self.engines.contains(&engine)
    }

    /// The session's class-rewriting engine, if any (bytecode or exact).
    pub fn rewriting(&self) -> Option<EngineKind> {
        self.engines.iter().copied().find(|e| e.rewrites())
    }

    /// The engines as `mode=` names them: `asgct`, `asgct+alloc+lock`.
    pub fn mode_name(&self) -> String {
        self.engines.iter().map(|e| e.name()).collect::<Vec<_>>().join("+")
    }

    /// The metrics the session's engines count, in engine order, each once.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut metrics = Vec::new();
        for m in self.engines.iter().flat_map(|e| e.metrics()) {
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
        metrics
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            engines: vec![EngineKind::Asgct],
            interval_ns: 10_000_000,
            timer: TimerKind::Auto,
            files: Vec::new(),
            metric: None,
            threads: false,
            signatures: false,
            depth: 2048,
            cct_mb: 0,
            help: false,
            duration_ns: 0,
            dump_ns: 0,
            control: true,
            gran: 10_000,
            rand: 100,
            maxpath: None,
            callsite: true,
            stack: StackMode::Auto,
            chords: false,
            loop_checks_only: false,
            bb: false,
            alloc_bytes: 512 * 1024,
            live: false,
            lock_ns: 10_000,
            conditions: false,
            wall_batch: 16,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// How bytecode mode finds a sample's calling context.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StackMode {
    /// Rewritten methods keep a stack of method ids (a store in each prologue, the depth restored at
    /// returns); a sample copies it.
    Reified,
    /// Rewritten methods keep no stack; a sample walks the thread's own stack and keeps the frames of
    /// rewritten methods, which are the ones the reified stack would hold.
    Walk,
    /// Rewritten methods keep no stack; a sample follows the thread's frame-pointer chain (with
    /// `-XX:+PreserveFramePointer`) and decodes only the frames that changed since its previous sample,
    /// by their return addresses; what it cannot place, it walks as `Walk` does.
    Fp,
    /// `Fp` that also takes every context as `Walk` does, keeps that one and counts the samples where the
    /// two differ (a check of `Fp` on a given JVM and program).
    FpCheck,
    /// Walk from [`AUTO_WALK_GRAN`] up (samples rare enough that walking costs less than the upkeep);
    /// below, `Fp` where the JVM runs with frame pointers or kprof starts with it (the agent decides:
    /// [`Options::auto_may_use_fp`]), else reified; reified with `callsite=on`.
    Auto,
}

/// The granularity from which `stack=auto` walks.
pub const AUTO_WALK_GRAN: u32 = 100_000;

/// `maxpath=auto`: the least bound, exact mode's bound, and bytecode mode's share of the granularity.
pub const AUTO_MAXPATH_MIN: u32 = 50;
pub const AUTO_MAXPATH_GRAN_DIVISOR: u32 = 100;
/// The largest `maxpath`.
pub const MAXPATH_MAX: u32 = 65_535;

impl StackMode {
    /// The option's value.
    pub fn name(self) -> &'static str {
        match self {
            StackMode::Reified => "reified",
            StackMode::Walk => "walk",
            StackMode::Fp => "fp",
            StackMode::FpCheck => "fpcheck",
            StackMode::Auto => "auto",
        }
    }

    pub fn parse(s: &str) -> Option<StackMode> {
        match s {
            "reified" => Some(StackMode::Reified),
            "walk" => Some(StackMode::Walk),
            "fp" => Some(StackMode::Fp),
            "fpcheck" => Some(StackMode::FpCheck),
            "auto" => Some(StackMode::Auto),
            _ => None,
        }
    }
}

/// The file written when no `file=` is given.
pub const DEFAULT_FILE: &str = "kprof-%p.html";

/// A problem with the options: one line naming the option and what it accepts.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OptionError(pub String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Every option: key, accepted values, default, meaning. The help text and the README table come from
/// here.
pub const OPTIONS: &[(&str, &str, &str, &str)] = &[
    (
        "mode",
        "engines joined by +: asgct (or cpu) | wall | alloc | lock | bytecode | exact",
        "asgct",
        "what to profile (several engines at once: asgct+alloc+lock; bytecode and exact exclude each other)",
    ),
    (
        "interval",
        "duration 10us..10s (ns, us, ms, s)",
        "10ms",
        "asgct: CPU time between samples of a thread; wall: wall-clock time between samples",
    ),
    ("timer", "auto | perf | ctimer | itimer", "auto", "asgct: perf if allowed, else ctimer; itimer only on request"),
    (
        "file",
        "path ending .html .collapsed .folded .json .jfr .pb.gz .pprof .txt (repeatable; %p = pid, %t = time)",
        DEFAULT_FILE,
        "where to write the profile",
    ),
    (
        "format",
        "collapsed | html | jfr | json | pprof | text",
        "from the extension",
        "format of file= paths whose extension says none",
    ),
    (
        "metric",
        Metric::ACCEPTED,
        "the first engine's: samples, wall, alloc_bytes, lock_ns, bytecode_samples, calls",
        "the counter collapsed stacks, flame graph and text show",
    ),
    ("threads", "on | off", "off", "a root per thread"),
    (
        "signatures",
        "on | off",
        "off",
        "flame graph: frames named with their signatures, overloads apart (off: Class.method, full name in the tooltip)",
    ),
    ("depth", "1..8192", "2048", "deepest stack recorded; deeper stacks are cut at [truncated]"),
    (
        "cct_mb",
        "1..65536",
        "256 (exact: 1024)",
        "calling context tree arena, MiB (pages are used lazily); exact: threads' own trees may take as much",
    ),
    ("duration", "duration (0 = until exit)", "0", "stop profiling after this long"),
    ("dump", "duration (0 = only at exit)", "0", "also write the profile at this interval while running"),
    ("gran", "1..1000000000", "10000", "bytecode: bytecodes between two samples of a thread"),
    ("rand", "0..1000000000", "100", "bytecode: a random 0..rand-1 added to each period (fixed seed: reproducible)"),
    (
        "maxpath",
        "auto | 0..65535 (0 = no limit)",
        "auto",
        "bytecode/exact: longest block and longest path without a check, bytecodes (auto: gran/100 within \
         50..65535 for bytecode, 50 for exact)",
    ),
    ("callsite", "on | off", "off (bytecode), on (exact)", "bytecode/exact: keep calls from different callsites apart"),
    (
        "stack",
        "reified | walk | fp | fpcheck | auto",
        "auto",
        "bytecode: the sample's context from a stack kept by rewritten code, or from the thread's own stack \
         (walk: AsyncGetCallTrace; fp: its frame-pointer chain, with -XX:+PreserveFramePointer; fpcheck: fp \
         checked against walk; auto, when callsite=off: walk from gran=100000 up, fp below where kprof starts \
         with the JVM or the JVM keeps frame pointers, else reified)",
    ),
    (
        "count",
        "blocks | chords",
        "blocks",
        "bytecode: one counter update per basic block, or updates on the chords of a spanning tree (same profile)",
    ),
    (
        "checks",
        "calls | loops",
        "calls",
        "bytecode: granularity checks before calls, at loop headers and on long paths, or not before calls",
    ),
    ("bb", "on | off", "off", "exact: also count every basic block in every calling context"),
    ("alloc", "size 1..1g (bytes, or with k, m, g)", "512k", "alloc: mean bytes allocated between two samples"),
    ("live", "on | off", "off", "alloc: report only objects still reachable when the profile is written"),
    ("lock", "duration 0..10s (0 = every wait)", "10us", "lock: waits shorter than this are not recorded"),
    (
        "conditions",
        "on | off",
        "off",
        "lock: also record waits on conditions (Condition.await: waiting, as Object.wait is, not contention)",
    ),
    (
        "batch",
        "1..8192",
        "16",
        "wall: threads sampled per interval at most (more threads are taken in turn, each sample weighted by the time since the thread's last)",
    ),
    (
        "include",
        "class pattern, * and ? wildcards (repeatable, or :-separated)",
        "all",
        "bytecode/exact: rewrite only matching classes",
    ),
    (
        "exclude",
        "class pattern, * and ? wildcards (repeatable, or :-separated)",
        "none",
        "bytecode/exact: do not rewrite matching classes",
    ),
    ("control", "on | off", "on", "open the control socket that kprof start/stop/dump/status use"),
    ("help", "(no value)", "", "print this help and exit"),
];

/// The help text: one line per option.
pub fn help_text() -> String {
    let mut s = String::from("kprof agent options: -agentpath:/path/to/libkprof.so=key=value,key=value,...\n");
    for (key, accepts, default, meaning) in OPTIONS {
        let default = if default.is_empty() { String::new() } else { format!(" [default {default}]") };
        s.push_str(&format!("  {key:<9} {meaning}: {accepts}{default}\n"));
    }
    s
}

fn accepted(key: &str) -> &'static str {
    OPTIONS.iter().find(|o| o.0 == key).map(|o| o.1).unwrap_or("")
}

fn bad(key: &str, value: &str) -> OptionError {
    OptionError(format!("kprof: bad option '{key}={value}': accepted: {}", accepted(key)))
}

/// Parses a duration with a unit: `100us`, `1ms`, `10ms`, `1s`, `250ns`; also `1.5ms`. A bare `0` is zero.
pub fn parse_duration(s: &str) -> Option<u64> {
    if s == "0" {
        return Some(0);
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let scale: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        _ => return None,
    };
    if num.is_empty() || num.matches('.').count() > 1 {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    let ns = v * scale;
    if !ns.is_finite() || ns > 1e18 {
        return None;
    }
    Some(ns.round() as u64)
}

fn parse_switch(key: &str, value: Option<&str>) -> Result<bool, OptionError> {
    match value {
        None | Some("on") | Some("true") | Some("yes") | Some("1") => Ok(true),
        Some("off") | Some("false") | Some("no") | Some("0") => Ok(false),
        Some(v) => Err(bad(key, v)),
    }
}

fn parse_range(key: &str, value: &str, lo: u64, hi: u64) -> Result<u64, OptionError> {
    match value.parse::<u64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(bad(key, value)),
    }
}

impl Options {
    /// Parses the agent's option string (`None` or empty: all defaults).
    pub fn parse(text: Option<&str>) -> Result<Options, OptionError> {
        let mut o = Options::default();
        let mut format: Option<Format> = None;
        let mut paths: Vec<String> = Vec::new();
        let mut callsite_given = false;
        let mut batch_given = false;
        for item in text.unwrap_or("").split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            let need = || value.filter(|v| !v.is_empty()).ok_or_else(|| bad(key, ""));
            match key {
                "mode" => {
                    let v = need()?;
                    o.engines = parse_engines(v).ok_or_else(|| bad(key, v))?;
                }
                "alloc" => {
                    let v = need()?;
                    o.alloc_bytes = match parse_size(v) {
                        Some(b) if (1..=1 << 30).contains(&b) => b,
                        _ => return Err(bad(key, v)),
                    }
                }
                "live" => o.live = parse_switch(key, value)?,
                "conditions" => o.conditions = parse_switch(key, value)?,
                "lock" => {
                    let v = need()?;
                    o.lock_ns = match parse_duration(v) {
                        Some(ns) if ns <= 10_000_000_000 => ns,
                        _ => return Err(bad(key, v)),
                    }
                }
                "interval" => {
                    let v = need()?;
                    o.interval_ns = match parse_duration(v) {
                        Some(ns) if (10_000..=10_000_000_000).contains(&ns) => ns,
                        _ => return Err(bad(key, v)),
                    }
                }
                "timer" => {
                    let v = need()?;
                    o.timer = TimerKind::from_name(v).ok_or_else(|| bad(key, v))?;
                }
                "file" => paths.push(need()?.to_string()),
                "format" => {
                    let v = need()?;
                    format = Some(Format::parse(v).ok_or_else(|| bad(key, v))?);
                }
                "metric" => {
                    let v = need()?;
                    o.metric = Some(Metric::parse(v).ok_or_else(|| bad(key, v))?);
                }
                "threads" => o.threads = parse_switch(key, value)?,
                "signatures" => o.signatures = parse_switch(key, value)?,
                "control" => o.control = parse_switch(key, value)?,
                "callsite" => {
                    o.callsite = parse_switch(key, value)?;
                    callsite_given = true;
                }
                "bb" => o.bb = parse_switch(key, value)?,
                "stack" => {
                    let v = need()?;
                    o.stack = StackMode::parse(v).ok_or_else(|| bad(key, v))?;
                }
                "count" => {
                    o.chords = match need()? {
                        "blocks" => false,
                        "chords" => true,
                        v => return Err(bad(key, v)),
                    }
                }
                "checks" => {
                    o.loop_checks_only = match need()? {
                        "calls" => false,
                        "loops" => true,
                        v => return Err(bad(key, v)),
                    }
                }
                "gran" => o.gran = parse_range(key, need()?, 1, 1_000_000_000)? as u32,
                "rand" => o.rand = parse_range(key, need()?, 0, 1_000_000_000)? as u32,
                "maxpath" => {
                    let v = need()?;
                    o.maxpath =
                        if v == "auto" { None } else { Some(parse_range(key, v, 0, MAXPATH_MAX as u64)? as u32) };
                }
                "batch" => {
                    o.wall_batch = parse_range(key, need()?, 1, 8192)? as u32;
                    batch_given = true;
                }
                "include" | "exclude" => {
                    let v = need()?;
                    let patterns = v.split(':').filter(|p| !p.is_empty()).map(str::to_string);
                    if key == "include" {
                        o.include.extend(patterns);
                    } else {
                        o.exclude.extend(patterns);
                    }
                }
                "depth" => o.depth = parse_range(key, need()?, 1, 8192)? as u32,
                "cct_mb" => o.cct_mb = parse_range(key, need()?, 1, 65536)? as u32,
                "duration" | "dump" => {
                    let v = need()?;
                    let ns = parse_duration(v).ok_or_else(|| bad(key, v))?;
                    if ns != 0 && ns < 1_000_000 {
                        return Err(bad(key, v));
                    }
                    if key == "duration" {
                        o.duration_ns = ns;
                    } else {
                        o.dump_ns = ns;
                    }
                }
                "help" => o.help = true,
                _ => {
                    let keys: Vec<&str> = OPTIONS.iter().map(|o| o.0).collect();
                    return Err(OptionError(format!("kprof: unknown option '{key}': accepted: {}", keys.join(", "))));
                }
            }
        }
        if paths.is_empty() {
            paths.push(DEFAULT_FILE.to_string());
        }
        for path in paths {
            let fmt = match (Format::from_path(&path), format) {
                (Some(f), _) => f,
                (None, Some(f)) => f,
                (None, None) => {
                    return Err(OptionError(format!(
                        "kprof: bad option 'file={path}': the extension names no format; accepted: {} (or add format=)",
                        accepted("file")
                    )))
                }
            };
            o.files.push(OutputFile { path, format: fmt });
        }
        if !callsite_given {
            // Bytecode mode keeps callsites apart only on request: recording a callsite costs a store
            // before every call (xalan: 4.6x against 3.7x, docs/BENCHMARKS.md), and samples are
            // attributed to methods either way. Exact mode is callsite-aware by default.
            o.callsite = !o.has(EngineKind::Bytecode);
        }
        if o.has(EngineKind::Bytecode) && o.has(EngineKind::Exact) {
            return Err(OptionError(format!(
                "kprof: bad option 'mode={}': bytecode and exact both rewrite every class, in two ways that cannot \
                 share it; run them apart",
                o.mode_name()
            )));
        }
        if o.bb && !o.has(EngineKind::Exact) {
            return Err(OptionError(format!(
                "kprof: bad option 'bb=on': accepted only with mode=exact (this is mode={})",
                o.mode_name()
            )));
        }
        if o.stack != StackMode::Reified && o.stack != StackMode::Auto && o.callsite && o.has(EngineKind::Bytecode) {
            return Err(OptionError(format!(
                "kprof: bad option 'stack={}': callsite=on needs stack=reified (a walked frame's position is \
                 in rewritten code); accepted with callsite=on: reified | auto",
                o.stack.name()
            )));
        }
        if o.live && !o.has(EngineKind::Alloc) {
            return Err(OptionError(format!(
                "kprof: bad option 'live=on': accepted only with the alloc engine (this is mode={})",
                o.mode_name()
            )));
        }
        if o.conditions && !o.has(EngineKind::Lock) {
            return Err(OptionError(format!(
                "kprof: bad option 'conditions=on': accepted only with the lock engine (this is mode={})",
                o.mode_name()
            )));
        }
        if batch_given && !o.has(EngineKind::Wall) {
            return Err(OptionError(format!(
                "kprof: bad option 'batch={}': accepted only with the wall engine (this is mode={})",
                o.wall_batch,
                o.mode_name()
            )));
        }
        if let Some(m) = o.metric.filter(|m| !o.metrics().contains(m) && *m != Metric::Samples) {
            let have: Vec<&str> = o.metrics().iter().map(|m| m.name()).collect();
            return Err(OptionError(format!(
                "kprof: bad option 'metric={}': mode={} counts {}",
                m.name(),
                o.mode_name(),
                have.join(", ")
            )));
        }
        Ok(o)
    }

    /// Bytecode mode's bound on a path without a check, which is also how many bytecodes a method
    /// invocation counts in its local before a check commits them to the thread's counter. `auto`: a
    /// hundredth of the granularity (at least 50). A commit is a read-modify-write of the thread's
    /// counter; its bytecodes all ran in the invocation that commits them, so a longer bound changes no
    /// attribution, and since a period ends where it falls rather than where a commit ends (`Bc.next`),
    /// no sample points either beyond the order of the commits; hot loops commit rarely
    /// (docs/bytecode.md, docs/BENCHMARKS.md).
    pub fn bytecode_maxpath(&self) -> u32 {
        self.maxpath.unwrap_or_else(|| (self.gran / AUTO_MAXPATH_GRAN_DIVISOR).clamp(AUTO_MAXPATH_MIN, MAXPATH_MAX))
    }

    /// Exact mode's bound on a block (it splits longer ones): its counts are per block and context, so the
    /// bound changes only where its checks sit; `auto` keeps 50.
    pub fn exact_maxpath(&self) -> u32 {
        self.maxpath.unwrap_or(AUTO_MAXPATH_MIN)
    }

    /// Bytecode mode takes each sample's context by walking the thread's stack (no reified stack).
    pub fn stack_walks(&self) -> bool {
        match self.stack {
            StackMode::Reified => false,
            StackMode::Walk | StackMode::Fp | StackMode::FpCheck => true,
            StackMode::Auto => !self.callsite && self.gran >= AUTO_WALK_GRAN,
        }
    }

    /// `stack=auto` below [`AUTO_WALK_GRAN`] in bytecode mode without `callsite=on`: the session takes
    /// `stack=fp` if the JVM can give frame pointers (the agent knows), else the reified stack.
    pub fn auto_may_use_fp(&self) -> bool {
        self.stack == StackMode::Auto && self.has(EngineKind::Bytecode) && !self.callsite && self.gran < AUTO_WALK_GRAN
    }

    /// Bytecode mode follows the thread's frame-pointer chain (`stack=fp` or `stack=fpcheck`).
    pub fn stack_fp(&self) -> bool {
        matches!(self.stack, StackMode::Fp | StackMode::FpCheck)
    }

    /// Whether the dotted class name `class` is to be rewritten under `include=`/`exclude=`.
    pub fn class_selected(&self, class: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| glob(p, class)))
            && !self.exclude.iter().any(|p| glob(p, class))
    }

    /// The metric views use: `metric=` or the first engine's default.
    pub fn effective_metric(&self) -> Metric {
        self.metric.unwrap_or_else(|| self.engines.first().map_or(Metric::Samples, |e| e.default_metric()))
    }
}

/// Parses `mode=`: engines joined by `+`, each at most once.
fn parse_engines(v: &str) -> Option<Vec<EngineKind>> {
    let mut engines = Vec::new();
    for name in v.split('+') {
        let e = EngineKind::parse(name.trim())?;
        if engines.contains(&e) {
            return None;
        }
        engines.push(e);
    }
    Some(engines)
}

/// Parses a size in bytes: `512`, `512k`, `1m`, `2g` (binary multiples; `kb`, `mb`, `gb` too).
pub fn parse_size(s: &str) -> Option<u64> {
    let lower = s.to_ascii_lowercase();
    let split = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let scale: u64 = match unit {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return None,
    };
    num.parse::<u64>().ok()?.checked_mul(scale)
}

/// Matches `text` against `pattern`, where `*` matches any run of characters and `?` one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point for the last `*`: linear for typical patterns.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Expands `%p` (pid), `%t` (seconds since the epoch at start) and `%n` (the number of the write: 1 for
/// the first dump, 2 for the next, ...) in an output path.
pub fn expand_path(path: &str, pid: u32, start_secs: u64, write_number: u32) -> String {
    path.replace("%p", &pid.to_string()).replace("%t", &start_secs.to_string()).replace("%n", &write_number.to_string())
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
