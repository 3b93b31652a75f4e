//! Every real workload (../shared/workloads) and every java-harness program, run under full verification
//! with and without mode=bytecode on every JDK under /usr/lib/jvm, prints the same result, with no
//! VerifyError and no crash: `scripts/check-workloads` does the work (about 6–10 minutes per JDK).

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn workloads_and_harness_programs_print_the_same_result_with_mode_bytecode() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("scripts/check-workloads");
    let dir = std::env::var("KPROF_WORKLOADS").map_or_else(|_| root.join("../shared/workloads"), Into::into);
    let workloads = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sh") && e.file_name() != "install.sh")
        .count();
    assert!(workloads >= 8, "{} workloads in {}", workloads, dir.display());
    for_each_jdk(|jdk| {
        let mut cmd = Command::new(&script);
        cmd.arg("--mode").arg("bytecode").arg("--jdk").arg(&jdk.home);
        let run = run_with_timeout(cmd, Duration::from_secs(1800));
        eprintln!("{}", run.stdout);
        assert!(run.status.success(), "{}: check-workloads failed\n{}\n{}", jdk.label(), run.stdout, run.stderr);
        // One row per program: every harness program (the script refuses to run with one missing from its
        // list) and every workload.
        let rows = run.stdout.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| program")).count();
        for name in std::fs::read_dir(&dir).unwrap().flatten().filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".sh").filter(|w| *w != "install").map(str::to_string)
        }) {
            assert!(run.stdout.contains(&format!("| {name} |")), "{}: no row for {name}\n{}", jdk.label(), run.stdout);
        }
        assert!(rows > workloads + 20, "{}: {rows} rows\n{}", jdk.label(), run.stdout);
        assert!(run.stdout.contains(&format!("{rows} passed, 0 failed")), "{}", run.stdout);
    });
}
