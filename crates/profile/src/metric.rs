//! The counters a calling context carries, one pair per engine, and their units.

/// What a metric's values measure.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unit {
    /// Events: samples, objects, waits, calls.
    Count,
    Nanoseconds,
    Bytes,
    Bytecodes,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "count",
            Unit::Nanoseconds => "nanoseconds",
            Unit::Bytes => "bytes",
            Unit::Bytecodes => "bytecodes",
        }
    }
}

/// A counter of a calling context. Each engine fills a pair, a count of its events and their weight;
/// one profile carries the metrics of every engine that ran.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// CPU samples (the cpu engine, `mode=asgct`).
    Samples,
    /// CPU time those samples stand for, nanoseconds.
    Cpu,
    /// Wall-clock samples (`mode=wall`), of every thread whatever its state.
    WallSamples,
    /// Wall-clock time those samples stand for, nanoseconds.
    Wall,
    /// Objects allocated: an unbiased estimate from the allocation samples (`mode=alloc`).
    AllocCount,
    /// Bytes allocated: an unbiased estimate from the allocation samples.
    AllocBytes,
    /// Waits for a lock: contended monitor entries and parks (`mode=lock`).
    LockCount,
    /// Time waited for locks, nanoseconds.
    LockNs,
    /// Bytecode-count samples (`mode=bytecode`).
    BytecodeSamples,
    /// Bytecodes executed: estimated from bytecode samples, or exact (`mode=exact`).
    Bytecodes,
    /// Invocations (`mode=exact`).
    Calls,
}

impl Metric {
    /// Every metric, in the order profiles list them.
    pub const ALL: [Metric; 11] = [
        Metric::Samples,
        Metric::Cpu,
        Metric::WallSamples,
        Metric::Wall,
        Metric::AllocCount,
        Metric::AllocBytes,
        Metric::LockCount,
        Metric::LockNs,
        Metric::BytecodeSamples,
        Metric::Bytecodes,
        Metric::Calls,
    ];
    pub const COUNT: usize = Metric::ALL.len();

    /// What options, readers and the JSON schema call it.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Samples => "samples",
            Metric::Cpu => "cpu",
            Metric::WallSamples => "wall_samples",
            Metric::Wall => "wall",
            Metric::AllocCount => "alloc_count",
            Metric::AllocBytes => "alloc_bytes",
            Metric::LockCount => "lock_count",
            Metric::LockNs => "lock_ns",
            Metric::BytecodeSamples => "bytecode_samples",
            Metric::Bytecodes => "bytecodes",
            Metric::Calls => "calls",
        }
    }

    /// The metric called `s` ([`Metric::name`]).
    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The accepted names, for messages.
    pub const ACCEPTED: &'static str =
        "samples, cpu, wall_samples, wall, alloc_count, alloc_bytes, lock_count, lock_ns, bytecode_samples, bytecodes, calls";

    pub fn unit(self) -> Unit {
        match self {
            Metric::Cpu | Metric::Wall | Metric::LockNs => Unit::Nanoseconds,
            Metric::AllocBytes => Unit::Bytes,
            Metric::Bytecodes => Unit::Bytecodes,
            _ => Unit::Count,
        }
    }

    /// Its position in [`Metric::ALL`] (an index for per-metric arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The count of samples of the engine this metric belongs to, if the engine samples: what `samples`
    /// means in a profile that has no CPU samples.
    pub(crate) fn sample_count(self) -> Option<Metric> {
        match self {
            Metric::Samples | Metric::Cpu => Some(Metric::Samples),
            Metric::WallSamples | Metric::Wall => Some(Metric::WallSamples),
            Metric::BytecodeSamples | Metric::Bytecodes => Some(Metric::BytecodeSamples),
            _ => None,
        }
    }
}
