use super::encode::ACC_NATIVE;
use super::pools::{method_parts, FRAME_TYPES};
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
    for n in [0usize, 1, 125, 126, 127, 128, 16_380, 16_381, 16_382, 16_383, 16_384, 2_097_148, 2_097_150, 2_097_152] {
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
        let attrs = (0..r.varint()).map(|_| (s[r.varint() as usize].clone(), s[r.varint() as usize].clone())).collect();
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
        requires: None,
        contexts: Contexts::All,
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
