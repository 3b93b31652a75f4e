//! The probe mode: a call to `kprof.runtime.Probe.block(Probe, int)` at the start of every basic block, and a
//! prologue that stores `Probe.enter()` in a new local. It exercises every part of the editor the bytecode and
//! exact modes need (a new reference local read by every block, `wide` above slot 255, constants added to the
//! pool) and is what `kprof rewrite --mode probe` shows and verifies.

use super::{MethodInput, MethodTransform};
use crate::blocks::{basic_blocks_into, Block, BlockRule, DEFAULT_MAX_PATH};
use crate::edit::{CodeEditor, EditError, Refusal};
use crate::{ConstantPool, Snippet, VType};

pub const PROBE_CLASS: &str = "kprof/runtime/Probe";

#[derive(Clone, Copy)]
struct Refs {
    class: u16,
    enter: u16,
    block: u16,
}

pub struct ProbeTransform {
    pub rule: BlockRule,
    pub max_path: u32,
    refs: Option<Refs>,
    next_id: i32,
    blocks: Vec<Block>,
    marks: Vec<u8>,
    snippet: Snippet,
}

impl Default for ProbeTransform {
    fn default() -> Self {
        ProbeTransform {
            rule: BlockRule::Komorium,
            max_path: DEFAULT_MAX_PATH,
            refs: None,
            next_id: 0,
            blocks: Vec::new(),
            marks: Vec::new(),
            snippet: Snippet::new(),
        }
    }
}

impl ProbeTransform {
    /// A probe transform with the given block rule and MaxPath.
    pub fn new(rule: BlockRule, max_path: u32) -> ProbeTransform {
        ProbeTransform { rule, max_path, ..Default::default() }
    }

    fn refs(&mut self, cp: &mut ConstantPool<'_>) -> Result<Refs, EditError> {
        if let Some(r) = self.refs {
            return Ok(r);
        }
        let full = |_| EditError::Refused(Refusal::ConstantPoolFull);
        let class = cp.add_class(PROBE_CLASS).map_err(full)?;
        let enter = cp.add_methodref(PROBE_CLASS, "enter", "()Lkprof/runtime/Probe;").map_err(full)?;
        let block = cp.add_methodref(PROBE_CLASS, "block", "(Lkprof/runtime/Probe;I)V").map_err(full)?;
        let r = Refs { class, enter, block };
        self.refs = Some(r);
        Ok(r)
    }
}

impl MethodTransform for ProbeTransform {
    fn begin_class(&mut self, _: &crate::ClassFile<'_>) {
        self.refs = None;
        self.next_id = 0;
    }

    fn edit_method(
        &mut self,
        m: &MethodInput<'_, '_>,
        editor: &mut CodeEditor,
        cp: &mut ConstantPool<'_>,
    ) -> Result<(), EditError> {
        basic_blocks_into(m.code, self.rule, self.max_path, &mut self.marks, &mut self.blocks)?;
        let refs = self.refs(cp)?;
        let local = editor.add_local(VType::Object(refs.class)).map_err(EditError::Refused)?;
        let s = &mut self.snippet;
        s.clear();
        s.invokestatic(cp, refs.enter).astore(local);
        editor.insert_prologue(s)?;
        for b in &self.blocks {
            s.clear();
            s.aload(local).push_int(cp, self.next_id).invokestatic(cp, refs.block);
            self.next_id = self.next_id.wrapping_add(1);
            editor.insert_before(b.start, s)?;
        }
        Ok(())
    }
}
