//! Compiling Java sources from build scripts: kprof-runtime's (the helper jar) and the kprof package's (the
//! java-harness test programs) both include this file.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The JDK used to compile Java sources: `$JAVA_HOME`, else JDK 17 at its Debian path, else `javac` on PATH.
pub fn find_jdk() -> PathBuf {
    if let Ok(home) = env::var("JAVA_HOME") {
        let p = PathBuf::from(home);
        if p.join("bin/javac").exists() {
            return p;
        }
    }
    for cand in ["/usr/lib/jvm/java-17-openjdk-amd64", "/usr/lib/jvm/default-java"] {
        if Path::new(cand).join("bin/javac").exists() {
            return PathBuf::from(cand);
        }
    }
    if let Ok(out) = Command::new("sh").arg("-c").arg("readlink -f $(command -v javac)").output() {
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if let Some(home) = Path::new(&s).parent().and_then(|b| b.parent()) {
            if home.join("bin/javac").exists() {
                return home.to_path_buf();
            }
        }
    }
    panic!(
        "kprof build: no JDK found (set JAVA_HOME to a JDK 17+ with javac; the README's first command installs one)"
    );
}

/// A JDK with a feature version >= `min` under /usr/lib/jvm, if any (newest first).
pub fn find_newer_jdk(min: u32) -> Option<PathBuf> {
    let mut best: Option<(u32, PathBuf)> = None;
    for entry in fs::read_dir("/usr/lib/jvm").ok()?.flatten() {
        let path = entry.path();
        if !path.join("bin/javac").exists()
            || fs::symlink_metadata(&path).map(|m| m.file_type().is_symlink()).unwrap_or(true)
        {
            continue;
        }
        let release = fs::read_to_string(path.join("release")).unwrap_or_default();
        let version = release
            .lines()
            .find_map(|l| l.strip_prefix("JAVA_VERSION="))
            .map(|v| v.trim_matches('"').split(['.', '-', '+']).next().unwrap_or("0").parse::<u32>().unwrap_or(0))
            .unwrap_or(0);
        if version >= min && best.as_ref().is_none_or(|(v, _)| version > *v) {
            best = Some((version, path));
        }
    }
    best.map(|(_, p)| p)
}

fn java_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            java_sources(&p, out);
        } else if p.extension().is_some_and(|e| e == "java") {
            out.push(p);
        }
    }
}

pub fn compile_java(jdk: &Path, src: &Path, dest: &Path, extra: &[&str]) {
    let mut files = Vec::new();
    java_sources(src, &mut files);
    compile_java_files(jdk, &files, dest, extra);
}

pub fn compile_java_files(jdk: &Path, files: &[PathBuf], dest: &Path, extra: &[&str]) {
    let _ = fs::remove_dir_all(dest);
    fs::create_dir_all(dest).expect("create class output dir");
    if files.is_empty() {
        return;
    }
    let status = Command::new(jdk.join("bin/javac"))
        .args(extra)
        .arg("-nowarn")
        .arg("-encoding")
        .arg("UTF-8")
        .arg("-d")
        .arg(dest)
        .args(files)
        .status()
        .expect("run javac");
    assert!(status.success(), "javac failed on {:?}", files.first());
}

pub fn make_jar(jdk: &Path, classes: &Path, jar: &Path) {
    let _ = fs::remove_file(jar);
    let status = Command::new(jdk.join("bin/jar"))
        .arg("--create")
        .arg("--no-manifest")
        .arg("--file")
        .arg(jar)
        .arg("-C")
        .arg(classes)
        .arg(".")
        .status()
        .expect("run jar");
    assert!(status.success(), "jar failed");
}
