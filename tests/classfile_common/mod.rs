//! Shared by the class-file integration tests: where the JDKs and workload jars are, and the verification
//! driver (rewrite a class set with `kprof rewrite`, load and link every class on a JDK with full verification,
//! and compare each class's outcome with the original classes' as a control).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
pub const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

pub fn kprof() -> &'static str {
    env!("CARGO_BIN_EXE_kprof")
}

pub fn harness_classes() -> &'static str {
    env!("KPROF_HARNESS_CLASSES")
}

pub fn jdk(home: &str) -> Option<PathBuf> {
    let p = PathBuf::from(home);
    if p.join("bin/java").exists() {
        Some(p)
    } else {
        eprintln!("skipped: no JDK at {home}");
        None
    }
}

/// A fresh directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kprof-classfile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The JDK 25 module image extracted to `dir` (only modules matching `modules`, a regex, if given).
pub fn extract_jdk25(dir: &Path, modules: Option<&str>) -> PathBuf {
    let out = dir.join("image");
    if !out.exists() {
        let mut c = Command::new(format!("{JDK25}/bin/jimage"));
        c.arg("extract").arg(format!("--dir={}", out.display()));
        if let Some(m) = modules {
            c.arg(format!("--include=regex:/({m})/.*"));
        }
        let st = c.arg(format!("{JDK25}/lib/modules")).status().expect("run jimage");
        assert!(st.success(), "jimage extract failed");
    }
    out
}

/// The jars that shared/workloads/install.sh installs: every jar of its Debian packages and every jar under
/// /usr/share/java, each file once.
pub fn workload_jars() -> Vec<PathBuf> {
    let mut set = std::collections::BTreeSet::new();
    let packages = "libxalan2-java libxerces2-java docbook-xsl libbatik-java liblucene8-java \
        libcommons-compress-java sunflow libtomcat10-java tomcat10-common tomcat10-examples \
        libeclipse-jdt-core-java clojure jython jruby libfop-java libh2-java libicu4j-java libguava-java";
    if let Ok(out) = Command::new("dpkg").arg("-L").args(packages.split_whitespace()).output() {
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if l.ends_with(".jar") {
                if let Ok(p) = std::fs::canonicalize(l) {
                    set.insert(p);
                }
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir("/usr/share/java") {
        for e in rd.flatten() {
            if e.path().extension().is_some_and(|x| x == "jar") {
                if let Ok(p) = std::fs::canonicalize(e.path()) {
                    set.insert(p);
                }
            }
        }
    }
    set.into_iter().filter(|p| p.is_file()).collect()
}

/// Runs `kprof ARGS`, returning stdout; panics on a non-zero exit.
pub fn run_kprof(args: &[&str]) -> String {
    let out = Command::new(kprof()).args(args).output().expect("run kprof");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kprof {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Methods with code and methods left alone, summed over `kprof rewrite` outputs, plus the reasons.
#[derive(Default, Debug, Clone)]
pub struct Counts {
    pub classes: u64,
    pub with_code: u64,
    pub rewritten: u64,
    pub left_alone: u64,
    pub reasons: BTreeMap<String, u64>,
}

impl Counts {
    pub fn add_output(&mut self, out: &str) {
        for l in out.lines() {
            let num = |s: &str| s.trim_start_matches('(').parse::<u64>().unwrap_or(0);
            let w: Vec<&str> = l.split_whitespace().collect();
            if l.starts_with("classes read:") {
                self.classes += num(w[2]);
            } else if l.starts_with("methods:") {
                self.with_code += num(w[2]);
            } else if l.starts_with("methods rewritten:") {
                self.rewritten += num(w[2]);
            } else if l.starts_with("methods left alone:") {
                self.left_alone += num(w[3]);
            } else if l.starts_with("  ") && w.len() == 2 {
                *self.reasons.entry(w[0].trim_end_matches(':').to_string()).or_default() += num(w[1]);
            }
        }
    }

    pub fn left_alone_percent(&self) -> f64 {
        100.0 * self.left_alone as f64 / self.with_code.max(1) as f64
    }
}

/// Outcomes of one VerifyClasses run: class → outcome (OK or the error's simple name).
pub fn read_outcomes(path: &Path) -> BTreeMap<String, (String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            Some((it.next()?.to_string(), (it.next()?.to_string(), it.next().unwrap_or("").to_string())))
        })
        .collect()
}

/// The result of verifying one class set on one JDK.
#[derive(Debug)]
pub struct Verified {
    pub label: String,
    pub classes: usize,
    pub ok: usize,
    /// Outcome name → count, for the rewritten classes.
    pub by_outcome: BTreeMap<String, usize>,
    pub counts: Counts,
}

/// Compares the rewritten run with the control run: no VerifyError or ClassFormatError, and every other
/// failure identical to the control's (a missing optional dependency fails the same way with the originals).
pub fn compare(label: &str, control: &Path, rewritten: &Path, counts: Counts) -> Verified {
    let c = read_outcomes(control);
    let r = read_outcomes(rewritten);
    assert_eq!(c.len(), r.len(), "{label}: control and rewritten runs checked different class sets");
    let mut by_outcome = BTreeMap::new();
    let mut problems = Vec::new();
    for (name, (outcome, msg)) in &r {
        *by_outcome.entry(outcome.clone()).or_insert(0) += 1;
        let control = c.get(name).map(|x| x.0.as_str()).unwrap_or("missing");
        if outcome != control || outcome == "VerifyError" || outcome == "ClassFormatError" {
            problems.push(format!("{name}: {outcome} (control: {control}) {msg}"));
        }
    }
    let v = Verified {
        label: label.to_string(),
        classes: r.len(),
        ok: *by_outcome.get("OK").unwrap_or(&0),
        by_outcome,
        counts,
    };
    println!(
        "{label}: {} classes, {} OK, outcomes {:?}; methods with code {}, rewritten {}, left alone {} ({:.3} %) {:?}",
        v.classes,
        v.ok,
        v.by_outcome,
        v.counts.with_code,
        v.counts.rewritten,
        v.counts.left_alone,
        v.counts.left_alone_percent(),
        v.counts.reasons
    );
    assert!(
        problems.is_empty(),
        "{label}: {} classes differ from the control:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(v.ok > 0, "{label}: nothing loaded");
    v
}

fn verification_flags() -> [&'static str; 3] {
    ["-XX:+UnlockDiagnosticVMOptions", "-XX:+BytecodeVerificationLocal", "-XX:+BytecodeVerificationRemote"]
}

fn list_classes(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            list_classes(&p, &format!("{prefix}{name}."), out);
        } else if let Some(stem) = name.strip_suffix(".class") {
            if stem != "module-info" && stem != "package-info" {
                out.push(format!("{prefix}{stem}"));
            }
        }
    }
}

/// Verifies JDK modules: each `(module, input)` (a jmod or an extracted module directory) is written by
/// `kprof rewrite --mode probe` and by `--mode none` (the control), the JDK `java` runs with every module
/// patched (the probe helper joins java.base, since the boot class path append is not searched before the
/// module system is up and the rewritten java.base runs from the first bytecode), and every class is loaded
/// and linked.
pub fn verify_jdk_modules(label: &str, java_home: &Path, modules: &[(String, PathBuf)], work: &Path) -> Verified {
    let mut counts = Counts::default();
    let mut names = Vec::new();
    for mode in ["probe", "none"] {
        for (m, input) in modules {
            let dir = work.join(mode).join(m);
            let out = run_kprof(&[
                "rewrite",
                "--mode",
                mode,
                "--quiet",
                "--out",
                dir.to_str().unwrap(),
                input.to_str().unwrap(),
            ]);
            if mode == "probe" {
                counts.add_output(&out);
            }
            let _ = std::fs::remove_file(dir.join("module-info.class"));
            if m != "java.base" {
                let _ = std::fs::remove_dir_all(dir.join("kprof"));
            }
            if mode == "none" {
                let mut list = Vec::new();
                list_classes(&dir, "", &mut list);
                names.extend(list.into_iter().filter(|n| !n.starts_with("kprof.runtime.")));
            }
        }
    }
    names.sort();
    let names_file = work.join("names.txt");
    std::fs::write(&names_file, names.join("\n") + "\n").unwrap();
    let module_list: Vec<&str> = modules.iter().map(|(m, _)| m.as_str()).collect();
    for mode in ["none", "probe"] {
        let mut cmd = Command::new(java_home.join("bin/java"));
        cmd.args(verification_flags()).arg("--add-modules").arg("ALL-SYSTEM");
        for m in &module_list {
            cmd.arg("--patch-module").arg(format!("{m}={}", work.join(mode).join(m).display()));
        }
        cmd.arg("--add-exports").arg(format!("java.base/kprof.runtime=ALL-UNNAMED,{}", module_list.join(",")));
        cmd.arg("-cp").arg(harness_classes()).arg("kprof.harness.VerifyClasses");
        cmd.arg("--names").arg(&names_file).arg(work.join(format!("result-{mode}.txt")));
        let out = cmd.output().expect("run java");
        assert!(
            out.status.success(),
            "{label} ({mode}): java failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    compare(label, &work.join("result-none.txt"), &work.join("result-probe.txt"), counts)
}

/// Verifies jars: each jar is written by `kprof rewrite --mode probe` (and `--mode none`, the control) to its
/// own directory, whose classes a child-first loader defines (with the original jars as the libraries); every
/// class is loaded and linked. The rewritten directories are written once and shared by several JDKs.
pub fn prepare_jars(jars: &[PathBuf], work: &Path) -> Counts {
    let mut counts = Counts::default();
    for (i, jar) in jars.iter().enumerate() {
        let stem = jar.file_stem().unwrap().to_string_lossy();
        for mode in ["probe", "none"] {
            let dir = work.join(mode).join(format!("{i:03}-{stem}"));
            let out = run_kprof(&[
                "rewrite",
                "--mode",
                mode,
                "--quiet",
                "--out",
                dir.to_str().unwrap(),
                jar.to_str().unwrap(),
            ]);
            if mode == "probe" {
                counts.add_output(&out);
            }
        }
    }
    counts
}

pub fn verify_jars(label: &str, java_home: &Path, jars: &[PathBuf], work: &Path, counts: Counts) -> Verified {
    let lib = jars.iter().map(|j| j.display().to_string()).collect::<Vec<_>>().join(":");
    let tag = java_home.file_name().unwrap().to_string_lossy().into_owned();
    for mode in ["none", "probe"] {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(work.join(mode)).unwrap().flatten().map(|e| e.path()).collect();
        dirs.sort();
        let mut cmd = Command::new(java_home.join("bin/java"));
        cmd.arg("-Xss4m").args(verification_flags());
        cmd.arg("-cp").arg(harness_classes()).arg("kprof.harness.VerifyClasses").arg("--lib").arg(&lib);
        for d in &dirs {
            cmd.arg("--dir").arg(d);
        }
        cmd.arg(work.join(format!("result-{mode}-{tag}.txt")));
        let out = cmd.output().expect("run java");
        assert!(
            out.status.success(),
            "{label} ({mode}): java failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    compare(label, &work.join(format!("result-none-{tag}.txt")), &work.join(format!("result-probe-{tag}.txt")), counts)
}
