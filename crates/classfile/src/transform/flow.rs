//! Basic blocks of a method and what the counting rewrites (bytecode and exact modes) need to know about
//! each: whether it calls, allocates, returns or throws, heads a loop, is entered by an edge, and where
//! Komorium's granularity checks go (Komorium paper, section 5.2). Both modes count a block's instructions at its start,
//! so on the same code they count the same bytecodes.

use crate::blocks::{basic_blocks_into, Block, BlockRule};
use crate::code::{branch_target, for_each_switch_target, Instructions};
use crate::edit::{CodeEditor, EditError};
use crate::opcodes::*;
use crate::{Code, ConstantPool, Error, Snippet};

/// What the analysis found about one block.
#[derive(Clone, Copy, Default, Debug)]
pub struct BlockInfo {
    /// Holds an invoke instruction.
    pub calls: bool,
    /// Holds a `new` (which may run a class initializer).
    pub allocates: bool,
    /// Ends in a return or athrow.
    pub terminates: bool,
    /// Target of a backward edge (a loop header).
    pub loop_header: bool,
    /// Some edge (branch, fall-through, switch, exception) leads here.
    pub entered: bool,
    /// Bytecode mode places a granularity check here.
    pub check: bool,
    /// Bytecodes counted since the last check when the block starts (along the longest forward path).
    pub entering: u32,
    /// Where the block's counting code goes: its start, except in a handler that its own exception range
    /// covers (javac's `synchronized` and `finally` handlers: `astore; aload; monitorexit` under a range
    /// that targets the handler itself). There the code goes at the end of that range: C1 will not
    /// compile a method whose handler entry holds a covered instruction that can throw ("exception
    /// handler covers itself"), and before that point the handler may still hold a monitor.
    pub at: u32,
}

/// The blocks of one method and their facts; buffers are kept across methods.
#[derive(Default)]
pub struct Flow {
    pub blocks: Vec<Block>,
    pub info: Vec<BlockInfo>,
    marks: Vec<u8>,
}

impl Flow {
    /// Finds the blocks of `code` (Komorium's rule: calls do not end blocks; blocks longer than `max_path`
    /// are split) and analyses them. Checks are placed at Komorium's places, then where a forward path would
    /// run past `max_path` bytecodes unchecked (0: no limit).
    pub fn analyse(&mut self, code: &Code<'_>, max_path: u32) -> Result<(), Error> {
        basic_blocks_into(code, BlockRule::Komorium, max_path, &mut self.marks, &mut self.blocks)?;
        let bytes = code.code;
        let n = self.blocks.len();
        self.info.clear();
        self.info.resize(n, BlockInfo::default());
        let mut edges: Vec<(u32, u32)> = Vec::new();
        let mut insns = Instructions::new(bytes);
        for i in 0..n {
            let b = self.blocks[i];
            let mut last = None;
            for insn in insns.by_ref() {
                let insn = insn?;
                if is_invoke(insn.opcode) {
                    self.info[i].calls = true;
                }
                if insn.opcode == NEW {
                    self.info[i].allocates = true;
                }
                last = Some(insn);
                if insn.offset + insn.len >= b.end {
                    break;
                }
            }
            let Some(last) = last else { continue };
            let op = last.opcode;
            let blocks = &self.blocks;
            let mut add = |t: i64| -> Result<(), Error> {
                match block_of(blocks, t) {
                    Some(j) => {
                        edges.push((i as u32, j as u32));
                        Ok(())
                    }
                    None => Err(Error::new("branch target out of range", last.offset as usize)),
                }
            };
            let falls_through =
                !(is_return(op) || matches!(op, GOTO | GOTO_W | ATHROW | RET | TABLESWITCH | LOOKUPSWITCH));
            if let Some(t) = branch_target(bytes, last.offset as usize)? {
                add(t)?;
            }
            if matches!(op, TABLESWITCH | LOOKUPSWITCH) {
                for_each_switch_target(bytes, last.offset as usize, &mut add)?;
            }
            if falls_through && (b.end as usize) < bytes.len() {
                add(b.end as i64)?;
            }
            self.info[i].terminates = is_return(op) || op == ATHROW;
        }
        for (i, b) in self.blocks.iter().enumerate() {
            self.info[i].at = b.start;
        }
        for e in code.exception_entries() {
            let (start, end, handler) = (e.start as u32, e.end as u32, e.handler as u32);
            if start <= handler && handler < end {
                if let Some(h) = block_of(&self.blocks, handler as i64).filter(|&h| self.blocks[h].start == handler) {
                    let b = self.blocks[h];
                    let at = self.info[h].at.max(end);
                    if at < b.end && quiet_run(bytes, b.start, at)? {
                        self.info[h].at = at;
                    }
                }
            }
        }
        for e in code.exception_entries() {
            let Some(h) = block_of(&self.blocks, e.handler as i64) else { continue };
            for (i, b) in self.blocks.iter().enumerate() {
                if b.start < e.end as u32 && b.end > e.start as u32 {
                    edges.push((i as u32, h as u32));
                }
            }
        }
        edges.sort_unstable();
        edges.dedup();
        // Predecessor lists, and loop headers: targets of edges that do not go forward.
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(from, to) in &edges {
            self.info[to as usize].entered = true;
            if to <= from {
                self.info[to as usize].loop_header = true;
            } else {
                preds[to as usize].push(from);
            }
        }
        // `run[i]`: bytecodes executed since the last check when block i ends.
        let max_path = if max_path == 0 { u32::MAX } else { max_path };
        let mut run = vec![0u32; n];
        for i in 0..n {
            let info = &mut self.info[i];
            info.check = info.calls || info.terminates || info.loop_header;
            let entering = preds[i].iter().map(|&p| run[p as usize]).max().unwrap_or(0);
            info.entering = entering;
            let insns = self.blocks[i].insns;
            if !info.check && entering.saturating_add(insns) > max_path {
                info.check = true;
            }
            run[i] = if info.check { insns } else { entering + insns };
        }
        Ok(())
    }

    /// The first block runs exactly once per invocation (nothing leads back to it), so a prologue can
    /// count it.
    pub fn first_runs_once(&self) -> bool {
        !self.info.is_empty() && !self.info[0].entered
    }
}

/// `[from, to)` is a run of whole instructions that neither call, allocate, return nor throw.
fn quiet_run(bytes: &[u8], from: u32, to: u32) -> Result<bool, Error> {
    for insn in Instructions::new(bytes) {
        let insn = insn?;
        if insn.offset + insn.len <= from {
            continue;
        }
        if insn.offset >= to {
            return Ok(insn.offset == to);
        }
        if insn.offset < from || is_invoke(insn.opcode) || is_return(insn.opcode) || matches!(insn.opcode, NEW | ATHROW)
        {
            return Ok(false);
        }
    }
    Ok(false)
}

fn block_of(blocks: &[Block], offset: i64) -> Option<usize> {
    if offset < 0 {
        return None;
    }
    let o = offset as u32;
    let i = blocks.partition_point(|b| b.start <= o);
    (i > 0 && o < blocks[i - 1].end).then(|| i - 1)
}

/// Brackets every call in `code` (an intrinsic candidate's body, left uncounted) with `invokestatic mute`
/// before and `invokestatic unmute` after, so what it calls counts nothing in either counting mode.
pub fn bracket_calls(
    code: &[u8],
    editor: &mut CodeEditor,
    cp: &mut ConstantPool<'_>,
    s: &mut Snippet,
    helpers: (u16, u16),
) -> Result<(), EditError> {
    bracket_calls_where(code, editor, cp, s, helpers, |_| true)
}

/// [`bracket_calls`] for the calls `which` accepts: it is given the class of the called method (internal
/// name; `None` for invokedynamic).
pub fn bracket_calls_where(
    code: &[u8],
    editor: &mut CodeEditor,
    cp: &mut ConstantPool<'_>,
    s: &mut Snippet,
    (mute, unmute): (u16, u16),
    which: impl Fn(Option<&[u8]>) -> bool,
) -> Result<(), EditError> {
    let insns: Vec<_> = Instructions::new(code).collect::<Result<_, _>>()?;
    for insn in &insns {
        if !is_invoke(insn.opcode) {
            continue;
        }
        let owner = if insn.opcode == INVOKEDYNAMIC {
            None
        } else {
            let at = insn.offset as usize;
            let Some(&[hi, lo]) = code.get(at + 1..at + 3) else { continue };
            cp.member_ref(u16::from_be_bytes([hi, lo])).ok().map(|(class, _, _)| class)
        };
        if !which(owner) {
            continue;
        }
        s.clear();
        s.invokestatic(cp, mute);
        editor.insert_before(insn.offset, s)?;
        // After the call itself, not before the next instruction: a branch to that instruction must not
        // close a bracket it never opened (brackets nest, and an unpaired unmute would end an outer one).
        s.clear();
        s.invokestatic(cp, unmute);
        editor.insert_after(insn.offset, s)?;
    }
    Ok(())
}
