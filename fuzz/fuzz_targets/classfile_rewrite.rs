//! The rewrite path on arbitrary bytes: the probe rewrite (with a small budget sometimes, to reach refusals)
//! must not panic, and whatever it writes must parse again, rebuild identically, and take a second rewrite.
#![no_main]

use kprof::classfile::edit::EditLimits;
use kprof::classfile::{roundtrip_rebuild, ClassFile};
use kprof::rewrite::{Mode, RewriteStats, Rewriter, SkipPolicy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let budget = if data.len() % 3 == 0 { 40 } else { 8000 };
    let policy = if data.len() % 2 == 0 { SkipPolicy::agent() } else { SkipPolicy::minimal() };
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
