//! The profiling engines a session can run, their names in `mode=` and the metrics each fills.

use kprof_profile::Metric;

/// A profiling engine. A session runs one or several (`mode=asgct+alloc+lock`), all counting into one
/// calling context tree, each into its own pair of metrics.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    /// CPU-time sampling from a per-thread timer signal with AsyncGetCallTrace (`cpu` is an alias).
    Asgct,
    /// Wall-clock sampling of every Java thread, running or not.
    Wall,
    /// Allocation sampling (JVMTI SampledObjectAlloc).
    Alloc,
    /// Lock contention: contended monitors and parks, with the time waited.
    Lock,
    /// Deterministic bytecode-count sampling (class rewriting).
    Bytecode,
    /// Complete calling-context profile (class rewriting).
    Exact,
}

impl EngineKind {
    pub const ALL: [EngineKind; 6] = [
        EngineKind::Asgct,
        EngineKind::Wall,
        EngineKind::Alloc,
        EngineKind::Lock,
        EngineKind::Bytecode,
        EngineKind::Exact,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Asgct => "asgct",
            EngineKind::Wall => "wall",
            EngineKind::Alloc => "alloc",
            EngineKind::Lock => "lock",
            EngineKind::Bytecode => "bytecode",
            EngineKind::Exact => "exact",
        }
    }

    /// The engine called `name` (`cpu` is asgct's other name).
    pub fn parse(name: &str) -> Option<EngineKind> {
        match name {
            "cpu" => Some(EngineKind::Asgct),
            _ => EngineKind::ALL.into_iter().find(|e| e.name() == name),
        }
    }

    /// The two metrics the engine counts: its events and their weight.
    pub fn metrics(self) -> [Metric; 2] {
        match self {
            EngineKind::Asgct => [Metric::Samples, Metric::Cpu],
            EngineKind::Wall => [Metric::WallSamples, Metric::Wall],
            EngineKind::Alloc => [Metric::AllocCount, Metric::AllocBytes],
            EngineKind::Lock => [Metric::LockCount, Metric::LockNs],
            EngineKind::Bytecode => [Metric::BytecodeSamples, Metric::Bytecodes],
            EngineKind::Exact => [Metric::Calls, Metric::Bytecodes],
        }
    }

    /// What views of its profile show unless `metric=` says otherwise.
    pub fn default_metric(self) -> Metric {
        match self {
            EngineKind::Asgct => Metric::Samples,
            EngineKind::Wall => Metric::Wall,
            EngineKind::Alloc => Metric::AllocBytes,
            EngineKind::Lock => Metric::LockNs,
            EngineKind::Bytecode => Metric::BytecodeSamples,
            EngineKind::Exact => Metric::Calls,
        }
    }

    /// Whether the engine rewrites classes (at most one such engine per session).
    pub fn rewrites(self) -> bool {
        matches!(self, EngineKind::Bytecode | EngineKind::Exact)
    }
}
