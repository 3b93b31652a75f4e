//! Agent options.
