//! pprof: a gzipped `perftools.profiles.Profile` protobuf, encoded by hand (the handful of messages
//! needed is smaller than a protobuf dependency).
//!
//! - One sample type per metric of the profile, named as the metric (`samples/count`, `cpu/nanoseconds`,
//!   `alloc_bytes/bytes`, `lock_ns/nanoseconds`, `calls/count`, ...), so `-sample_index=NAME` picks what
//!   `metric=NAME` shows elsewhere; the default sample type is the profile's default metric.
//! - One Function per distinct frame name (name = display name, system name = JVM form
//!   `java/lang/String.indexOf(I)I`).
//! - One Location per (function, line), where line is the *callsite bytecode index*: a frame's line is
//!   the bci in its method where it called the next frame of the stack (pprof's meaning of a non-leaf
//!   location), so callsite-distinct contexts stay apart. A leaf, and a call whose bci was not recorded,
//!   has line 0. These are not source lines.
//! - One Sample per calling context with a non-zero counter, its location ids leaf first, the
//!   `[root]` pseudo-frame left out (pprof has its own root).

use crate::model::{FrameKind, Metric, Profile, Unit};
use flate2::write::GzEncoder;
use flate2::Compression;
use std::collections::HashMap;
use std::io::Write;

/// Field numbers of the pprof messages used here (from the format's documentation).
mod field {
    pub mod profile {
        pub const SAMPLE_TYPE: u32 = 1;
        pub const SAMPLE: u32 = 2;
        pub const LOCATION: u32 = 4;
        pub const FUNCTION: u32 = 5;
        pub const STRING_TABLE: u32 = 6;
        pub const TIME_NANOS: u32 = 9;
        pub const DURATION_NANOS: u32 = 10;
        pub const PERIOD_TYPE: u32 = 11;
        pub const PERIOD: u32 = 12;
        pub const COMMENT: u32 = 13;
        pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
    }
    pub mod value_type {
        pub const TYPE: u32 = 1;
        pub const UNIT: u32 = 2;
    }
    pub mod sample {
        pub const LOCATION_ID: u32 = 1;
        pub const VALUE: u32 = 2;
    }
    pub mod location {
        pub const ID: u32 = 1;
        pub const LINE: u32 = 4;
    }
    pub mod line {
        pub const FUNCTION_ID: u32 = 1;
        pub const LINE: u32 = 2;
    }
    pub mod function {
        pub const ID: u32 = 1;
        pub const NAME: u32 = 2;
        pub const SYSTEM_NAME: u32 = 3;
    }
}

/// A protobuf message being written.
#[derive(Default)]
struct Message {
    buf: Vec<u8>,
}

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(((field as u64) << 3) | wire_type as u64);
    }

    /// An integer field (int64 and uint64 alike: our values are never negative); zero is the default
    /// and is left out.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    fn message(&mut self, field: u32, m: &Message) {
        self.bytes(field, &m.buf);
    }

    fn packed(&mut self, field: u32, values: &[u64]) {
        if values.is_empty() {
            return;
        }
        let mut inner = Message::default();
        for &v in values {
            inner.varint(v);
        }
        self.bytes(field, &inner.buf);
    }
}

/// The string table: index 0 is the empty string.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings { table: Vec::new(), index: HashMap::new() };
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The sample types written for `profile`, in order: (metric, type, unit).
pub fn sample_types(profile: &Profile) -> Vec<(Metric, &'static str, &'static str)> {
    let mut types: Vec<_> = profile.metrics().into_iter().map(|m| (m, m.name(), unit(m))).collect();
    if types.is_empty() {
        types.push((Metric::Samples, "samples", "count"));
    }
    types
}

/// pprof's name for a metric's unit.
fn unit(m: Metric) -> &'static str {
    match m.unit() {
        Unit::Count | Unit::Bytecodes => "count",
        Unit::Nanoseconds => "nanoseconds",
        Unit::Bytes => "bytes",
    }
}

/// Renders `profile` as gzipped pprof (every counter the profile has; see the module comment).
pub fn render(profile: &Profile) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Message::default();

    let types = sample_types(profile);
    for &(_, ty, unit) in &types {
        let mut vt = Message::default();
        vt.uint(field::value_type::TYPE, strings.get(ty));
        vt.uint(field::value_type::UNIT, strings.get(unit));
        out.message(field::profile::SAMPLE_TYPE, &vt);
    }

    // Functions: one per distinct display name.
    let mut function_of_frame = vec![0u64; profile.frames.len()];
    let mut function_by_name: HashMap<String, u64> = HashMap::new();
    let mut functions = Message::default();
    for (i, frame) in profile.frames.iter().enumerate() {
        let name = frame.display_name();
        if let Some(&id) = function_by_name.get(&name) {
            function_of_frame[i] = id;
            continue;
        }
        let id = function_by_name.len() as u64 + 1;
        let system_name = match frame.kind {
            FrameKind::Java | FrameKind::Native if !frame.class.is_empty() => {
                format!("{}.{}{}", frame.class.replace('.', "/"), frame.method, frame.signature)
            }
            _ => name.clone(),
        };
        let mut f = Message::default();
        f.uint(field::function::ID, id);
        f.uint(field::function::NAME, strings.get(&name));
        f.uint(field::function::SYSTEM_NAME, strings.get(&system_name));
        functions.message(field::profile::FUNCTION, &f);
        function_by_name.insert(name, id);
        function_of_frame[i] = id;
    }

    // Samples, with locations created as stacks need them.
    let mut location_ids: HashMap<(u64, u64), u64> = HashMap::new();
    let mut locations = Message::default();
    let mut location = |function: u64, line: u64, locations: &mut Message| -> u64 {
        let next = location_ids.len() as u64 + 1;
        *location_ids.entry((function, line)).or_insert_with(|| {
            let mut l = Message::default();
            l.uint(field::line::FUNCTION_ID, function);
            l.uint(field::line::LINE, line);
            let mut loc = Message::default();
            loc.uint(field::location::ID, next);
            loc.message(field::location::LINE, &l);
            locations.message(field::profile::LOCATION, &loc);
            next
        })
    };
    let parents = profile.parents();
    let mut samples = Message::default();
    let mut stack = Vec::new();
    let mut values = Vec::with_capacity(types.len());
    for node in 0..profile.nodes.len() as u32 {
        values.clear();
        values.extend(types.iter().map(|&(metric, _, _)| profile.value(node, metric)));
        if values.iter().all(|&v| v == 0) {
            continue;
        }
        stack.clear();
        // Leaf first: each frame's line is the callsite of the frame below it on the stack.
        let mut line = 0u64;
        let mut n = node;
        loop {
            let nd = &profile.nodes[n as usize];
            if n != 0 || node == 0 {
                stack.push(location(function_of_frame[nd.frame as usize], line, &mut locations));
            }
            if n == 0 {
                break;
            }
            line = nd.callsite.max(0) as u64;
            n = parents[n as usize];
        }
        let mut s = Message::default();
        s.packed(field::sample::LOCATION_ID, &stack);
        s.packed(field::sample::VALUE, &values);
        samples.message(field::profile::SAMPLE, &s);
    }
    out.buf.extend_from_slice(&samples.buf);
    out.buf.extend_from_slice(&locations.buf);
    out.buf.extend_from_slice(&functions.buf);

    let meta = &profile.meta;
    // The sampling period of the engine behind the first timed metric.
    let period = [(Metric::Cpu, "nanoseconds"), (Metric::Wall, "nanoseconds"), (Metric::BytecodeSamples, "count")]
        .into_iter()
        .find(|(m, _)| profile.has(*m))
        .map(|(m, unit)| (if m == Metric::BytecodeSamples { "bytecodes" } else { m.name() }, unit));
    let mut scalars = Message::default();
    scalars.uint(field::profile::TIME_NANOS, meta.start_unix_ms.saturating_mul(1_000_000));
    scalars.uint(field::profile::DURATION_NANOS, meta.duration_ns);
    if let (Some((ty, unit)), true) = (period, meta.interval > 0) {
        let mut vt = Message::default();
        vt.uint(field::value_type::TYPE, strings.get(ty));
        vt.uint(field::value_type::UNIT, strings.get(unit));
        scalars.message(field::profile::PERIOD_TYPE, &vt);
        scalars.uint(field::profile::PERIOD, meta.interval);
    }
    let mut comments = vec![format!("kprof mode={}", meta.mode)];
    if !meta.timer.is_empty() {
        comments.push(format!("timer={}", meta.timer));
    }
    if !meta.jvm.is_empty() {
        comments.push(format!("jvm={}", meta.jvm));
    }
    comments.extend(meta.counters.iter().map(|(k, v)| format!("{k}={v}")));
    for c in &comments {
        scalars.uint(field::profile::COMMENT, strings.get(c));
    }
    let default_metric = profile.default_metric();
    if let Some(&(_, ty, _)) = types.iter().find(|t| t.0 == default_metric) {
        scalars.uint(field::profile::DEFAULT_SAMPLE_TYPE, strings.get(ty));
    }
    for s in &strings.table {
        out.bytes(field::profile::STRING_TABLE, s.as_bytes());
    }
    out.buf.extend_from_slice(&scalars.buf);

    let mut gz = GzEncoder::new(Vec::with_capacity(out.buf.len() / 4 + 64), Compression::default());
    gz.write_all(&out.buf).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, Meta};
    use flate2::read::GzDecoder;
    use std::io::Read;

    /// A minimal protobuf reader for the tests: (field, wire type, value or bytes).
    fn fields(mut b: &[u8]) -> Vec<(u32, u8, u64, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= ((byte & 0x7f) as u64) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let (field, wt) = ((key >> 3) as u32, (key & 7) as u8);
            match wt {
                0 => out.push((field, wt, varint(&mut b), Vec::new())),
                2 => {
                    let len = varint(&mut b) as usize;
                    out.push((field, wt, 0, b[..len].to_vec()));
                    b = &b[len..];
                }
                _ => panic!("unexpected wire type {wt}"),
            }
        }
        out
    }

    fn unpacked(b: &[u8]) -> Vec<u64> {
        let mut v = Vec::new();
        let mut cur = 0u64;
        let mut shift = 0;
        for &byte in b {
            cur |= ((byte & 0x7f) as u64) << shift;
            shift += 7;
            if byte < 0x80 {
                v.push(cur);
                cur = 0;
                shift = 0;
            }
        }
        v
    }

    /// A sample's (function id, line) pairs, leaf first, and its values.
    type DecodedSample = (Vec<(u64, u64)>, Vec<u64>);

    fn decode(gz: &[u8]) -> Vec<u8> {
        let mut raw = Vec::new();
        GzDecoder::new(gz).read_to_end(&mut raw).unwrap();
        raw
    }

    #[test]
    fn varints_encode_like_protobuf() {
        let mut m = Message::default();
        m.varint(1);
        m.varint(300);
        m.varint(u64::MAX);
        assert_eq!(m.buf, [0x01, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    }

    #[test]
    fn stacks_are_leaf_first_with_callsite_lines() {
        let mut p = Profile::new(
            Meta { mode: "asgct".into(), interval: 1_000_000, start_unix_ms: 1_000, duration_ns: 5, ..Meta::default() },
            &[Metric::Samples, Metric::Cpu],
        );
        let m = p.intern(Frame::java("a.M", "main", "()V"));
        let f = p.intern(Frame::java("a.M", "f", "(I)V"));
        let nm = p.add_child(0, m, -1);
        let f1 = p.add_child(nm, f, 4);
        let f2 = p.add_child(nm, f, 11);
        p.add(f1, Metric::Samples, 2);
        p.add(f1, Metric::Cpu, 2_000_000);
        p.add(f2, Metric::Samples, 1);
        p.add(f2, Metric::Cpu, 1_000_000);
        let raw = decode(&render(&p));
        let top = fields(&raw);
        let strings: Vec<String> =
            top.iter().filter(|f| f.0 == 6).map(|f| String::from_utf8(f.3.clone()).unwrap()).collect();
        assert_eq!(strings[0], "");
        let types: Vec<(String, String)> = top
            .iter()
            .filter(|f| f.0 == 1)
            .map(|f| {
                let vt = fields(&f.3);
                (strings[vt[0].2 as usize].clone(), strings[vt[1].2 as usize].clone())
            })
            .collect();
        assert_eq!(types, [("samples".into(), "count".into()), ("cpu".into(), "nanoseconds".into())]);
        // Locations: (id, function, line).
        let locations: HashMap<u64, (u64, u64)> = top
            .iter()
            .filter(|f| f.0 == 4)
            .map(|f| {
                let loc = fields(&f.3);
                let line = fields(&loc[1].3);
                let function = line.iter().find(|x| x.0 == 1).map_or(0, |x| x.2);
                let number = line.iter().find(|x| x.0 == 2).map_or(0, |x| x.2);
                (loc[0].2, (function, number))
            })
            .collect();
        let samples: Vec<DecodedSample> = top
            .iter()
            .filter(|f| f.0 == 2)
            .map(|f| {
                let s = fields(&f.3);
                let ids = unpacked(&s[0].3);
                (ids.iter().map(|id| locations[id]).collect(), unpacked(&s[1].3))
            })
            .collect();
        // Functions are numbered in frame order: [root] 1, main 2, f 3.
        assert_eq!(samples, [(vec![(3, 0), (2, 4)], vec![2, 2_000_000]), (vec![(3, 0), (2, 11)], vec![1, 1_000_000])]);
        assert_eq!(locations.len(), 3);
        let period = top.iter().find(|f| f.0 == 12).unwrap().2;
        assert_eq!(period, 1_000_000);
        assert_eq!(top.iter().find(|f| f.0 == 9).unwrap().2, 1_000_000_000);
        let default_type = top.iter().find(|f| f.0 == 14).unwrap().2;
        assert_eq!(strings[default_type as usize], "samples");
    }

    #[test]
    fn sample_types_are_the_profiles_metrics() {
        let p = Profile::new(Meta { mode: "exact".into(), ..Meta::default() }, &[Metric::Calls, Metric::Bytecodes]);
        let types: Vec<_> = sample_types(&p).into_iter().map(|t| (t.1, t.2)).collect();
        assert_eq!(types, [("calls", "count"), ("bytecodes", "count")]);
        let all =
            [Metric::Samples, Metric::Cpu, Metric::AllocCount, Metric::AllocBytes, Metric::LockCount, Metric::LockNs];
        let p = Profile::new(Meta { mode: "asgct+alloc+lock".into(), ..Meta::default() }, &all);
        let types: Vec<_> = sample_types(&p).into_iter().map(|t| (t.1, t.2)).collect();
        assert_eq!(
            types,
            [
                ("samples", "count"),
                ("cpu", "nanoseconds"),
                ("alloc_count", "count"),
                ("alloc_bytes", "bytes"),
                ("lock_count", "count"),
                ("lock_ns", "nanoseconds")
            ]
        );
        let c = Profile::new(Meta { mode: "collapsed".into(), ..Meta::default() }, &[]);
        assert_eq!(sample_types(&c).len(), 1);
    }

    #[test]
    fn deep_trees_render() {
        let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples]);
        let f = p.intern(Frame::java("A", "r", "()V"));
        let mut n = 0;
        for i in 0..100_000 {
            n = p.add_child(n, f, i % 3);
        }
        p.add(n, Metric::Samples, 1);
        let raw = decode(&render(&p));
        let top = fields(&raw);
        assert_eq!(top.iter().filter(|f| f.0 == 2).count(), 1);
        assert_eq!(top.iter().filter(|f| f.0 == 4).count(), 3, "locations: lines 0, 1, 2 of one function");
    }
}
