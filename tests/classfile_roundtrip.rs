//! Round trip: every class decoded (constants, instructions, exception tables, stack maps, debug tables, type
//! annotations) and re-encoded without edits comes back byte for byte, through `kprof rewrite --roundtrip`.
//!
//! The normal run covers java.base of JDK 17 (jmod) and JDK 25 (module image) and two workload jars; the
//! `#[ignore]`d tests cover every JDK 17 jmod, the whole JDK 25 image and every workload jar
//! (scripts/verify-rewrite runs them).

mod classfile_common;

use classfile_common::*;
use std::path::PathBuf;

fn roundtrip(inputs: &[PathBuf]) -> u64 {
    let mut args = vec!["rewrite".to_string(), "--roundtrip".to_string(), "--quiet".to_string()];
    args.extend(inputs.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let out = run_kprof(&args);
    let line = out.lines().find(|l| l.starts_with("round trip:")).expect("summary line");
    println!("{line}");
    assert!(line.contains(" 0 differ"), "{out}");
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn java_base_jdk17_round_trips() {
    let Some(home) = jdk(JDK17) else { return };
    assert!(roundtrip(&[home.join("jmods/java.base.jmod")]) > 5000);
}

#[test]
fn java_base_jdk25_round_trips() {
    if jdk(JDK25).is_none() {
        return;
    }
    let work = scratch("rt-base25");
    let image = extract_jdk25(&work, Some("java.base"));
    assert!(roundtrip(&[image.join("java.base")]) > 5000);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn sample_jars_and_harness_round_trip() {
    let mut inputs: Vec<PathBuf> = ["/usr/share/java/guava.jar", "/usr/share/java/xalan2.jar"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    inputs.push(PathBuf::from(harness_classes()));
    assert!(roundtrip(&inputs) > 0);
}

#[test]
#[ignore = "every JDK 17 jmod (scripts/verify-rewrite)"]
fn all_jdk17_jmods_round_trip() {
    let Some(home) = jdk(JDK17) else { return };
    let mut jmods: Vec<PathBuf> = std::fs::read_dir(home.join("jmods")).unwrap().flatten().map(|e| e.path()).collect();
    jmods.sort();
    roundtrip(&jmods);
}

#[test]
#[ignore = "the whole JDK 25 module image (scripts/verify-rewrite)"]
fn all_jdk25_image_round_trips() {
    if jdk(JDK25).is_none() {
        return;
    }
    let work = scratch("rt-all25");
    let image = extract_jdk25(&work, None);
    roundtrip(&[image]);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
#[ignore = "every workload jar (scripts/verify-rewrite)"]
fn all_workload_jars_round_trip() {
    let jars = workload_jars();
    assert!(!jars.is_empty(), "no workload jars: run shared/workloads/install.sh");
    println!("workload jars: {}", jars.len());
    roundtrip(&jars);
}
