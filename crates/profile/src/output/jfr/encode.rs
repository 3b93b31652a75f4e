//! The chunk's encodings (compressed integers, strings, events) and its metadata event.

use super::events::{EventDef, FieldValue, Unit};
use std::collections::HashMap;

/// Class ids of the metadata. Event types follow from [`ty::FIRST_EVENT`], in table order. Ids 0 and 1
/// are the metadata and checkpoint events.
pub(super) mod ty {
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

pub(super) const METADATA_EVENT: u64 = 0;
pub(super) const CHECKPOINT_EVENT: u64 = 1;
pub(super) const HEADER_SIZE: usize = 68;
/// Chunk header flags: integers are compressed; this is the recording's last chunk.
pub(super) const FLAG_COMPRESSED_INTS: u8 = 1;
pub(super) const FLAG_FINAL_CHUNK: u8 = 2;
pub(super) const ACC_NATIVE: i32 = 0x0100;

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
pub(super) struct Out(pub(super) Vec<u8>);

impl Out {
    pub(super) fn varint(&mut self, v: u64) {
        write_varint(&mut self.0, v);
    }

    /// An `int` field: the reader truncates the long it reads, so negative values go as 32 bits.
    pub(super) fn int(&mut self, v: i32) {
        self.varint(v as u32 as u64);
    }

    pub(super) fn boolean(&mut self, b: bool) {
        self.0.push(b as u8);
    }

    /// A string in place: encoding 1 (empty) or 3 (UTF-8 bytes with their count).
    pub(super) fn string(&mut self, s: &str) {
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
pub(super) fn push_event(out: &mut Vec<u8>, body: &[u8]) {
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
pub(super) struct Element {
    name: &'static str,
    attributes: Vec<(String, String)>,
    children: Vec<Element>,
}

impl Element {
    pub(super) fn new(name: &'static str) -> Element {
        Element { name, attributes: Vec::new(), children: Vec::new() }
    }

    pub(super) fn attr(mut self, key: &str, value: impl ToString) -> Element {
        self.attributes.push((key.to_string(), value.to_string()));
        self
    }

    pub(super) fn child(mut self, e: Element) -> Element {
        self.children.push(e);
        self
    }

    pub(super) fn children(mut self, es: impl IntoIterator<Item = Element>) -> Element {
        self.children.extend(es);
        self
    }

    pub(super) fn strings<'a>(&'a self, out: &mut Vec<&'a str>) {
        out.push(self.name);
        for (k, v) in &self.attributes {
            out.push(k);
            out.push(v);
        }
        for c in &self.children {
            c.strings(out);
        }
    }

    pub(super) fn write(&self, pool: &HashMap<&str, u64>, out: &mut Out) {
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

pub(super) fn class(id: u64, name: &str) -> Element {
    Element::new("class").attr("name", name).attr("id", id)
}

pub(super) fn annotation_type(id: u64, name: &str) -> Element {
    class(id, name).attr("superType", "java.lang.annotation.Annotation")
}

pub(super) fn annotation(type_id: u64) -> Element {
    Element::new("annotation").attr("class", type_id)
}

pub(super) fn valued(type_id: u64, value: &str) -> Element {
    annotation(type_id).attr("value", value)
}

pub(super) fn label(text: &str) -> Element {
    valued(ty::LABEL, text)
}

pub(super) fn field(name: &str, type_id: u64, text: &str) -> Element {
    Element::new("field").attr("name", name).attr("class", type_id).child(label(text))
}

/// A field whose values are keys into the constant pool of its type.
pub(super) fn pooled(name: &str, type_id: u64, text: &str) -> Element {
    field(name, type_id, text).attr("constantPool", "true")
}

/// The classes every recording declares: primitives, annotations, and the JDK's types for threads,
/// classes, methods and stack traces (the fields kprof fills; readers look fields up by name).
pub(super) fn common_classes() -> Vec<Element> {
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
pub(super) fn event_class(id: u64, def: &EventDef) -> Element {
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
            FieldValue::LeafState => pooled(f.name, ty::THREAD_STATE, f.label),
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
pub(super) fn metadata_event(events: &[(u64, &EventDef)]) -> Vec<u8> {
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
