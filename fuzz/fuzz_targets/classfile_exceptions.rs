//! Large exception tables through the counting modes: a short input describes a method whose code is a pattern
//! repeated up to 64 KB and whose exception table is a few template entries repeated up to 65,535 times (each
//! repetition shifted by a stride, so that the entries are identical or all different). The flow analysis of
//! bytecode and exact modes runs on it directly (past the rewriter's bound on tables too), then the bytecode,
//! exact and probe rewrites. Nothing may panic, time and memory must stay bounded (libFuzzer's `-timeout` and
//! `-rss_limit_mb`), and what a rewrite writes must parse again.
//!
//! Input: `flags, max_stack u16, max_locals u16, repeat u16, pattern_len u8, pattern, tail_len u8, tail,
//! then per template: start u16, end u16, handler u16, catch_type u16, count u16, stride u8`.
#![no_main]

use kprof_classfile::edit::EditLimits;
use kprof_classfile::transform::flow::{CheckPlaces, Flow};
use kprof_classfile::transform::{Mode, RewriteStats, Rewriter, SkipPolicy};
use kprof_classfile::ClassFile;
use libfuzzer_sys::fuzz_target;

struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (b, rest) = (self.data.get(..n)?, self.data.get(n..)?);
        self.data = rest;
        Some(b)
    }
}

/// Class `T` with one method `m(ILjava/lang/String;J)V` (static or not), its code and table from `data`.
fn class(data: &[u8]) -> Option<(Vec<u8>, u8)> {
    let mut i = Input { data };
    let flags = i.u8()?;
    let (max_stack, max_locals, repeat) = (i.u16()?, i.u16()?, i.u16()?);
    let pattern_len = i.u8()? as usize;
    let pattern = i.bytes(pattern_len)?;
    let tail_len = i.u8()? as usize;
    let tail = i.bytes(tail_len)?;
    let mut code = Vec::new();
    for _ in 0..repeat {
        if code.len() + pattern.len() + tail.len() > 65535 {
            break;
        }
        code.extend_from_slice(pattern);
    }
    code.extend_from_slice(tail);
    if code.is_empty() {
        return None;
    }
    let mut table = Vec::new();
    let mut entries = 0u32;
    while let (Some(start), Some(end), Some(handler), Some(catch_type), Some(count), Some(stride)) =
        (i.u16(), i.u16(), i.u16(), i.u16(), i.u16(), i.u8())
    {
        for k in 0..count as u32 {
            if entries == 65535 {
                break;
            }
            let shift = (k * stride as u32) as u16;
            for v in [start.wrapping_add(shift), end.wrapping_sub(shift), handler, catch_type] {
                table.extend_from_slice(&v.to_be_bytes());
            }
            entries += 1;
        }
    }
    let names = ["T", "java/lang/Object", "m", "(ILjava/lang/String;J)V", "Code"];
    let mut c = vec![0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 49, 0, 8];
    for n in names {
        c.push(1);
        c.extend_from_slice(&(n.len() as u16).to_be_bytes());
        c.extend_from_slice(n.as_bytes());
    }
    c.extend_from_slice(&[7, 0, 1]); // #6 Class T
    c.extend_from_slice(&[7, 0, 2]); // #7 Class Object
    let access: u16 = if flags & 1 != 0 { 0x0009 } else { 0x0001 };
    c.extend_from_slice(&[0, 0x21, 0, 6, 0, 7, 0, 0, 0, 0, 0, 1]);
    c.extend_from_slice(&access.to_be_bytes());
    c.extend_from_slice(&[0, 3, 0, 4, 0, 1, 0, 5]);
    let len = 12 + code.len() + table.len();
    c.extend_from_slice(&(len as u32).to_be_bytes());
    c.extend_from_slice(&max_stack.to_be_bytes());
    c.extend_from_slice(&max_locals.to_be_bytes());
    c.extend_from_slice(&(code.len() as u32).to_be_bytes());
    c.extend_from_slice(&code);
    c.extend_from_slice(&(entries as u16).to_be_bytes());
    c.extend_from_slice(&table);
    c.extend_from_slice(&[0, 0, 0, 0]); // no Code attributes, no class attributes
    Some((c, flags))
}

fuzz_target!(|input: &[u8]| {
    let Some((data, flags)) = class(input) else { return };
    let Ok(parsed) = ClassFile::parse(&data) else { return };
    let max_path = [50, 0, 1, 7][(flags >> 1) as usize % 4];
    if let Ok(Some(code)) = parsed.method_code(0) {
        let mut flow = Flow::default();
        for places in [CheckPlaces::CallsAndLoops, CheckPlaces::Loops] {
            let _ = flow.analyse(&code, max_path, places);
        }
    }
    let budget = if flags & 8 != 0 { 65535 } else { 8000 };
    for mode in [Mode::Bytecode, Mode::Exact, Mode::Probe] {
        let mut rw = Rewriter::new(mode, SkipPolicy::minimal(), EditLimits { budget });
        let mut stats = RewriteStats::default();
        let mut out = Vec::new();
        if let Ok(true) = rw.rewrite_class(&data, &mut out, &mut stats) {
            assert!(ClassFile::parse(&out).is_ok(), "{mode:?}: rewritten class does not parse");
        }
    }
});
