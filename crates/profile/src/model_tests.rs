use super::*;

#[test]
fn descriptors_read_as_java() {
    assert_eq!(descriptor_to_java("(I[Ljava/lang/String;)V"), "(int,java.lang.String[])void");
    assert_eq!(descriptor_to_java("()[[J"), "()long[][]");
    assert_eq!(
        descriptor_to_java("(Ljava/lang/Object;DZ)Ljava/util/Map$Entry;"),
        "(java.lang.Object,double,boolean)java.util.Map$Entry"
    );
    assert_eq!(descriptor_to_java("(Lbroken"), "(Lbroken");
    assert_eq!(descriptor_to_java(""), "");
}

#[test]
fn overloads_have_distinct_names() {
    let a = Frame::java("java.lang.String", "indexOf", "(I)I");
    let b = Frame::java("java.lang.String", "indexOf", "(II)I");
    assert_eq!(a.display_name(), "java.lang.String.indexOf(int)int");
    assert_ne!(a.display_name(), b.display_name());
    assert_eq!(Frame::pseudo("[GC_active]").display_name(), "[GC_active]");
    assert_eq!(Frame::thread("main").display_name(), "[thread main]");
    assert_eq!(Frame::thread("a;b").display_name(), "[thread a_b]");
}

fn sample_profile() -> Profile {
    let mut p = Profile::new(Meta::default(), &[Metric::Samples]);
    let f = p.intern(Frame::java("A", "f", "()V"));
    let g = p.intern(Frame::java("A", "g", "()V"));
    let n1 = p.add_child(0, f, -1);
    let n2 = p.add_child(n1, g, 3);
    let n3 = p.add_child(n1, g, 7);
    p.add(n1, Metric::Samples, 1);
    p.add(n2, Metric::Samples, 2);
    p.add(n3, Metric::Samples, 4);
    p
}

#[test]
fn totals_are_inclusive() {
    let p = sample_profile();
    assert_eq!(p.totals(Metric::Samples), vec![7, 7, 2, 4]);
}

#[test]
fn merging_by_frame_joins_callsites() {
    let m = sample_profile().merged_by_frame();
    assert_eq!(m.nodes.len(), 3);
    assert_eq!(m.totals(Metric::Samples)[0], 7);
    let g = m.nodes[1].children[0];
    assert_eq!(m.value(g, Metric::Samples), 6);
}

#[test]
fn totals_hold_when_children_come_before_their_parents() {
    // Node 2 is the root's child and node 1 is node 2's: not in index order, as a JSON reader may give.
    let mut p = Profile::new(Meta::default(), &[Metric::Samples]);
    let f = p.intern(Frame::java("A", "f", "()V"));
    let a = p.push_node(Node { frame: f, ..Node::default() });
    let b = p.push_node(Node { frame: f, children: vec![1], ..Node::default() });
    p.add(a, Metric::Samples, 3);
    p.add(b, Metric::Samples, 2);
    p.nodes[0].children.push(2);
    assert_eq!(p.post_order(), vec![1, 2, 0]);
    assert_eq!(p.totals(Metric::Samples), vec![5, 3, 5]);
    p.nodes[0].children = vec![1];
    p.nodes[1].children = vec![2];
    p.nodes[2].children.clear();
    assert_eq!(p.post_order(), vec![2, 1, 0]);
    assert_eq!(p.totals(Metric::Samples), vec![5, 5, 2]);
}

#[test]
fn samples_means_the_sampling_engines_samples_where_there_are_no_cpu_samples() {
    let p = Profile::new(Meta::default(), &[Metric::BytecodeSamples, Metric::Bytecodes]);
    assert_eq!(p.resolve_metric(Metric::Samples), Ok(Metric::BytecodeSamples));
    assert_eq!(p.resolve_metric(Metric::Bytecodes), Ok(Metric::Bytecodes));
    assert_eq!(p.default_metric(), Metric::BytecodeSamples);
    let err = p.resolve_metric(Metric::Cpu).unwrap_err();
    assert!(err.contains("no 'cpu'") && err.contains("bytecode_samples, bytecodes"), "{err}");
    let both = Profile::new(Meta::default(), &[Metric::Samples, Metric::Cpu, Metric::WallSamples]);
    assert_eq!(both.resolve_metric(Metric::Samples), Ok(Metric::Samples));
    let calls = Profile::new(Meta::default(), &[Metric::Calls, Metric::Bytecodes]);
    assert!(calls.resolve_metric(Metric::Samples).is_err());
}

#[test]
fn every_metric_has_a_name_that_parses_back() {
    for m in Metric::ALL {
        assert_eq!(Metric::parse(m.name()), Some(m));
        assert!(Metric::ACCEPTED.contains(m.name()));
        assert_eq!(Metric::ALL[m.index()], m);
    }
}

#[test]
fn post_order_handles_deep_trees() {
    let mut p = Profile::new(Meta::default(), &[Metric::Samples]);
    let f = p.intern(Frame::java("A", "r", "()V"));
    let mut n = 0;
    for _ in 0..200_000 {
        n = p.add_child(n, f, 1);
    }
    p.add(n, Metric::Samples, 1);
    assert_eq!(p.totals(Metric::Samples)[0], 1);
    assert_eq!(p.post_order().len(), 200_001);
}
