//! JVMTI and JNI: the bindgen-generated declarations and thin, commented wrappers around them.

#[allow(clippy::all)]
#[rustfmt::skip]
pub mod bindings;
