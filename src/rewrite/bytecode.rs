//! The bytecode mode's rewrite (Komorium, seeds/000 §4–5): every basic block decrements the thread's
//! bytecode counter by its instruction count; granularity checks sit only where Komorium §5.2 puts them
//! (blocks that return or throw, blocks that call, loop headers) plus as few more as keep every path
//! between two checks within MaxPath bytecodes; a reified stack of method ids is kept without
//! instrumenting exits. The Java side is `java-runtime/src/kprof/runtime/Bc.java`, whose comment shows
//! the inserted sequences.
//!
//! The depth protocol (see `Bc.java`): `enter` takes the depth the caller left and leaves depth + 1
//! for callees, a normal return restores it, an exception handler re-asserts it. Leaf methods (no
//! calls) never move the depth, skip the stack write in the prologue and name themselves only when a
//! sample is due (Komorium §5.1).

use std::sync::Arc;

use super::flow::Flow;
use super::methods::MethodTable;
use super::{MethodInput, MethodTransform};
use crate::classfile::blocks::DEFAULT_MAX_PATH;
use crate::classfile::code::Instructions;
use crate::classfile::edit::{CodeEditor, EditError, Refusal};
use crate::classfile::opcodes::*;
use crate::classfile::{ConstantPool, Snippet, VType};

pub const RUNTIME_CLASS: &str = "kprof/runtime/Bc";
pub const STATE_CLASS: &str = "kprof/runtime/T";
/// `iadd` (the opcode table names only the opcodes the engine branches on).
const IADD_OPCODE: u8 = 96;

/// Options of the bytecode rewrite.
#[derive(Clone, Copy, Debug)]
pub struct BytecodeConfig {
    /// Longest run of bytecodes between two granularity checks, and longest block (0: no limit).
    pub max_path: u32,
    /// Record the callsite of every call (the CCT then keeps callsites apart).
    pub callsites: bool,
    /// Komorium §5.1: leaf methods write their id only when they sample.
    pub leaf_optimization: bool,
}

impl Default for BytecodeConfig {
    fn default() -> Self {
        BytecodeConfig { max_path: DEFAULT_MAX_PATH, callsites: true, leaf_optimization: true }
    }
}

/// Constant-pool entries of one class.
#[derive(Clone, Copy, Default)]
struct Refs {
    state_class: u16,
    enter: u16,
    enter_check: u16,
    enter_leaf: u16,
    enter_leaf_check: u16,
    count: u16,
    check: u16,
    check_leaf: u16,
    count_exit: u16,
    check_exit: u16,
    handler: u16,
    sp_field: u16,
    site_field: u16,
    mute: u16,
    unmute: u16,
}

pub struct BytecodeTransform {
    pub config: BytecodeConfig,
    methods: Arc<MethodTable>,
    /// (name, descriptor) of this class's native wrappers (exact mode's, when the JVM started with it):
    /// left as they are, so bytecode-mode profiles look the same either way.
    wrappers: Vec<(Vec<u8>, Vec<u8>)>,
    refs: Option<Refs>,
    flow: Flow,
    snippet: Snippet,
}

impl BytecodeTransform {
    pub fn new(config: BytecodeConfig, methods: Arc<MethodTable>) -> BytecodeTransform {
        BytecodeTransform {
            config,
            methods,
            wrappers: Vec::new(),
            refs: None,
            flow: Flow::default(),
            snippet: Snippet::new(),
        }
    }

    fn refs(&mut self, cp: &mut ConstantPool<'_>) -> Result<Refs, EditError> {
        if let Some(r) = self.refs {
            return Ok(r);
        }
        let full = |_| EditError::Refused(Refusal::ConstantPoolFull);
        let t = "Lkprof/runtime/T;";
        let r = Refs {
            state_class: cp.add_class(STATE_CLASS).map_err(full)?,
            enter: cp.add_methodref(RUNTIME_CLASS, "enter", &format!("(II){t}")).map_err(full)?,
            enter_check: cp.add_methodref(RUNTIME_CLASS, "enterCheck", &format!("(II){t}")).map_err(full)?,
            enter_leaf: cp.add_methodref(RUNTIME_CLASS, "enterLeaf", &format!("(I){t}")).map_err(full)?,
            enter_leaf_check: cp.add_methodref(RUNTIME_CLASS, "enterLeafCheck", &format!("(II){t}")).map_err(full)?,
            count: cp.add_methodref(RUNTIME_CLASS, "count", &format!("({t}I)V")).map_err(full)?,
            check: cp.add_methodref(RUNTIME_CLASS, "check", &format!("({t}II)V")).map_err(full)?,
            check_leaf: cp.add_methodref(RUNTIME_CLASS, "checkLeaf", &format!("({t}II)V")).map_err(full)?,
            count_exit: cp.add_methodref(RUNTIME_CLASS, "countExit", &format!("({t}II)V")).map_err(full)?,
            check_exit: cp.add_methodref(RUNTIME_CLASS, "checkExit", &format!("({t}II)V")).map_err(full)?,
            handler: cp.add_methodref(RUNTIME_CLASS, "handler", &format!("({t}I)V")).map_err(full)?,
            sp_field: cp.add_fieldref(STATE_CLASS, "sp", "I").map_err(full)?,
            site_field: cp.add_fieldref(STATE_CLASS, "site", "I").map_err(full)?,
            mute: cp.add_methodref(RUNTIME_CLASS, "mute", "()V").map_err(full)?,
            unmute: cp.add_methodref(RUNTIME_CLASS, "unmute", "()V").map_err(full)?,
        };
        self.refs = Some(r);
        Ok(r)
    }
}

impl MethodTransform for BytecodeTransform {
    fn set_wrappers(&mut self, wrappers: Vec<(Vec<u8>, Vec<u8>)>) {
        self.wrappers = wrappers;
    }

    fn edit_intrinsic(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        let refs = self.refs(cp)?;
        super::flow::bracket_calls(m.code.code, editor, cp, &mut self.snippet, (refs.mute, refs.unmute))
    }

    fn begin_class(&mut self, _: &crate::classfile::ClassFile<'_>) {
        self.refs = None;
    }

    fn edit_method(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        if self.wrappers.iter().any(|(n, d)| n == m.name && d == m.descriptor) {
            return Ok(());
        }
        self.flow.analyse(m.code, self.config.max_path)?;
        let refs = self.refs(cp)?;
        let id = self.methods.id(m.class_name, m.name, m.descriptor) as i32;
        let leaf = self.config.leaf_optimization && !self.flow.info.iter().any(|b| b.calls);
        let state = editor.add_local(VType::Object(refs.state_class)).map_err(EditError::Refused)?;
        // Leaf methods need no depth local: they read it when they sample.
        let depth = if leaf { 0 } else { editor.add_local(VType::Integer).map_err(EditError::Refused)? };
        // The prologue counts the first block when nothing leads back to it (it then runs exactly once).
        let fold_first = self.flow.first_runs_once();
        let first = if fold_first { self.flow.blocks[0].insns as i32 } else { 0 };
        let first_checks = fold_first && self.flow.info[0].check;
        let s = &mut self.snippet;
        s.clear();
        match (leaf, first_checks) {
            (true, true) => {
                s.push_int(cp, first).push_int(cp, id).invokestatic(cp, refs.enter_leaf_check).astore(state)
            }
            (true, false) => s.push_int(cp, first).invokestatic(cp, refs.enter_leaf).astore(state),
            (false, c) => s
                .push_int(cp, id)
                .push_int(cp, first)
                .invokestatic(cp, if c { refs.enter_check } else { refs.enter })
                .astore(state)
                .aload(state)
                .getfield(cp, refs.sp_field)
                .op(ICONST_M1)
                .op(IADD_OPCODE)
                .istore(depth),
        };
        editor.insert_prologue(s)?;
        let bytes = m.code.code;
        let handlers: Vec<u32> = m.code.exception_entries().map(|e| e.handler as u32).collect();
        let mut insns = Instructions::new(bytes).peekable();
        for (i, b) in self.flow.blocks.iter().enumerate() {
            let info = self.flow.info[i];
            if !leaf && handlers.contains(&b.start) {
                s.clear();
                s.aload(state).iload(depth).invokestatic(cp, refs.handler);
                editor.insert_before(info.at, s)?;
            }
            // A returning block that calls nothing restores the depth at its start (nothing in it can move
            // the depth again), saving a helper at the return.
            let exit_at_start = !leaf && info.terminates && !info.calls;
            let n = b.insns as i32;
            if !(i == 0 && fold_first) || exit_at_start {
                let n = if i == 0 && fold_first { 0 } else { n };
                s.clear();
                match (info.check && !(i == 0 && fold_first), leaf, exit_at_start) {
                    (true, true, _) => {
                        s.aload(state).push_int(cp, n).push_int(cp, id).invokestatic(cp, refs.check_leaf)
                    }
                    (true, false, false) => s.aload(state).iload(depth).push_int(cp, n).invokestatic(cp, refs.check),
                    (true, false, true) => {
                        s.aload(state).iload(depth).push_int(cp, n).invokestatic(cp, refs.check_exit)
                    }
                    (false, _, true) => s.aload(state).iload(depth).push_int(cp, n).invokestatic(cp, refs.count_exit),
                    (false, _, false) => s.aload(state).push_int(cp, n).invokestatic(cp, refs.count),
                };
                editor.insert_before(info.at, s)?;
            }
            while let Some(Ok(insn)) = insns.next_if(|r| r.as_ref().is_ok_and(|x| x.offset < b.end)) {
                if is_return(insn.opcode) && !leaf && !exit_at_start {
                    s.clear();
                    s.aload(state).iload(depth).putfield(cp, refs.sp_field);
                    editor.insert_before(insn.offset, s)?;
                } else if is_invoke(insn.opcode) && self.config.callsites {
                    s.clear();
                    s.aload(state).push_int(cp, insn.offset as i32).putfield(cp, refs.site_field);
                    editor.insert_before(insn.offset, s)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classfile::ClassFile;
    use crate::classfile::EditLimits;
    use crate::rewrite::{RewriteStats, Rewriter, SkipPolicy};

    /// A class file from the harness build, rewritten and parsed again.
    fn harness_class(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("KPROF_HARNESS_CLASSES")).join(format!("kprof/harness/{name}.class"));
        std::fs::read(path).unwrap()
    }

    #[test]
    fn rewrites_harness_classes_and_names_every_method() {
        let table = Arc::new(MethodTable::new());
        let transform = BytecodeTransform::new(BytecodeConfig::default(), Arc::clone(&table));
        let mut rw = Rewriter::with_transform(Box::new(transform), SkipPolicy::agent(), EditLimits::default());
        let mut stats = RewriteStats::default();
        for name in ["FixedWork", "Split3", "Deep", "ThreadSplit"] {
            let data = harness_class(name);
            let mut out = Vec::new();
            assert!(rw.rewrite_class(&data, &mut out, &mut stats).unwrap(), "{name} unchanged");
            let c = ClassFile::parse(&out).unwrap();
            assert_eq!(c.methods.len(), ClassFile::parse(&data).unwrap().methods.len());
        }
        assert_eq!(stats.left_alone_total(), 0, "{:?}", stats.left_alone);
        assert!(table.len() as u64 >= stats.methods_rewritten);
        assert!((0..table.len() as u32).any(|i| table.name(i).unwrap().name == "fib"));
    }
}
