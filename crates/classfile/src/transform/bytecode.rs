//! The bytecode mode's rewrite (Komorium: Binder et al., "Portable and accurate sampling profiling for
//! Java", 2006, sections 4–5): every basic block adds its instruction count to a local counter;
//! granularity checks, at the places of the paper's section 5.2 (blocks that call or head a loop, returns
//! and throws, and wherever a forward path would run past MaxPath bytecodes unchecked), commit it to the
//! thread's counter and record a sample when the period is over; a reified stack of method ids is kept by
//! a push in the prologue and a pop at returns. The Java side is `crates/runtime/java/src/kprof/runtime/Bc.java`,
//! whose comment shows the inserted sequences and says why they look the way they do.
//!
//! Leaf methods (no calls) are not pushed: they name themselves only when they sample (Komorium, section 5.1); a
//! leaf of one block gets a single helper call before its returns and no locals.

use std::sync::Arc;

use super::chords::Chords;
use super::flow::{bracket_calls, bracket_calls_where, CheckPlaces, Flow};
use super::methods::MethodTable;
use super::policy;
use super::{MethodInput, MethodTransform, RewriteStats};
use crate::blocks::DEFAULT_MAX_PATH;
use crate::code::Instructions;
use crate::edit::{CodeEditor, EditError, Refusal};
use crate::opcodes::*;
use crate::{ConstantPool, Snippet, VType};

/// The helpers when java.lang.Thread has kprof's fields (the agent started with the JVM), and otherwise.
pub const RUNTIME_CLASS: &str = "kprof/runtime/Bc";
pub const TABLE_RUNTIME_CLASS: &str = "kprof/runtime/Bt";
pub const STATE_CLASS: &str = "kprof/runtime/T";
/// A stack entry with this bit set names a call site ([`MethodTable::site`]); without it, a method id.
pub const SITE_BIT: u32 = 1 << 31;

/// Options of the bytecode rewrite.
#[derive(Clone, Copy, Debug)]
pub struct BytecodeConfig {
    /// Longest run of bytecodes between two granularity checks, and longest block (0: no limit).
    pub max_path: u32,
    /// Every call writes its site into the caller's stack entry (the CCT then keeps callsites apart).
    pub callsites: bool,
    /// Komorium, section 5.1: leaf methods are not pushed; they name themselves when they sample.
    pub leaf_optimization: bool,
    /// java.lang.Thread has kprof's fields for the thread's state (the agent started with the JVM); otherwise
    /// the state is looked up in a table by thread id and kept in a local.
    pub thread_fields: bool,
    /// Methods that call keep the reified stack (a push in the prologue, the depth restored at exits and
    /// handlers). Without it (`stack=walk`) every method counts as a leaf does and a sample walks the
    /// thread's own stack, keeping the frames [`MethodTable::mark_rewritten`] marks as pushing.
    pub reified_stack: bool,
    /// Increments on the chords of a spanning tree of the flow graph instead of one per block
    /// ([`super::chords`]); the counts read at checks and exits, and so the profiles, are the same.
    pub chords: bool,
    /// Where granularity checks go: Komorium's places (calls too), or loop headers and long paths only
    /// (`checks=loops`: fewer checks, and so fewer sample calls in compiled code; every commit still holds
    /// one invocation's bytecodes).
    pub check_places: CheckPlaces,
}

impl Default for BytecodeConfig {
    fn default() -> Self {
        BytecodeConfig {
            max_path: DEFAULT_MAX_PATH,
            callsites: false,
            leaf_optimization: true,
            thread_fields: true,
            reified_stack: true,
            chords: false,
            check_places: CheckPlaces::CallsAndLoops,
        }
    }
}

/// Constant-pool entries of one class. Without Thread fields every helper but `state`, `leaf1`, `mute` and
/// `unmute` takes the state as its first argument.
#[derive(Clone, Copy, Default)]
struct Refs {
    state_class: u16,
    state: u16,
    enter: u16,
    site: u16,
    check: u16,
    exit: u16,
    leaf_check: u16,
    leaf_exit: u16,
    leaf1: u16,
    handler: u16,
    mute: u16,
    unmute: u16,
    throwable: u16,
}

pub struct BytecodeTransform {
    pub config: BytecodeConfig,
    methods: Arc<MethodTable>,
    /// (name, descriptor) of this class's native wrappers (exact mode's, when the JVM started with it):
    /// left as they are, so bytecode-mode profiles look the same either way.
    wrappers: Vec<(Vec<u8>, Vec<u8>)>,
    refs: Option<Refs>,
    /// The class being rewritten extends a class outside java.lang.invoke (other than Object): calls of
    /// its own methods may run inherited code there ([`policy::invoke_mutes_call`]).
    extends_outside: bool,
    flow: Flow,
    chords: Chords,
    /// Per block: a granularity check at its start (scratch).
    split: Vec<bool>,
    snippet: Snippet,
    /// The method being edited: its id and whether the reified stack would hold it (marked in the method
    /// table once the rewriter has kept the edit).
    pending: Option<(u32, bool)>,
    /// The method being edited: counted on chords (`Some(true)`), by blocks though chords were asked for
    /// (`Some(false)`), its counter updates and its granularity checks.
    pending_count: (Option<bool>, u64, u64),
}

impl BytecodeTransform {
    pub fn new(config: BytecodeConfig, methods: Arc<MethodTable>) -> BytecodeTransform {
        BytecodeTransform {
            config,
            methods,
            wrappers: Vec::new(),
            refs: None,
            extends_outside: false,
            flow: Flow::default(),
            chords: Chords::default(),
            split: Vec::new(),
            snippet: Snippet::new(),
            pending: None,
            pending_count: (None, 0, 0),
        }
    }

    fn refs(&mut self, cp: &mut ConstantPool<'_>) -> Result<Refs, EditError> {
        if let Some(r) = self.refs {
            return Ok(r);
        }
        let full = |_| EditError::Refused(Refusal::ConstantPoolFull);
        let fields = self.config.thread_fields;
        let (class, t) = if fields { (RUNTIME_CLASS, "") } else { (TABLE_RUNTIME_CLASS, "Lkprof/runtime/T;") };
        let mut m = |name: &str, args: &str, ret: &str| cp.add_methodref(class, name, &format!("({t}{args}){ret}"));
        let r = Refs {
            state_class: 0,
            state: 0,
            enter: m("enter", "I", "I").map_err(full)?,
            site: m("site", "II", "V").map_err(full)?,
            check: m("check", "III", "I").map_err(full)?,
            exit: m("exit", "III", "V").map_err(full)?,
            leaf_check: m("leafCheck", "II", "I").map_err(full)?,
            leaf_exit: m("leafExit", "II", "V").map_err(full)?,
            handler: m("handler", "I", "V").map_err(full)?,
            leaf1: 0,
            mute: 0,
            unmute: 0,
            throwable: 0,
        };
        let plain = |cp: &mut ConstantPool<'_>, name: &str, desc: &str| cp.add_methodref(class, name, desc);
        let r = Refs {
            state_class: if fields { 0 } else { cp.add_class(STATE_CLASS).map_err(full)? },
            state: if fields { 0 } else { plain(cp, "t", "()Lkprof/runtime/T;").map_err(full)? },
            leaf1: if fields { r.leaf_exit } else { plain(cp, "leafExit1", "(II)V").map_err(full)? },
            mute: plain(cp, "mute", "()V").map_err(full)?,
            unmute: plain(cp, "unmute", "()V").map_err(full)?,
            throwable: cp.add_class("java/lang/Throwable").map_err(full)?,
            ..r
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
        bracket_calls(m.code.code, editor, cp, &mut self.snippet, (refs.mute, refs.unmute))
    }

    /// Brackets the calls the method makes out of java.lang.invoke ([`policy::invoke_mutes_call`]).
    fn edit_invoke(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        let refs = self.refs(cp)?;
        let class = m.class_name;
        let inherits = self.extends_outside;
        bracket_calls_where(m.code.code, editor, cp, &mut self.snippet, (refs.mute, refs.unmute), |owner| {
            owner.is_some_and(|(owner, name)| {
                policy::invoke_mutes_call(class, owner, name) || (inherits && owner == class)
            })
        })
    }

    fn begin_class(&mut self, class: &crate::ClassFile<'_>) {
        self.refs = None;
        self.pending = None;
        let cp = &class.constant_pool;
        let super_name = if class.super_class == 0 { Ok(&b""[..]) } else { cp.class_name(class.super_class) };
        self.extends_outside = super_name.is_ok_and(policy::invoke_super_outside);
    }

    fn method_rewritten(&mut self, stats: &mut RewriteStats) {
        if let Some((id, pushed)) = self.pending.take() {
            self.methods.mark_rewritten(id, pushed);
        }
        let (chords, updates, checks) = std::mem::take(&mut self.pending_count);
        match chords {
            Some(true) => stats.counted_on_chords += 1,
            Some(false) => stats.counted_by_blocks += 1,
            None => {}
        }
        stats.counter_updates += updates;
        stats.granularity_checks += checks;
    }

    fn edit_method(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        self.pending = None;
        self.pending_count = (None, 0, 0);
        if self.wrappers.iter().any(|(n, d)| n == m.name && d == m.descriptor) {
            return Ok(());
        }
        let max_path = self.config.max_path;
        self.flow.analyse(m.code, max_path, self.config.check_places)?;
        let refs = self.refs(cp)?;
        let id = self.methods.id(m.class_name, m.name, m.descriptor) as i32;
        let leaf = self.config.leaf_optimization && !self.flow.info.iter().any(|b| b.calls);
        self.pending = Some((id as u32, !leaf));
        // Without the reified stack every method keeps its count as a leaf does: no depth, no push.
        let walk = !self.config.reified_stack;
        let no_depth = leaf || walk;
        let s = &mut self.snippet;
        if leaf && self.flow.blocks.len() == 1 && self.flow.first_runs_once() {
            // A leaf of one block runs straight to a return or throw: one helper call before each exit.
            let n = self.flow.blocks[0].insns as i32;
            for insn in Instructions::new(m.code.code) {
                let insn = insn?;
                if is_return(insn.opcode) || insn.opcode == ATHROW {
                    s.clear();
                    s.push_int(cp, -n).push_int(cp, id).invokestatic(cp, refs.leaf1);
                    editor.insert_before(insn.offset, s)?;
                }
            }
            return Ok(());
        }
        // The JVM's entry into class loading counts nothing (see the policy): it runs muted, from a mute
        // first in its prologue to an unmute at each return and in a handler that rethrows what escapes.
        let muted = !leaf && policy::is_class_loading_entry(m.class_name, m.name, m.descriptor);
        if muted {
            s.clear();
            s.invokestatic(cp, refs.mute);
            editor.insert_prologue(s)?;
        }
        // Without Thread fields the state is a local, the first argument of every helper.
        let state = if self.config.thread_fields {
            None
        } else {
            Some(editor.add_local(VType::Object(refs.state_class)).map_err(EditError::Refused)?)
        };
        let count = editor.add_local(VType::Integer).map_err(EditError::Refused)?;
        // Leaf methods need no depth: they read it when they sample.
        let depth = if no_depth { 0 } else { editor.add_local(VType::Integer).map_err(EditError::Refused)? };
        let with_state = |s: &mut Snippet| {
            if let Some(l) = state {
                s.aload(l);
            }
        };
        // Where a block's check goes: at its start when it calls, heads a loop, or would take the path since
        // the last check past MaxPath; a returning block checks at its return. Not where every path from
        // the entry brings fewer than MaxPath bytecodes: such a check can never commit (the local starts at
        // zero and only commits reset it), so leaving it out changes nothing but the code's size.
        self.split.clear();
        for (b, info) in self.flow.blocks.iter().zip(&self.flow.info) {
            let over = max_path != 0 && info.entering.saturating_add(b.insns) > max_path;
            let at_call = info.calls && self.config.check_places.at_calls();
            let needed = at_call || info.loop_header || (info.check && (!info.terminates || over));
            let never_commits = max_path != 0 && info.from_entry.saturating_add(b.insns) < max_path;
            self.split.push(needed && !never_commits);
        }
        let chords = self.config.chords && !muted && self.chords.place(&self.flow, m.code.code, &self.split)?;
        if self.config.chords && !muted {
            self.pending_count.0 = Some(chords);
        }
        let c = &self.chords;
        // The prologue counts the first block when nothing leads back to it (it then runs exactly once).
        let fold_first = self.flow.first_runs_once();
        let first = if chords {
            c.entry
        } else if fold_first {
            self.flow.blocks[0].insns as i32
        } else {
            0
        };
        let updates = std::cell::Cell::new(0u64);
        let iinc = |s: &mut Snippet, add: i32| -> Result<(), EditError> {
            if add != 0 {
                updates.set(updates.get() + 1);
                let add = i16::try_from(-add).map_err(|_| EditError::Refused(Refusal::CodeTooLarge))?;
                s.iinc(count, add);
            }
            Ok(())
        };
        s.clear();
        if let Some(l) = state {
            s.invokestatic(cp, refs.state).astore(l);
        }
        if !no_depth {
            with_state(s);
            s.push_int(cp, id).invokestatic(cp, refs.enter).istore(depth);
        }
        s.push_int(cp, -first).istore(count);
        editor.insert_prologue(s)?;
        let mut insns = Instructions::new(m.code.code).peekable();
        for (i, b) in self.flow.blocks.iter().enumerate() {
            let info = self.flow.info[i];
            let add = if chords {
                c.start[i]
            } else if i == 0 && fold_first {
                0
            } else {
                b.insns as i32
            };
            let start_check = self.split[i];
            s.clear();
            if !leaf && info.handler {
                with_state(s);
                if walk {
                    // No depth to restore; the handler still closes what a mute bracket left open.
                    s.push_int(cp, -1).invokestatic(cp, refs.handler);
                } else {
                    s.iload(depth).invokestatic(cp, refs.handler);
                }
            }
            iinc(s, add)?;
            if start_check {
                with_state(s);
                if no_depth {
                    s.iload(count).push_int(cp, id).invokestatic(cp, refs.leaf_check).istore(count);
                } else {
                    s.iload(depth).iload(count).push_int(cp, id).invokestatic(cp, refs.check).istore(count);
                }
            }
            if !s.is_empty() {
                editor.insert_before(info.at, s)?;
            }
            let last = if chords { c.last[i].0 } else { u32::MAX };
            while let Some(Ok(insn)) = insns.next_if(|r| r.as_ref().is_ok_and(|x| x.offset < b.end)) {
                s.clear();
                if is_return(insn.opcode) || insn.opcode == ATHROW {
                    if chords {
                        iinc(s, c.exit[i])?;
                    }
                    with_state(s);
                    if no_depth {
                        s.iload(count).push_int(cp, id).invokestatic(cp, refs.leaf_exit);
                    } else {
                        s.iload(depth).iload(count).push_int(cp, id).invokestatic(cp, refs.exit);
                    }
                    if insn.opcode == ATHROW {
                        // The method itself may catch what it throws: what was committed must not count twice.
                        s.op(ICONST_0).istore(count);
                    } else if muted {
                        s.invokestatic(cp, refs.unmute);
                    }
                } else if is_invoke(insn.opcode) && self.config.callsites && !walk {
                    let site = self.methods.site(id as u32, insn.offset) | SITE_BIT;
                    with_state(s);
                    s.iload(depth).push_int(cp, site as i32).invokestatic(cp, refs.site);
                }
                if insn.offset == last {
                    // The block's one way out (a branch, switch or goto: after any site call, which it is not).
                    iinc(s, c.before_last[i])?;
                }
                if !s.is_empty() {
                    editor.insert_before(insn.offset, s)?;
                }
                if insn.offset == last && c.after_last[i] != 0 {
                    s.clear();
                    iinc(s, c.after_last[i])?;
                    editor.insert_after(insn.offset, s)?;
                }
            }
        }
        self.pending_count.1 = updates.get();
        self.pending_count.2 = self.split.iter().filter(|&&c| c).count() as u64;
        if muted {
            // A throw leaves through a handler that unmutes once (the method's own handlers catch first).
            s.clear();
            s.invokestatic(cp, refs.unmute);
            editor.set_catch_all(s, refs.throwable)?;
        }
        Ok(())
    }
}
