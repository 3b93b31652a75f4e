//! The files a real asgct run writes, read back by independent readers: the flame graph rendered by
//! headless Chromium, the pprof file decoded by Python protobuf, the JSON and collapsed files read by
//! kprof's readers, all agreeing on the program's known 50:30:20 split.

mod common;

use common::*;
use kprof_profile::Metric;

#[test]
fn every_format_of_a_real_profile_reads_back_with_the_expected_frames() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("outputs-{}", jdk.label()));
        let files: Vec<_> =
            ["p.html", "p.pb.gz", "p.json", "p.collapsed", "p.txt"].iter().map(|f| dir.join(f)).collect();
        let opts = format!(
            "interval=1ms,{}",
            files.iter().map(|f| format!("file={}", f.display())).collect::<Vec<_>>().join(",")
        );
        let run = run_java(jdk, Some(&opts), &[], "kprof.harness.Split3", &["2"]);
        run.assert_ok();
        let method = |m: &str| format!("kprof.harness.Split3.method{m}(long)void");

        // HTML: Chromium builds the page and every method is drawn, as Class.method, its full name in the
        // page's data (the tooltip's).
        let dom = dump_dom(&format!("file://{}", files[0].display()), &dir.join("chromium"));
        for m in ["A", "B", "C"] {
            let (drawn, full) = (format!(">Split3.method{m}</div>"), format!("\"kprof.harness.Split3.method{m}\""));
            assert!(dom.contains(&drawn) && dom.contains(&full), "{}: flame graph lacks {drawn}", jdk.label());
        }

        // pprof: decoded independently, consistent, CPU nanoseconds, the split visible in sample values.
        let decoded = decode_pprof(&files[1]);
        assert_eq!(decoded["problems"].as_array().map(Vec::len), Some(0), "{decoded}");
        let types: Vec<String> =
            decoded["sample_types"].as_array().unwrap().iter().map(|t| t[0].as_str().unwrap().to_string()).collect();
        assert!(types.contains(&"samples".to_string()) && types.contains(&"cpu".to_string()), "{types:?}");
        let mut per_method = [0u64; 3];
        for s in decoded["samples"].as_array().unwrap() {
            let stack: Vec<&str> = s["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
            for (i, m) in ["A", "B", "C"].iter().enumerate() {
                if stack.iter().any(|f| *f == method(m)) {
                    per_method[i] += s["values"][0].as_u64().unwrap();
                }
            }
        }
        let total: u64 = per_method.iter().sum();
        assert!(total > 1500, "{}: too few pprof samples in the methods: {per_method:?}", jdk.label());
        let share_a = 100.0 * per_method[0] as f64 / total as f64;
        assert!((share_a - 50.0).abs() < 2.0, "{}: pprof share of methodA {share_a:.1}%", jdk.label());

        // JSON and collapsed: kprof's readers; the same profile, so they overlap completely.
        let json = kprof_profile::output::read_profile(&files[2]).unwrap();
        let collapsed = kprof_profile::output::read_profile(&files[3]).unwrap();
        assert_eq!(json.meta.mode, "asgct");
        assert_eq!(json.meta.timer, "perf");
        let overlap = kprof_profile::output::compare::overlap_percent(&json, &collapsed, Metric::Samples, false);
        assert!((overlap - 100.0).abs() < 1e-9, "{}: json vs collapsed overlap {overlap}", jdk.label());

        // Text report: the hprof-style table names the methods.
        let text = std::fs::read_to_string(&files[4]).unwrap();
        assert!(text.contains(&method("A")) && text.contains("TOP METHODS BY SELF"), "{text}");
    });
}
