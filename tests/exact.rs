//! mode=exact on every JDK under /usr/lib/jvm: call counts per calling context equal to what the program did
//! (java-harness programs whose counts are known by construction: recursion, two callsites of one caller,
//! exceptions unwinding through counted frames, native code calling back into Java, several threads),
//! basic-block counts, options, and the same program output with and without the agent under full
//! verification.

mod common;

use common::*;
use kprof_profile::output::read_profile;
use kprof_profile::{FrameKind, Metric, Profile};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Boot classes are not verified by default: these make HotSpot verify every class, the JDK's included.
const VERIFY: [&str; 3] =
    ["-XX:+UnlockDiagnosticVMOptions", "-XX:+BytecodeVerificationLocal", "-XX:+BytecodeVerificationRemote"];
const HARNESS_PREFIX: &str = "kprof.harness.";
const ROUNDS: u64 = 10;

/// Runs `main` under the verifier with (if given) the agent and `agent` options.
fn run_verified(jdk: &Jdk, agent: Option<&str>, jvm: &[&str], main: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new(jdk.java());
    cmd.args(VERIFY).args(jvm);
    if let Some(opts) = agent {
        cmd.arg(format!("-agentpath:{}={}", agent_lib().display(), opts));
    }
    cmd.arg("-cp").arg(harness_classes()).arg(main).args(args);
    let run = run_with_timeout(cmd, Duration::from_secs(300));
    for bad in ["VerifyError", "ClassFormatError", "internal error", "hs_err_pid"] {
        assert!(!run.stderr.contains(bad), "{}: {bad} running {main}:\n{}", jdk.label(), run.stderr);
    }
    run
}

/// Profiles `main` in exact mode with `opts` into `dir/name.json` and `dir/name.collapsed`; checks that the
/// program printed what it prints without the agent.
fn profile(jdk: &Jdk, dir: &Path, name: &str, opts: &str, jvm: &[&str], main: &str, args: &[&str]) -> (Run, Profile) {
    let json = dir.join(format!("{name}.json"));
    let collapsed = dir.join(format!("{name}.collapsed"));
    let sep = if opts.is_empty() { "" } else { "," };
    let agent = format!("mode=exact{sep}{opts},file={},file={}", json.display(), collapsed.display());
    let run = run_verified(jdk, Some(&agent), jvm, main, args);
    run.assert_ok();
    let base = run_verified(jdk, None, jvm, main, args);
    base.assert_ok();
    assert_eq!(run.stdout, base.stdout, "{}: {main} printed something else under mode=exact", jdk.label());
    let profile = read_profile(&json).unwrap_or_else(|e| panic!("{e}"));
    (run, profile)
}

/// `Class.method` of a harness frame (`ExactCounts.down`, `ExactCounts$Worker.run`); natives end in `[native]`.
fn short(name: &str) -> String {
    let base = name.strip_prefix(HARNESS_PREFIX).unwrap_or(name);
    let method = base.split('(').next().unwrap_or(base).to_string();
    if name.ends_with(" [native]") {
        format!("{method} [native]")
    } else {
        method
    }
}

/// One node of a profile, seen through its harness frames only.
#[derive(Clone, Debug)]
struct Context {
    /// Short names of the harness frames from the root to this node (JDK frames left out).
    path: Vec<String>,
    /// The node's own callsite and kind.
    callsite: i32,
    kind: FrameKind,
    calls: u64,
    weight: u64,
    blocks: Vec<(u32, u32, u64)>,
}

/// Every node whose own frame is a harness frame, with its harness path.
fn contexts(p: &Profile) -> Vec<Context> {
    let mut out = Vec::new();
    // (node, harness path of its parent)
    let mut work: Vec<(u32, Vec<String>)> = vec![(0, Vec::new())];
    while let Some((i, parent_path)) = work.pop() {
        let node = &p.nodes[i as usize];
        let frame = &p.frames[node.frame as usize];
        let name = frame.display_name();
        let mut path = parent_path;
        if i != 0 && name.starts_with(HARNESS_PREFIX) {
            path.push(short(&name));
            out.push(Context {
                path: path.clone(),
                callsite: node.callsite,
                kind: frame.kind,
                calls: p.value(i, Metric::Calls),
                weight: p.value(i, Metric::Bytecodes),
                blocks: node.blocks.iter().map(|b| (b.start_bci, b.end_bci, b.count)).collect(),
            });
        }
        for &c in &node.children {
            work.push((c, path.clone()));
        }
    }
    out
}

/// Calls per harness path, over all nodes with that path (callsites merged).
fn calls_by_path(cs: &[Context]) -> BTreeMap<Vec<String>, u64> {
    let mut m = BTreeMap::new();
    for c in cs {
        *m.entry(c.path.clone()).or_insert(0) += c.calls;
    }
    m
}

fn path(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn calls(by_path: &BTreeMap<Vec<String>, u64>, p: &[String]) -> u64 {
    by_path.get(p).copied().unwrap_or(0)
}

fn exact_counts(jdk: &Jdk, dir: &Path, name: &str, opts: &str) -> (Run, Profile) {
    profile(jdk, dir, name, opts, &[], "kprof.harness.ExactCounts", &[&ROUNDS.to_string()])
}

#[test]
fn recursion_counts_every_level_once_per_call() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-rec-{}", jdk.label()));
        let (_, p) = exact_counts(jdk, &dir, "c", "");
        let by_path = calls_by_path(&contexts(&p));
        let mut chain = path(&["ExactCounts.main", "ExactCounts.recursion"]);
        for level in 0..10 {
            chain.push("ExactCounts.down".into());
            assert_eq!(calls(&by_path, &chain), ROUNDS, "{}: down at level {level}", jdk.label());
        }
        chain.push("ExactCounts.leaf".into());
        assert_eq!(calls(&by_path, &chain), ROUNDS, "{}: leaf below the innermost down", jdk.label());
        // Eleven levels of down do not exist; leaf is called nowhere else.
        chain.pop();
        chain.push("ExactCounts.down".into());
        assert_eq!(calls(&by_path, &chain), 0, "{}", jdk.label());
        let leaf_total: u64 =
            by_path.iter().filter(|(k, _)| k.last().unwrap() == "ExactCounts.leaf").map(|(_, n)| n).sum();
        assert_eq!(leaf_total, ROUNDS, "{}", jdk.label());
    });
}

/// HotSpot runs Java code of its own between a call's callsite store and the callee: the class loader's
/// `loadClass` when the call resolves a class, `<clinit>` when it initializes one (and, under -Xcomp,
/// loads made while linking compiled code). Those must not take the callsite away from the callee. Nor
/// may a callsite written by calls that count nothing (below an intrinsic candidate) outlive them.
#[test]
fn callsites_survive_class_loading_initialization_and_uncounted_calls() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-linking-{}", jdk.label()));
        for (name, jvm) in [("default", &[][..]), ("xcomp", &["-Xcomp"][..])] {
            let (_, p) = profile(jdk, &dir, name, "", jvm, "kprof.harness.ExactCounts", &[&ROUNDS.to_string()]);
            let cs = contexts(&p);
            let at = |p: &[String]| cs.iter().filter(|c| c.path == p).cloned().collect::<Vec<Context>>();
            let compute = at(&path(&["ExactCounts.main", "ExactCounts.linking", "ExactCounts$Lazy.compute"]));
            assert_eq!(compute.len(), 1, "{} {name}: one context for every call: {compute:?}", jdk.label());
            assert_eq!(compute[0].calls, 7 * ROUNDS, "{} {name}", jdk.label());
            assert_ne!(compute[0].callsite, -1, "{} {name}", jdk.label());
            let clinit = at(&path(&["ExactCounts.main", "ExactCounts.linking", "ExactCounts$Lazy.<clinit>"]));
            assert_eq!(clinit.len(), 1, "{} {name}: {clinit:?}", jdk.label());
            assert_eq!((clinit[0].calls, clinit[0].callsite), (1, compute[0].callsite), "{} {name}", jdk.label());
            // Every harness call made from main's callsites is counted at a callsite of main.
            for c in cs.iter().filter(|c| c.path.len() == 2 && c.path[0] == "ExactCounts.main") {
                assert_ne!(c.callsite, -1, "{} {name}: {c:?}", jdk.label());
            }
            // And whatever hangs directly below main (the JDK's code too: string concatenation's
            // bootstrap, class loading) has one of main's calls or `new`s as its callsite, or none: no
            // callsite that some other method wrote (a call below an intrinsic candidate counts nothing, so
            // it consumes nothing).
            let sites = call_sites("kprof/harness/ExactCounts", "main");
            let main =
                p.nodes.iter().position(|n| short(&p.frames[n.frame as usize].display_name()) == "ExactCounts.main");
            for &c in &p.nodes[main.expect("main's node")].children {
                let child = &p.nodes[c as usize];
                let callee = p.frames[child.frame as usize].display_name();
                assert!(
                    child.callsite == -1 || sites.contains(&child.callsite),
                    "{} {name}: {callee} below main at callsite {}, not a call of main ({sites:?})",
                    jdk.label(),
                    child.callsite
                );
            }
        }
    });
}

/// The bytecode offsets of the calls and `new`s of `method` in harness class `class`.
fn call_sites(class: &str, method: &str) -> Vec<i32> {
    use kprof_classfile::opcodes::{is_invoke, NEW};
    use kprof_classfile::{ClassFile, Instructions};
    let data = std::fs::read(harness_classes().join(format!("{class}.class"))).expect("harness class");
    let c = ClassFile::parse(&data).expect("parse");
    let index = c.methods.iter().position(|m| c.member_name(m).unwrap() == method.as_bytes()).expect("method");
    let code = c.method_code(index).unwrap().expect("code");
    Instructions::new(code.code)
        .map(|i| i.expect("instruction"))
        .filter(|i| is_invoke(i.opcode) || i.opcode == NEW)
        .map(|i| i.offset as i32)
        .collect()
}

#[test]
fn one_method_called_from_two_callsites_of_one_caller_gets_two_nodes() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-sites-{}", jdk.label()));
        let (_, p) = exact_counts(jdk, &dir, "c", "");
        let target = path(&["ExactCounts.main", "ExactCounts.twoSites", "ExactCounts.target"]);
        let cs: Vec<Context> = contexts(&p).into_iter().filter(|c| c.path == target).collect();
        assert_eq!(cs.len(), 2, "{}: {cs:?}", jdk.label());
        assert_ne!(cs[0].callsite, cs[1].callsite, "{}", jdk.label());
        let mut counts: Vec<u64> = cs.iter().map(|c| c.calls).collect();
        counts.sort();
        assert_eq!(counts, vec![3 * ROUNDS, 5 * ROUNDS], "{}", jdk.label());
        // The collapsed view merges callsites.
        let stacks = read_collapsed(&dir.join("c.collapsed"));
        let merged = count_where(&stacks, |s| {
            s.iter().filter(|f| f.starts_with(HARNESS_PREFIX)).map(|f| short(f)).collect::<Vec<_>>() == target
        });
        assert_eq!(merged, 8 * ROUNDS, "{}", jdk.label());
        // callsite=off: one node.
        let (_, off) = exact_counts(jdk, &dir, "off", "callsite=off");
        let cs: Vec<Context> = contexts(&off).into_iter().filter(|c| c.path == target).collect();
        assert_eq!(cs.len(), 1, "{}: {cs:?}", jdk.label());
        assert_eq!((cs[0].calls, cs[0].callsite), (8 * ROUNDS, -1), "{}", jdk.label());
    });
}

/// A tree of 32,767 contexts (more tables than a merge goes through alone) is merged by several threads at
/// once; every context must still be there once, with its count, with callsites and without (where several
/// of a thread's contexts are one node of the agent's tree, which helpers may reach at the same time).
#[test]
fn a_wide_tree_merged_by_several_threads_keeps_every_context_and_count() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-wide-{}", jdk.label()));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for (name, opts) in [("sites", ""), ("off", "callsite=off")] {
            let (_, p) = exact_counts(jdk, &dir, name, opts);
            if cores > 1 {
                assert!(p.meta.counters["merge_helpers"] > 0, "{}: {:?}", jdk.label(), p.meta.counters);
            }
            let wide = path(&["ExactCounts.main", "ExactCounts.wide"]);
            let fans: Vec<Context> =
                contexts(&p).into_iter().filter(|c| c.path.len() > 2 && c.path[..2] == wide[..]).collect();
            for depth in 0..=14usize {
                let at: Vec<&Context> = fans.iter().filter(|c| c.path.len() == 3 + depth).collect();
                assert!(at.iter().all(|c| c.path[2..].iter().all(|f| f == "ExactCounts.fan")), "{}", jdk.label());
                let calls: Vec<u64> = at.iter().map(|c| c.calls).collect();
                if opts.is_empty() {
                    assert_eq!(calls, vec![ROUNDS; 1 << depth], "{}: depth {depth}", jdk.label());
                } else {
                    assert_eq!(calls, vec![ROUNDS << depth], "{}: depth {depth}, callsites merged", jdk.label());
                }
            }
            assert_eq!(fans.len(), if opts.is_empty() { (1 << 15) - 1 } else { 15 }, "{}", jdk.label());
        }
    });
}

/// A context's table has a slot per callsite of its method (up to 32): the other callees of a polymorphic
/// callsite, and the callsites of a method with more, are found another way (the table's others). Every one
/// must still be its own context with its own count.
#[test]
fn every_callee_of_a_polymorphic_callsite_and_of_a_method_with_many_callsites_is_counted_apart() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-poly-{}", jdk.label()));
        let (_, p) = exact_counts(jdk, &dir, "c", "");
        let cs = contexts(&p);
        let shapes: Vec<&Context> = cs
            .iter()
            .filter(|c| c.path.len() == 3 && c.path[..2] == path(&["ExactCounts.main", "ExactCounts.polymorphic"]))
            .filter(|c| c.path[2].ends_with(".area"))
            .collect();
        assert_eq!(shapes.len(), 12, "{}: {shapes:?}", jdk.label());
        assert!(shapes.iter().all(|c| c.callsite == shapes[0].callsite), "{}: one callsite: {shapes:?}", jdk.label());
        for k in 0..12u64 {
            let name = format!("ExactCounts$Shape{k}.area");
            let c = shapes.iter().find(|c| c.path[2] == name).unwrap_or_else(|| panic!("{}: no {name}", jdk.label()));
            assert_eq!(c.calls, ROUNDS * (k + 1), "{}: {name}", jdk.label());
        }
        let target = path(&["ExactCounts.main", "ExactCounts.manySites", "ExactCounts.target"]);
        let mut sites: Vec<&Context> = cs.iter().filter(|c| c.path == target).collect();
        sites.sort_by_key(|c| c.callsite);
        assert_eq!(sites.len(), 40, "{}: {sites:?}", jdk.label());
        let counts: Vec<u64> = sites.iter().map(|c| c.calls).collect();
        assert_eq!(counts, (1..=40).map(|i| ROUNDS * i).collect::<Vec<_>>(), "{}: by callsite", jdk.label());
    });
}

#[test]
fn exceptions_unwinding_through_counted_frames_leave_the_context_right() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-exc-{}", jdk.label()));
        let (_, p) = exact_counts(jdk, &dir, "c", "");
        let by_path = calls_by_path(&contexts(&p));
        let base = path(&["ExactCounts.main", "ExactCounts.exceptions"]);
        let mut chain = base.clone();
        for level in 0..5 {
            chain.push("ExactCounts.thrower".into());
            assert_eq!(calls(&by_path, &chain), ROUNDS, "{}: thrower at level {level}", jdk.label());
        }
        chain.push("ExactCounts$Boom.<init>".into());
        assert_eq!(calls(&by_path, &chain), ROUNDS, "{}: the exception's constructor", jdk.label());
        let mut after = base.clone();
        after.push("ExactCounts.afterCatch".into());
        assert_eq!(calls(&by_path, &after), ROUNDS, "{}: afterCatch below exceptions", jdk.label());
        let mut handler = base.clone();
        handler.extend(["ExactCounts.rethrowing".to_string(), "ExactCounts.inHandler".to_string()]);
        assert_eq!(calls(&by_path, &handler), ROUNDS, "{}: inHandler below rethrowing", jdk.label());
        // Nothing called after a catch lands below the frames the exception left.
        for (k, n) in &by_path {
            let leaf = k.last().unwrap();
            if leaf == "ExactCounts.afterCatch" || leaf == "ExactCounts.inHandler" {
                assert!(*k == after || *k == handler, "{}: {k:?} ({n} calls)", jdk.label());
            }
        }
        // Exceptions thrown through native frames (NativeCallbacks' throwing chain) are checked below.
    });
}

#[test]
fn calls_after_an_intrinsic_candidate_stay_below_their_caller() {
    // StringBuilder's constructor and append are intrinsic candidates: what they call counts nothing, and
    // must leave the caller's context as it was (it once fell back to the thread's root).
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-intrinsic-{}", jdk.label()));
        let (_, p) = exact_counts(jdk, &dir, "c", "");
        let by_path = calls_by_path(&contexts(&p));
        let after = path(&["ExactCounts.main", "ExactCounts.intrinsicThenCall", "ExactCounts.afterIntrinsic"]);
        assert_eq!(calls(&by_path, &after), ROUNDS, "{}: {by_path:?}", jdk.label());
        let everywhere: u64 =
            by_path.iter().filter(|(k, _)| k.last().unwrap() == "ExactCounts.afterIntrinsic").map(|(_, n)| n).sum();
        assert_eq!(everywhere, ROUNDS, "{}", jdk.label());
        // Nothing of the harness hangs directly below a thread's root but the threads' entry points.
        for k in by_path.keys() {
            assert!(k.len() > 1 || k[0] == "ExactCounts.main" || k[0].ends_with(".run"), "{}: {k:?}", jdk.label());
        }
    });
}

#[test]
fn several_threads_count_into_one_tree() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-threads-{}", jdk.label()));
        let (run, p) = exact_counts(jdk, &dir, "c", "");
        let by_path = calls_by_path(&contexts(&p));
        let run_path = path(&["ExactCounts$Worker.run"]);
        let per_thread = path(&["ExactCounts$Worker.run", "ExactCounts.perThread"]);
        assert_eq!(calls(&by_path, &run_path), 4 * ROUNDS, "{}", jdk.label());
        assert_eq!(calls(&by_path, &per_thread), 1000 * ROUNDS, "{}", jdk.label());
        let s = run.summary();
        assert_eq!(s["mode"], "exact");
        let total: u64 = p.column(Metric::Calls).unwrap().iter().sum();
        assert_eq!(s["calls"].parse::<u64>().unwrap(), total, "{}: summary calls", jdk.label());
        // threads=on: the same counts under one root per thread name.
        let (_, p) = exact_counts(jdk, &dir, "t", "threads=on");
        for i in 0..4 {
            let root = p.nodes[0]
                .children
                .iter()
                .copied()
                .find(|&c| {
                    p.frames[p.nodes[c as usize].frame as usize].display_name() == format!("[thread exactcounts-{i}]")
                })
                .unwrap_or_else(|| panic!("{}: no root for thread exactcounts-{i}", jdk.label()));
            let mut sub = p.clone();
            sub.nodes[0].children = vec![root];
            let by_path = calls_by_path(&contexts(&sub));
            assert_eq!(calls(&by_path, &run_path), ROUNDS, "{}: thread {i}", jdk.label());
            assert_eq!(calls(&by_path, &per_thread), 250 * ROUNDS, "{}: thread {i}", jdk.label());
        }
    });
}

#[test]
fn native_methods_are_nodes_and_callbacks_sit_below_them() {
    let Some(lib) = option_env!("KPROF_HARNESS_JNI_LIB") else {
        panic!("the harness JNI library was not built (no C compiler at build time)");
    };
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-native-{}", jdk.label()));
        let prop = format!("-Dkprof.harness.jni={lib}");
        let mut jvm = vec![prop.as_str()];
        if jdk.version >= 21 {
            jvm.push("--enable-native-access=ALL-UNNAMED");
        }
        let rounds: u64 = 50;
        let (run, p) = profile(jdk, &dir, "n", "", &jvm, "kprof.harness.NativeCallbacks", &[&rounds.to_string()]);
        assert!(run.stdout.contains("jni=on"), "{}", run.stdout);
        assert!(run.summary()["natives"] == "on", "{}", run.stderr);
        let cs = contexts(&p);
        let by_path = calls_by_path(&cs);
        // main → chain → up, then six times [native] callUp → up; work at the bottom of the chain that
        // does not throw. Each chain runs twice per round (once throwing).
        let mut chain = path(&["NativeCallbacks.main", "NativeCallbacks.chain", "NativeCallbacks.up"]);
        assert_eq!(calls(&by_path, &chain), 2 * rounds, "{}: up", jdk.label());
        for level in 0..6 {
            chain.push("NativeCallbacks.callUp [native]".into());
            assert_eq!(calls(&by_path, &chain), 2 * rounds, "{}: callUp at level {level}", jdk.label());
            chain.push("NativeCallbacks.up".into());
            assert_eq!(calls(&by_path, &chain), 2 * rounds, "{}: up at level {level}", jdk.label());
        }
        chain.push("NativeCallbacks.work".into());
        assert_eq!(calls(&by_path, &chain), rounds, "{}: work", jdk.label());
        let after = path(&["NativeCallbacks.main", "NativeCallbacks.chain", "NativeCallbacks.afterThrow"]);
        assert_eq!(calls(&by_path, &after), rounds, "{}: afterThrow", jdk.label());
        // Native code that catches what its callback threw (JNI ExceptionClear; ExceptionDescribe in the
        // first round) and calls back again: the callback hangs below that native, not below the thrower.
        let catcher =
            path(&["NativeCallbacks.main", "NativeCallbacks.chain", "NativeCallbacks.catchThenCall [native]"]);
        assert_eq!(calls(&by_path, &catcher), rounds, "{}: catchThenCall", jdk.label());
        let after_catch = [catcher.clone(), path(&["NativeCallbacks.afterCatch"])].concat();
        let wherever: Vec<&Context> =
            cs.iter().filter(|c| c.path.last().unwrap() == "NativeCallbacks.afterCatch").collect();
        assert_eq!(
            wherever.iter().map(|c| (c.path.clone(), c.calls)).collect::<Vec<_>>(),
            vec![(after_catch, rounds)],
            "{}: afterCatch's contexts",
            jdk.label()
        );
        let thrower = [catcher, path(&["NativeCallbacks.up", "NativeCallbacks.callUp [native]"])].concat();
        assert_eq!(calls(&by_path, &thrower), rounds, "{}: the caught chain", jdk.label());
        let catches = p.meta.counters.get("native_catches").copied().unwrap_or(0);
        assert!(catches >= rounds, "{}: native_catches={catches}", jdk.label());
        // The native nodes are natives, and a callback's callsite is unknown (-1).
        for c in cs.iter().filter(|c| c.path.last().unwrap().ends_with("[native]")) {
            assert_eq!(c.kind, FrameKind::Native, "{}", jdk.label());
        }
        for c in cs.iter().filter(|c| c.path.len() >= 2 && c.path[c.path.len() - 2].ends_with("[native]")) {
            assert_eq!(c.callsite, -1, "{}: {:?}", jdk.label(), c.path);
        }
    });
}

#[test]
fn basic_block_counts_are_what_the_blocks_ran() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-bb-{}", jdk.label()));
        let (run, p) = exact_counts(jdk, &dir, "bb", "bb=on");
        assert_eq!(run.summary()["bb"], "on");
        let branchy = path(&["ExactCounts.main", "ExactCounts.branches", "ExactCounts.branchy"]);
        let cs: Vec<Context> = contexts(&p).into_iter().filter(|c| c.path == branchy).collect();
        assert_eq!(cs.len(), 1, "{}", jdk.label());
        let c = &cs[0];
        assert_eq!(c.calls, 10 * ROUNDS);
        // The blocks tile the method's code, in order.
        assert_eq!(c.blocks[0].0, 0);
        for w in c.blocks.windows(2) {
            assert_eq!(w[0].1, w[1].0, "{}: {:?}", jdk.label(), c.blocks);
        }
        // i % 3 test (10), r = 1 (4), r = 2 (6), loop start (10), loop test (55), loop body (45), return (10).
        let counts: Vec<u64> = c.blocks.iter().map(|b| b.2 / ROUNDS).collect();
        assert_eq!(counts, vec![10, 4, 6, 10, 55, 45, 10], "{}: {:?}", jdk.label(), c.blocks);
        // The same bytecodes as without bb=on, where blocks add their sizes as they run.
        let (_, plain) = exact_counts(jdk, &dir, "plain", "");
        let plain_c: Vec<Context> = contexts(&plain).into_iter().filter(|c| c.path == branchy).collect();
        assert_eq!(plain_c[0].weight, c.weight, "{}", jdk.label());
        assert!(plain_c[0].blocks.is_empty());
        // One invocation whose loop runs far more bytecodes than a local count holds before it goes to
        // the node (bb=off): still the bytecodes its blocks ran, per block count and size (bb=on).
        let long = path(&["ExactCounts.main", "ExactCounts.longLoop", "ExactCounts.branchy"]);
        let weight = |p: &Profile| contexts(p).into_iter().find(|c| c.path == long).map(|c| c.weight);
        let (on, off) = (weight(&p).unwrap(), weight(&plain).unwrap());
        assert_eq!(on, off, "{}", jdk.label());
        assert!(on / ROUNDS > 500_000, "{}: {on}", jdk.label());
        // Totals: every context's bytecodes agree between the two runs for the harness's own code.
        let total =
            |cs: &[Context]| cs.iter().filter(|c| c.path[0] == "ExactCounts.main").map(|c| c.weight).sum::<u64>();
        assert_eq!(total(&contexts(&p)), total(&contexts(&plain)), "{}", jdk.label());
    });
}

#[test]
fn a_method_the_usual_rewrite_takes_past_the_byte_budget_is_still_counted() {
    // BigMethod.big makes 500 calls in 1.8 KB of code: handing its local count to the node before each call
    // would take it past 8,000 bytes (it would be left alone, so its callees would hang below main); with a
    // catch-all handler it fits. Its counts must be right either way, the implicit exception that leaves it
    // in even rounds included: the same bytecodes as bb=on (a counter per block, which needs no handler;
    // callsite=off so that bb=on fits too).
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-big-{}", jdk.label()));
        let rounds = ROUNDS.to_string();
        let main = "kprof.harness.BigMethod";
        let (_, off) = profile(jdk, &dir, "off", "", &[], main, &[&rounds]);
        let (_, on) = profile(jdk, &dir, "on", "bb=on,callsite=off", &[], main, &[&rounds]);
        let big = path(&["BigMethod.main", "BigMethod.big"]);
        let mut f = big.clone();
        f.push("BigMethod.f".into());
        for (label, p) in [("bb=off", &off), ("bb=on", &on)] {
            let by_path = calls_by_path(&contexts(p));
            assert_eq!(calls(&by_path, &big), ROUNDS, "{}: {label}", jdk.label());
            assert_eq!(calls(&by_path, &f), 500 * ROUNDS, "{}: {label}", jdk.label());
            assert_eq!(calls(&by_path, &path(&["BigMethod.main", "BigMethod.f"])), 0, "{}: {label}", jdk.label());
        }
        let weight = |p: &Profile| contexts(p).into_iter().filter(|c| c.path == big).map(|c| c.weight).sum::<u64>();
        assert_eq!(weight(&off), weight(&on), "{}", jdk.label());
        // 50 lines of 14 bytecodes and a loop of 100 rounds of 8, at least, per call.
        assert!(weight(&off) / ROUNDS > 50 * 14 + 800, "{}: {}", jdk.label(), weight(&off));
    });
}

#[test]
fn the_same_run_twice_gives_the_same_counts() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-twice-{}", jdk.label()));
        let (_, a) = exact_counts(jdk, &dir, "a", "");
        let (_, b) = exact_counts(jdk, &dir, "b", "");
        let (ca, cb) = (calls_by_path(&contexts(&a)), calls_by_path(&contexts(&b)));
        assert_eq!(ca, cb, "{}", jdk.label());
    });
}

/// The program's calls, callsites and bytecodes per context (harness frames), which do not depend on how the
/// JVM runs it: interpreter only, C1 only, C2 only, everything compiled first, other collectors, other
/// object layouts.
#[test]
fn counts_do_not_depend_on_the_jit_or_the_collector() {
    let by_context = |p: &Profile| {
        let mut m: BTreeMap<(Vec<String>, i32), (u64, u64)> = BTreeMap::new();
        for c in contexts(p) {
            let e = m.entry((c.path, c.callsite)).or_default();
            e.0 += c.calls;
            e.1 += c.weight;
        }
        m
    };
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-vm-{}", jdk.label()));
        let (_, base) = exact_counts(jdk, &dir, "default", "");
        let want = by_context(&base);
        let xcomp: (&str, &[&str]) = ("xcomp", &["-Xcomp"]);
        for (name, jvm) in VM_CONFIGS.into_iter().chain([xcomp]) {
            let (_, p) = profile(jdk, &dir, name, "", jvm, "kprof.harness.ExactCounts", &[&ROUNDS.to_string()]);
            let got = by_context(&p);
            let differ: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(*v))
                .map(|(k, v)| (k, v, got.get(k)))
                .chain(got.iter().filter(|(k, _)| !want.contains_key(*k)).map(|(k, v)| (k, v, None)))
                .take(5)
                .collect();
            assert!(differ.is_empty(), "{} {name}: contexts differ from the default run's: {differ:?}", jdk.label());
        }
    });
}

#[test]
fn harness_programs_print_the_same_result_with_mode_exact_under_verification() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for_each_jdk(|jdk| {
        let mut cmd = Command::new(root.join("scripts/check-workloads"));
        cmd.args(["--mode", "exact", "--skip-workloads", "--jdk"]).arg(&jdk.home);
        let run = run_with_timeout(cmd, Duration::from_secs(1800));
        eprintln!("{}", run.stdout);
        assert!(run.status.success(), "{}: check-workloads failed\n{}\n{}", jdk.label(), run.stdout, run.stderr);
        assert!(run.stdout.contains(" passed, 0 failed"), "{}", run.stdout);
    });
}

#[test]
fn a_small_budget_spends_the_tree_memory_and_the_rest_is_counted_as_overflow() {
    // The per-thread trees live in native memory, `cct_mb` over all threads: with cct_mb=1,
    // Deterministic's 90,000 contexts fit neither the trees nor the agent's tree. The program must run as
    // without the agent, and every call must still be counted, the ones beyond the budget under
    // [cct_overflow].
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-budget-{}", jdk.label()));
        let main = "kprof.harness.Deterministic";
        let (full, pf) = profile(jdk, &dir, "full", "threads=on", &[], main, &[]);
        let (small, p) = profile(jdk, &dir, "small", "threads=on,cct_mb=1", &[], main, &[]);
        let (f, s) = (full.summary(), small.summary());
        assert_eq!(f["overflow"], "0", "{}", jdk.label());
        let overflow: u64 = s["overflow"].parse().unwrap();
        assert!(overflow > 0, "{}: {s:?}", jdk.label());
        // Every call counted: all calls, overflow included, are the same with either heap, but for those of
        // the Common-Cleaner thread, whose cleanup actions run when the garbage collector finds their objects
        // unreachable (a few calls, at other times with another heap).
        let calls_but_cleaner = |p: &Profile| {
            let cleaner =
                p.nodes[0].children.iter().copied().find(|&c| {
                    p.frames[p.nodes[c as usize].frame as usize].display_name() == "[thread Common-Cleaner]"
                });
            let (mut sum, mut work) = (0u64, vec![0u32]);
            while let Some(n) = work.pop() {
                sum += p.value(n, Metric::Calls);
                work.extend(p.nodes[n as usize].children.iter().copied().filter(|&c| Some(c) != cleaner));
            }
            sum
        };
        assert_eq!(calls_but_cleaner(&p), calls_but_cleaner(&pf), "{}: every call counted", jdk.label());
        let contexts = |m: &BTreeMap<String, String>| m["contexts"].parse::<u64>().unwrap();
        assert!(contexts(&s) < contexts(&f), "{}: {} !< {}", jdk.label(), contexts(&s), contexts(&f));
        let in_overflow: u64 = (0..p.nodes.len() as u32)
            .filter(|&n| p.frames[p.nodes[n as usize].frame as usize].display_name() == "[cct_overflow]")
            .map(|n| p.value(n, Metric::Calls))
            .sum();
        assert_eq!(in_overflow, overflow, "{}", jdk.label());
    });
}

#[test]
fn bad_options_stop_the_jvm_with_one_line() {
    let jdk = &jdks()[0];
    for (opts, needle) in [("mode=exact,bb=maybe", "'bb=maybe'"), ("mode=bytecode,bb=on", "'bb=on'")] {
        let run = run_java(jdk, Some(opts), &[], "kprof.harness.ExactCounts", &["1"]);
        assert!(!run.status.success(), "{opts}");
        let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("kprof:")).collect();
        assert_eq!(lines.len(), 1, "{opts}: {}", run.stderr);
        assert!(lines[0].contains(needle), "{opts}: {}", lines[0]);
    }
}

/// A dump merges every live thread's tree while other threads start and end: a thread that starts counting
/// meanwhile does not wait for the dump's merges. Sixteen threads hold trees of 32,767 contexts each; the
/// program starts short threads one after another (each waits for the one before to end) while `kprof dump`
/// runs. In the second quarter of the dump, which its merge fills (`merge_ms` of the dumped profile is most of
/// it; writing the file comes last), short threads still start and end: none did while the merge held the
/// threads' table locked.
#[test]
fn threads_start_and_end_while_a_dump_merges() {
    for_each_jdk(|jdk| {
        let dir = scratch(&format!("exact-merge-stall-{}", jdk.label()));
        let stop = dir.join("stop");
        let agent = format!("mode=exact,include=kprof.harness.MergeStall,file={}", dir.join("end.json").display());
        let mut cmd = Command::new(jdk.java());
        cmd.arg(format!("-agentpath:{}={agent}", agent_lib().display()));
        cmd.arg("-cp").arg(harness_classes()).arg("kprof.harness.MergeStall").args(["16", "14"]).arg(&stop);
        let program = Background::spawn(cmd);
        program.wait_line("'mergestall: ready'", Duration::from_secs(120), |l| l == "mergestall: ready");
        let pid = program.child.id().to_string();
        std::thread::sleep(Duration::from_millis(300));
        let dumped = dir.join("dump.json");
        let opts = format!("file={}", dumped.display());
        let t0 = monotonic_ns();
        kprof_at(&kprof_bin(), None, &["dump", &pid, &opts]).assert_ok();
        let t1 = monotonic_ns();
        let quarter = (t1 - t0) / 4;
        std::fs::write(&stop, format!("{} {}", t0 + quarter, t0 + 2 * quarter)).unwrap();
        let line = program.wait_line("the result", Duration::from_secs(60), |l| l.contains("in_window="));
        let result = program_line(&line, "mergestall:");
        let profile = read_profile(&dumped).unwrap_or_else(|e| panic!("{e}"));
        let merge_ms = profile.meta.counters["merge_ms"];
        let dump_ms = (t1 - t0) / 1_000_000;
        eprintln!("{}: the dump took {dump_ms} ms (merges so far: {merge_ms} ms): {result:?}", jdk.label());
        assert!(
            merge_ms * 10 >= dump_ms * 7,
            "{}: the merge is too small a part of the dump to show anything",
            jdk.label()
        );
        let during: u64 = result["in_window"].parse().unwrap();
        assert!(
            during >= 3,
            "{}: {during} threads started and ended in the second quarter of a {dump_ms} ms dump",
            jdk.label()
        );
    });
}

/// CLOCK_MONOTONIC in nanoseconds, the clock of Java's `System.nanoTime` on Linux.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec the call writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
