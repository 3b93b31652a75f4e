//! kprof's profile model and its writers and readers.
//!
//! [`model`] is a resolved profile: the calling context tree with every frame named, what the writers take
//! and what the readers of `kprof report`/`kprof compare` produce. [`output`] holds the formats. Nothing here
//! knows of JVMTI or of the engines that made a profile.

pub mod metric;
pub mod model;
pub mod output;

pub use model::*;
