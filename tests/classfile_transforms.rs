//! The transforms of kprof-classfile on compiled java-harness classes (which need a JDK to build, so these
//! tests live here rather than in the crate).

use kprof_classfile::transform::bytecode::{BytecodeConfig, BytecodeTransform};
use kprof_classfile::transform::exact::{ExactConfig, ExactTransform};
use kprof_classfile::transform::methods::MethodTable;
use kprof_classfile::transform::natives::wrap_natives;
use kprof_classfile::transform::{RewriteStats, Rewriter, SkipPolicy};
use kprof_classfile::{ClassFile, EditLimits};
use std::sync::Arc;

/// A class file from the harness build.
fn harness_class(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("KPROF_HARNESS_CLASSES")).join(format!("kprof/harness/{name}.class"));
    std::fs::read(path).unwrap()
}

#[test]
fn rewrites_harness_classes_and_names_every_method() {
    for callsites in [false, true] {
        let table = Arc::new(MethodTable::new());
        let config = BytecodeConfig { callsites, thread_fields: callsites, ..BytecodeConfig::default() };
        let transform = BytecodeTransform::new(config, Arc::clone(&table));
        let mut rw = Rewriter::with_transform(Box::new(transform), SkipPolicy::agent(), EditLimits::default());
        let mut stats = RewriteStats::default();
        for name in ["FixedWork", "Split3", "Deep", "ThreadSplit"] {
            let data = harness_class(name);
            let mut out = Vec::new();
            assert!(rw.rewrite_class(&data, &mut out, &mut stats).unwrap(), "{name} unchanged");
            let c = ClassFile::parse(&out).unwrap();
            assert_eq!(c.methods.len(), ClassFile::parse(&data).unwrap().methods.len());
        }
        assert_eq!(stats.left_alone_total(), 0, "{:?}", stats.left_alone);
        assert!(table.len() as u64 >= stats.methods_rewritten);
        assert!((0..table.len() as u32).any(|i| table.name(i).unwrap().name == "fib"));
        assert_eq!(table.site_of(0).is_some(), callsites);
    }
}

#[test]
fn rewrites_harness_classes_with_and_without_blocks() {
    for blocks in [false, true] {
        let table = Arc::new(MethodTable::new());
        let config = ExactConfig { blocks, ..ExactConfig::default() };
        let transform = ExactTransform::new(config, Arc::clone(&table));
        let mut rw = Rewriter::with_transform(Box::new(transform), SkipPolicy::agent(), EditLimits::default());
        let mut stats = RewriteStats::default();
        for name in ["FixedWork", "Split3", "Deep", "ThreadSplit", "Deterministic"] {
            let data = harness_class(name);
            let mut out = Vec::new();
            assert!(rw.rewrite_class(&data, &mut out, &mut stats).unwrap(), "{name} unchanged");
            let c = ClassFile::parse(&out).unwrap();
            assert_eq!(c.methods.len(), ClassFile::parse(&data).unwrap().methods.len());
        }
        assert_eq!(stats.left_alone_total(), 0, "{:?}", stats.left_alone);
        let fib = (0..table.len() as u32).find(|&i| table.name(i).unwrap().name == "fib").unwrap();
        // Both flavours record the blocks: bb=off's merge adds the first block's bytecodes per call.
        let fib_blocks = table.blocks(fib).expect("blocks recorded");
        assert!(!fib_blocks.spans.is_empty());
    }
}

#[test]
fn a_class_without_natives_is_left_alone() {
    let data = harness_class("FixedWork");
    assert!(wrap_natives(&data).unwrap().is_none());
}
