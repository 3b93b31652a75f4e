//! mode=bytecode: deterministic sampling by bytecode counts (Komorium's design on a native agent).
//!
//! Classes are rewritten as they load ([`crate::engine::rewriting`], with
//! [`kprof_classfile::transform::bytecode`]) so that each thread counts the bytecodes it executes and hands
//! its calling context to [`runtime`] every `gran + r` of them; a drain thread takes the samples into the
//! tree.

pub(crate) mod runtime;
pub(crate) mod walk;

use crate::cct::NodeId;
use crate::cct::Snapshot;
use crate::engine::rewriting::RewritingEngine;
use crate::engine::{fields, Engine, Host, Phase};
use crate::jvmti::bindings::jthread;
use crate::jvmti::Jni;
use kprof_classfile::transform::methods::MethodTable;
use kprof_profile::{Meta, Profile};
use kprof_protocol::options::{EngineKind, Options};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The bytecode engine: the rewriting engine in bytecode mode.
pub struct BytecodeEngine {
    rewriting: &'static RewritingEngine,
    /// Bytecodes counted since each thread's last sample, read when the session ended.
    residual: AtomicU64,
}

static ENGINE: OnceLock<BytecodeEngine> = OnceLock::new();

pub fn create(host: &'static dyn Host, options: &Options, phase: Phase) -> Result<&'static dyn Engine, String> {
    if let Some(e) = ENGINE.get() {
        return Ok(e);
    }
    let rewriting = RewritingEngine::create(host, options, phase)?;
    walk::enable_own_walks(host);
    Ok(ENGINE.get_or_init(|| BytecodeEngine { rewriting, residual: AtomicU64::new(0) }))
}

impl Engine for BytecodeEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Bytecode
    }

    fn check(&self, _options: &Options) -> Result<(), String> {
        Ok(())
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        self.residual.store(0, Ordering::Relaxed);
        self.rewriting.start(jni, EngineKind::Bytecode, o)?;
        Ok(format!("gran={} rand={}", o.gran, o.rand))
    }

    fn stop(&self, jni: Option<Jni>, restore: bool) {
        if let Some(jni) = jni {
            self.residual.store(self.rewriting.residual(jni), Ordering::Relaxed);
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
        if meta.interval == 0 {
            meta.interval = o.gran as u64;
        }
        let st = &self.rewriting.bytecode;
        let c = &mut meta.counters;
        let sampled = st.sampled_bytecodes.load(Ordering::Relaxed);
        let dropped = st.dropped_bytecodes.load(Ordering::Relaxed);
        let residual = self.residual.load(Ordering::Relaxed);
        c.insert("samples".into(), st.samples.load(Ordering::Relaxed));
        c.insert("sampled_bytecodes".into(), sampled);
        c.insert("residual_bytecodes".into(), residual);
        c.insert("dropped_bytecodes".into(), dropped);
        c.insert("estimated_bytecodes".into(), sampled + dropped + residual);
        c.insert("dropped_samples".into(), st.dropped.load(Ordering::Relaxed));
        c.insert("self_drains".into(), st.self_drains.load(Ordering::Relaxed));
        c.insert("truncated_samples".into(), st.truncated.load(Ordering::Relaxed));
        c.insert("threads_sampled".into(), st.threads.load(Ordering::Relaxed));
        c.insert("gran".into(), o.gran as u64);
        c.insert("rand".into(), o.rand as u64);
        c.insert("maxpath".into(), o.bytecode_maxpath() as u64);
        c.insert("stack_walk".into(), o.stack_walks() as u64);
        c.insert("loop_checks_only".into(), o.loop_checks_only as u64);
        let (walks, by_jvmti) = walk::walks();
        c.insert("walks".into(), walks);
        c.insert("walks_jvmti".into(), by_jvmti);
        self.rewriting.describe_classes(meta);
    }

    fn summary(&self, meta: &Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        let stack = if c("stack_walk") != 0 {
            format!("walk walks_jvmti={}/{}", c("walks_jvmti"), c("walks"))
        } else {
            "reified".to_string()
        };
        let count = if meta.counters.contains_key("counted_on_chords") {
            format!("count=chords on_chords={} by_blocks={}", c("counted_on_chords"), c("counted_by_blocks"))
        } else {
            "count=blocks".to_string()
        };
        format!(
            "{} stack={stack} {count} counter_updates={} checks={} checks_placed={} {} {}",
            fields(
                meta,
                &[
                    ("gran", "gran"),
                    ("rand", "rand"),
                    ("maxpath", "maxpath"),
                    ("samples", "samples"),
                    ("dropped", "dropped_samples"),
                    ("self_drained", "self_drains"),
                    ("truncated", "truncated_samples"),
                    ("threads", "threads_sampled"),
                    ("bytecodes", "estimated_bytecodes"),
                ]
            ),
            c("counter_updates"),
            if c("loop_checks_only") != 0 { "loops" } else { "calls" },
            c("granularity_checks"),
            RewritingEngine::summary_classes(meta),
            RewritingEngine::summary_left_alone(meta)
        )
    }

    fn method_names(&self) -> Option<&MethodTable> {
        Some(&self.rewriting.methods)
    }

    fn annotate(&self, _snapshot: &Snapshot, _profile: &mut Profile) {}
}
