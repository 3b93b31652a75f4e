//! The Java helper classes that code rewritten by kprof calls (bytecode and exact modes), as one jar.
//!
//! The agent appends the jar to the boot class path, so every class loader, the JDK's own included, sees the
//! helpers; `kprof rewrite --out` writes the classes beside rewritten ones so a JVM can verify them. The
//! sources are in `java/src/kprof/runtime` (the table of their short names and why: `README.md` in this
//! crate); `build.rs` compiles them.

/// The jar of the helper classes (`kprof/runtime/*.class`), as `jar --create` wrote it.
pub static RUNTIME_JAR: &[u8] = include_bytes!(env!("KPROF_RUNTIME_JAR"));
