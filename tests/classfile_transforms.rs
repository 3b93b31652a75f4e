//! The transforms of kprof-classfile on compiled java-harness classes (which need a JDK to build, so these
//! tests live here rather than in the crate).

use kprof_classfile::transform::bytecode::{BytecodeConfig, BytecodeTransform};
use kprof_classfile::transform::exact::{ExactConfig, ExactTransform};
use kprof_classfile::transform::methods::{MethodTable, STACK_NONE, STACK_PUSHED};
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

/// stack=walk's rewrite keeps no reified stack (no push, no depth local): smaller code, the same methods
/// rewritten, and each rewritten method marked with what its frames are to the walked stack.
#[test]
fn the_walked_stack_rewrite_is_smaller_and_marks_what_it_rewrote() {
    let mut sizes = Vec::new();
    for reified_stack in [true, false] {
        let table = Arc::new(MethodTable::new());
        let config = BytecodeConfig { reified_stack, ..BytecodeConfig::default() };
        let transform = BytecodeTransform::new(config, Arc::clone(&table));
        let mut rw = Rewriter::with_transform(Box::new(transform), SkipPolicy::agent(), EditLimits::default());
        let mut stats = RewriteStats::default();
        let mut bytes = 0;
        for name in ["FixedWork", "Split3", "Deep", "ThreadSplit", "Deterministic", "Throwing"] {
            let mut out = Vec::new();
            assert!(rw.rewrite_class(&harness_class(name), &mut out, &mut stats).unwrap(), "{name} unchanged");
            bytes += out.len();
        }
        assert_eq!(stats.left_alone_total(), 0, "{:?}", stats.left_alone);
        let ids = table.len() as u32;
        let marked = (0..ids).filter(|&i| {
            let n = table.name(i).unwrap();
            table.find(n.class.as_bytes(), n.name.as_bytes(), n.descriptor.as_bytes()).unwrap().1 != STACK_NONE
        });
        assert_eq!(marked.count() as u64, stats.methods_rewritten, "every rewritten method marked");
        let fib = (0..ids).map(|i| table.name(i).unwrap()).find(|n| n.name == "fib").unwrap();
        let (_, kind) = table.find(fib.class.as_bytes(), b"fib", fib.descriptor.as_bytes()).unwrap();
        assert_eq!(kind, STACK_PUSHED, "fib calls itself: the reified stack holds it");
        sizes.push((bytes, stats.methods_rewritten));
    }
    assert_eq!(sizes[0].1, sizes[1].1, "the same methods rewritten");
    assert!(sizes[1].0 < sizes[0].0, "walk's rewrite is not smaller: {sizes:?}");
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
