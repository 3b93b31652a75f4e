//! The profiling engines: each turns program execution into samples or counts in the CCT.

pub mod asgct;
pub mod rewriting;
