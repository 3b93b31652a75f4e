//! The exact mode's rewrite (after JP2, the call-site aware calling-context profiler for the JVM, and
//! CCCP: Moret et al., "Complete Calling Context Profiling in Virtual Execution Environments", 2009):
//! every invocation finds or creates its node in the thread's calling context tree and counts itself there, and every basic block adds its
//! bytecodes to that node (`bb=on`: increments its own counter instead). The Java side is
//! `crates/runtime/java/src/kprof/runtime/Exact.java`, whose comment shows the inserted sequences.
//!
//! Blocks are bytecode mode's (Komorium's rule, split at MaxPath, counted at their start), so on the same
//! run both modes count the same bytecodes. The current node follows bytecode mode's depth protocol:
//! `enter` takes the node the caller left and leaves the callee's for its callees, a normal return
//! restores the caller's, an exception handler re-asserts its own. Leaf methods (no invoke, no `new`) do
//! not move it. Native methods are counted through the wrappers [`super::natives`] adds.

use std::sync::Arc;

use super::flow::{CheckPlaces, Flow};
use super::methods::{BlockSpan, MethodBlocks, MethodTable};
use super::{MethodInput, MethodTransform};
use crate::blocks::DEFAULT_MAX_PATH;
use crate::code::Instructions;
use crate::edit::{CodeEditor, EditError, Refusal};
use crate::opcodes::*;
use crate::{ConstantPool, Snippet, VType};

pub const RUNTIME_CLASS: &str = "kprof/runtime/Exact";
/// The helpers that find the thread's state, when java.lang.Thread has kprof's fields.
pub const FIELDS_RUNTIME_CLASS: &str = "kprof/runtime/Ef";
pub const STATE_CLASS: &str = "kprof/runtime/ExactState";
/// Most slots of a context's table of children (`Exact.CAP`): one per callsite, and slot 0 for calls of no
/// known callsite, shared by `site % CAP` beyond that.
const TABLE_CAP: usize = 32;

/// Options of the exact rewrite.
#[derive(Clone, Copy, Debug)]
pub struct ExactConfig {
    /// Longest block, in bytecodes (0: no limit); the same as bytecode mode's so both count alike.
    pub max_path: u32,
    /// Keep callsites apart in the CCT. The rewrite is the same either way: every call names its callsite,
    /// by which the callee finds its context; the merge leaves the callsite out when this is off.
    pub callsites: bool,
    /// A counter per basic block and context (`bb=on`).
    pub blocks: bool,
    /// java.lang.Thread has kprof's fields: the thread's state is found there rather than in a table.
    pub thread_fields: bool,
}

impl Default for ExactConfig {
    fn default() -> Self {
        ExactConfig { max_path: DEFAULT_MAX_PATH, callsites: true, blocks: false, thread_fields: true }
    }
}

/// Constant-pool entries of one class.
#[derive(Clone, Copy, Default)]
struct Refs {
    state_class: u16,
    state: u16,
    enter: u16,
    enter_leaf: u16,
    count: u16,
    count_exit: u16,
    exit: u16,
    handler: u16,
    spill: u16,
    site_field: u16,
    far_field: u16,
    at_far: u16,
    mute: u16,
    unmute: u16,
}

pub struct ExactTransform {
    pub config: ExactConfig,
    methods: Arc<MethodTable>,
    /// (name, descriptor) of this class's native wrappers (see [`super::natives`]).
    wrappers: Vec<(Vec<u8>, Vec<u8>)>,
    refs: Option<Refs>,
    flow: Flow,
    snippet: Snippet,
}

impl ExactTransform {
    pub fn new(config: ExactConfig, methods: Arc<MethodTable>) -> ExactTransform {
        ExactTransform {
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
        let s = "Lkprof/runtime/ExactState;";
        // A context is the address of its entry in native memory.
        let c = "J";
        let bb = self.config.blocks;
        let find = if self.config.thread_fields { FIELDS_RUNTIME_CLASS } else { RUNTIME_CLASS };
        let r = Refs {
            state_class: cp.add_class(STATE_CLASS).map_err(full)?,
            state: cp.add_methodref(find, "state", &format!("(){s}")).map_err(full)?,
            enter: cp
                .add_methodref(RUNTIME_CLASS, if bb { "enterBlocks" } else { "enter" }, &format!("({s}II){c}"))
                .map_err(full)?,
            enter_leaf: cp
                .add_methodref(find, if bb { "enterLeafBlocks" } else { "enterLeaf" }, &format!("(II){c}"))
                .map_err(full)?,
            count: cp
                .add_methodref(RUNTIME_CLASS, if bb { "block" } else { "count" }, &format!("({c}I)V"))
                .map_err(full)?,
            count_exit: cp
                .add_methodref(RUNTIME_CLASS, if bb { "blockExit" } else { "countExit" }, &format!("({s}{c}I)V"))
                .map_err(full)?,
            exit: cp.add_methodref(RUNTIME_CLASS, "exit", &format!("({s}{c})V")).map_err(full)?,
            handler: cp.add_methodref(RUNTIME_CLASS, "handler", &format!("({s}{c})V")).map_err(full)?,
            spill: cp.add_methodref(RUNTIME_CLASS, "spill", &format!("({c}I)I")).map_err(full)?,
            site_field: cp.add_fieldref(STATE_CLASS, "site", "I").map_err(full)?,
            far_field: cp.add_fieldref(STATE_CLASS, "far", "I").map_err(full)?,
            at_far: cp.add_methodref(RUNTIME_CLASS, "atFar", &format!("({s}I)V")).map_err(full)?,
            mute: cp.add_methodref(find, "mute", "()V").map_err(full)?,
            unmute: cp.add_methodref(find, "unmute", "()V").map_err(full)?,
        };
        self.refs = Some(r);
        Ok(r)
    }

    /// A native wrapper: a context for the native method, no known callsite for whatever the native calls
    /// back (a table of one slot), and no bytecodes of its own (the wrapper is kprof's code). It also makes
    /// its context the state's native node while the native runs (and hands the outer one back when the
    /// native returns or throws, in a catch-all handler), so that the agent can put the current context back
    /// when the native code clears an exception a callback threw (`Exact.caught`).
    fn edit_wrapper(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        let refs = self.refs(cp)?;
        let full = |_| EditError::Refused(Refusal::ConstantPoolFull);
        let (st, nd) = ("Lkprof/runtime/ExactState;", "J");
        let native_enter = cp.add_methodref(RUNTIME_CLASS, "nativeEnter", &format!("({st}{nd}){nd}")).map_err(full)?;
        let native_leave = cp.add_methodref(RUNTIME_CLASS, "nativeLeave", &format!("({st}{nd})V")).map_err(full)?;
        let throwable = cp.add_class("java/lang/Throwable").map_err(full)?;
        let id = self.methods.native_id(m.class_name, m.name, m.descriptor) as i32;
        let state = editor.add_local(VType::Object(refs.state_class)).map_err(EditError::Refused)?;
        let node = editor.add_local(VType::Long).map_err(EditError::Refused)?;
        let outer = editor.add_local(VType::Long).map_err(EditError::Refused)?;
        let s = &mut self.snippet;
        s.clear();
        s.invokestatic(cp, refs.state)
            .astore(state)
            .aload(state)
            .push_int(cp, id)
            .push_int(cp, table_arg(0, 0))
            .invokestatic(cp, refs.enter)
            .lstore(node)
            .aload(state)
            .lload(node)
            .invokestatic(cp, native_enter)
            .lstore(outer);
        editor.insert_prologue(s)?;
        for insn in Instructions::new(m.code.code) {
            let insn = insn?;
            if is_return(insn.opcode) {
                s.clear();
                s.aload(state).lload(outer).invokestatic(cp, native_leave);
                s.aload(state).lload(node).invokestatic(cp, refs.exit);
                editor.insert_before(insn.offset, s)?;
            }
        }
        s.clear();
        s.aload(state).lload(outer).invokestatic(cp, native_leave);
        editor.set_catch_all(s, throwable)?;
        Ok(())
    }
}

impl MethodTransform for ExactTransform {
    fn set_wrappers(&mut self, wrappers: Vec<(Vec<u8>, Vec<u8>)>) {
        self.wrappers = wrappers;
    }

    fn begin_class(&mut self, _: &crate::ClassFile<'_>) {
        self.refs = None;
    }

    /// Brackets every call of an intrinsic candidate with `Exact.mute()` / `Exact.unmute()`.
    fn edit_intrinsic(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        let refs = self.refs(cp)?;
        super::flow::bracket_calls(m.code.code, editor, cp, &mut self.snippet, (refs.mute, refs.unmute))
    }

    fn edit_method(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        if self.wrappers.iter().any(|(n, d)| n == m.name && d == m.descriptor) {
            return self.edit_wrapper(m, editor, cp);
        }
        self.flow.analyse(m.code, self.config.max_path, CheckPlaces::CallsAndLoops)?;
        let (mut monitors, mut switches) = (false, 0);
        for insn in Instructions::new(m.code.code).flatten() {
            monitors |= insn.opcode == MONITORENTER;
            switches += matches!(insn.opcode, TABLESWITCH | LOOKUPSWITCH) as usize;
        }
        let handler_allowed = m.name != b"<init>" && !monitors;
        self.edit_counted(m, editor, cp, false)?;
        if handler_allowed && editor.crosses_budget(switches) {
            // Handing the local count over at every call is what most often takes a method past the budget
            // (HotSpot's HugeMethodLimit); a catch-all handler takes far fewer bytes.
            editor.begin(m.code);
            self.edit_counted(m, editor, cp, true)?;
        }
        Ok(())
    }
}

impl ExactTransform {
    /// The rewrite of a method with code, after [`Flow::analyse`]. bb=off counts blocks in an int local B,
    /// not in the node (a store-to-load chain through the heap in every loop iteration otherwise); B goes to
    /// the node at returns, and at loop headers once it is large (so that it cannot overflow, and a profile
    /// written while the method runs lags little). What B holds when an exception leaves the method goes to
    /// the node before every call and throw, so that only an implicit exception leaving the method loses the
    /// blocks since its last call; or, with `catch_all`, in a catch-all handler that rethrows, which counts
    /// those too and takes fewer bytes, but costs more time once compiled (B stays live, so spilled, across
    /// every call; docs/BENCHMARKS.md): only for methods that would otherwise cross the byte budget, and
    /// never in constructors (`this` is uninitialized before the super call) or methods with monitorenter
    /// (a handler spanning different lock depths makes HotSpot's JIT refuse the method).
    fn edit_counted(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
        catch_all: bool,
    ) -> Result<(), EditError> {
        let refs = self.refs(cp)?;
        let bb = self.config.blocks;
        let fold_first = self.flow.first_runs_once();
        // The blocks go with the id in both flavours: bb=on's counters are per block, and bb=off's node does
        // not count the first block when it runs once per call (the merge adds calls times its bytecodes).
        let spans =
            self.flow.blocks.iter().map(|b| BlockSpan { start_bci: b.start, end_bci: b.end, insns: b.insns }).collect();
        // Every call and `new` (a class initializer may run there) names itself to the callee by its number.
        let sites: Vec<u32> = Instructions::new(m.code.code)
            .flatten()
            .filter(|insn| is_invoke(insn.opcode) || insn.opcode == NEW)
            .map(|insn| insn.offset)
            .collect();
        let table = sites.len();
        // Slots of the context's table: slot 0 (no known callsite) and one per site, up to TABLE_CAP.
        let slots = (table + 1).min(TABLE_CAP);
        let blocks = MethodBlocks { spans, first_counted_by_calls: fold_first, sites };
        let id = self.methods.id_with_blocks(m.class_name, m.name, m.descriptor, blocks.clone()) as i32;
        // HotSpot runs these between a call's callsite store and the callee's prologue: they read the
        // callsite like any callee (the stack shows them called from there), and give it back when they
        // return, for the callee. They need the state in a local, as methods that call do.
        let gives_site_back = runs_while_a_call_links(m.name, m.descriptor);
        // Calls and `new` (a class initializer may run there) need the current node set for callees.
        let leaf = !gives_site_back && !self.flow.info.iter().any(|b| b.calls || b.allocates);
        let state =
            if leaf { 0 } else { editor.add_local(VType::Object(refs.state_class)).map_err(EditError::Refused)? };
        let node = editor.add_local(VType::Long).map_err(EditError::Refused)?;
        // What the caller named for the call that is linking (its site, and the real one if past the table).
        let (saved_site, saved_far) = if gives_site_back {
            (
                editor.add_local(VType::Integer).map_err(EditError::Refused)?,
                editor.add_local(VType::Integer).map_err(EditError::Refused)?,
            )
        } else {
            (0, 0)
        };
        // The prologue's second argument: bb=off, the first block's bytecodes when it runs once per call (the
        // runtime adds them only to an overflow entry, whose calls come from many methods); bb=on, the number
        // of block counters; with the size of the method's table of children (methods that call).
        let count = match (bb, fold_first) {
            (true, _) => self.flow.blocks.len(),
            (false, true) => self.flow.blocks[0].insns as usize,
            (false, false) => 0,
        };
        let arg = if leaf { count as i32 } else { table_arg(count, table) };
        let s = &mut self.snippet;
        s.clear();
        if leaf {
            s.push_int(cp, id).push_int(cp, arg).invokestatic(cp, refs.enter_leaf).lstore(node);
        } else {
            s.invokestatic(cp, refs.state).astore(state);
            if gives_site_back {
                s.aload(state).getfield(cp, refs.site_field).istore(saved_site);
                s.aload(state).getfield(cp, refs.far_field).istore(saved_far);
            }
            s.aload(state).push_int(cp, id).push_int(cp, arg).invokestatic(cp, refs.enter).lstore(node);
        }
        editor.insert_prologue(s)?;
        let bytes = m.code.code;
        let local = !bb && self.flow.blocks.iter().enumerate().any(|(i, _)| !(i == 0 && fold_first));
        let pending = if local { editor.add_local(VType::Integer).map_err(EditError::Refused)? } else { 0 };
        let catch_all = catch_all && local;
        if local {
            s.clear();
            s.op(ICONST_0).istore(pending);
            editor.insert_prologue(s)?;
        }
        if catch_all {
            s.clear();
            if leaf {
                s.lload(node).iload(pending).invokestatic(cp, refs.count);
            } else {
                s.aload(state).lload(node).iload(pending).invokestatic(cp, refs.count_exit);
            }
            let throwable =
                cp.add_class("java/lang/Throwable").map_err(|_| EditError::Refused(Refusal::ConstantPoolFull))?;
            editor.set_catch_all(s, throwable)?;
        }
        let mut insns = Instructions::new(bytes).peekable();
        for (i, b) in self.flow.blocks.iter().enumerate() {
            let info = self.flow.info[i];
            if !leaf && info.handler {
                s.clear();
                s.aload(state).lload(node).invokestatic(cp, refs.handler);
                editor.insert_before(info.at, s)?;
            }
            // A returning block that calls nothing restores the caller's node at its start (nothing in
            // it can move the node again), saving a helper at the return.
            let exit_at_start = !leaf && info.terminates && !info.calls && !info.allocates;
            let counted_by_prologue = i == 0 && fold_first;
            // bb=off: the block's bytecodes; bb=on: the block's index.
            let n = if bb { i as i32 } else { b.insns as i32 };
            s.clear();
            if local {
                if !counted_by_prologue {
                    add_to_local(s, cp, pending, n);
                }
                if exit_at_start {
                    // Reset: the block may throw what this method catches, and B must not count twice.
                    s.aload(state).lload(node).iload(pending).invokestatic(cp, refs.count_exit);
                    s.op(ICONST_0).istore(pending);
                } else if info.loop_header {
                    s.lload(node).iload(pending).invokestatic(cp, refs.spill).istore(pending);
                }
            } else {
                if !counted_by_prologue && exit_at_start {
                    s.aload(state).lload(node).push_int(cp, n).invokestatic(cp, refs.count_exit);
                } else if !counted_by_prologue {
                    s.lload(node).push_int(cp, n).invokestatic(cp, refs.count);
                } else if exit_at_start {
                    s.aload(state).lload(node).invokestatic(cp, refs.exit);
                }
            }
            if !s.is_empty() {
                editor.insert_before(info.at, s)?;
            }
            while let Some(Ok(insn)) = insns.next_if(|r| r.as_ref().is_ok_and(|x| x.offset < b.end)) {
                s.clear();
                let call = is_invoke(insn.opcode);
                let flush = if is_return(insn.opcode) {
                    !exit_at_start
                } else {
                    // With the catch-all handler, B stays in the local: a handler of this method sees it there.
                    !catch_all && (call || (insn.opcode == ATHROW && !exit_at_start))
                };
                if local && flush {
                    // Hand B to the node. Returns of a method that calls restore the caller's node with it.
                    if is_return(insn.opcode) && !leaf {
                        s.aload(state).lload(node).iload(pending).invokestatic(cp, refs.count_exit);
                    } else {
                        s.lload(node).iload(pending).invokestatic(cp, refs.count).op(ICONST_0).istore(pending);
                    }
                } else if is_return(insn.opcode) && !leaf && !exit_at_start {
                    s.aload(state).lload(node).invokestatic(cp, refs.exit);
                }
                if gives_site_back && is_return(insn.opcode) {
                    s.aload(state).iload(saved_site).putfield(cp, refs.site_field);
                    s.aload(state).iload(saved_far).putfield(cp, refs.far_field);
                }
                if let Ok(i) = blocks.sites.binary_search(&insn.offset) {
                    // The callee's entry is the site's slot of this context's table; sites past the table's
                    // slots go to its others, by the site.
                    let site = i + 1;
                    if site < slots {
                        s.aload(state).push_int(cp, site as i32).putfield(cp, refs.site_field);
                    } else {
                        s.aload(state).push_int(cp, site as i32).invokestatic(cp, refs.at_far);
                    }
                }
                if !s.is_empty() {
                    editor.insert_before(insn.offset, s)?;
                }
            }
        }
        Ok(())
    }
}

/// Methods HotSpot itself calls while a call links, after the caller stored the call's site and before the
/// callee's prologue reads it: class initializers, and `loadClass(String)`, which the VM calls on the
/// initiating class loader to resolve a class (its JavaCalls::call_virtual in SystemDictionary).
fn runs_while_a_call_links(name: &[u8], descriptor: &[u8]) -> bool {
    name == b"<clinit>" || (name == b"loadClass" && descriptor == b"(Ljava/lang/String;)Ljava/lang/Class;")
}

/// The prologue's argument for a method that calls: `count` (its first block's bytecodes, or its number of
/// blocks) in the low 16 bits, the size of its table of children (slot 0 and one per callsite, up to
/// `TABLE_CAP`) above them.
fn table_arg(count: usize, sites: usize) -> i32 {
    ((count.min(0xffff)) | ((sites + 1).min(TABLE_CAP) << 16)) as i32
}

/// `B += n` for the int local `pending`.
fn add_to_local(s: &mut Snippet, cp: &mut ConstantPool<'_>, pending: u16, n: i32) {
    match i16::try_from(n) {
        Ok(n) => drop(s.iinc(pending, n)),
        Err(_) => drop(s.iload(pending).push_int(cp, n).op(IADD).istore(pending)),
    }
}
