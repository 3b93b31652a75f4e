//! The event types a profile becomes, and where their fields come from.

use crate::model::Metric;

/// An event type and how a profile's contexts become events of it.
pub struct EventDef {
    /// Event type name (`jdk.ExecutionSample`).
    pub name: &'static str,
    pub label: &'static str,
    pub description: &'static str,
    pub category: &'static [&'static str],
    /// Events of this type are made from profiles that carry this metric...
    pub applies: Metric,
    /// ...and, when given, carry this metric (`true`) or do not (`false`): wall samples are
    /// `jdk.ExecutionSample`s only where there is no CPU sample, since a recording has one event type per
    /// name.
    pub requires: Option<(Metric, bool)>,
    /// Which contexts make events of this type.
    pub contexts: Contexts,
    pub emit: Emit,
    /// Name of the thread field: `sampledThread` (execution samples) or `eventThread`.
    pub thread_field: &'static str,
    /// The events' duration, in nanoseconds: the context's value of this counter split over its events.
    /// `None`: instant events.
    pub duration: Option<Metric>,
    /// Fields after the start time, duration, thread and stack trace.
    pub fields: &'static [FieldDef],
}

/// How many events a context makes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Emit {
    /// One event per unit of this counter (one event per sample); contexts where it is zero make none.
    PerUnit(Metric),
    /// One event per context whose counters in [`EventDef::fields`] are not all zero.
    PerContext,
}

/// Which contexts of a profile make events of a type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Contexts {
    All,
    /// Contexts with a park on their path (`LockSupport.park*` or `Unsafe.park`): lock waits that parked.
    Parks,
    /// Contexts without one: lock waits on a monitor.
    NotParks,
}

/// A field of an event type.
pub struct FieldDef {
    pub name: &'static str,
    pub label: &'static str,
    pub description: &'static str,
    pub value: FieldValue,
}

/// Where a field's value comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FieldValue {
    /// The context's value of a counter, split over its events ([`Emit::PerUnit`]), as a long in `Unit`.
    Counter(Metric, Unit),
    /// A constant `jdk.types.ThreadState` (`STATE_RUNNABLE`).
    ThreadState(&'static str),
    /// A `java.lang.Class`: the one a leaf pseudo-frame `[WORD CLASS]` names (`[alloc byte[]]`: `byte[]`),
    /// else the leaf method's class (for allocation samples and monitor or park events).
    LeafClass,
    /// A `jdk.types.ThreadState`: the one a leaf `[state WORD]` label names (mode=wall), see
    /// [`thread_state`].
    LeafState,
}

/// The JDK's thread state for a wall sample's `[state WORD]` label. A thread in native code or a system
/// call is `RUNNABLE` to Java, as it is here; its top frame shows where it is.
pub fn thread_state(label: &str) -> &'static str {
    match label {
        "[state sleeping]" => "STATE_SLEEPING",
        "[state waiting]" => "STATE_IN_OBJECT_WAIT",
        "[state parked]" => "STATE_PARKED",
        "[state blocked]" => "STATE_BLOCKED_ON_MONITOR_ENTER",
        _ => "STATE_RUNNABLE",
    }
}

/// Every state [`thread_state`] gives.
pub const THREAD_STATES: [&str; 5] =
    ["STATE_RUNNABLE", "STATE_SLEEPING", "STATE_IN_OBJECT_WAIT", "STATE_PARKED", "STATE_BLOCKED_ON_MONITOR_ENTER"];

/// Whether a leaf pseudo-frame is a label that events carry as a field (the allocated class, the lock's
/// class, the thread's state) rather than as a frame of their stack trace.
pub fn is_field_label(name: &str) -> bool {
    name == "[park]" || ["[alloc ", "[lock ", "[state "].iter().any(|p| name.starts_with(p))
}

/// Unit of a counter field, as the JDK's annotations say it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unit {
    Count,
    Bytes,
    Nanos,
}

/// The event types kprof writes: the JDK's own where one means the same thing (CPU and wall samples,
/// allocation samples, monitor and park waits), kprof's for bytecode samples and call counts.
pub const EVENTS: &[EventDef] = &[
    EventDef {
        name: "jdk.ExecutionSample",
        label: "Java Execution Sample",
        description: "A CPU-time sample of a thread running Java code, taken by kprof (mode=asgct)",
        category: &["Java Virtual Machine", "Profiling"],
        applies: Metric::Samples,
        requires: None,
        contexts: Contexts::All,
        emit: Emit::PerUnit(Metric::Samples),
        thread_field: "sampledThread",
        duration: None,
        fields: &[FieldDef {
            name: "state",
            label: "Thread State",
            description: "",
            value: FieldValue::ThreadState("STATE_RUNNABLE"),
        }],
    },
    EventDef {
        name: "kprof.BytecodeSample",
        label: "Bytecode Samples",
        description: "The samples kprof took in one calling context by bytecode counts (mode=bytecode), and the \
                      bytecodes they stand for",
        category: &["kprof"],
        applies: Metric::BytecodeSamples,
        requires: None,
        contexts: Contexts::All,
        emit: Emit::PerContext,
        thread_field: "eventThread",
        duration: None,
        fields: &[
            FieldDef {
                name: "samples",
                label: "Samples",
                description: "Samples taken in this context",
                value: FieldValue::Counter(Metric::BytecodeSamples, Unit::Count),
            },
            FieldDef {
                name: "bytecodes",
                label: "Bytecodes",
                description: "Bytecodes executed since each thread's previous sample, summed",
                value: FieldValue::Counter(Metric::Bytecodes, Unit::Count),
            },
        ],
    },
    EventDef {
        name: "kprof.CallCount",
        label: "Calls",
        description: "The invocations of one calling context and the bytecodes executed in it, counted \
                      exactly by kprof (mode=exact)",
        category: &["kprof"],
        applies: Metric::Calls,
        requires: None,
        contexts: Contexts::All,
        emit: Emit::PerContext,
        thread_field: "eventThread",
        duration: None,
        fields: &[
            FieldDef {
                name: "calls",
                label: "Calls",
                description: "Invocations of this context",
                value: FieldValue::Counter(Metric::Calls, Unit::Count),
            },
            FieldDef {
                name: "bytecodes",
                label: "Bytecodes",
                description: "Bytecodes executed in this context",
                value: FieldValue::Counter(Metric::Bytecodes, Unit::Count),
            },
        ],
    },
    EventDef {
        name: "jdk.ExecutionSample",
        label: "Java Execution Sample",
        description: "A wall-clock sample of a thread, running or not, with its state, taken by kprof (mode=wall)",
        category: &["Java Virtual Machine", "Profiling"],
        applies: Metric::WallSamples,
        requires: Some((Metric::Samples, false)),
        contexts: Contexts::All,
        emit: Emit::PerUnit(Metric::WallSamples),
        thread_field: "sampledThread",
        duration: None,
        fields: &[FieldDef { name: "state", label: "Thread State", description: "", value: FieldValue::LeafState }],
    },
    EventDef {
        name: "kprof.WallSample",
        label: "Wall-Clock Sample",
        description: "A wall-clock sample of a thread, running or not, with its state, taken by kprof (mode=wall)",
        category: &["kprof"],
        applies: Metric::WallSamples,
        requires: Some((Metric::Samples, true)),
        contexts: Contexts::All,
        emit: Emit::PerUnit(Metric::WallSamples),
        thread_field: "sampledThread",
        duration: None,
        fields: &[
            FieldDef { name: "state", label: "Thread State", description: "", value: FieldValue::LeafState },
            FieldDef {
                name: "weight",
                label: "Weight",
                description: "Wall-clock time this sample stands for",
                value: FieldValue::Counter(Metric::Wall, Unit::Nanos),
            },
        ],
    },
    EventDef {
        name: "jdk.ObjectAllocationSample",
        label: "Object Allocation Sample",
        description: "The allocations kprof sampled in one calling context (mode=alloc), with the bytes they \
                      stand for",
        category: &["Java Application"],
        applies: Metric::AllocBytes,
        requires: None,
        contexts: Contexts::All,
        emit: Emit::PerContext,
        thread_field: "eventThread",
        duration: None,
        fields: &[
            FieldDef {
                name: "objectClass",
                label: "Object Class",
                description: "Class of the allocated objects",
                value: FieldValue::LeafClass,
            },
            FieldDef {
                name: "weight",
                label: "Sample Weight",
                description: "Estimated bytes allocated in this context",
                value: FieldValue::Counter(Metric::AllocBytes, Unit::Bytes),
            },
        ],
    },
    EventDef {
        name: "jdk.JavaMonitorEnter",
        label: "Java Monitor Blocked",
        description: "A wait for a contended monitor, recorded by kprof (mode=lock)",
        category: &["Java Application"],
        applies: Metric::LockCount,
        requires: None,
        contexts: Contexts::NotParks,
        emit: Emit::PerUnit(Metric::LockCount),
        thread_field: "eventThread",
        duration: Some(Metric::LockNs),
        fields: &[FieldDef {
            name: "monitorClass",
            label: "Monitor Class",
            description: "",
            value: FieldValue::LeafClass,
        }],
    },
    EventDef {
        name: "jdk.ThreadPark",
        label: "Java Thread Park",
        description: "A park of a java.util.concurrent lock, queue or synchronizer, recorded by kprof (mode=lock)",
        category: &["Java Application"],
        applies: Metric::LockCount,
        requires: None,
        contexts: Contexts::Parks,
        emit: Emit::PerUnit(Metric::LockCount),
        thread_field: "eventThread",
        duration: Some(Metric::LockNs),
        fields: &[FieldDef {
            name: "parkedClass",
            label: "Class Parked On",
            description: "",
            value: FieldValue::LeafClass,
        }],
    },
];
