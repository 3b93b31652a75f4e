//! The profiling engines: each turns what the program does into counts in the calling context tree.
//!
//! Every engine implements [`Engine`], the agent's only view of it: the agent keeps the list of a
//! session's engines and calls them at the session's start and end, as threads start and end, before a
//! write, and for the summary line; it never asks which engine it holds. What an engine needs of the JVM
//! beyond that (a timer signal, the class-file load hook, allocation or monitor events) it sets up itself,
//! in a JVMTI environment of its own, so the agent's callbacks stay the same whatever engines run.
//!
//! Adding an engine: its folder here, a variant of [`EngineKind`] (which names it in `mode=`), and its line
//! in [`create`].

pub mod alloc;
pub mod asgct;
pub mod bytecode;
pub mod exact;
pub mod lock;
pub mod rewriting;
pub mod stack;
pub mod wall;

use crate::cct::{Cct, NodeId, Snapshot};
use crate::jvmti::bindings::jthread;
use crate::jvmti::{JavaVm, Jni};
use kprof_classfile::transform::methods::MethodTable;
use kprof_profile::{Meta, Profile};
use kprof_protocol::options::{EngineKind, Options};

/// Names of the threads kprof starts itself (engines name theirs so); they are never profiled.
pub const OWN_THREAD_PREFIX: &str = "kprof-";

/// What an engine gets from the agent.
pub trait Host: Sync {
    /// The tree every engine counts into.
    fn cct(&self) -> &'static Cct;
    fn vm(&self) -> JavaVm;
    /// The node a thread's contexts hang from: the root, or with `threads=on` a `[thread NAME]` node.
    fn thread_root(&self, name: &str) -> NodeId;
    /// Reports one line on stderr (`kprof: LINE`).
    fn say(&self, line: &str);
    /// Reports `line` if no line was reported this way before (a problem that would repeat per thread).
    fn note_once(&self, line: &str);
}

/// When an engine is created: with the JVM (`Agent_OnLoad`, where capabilities that only the start-up
/// phase grants can be had), or later (attach, `kprof start`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    OnLoad,
    Live,
}

/// A profiling engine. One object per kind and agent, created on first use and kept for the process's
/// life (signal handlers and rewritten code may reach it late); sessions start and stop it.
pub trait Engine: Sync {
    fn kind(&self) -> EngineKind;

    /// Whether a session of `options` can run this engine here: called for every engine of a session
    /// before any of them starts, so that a refusal leaves nothing started. Err: one line saying why.
    fn check(&self, options: &Options) -> Result<(), String>;

    /// Starts counting, on a thread attached to the JVM. Returns the engine's part of the start reply
    /// (`timer=perf interval=1ms`).
    fn start(&self, jni: Jni, options: &Options) -> Result<String, String>;

    /// Stops counting. `jni` is absent when no thread is attached (nothing then runs Java code);
    /// `restore`: give the application back its original code where the engine changed it.
    fn stop(&self, jni: Option<Jni>, restore: bool);

    /// A Java thread starts (on the thread itself): `root` is where its contexts hang.
    fn thread_start(&self, _jni: Jni, _thread: jthread, _root: NodeId) {}

    /// A Java thread ends (on the thread itself).
    fn thread_end(&self, _jni: Jni, _thread: jthread) {}

    /// The profile is about to be written while the engine runs: bring what it holds elsewhere (per-thread
    /// trees, sample rings) into the tree.
    fn before_write(&self, _jni: Option<Jni>) {}

    /// Adds what the engine knows of the run to the profile's facts: its figures (`counters`, names of its
    /// own), and the sampling interval or timer where it has one.
    fn describe(&self, options: &Options, meta: &mut Meta);

    /// The engine's part of the summary line, from the profile's facts (`samples=... rate=...`).
    fn summary(&self, meta: &Meta) -> String;

    /// Names of the method ids the engine put in the tree, where they are its own (rewritten code's).
    fn method_names(&self) -> Option<&MethodTable> {
        None
    }

    /// Whether the engine adds to the profile beyond the tree's counters ([`Engine::annotate`]).
    fn annotates(&self) -> bool {
        false
    }

    /// Adds what the engine keeps beside the tree to the profile made from `snapshot` (whose nodes the
    /// profile's nodes are, in order).
    fn annotate(&self, _snapshot: &Snapshot, _profile: &mut Profile) {}
}

/// Creates the engine of `kind`, once per agent: later calls return the same engine.
pub fn create(
    kind: EngineKind,
    host: &'static dyn Host,
    options: &Options,
    phase: Phase,
) -> Result<&'static dyn Engine, String> {
    match kind {
        EngineKind::Asgct => asgct::create(host, options, phase),
        EngineKind::Alloc => alloc::create(host, options, phase),
        EngineKind::Bytecode => bytecode::create(host, options, phase),
        EngineKind::Exact => exact::create(host, options, phase),
        EngineKind::Lock => lock::create(host, options, phase),
        EngineKind::Wall => wall::create(host, options, phase),
    }
}

/// Settles the choices the options leave to what the JVM can do (`stack=auto` in bytecode mode), before
/// a session that starts in `phase` makes or checks its engines.
pub fn resolve_options(options: &mut Options, phase: Phase) {
    bytecode::resolve_auto_stack(options, phase);
}

/// `shown=value` of the profile counters named by `keys` (`(shown, counter)`), in order, for a summary line.
pub fn fields(meta: &Meta, keys: &[(&str, &str)]) -> String {
    keys.iter()
        .map(|(shown, key)| format!("{shown}={}", meta.counters.get(*key).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A duration in nanoseconds as the options spell it: `10ms`, `100us`, `1s`.
pub fn format_interval(ns: u64) -> String {
    if ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns % 1000 == 0 {
        format!("{}us", ns / 1000)
    } else {
        format!("{ns}ns")
    }
}
