//! Mode rewrites built on the class-file engine (probe, bytecode, exact). No JVMTI dependency.
