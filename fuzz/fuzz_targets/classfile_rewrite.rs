//! The rewrite path on arbitrary bytes: the probe rewrite (with a small budget sometimes, to reach refusals)
//! must not panic, and whatever it writes must parse again, rebuild identically, and take a second rewrite.
//!
//! Input that is not a class file becomes the method of a synthetic class (max_stack, max_locals, exception
//! table, StackMapTable and code taken from the bytes), so most runs reach the editor rather than stopping in
//! the constant pool.
#![no_main]

use kprof_classfile::edit::EditLimits;
use kprof_classfile::{roundtrip_rebuild, ClassFile};
use kprof_classfile::transform::{Mode, RewriteStats, Rewriter, SkipPolicy};
use libfuzzer_sys::fuzz_target;

/// A class `T` with method `m(ILjava/lang/String;J)V` (static or not) built from `data`.
fn synthetic(data: &[u8]) -> Option<Vec<u8>> {
    let (&flags, rest) = data.split_first()?;
    let (head, rest) = (rest.get(..5)?, rest.get(5..)?);
    let handlers = (head[4] % 4) as usize;
    let (exceptions, rest) = (rest.get(..handlers * 8)?, rest.get(handlers * 8..)?);
    let smt_len = *rest.first()? as usize;
    let (smt, code) = (rest.get(1..1 + smt_len)?, rest.get(1 + smt_len..)?);
    if code.is_empty() {
        return None;
    }
    let names = ["T", "java/lang/Object", "m", "(ILjava/lang/String;J)V", "Code", "StackMapTable"];
    let mut c = vec![0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 52, 0, 9];
    for n in names {
        c.push(1);
        c.extend_from_slice(&(n.len() as u16).to_be_bytes());
        c.extend_from_slice(n.as_bytes());
    }
    c.extend_from_slice(&[7, 0, 1, 7, 0, 2]); // #7 Class T, #8 Class Object
    let access: u16 = if flags & 1 != 0 { 0x0009 } else { 0x0001 };
    c.extend_from_slice(&[0, 0x21, 0, 7, 0, 8, 0, 0, 0, 0, 0, 1]);
    c.extend_from_slice(&access.to_be_bytes());
    c.extend_from_slice(&[0, 3, 0, 4, 0, 1, 0, 5]);
    let with_smt = flags & 2 != 0;
    let smt_attr = if with_smt { 6 + smt.len() } else { 0 };
    let len = 12 + code.len() + exceptions.len() + smt_attr;
    c.extend_from_slice(&(len as u32).to_be_bytes());
    c.extend_from_slice(&head[..4]);
    c.extend_from_slice(&(code.len() as u32).to_be_bytes());
    c.extend_from_slice(code);
    c.extend_from_slice(&(handlers as u16).to_be_bytes());
    c.extend_from_slice(exceptions);
    if with_smt {
        c.extend_from_slice(&[0, 1, 0, 6]);
        c.extend_from_slice(&(smt.len() as u32).to_be_bytes());
        c.extend_from_slice(smt);
    } else {
        c.extend_from_slice(&[0, 0]);
    }
    c.extend_from_slice(&[0, 0]);
    Some(c)
}

fuzz_target!(|input: &[u8]| {
    let made;
    let data = if input.starts_with(&[0xCA, 0xFE, 0xBA, 0xBE]) {
        input
    } else {
        match synthetic(input) {
            Some(c) => {
                made = c;
                &made[..]
            }
            None => return,
        }
    };
    let budget = if input.len() % 3 == 0 { 40 } else { 8000 };
    let policy = if input.len() % 2 == 0 { SkipPolicy::agent() } else { SkipPolicy::minimal() };
    let mut rw = Rewriter::new(Mode::Probe, policy, EditLimits { budget });
    let mut stats = RewriteStats::default();
    let mut out = Vec::new();
    let Ok(changed) = rw.rewrite_class(data, &mut out, &mut stats) else { return };
    if !changed {
        assert!(out == data);
        return;
    }
    assert!(ClassFile::parse(&out).is_ok(), "rewritten class does not parse");
    let mut again = Vec::new();
    if roundtrip_rebuild(&out, &mut again).is_ok() {
        assert!(again == out, "rebuild of rewritten class differs");
    }
    let mut twice = Vec::new();
    let _ = rw.rewrite_class(&out, &mut twice, &mut stats);
});
