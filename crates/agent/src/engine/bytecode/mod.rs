//! mode=bytecode: deterministic sampling by bytecode counts (Komorium's design on a native agent).
//!
//! Classes are rewritten as they load ([`crate::engine::rewriting`], with
//! [`kprof_classfile::transform::bytecode`]) so that each thread counts the bytecodes it executes and hands
//! its calling context to [`runtime`] every `gran + r` of them; a drain thread takes the samples into the
//! tree.

pub(crate) mod fp;
pub(crate) mod runtime;
pub(crate) mod walk;

use crate::cct::NodeId;
use crate::cct::Snapshot;
use crate::engine::rewriting::RewritingEngine;
use crate::engine::{fields, Engine, Host, Phase};
use crate::jvmti::bindings::{jthread, JVMTI_PHASE_ONLOAD};
use crate::jvmti::Jni;
use kprof_classfile::transform::methods::MethodTable;
use kprof_profile::{Meta, Profile};
use kprof_protocol::options::{EngineKind, Options, StackMode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The bytecode engine: the rewriting engine in bytecode mode.
pub struct BytecodeEngine {
    host: &'static dyn Host,
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
    if options.stack_fp() {
        fp::enable(host, phase)?;
    }
    Ok(ENGINE.get_or_init(|| BytecodeEngine { host, rewriting, residual: AtomicU64::new(0) }))
}

/// Resolves `stack=auto` below its walking granularity for a session that starts in `phase`: the
/// frame-pointer chain where the JVM can give it (kprof loaded with the JVM, or a JVM started with
/// `-XX:+PreserveFramePointer`), which measured cheaper than the reified stack at gran=10000 on both JDKs
/// (docs/BENCHMARKS.md); else the reified stack.
pub fn resolve_auto_stack(options: &mut Options, phase: Phase) {
    if options.auto_may_use_fp() && fp::possible(phase) {
        options.stack = StackMode::Fp;
    }
}

impl Engine for BytecodeEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Bytecode
    }

    fn check(&self, options: &Options) -> Result<(), String> {
        if options.stack_fp() {
            // A session after the first (the engine was made for another): the JVM may be past the phase
            // where the frame-pointer flag can still be set.
            let onload = self.rewriting.jvmti.phase().is_ok_and(|p| p == JVMTI_PHASE_ONLOAD);
            fp::enable(self.host, if onload { Phase::OnLoad } else { Phase::Live })?;
        }
        Ok(())
    }

    fn start(&self, jni: Jni, o: &Options) -> Result<String, String> {
        self.residual.store(0, Ordering::Relaxed);
        if o.stack_fp() {
            fp::start(o.stack == StackMode::FpCheck)?;
        }
        self.rewriting.start(jni, EngineKind::Bytecode, o)?;
        Ok(format!("gran={} rand={}", o.gran, o.rand))
    }

    fn stop(&self, jni: Option<Jni>, restore: bool) {
        if let Some(jni) = jni {
            self.residual.store(self.rewriting.residual(jni), Ordering::Relaxed);
            fp::stop();
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
        if o.stack_fp() {
            let f = fp::counts();
            c.insert("fp_code_lookups".into(), f.code_lookups);
            c.insert("fp_code_unloads".into(), f.code_unloads);
            c.insert("fp_samples".into(), f.samples);
            c.insert("fp_frames_reused".into(), f.frames_reused);
            c.insert("fp_frames_decoded".into(), f.frames_decoded);
            c.insert("fp_walked".into(), f.walked);
            c.insert("fp_walked_innermost".into(), f.walked_innermost);
            c.insert("fp_interpreted_read".into(), f.interpreted_read);
            c.insert("fp_method_ids_trusted".into(), f.method_ids_trusted as u64);
            c.insert("fp_method_ids_refuted".into(), f.method_ids_refuted as u64);
            c.insert("fp_left_to_walk".into(), f.left_to_walk);
            if o.stack == StackMode::FpCheck {
                c.insert("fp_mismatches".into(), f.mismatches);
            }
        }
        self.rewriting.describe_classes(meta);
    }

    fn summary(&self, meta: &Meta) -> String {
        let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
        let stack = if meta.counters.contains_key("fp_samples") {
            let check = match meta.counters.get("fp_mismatches") {
                Some(m) => format!(" fp_mismatches={m}"),
                None => String::new(),
            };
            format!(
                "fp fp_samples={} frames_reused={} frames_decoded={} code_lookups={} code_unloads={} fp_walked={} \
                 walked_innermost={} interpreted_read={} left_to_walk={} walks_jvmti={}/{}{check}",
                c("fp_samples"),
                c("fp_frames_reused"),
                c("fp_frames_decoded"),
                c("fp_code_lookups"),
                c("fp_code_unloads"),
                c("fp_walked"),
                c("fp_walked_innermost"),
                c("fp_interpreted_read"),
                c("fp_left_to_walk"),
                c("walks_jvmti"),
                c("walks")
            )
        } else if c("stack_walk") != 0 {
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
