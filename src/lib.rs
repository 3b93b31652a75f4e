//! kprof: a JVMTI profiler for the JVM.
//!
//! The library is both the agent (`libkprof.so`, entry points in [`agent`]) and the code behind the `kprof`
//! command-line tool ([`cli`]). Shape (see the README):
//!
//! ```text
//! options ──► engine ─────────────► cct ──► resolve ──► output (collapsed, html, json, pprof, jfr, text)
//!            ├ engine::asgct: timer signal → AsyncGetCallTrace → frames
//!            └ engine::rewriting (bytecode, exact): class rewriting → helper calls → reified stack or per-thread trees → frames
//! ```
//!
//! [`classfile`] and [`rewrite`] have no JVMTI dependency; [`output`] knows nothing of engines.

pub mod agent;
pub mod cct;
pub mod classfile;
pub mod cli;
pub mod engine;
pub mod frame;
pub mod jvmti;
pub mod options;
pub mod output;
pub mod profile;
pub mod rewrite;
