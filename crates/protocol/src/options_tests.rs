use super::*;

#[test]
fn defaults() {
    let o = Options::parse(None).unwrap();
    assert_eq!(o.engines, [EngineKind::Asgct]);
    assert_eq!((o.alloc_bytes, o.live, o.lock_ns, o.conditions), (512 * 1024, false, 10_000, false));
    assert_eq!(o.interval_ns, 10_000_000);
    assert_eq!(o.timer, TimerKind::Auto);
    assert_eq!(o.files, vec![OutputFile { path: DEFAULT_FILE.into(), format: Format::Html }]);
    assert_eq!(o.effective_metric(), Metric::Samples);
}

#[test]
fn durations_take_units() {
    assert_eq!(parse_duration("100us"), Some(100_000));
    assert_eq!(parse_duration("1ms"), Some(1_000_000));
    assert_eq!(parse_duration("10ms"), Some(10_000_000));
    assert_eq!(parse_duration("1s"), Some(1_000_000_000));
    assert_eq!(parse_duration("1.5ms"), Some(1_500_000));
    assert_eq!(parse_duration("250ns"), Some(250));
    assert_eq!(parse_duration("0"), Some(0));
    for bad in ["", "10", "ms", "1x", "1..2ms", "-1ms", "1e3ms"] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
}

#[test]
fn full_option_string() {
    let o = Options::parse(Some("mode=asgct,interval=1ms,timer=perf,file=/tmp/a.html,file=/tmp/b.collapsed,metric=cpu,threads,depth=64,cct_mb=16")).unwrap();
    assert_eq!(o.interval_ns, 1_000_000);
    assert_eq!(o.timer, TimerKind::Perf);
    assert_eq!(o.files.len(), 2);
    assert_eq!(o.files[1].format, Format::Collapsed);
    assert_eq!(o.metric, Some(Metric::Cpu));
    assert!(o.threads);
    assert!(!o.signatures);
    assert!(Options::parse(Some("signatures=on")).unwrap().signatures);
    assert_eq!((o.depth, o.cct_mb()), (64, 16));
}

#[test]
fn the_arena_defaults_by_mode_unless_given() {
    let mb = |s: &str| Options::parse(Some(s)).unwrap().cct_mb();
    assert_eq!(mb("mode=asgct"), 256);
    assert_eq!(mb("mode=bytecode"), 256);
    assert_eq!(mb("mode=exact"), 1024);
    assert_eq!(mb("mode=exact,cct_mb=64"), 64);
}

#[test]
fn format_applies_to_files_without_a_known_extension() {
    let o = Options::parse(Some("file=/tmp/prof.out,format=json,file=/tmp/x.html")).unwrap();
    assert_eq!(o.files[0].format, Format::Json);
    assert_eq!(o.files[1].format, Format::Html);
}

#[test]
fn every_kind_of_bad_option_gives_one_line_naming_it() {
    let cases = [
        ("bogus=1", "unknown option 'bogus'"),
        ("mode=fast", "'mode=fast'"),
        ("mode=exactly", "'mode=exactly'"),
        ("bb=some", "'bb=some'"),
        ("mode=bytecode,bb=on", "'bb=on'"),
        ("gran=0", "'gran=0'"),
        ("rand=-1", "'rand=-1'"),
        ("maxpath=70000", "'maxpath=70000'"),
        ("callsite=sometimes", "'callsite=sometimes'"),
        ("stack=deep", "'stack=deep'"),
        ("count=paths", "'count=paths'"),
        ("count=", "'count='"),
        ("checks=calls2", "'checks=calls2'"),
        ("stack=", "'stack='"),
        ("mode=bytecode,stack=walk,callsite=on", "'stack=walk'"),
        ("mode=bytecode,stack=fp,callsite=on", "'stack=fp'"),
        ("include=", "'include='"),
        ("interval=5", "'interval=5'"),
        ("interval=1us", "'interval=1us'"),
        ("interval=20s", "'interval=20s'"),
        ("interval=", "'interval='"),
        ("timer=hpet", "'timer=hpet'"),
        ("file=/tmp/x.bin", "'file=/tmp/x.bin'"),
        ("format=svg", "'format=svg'"),
        ("metric=heat", "'metric=heat'"),
        ("threads=maybe", "'threads=maybe'"),
        ("depth=0", "'depth=0'"),
        ("depth=99999", "'depth=99999'"),
        ("cct_mb=lots", "'cct_mb=lots'"),
        ("duration=5", "'duration=5'"),
        ("mode=asgct+", "'mode=asgct+'"),
        ("mode=wall+wall", "'mode=wall+wall'"),
        ("mode=cpu+heap", "'mode=cpu+heap'"),
        ("mode=bytecode+exact", "'mode=bytecode+exact'"),
        ("alloc=0", "'alloc=0'"),
        ("alloc=2g", "'alloc=2g'"),
        ("alloc=lots", "'alloc=lots'"),
        ("live=perhaps", "'live=perhaps'"),
        ("mode=asgct,live=on", "'live=on'"),
        ("lock=1h", "'lock=1h'"),
        ("lock=11s", "'lock=11s'"),
        ("lock=5", "'lock=5'"),
        ("mode=lock,conditions=maybe", "'conditions=maybe'"),
        ("mode=wall,conditions=on", "'conditions=on'"),
        ("mode=asgct,metric=calls", "'metric=calls'"),
        ("mode=wall,batch=0", "'batch=0'"),
        ("mode=wall,batch=9000", "'batch=9000'"),
        ("mode=wall,batch=some", "'batch=some'"),
        ("mode=wall,batch=", "'batch='"),
        ("mode=asgct,batch=8", "'batch=8'"),
    ];
    for (input, needle) in cases {
        let err = Options::parse(Some(input)).unwrap_err().0;
        assert!(err.contains(needle), "{input}: {err}");
        assert!(err.contains("accepted") || err.contains("counts") || err.contains("run them apart"), "{input}: {err}");
        assert!(!err.contains('\n'), "{input}: {err}");
    }
}

#[test]
fn engines_combine_with_plus() {
    let o = Options::parse(Some("mode=cpu+alloc+lock,alloc=1m,lock=0,live,conditions=on")).unwrap();
    assert!(o.conditions);
    assert_eq!(o.engines, [EngineKind::Asgct, EngineKind::Alloc, EngineKind::Lock]);
    assert_eq!(o.mode_name(), "asgct+alloc+lock");
    assert_eq!((o.alloc_bytes, o.lock_ns, o.live), (1 << 20, 0, true));
    assert_eq!(
        o.metrics(),
        [Metric::Samples, Metric::Cpu, Metric::AllocCount, Metric::AllocBytes, Metric::LockCount, Metric::LockNs]
    );
    assert_eq!(o.effective_metric(), Metric::Samples);
    let w = Options::parse(Some("mode=wall+alloc")).unwrap();
    assert_eq!(w.effective_metric(), Metric::Wall);
    assert_eq!(w.wall_batch, 16);
    let aw = Options::parse(Some("mode=asgct+wall,batch=64,interval=1ms")).unwrap();
    assert_eq!((aw.wall_batch, aw.interval_ns), (64, 1_000_000));
    assert_eq!(aw.metrics(), [Metric::Samples, Metric::Cpu, Metric::WallSamples, Metric::Wall]);
    let b = Options::parse(Some("mode=bytecode+asgct,metric=cpu")).unwrap();
    assert_eq!((b.rewriting(), b.effective_metric()), (Some(EngineKind::Bytecode), Metric::Cpu));
    assert!(!b.callsite, "bytecode mode keeps callsites apart only on request");
    let walks = |o: &str| Options::parse(Some(o)).unwrap().stack_walks();
    assert!(!walks("mode=bytecode"), "gran=10000 does not walk unless the agent finds frame pointers");
    let fp = |o: &str| Options::parse(Some(o)).unwrap().auto_may_use_fp();
    assert!(fp("mode=bytecode") && fp("mode=bytecode+asgct,gran=99999"));
    assert!(!fp("mode=bytecode,gran=100000"), "auto walks there");
    assert!(!fp("mode=bytecode,callsite=on"), "callsites need the reified stack");
    assert!(!fp("mode=bytecode,stack=reified") && !fp("mode=asgct") && !fp("mode=exact"));
    assert!(walks("mode=bytecode,gran=1000000"));
    assert!(!walks("mode=bytecode,gran=1000000,callsite=on"), "callsites need the reified stack");
    assert!(walks("mode=bytecode,stack=walk"));
    assert!(walks("mode=bytecode,stack=fp"));
    assert!(walks("mode=bytecode,stack=fpcheck"));
    assert!(!walks("mode=bytecode,gran=1000000,stack=reified"));
    assert_eq!(Options::parse(Some("mode=exact")).unwrap().effective_metric(), Metric::Calls);
    assert_eq!(Options::parse(Some("mode=bytecode")).unwrap().effective_metric(), Metric::BytecodeSamples);
    // `samples` names the sampling engine's samples where there are no CPU samples.
    assert!(Options::parse(Some("mode=bytecode,metric=samples")).is_ok());
    assert_eq!(parse_size("512k"), Some(512 << 10));
    assert_eq!(parse_size("3"), Some(3));
    assert_eq!(parse_size("2MB"), Some(2 << 20));
    assert_eq!(parse_size("k"), None);
}

#[test]
fn help_lists_every_option() {
    let h = help_text();
    for (key, ..) in OPTIONS {
        assert!(h.contains(&format!("  {key} ")), "{key}");
    }
}

#[test]
fn class_patterns() {
    assert!(glob("com.example.*", "com.example.a.B"));
    assert!(glob("*Test", "a.FooTest"));
    assert!(!glob("*Test", "a.FooTests"));
    assert!(glob("a.?.C", "a.b.C"));
    assert!(glob("*", ""));
    let o = Options::parse(Some("mode=bytecode,include=a.*:b.*,exclude=a.internal.*")).unwrap();
    assert!(o.class_selected("a.X") && o.class_selected("b.Y"));
    assert!(!o.class_selected("a.internal.Z") && !o.class_selected("c.W"));
    let all = Options::parse(Some("mode=bytecode")).unwrap();
    assert!(all.class_selected("anything.At.All"));
}

#[test]
fn paths_expand_pid_and_time() {
    assert_eq!(expand_path("/tmp/kprof-%p-%t-%n.html", 42, 7, 3), "/tmp/kprof-42-7-3.html");
}

#[test]
fn maxpath_auto_scales_with_the_granularity_for_bytecode_mode_only() {
    let at = |text: &str| Options::parse(Some(text)).unwrap();
    let o = at("mode=bytecode,gran=1000000");
    assert_eq!((o.bytecode_maxpath(), o.exact_maxpath()), (10_000, 50));
    assert_eq!(at("mode=bytecode,gran=10000").bytecode_maxpath(), 100);
    assert_eq!(at("mode=bytecode,gran=1000").bytecode_maxpath(), 50);
    assert_eq!(at("mode=bytecode,gran=1000000000").bytecode_maxpath(), 65_535);
    assert_eq!(at("mode=bytecode,gran=1000000,maxpath=auto").bytecode_maxpath(), 10_000);
    let fixed = at("mode=bytecode,gran=1000000,maxpath=0");
    assert_eq!((fixed.bytecode_maxpath(), fixed.exact_maxpath()), (0, 0));
    assert_eq!(at("mode=exact,maxpath=300").exact_maxpath(), 300);
}
