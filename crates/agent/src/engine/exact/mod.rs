//! mode=exact: the complete, callsite-aware calling context profile (JP2 and CCCP's design): every call
//! and every bytecode counted.
//!
//! Classes are rewritten as they load ([`crate::engine::rewriting`], with
//! [`kprof_classfile::transform::exact`]) so that each thread counts its calls and blocks in a tree of its
//! own ([`runtime`]), merged into the calling context tree when the thread ends and before a write.

pub(crate) mod runtime;

use crate::cct::{NodeId, Snapshot};
use crate::engine::rewriting::RewritingEngine;
use crate::engine::{fields, Engine, Host, Phase};
use crate::frame::FrameRef;
use crate::jvmti::bindings::jthread;
use crate::jvmti::Jni;
use kprof_classfile::transform::methods::MethodTable;
use kprof_profile::{BlockCount, Meta, Profile};
use kprof_protocol::options::{EngineKind, Options};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The exact engine: the rewriting engine in exact mode.
pub struct ExactEngine {
    rewriting: &'static RewritingEngine,
    /// The session counts basic blocks (`bb=on`): the profile gets them ([`Engine::annotate`]).
    blocks: AtomicBool,
}

static ENGINE: OnceLock<ExactEngine> = OnceLock::new();

pub fn create(host: &'static dyn Host, options: &Options, phase: Phase) -> Result<&'static dyn Engine, String> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let rewriting = RewritingEngine::create(host, options, phase)?;
    Ok(ENGINE.get_or_init(|| ExactEngine { rewriting, blocks: AtomicBool::new(false) }))
}

impl Engine for ExactEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Exact
    }

    fn check(&self, _options: &Options) -> Result<(), String> {
        Ok(())
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        self.blocks.store(o.bb, Ordering::Relaxed);
        self.rewriting.start(jni, EngineKind::Exact, o)?;
        let on = |b: bool| if b { "on" } else { "off" };
        Ok(format!("bb={} natives={}", on(o.bb), on(self.rewriting.wraps_natives())))
    }

    fn stop(&self, jni: Option<Jni>, restore: bool) {
        if let Some(jni) = jni {
            self.rewriting.stop(jni, restore);
        }
    }

    fn thread_start(&self, jni: Jni, _thread: jthread, _root: NodeId) {
        self.rewriting.thread_started(jni);
    }

    fn thread_end(&self, jni: Jni, _thread: jthread) {
        self.rewriting.thread_ended_any(jni);
    }

    fn before_write(&self, jni: Option<Jni>) {
        if let Some(jni) = jni {
            self.rewriting.before_write(jni);
        }
    }

    fn describe(&self, o: &Options, meta: &mut Meta) {
        let e = self.rewriting;
        let st = &e.exact;
        let c = &mut meta.counters;
        c.insert("calls".into(), st.calls.load(Ordering::Relaxed));
        c.insert("bytecodes".into(), st.bytecodes.load(Ordering::Relaxed));
        c.insert("tree_merges".into(), st.merges.load(Ordering::Relaxed));
        c.insert("merge_ms".into(), st.merge_ns.load(Ordering::Relaxed) / 1_000_000);
        c.insert("merge_helpers".into(), st.merge_helpers.load(Ordering::Relaxed));
        c.insert("overflow_calls".into(), st.overflow_calls.load(Ordering::Relaxed));
        c.insert("tree_bytes_peak".into(), st.mapped_peak.load(Ordering::Relaxed));
        c.insert("bb".into(), o.bb as u64);
        c.insert("natives".into(), e.wraps_natives() as u64);
        c.insert("natives_wrapped".into(), e.stats.natives_wrapped.load(Ordering::Relaxed));
        c.insert("native_catches".into(), st.native_catches.load(Ordering::Relaxed));
        c.insert("classes_with_natives_wrapped".into(), e.stats.classes_with_natives_wrapped.load(Ordering::Relaxed));
        e.describe_classes(meta);
    }

    fn summary(&self, meta: &Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        let on = |k: &str| if c(k) != 0 { "on" } else { "off" };
        format!(
            "bb={} natives={} {} {} natives_wrapped={} {} tree_mb={} merge_ms={}",
            on("bb"),
            on("natives"),
            fields(meta, &[("calls", "calls"), ("bytecodes", "bytecodes"), ("contexts", "contexts")]),
            RewritingEngine::summary_classes(meta),
            c("natives_wrapped"),
            RewritingEngine::summary_left_alone(meta),
            c("tree_bytes_peak").div_ceil(1 << 20),
            c("merge_ms"),
        )
    }

    fn method_names(&self) -> Option<&MethodTable> {
        Some(&self.rewriting.methods)
    }

    fn annotates(&self) -> bool {
        self.blocks.load(Ordering::Relaxed)
    }

    /// `bb=on`: each context's block counts with the blocks' bytecode ranges.
    fn annotate(&self, snapshot: &Snapshot, profile: &mut Profile) {
        if !self.annotates() {
            return;
        }
        let all = self.rewriting.exact.all_blocks();
        for (i, sn) in snapshot.nodes.iter().enumerate() {
            let Some(counts) = all.get(&sn.node) else { continue };
            let Some(FrameRef::Method(id)) = sn.frame.decode() else { continue };
            let Some(layout) = self.rewriting.methods.blocks(id) else { continue };
            profile.nodes[i].blocks = layout
                .spans
                .iter()
                .zip(counts)
                .map(|(span, &count)| BlockCount { start_bci: span.start_bci, end_bci: span.end_bci, count })
                .collect();
        }
    }
}
