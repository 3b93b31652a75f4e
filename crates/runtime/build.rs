//! Build script: compiles the Java helper classes (`java/src`) against a stub of `java.lang.Thread` that
//! declares the fields the agent adds to it (`java/stub`), and packs them into the jar the agent embeds
//! (`RUNTIME_JAR`). Needs a JDK with `javac`: `$JAVA_HOME`, else JDK 17 at its Debian path, else `javac` on
//! the PATH.

#[allow(dead_code)]
mod javac;

use javac::{compile_java, compile_java_files, find_jdk, make_jar};
use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=javac.rs");
    println!("cargo:rerun-if-env-changed=JAVA_HOME");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let jdk = find_jdk();

    let runtime_src = Path::new("java/src");
    println!("cargo:rerun-if-changed=java");
    let runtime_classes = out.join("runtime-classes");
    let runtime_jar = out.join("kprof-runtime.jar");
    // The helpers read fields the agent adds to java.lang.Thread: they compile against a stub of it.
    // The stub names runtime classes (the fields' types), so those are compiled first on their own.
    let stub_deps = out.join("thread-stub-deps");
    compile_java_files(
        &jdk,
        &[runtime_src.join("kprof/runtime/T.java"), runtime_src.join("kprof/runtime/ExactState.java")],
        &stub_deps,
        &["--add-exports", "java.base/jdk.internal.vm.annotation=ALL-UNNAMED"],
    );
    let stub_classes = out.join("thread-stub-classes");
    let stub_src = Path::new("java/stub");
    let patch_src = format!("java.base={}", stub_src.display());
    compile_java(
        &jdk,
        stub_src,
        &stub_classes,
        &["--patch-module", &patch_src, "--add-reads", "java.base=ALL-UNNAMED", "-cp", stub_deps.to_str().unwrap()],
    );
    let patch_classes = format!("java.base={}", stub_classes.display());
    compile_java(
        &jdk,
        runtime_src,
        &runtime_classes,
        &[
            "--patch-module",
            &patch_classes,
            "--add-reads",
            "java.base=ALL-UNNAMED",
            "--add-exports",
            "java.base/jdk.internal.vm.annotation=ALL-UNNAMED",
            "--add-exports",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
        ],
    );
    make_jar(&jdk, &runtime_classes, &runtime_jar);
    println!("cargo:rustc-env=KPROF_RUNTIME_JAR={}", runtime_jar.display());
}
