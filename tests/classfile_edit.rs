//! The editing API on real and synthetic classes: rewritten code runs the same (on JDK 17 and 25, fully
//! verified), the bytecode-mode snippet shape works, the verifier is really on (a bad edit is caught), the
//! relocation rules hold (prologue outside exception ranges, Uninitialized entries name the moved `new`, line
//! 0 stays at 0), and edits that need a wider branch, more than 64 KB or more than the budget are refused.

mod classfile_common;

use classfile_common::*;
use kprof_classfile::blocks::{basic_blocks, BlockRule};
use kprof_classfile::code::Instructions;
use kprof_classfile::edit::{CodeEditor, EditError, EditLimits, MethodContext, Refusal};
use kprof_classfile::opcodes::{GOTO, NEW, NOP, RETURN};
use kprof_classfile::stackmap::StackMap;
use kprof_classfile::transform::probe::ProbeTransform;
use kprof_classfile::transform::{Mode, RewriteStats, Rewriter, SkipPolicy};
use kprof_classfile::{add_fields, write_class, ClassFile, MethodEdit, NewField, Snippet, VType};
use std::path::{Path, PathBuf};
use std::process::Command;

fn sample_classes() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(harness_classes()).join("kprof/harness");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("RewriteSample"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    assert!(!v.is_empty());
    v
}

fn write_classes(dir: &Path, classes: &[(String, Vec<u8>)]) {
    let d = dir.join("kprof/harness");
    std::fs::create_dir_all(&d).unwrap();
    for (name, bytes) in classes {
        std::fs::write(d.join(name), bytes).unwrap();
    }
}

/// Runs RewriteSample from `cp` on `home` with full verification; returns (stdout, stderr).
fn run_sample(home: &Path, cp: &str, extra: &[&str]) -> (String, String) {
    let out = Command::new(home.join("bin/java"))
        .args(["-XX:+UnlockDiagnosticVMOptions", "-XX:+BytecodeVerificationLocal", "-XX:+BytecodeVerificationRemote"])
        .args(extra)
        .arg("-cp")
        .arg(cp)
        .arg("kprof.harness.RewriteSample")
        .output()
        .expect("run java");
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn jdks() -> Vec<PathBuf> {
    [JDK17, JDK25].iter().filter_map(|h| jdk(h)).collect()
}

fn rewrite_all(rw: &mut Rewriter, classes: &[(String, Vec<u8>)]) -> (Vec<(String, Vec<u8>)>, RewriteStats) {
    let mut stats = RewriteStats::default();
    let out = classes
        .iter()
        .map(|(n, b)| {
            let mut out = Vec::new();
            rw.rewrite_class(b, &mut out, &mut stats).unwrap();
            (n.clone(), out)
        })
        .collect();
    (out, stats)
}

#[test]
fn probe_rewritten_sample_runs_the_same() {
    let classes = sample_classes();
    let configs: [(BlockRule, u32); 3] = [(BlockRule::Komorium, 50), (BlockRule::Jp2, 50), (BlockRule::Komorium, 2)];
    for (rule, max_path) in configs {
        let t = ProbeTransform::new(rule, max_path);
        let mut rw = Rewriter::with_transform(Box::new(t), SkipPolicy::minimal(), EditLimits::default());
        let (rewritten, stats) = rewrite_all(&mut rw, &classes);
        assert_eq!(stats.left_alone_total(), 0, "{:?}", stats.left_alone);
        assert_eq!(stats.methods_rewritten, stats.methods_with_code());
        let dir = scratch(&format!("probe-sample-{rule:?}-{max_path}"));
        write_classes(&dir, &rewritten);
        let jar = dir.join("kprof-runtime.jar");
        std::fs::write(&jar, kprof_runtime::RUNTIME_JAR).unwrap();
        let classpath = format!("{}:{}", dir.display(), jar.display());
        for home in jdks() {
            let (expected, _) = run_sample(&home, harness_classes(), &[]);
            assert!(!expected.is_empty());
            let (got, err) = run_sample(&home, &classpath, &["-Xlog:class+load=info"]);
            assert!(got.contains("kprof.runtime.Probe"), "the probe helper was never loaded: {got}\n{err}");
            let got: String = got.lines().filter(|l| !l.starts_with('[')).map(|l| format!("{l}\n")).collect();
            assert_eq!(got, expected, "{rule:?}/{max_path} on {}: {err}", home.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn added_fields_are_there_and_the_class_runs_the_same() {
    // What the agent does to java.lang.Thread, on the sample classes: fields of every kind appended.
    let fields = [
        NewField { access_flags: 0x1081, name: "kprof$t", descriptor: "Ljava/lang/Object;" },
        NewField { access_flags: 0x1081, name: "kprof$c", descriptor: "I" },
        NewField { access_flags: 0x1081, name: "kprof$st", descriptor: "J" },
    ];
    let classes = sample_classes();
    let mut edited = Vec::new();
    for (name, bytes) in &classes {
        let mut out = Vec::new();
        add_fields(bytes, &fields, &mut out).unwrap();
        let before = ClassFile::parse(bytes).unwrap();
        let after = ClassFile::parse(&out).unwrap();
        assert_eq!(after.fields.len(), before.fields.len() + fields.len(), "{name}");
        assert_eq!(after.methods.len(), before.methods.len(), "{name}");
        let names: Vec<&[u8]> = after.fields.iter().map(|m| after.member_name(m).unwrap()).collect();
        for f in &fields {
            assert!(names.contains(&f.name.as_bytes()), "{name}: no {}", f.name);
        }
        for (a, b) in before.methods.iter().zip(&after.methods) {
            assert_eq!(before.member_name(a).unwrap(), after.member_name(b).unwrap());
        }
        // Once is enough: the same fields again are refused.
        assert!(add_fields(&out, &fields, &mut Vec::new()).is_err(), "{name}");
        edited.push((name.clone(), out));
    }
    let dir = scratch("added-fields-sample");
    write_classes(&dir, &edited);
    for home in jdks() {
        let (expected, _) = run_sample(&home, harness_classes(), &[]);
        let (got, err) = run_sample(&home, dir.to_str().unwrap(), &[]);
        assert!(!expected.is_empty());
        assert_eq!(got, expected, "{}: {err}", home.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rewrites every method of `data` through `edit` and writes the class.
fn edit_class(
    data: &[u8],
    mut edit: impl FnMut(&mut CodeEditor, &mut kprof_classfile::ConstantPool<'_>, &kprof_classfile::Code<'_>),
) -> Vec<u8> {
    let mut class = ClassFile::parse(data).unwrap();
    let mut editor = CodeEditor::new();
    let mut buf = Vec::new();
    let mut edits = Vec::new();
    for i in 0..class.methods.len() {
        let Some(code) = class.method_code(i).unwrap() else { continue };
        let ctx = MethodContext::of(&class, i).unwrap();
        editor.begin(&code);
        edit(&mut editor, &mut class.constant_pool, &code);
        let start = buf.len();
        if editor.finish(&code, &ctx, &mut class.constant_pool, &EditLimits::default(), false, &mut buf).unwrap() {
            edits.push(MethodEdit { method: i, range: start..buf.len() });
        }
    }
    let mut out = Vec::new();
    write_class(&class, &edits, &buf, false, &mut out).unwrap();
    out
}

#[test]
fn bytecode_mode_snippet_shape_runs_the_same() {
    // What bytecode mode will insert: a prologue `invokestatic enter; astore R; iconst_0; istore N` and at every
    // block `iload N; sipush size; invokestatic count(II)I; istore N`, with a new int and a new reference local.
    let classes = sample_classes();
    let rewritten: Vec<(String, Vec<u8>)> = classes
        .iter()
        .map(|(name, data)| {
            let out = edit_class(data, |ed, cp, code| {
                let helper = "kprof/harness/RewriteHelper";
                let enter = cp.add_methodref(helper, "enter", "()Ljava/lang/Object;").unwrap();
                let count = cp.add_methodref(helper, "count", "(II)I").unwrap();
                let object = cp.add_class("java/lang/Object").unwrap();
                let n = ed.add_local(VType::Integer).unwrap();
                let r = ed.add_local(VType::Object(object)).unwrap();
                let mut s = Snippet::new();
                s.invokestatic(cp, enter).astore(r).push_int(cp, 0).istore(n);
                ed.insert_prologue(&s).unwrap();
                for b in basic_blocks(code, BlockRule::Jp2, 50).unwrap() {
                    s.clear();
                    s.iload(n).push_int(cp, b.insns as i32 * 100).invokestatic(cp, count).istore(n);
                    ed.insert_before(b.start, &s).unwrap();
                }
            });
            (name.clone(), out)
        })
        .collect();
    let dir = scratch("bytecode-shape");
    write_classes(&dir, &rewritten);
    let helper = std::fs::read(Path::new(harness_classes()).join("kprof/harness/RewriteHelper.class")).unwrap();
    write_classes(&dir, &[("RewriteHelper.class".to_string(), helper)]);
    for home in jdks() {
        let (expected, _) = run_sample(&home, harness_classes(), &[]);
        let (got, err) = run_sample(&home, dir.to_str().unwrap(), &[]);
        assert_eq!(got, expected, "on {}: {err}", home.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn catch_all_handler_runs_for_escaping_exceptions_and_rethrows_them() {
    // Every method but the constructors gets two new locals set in the prologue and a catch-all handler that
    // reads them and prints a line: the program's output is unchanged (each exception still reaches whoever
    // caught it, its own handlers first), every class verifies (frames at the handler, a StackMapTable added
    // where a method had none), and the handler runs exactly where an exception leaves a method.
    let classes = sample_classes();
    let mut methods_without_stackmap = 0;
    let rewritten: Vec<(String, Vec<u8>)> = classes
        .iter()
        .map(|(name, data)| {
            // Names of the methods with code, in the order edit_class visits them.
            let class = ClassFile::parse(data).unwrap();
            let mut names = Vec::new();
            for i in 0..class.methods.len() {
                let Some(code) = class.method_code(i).unwrap() else { continue };
                let cp = &class.constant_pool;
                methods_without_stackmap +=
                    !code.attributes.iter().any(|a| cp.utf8(a.name_index).unwrap() == b"StackMapTable") as usize;
                names.push(class.member_name(&class.methods[i]).unwrap().to_vec());
            }
            let mut names = names.into_iter();
            let out = edit_class(data, |ed, cp, _| {
                if names.next().unwrap() == b"<init>" {
                    return;
                }
                let object = cp.add_class("java/lang/Object").unwrap();
                let throwable = cp.add_class("java/lang/Throwable").unwrap();
                let err = cp.add_fieldref("java/lang/System", "err", "Ljava/io/PrintStream;").unwrap();
                let println = cp.add_methodref("java/io/PrintStream", "println", "(Ljava/lang/Object;)V").unwrap();
                let n = ed.add_local(VType::Integer).unwrap();
                let r = ed.add_local(VType::Object(object)).unwrap();
                let mut s = Snippet::new();
                let line = cp.add_string("kprof-catch-all").unwrap();
                s.ldc(cp, line).astore(r).push_int(cp, 7).istore(n);
                ed.insert_prologue(&s).unwrap();
                s.clear();
                s.iload(n).op(kprof_classfile::opcodes::POP).getstatic(cp, err).aload(r).invokevirtual(cp, println);
                ed.set_catch_all(&s, throwable).unwrap();
            });
            (name.clone(), out)
        })
        .collect();
    assert!(methods_without_stackmap > 0);
    let dir = scratch("catch-all");
    write_classes(&dir, &rewritten);
    for home in jdks() {
        let (expected, _) = run_sample(&home, harness_classes(), &[]);
        let (got, err) = run_sample(&home, dir.to_str().unwrap(), &[]);
        assert_eq!(got, expected, "on {}: {err}", home.display());
        let lines = err.lines().filter(|l| *l == "kprof-catch-all").count();
        assert_eq!(lines, 1, "on {}: {err}", home.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn verifier_rejects_a_bad_edit() {
    // Reading a local that no frame declares must fail verification: proves the runs above really verify.
    let classes = sample_classes();
    let rewritten: Vec<(String, Vec<u8>)> = classes
        .iter()
        .map(|(name, data)| {
            let out = edit_class(data, |ed, _cp, code| {
                let r = ed.add_local(VType::Top).unwrap();
                let mut s = Snippet::new();
                s.aload(r).op(kprof_classfile::opcodes::POP);
                for b in basic_blocks(code, BlockRule::Komorium, 50).unwrap() {
                    ed.insert_before(b.start, &s).unwrap();
                }
            });
            (name.clone(), out)
        })
        .collect();
    let dir = scratch("bad-edit");
    write_classes(&dir, &rewritten);
    for home in jdks() {
        let (_, err) = run_sample(&home, dir.to_str().unwrap(), &[]);
        assert!(err.contains("VerifyError"), "expected a VerifyError on {}: {err}", home.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn relocation_rules_hold_in_rewritten_sample() {
    let classes = sample_classes();
    let mut rw = Rewriter::new(Mode::Probe, SkipPolicy::minimal(), EditLimits::default());
    let (rewritten, _) = rewrite_all(&mut rw, &classes);
    let mut uninitialized_seen = 0;
    let mut ranges_at_zero = 0;
    let mut type_annotations_seen = 0;
    for ((_, before), (name, after)) in classes.iter().zip(&rewritten) {
        let old = ClassFile::parse(before).unwrap();
        let new = ClassFile::parse(after).unwrap();
        for i in 0..new.methods.len() {
            let (Some(oc), Some(nc)) = (old.method_code(i).unwrap(), new.method_code(i).unwrap()) else { continue };
            // The prologue: invokestatic enter (3 bytes) + astore (1, 2 or 4 bytes).
            let prologue = 3 + match nc.max_locals - 1 {
                0..=3 => 1,
                4..=255 => 2,
                _ => 4,
            };
            let boundaries: Vec<u32> = Instructions::new(nc.code).map(|i| i.unwrap().offset).collect();
            for (oe, ne) in oc.exception_entries().zip(nc.exception_entries()) {
                assert!(ne.start as usize >= prologue, "{name}: an exception range covers the prologue");
                if oe.start == 0 {
                    ranges_at_zero += 1;
                    assert_eq!(ne.start as usize, prologue, "{name}: a range at 0 must start after the prologue");
                }
            }
            for a in &nc.attributes {
                let n = new.constant_pool.utf8(a.name_index).unwrap();
                if n == b"RuntimeVisibleTypeAnnotations" {
                    // Offsets of instruction targets name the moved instruction itself: the opcode at each new
                    // offset is the opcode at the old one (javac may point a cast's annotation at the next
                    // instruction when it drops the checkcast).
                    let offsets = |info: &[u8]| {
                        let mut v = Vec::new();
                        kprof_classfile::annotations::relocate_type_annotations(
                            info,
                            |o| {
                                v.push(o);
                                Ok(o)
                            },
                            |s, l| Ok((s, l)),
                            &mut Vec::new(),
                        )
                        .unwrap();
                        v
                    };
                    let old_attr = oc
                        .attributes
                        .iter()
                        .find(|x| old.constant_pool.utf8(x.name_index).unwrap() == b"RuntimeVisibleTypeAnnotations")
                        .unwrap();
                    let (before, after) = (offsets(old_attr.info), offsets(a.info));
                    assert_eq!(before.len(), after.len());
                    for (o, n) in before.iter().zip(&after) {
                        type_annotations_seen += 1;
                        assert_eq!(
                            oc.code[*o as usize], nc.code[*n as usize],
                            "{name}: type annotation moved off its instruction"
                        );
                        assert!(*n as usize >= prologue);
                    }
                    assert!(before.iter().zip(&after).any(|(o, n)| o != n));
                }
                if n == b"LineNumberTable" {
                    assert_eq!(&a.info[2..4], &[0, 0], "{name}: the first line must start at 0");
                }
                if n == b"StackMapTable" {
                    let ctx = MethodContext::of(&new, i).unwrap();
                    let mut init = Vec::new();
                    kprof_classfile::stackmap::initial_locals(
                        ctx.descriptor,
                        ctx.is_static,
                        ctx.is_init,
                        ctx.this_class,
                        ctx.this_is_object,
                        &mut init,
                    )
                    .unwrap();
                    let mut map = StackMap::default();
                    map.decode(a.info, &init).unwrap();
                    for f in &map.frames {
                        assert!(
                            boundaries.contains(&f.offset),
                            "{name}: frame at {} is inside an instruction",
                            f.offset
                        );
                        assert!(f.offset as usize >= prologue, "{name}: frame inside the prologue");
                        for t in map.locals(f).iter().chain(map.stack(f)) {
                            if let VType::Uninitialized(x) = t {
                                uninitialized_seen += 1;
                                assert_eq!(nc.code[*x as usize], NEW, "{name}: Uninitialized({x}) is not a `new`");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(uninitialized_seen > 0, "the sample should have Uninitialized frames");
    assert!(ranges_at_zero > 0, "the sample should have an exception range at 0");
    assert!(type_annotations_seen >= 3, "the sample should have type annotations on instructions");
}

/// A class `T` with one static method `m()V` whose code is `code`.
fn synthetic_class(code: &[u8]) -> Vec<u8> {
    let mut c = vec![0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 52, 0, 8];
    for (tag, s) in [(1u8, "T"), (7, "\u{1}"), (1, "java/lang/Object"), (7, "\u{3}"), (1, "m"), (1, "()V"), (1, "Code")]
    {
        c.push(tag);
        if tag == 7 {
            c.extend_from_slice(&[0, s.as_bytes()[0]]);
        } else {
            c.extend_from_slice(&(s.len() as u16).to_be_bytes());
            c.extend_from_slice(s.as_bytes());
        }
    }
    c.extend_from_slice(&[0, 0x21, 0, 2, 0, 4, 0, 0, 0, 0, 0, 1, 0, 9, 0, 5, 0, 6, 0, 1, 0, 7]);
    c.extend_from_slice(&((12 + code.len()) as u32).to_be_bytes());
    c.extend_from_slice(&[0, 2, 0, 1]);
    c.extend_from_slice(&(code.len() as u32).to_be_bytes());
    c.extend_from_slice(code);
    c.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    c
}

/// Inserts `n` nops before the instruction at offset `at` of `m` and returns the editor's verdict.
fn grow(data: &[u8], at: u32, n: usize, budget: u32) -> Result<bool, EditError> {
    let mut class = ClassFile::parse(data).unwrap();
    let code = class.method_code(0).unwrap().unwrap();
    let ctx = MethodContext::of(&class, 0).unwrap();
    let mut ed = CodeEditor::new();
    ed.begin(&code);
    let mut s = Snippet::new();
    for _ in 0..n {
        s.op(NOP);
    }
    ed.insert_before(at, &s).unwrap();
    let mut out = Vec::new();
    let r = ed.finish(&code, &ctx, &mut class.constant_pool, &EditLimits { budget }, false, &mut out);
    if r.is_err() {
        assert!(out.is_empty(), "a refused edit must write nothing");
    }
    r
}

#[test]
fn edits_that_break_limits_are_refused() {
    // goto over 32,700 nops to the return: 100 more bytes before the return overflow the 16-bit offset.
    let mut code = vec![GOTO];
    code.extend_from_slice(&(32_703u16).to_be_bytes());
    code.extend(std::iter::repeat_n(NOP, 32_700));
    code.push(RETURN);
    let class = synthetic_class(&code);
    assert_eq!(grow(&class, 3, 50, u32::MAX), Ok(true));
    assert_eq!(grow(&class, 3, 100, u32::MAX), Err(EditError::Refused(Refusal::BranchOverflow)));
    // Code inserted before the target itself is where the branch lands: the offset does not grow.
    assert_eq!(grow(&class, 32_703, 100, u32::MAX), Ok(true));
    // Past 64 KB.
    let mut code = vec![NOP; 65_000];
    code.push(RETURN);
    let class = synthetic_class(&code);
    assert_eq!(grow(&class, 0, 535, u32::MAX), Err(EditError::Refused(Refusal::CodeTooLarge)));
    assert_eq!(grow(&class, 0, 534, u32::MAX), Ok(true));
    // Crossing the budget is refused; a method already past it may grow.
    let mut code = vec![NOP; 99];
    code.push(RETURN);
    let class = synthetic_class(&code);
    assert_eq!(grow(&class, 0, 1, 100), Err(EditError::Refused(Refusal::BudgetCrossed)));
    assert_eq!(grow(&class, 0, 1, 50), Ok(true));
    assert_eq!(grow(&class, 0, 1, 101), Ok(true));
}

#[test]
fn insertion_inside_an_instruction_is_an_error() {
    let class = synthetic_class(&[GOTO, 0, 3, RETURN]);
    let mut cf = ClassFile::parse(&class).unwrap();
    let code = cf.method_code(0).unwrap().unwrap();
    let ctx = MethodContext::of(&cf, 0).unwrap();
    let mut ed = CodeEditor::new();
    ed.begin(&code);
    let mut s = Snippet::new();
    s.op(NOP);
    ed.insert_before(1, &s).unwrap();
    let r = ed.finish(&code, &ctx, &mut cf.constant_pool, &EditLimits::default(), false, &mut Vec::new());
    assert!(matches!(r, Err(EditError::Malformed(_))));
    assert!(ed.insert_before(4, &s).is_err());
}

#[test]
fn truncated_and_corrupted_classes_are_errors() {
    let (_, data) = &sample_classes()[0];
    let mut rw = Rewriter::new(Mode::Probe, SkipPolicy::minimal(), EditLimits::default());
    let mut out = Vec::new();
    let mut stats = RewriteStats::default();
    for len in 0..data.len() {
        assert!(ClassFile::parse(&data[..len]).is_err());
        assert!(rw.rewrite_class(&data[..len], &mut out, &mut stats).is_err());
    }
    // Flip bytes one at a time through the class: whatever happens, no panic.
    let mut copy = data.clone();
    for i in (0..copy.len()).step_by(7) {
        let saved = copy[i];
        for v in [0u8, 0xFF, saved ^ 0x40] {
            copy[i] = v;
            let _ = rw.rewrite_class(&copy, &mut out, &mut stats);
            let _ = kprof_classfile::roundtrip_rebuild(&copy, &mut out);
        }
        copy[i] = saved;
    }
}
