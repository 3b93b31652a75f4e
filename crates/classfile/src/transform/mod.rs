//! Mode rewrites built on the class-file engine (probe now; bytecode and exact plug in as further
//! [`MethodTransform`]s). No JVMTI dependency.
//!
//! [`Rewriter::rewrite_class`] parses a class, applies the [`SkipPolicy`], lets the mode's transform edit each
//! remaining method through a [`CodeEditor`], and writes the class. Every method left alone is counted by
//! [`SkipReason`] in [`RewriteStats`].

pub mod bytecode;
pub mod chords;
pub mod exact;
pub mod flow;
pub mod input;
pub mod methods;
pub mod natives;
pub mod park;
pub mod policy;
pub mod probe;
pub mod seed;

use std::collections::BTreeMap;

use crate::edit::{CodeEditor, EditError, EditLimits, MethodContext, Refusal};
use crate::{write_class, ClassFile, Code, ConstantPool, Error, MethodEdit};
pub use policy::{PolicyReason, SkipPolicy};

/// A rewrite mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A helper call at every basic block and a prologue storing a new local (proves the engine).
    Probe,
    /// No edit: classes are written back as they are (the control set of a verification run).
    None,
    /// What mode=bytecode does (bytecode counting, granularity checks, the reified stack).
    Bytecode,
    /// What mode=exact does (a node per calling context, bytecodes per context).
    Exact,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "probe" => Some(Mode::Probe),
            "none" => Some(Mode::None),
            "bytecode" => Some(Mode::Bytecode),
            "exact" => Some(Mode::Exact),
            _ => None,
        }
    }

    pub fn transform(self) -> Box<dyn MethodTransform> {
        match self {
            Mode::Probe => Box::new(probe::ProbeTransform::default()),
            Mode::None => Box::new(NoEdit),
            Mode::Bytecode => Box::new(bytecode::BytecodeTransform::new(
                bytecode::BytecodeConfig::default(),
                std::sync::Arc::new(methods::MethodTable::new()),
            )),
            Mode::Exact => Box::new(exact::ExactTransform::new(
                exact::ExactConfig::default(),
                std::sync::Arc::new(methods::MethodTable::new()),
            )),
        }
    }
}

/// One method handed to a transform.
/// Constants are read (and appended) through the `cp` argument of [`MethodTransform::edit_method`].
pub struct MethodInput<'c, 'a> {
    pub class_name: &'a [u8],
    pub index: usize,
    pub name: &'a [u8],
    pub descriptor: &'a [u8],
    pub access_flags: u16,
    pub code: &'c Code<'a>,
}

/// What a mode does to each method. The editor has been started on the method's code; the transform inserts
/// snippets and adds locals, and the rewriter writes (or refuses) the result.
pub trait MethodTransform {
    /// Called once per class before its methods, for every class (also one whose methods are all skipped), so
    /// per-class state such as block or method ids stays in step.
    fn begin_class(&mut self, class: &ClassFile<'_>);
    fn edit_method(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError>;

    /// The rewriter kept the edit of the method [`MethodTransform::edit_method`] last edited (it may still
    /// refuse an edit after the transform, for example past the byte budget). Default: ignored.
    fn method_rewritten(&mut self, _stats: &mut RewriteStats) {}

    /// Names the methods of the next class that wrap a native method (see [`natives`]): a counting mode
    /// counts them as the native. Default: ignored.
    fn set_wrappers(&mut self, _wrappers: Vec<(Vec<u8>, Vec<u8>)>) {}

    /// A method the policy leaves alone because it is an intrinsic candidate. The JIT may run intrinsic
    /// code instead of its bytecode, so whatever it calls runs only sometimes; a counting mode brackets
    /// those calls so that they are never counted, whichever way the method runs. Default: no edit.
    fn edit_intrinsic(
        &mut self,
        _m: &MethodInput<'_, '_>,
        _editor: &mut CodeEditor,
        _cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        Ok(())
    }

    /// A method of java.lang.invoke, left alone: a counting mode may mute the calls it makes out of
    /// java.lang.invoke ([`policy::invoke_mutes_call`]). Default: no edit.
    fn edit_invoke(
        &mut self,
        _m: &MethodInput<'_, '_>,
        _editor: &mut CodeEditor,
        _cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        Ok(())
    }
}

/// The transform of [`Mode::None`].
pub struct NoEdit;

impl MethodTransform for NoEdit {
    fn begin_class(&mut self, _: &ClassFile<'_>) {}

    fn edit_method(
        &mut self,
        _: &MethodInput<'_, '_>,
        _: &mut CodeEditor,
        _: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        Ok(())
    }
}

/// Why a method with code was left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    Policy(PolicyReason),
    Refused(Refusal),
    /// The engine found the method's code malformed (the JVM would reject it too, or the engine has a gap).
    Malformed,
    /// The method's exception table is past [`MAX_EXCEPTION_ENTRIES`], or the class's past
    /// [`MAX_CLASS_EXCEPTION_ENTRIES`] with this method's: the rewrite's work grows with the table and the
    /// JVM's verification of the result with table × code, so such a method is not worth the load hook's time.
    ExceptionTableTooLarge,
}

impl SkipReason {
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::Policy(p) => p.name(),
            SkipReason::Refused(r) => r.name(),
            SkipReason::Malformed => "malformed-code",
            SkipReason::ExceptionTableTooLarge => "exception-table-too-large",
        }
    }
}

/// Most exception-table entries a rewritten method may have. The largest seen in 1.37 million methods (the
/// JDK 17 jmods and the jars under /usr/share/java) has 140; a method of 65,535 copies of one entry is
/// legal, and the JVM itself takes minutes to verify it.
pub const MAX_EXCEPTION_ENTRIES: usize = 4096;

/// Most exception-table entries of all the methods rewritten in one class (the largest seen: 1,538).
pub const MAX_CLASS_EXCEPTION_ENTRIES: usize = 65536;

/// Counters of a rewrite run.
#[derive(Clone, Debug, Default)]
pub struct RewriteStats {
    pub classes_read: u64,
    pub class_bytes: u64,
    pub classes_changed: u64,
    /// Classes that could not be parsed (written back unchanged).
    pub classes_malformed: u64,
    pub methods: u64,
    /// Abstract and native methods (no code: nothing to rewrite, not counted as left alone).
    pub methods_without_code: u64,
    pub methods_rewritten: u64,
    /// Intrinsic candidates (left alone, so also in `left_alone`) whose calls a mode bracketed.
    pub intrinsics_bracketed: u64,
    /// Methods of java.lang.invoke (left alone, so also in `left_alone`) whose calls a mode muted.
    pub invoke_muted: u64,
    /// Bytecode mode with `count=chords`: methods whose counter updates sit on chords, and methods that kept
    /// one update per block (their exception edges and branches leave no consistent spanning tree).
    pub counted_on_chords: u64,
    pub counted_by_blocks: u64,
    /// Counter updates the rewritten methods hold (prologues not included).
    pub counter_updates: u64,
    /// Granularity checks the rewritten methods hold (bytecode mode; returns and throws not included).
    pub granularity_checks: u64,
    pub left_alone: BTreeMap<SkipReason, u64>,
}

impl RewriteStats {
    pub fn methods_with_code(&self) -> u64 {
        self.methods - self.methods_without_code
    }

    pub fn left_alone_total(&self) -> u64 {
        self.left_alone.values().sum()
    }

    pub fn add(&mut self, o: &RewriteStats) {
        self.classes_read += o.classes_read;
        self.class_bytes += o.class_bytes;
        self.classes_changed += o.classes_changed;
        self.classes_malformed += o.classes_malformed;
        self.methods += o.methods;
        self.methods_without_code += o.methods_without_code;
        self.methods_rewritten += o.methods_rewritten;
        self.intrinsics_bracketed += o.intrinsics_bracketed;
        self.invoke_muted += o.invoke_muted;
        self.counted_on_chords += o.counted_on_chords;
        self.counted_by_blocks += o.counted_by_blocks;
        self.counter_updates += o.counter_updates;
        self.granularity_checks += o.granularity_checks;
        for (k, v) in &o.left_alone {
            *self.left_alone.entry(*k).or_default() += v;
        }
    }
}

/// Rewrites classes with one mode. Keeps its buffers across classes.
pub struct Rewriter {
    pub policy: SkipPolicy,
    pub limits: EditLimits,
    transform: Box<dyn MethodTransform>,
    editor: CodeEditor,
    buf: Vec<u8>,
    edits: Vec<MethodEdit>,
}

impl Rewriter {
    pub fn new(mode: Mode, policy: SkipPolicy, limits: EditLimits) -> Rewriter {
        Rewriter::with_transform(mode.transform(), policy, limits)
    }

    pub fn with_transform(transform: Box<dyn MethodTransform>, policy: SkipPolicy, limits: EditLimits) -> Rewriter {
        Rewriter { policy, limits, transform, editor: CodeEditor::new(), buf: Vec::new(), edits: Vec::new() }
    }

    /// Tells the transform which methods of the next class are native wrappers ([`natives::wrap_natives`]).
    pub fn set_wrappers(&mut self, wrappers: Vec<(Vec<u8>, Vec<u8>)>) {
        self.transform.set_wrappers(wrappers);
    }

    /// Rewrites one class into `out` (cleared first). Returns true if the class changed; when it did not, `out`
    /// holds a copy of `data`. A class that cannot be parsed is an error (and counted).
    pub fn rewrite_class(&mut self, data: &[u8], out: &mut Vec<u8>, stats: &mut RewriteStats) -> Result<bool, Error> {
        out.clear();
        stats.classes_read += 1;
        stats.class_bytes += data.len() as u64;
        let mut class = match ClassFile::parse(data) {
            Ok(c) => c,
            Err(e) => {
                stats.classes_malformed += 1;
                return Err(e);
            }
        };
        let class_name: &[u8] = match class.constant_pool.get(class.this_class) {
            Ok(crate::Constant::Class(n)) => class.constant_pool.original_utf8(n).unwrap_or(b""),
            _ => b"",
        };
        let class_reason = self.policy.class_reason(class_name);
        self.transform.begin_class(&class);
        self.buf.clear();
        self.edits.clear();
        let mut class_entries = 0;
        for i in 0..class.methods.len() {
            stats.methods += 1;
            let m = &class.methods[i];
            let access_flags = m.access_flags;
            let code = match class.method_code(i) {
                Ok(Some(code)) => code,
                Ok(None) => {
                    stats.methods_without_code += 1;
                    continue;
                }
                Err(_) => {
                    *stats.left_alone.entry(SkipReason::Malformed).or_default() += 1;
                    continue;
                }
            };
            let policy = class_reason.or_else(|| self.policy.method_reason(&class, class_name, m));
            if let Some(r) = policy {
                *stats.left_alone.entry(SkipReason::Policy(r)).or_default() += 1;
                if r != PolicyReason::IntrinsicCandidate && r != PolicyReason::JavaLangInvoke {
                    continue;
                }
            }
            // Bounded before any analysis: what follows costs time and memory in proportion to the table.
            let entries = code.exception_table.len() / 8;
            if policy.is_none() {
                if entries > MAX_EXCEPTION_ENTRIES || class_entries + entries > MAX_CLASS_EXCEPTION_ENTRIES {
                    *stats.left_alone.entry(SkipReason::ExceptionTableTooLarge).or_default() += 1;
                    continue;
                }
                class_entries += entries;
            }
            let (Ok(ctx), Ok(name), Ok(descriptor)) =
                (MethodContext::of(&class, i), class.member_name(m), class.member_descriptor(m))
            else {
                if policy.is_none() {
                    *stats.left_alone.entry(SkipReason::Malformed).or_default() += 1;
                }
                continue;
            };
            self.editor.begin(&code);
            self.editor.set_budget(self.limits.budget);
            let input = MethodInput { class_name, index: i, name, descriptor, access_flags, code: &code };
            let cp = &mut class.constant_pool;
            let r = match policy {
                // Left alone, but a mode may still bracket the calls an intrinsic candidate or java.lang.invoke
                // makes.
                Some(PolicyReason::IntrinsicCandidate) => self.transform.edit_intrinsic(&input, &mut self.editor, cp),
                Some(_) => self.transform.edit_invoke(&input, &mut self.editor, cp),
                None => self.transform.edit_method(&input, &mut self.editor, cp),
            };
            let start = self.buf.len();
            let r = r.and_then(|_| self.editor.finish(&code, &ctx, cp, &self.limits, false, &mut self.buf));
            match (r, policy) {
                (Ok(true), None) => {
                    stats.methods_rewritten += 1;
                    self.transform.method_rewritten(stats);
                    self.edits.push(MethodEdit { method: i, range: start..self.buf.len() });
                }
                (Ok(true), Some(r)) => {
                    if r == PolicyReason::IntrinsicCandidate {
                        stats.intrinsics_bracketed += 1;
                    } else {
                        stats.invoke_muted += 1;
                    }
                    self.edits.push(MethodEdit { method: i, range: start..self.buf.len() });
                }
                (Ok(false), _) | (Err(_), Some(_)) => {}
                (Err(EditError::Refused(r)), None) => *stats.left_alone.entry(SkipReason::Refused(r)).or_default() += 1,
                (Err(EditError::Malformed(_)), None) => {
                    *stats.left_alone.entry(SkipReason::Malformed).or_default() += 1
                }
            }
        }
        if self.edits.is_empty() && !class.constant_pool.has_appended() {
            out.extend_from_slice(data);
            return Ok(false);
        }
        write_class(&class, &self.edits, &self.buf, false, out)?;
        stats.classes_changed += 1;
        Ok(true)
    }
}
