//! The class-file engine: reader, code model, editor and writer. No JVMTI dependency.
