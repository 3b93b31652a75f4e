//! The probe rewrite passes the verifier: every class is rewritten by `kprof rewrite --mode probe`, loaded and
//! linked on the JDK with `-XX:+BytecodeVerificationLocal -XX:+BytecodeVerificationRemote`, and compared with
//! the original classes as a control (0 VerifyError, 0 ClassFormatError, every other failure the same as the
//! control's), and fewer than 0.5 % of methods with code are left alone.
//!
//! The normal run covers java.base on JDK 17 and JDK 25 and two workload jars on both; the `#[ignore]`d tests
//! cover every JDK 17 jmod, the whole JDK 25 module image and every workload jar (scripts/verify-rewrite).

mod classfile_common;

use classfile_common::*;
use std::path::PathBuf;

fn check_left_alone(v: &Verified) {
    assert!(
        v.counts.left_alone_percent() < 0.5,
        "{}: {:.3} % of methods left alone: {:?}",
        v.label,
        v.counts.left_alone_percent(),
        v.counts.reasons
    );
}

#[test]
fn java_base_jdk17_verifies() {
    let Some(home) = jdk(JDK17) else { return };
    let work = scratch("verify-base17");
    let modules = vec![("java.base".to_string(), home.join("jmods/java.base.jmod"))];
    let v = verify_jdk_modules("JDK 17 java.base", &home, &modules, &work);
    check_left_alone(&v);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn java_base_jdk25_verifies() {
    let Some(home) = jdk(JDK25) else { return };
    let work = scratch("verify-base25");
    let image = extract_jdk25(&work, Some("java.base"));
    let modules = vec![("java.base".to_string(), image.join("java.base"))];
    let v = verify_jdk_modules("JDK 25 java.base", &home, &modules, &work);
    check_left_alone(&v);
    let _ = std::fs::remove_dir_all(&work);
}

fn sample_jars() -> Vec<PathBuf> {
    ["/usr/share/java/guava.jar", "/usr/share/java/xalan2.jar", "/usr/share/java/commons-lang3.jar"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .take(2)
        .collect()
}

#[test]
fn sample_jars_verify_on_both_jdks() {
    let jars = sample_jars();
    if jars.is_empty() {
        eprintln!("skipped: no sample jars");
        return;
    }
    let work = scratch("verify-jars");
    let counts = prepare_jars(&jars, &work);
    for home in [JDK17, JDK25] {
        let Some(h) = jdk(home) else { continue };
        let v = verify_jars(&format!("sample jars on {home}"), &h, &jars, &work, counts.clone());
        check_left_alone(&v);
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
#[ignore = "minutes: every JDK 17 jmod (scripts/verify-rewrite)"]
fn all_jdk17_jmods_verify() {
    let Some(home) = jdk(JDK17) else { return };
    let work = scratch("verify-all17");
    let mut modules: Vec<(String, PathBuf)> = std::fs::read_dir(home.join("jmods"))
        .unwrap()
        .flatten()
        .map(|e| (e.path().file_stem().unwrap().to_string_lossy().into_owned(), e.path()))
        .collect();
    modules.sort();
    let v = verify_jdk_modules("JDK 17 jmods", &home, &modules, &work);
    check_left_alone(&v);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
#[ignore = "minutes: the whole JDK 25 module image (scripts/verify-rewrite)"]
fn all_jdk25_image_verifies() {
    let Some(home) = jdk(JDK25) else { return };
    let work = scratch("verify-all25");
    let image = extract_jdk25(&work, None);
    let mut modules: Vec<(String, PathBuf)> = std::fs::read_dir(&image)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    modules.sort();
    let v = verify_jdk_modules("JDK 25 module image", &home, &modules, &work);
    check_left_alone(&v);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
#[ignore = "minutes: every workload jar on both JDKs (scripts/verify-rewrite)"]
fn all_workload_jars_verify_on_both_jdks() {
    let jars = workload_jars();
    assert!(!jars.is_empty(), "no workload jars: run shared/workloads/install.sh");
    let work = scratch("verify-alljars");
    let counts = prepare_jars(&jars, &work);
    println!("workload jars: {}", jars.len());
    for home in [JDK17, JDK25] {
        let Some(h) = jdk(home) else { continue };
        let v = verify_jars(&format!("workload jars on {home}"), &h, &jars, &work, counts.clone());
        check_left_alone(&v);
    }
    let _ = std::fs::remove_dir_all(&work);
}
