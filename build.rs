//! Build script of the kprof package: compiles the java-harness programs (the Java programs with known
//! answers that the integration tests, the demo and the benchmarks run) and the harness's JNI library.
//! Needs a JDK with `javac` (see `crates/runtime/javac.rs`).

#[allow(dead_code)]
#[path = "crates/runtime/javac.rs"]
mod javac;

use javac::{compile_java, find_jdk, find_newer_jdk};
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=JAVA_HOME");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let jdk = find_jdk();

    // The java-harness programs (compiled for Java 17 so both JDKs run them). Programs that need a newer
    // language level (virtual threads) live in java-harness/src21 and are compiled only when a JDK 21+
    // javac is present.
    println!("cargo:rerun-if-changed=java-harness");
    let harness = out.join("harness-classes");
    compile_java(&jdk, Path::new("java-harness/src"), &harness, &["--release", "17"]);
    if let Some(newer) = find_newer_jdk(21) {
        let harness21 = out.join("harness21-classes");
        let src21 = Path::new("java-harness/src21");
        if src21.is_dir() {
            compile_java(&newer, src21, &harness21, &["--release", "21", "-cp", harness.to_str().unwrap()]);
            println!("cargo:rustc-env=KPROF_HARNESS21_CLASSES={}", harness21.display());
        }
    }
    println!("cargo:rustc-env=KPROF_HARNESS_CLASSES={}", harness.display());

    // The JNI library of kprof.harness.NativeCallbacks (native code that calls back into Java), when a C
    // compiler is at hand; the tests that need it say so when it is missing.
    println!("cargo:rerun-if-changed=java-harness/jni");
    let jni_lib = out.join("libkprof_harness_callbacks.so");
    let built = Command::new(env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&jni_lib)
        .arg(format!("-I{}", jdk.join("include").display()))
        .arg(format!("-I{}", jdk.join("include/linux").display()))
        .arg("java-harness/jni/kprof_harness_callbacks.c")
        .status()
        .is_ok_and(|s| s.success());
    if built {
        println!("cargo:rustc-env=KPROF_HARNESS_JNI_LIB={}", jni_lib.display());
    } else {
        println!("cargo:warning=no C compiler: kprof.harness.NativeCallbacks runs without its JNI part");
    }
}
