//! Agent entry points.
