//! kprof's class-file engine: reader, code model, editor and writer, and the transforms the agent applies
//! with them ([`transform`]: bytecode counting, exact calling-context counting, the probe). No JVMTI
//! dependency and no JDK needed to build, test or fuzz it.
//!
//! Shape:
//! - [`ClassFile::parse`] borrows the class bytes and records where everything is; nothing is copied.
//! - [`ConstantPool`] reads entries lazily and is append-only ([`ConstantPool::add_methodref`] and friends).
//! - [`code`] decodes instructions; [`blocks`] finds basic blocks; [`stackmap`] decodes frames to full frames.
//! - [`CodeEditor`] inserts stack-neutral [`Snippet`]s before instructions and as a prologue, adds locals, and
//!   writes a relocated `Code` attribute (or refuses with a [`Refusal`], leaving the method as it was).
//! - [`write_class`] copies the original bytes and splices in the appended constants and edited `Code`
//!   attributes, so whatever is not edited is written back byte for byte.
//!
//! Malformed input yields an [`Error`]; nothing here panics on untrusted bytes.

pub mod annotations;
pub mod blocks;
pub mod bytes;
pub mod class;
pub mod code;
pub mod constant_pool;
pub mod edit;
pub mod opcodes;
pub mod snippet;
pub mod stackmap;
pub mod transform;
pub mod writer;

pub use blocks::{basic_blocks, Block, BlockRule};
pub use class::{Attribute, ClassFile, Member};
pub use code::{Code, ExceptionEntry, Instructions};
pub use constant_pool::{Constant, ConstantPool};
pub use edit::{CodeEditor, EditLimits, MethodContext, Refusal};
pub use snippet::Snippet;
pub use stackmap::VType;
pub use writer::{add_fields, roundtrip_rebuild, write_class, MethodEdit, NewField};

use std::fmt;

/// The oldest and newest class-file major versions the engine reads (Java 1.1 to Java 25).
pub const MIN_MAJOR: u16 = 45;
pub const MAX_MAJOR: u16 = 69;

/// A malformed or unsupported class file: what was wrong and the byte offset where it was found (within the
/// class file, or within the `Code` array for code errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    pub what: &'static str,
    pub at: usize,
}

impl Error {
    pub fn new(what: &'static str, at: usize) -> Error {
        Error { what, at }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
