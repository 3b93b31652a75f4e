//! Classes built to make the rewriter work hard: one method of `goto` blocks under an exception table of
//! 65,535 entries, all identical or all different. `kprof rewrite` (bytecode and exact modes, with the
//! default byte budget and with the largest) must get through each with bounded memory and leave the method
//! alone, counted; the class it writes must still load and verify on HotSpot; and the agent, meeting the class
//! in its load hook, must do the same inside a running JVM.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The exception tables the generator builds.
#[derive(Clone, Copy, Debug)]
enum Table {
    /// 65,535 copies of one catch-all entry covering every block.
    Identical,
    /// 65,535 different catch-all entries, each covering nearly every block.
    Distinct,
}

/// `public class NAME { public static void main(String[]) }` whose `main` is `gotos` blocks, each a
/// `goto` to the next instruction, then `return`, then a handler (`athrow`) that the exception table's
/// `entries` entries target. Version 52 with a StackMapTable, so HotSpot's type-checking verifier takes it.
fn hostile_class(name: &str, gotos: u16, entries: u16, table: Table) -> Vec<u8> {
    hostile_class_of(name, gotos, entries, table, 1)
}

/// [`hostile_class`] with `methods` such methods: `main`, then `m1`, `m2`, ... (same descriptor).
fn hostile_class_of(name: &str, gotos: u16, entries: u16, table: Table, methods: u16) -> Vec<u8> {
    fn u2(out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&v.to_be_bytes());
    }
    fn utf8(out: &mut Vec<u8>, s: &str) {
        out.push(1);
        u2(out, s.len() as u16);
        out.extend_from_slice(s.as_bytes());
    }
    let n = gotos as u32;
    let ret = 3 * n; // offset of `return`
    let handler = ret + 1; // offset of `athrow`
    let mut code = Vec::new();
    for _ in 0..n {
        code.extend_from_slice(&[0xa7, 0x00, 0x03]); // goto +3
    }
    code.push(0xb1); // return
    code.push(0xbf); // athrow

    // Constant pool: #1 name, #2 Class name, #3 Object, #4 Class Object, #5 main, #6 descriptor, #7 Code,
    // #8 StackMapTable, #9 Throwable, #10 Class Throwable, #11... the other methods' names.
    let mut c = vec![0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 52];
    u2(&mut c, 11 + methods - 1);
    utf8(&mut c, name);
    c.extend_from_slice(&[7, 0, 1]);
    utf8(&mut c, "java/lang/Object");
    c.extend_from_slice(&[7, 0, 3]);
    utf8(&mut c, "main");
    utf8(&mut c, "([Ljava/lang/String;)V");
    utf8(&mut c, "Code");
    utf8(&mut c, "StackMapTable");
    utf8(&mut c, "java/lang/Throwable");
    c.extend_from_slice(&[7, 0, 9]);
    for k in 1..methods {
        utf8(&mut c, &format!("m{k}"));
    }
    // public super class, this #2, super #4, no interfaces, no fields.
    c.extend_from_slice(&[0, 0x21, 0, 2, 0, 4, 0, 0, 0, 0]);
    u2(&mut c, methods);

    // Stack map: a same_frame at every goto target (3, 6, ..., ret), then the handler's frame with a
    // Throwable on the stack.
    let mut smt = Vec::new();
    u2(&mut smt, n as u16 + 1);
    smt.push(3); // the first frame at 3: offset_delta 3
    smt.extend(std::iter::repeat_n(2, n as usize - 1)); // the next ones 3 further on: offset_delta 2
    smt.extend_from_slice(&[64, 7, 0, 10]); // same_locals_1_stack_item, delta 0, Object #10

    let wanted = entries as u32;
    let mut entries = Vec::with_capacity(wanted as usize * 8);
    // Distinct ranges: each of the first 256 gotos to each of the last 256 instruction starts.
    let starts: Vec<u32> = (0..256).map(|k| 3 * k).collect();
    let mut ends: Vec<u32> = vec![handler, ret];
    ends.extend((1..n).rev().map(|k| 3 * k));
    let mut count = 0u32;
    'fill: for &end in &ends {
        for &start in &starts {
            if count == wanted {
                break 'fill;
            }
            let (s, e) = match table {
                Table::Identical => (0, handler),
                Table::Distinct => (start, end),
            };
            if s >= e {
                continue;
            }
            for v in [s as u16, e as u16, handler as u16, 0] {
                u2(&mut entries, v);
            }
            count += 1;
        }
    }
    assert_eq!(count, wanted, "{table:?}: too few distinct ranges for {gotos} gotos");

    let code_attr_len = 2 + 2 + 4 + code.len() + 2 + entries.len() + 2 + 6 + smt.len();
    for k in 0..methods {
        let name_index = if k == 0 { 5 } else { 10 + k };
        u2(&mut c, 0x09); // public static
        u2(&mut c, name_index);
        u2(&mut c, 6);
        u2(&mut c, 1); // one attribute: Code
        u2(&mut c, 7);
        c.extend_from_slice(&(code_attr_len as u32).to_be_bytes());
        c.extend_from_slice(&[0, 1, 0, 1]); // max_stack 1, max_locals 1
        c.extend_from_slice(&(code.len() as u32).to_be_bytes());
        c.extend_from_slice(&code);
        u2(&mut c, wanted as u16);
        c.extend_from_slice(&entries);
        u2(&mut c, 1);
        u2(&mut c, 8);
        c.extend_from_slice(&(smt.len() as u32).to_be_bytes());
        c.extend_from_slice(&smt);
    }
    u2(&mut c, 0); // class attributes
    c
}

/// The 7.8 KB method of the report that found this: 2,600 gotos.
const GOTOS: u16 = 2600;

const VERIFY: [&str; 3] =
    ["-XX:+UnlockDiagnosticVMOptions", "-XX:+BytecodeVerificationLocal", "-XX:+BytecodeVerificationRemote"];

fn write_class(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("{name}.class")), bytes).unwrap();
}

/// `java -cp DIR NAME` with full verification, on `jdk`: exits 0 (main runs its gotos and returns).
fn runs_verified(jdk: &Jdk, dir: &Path, name: &str, agent: Option<&str>) -> (Run, u64) {
    let mut cmd = Command::new(jdk.java());
    cmd.args(VERIFY).arg("-Xshare:auto").arg("-Xmx64m");
    if let Some(a) = agent {
        cmd.arg(format!("-agentpath:{}={a}", agent_lib().display()));
    }
    cmd.arg("-cp").arg(dir).arg(name);
    run_with_peak_rss(cmd, Duration::from_secs(300))
}

#[test]
fn kprof_rewrite_leaves_hostile_exception_tables_alone_with_bounded_memory() {
    let work = scratch("hostile-rewrite");
    for table in [Table::Identical, Table::Distinct] {
        let name = format!("Hostile{table:?}");
        let bytes = hostile_class(&name, GOTOS, 65535, table);
        assert!(bytes.len() > 530_000, "{} bytes", bytes.len());
        let input = work.join(format!("in-{table:?}"));
        write_class(&input, &name, &bytes);
        for mode in ["bytecode", "exact"] {
            // The default budget, and the largest (past which the old code asked for 2 GiB at once).
            for budget in ["8000", "65535"] {
                let out = work.join(format!("out-{table:?}-{mode}-{budget}"));
                let mut cmd = Command::new(kprof_bin());
                cmd.args(["rewrite", "--mode", mode, "--budget", budget, "--out"]).arg(&out).arg(&input);
                let (run, rss_kb) = run_with_peak_rss(cmd, Duration::from_secs(120));
                let what = format!("{table:?} mode={mode} budget={budget}");
                run.assert_ok();
                eprintln!("{what}: peak RSS {} MB", rss_kb / 1024);
                assert!(rss_kb < 200 * 1024, "{what}: kprof rewrite peaked at {} MB\n{}", rss_kb / 1024, run.stdout);
                assert!(
                    run.stdout.contains("exception-table-too-large: 1"),
                    "{what}: the method is not counted as left alone for its exception table:\n{}",
                    run.stdout
                );
                // Left alone means the class written is the class read (HotSpot's verdict on such a class:
                // `a_method_past_the_table_bound_runs_verified_as_it_was`).
                let written = std::fs::read(out.join(format!("{name}.class"))).unwrap();
                assert!(written == bytes, "{what}: the class was changed");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// The bound per class: 17 methods of 4,096 entries each are within the bound per method, but the 17th
/// takes the class past 65,536 entries, so it is left alone and counted; the others are rewritten.
#[test]
fn the_bound_per_class_leaves_the_methods_past_it_alone() {
    let work = scratch("hostile-class-total");
    let name = "HostileMany";
    write_class(&work, name, &hostile_class_of(name, 300, 4096, Table::Identical, 17));
    for mode in ["bytecode", "exact"] {
        let mut cmd = Command::new(kprof_bin());
        cmd.args(["rewrite", "--mode", mode]).arg(&work);
        let (run, rss_kb) = run_with_peak_rss(cmd, Duration::from_secs(120));
        run.assert_ok();
        assert!(rss_kb < 200 * 1024, "mode={mode}: kprof rewrite peaked at {} MB", rss_kb / 1024);
        assert!(run.stdout.contains("methods rewritten: 16\n"), "mode={mode}:\n{}", run.stdout);
        assert!(run.stdout.contains("exception-table-too-large: 1\n"), "mode={mode}:\n{}", run.stdout);
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// The agent's summary line.
fn summary_line(run: &Run) -> &str {
    run.summary_line().unwrap_or_else(|| panic!("no summary:\n{}", run.stderr))
}

/// A method just past the bound is left alone by the agent and runs, verified, as it was; one at the bound
/// is rewritten (its 4,096 entries, identical or not, analysed without a product of entries and blocks)
/// and runs verified too. Few gotos, so that HotSpot's own verification of the table stays quick: it
/// checks every instruction against every entry (65,535 entries of 2,600 gotos took it 6 to 10 minutes
/// and 9 to 13 GB).
#[test]
fn a_method_past_the_table_bound_runs_verified_as_it_was() {
    let work = scratch("hostile-verify");
    for table in [Table::Identical, Table::Distinct] {
        for (entries, left_alone) in [(4097, true), (4096, false)] {
            let name = format!("Hostile{table:?}{entries}");
            let dir = work.join(&name);
            write_class(&dir, &name, &hostile_class(&name, 300, entries, table));
            for jdk in jdks() {
                let (run, _) = runs_verified(&jdk, &dir, &name, None);
                run.assert_ok();
                for mode in ["bytecode", "exact"] {
                    let what = format!("{} {name} mode={mode}", jdk.label());
                    let file = work.join(format!("{}-{name}-{mode}.collapsed", jdk.label()));
                    let agent = format!("mode={mode},include={name},file={}", file.display());
                    let (run, _) = runs_verified(&jdk, &dir, &name, Some(&agent));
                    run.assert_ok();
                    let line = summary_line(&run);
                    assert_eq!(line.contains("exception-table-too-large:1"), left_alone, "{what}: {line}");
                    let rewritten = run.summary()["methods_rewritten"].parse::<u64>().unwrap();
                    assert_eq!(rewritten, !left_alone as u64, "{what}: {line}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// The load hook meets the 65,535-entry classes in a running JVM: a program loads each without linking it
/// (linking would have HotSpot verify it for minutes, see above), and the JVM's peak resident set stays
/// within 200 MB of the same program loading the same class without its table.
#[test]
fn agent_load_hook_bounds_memory_on_hostile_tables() {
    let work = scratch("hostile-agent");
    let loader = "class LoadOnly { public static void main(String[] a) throws Exception { \
        System.out.println(Class.forName(a[0], false, LoadOnly.class.getClassLoader()).getName()); } }";
    std::fs::write(work.join("LoadOnly.java"), loader).unwrap();
    let jdk = &jdks()[0];
    let st = Command::new(jdk.home.join("bin/javac"))
        .args(["--release", "17", "-d"])
        .arg(&work)
        .arg(work.join("LoadOnly.java"))
        .status();
    assert!(st.unwrap().success(), "javac LoadOnly");
    for table in [Table::Identical, Table::Distinct] {
        let name = format!("Hostile{table:?}");
        let dir = work.join(format!("{table:?}"));
        let plain = work.join(format!("plain-{table:?}"));
        write_class(&dir, &name, &hostile_class(&name, GOTOS, 65535, table));
        write_class(&plain, &name, &hostile_class_without_table(&name));
        for d in [&dir, &plain] {
            std::fs::copy(work.join("LoadOnly.class"), d.join("LoadOnly.class")).unwrap();
        }
        for jdk in jdks() {
            for mode in ["bytecode", "exact"] {
                let what = format!("{} {table:?} mode={mode}", jdk.label());
                let file = work.join(format!("{}-{table:?}-{mode}.collapsed", jdk.label()));
                let agent = format!("mode={mode},file={}", file.display());
                let load = |d: &Path| {
                    let mut cmd = Command::new(jdk.java());
                    cmd.args(VERIFY).arg("-Xmx64m").arg(format!("-agentpath:{}={agent}", agent_lib().display()));
                    cmd.arg("-cp").arg(d).arg("LoadOnly").arg(&name);
                    run_with_peak_rss(cmd, Duration::from_secs(300))
                };
                let (run, rss_kb) = load(&dir);
                run.assert_ok();
                assert!(run.stdout.contains(&name), "{what}: {}", run.stdout);
                let line = summary_line(&run);
                assert!(line.contains("exception-table-too-large:1"), "{what}: {line}");
                let (control, control_kb) = load(&plain);
                control.assert_ok();
                eprintln!("{what}: peak RSS {} MB, {} MB without the table", rss_kb / 1024, control_kb / 1024);
                assert!(
                    rss_kb < control_kb + 200 * 1024,
                    "{what}: the JVM peaked at {} MB, {} MB with the same agent on the class without its table",
                    rss_kb / 1024,
                    control_kb / 1024
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// The control class: the same name and method without an exception table.
fn hostile_class_without_table(name: &str) -> Vec<u8> {
    hostile_class(name, GOTOS, 0, Table::Identical)
}
