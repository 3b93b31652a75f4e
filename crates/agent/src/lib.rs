//! The kprof agent, `libkprof.so`: JVMTI entry points ([`agent`]), the profiling engines ([`engine`]) and the
//! calling context tree they all feed ([`cct`]).
//!
//! ```text
//! options ──► engines ───────────► cct ──► resolve ──► writers (kprof-profile)
//!            ├ engine::asgct: timer signal → AsyncGetCallTrace → frames
//!            └ engine::rewriting (bytecode, exact): class rewriting (kprof-classfile) → helper calls → frames
//! ```
//!
//! The option language and the control protocol come from kprof-protocol, the timers from kprof-timers, the
//! Java helper classes from kprof-runtime.

pub mod agent;
pub mod cct;
pub mod engine;
pub mod frame;
pub mod guard;
pub mod jvmti;
