//! The constant pools: symbols, packages, classes, methods, threads, thread states.

use super::encode::{ty, Out, ACC_NATIVE, CHECKPOINT_EVENT};
use super::{FRAME_TYPE_JAVA, FRAME_TYPE_NATIVE, PSEUDO_CLASS};
use crate::model::{Frame, FrameKind};
use std::collections::HashMap;
use std::hash::Hash;

// ---------------------------------------------------------------------------------------------------
// Constant pools

/// Values numbered from 1 in the order first seen (key 0 is null to the reader).
pub(super) struct Interner<K> {
    pub(super) index: HashMap<K, u64>,
    pub(super) items: Vec<K>,
}

impl<K: Hash + Eq + Clone> Interner<K> {
    pub(super) fn new() -> Interner<K> {
        Interner { index: HashMap::new(), items: Vec::new() }
    }

    pub(super) fn id(&mut self, k: K) -> u64 {
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
pub(super) struct MethodKey {
    class: u64,
    name: u64,
    descriptor: u64,
    modifiers: i32,
}

/// The constant pools, filled as stack traces and events need entries.
pub(super) struct Pools {
    pub(super) symbols: Interner<String>,
    pub(super) packages: Interner<u64>,
    /// (name symbol, package or 0).
    pub(super) classes: Interner<(u64, u64)>,
    pub(super) methods: Interner<MethodKey>,
    pub(super) threads: Interner<String>,
    pub(super) states: Interner<&'static str>,
}

/// The frame type pool; keys are 1-based indices.
pub(super) const FRAME_TYPES: [&str; 2] = [FRAME_TYPE_JAVA, FRAME_TYPE_NATIVE];
pub(super) const FRAME_TYPE_JAVA_KEY: u64 = 1;
pub(super) const FRAME_TYPE_NATIVE_KEY: u64 = 2;

impl Pools {
    pub(super) fn new() -> Pools {
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
    pub(super) fn class(&mut self, internal: &str) -> u64 {
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
    pub(super) fn method(&mut self, frame: &Frame) -> (u64, u64) {
        let (class, name, descriptor, modifiers, frame_type) = method_parts(frame);
        let class = self.class(&class);
        let name = self.symbols.id(name);
        let descriptor = self.symbols.id(descriptor);
        (self.methods.id(MethodKey { class, name, descriptor, modifiers }), frame_type)
    }

    /// The checkpoint event's body (type id first), with `stack_traces` (that many entries, each with
    /// its key, as written).
    pub(super) fn checkpoint_event(&self, stack_traces: &Out, stack_trace_count: u64) -> Vec<u8> {
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
pub(super) fn method_parts(frame: &Frame) -> (String, String, String, i32, u64) {
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
pub(super) fn class_in_pseudo_frame(name: &str) -> Option<&str> {
    let inner = name.strip_prefix('[')?.strip_suffix(']')?;
    let (_, class) = inner.split_once(' ')?;
    (!class.is_empty()).then_some(class)
}
