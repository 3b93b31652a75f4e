//! The reader on arbitrary bytes: parse, decode every constant, instruction, basic block (both rules) and stack
//! map, and rebuild the class without edits. Nothing may panic, and a rebuild that succeeds must reproduce the
//! input byte for byte.
#![no_main]

use kprof_classfile::blocks::{basic_blocks, BlockRule};
use kprof_classfile::stackmap::StackMap;
use kprof_classfile::{roundtrip_rebuild, ClassFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(class) = ClassFile::parse(data) else { return };
    for i in 1..class.constant_pool.count() {
        let _ = class.constant_pool.get(i);
    }
    let _ = class.name();
    for i in 0..class.methods.len() {
        let Ok(Some(code)) = class.method_code(i) else { continue };
        for insn in code.instructions() {
            if insn.is_err() {
                break;
            }
        }
        let _ = basic_blocks(&code, BlockRule::Komorium, 50);
        let _ = basic_blocks(&code, BlockRule::Jp2, 3);
        for a in &code.attributes {
            if class.constant_pool.utf8(a.name_index).ok() == Some(&b"StackMapTable"[..]) {
                let _ = StackMap::default().decode(a.info, &[]);
            }
        }
    }
    let mut out = Vec::new();
    if roundtrip_rebuild(data, &mut out).is_ok() {
        assert!(out == data, "rebuild differs from its input");
    }
});
