//! JFR recordings, written from the resolved profile (the JVM's own flight recorder need not be on):
//! one chunk that the JDK's `jfr` tool and `jdk.jfr.consumer.RecordingFile` (and so the tools built on
//! them) read.
//!
//! The chunk: the 68-byte header (big-endian fields); the metadata event (type 0), which declares every
//! class the recording uses (the primitive types, the annotations that give fields their labels and
//! units, the JDK's types for threads, classes, methods and stack traces, and the event types); one
//! checkpoint event (type 1) with the constant pools; then the events, in time order. Integers inside
//! events are compressed as the JDK reads them: seven bits a byte, low bits first, at most nine bytes, the
//! ninth holding eight bits. Ticks are nanoseconds since the start of the recording.
//!
//! Which events a profile becomes is the table [`EVENTS`]: each row names an event type, the profiles it
//! applies to, whether a context makes one event per unit of a counter (one `jdk.ExecutionSample` per
//! sample) or one event per context (bytecode and exact profiles, with their counters as fields), and
//! where each field's value comes from. A new kind of profile is a new row; see [`EventDef`].
//!
//! How contexts are mapped:
//! - The stack trace of an event is its context's path, leaf first; a frame's bytecode index is the
//!   callsite of the frame below it (-1 for the leaf and where no callsite was recorded); line numbers
//!   are not known (-1).
//! - A thread root (`[thread NAME]`, `threads=on`) becomes the event's thread, not a frame. Contexts
//!   under no thread root belong to one synthetic thread, `[all threads]` (`[no thread]` when the profile
//!   has thread roots).
//! - Java and native frames are methods of their classes (JVM forms: `java/lang/String`, `(II)I`). Whether
//!   a Java frame ran interpreted, compiled or inlined is not known to kprof: its frame type is `Unknown`;
//!   native methods have the type `Native` and the `native` modifier. A frame whose descriptor is not known
//!   gets `()V`, because readers parse descriptors.
//! - Pseudo-frames (`[GC_active]`, `[truncated]`, ...) are methods of the synthetic class `kprof`, named as
//!   kprof names them, with the descriptor `()V`. A stack with `[truncated]` is marked truncated.
//! - Events of a context are spread evenly and deterministically over the recording's duration; a
//!   counter split over several events is split in whole units that add up to the context's value.

use crate::model::{Frame, FrameKind, Metric, Profile};
use std::collections::HashMap;
use std::hash::Hash;

/// Ticks per second of the recording's clock. The JDK's reader divides it by 10^9 in integers, so it
/// must be a multiple of 10^9: ticks are nanoseconds.
const TICKS_PER_SECOND: u64 = 1_000_000_000;

/// The class that pseudo-frames are methods of.
pub const PSEUDO_CLASS: &str = "kprof";

/// Frame type of Java frames: kprof does not know whether a frame ran interpreted, compiled or inlined.
pub const FRAME_TYPE_JAVA: &str = "Unknown";
/// Frame type of native methods, as the JVM's recordings name it.
pub const FRAME_TYPE_NATIVE: &str = "Native";

/// An event type and how a profile's contexts become events of it.
pub struct EventDef {
    /// Event type name (`jdk.ExecutionSample`).
    pub name: &'static str,
    pub label: &'static str,
    pub description: &'static str,
    pub category: &'static [&'static str],
    /// Events of this type are made from profiles that carry this metric.
    pub applies: Metric,
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
}

/// Unit of a counter field, as the JDK's annotations say it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unit {
    Count,
    Bytes,
    Nanos,
}

/// The event types kprof writes. Profiles of more kinds are more rows: allocation samples would be
/// `jdk.ObjectAllocationSample` per sample with `objectClass` ([`FieldValue::LeafClass`]) and `weight`
/// (bytes, [`Unit::Bytes`]); monitor waits `jdk.JavaMonitorEnter` with `monitorClass` and a
/// [`EventDef::duration`]; parks `jdk.ThreadPark` with `parkedClass`; wall-clock samples
/// `jdk.ExecutionSample` with their thread state.
pub const EVENTS: &[EventDef] = &[
    EventDef {
        name: "jdk.ExecutionSample",
        label: "Java Execution Sample",
        description: "A CPU-time sample of a thread running Java code, taken by kprof (mode=asgct)",
        category: &["Java Virtual Machine", "Profiling"],
        applies: Metric::Samples,
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
];

/// Class ids of the metadata. Event types follow from [`ty::FIRST_EVENT`], in table order. Ids 0 and 1
/// are the metadata and checkpoint events.
mod ty {
    pub const BOOLEAN: u64 = 4;
    pub const INT: u64 = 5;
    pub const LONG: u64 = 6;
    pub const STRING: u64 = 7;
    pub const CONTENT_TYPE: u64 = 10;
    pub const LABEL: u64 = 11;
    pub const DESCRIPTION: u64 = 12;
    pub const CATEGORY: u64 = 13;
    pub const TIMESTAMP: u64 = 14;
    pub const TIMESPAN: u64 = 15;
    pub const DATA_AMOUNT: u64 = 16;
    pub const UNSIGNED: u64 = 17;
    pub const THREAD: u64 = 20;
    pub const CLASS: u64 = 21;
    pub const PACKAGE: u64 = 22;
    pub const SYMBOL: u64 = 23;
    pub const METHOD: u64 = 24;
    pub const FRAME_TYPE: u64 = 25;
    pub const STACK_FRAME: u64 = 26;
    pub const STACK_TRACE: u64 = 27;
    pub const THREAD_STATE: u64 = 28;
    pub const FIRST_EVENT: u64 = 100;
}

const METADATA_EVENT: u64 = 0;
const CHECKPOINT_EVENT: u64 = 1;
const HEADER_SIZE: usize = 68;
/// Chunk header flags: integers are compressed; this is the recording's last chunk.
const FLAG_COMPRESSED_INTS: u8 = 1;
const FLAG_FINAL_CHUNK: u8 = 2;
const ACC_NATIVE: i32 = 0x0100;

// ---------------------------------------------------------------------------------------------------
// Encoding

/// Appends `v` compressed: seven bits a byte, low bits first, the top bit set on every byte but the
/// last; the ninth byte, if reached, holds the remaining eight bits whole.
pub fn write_varint(buf: &mut Vec<u8>, mut v: u64) {
    for _ in 0..8 {
        if v < 0x80 {
            buf.push(v as u8);
            return;
        }
        buf.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Bytes [`write_varint`] takes for `v`.
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while n < 9 && v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Bytes being written, with the value encodings the JDK's reader expects.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn varint(&mut self, v: u64) {
        write_varint(&mut self.0, v);
    }

    /// An `int` field: the reader truncates the long it reads, so negative values go as 32 bits.
    fn int(&mut self, v: i32) {
        self.varint(v as u32 as u64);
    }

    fn boolean(&mut self, b: bool) {
        self.0.push(b as u8);
    }

    /// A string in place: encoding 1 (empty) or 3 (UTF-8 bytes with their count).
    fn string(&mut self, s: &str) {
        if s.is_empty() {
            self.0.push(1);
        } else {
            self.0.push(3);
            self.varint(s.len() as u64);
            self.0.extend_from_slice(s.as_bytes());
        }
    }
}

/// Appends an event: its size, which counts the size field itself, then `body` (type id first).
fn push_event(out: &mut Vec<u8>, body: &[u8]) {
    let mut size_len = 1;
    while varint_len((body.len() + size_len) as u64) != size_len {
        size_len += 1;
    }
    write_varint(out, (body.len() + size_len) as u64);
    out.extend_from_slice(body);
}

// ---------------------------------------------------------------------------------------------------
// Metadata

/// An element of the metadata tree: a name, attributes (all strings) and children.
struct Element {
    name: &'static str,
    attributes: Vec<(String, String)>,
    children: Vec<Element>,
}

impl Element {
    fn new(name: &'static str) -> Element {
        Element { name, attributes: Vec::new(), children: Vec::new() }
    }

    fn attr(mut self, key: &str, value: impl ToString) -> Element {
        self.attributes.push((key.to_string(), value.to_string()));
        self
    }

    fn child(mut self, e: Element) -> Element {
        self.children.push(e);
        self
    }

    fn children(mut self, es: impl IntoIterator<Item = Element>) -> Element {
        self.children.extend(es);
        self
    }

    fn strings<'a>(&'a self, out: &mut Vec<&'a str>) {
        out.push(self.name);
        for (k, v) in &self.attributes {
            out.push(k);
            out.push(v);
        }
        for c in &self.children {
            c.strings(out);
        }
    }

    fn write(&self, pool: &HashMap<&str, u64>, out: &mut Out) {
        out.varint(pool[self.name]);
        out.varint(self.attributes.len() as u64);
        for (k, v) in &self.attributes {
            out.varint(pool[k.as_str()]);
            out.varint(pool[v.as_str()]);
        }
        out.varint(self.children.len() as u64);
        for c in &self.children {
            c.write(pool, out);
        }
    }
}

fn class(id: u64, name: &str) -> Element {
    Element::new("class").attr("name", name).attr("id", id)
}

fn annotation_type(id: u64, name: &str) -> Element {
    class(id, name).attr("superType", "java.lang.annotation.Annotation")
}

fn annotation(type_id: u64) -> Element {
    Element::new("annotation").attr("class", type_id)
}

fn valued(type_id: u64, value: &str) -> Element {
    annotation(type_id).attr("value", value)
}

fn label(text: &str) -> Element {
    valued(ty::LABEL, text)
}

fn field(name: &str, type_id: u64, text: &str) -> Element {
    Element::new("field").attr("name", name).attr("class", type_id).child(label(text))
}

/// A field whose values are keys into the constant pool of its type.
fn pooled(name: &str, type_id: u64, text: &str) -> Element {
    field(name, type_id, text).attr("constantPool", "true")
}

/// The classes every recording declares: primitives, annotations, and the JDK's types for threads,
/// classes, methods and stack traces (the fields kprof fills; readers look fields up by name).
fn common_classes() -> Vec<Element> {
    let string_value = || Element::new("field").attr("name", "value").attr("class", ty::STRING);
    let content = |e: Element| e.child(annotation(ty::CONTENT_TYPE));
    vec![
        class(ty::BOOLEAN, "boolean"),
        class(ty::INT, "int"),
        class(ty::LONG, "long"),
        class(ty::STRING, "java.lang.String"),
        annotation_type(ty::CONTENT_TYPE, "jdk.jfr.ContentType"),
        annotation_type(ty::LABEL, "jdk.jfr.Label").child(string_value()),
        annotation_type(ty::DESCRIPTION, "jdk.jfr.Description").child(string_value()),
        annotation_type(ty::CATEGORY, "jdk.jfr.Category").child(string_value().attr("dimension", 1)),
        content(annotation_type(ty::TIMESTAMP, "jdk.jfr.Timestamp").child(string_value())),
        content(annotation_type(ty::TIMESPAN, "jdk.jfr.Timespan").child(string_value())),
        content(annotation_type(ty::DATA_AMOUNT, "jdk.jfr.DataAmount").child(string_value())),
        content(annotation_type(ty::UNSIGNED, "jdk.jfr.Unsigned")),
        class(ty::THREAD, "java.lang.Thread").child(label("Thread")).children([
            field("osName", ty::STRING, "OS Thread Name"),
            field("javaName", ty::STRING, "Java Thread Name"),
            field("javaThreadId", ty::LONG, "Java Thread Id"),
        ]),
        class(ty::CLASS, "java.lang.Class")
            .child(label("Java Class"))
            .children([pooled("name", ty::SYMBOL, "Name"), pooled("package", ty::PACKAGE, "Package")]),
        class(ty::PACKAGE, "jdk.types.Package").child(label("Package")).child(pooled("name", ty::SYMBOL, "Name")),
        class(ty::SYMBOL, "jdk.types.Symbol").attr("simpleType", "true").child(label("Symbol")).child(field(
            "string",
            ty::STRING,
            "String",
        )),
        class(ty::METHOD, "jdk.types.Method").child(label("Java Method")).children([
            pooled("type", ty::CLASS, "Type"),
            pooled("name", ty::SYMBOL, "Name"),
            pooled("descriptor", ty::SYMBOL, "Descriptor"),
            field("modifiers", ty::INT, "Access Modifiers"),
            field("hidden", ty::BOOLEAN, "Hidden"),
        ]),
        class(ty::FRAME_TYPE, "jdk.types.FrameType")
            .attr("simpleType", "true")
            .child(label("Frame type"))
            .child(field("description", ty::STRING, "Description")),
        class(ty::STACK_FRAME, "jdk.types.StackFrame").children([
            pooled("method", ty::METHOD, "Java Method"),
            field("lineNumber", ty::INT, "Line Number"),
            field("bytecodeIndex", ty::INT, "Bytecode Index"),
            pooled("type", ty::FRAME_TYPE, "Frame Type"),
        ]),
        class(ty::STACK_TRACE, "jdk.types.StackTrace").child(label("Stacktrace")).children([
            field("truncated", ty::BOOLEAN, "Truncated"),
            field("frames", ty::STACK_FRAME, "Stack Frames").attr("dimension", 1),
        ]),
        class(ty::THREAD_STATE, "jdk.types.ThreadState")
            .attr("simpleType", "true")
            .child(label("Java Thread State"))
            .child(field("name", ty::STRING, "Name")),
    ]
}

/// The class element of an event type. The reader takes the first field as the start time and a field
/// named `duration` as the second.
fn event_class(id: u64, def: &EventDef) -> Element {
    let mut e = class(id, def.name).attr("superType", "jdk.jfr.Event");
    e = e.child(field("startTime", ty::LONG, "Start Time").child(valued(ty::TIMESTAMP, "TICKS")));
    if def.duration.is_some() {
        e = e.child(field("duration", ty::LONG, "Duration").child(valued(ty::TIMESPAN, "TICKS")));
    }
    let thread_label = if def.thread_field == "sampledThread" { "Thread" } else { "Event Thread" };
    e = e.child(pooled(def.thread_field, ty::THREAD, thread_label));
    e = e.child(pooled("stackTrace", ty::STACK_TRACE, "Stack Trace"));
    for f in def.fields {
        let mut fe = match f.value {
            FieldValue::Counter(_, unit) => {
                let fe = field(f.name, ty::LONG, f.label).child(annotation(ty::UNSIGNED));
                match unit {
                    Unit::Count => fe,
                    Unit::Bytes => fe.child(valued(ty::DATA_AMOUNT, "BYTES")),
                    Unit::Nanos => fe.child(valued(ty::TIMESPAN, "NANOSECONDS")),
                }
            }
            FieldValue::ThreadState(_) => pooled(f.name, ty::THREAD_STATE, f.label),
            FieldValue::LeafClass => pooled(f.name, ty::CLASS, f.label),
        };
        if !f.description.is_empty() {
            fe = fe.child(valued(ty::DESCRIPTION, f.description));
        }
        e = e.child(fe);
    }
    let mut category = annotation(ty::CATEGORY);
    for (i, c) in def.category.iter().enumerate() {
        category = category.attr(&format!("value-{i}"), c);
    }
    e.child(label(def.label)).child(valued(ty::DESCRIPTION, def.description)).child(category)
}

/// The metadata event's body (type id first).
fn metadata_event(events: &[(u64, &EventDef)]) -> Vec<u8> {
    let mut classes = common_classes();
    classes.extend(events.iter().map(|&(id, def)| event_class(id, def)));
    let root = Element::new("root")
        .child(Element::new("metadata").children(classes))
        .child(Element::new("region").attr("locale", "en_US").attr("gmtOffset", 0).attr("dst", 0));
    let mut strings = Vec::new();
    root.strings(&mut strings);
    let mut pool: HashMap<&str, u64> = HashMap::new();
    let mut order = Vec::new();
    for s in strings {
        let next = pool.len() as u64;
        pool.entry(s).or_insert_with(|| {
            order.push(s);
            next
        });
    }
    let mut out = Out::default();
    out.varint(METADATA_EVENT);
    out.varint(0); // start time
    out.varint(0); // duration
    out.varint(1); // metadata id
    out.varint(order.len() as u64);
    for s in &order {
        out.string(s);
    }
    root.write(&pool, &mut out);
    out.0
}

// ---------------------------------------------------------------------------------------------------
// Constant pools

/// Values numbered from 1 in the order first seen (key 0 is null to the reader).
struct Interner<K> {
    index: HashMap<K, u64>,
    items: Vec<K>,
}

impl<K: Hash + Eq + Clone> Interner<K> {
    fn new() -> Interner<K> {
        Interner { index: HashMap::new(), items: Vec::new() }
    }

    fn id(&mut self, k: K) -> u64 {
        if let Some(&i) = self.index.get(&k) {
            return i;
        }
        self.items.push(k.clone());
        let i = self.items.len() as u64;
        self.index.insert(k, i);
        i
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct MethodKey {
    class: u64,
    name: u64,
    descriptor: u64,
    modifiers: i32,
}

/// The constant pools, filled as stack traces and events need entries.
struct Pools {
    symbols: Interner<String>,
    packages: Interner<u64>,
    /// (name symbol, package or 0).
    classes: Interner<(u64, u64)>,
    methods: Interner<MethodKey>,
    threads: Interner<String>,
    states: Interner<&'static str>,
}

/// The frame type pool; keys are 1-based indices.
const FRAME_TYPES: [&str; 2] = [FRAME_TYPE_JAVA, FRAME_TYPE_NATIVE];
const FRAME_TYPE_JAVA_KEY: u64 = 1;
const FRAME_TYPE_NATIVE_KEY: u64 = 2;

impl Pools {
    fn new() -> Pools {
        Pools {
            symbols: Interner::new(),
            packages: Interner::new(),
            classes: Interner::new(),
            methods: Interner::new(),
            threads: Interner::new(),
            states: Interner::new(),
        }
    }

    /// The class named `internal` (JVM form: `java/lang/String`, `[B`).
    fn class(&mut self, internal: &str) -> u64 {
        let name = self.symbols.id(internal.to_string());
        let package = match internal.rfind('/') {
            Some(i) if !internal.starts_with('[') => {
                let p = self.symbols.id(internal[..i].to_string());
                self.packages.id(p)
            }
            _ => 0,
        };
        self.classes.id((name, package))
    }

    /// The method and frame type (key into [`FRAME_TYPES`]) of a frame.
    fn method(&mut self, frame: &Frame) -> (u64, u64) {
        let (class, name, descriptor, modifiers, frame_type) = method_parts(frame);
        let class = self.class(&class);
        let name = self.symbols.id(name);
        let descriptor = self.symbols.id(descriptor);
        (self.methods.id(MethodKey { class, name, descriptor, modifiers }), frame_type)
    }

    /// The checkpoint event's body (type id first), with `stack_traces` (that many entries, each with
    /// its key, as written).
    fn checkpoint_event(&self, stack_traces: &Out, stack_trace_count: u64) -> Vec<u8> {
        let mut pools: Vec<(u64, u64, Out)> = Vec::new();
        let mut symbols = Out::default();
        for (i, s) in self.symbols.items.iter().enumerate() {
            symbols.varint(i as u64 + 1);
            symbols.string(s);
        }
        pools.push((ty::SYMBOL, self.symbols.items.len() as u64, symbols));
        let mut packages = Out::default();
        for (i, &name) in self.packages.items.iter().enumerate() {
            packages.varint(i as u64 + 1);
            packages.varint(name);
        }
        pools.push((ty::PACKAGE, self.packages.items.len() as u64, packages));
        let mut classes = Out::default();
        for (i, &(name, package)) in self.classes.items.iter().enumerate() {
            classes.varint(i as u64 + 1);
            classes.varint(name);
            classes.varint(package);
        }
        pools.push((ty::CLASS, self.classes.items.len() as u64, classes));
        let mut methods = Out::default();
        for (i, m) in self.methods.items.iter().enumerate() {
            methods.varint(i as u64 + 1);
            methods.varint(m.class);
            methods.varint(m.name);
            methods.varint(m.descriptor);
            methods.int(m.modifiers);
            // Not hidden: `jfr print` leaves hidden frames out, and kprof's contexts show every frame.
            methods.boolean(false);
        }
        pools.push((ty::METHOD, self.methods.items.len() as u64, methods));
        let mut frame_types = Out::default();
        for (i, t) in FRAME_TYPES.iter().enumerate() {
            frame_types.varint(i as u64 + 1);
            frame_types.string(t);
        }
        pools.push((ty::FRAME_TYPE, FRAME_TYPES.len() as u64, frame_types));
        let mut states = Out::default();
        for (i, s) in self.states.items.iter().enumerate() {
            states.varint(i as u64 + 1);
            states.string(s);
        }
        pools.push((ty::THREAD_STATE, self.states.items.len() as u64, states));
        let mut threads = Out::default();
        for (i, name) in self.threads.items.iter().enumerate() {
            threads.varint(i as u64 + 1);
            threads.string(name);
            threads.string(name);
            threads.varint(i as u64 + 1);
        }
        pools.push((ty::THREAD, self.threads.items.len() as u64, threads));

        let mut out = Out::default();
        out.varint(CHECKPOINT_EVENT);
        out.varint(0); // start time
        out.varint(0); // duration
        out.varint(0); // distance to the next checkpoint: none
        out.0.push(0); // checkpoint kind: an ordinary one (not a flush, no chunk header)
        pools.push((ty::STACK_TRACE, stack_trace_count, Out::default()));
        // The reader refuses empty pools.
        let non_empty = pools.iter().filter(|p| p.1 > 0).count() as u64;
        out.varint(non_empty);
        for (type_id, count, body) in pools.iter().filter(|p| p.1 > 0) {
            out.varint(*type_id);
            out.varint(*count);
            let body = if *type_id == ty::STACK_TRACE { stack_traces } else { body };
            out.0.extend_from_slice(&body.0);
        }
        out.0
    }
}

/// A frame as a JFR method: (class, name, descriptor, modifiers, frame type) in JVM forms.
fn method_parts(frame: &Frame) -> (String, String, String, i32, u64) {
    let descriptor = |sig: &str| if sig.contains(')') { sig.to_string() } else { "()V".to_string() };
    match frame.kind {
        FrameKind::Java | FrameKind::Native if !frame.class.is_empty() => {
            let native = frame.kind == FrameKind::Native;
            (
                internal_class_name(&frame.class),
                frame.method.clone(),
                descriptor(&frame.signature),
                if native { ACC_NATIVE } else { 0 },
                if native { FRAME_TYPE_NATIVE_KEY } else { FRAME_TYPE_JAVA_KEY },
            )
        }
        FrameKind::Native => (
            PSEUDO_CLASS.to_string(),
            frame.method.clone(),
            descriptor(&frame.signature),
            ACC_NATIVE,
            FRAME_TYPE_NATIVE_KEY,
        ),
        FrameKind::Java => {
            (PSEUDO_CLASS.to_string(), frame.method.clone(), descriptor(&frame.signature), 0, FRAME_TYPE_JAVA_KEY)
        }
        FrameKind::Pseudo | FrameKind::Thread => {
            (PSEUDO_CLASS.to_string(), frame.display_name(), "()V".to_string(), 0, FRAME_TYPE_JAVA_KEY)
        }
    }
}

/// A class name in Java form (`java.lang.String`, `byte[]`, `a.B$C[][]`) or the JVM's own form for
/// arrays (`[Ljava.lang.Object;`) in the JVM's internal form (`java/lang/String`, `[B`, `[[La/B$C;`).
pub fn internal_class_name(java: &str) -> String {
    let mut base = java;
    let mut dims = 0;
    while let Some(b) = base.strip_suffix("[]") {
        base = b;
        dims += 1;
    }
    if dims == 0 {
        return java.replace('.', "/");
    }
    let element = match base {
        "boolean" => "Z".to_string(),
        "byte" => "B".to_string(),
        "char" => "C".to_string(),
        "short" => "S".to_string(),
        "int" => "I".to_string(),
        "long" => "J".to_string(),
        "float" => "F".to_string(),
        "double" => "D".to_string(),
        b if b.starts_with('[') => b.replace('.', "/"),
        b => format!("L{};", b.replace('.', "/")),
    };
    "[".repeat(dims) + &element
}

/// The class a leaf pseudo-frame `[WORD CLASS]` names, in Java form.
fn class_in_pseudo_frame(name: &str) -> Option<&str> {
    let inner = name.strip_prefix('[')?.strip_suffix(']')?;
    let (_, class) = inner.split_once(' ')?;
    (!class.is_empty()).then_some(class)
}

// ---------------------------------------------------------------------------------------------------
// The recording

/// `i`-th of `n` instants spread evenly over `span` ticks: the middle of the `i`-th of `n` equal parts,
/// always below `span` (for `span` ≥ 1).
pub fn spread(i: u64, n: u64, span: u64) -> u64 {
    ((2 * i as u128 + 1) * span as u128 / (2 * n.max(1) as u128)) as u64
}

/// The `j`-th of `k` whole shares of `total`: they differ by at most one and add up to `total`.
pub fn share(total: u64, j: u64, k: u64) -> u64 {
    let k = k.max(1);
    total / k + u64::from(j < total % k)
}

/// Renders `profile` as a JFR recording with the events of [`EVENTS`].
pub fn render(profile: &Profile) -> Vec<u8> {
    render_with(profile, EVENTS)
}

/// Renders `profile` as a JFR recording with the events of the rows of `events` that apply to it.
pub fn render_with(profile: &Profile, events: &[EventDef]) -> Vec<u8> {
    let meta = &profile.meta;
    let span = meta.duration_ns.max(1);
    let rows: Vec<(u64, &EventDef)> = events
        .iter()
        .enumerate()
        .filter(|(_, d)| profile.has(d.applies))
        .map(|(i, d)| (ty::FIRST_EVENT + i as u64, d))
        .collect();

    // Every event as (time, row, node, index among the node's events, the node's event count).
    let mut list: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    for (r, (_, def)) in rows.iter().enumerate() {
        match def.emit {
            Emit::PerUnit(metric) => {
                for node in 0..profile.nodes.len() as u32 {
                    let k = profile.value(node, metric);
                    list.extend((0..k).map(|j| (spread(j, k, span), r as u32, node, j, k)));
                }
            }
            Emit::PerContext => {
                let counters: Vec<Metric> = def
                    .fields
                    .iter()
                    .filter_map(|f| match f.value {
                        FieldValue::Counter(m, _) => Some(m),
                        _ => None,
                    })
                    .chain(def.duration)
                    .collect();
                let nodes: Vec<u32> = (0..profile.nodes.len() as u32)
                    .filter(|&n| counters.iter().any(|&m| profile.value(n, m) > 0))
                    .collect();
                let n = nodes.len() as u64;
                list.extend(
                    nodes.iter().enumerate().map(|(i, &node)| (spread(i as u64, n, span), r as u32, node, 0, 1)),
                );
            }
        }
    }
    list.sort_unstable();

    // Stack traces (one per context with events, keyed by node + 1) and threads.
    let mut pools = Pools::new();
    let mut stack_traces = Out::default();
    let mut stack_trace_count = 0u64;
    let parents = profile.parents();
    let has_thread_roots = profile.nodes[0]
        .children
        .iter()
        .any(|&c| profile.frames[profile.nodes[c as usize].frame as usize].kind == FrameKind::Thread);
    let no_thread = if has_thread_roots { "[no thread]" } else { "[all threads]" };
    let mut method_of_frame: Vec<Option<(u64, u64)>> = vec![None; profile.frames.len()];
    let mut context: Vec<Option<(u64, u64)>> = vec![None; profile.nodes.len()]; // (thread, leaf class)
    let mut path: Vec<u32> = Vec::new();
    let needs_leaf_class = rows.iter().any(|(_, d)| d.fields.iter().any(|f| f.value == FieldValue::LeafClass));
    for &(_, _, node, _, _) in &list {
        if context[node as usize].is_some() {
            continue;
        }
        // The path from the root's child down to the node, in a buffer reused across contexts.
        path.clear();
        let mut n = node;
        while n != 0 {
            path.push(n);
            n = parents[n as usize];
        }
        path.reverse();
        let frame_of = |n: u32| &profile.frames[profile.nodes[n as usize].frame as usize];
        let (thread, frames) = match path.first() {
            Some(&first) if frame_of(first).kind == FrameKind::Thread => (frame_of(first).method.as_str(), &path[1..]),
            _ => (no_thread, &path[..]),
        };
        let thread = match pools.threads.index.get(thread) {
            Some(&id) => id,
            None => pools.threads.id(thread.to_string()),
        };
        let leaf_class = match frames.last() {
            Some(&leaf) if needs_leaf_class => {
                let f = frame_of(leaf);
                match (f.kind, class_in_pseudo_frame(&f.method)) {
                    (FrameKind::Pseudo, Some(c)) => pools.class(&internal_class_name(c)),
                    (FrameKind::Java | FrameKind::Native, _) if !f.class.is_empty() => {
                        pools.class(&internal_class_name(&f.class))
                    }
                    _ => 0,
                }
            }
            _ => 0,
        };
        context[node as usize] = Some((thread, leaf_class));
        let truncated = frames.iter().any(|&n| {
            let f = frame_of(n);
            f.kind == FrameKind::Pseudo && f.method == "[truncated]"
        });
        stack_traces.varint(node as u64 + 1);
        stack_traces.boolean(truncated);
        stack_traces.varint(frames.len() as u64);
        for (i, &n) in frames.iter().enumerate().rev() {
            let frame = profile.nodes[n as usize].frame as usize;
            let (method, frame_type) = match method_of_frame[frame] {
                Some(m) => m,
                None => {
                    let m = pools.method(&profile.frames[frame]);
                    method_of_frame[frame] = Some(m);
                    m
                }
            };
            let bci = frames.get(i + 1).map_or(-1, |&below| profile.nodes[below as usize].callsite);
            stack_traces.varint(method);
            stack_traces.int(-1); // line number: not known
            stack_traces.int(bci);
            stack_traces.varint(frame_type);
        }
        stack_trace_count += 1;
    }
    let mut state_ids: HashMap<&'static str, u64> = HashMap::new();
    for (_, def) in &rows {
        for f in def.fields {
            if let FieldValue::ThreadState(s) = f.value {
                state_ids.insert(s, pools.states.id(s));
            }
        }
    }

    // The header (its chunk size filled in at the end), the metadata and the constant pools, then the
    // events straight into the file.
    let mut metadata = Vec::new();
    push_event(&mut metadata, &metadata_event(&rows));
    let mut checkpoint = Vec::new();
    push_event(&mut checkpoint, &pools.checkpoint_event(&stack_traces, stack_trace_count));
    drop(stack_traces);
    let mut file = Vec::with_capacity(HEADER_SIZE + metadata.len() + checkpoint.len() + list.len() * 16);
    file.extend_from_slice(b"FLR\0");
    file.extend_from_slice(&2u16.to_be_bytes()); // major version
    file.extend_from_slice(&1u16.to_be_bytes()); // minor version
    file.extend_from_slice(&0u64.to_be_bytes()); // chunk size, below
    file.extend_from_slice(&((HEADER_SIZE + metadata.len()) as u64).to_be_bytes()); // constant pools
    file.extend_from_slice(&(HEADER_SIZE as u64).to_be_bytes()); // metadata
    file.extend_from_slice(&meta.start_unix_ms.saturating_mul(1_000_000).to_be_bytes()); // start, epoch ns
    file.extend_from_slice(&span.to_be_bytes()); // duration, ns
    file.extend_from_slice(&0u64.to_be_bytes()); // start, ticks
    file.extend_from_slice(&TICKS_PER_SECOND.to_be_bytes());
    // File state 0 (complete: a reader waits while it is not), then the flags.
    file.extend_from_slice(&[0, 0, 0, FLAG_COMPRESSED_INTS | FLAG_FINAL_CHUNK]);
    debug_assert_eq!(file.len(), HEADER_SIZE);
    file.extend_from_slice(&metadata);
    file.extend_from_slice(&checkpoint);

    let mut body = Out::default();
    for &(time, r, node, j, k) in &list {
        let (type_id, def) = rows[r as usize];
        let (thread, leaf_class) = context[node as usize].unwrap_or((0, 0));
        body.0.clear();
        body.varint(type_id);
        body.varint(time);
        if let Some(m) = def.duration {
            body.varint(share(profile.value(node, m), j, k));
        }
        body.varint(thread);
        body.varint(node as u64 + 1);
        for f in def.fields {
            match f.value {
                FieldValue::Counter(m, _) => body.varint(share(profile.value(node, m), j, k)),
                FieldValue::ThreadState(s) => body.varint(state_ids[s]),
                FieldValue::LeafClass => body.varint(leaf_class),
            }
        }
        push_event(&mut file, &body.0);
    }
    let size = file.len() as u64;
    file[8..16].copy_from_slice(&size.to_be_bytes());
    file
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, FrameKind, Meta, Profile};
    use std::collections::{BTreeMap, BTreeSet};

    /// Reads an integer as the JDK's reader does: seven bits a byte while the top bit is set, for at
    /// most eight bytes; a ninth byte counts whole.
    fn read_varint(b: &[u8], pos: &mut usize) -> u64 {
        let mut v = 0u64;
        for i in 0..9 {
            let byte = b[*pos];
            *pos += 1;
            if i == 8 {
                return v | (byte as u64) << 56;
            }
            v |= ((byte & 0x7f) as u64) << (7 * i);
            if byte & 0x80 == 0 {
                return v;
            }
        }
        unreachable!()
    }

    fn encoded(v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        write_varint(&mut b, v);
        b
    }

    #[test]
    fn integers_are_compressed_as_the_jdk_reads_them() {
        assert_eq!(encoded(0), [0]);
        assert_eq!(encoded(127), [0x7f]);
        assert_eq!(encoded(128), [0x80, 0x01]);
        assert_eq!(encoded(300), [0xac, 0x02]);
        // An int of -1 goes as its 32 bits; the reader's cast to int gives -1 back.
        let mut out = Out::default();
        out.int(-1);
        assert_eq!(out.0, [0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(read_varint(&out.0, &mut 0) as i32, -1);
        assert_eq!(encoded((1 << 56) - 1), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        // Past 56 bits the ninth byte holds eight bits, not seven and a continuation.
        assert_eq!(encoded(1 << 56), [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert_eq!(encoded(u64::MAX), [0xff; 9]);
        for shift in 0..64 {
            for v in [(1u64 << shift).wrapping_sub(1), 1 << shift, (1u64 << shift) + 1] {
                let b = encoded(v);
                assert_eq!(b.len(), varint_len(v), "{v}");
                let mut pos = 0;
                assert_eq!(read_varint(&b, &mut pos), v);
                assert_eq!(pos, b.len());
            }
        }
    }

    #[test]
    fn an_events_size_counts_its_own_size_field() {
        for n in
            [0usize, 1, 125, 126, 127, 128, 16_380, 16_381, 16_382, 16_383, 16_384, 2_097_148, 2_097_150, 2_097_152]
        {
            let mut out = vec![9u8];
            push_event(&mut out, &vec![7u8; n]);
            let mut pos = 1;
            let size = read_varint(&out, &mut pos) as usize;
            assert_eq!(size, out.len() - 1, "body of {n} bytes");
            assert_eq!(&out[pos..], &vec![7u8; n][..]);
        }
    }

    #[test]
    fn strings_are_empty_or_utf8_with_their_byte_count() {
        let mut out = Out::default();
        out.string("");
        out.string("ab");
        out.string("λ😀");
        assert_eq!(out.0[..5], [1, 3, 2, b'a', b'b']);
        assert_eq!(out.0[5..7], [3, 6]);
        assert_eq!(std::str::from_utf8(&out.0[7..]).unwrap(), "λ😀");
    }

    #[test]
    fn class_names_take_the_jvms_internal_form() {
        assert_eq!(internal_class_name("java.lang.String"), "java/lang/String");
        assert_eq!(internal_class_name("a.B$C"), "a/B$C");
        assert_eq!(internal_class_name("Top"), "Top");
        assert_eq!(internal_class_name("byte[]"), "[B");
        assert_eq!(internal_class_name("boolean[][]"), "[[Z");
        assert_eq!(internal_class_name("java.lang.String[]"), "[Ljava/lang/String;");
        assert_eq!(internal_class_name("[Ljava.lang.Object;"), "[Ljava/lang/Object;");
        assert_eq!(internal_class_name("[I"), "[I");
        assert_eq!(class_in_pseudo_frame("[alloc byte[]]"), Some("byte[]"));
        assert_eq!(class_in_pseudo_frame("[lock java.lang.Object]"), Some("java.lang.Object"));
        assert_eq!(class_in_pseudo_frame("[GC_active]"), None);
    }

    #[test]
    fn frames_become_methods_whose_descriptors_readers_can_parse() {
        let java = Frame::java("a.b.C", "m", "(I[Ljava/lang/String;)V");
        assert_eq!(method_parts(&java), ("a/b/C".into(), "m".into(), "(I[Ljava/lang/String;)V".into(), 0, 1));
        assert_eq!(FRAME_TYPES[0], FRAME_TYPE_JAVA);
        let native = Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Thread", "sleep", "(J)V") };
        assert_eq!(method_parts(&native), ("java/lang/Thread".into(), "sleep".into(), "(J)V".into(), ACC_NATIVE, 2));
        assert_eq!(FRAME_TYPES[1], FRAME_TYPE_NATIVE);
        let unknown_signature = Frame::java("a.B", "m", "");
        assert_eq!(method_parts(&unknown_signature).2, "()V");
        let gc = Frame::pseudo("[GC_active]");
        assert_eq!(method_parts(&gc), (PSEUDO_CLASS.into(), "[GC_active]".into(), "()V".into(), 0, 1));
        let thread = Frame::thread("worker");
        assert_eq!(method_parts(&thread).1, "[thread worker]");
    }

    #[test]
    fn events_are_spread_inside_the_recording_and_shares_add_up() {
        for (n, span) in [(1u64, 1u64), (1, 1000), (3, 1000), (1000, 7), (7, 1_000_000_000_000), (5, u64::MAX)] {
            let times: Vec<u64> = (0..n).map(|i| spread(i, n, span)).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
            assert!(times.iter().all(|&t| t < span), "{times:?} within {span}");
        }
        assert_eq!((0..4).map(|i| spread(i, 4, 800)).collect::<Vec<_>>(), [100, 300, 500, 700]);
        for (total, k) in [(0u64, 1u64), (10, 3), (2, 5), (1_000_000_007, 1000), (u64::MAX, 7)] {
            let shares: Vec<u64> = (0..k).map(|j| share(total, j, k)).collect();
            assert_eq!(shares.iter().fold(0u64, |a, &s| a.wrapping_add(s)), total);
            assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        }
    }

    /// A profile with threads, callsites, native and pseudo-frames, a truncated stack and names that are
    /// not ASCII.
    fn sample_profile(mode: &str) -> Profile {
        let metrics = match mode {
            "asgct" => [Metric::Samples, Metric::Cpu],
            "bytecode" => [Metric::BytecodeSamples, Metric::Bytecodes],
            "exact" => [Metric::Calls, Metric::Bytecodes],
            _ => [Metric::LockCount, Metric::LockNs],
        };
        let mut p = Profile::new(
            Meta { mode: mode.into(), start_unix_ms: 1_700_000_000_123, duration_ns: 2_000_000_000, ..Meta::default() },
            &metrics,
        );
        let t = p.intern(Frame::thread("pool-1 😀 <worker>"));
        let main = p.intern(Frame::java("a.Main", "main", "([Ljava/lang/String;)V"));
        let f = p.intern(Frame::java("a.Ünï$Inner", "lambda$run$0", "(IJ)Ljava/lang/Object;"));
        let nat = p.intern(Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Object", "hashCode", "()I") });
        let gc = p.intern(Frame::pseudo("[GC_active]"));
        let truncated = p.intern(Frame::pseudo("[truncated]"));
        let nt = p.child(0, t, -1);
        let nm = p.child(nt, main, -1);
        let f1 = p.child(nm, f, 3);
        let f2 = p.child(nm, f, 9);
        let n = p.child(f1, nat, 12);
        let g = p.child(0, gc, -1);
        let cut = p.child(nt, truncated, -1);
        let deep = p.child(cut, f, -1);
        for (node, samples, weight, calls) in
            [(f1, 3, 30, 1), (f2, 1, 10, 2), (n, 2, 20, 0), (g, 1, 5, 0), (deep, 4, 40, 5)]
        {
            // Each profile's two metrics: the count, then the weight; exact's count is calls.
            let count = if mode == "exact" { calls } else { samples };
            p.set(node, metrics[0], count);
            p.set(node, metrics[1], weight);
        }
        p
    }

    /// What the metadata declares: class id → (name, simple, fields as (name, class, constant pool,
    /// array)).
    type Classes = BTreeMap<u64, (String, bool, Vec<(String, u64, bool, bool)>)>;

    struct Reader<'a> {
        b: &'a [u8],
        pos: usize,
    }

    impl Reader<'_> {
        fn varint(&mut self) -> u64 {
            read_varint(self.b, &mut self.pos)
        }

        fn byte(&mut self) -> u8 {
            self.pos += 1;
            self.b[self.pos - 1]
        }

        fn string(&mut self) -> String {
            match self.byte() {
                1 => String::new(),
                3 => {
                    let n = self.varint() as usize;
                    self.pos += n;
                    String::from_utf8(self.b[self.pos - n..self.pos].to_vec()).unwrap()
                }
                e => panic!("string encoding {e} at {}", self.pos),
            }
        }

        /// A value of class `c`, with the constant pool references it holds.
        fn value(&mut self, classes: &Classes, c: u64, refs: &mut Vec<(u64, u64)>) {
            let (name, _, fields) = &classes[&c];
            match name.as_str() {
                "long" | "int" => {
                    self.varint();
                }
                "boolean" => assert!(self.byte() <= 1),
                "java.lang.String" => {
                    self.string();
                }
                _ => {
                    for (_, fc, pooled, array) in fields.clone() {
                        let n = if array { self.varint() } else { 1 };
                        for _ in 0..n {
                            if pooled {
                                refs.push((fc, self.varint()));
                            } else {
                                self.value(classes, fc, refs);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Reads `bytes` as the JDK's reader would, checking what it relies on; returns the events' type
    /// names in file order, with their times.
    fn read_recording(bytes: &[u8]) -> Vec<(String, u64)> {
        let be = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(&bytes[..4], b"FLR\0");
        assert_eq!(bytes[4..8], [0, 2, 0, 1]);
        assert_eq!(be(8) as usize, bytes.len());
        let (cp_at, md_at) = (be(16) as usize, be(24) as usize);
        assert_eq!(be(56), 1_000_000_000);
        assert_eq!(bytes[64], 0, "file state: complete");
        assert_eq!(bytes[67], 3, "flags: compressed integers, final chunk");

        // Metadata: the string pool, then the element tree.
        let mut r = Reader { b: bytes, pos: md_at };
        let end = md_at + r.varint() as usize;
        assert_eq!(r.varint(), 0);
        let _start_duration_and_id = (r.varint(), r.varint(), r.varint());
        let strings: Vec<String> = (0..r.varint()).map(|_| r.string()).collect();
        struct El {
            name: String,
            attrs: BTreeMap<String, String>,
            children: Vec<El>,
        }
        fn element(r: &mut Reader, s: &[String]) -> El {
            let name = s[r.varint() as usize].clone();
            let attrs =
                (0..r.varint()).map(|_| (s[r.varint() as usize].clone(), s[r.varint() as usize].clone())).collect();
            let children = (0..r.varint()).map(|_| element(r, s)).collect();
            El { name, attrs, children }
        }
        let root = element(&mut r, &strings);
        assert_eq!(r.pos, end, "metadata size");
        let metadata = root.children.iter().find(|e| e.name == "metadata").unwrap();
        assert!(root.children.iter().any(|e| e.name == "region"));
        let mut classes = Classes::new();
        let mut annotations_used = BTreeSet::new();
        let mut events = BTreeSet::new();
        for c in &metadata.children {
            let id: u64 = c.attrs["id"].parse().unwrap();
            let mut fields = Vec::new();
            for e in &c.children {
                match e.name.as_str() {
                    "field" => {
                        fields.push((
                            e.attrs["name"].clone(),
                            e.attrs["class"].parse().unwrap(),
                            e.attrs.contains_key("constantPool"),
                            e.attrs.contains_key("dimension"),
                        ));
                        annotations_used.extend(e.children.iter().map(|a| a.attrs["class"].parse::<u64>().unwrap()));
                    }
                    "annotation" => {
                        annotations_used.insert(e.attrs["class"].parse::<u64>().unwrap());
                    }
                    other => panic!("element {other}"),
                }
            }
            if c.attrs.get("superType").map(String::as_str) == Some("jdk.jfr.Event") {
                assert_eq!(fields[0].0, "startTime");
                if let Some(i) = fields.iter().position(|f| f.0 == "duration") {
                    assert_eq!(i, 1, "duration comes second");
                }
                events.insert(id);
            }
            let simple = c.attrs.contains_key("simpleType");
            assert!(!simple || fields.len() == 1);
            assert!(classes.insert(id, (c.attrs["name"].clone(), simple, fields)).is_none(), "id {id} twice");
        }
        for (name, _, fields) in classes.values() {
            for f in fields {
                assert!(classes.contains_key(&f.1), "{name}.{} has an undeclared class {}", f.0, f.1);
            }
        }
        assert!(annotations_used.iter().all(|a| classes.contains_key(a)));

        // The constant pools: every reference, in pools and events, names an entry (or null).
        let mut r = Reader { b: bytes, pos: cp_at };
        let end = cp_at + r.varint() as usize;
        assert_eq!(r.varint(), 1);
        let _start_and_duration = (r.varint(), r.varint());
        assert_eq!(r.varint(), 0, "the only checkpoint");
        assert_eq!(r.byte(), 0);
        let mut keys: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        let mut refs = Vec::new();
        for _ in 0..r.varint() {
            let c = r.varint();
            let count = r.varint();
            assert!(count > 0, "empty pool of {}", classes[&c].0);
            for _ in 0..count {
                assert!(keys.entry(c).or_default().insert(r.varint()));
                r.value(&classes, c, &mut refs);
            }
        }
        assert_eq!(r.pos, end, "checkpoint size");
        let mut r = Reader { b: bytes, pos: HEADER_SIZE };
        let mut seen = Vec::new();
        while r.pos < bytes.len() {
            let start = r.pos;
            let end = start + r.varint() as usize;
            let ty = r.varint();
            if events.contains(&ty) {
                let time = Reader { b: bytes, pos: r.pos }.varint();
                r.value(&classes, ty, &mut refs);
                assert_eq!(r.pos, end, "size of a {} event", classes[&ty].0);
                seen.push((classes[&ty].0.clone(), time));
            } else {
                assert!(ty <= 1 && [md_at, cp_at].contains(&start));
            }
            r.pos = end;
        }
        for (c, key) in refs {
            assert!(key == 0 || keys.get(&c).is_some_and(|k| k.contains(&key)), "{} {key} missing", classes[&c].0);
        }
        seen
    }

    #[test]
    fn a_cpu_profile_makes_one_sorted_execution_sample_per_sample() {
        let p = sample_profile("asgct");
        let events = read_recording(&render(&p));
        assert_eq!(events.len(), 11);
        assert!(events.iter().all(|(name, _)| name == "jdk.ExecutionSample"));
        assert!(events.windows(2).all(|w| w[0].1 <= w[1].1), "{events:?}");
        assert!(events.iter().all(|e| e.1 < p.meta.duration_ns));
    }

    #[test]
    fn bytecode_and_exact_profiles_make_one_event_per_context() {
        let events = read_recording(&render(&sample_profile("bytecode")));
        assert_eq!(events.len(), 5);
        assert!(events.iter().all(|(name, _)| name == "kprof.BytecodeSample"));
        // The contexts without calls but with bytecodes are contexts of the exact profile too.
        let events = read_recording(&render(&sample_profile("exact")));
        assert_eq!(events.len(), 5);
        assert!(events.iter().all(|(name, _)| name == "kprof.CallCount"));
    }

    #[test]
    fn a_profile_without_events_is_still_a_recording() {
        let p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples, Metric::Cpu]);
        assert!(read_recording(&render(&p)).is_empty());
        let p = Profile::new(Meta { mode: "something else".into(), ..Meta::default() }, &[Metric::Wall]);
        assert!(read_recording(&render(&p)).is_empty());
    }

    #[test]
    fn rows_with_classes_and_durations_read_back() {
        let rows = [EventDef {
            name: "jdk.JavaMonitorEnter",
            label: "Java Monitor Blocked",
            description: "",
            category: &["Java Application"],
            applies: Metric::LockCount,
            emit: Emit::PerUnit(Metric::LockCount),
            thread_field: "eventThread",
            duration: Some(Metric::LockNs),
            fields: &[FieldDef {
                name: "monitorClass",
                label: "Monitor Class",
                description: "",
                value: FieldValue::LeafClass,
            }],
        }];
        let events = read_recording(&render_with(&sample_profile("lock"), &rows));
        assert_eq!(events.len(), 11);
    }
}
