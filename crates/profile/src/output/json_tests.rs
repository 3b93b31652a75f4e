use super::*;

fn sample() -> Profile {
    let mut meta = Meta {
        mode: "exact".into(),
        default_metric: Some(Metric::Calls),
        interval: 0,
        timer: String::new(),
        jvm: "OpenJDK 64-Bit Server VM 21.0.2".into(),
        start_unix_ms: 1_700_000_000_123,
        duration_ns: 2_500_000_000,
        counters: BTreeMap::new(),
    };
    meta.counters.insert("classes_rewritten".into(), 812);
    let mut p = Profile::new(meta, &[Metric::Calls, Metric::Bytecodes, Metric::Samples]);
    let main = p.intern(Frame::java("a.Main", "main", "([Ljava/lang/String;)V"));
    let f = p.intern(Frame::java("a.B$C", "f\"quoted\"\\", "(IJ)Ljava/lang/Object;"));
    let n = p.intern(Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Object", "hashCode", "()I") });
    let t = p.intern(Frame::thread("pool-1 \u{1F600} <worker>"));
    let nt = p.add_child(0, t, -1);
    let nm = p.add_child(nt, main, -1);
    let a = p.add_child(nm, f, 4);
    let b = p.add_child(nm, f, 17);
    let c = p.add_child(a, n, 2);
    p.set(nm, Metric::Calls, 1);
    p.set(a, Metric::Calls, 10);
    p.set(a, Metric::Bytecodes, 1234);
    p.nodes[a as usize].blocks =
        vec![BlockCount { start_bci: 0, end_bci: 5, count: 10 }, BlockCount { start_bci: 5, end_bci: 9, count: 3 }];
    p.set(b, Metric::Calls, 7);
    p.set(c, Metric::Calls, 10);
    p.set(c, Metric::Samples, 2);
    p
}

#[test]
fn round_trips_to_an_equal_profile() {
    let p = sample();
    let text = String::from_utf8(render(&p)).unwrap();
    let back = parse(&text).unwrap();
    assert_eq!(back, p);
    assert_eq!(render(&back), text.as_bytes());
}

#[test]
fn golden_document() {
    let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples, Metric::Cpu]);
    let f = p.intern(Frame::java("A", "f", "()V"));
    let n = p.add_child(0, f, 3);
    p.set(n, Metric::Samples, 2);
    p.set(n, Metric::Cpu, 2_000_000);
    let text = String::from_utf8(render(&p)).unwrap();
    let expected = r#"{"format":"kprof-cct","version":2,
"meta":{"mode":"asgct","metrics":["samples","cpu"],"default_metric":null,"interval":0,"timer":"","jvm":"","start_unix_ms":0,"duration_ns":0,"counters":{}},
"totals":{"samples":2,"cpu":2000000},
"frames":[
{"kind":"pseudo","class":"","method":"[root]","signature":"","name":"[root]"},
{"kind":"java","class":"A","method":"f","signature":"()V","name":"A.f()void"}],
"nodes":[
{"id":0,"parent":-1,"frame":0,"callsite":-1,"samples":0,"cpu":0,"total_samples":2,"total_cpu":2000000,"children":[1]},
{"id":1,"parent":0,"frame":1,"callsite":3,"samples":2,"cpu":2000000,"total_samples":2,"total_cpu":2000000,"children":[]}]}
"#;
    assert_eq!(text, expected);
}

#[test]
fn reads_version_1_documents_as_the_metrics_they_held() {
    let v1 = |mode: &str, unit: &str| {
        format!(
            r#"{{"format":"kprof-cct","version":1,"meta":{{"mode":"{mode}","weight_unit":"{unit}","default_metric":"weight"}},
            "frames":[{{"kind":"pseudo","method":"[root]"}},{{"kind":"java","class":"A","method":"f"}}],
            "nodes":[{{"parent":-1,"frame":0}},{{"parent":0,"frame":1,"samples":3,"weight":30,"calls":7}}]}}"#
        )
    };
    let asgct = parse(&v1("asgct", "cpu_ns")).unwrap();
    assert_eq!(asgct.metrics(), [Metric::Samples, Metric::Cpu]);
    assert_eq!((asgct.value(1, Metric::Samples), asgct.value(1, Metric::Cpu)), (3, 30));
    assert_eq!(asgct.default_metric(), Metric::Cpu);
    let bytecode = parse(&v1("bytecode", "bytecodes")).unwrap();
    assert_eq!(bytecode.metrics(), [Metric::BytecodeSamples, Metric::Bytecodes]);
    let exact = parse(&v1("exact", "bytecodes")).unwrap();
    assert_eq!(exact.metrics(), [Metric::Bytecodes, Metric::Calls]);
    assert_eq!((exact.value(1, Metric::Calls), exact.default_metric()), (7, Metric::Bytecodes));
    assert!(parse(&v1("asgct", "furlongs")).unwrap_err().contains("weight_unit"));
}

#[test]
fn nodes_carry_every_metric_of_a_combined_run() {
    let metrics = [Metric::Samples, Metric::Cpu, Metric::AllocCount, Metric::AllocBytes, Metric::LockNs];
    let mut p = Profile::new(Meta { mode: "asgct+alloc+lock".into(), ..Meta::default() }, &metrics);
    let f = p.intern(Frame::java("A", "f", "()V"));
    let n = p.add_child(0, f, -1);
    for (i, &m) in metrics.iter().enumerate() {
        p.set(n, m, 10 + i as u64);
    }
    let text = String::from_utf8(render(&p)).unwrap();
    assert!(text.contains(r#""alloc_bytes":13,"lock_ns":14,"total_samples":10"#), "{text}");
    assert!(text.contains(r#""totals":{"samples":10,"cpu":11,"alloc_count":12,"alloc_bytes":13,"lock_ns":14}"#));
    let back = parse(&text).unwrap();
    assert_eq!(back, p);
}

#[test]
fn reads_nodes_given_by_parent_only() {
    let text = r#"{"format":"kprof-cct","version":2,"meta":{"mode":"script","metrics":["samples"]},
        "frames":[{"kind":"pseudo","method":"[root]"},{"kind":"java","class":"A","method":"f"}],
        "nodes":[{"parent":-1,"frame":0},{"parent":0,"frame":1,"samples":3},{"parent":1,"frame":1,"samples":1}]}"#;
    let p = parse(text).unwrap();
    assert_eq!(p.totals(Metric::Samples), vec![4, 4, 1]);
    assert_eq!(p.nodes[1].children, vec![2]);
    assert_eq!(p.nodes[1].callsite, -1);
}

#[test]
fn rejects_malformed_documents() {
    let good = String::from_utf8(render(&sample())).unwrap();
    let cases: Vec<(String, &str)> = vec![
        ("{}".into(), "not a kprof JSON profile"),
        (good.replace("kprof-cct", "other"), "format is 'other'"),
        (good.replace("\"version\":2", "\"version\":3"), "version 3 is not supported"),
        (good.replace("\"kind\":\"thread\"", "\"kind\":\"robot\""), "kind 'robot'"),
        (good.replace("\"metrics\":[\"calls\"", "\"metrics\":[\"furlongs\""), "'furlongs', which is not a metric"),
        (good.replace("\"children\":[3,4]", "\"children\":[3,3]"), "listed twice"),
        (good.replace("\"children\":[3,4]", "\"children\":[3]"), "not listed"),
        (good.replace("\"id\":2,\"parent\":1", "\"id\":2,\"parent\":7"), "parent 7 is not valid"),
        (good.replace("\"id\":0,\"parent\":-1,\"frame\":0", "\"id\":0,\"parent\":-1,\"frame\":99"), "frame 99"),
    ];
    for (text, want) in cases {
        let err = parse(&text).unwrap_err();
        assert!(err.contains(want), "{err} (wanted {want})");
    }
    // A cycle detached from the root.
    let text = r#"{"format":"kprof-cct","version":2,"meta":{"mode":"x"},
        "frames":[{"kind":"pseudo","method":"[root]"}],
        "nodes":[{"parent":-1,"frame":0,"children":[]},{"parent":2,"frame":0,"children":[2]},
                 {"parent":1,"frame":0,"children":[1]}]}"#;
    assert!(parse(text).unwrap_err().contains("not reachable"));
}

#[test]
fn deep_trees_round_trip_without_recursion() {
    let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples]);
    let f = p.intern(Frame::java("A", "r", "()V"));
    let mut n = 0;
    for i in 0..100_000 {
        n = p.add_child(n, f, i % 7);
    }
    p.set(n, Metric::Samples, 5);
    let text = String::from_utf8(render(&p)).unwrap();
    let back = parse(&text).unwrap();
    assert_eq!(back, p);
}

#[test]
fn a_large_tree_formatted_by_several_threads_is_the_same_text() {
    let mut p = Profile::new(Meta { mode: "exact".into(), ..Meta::default() }, &[Metric::Calls, Metric::Bytecodes]);
    let frames: Vec<u32> = (0..50).map(|i| p.intern(Frame::java("a.M", &format!("m{i}"), "()V"))).collect();
    // 3 chunks and a bit of a fourth; parents spread over the whole tree.
    let count = 3 * CHUNK_NODES + 123;
    let mut x = 12345u64;
    for i in 1..count as u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let parent = ((x >> 33) % i) as u32;
        let n = p.add_child(parent, frames[(x >> 20) as usize % frames.len()], (i % 7) as i32);
        p.set(n, Metric::Calls, i);
        p.set(n, Metric::Bytecodes, i * 3);
    }
    let totals = p.all_totals();
    assert_eq!(totals[0][0], (1..count as u64).sum::<u64>());
    let parents = p.parents();
    let metrics = p.metrics();
    let nodes = ProfileNodes { profile: &p, parents: &parents, metrics: &metrics };
    let keys = NodeKeys::new(&metrics);
    let text = NodeText { nodes: &nodes, keys: &keys, totals: &totals };
    let mut one = Vec::new();
    write_nodes_with(&text, &mut one, 0).unwrap();
    for formatters in [1, 2, 3, 4, 8] {
        let mut many = Vec::new();
        write_nodes_with(&text, &mut many, formatters).unwrap();
        assert!(one == many, "{formatters} formatters wrote other text");
    }
    assert_eq!(one.iter().filter(|&&b| b == b'\n').count(), count);
    // The whole document, with the parallel path the writer takes on its own, reads back the same.
    let back = parse(std::str::from_utf8(&render(&p)).unwrap()).unwrap();
    assert_eq!(back.nodes.len(), count);
    assert_eq!(back.column(Metric::Calls), p.column(Metric::Calls));
    assert!(back.nodes.iter().zip(&p.nodes).all(|(a, b)| a.children == b.children));
}

#[test]
fn a_failed_write_stops_the_formatters() {
    struct Full(usize);
    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 < buf.len() {
                return Err(std::io::Error::other("disk full"));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut p = Profile::new(Meta { mode: "exact".into(), ..Meta::default() }, &[Metric::Calls, Metric::Bytecodes]);
    let f = p.intern(Frame::java("a.M", "m", "()V"));
    for i in 1..(6 * CHUNK_NODES) as u32 {
        p.add_child(i - 1, f, 1);
    }
    let totals = p.all_totals();
    let parents = p.parents();
    let metrics = p.metrics();
    let nodes = ProfileNodes { profile: &p, parents: &parents, metrics: &metrics };
    let keys = NodeKeys::new(&metrics);
    let text = NodeText { nodes: &nodes, keys: &keys, totals: &totals };
    let err = write_nodes_with(&text, &mut Full(3 << 20), 3).unwrap_err();
    assert_eq!(err.to_string(), "disk full");
}
