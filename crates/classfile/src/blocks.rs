//! Basic blocks of a method's code.
//!
//! A block starts at offset 0, at every branch or switch target, at every exception handler, and after every
//! instruction that ends a block. Which instructions end a block is the [`BlockRule`]. Blocks longer than
//! `max_path` instructions are split so that no path through a block is longer than that.

use super::code::{branch_target, for_each_switch_target, Code, Instructions};
use super::opcodes::*;
use super::{Error, Result};

/// Which instructions end a basic block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRule {
    /// Komorium: jumps, branches, switches, returns and throws (`athrow`, `ret`, `jsr` included); calls do not.
    Komorium,
    /// JP2: also every instruction that may throw (array access, division, field access, calls, allocation,
    /// casts, monitors), so a block counted at its start was executed to its end.
    Jp2,
}

/// The default MaxPath (Komorium): the longest block, in instructions.
pub const DEFAULT_MAX_PATH: u32 = 50;

/// A basic block: `[start, end)` offsets in the original code and its instruction count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub start: u32,
    pub end: u32,
    pub insns: u32,
}

const BOUNDARY: u8 = 1;
const LEADER: u8 = 2;

fn ends_block(op: u8, rule: BlockRule) -> bool {
    is_branch16(op)
        || matches!(op, GOTO_W | JSR_W | TABLESWITCH | LOOKUPSWITCH | ATHROW | RET)
        || is_return(op)
        || (rule == BlockRule::Jp2 && may_throw(op))
}

/// Finds the basic blocks of `code` into `out` (cleared first), in offset order. `marks` is scratch space
/// reused across calls. `max_path` of 0 means no splitting.
pub fn basic_blocks_into(
    code: &Code<'_>,
    rule: BlockRule,
    max_path: u32,
    marks: &mut Vec<u8>,
    out: &mut Vec<Block>,
) -> Result<()> {
    out.clear();
    let bytes = code.code;
    let n = bytes.len();
    marks.clear();
    marks.resize(n + 1, 0);
    marks[0] = LEADER;
    let mark_target = |marks: &mut Vec<u8>, t: i64, at: usize| -> Result<()> {
        if t < 0 || t as usize >= n {
            return Err(Error::new("branch target out of range", at));
        }
        marks[t as usize] |= LEADER;
        Ok(())
    };
    for insn in Instructions::new(bytes) {
        let insn = insn?;
        let pos = insn.offset as usize;
        marks[pos] |= BOUNDARY;
        let op = insn.opcode;
        if let Some(t) = branch_target(bytes, pos)? {
            mark_target(marks, t, pos)?;
        } else if op == TABLESWITCH || op == LOOKUPSWITCH {
            for_each_switch_target(bytes, pos, |t| mark_target(marks, t, pos))?;
        }
        let wide_ret = op == WIDE && bytes[pos + 1] == RET;
        if ends_block(op, rule) || wide_ret {
            marks[pos + insn.len as usize] |= LEADER;
        }
    }
    for e in code.exception_entries() {
        let h = e.handler as usize;
        if h >= n {
            return Err(Error::new("exception handler out of range", h));
        }
        marks[h] |= LEADER;
    }
    // The mark at `n` (after the last instruction) is not a block start.
    marks[n] = 0;
    let mut start = 0u32;
    let mut count = 0u32;
    for (pos, &m) in marks.iter().enumerate().take(n) {
        if m & LEADER != 0 && m & BOUNDARY == 0 {
            return Err(Error::new("branch target inside an instruction", pos));
        }
        if m & BOUNDARY == 0 {
            continue;
        }
        if pos > 0 && (m & LEADER != 0 || (max_path > 0 && count >= max_path)) {
            out.push(Block { start, end: pos as u32, insns: count });
            start = pos as u32;
            count = 0;
        }
        count += 1;
    }
    out.push(Block { start, end: n as u32, insns: count });
    Ok(())
}

/// Convenience form of [`basic_blocks_into`].
pub fn basic_blocks(code: &Code<'_>, rule: BlockRule, max_path: u32) -> Result<Vec<Block>> {
    let mut out = Vec::new();
    basic_blocks_into(code, rule, max_path, &mut Vec::new(), &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::Attribute;

    fn code(bytes: &'static [u8], exceptions: &'static [u8]) -> Code<'static> {
        Code {
            attr: Attribute { name_index: 0, offset: 0, info: &[] },
            max_stack: 2,
            max_locals: 1,
            code: bytes,
            exception_table: exceptions,
            attributes: Vec::new(),
            narrow: false,
        }
    }

    #[test]
    fn komorium_jp2_and_max_path() {
        // 0 iload_0; 1 ifeq +9 (10); 4 iconst_1; 5 invokestatic #1; 8 iconst_2; 9 ireturn; 10 iconst_0; 11 ireturn
        let c = code(
            &[ILOAD_0, IFEQ, 0, 9, ICONST_0 + 1, INVOKESTATIC, 0, 1, ICONST_0 + 2, IRETURN, ICONST_0, IRETURN],
            &[],
        );
        let starts = |v: Vec<Block>| v.iter().map(|b| (b.start, b.insns)).collect::<Vec<_>>();
        assert_eq!(starts(basic_blocks(&c, BlockRule::Komorium, 50).unwrap()), vec![(0, 2), (4, 4), (10, 2)]);
        assert_eq!(starts(basic_blocks(&c, BlockRule::Jp2, 50).unwrap()), vec![(0, 2), (4, 2), (8, 2), (10, 2)]);
        assert_eq!(starts(basic_blocks(&c, BlockRule::Komorium, 3).unwrap()), vec![(0, 2), (4, 3), (9, 1), (10, 2)]);
        // An exception handler at 8 starts a block.
        let c2 = code(
            &[ILOAD_0, IFEQ, 0, 9, ICONST_0 + 1, INVOKESTATIC, 0, 1, ICONST_0 + 2, IRETURN, ICONST_0, IRETURN],
            &[0, 4, 0, 8, 0, 8, 0, 0],
        );
        assert_eq!(starts(basic_blocks(&c2, BlockRule::Komorium, 50).unwrap()), vec![(0, 2), (4, 2), (8, 2), (10, 2)]);
    }

    #[test]
    fn bad_targets_are_errors() {
        assert!(basic_blocks(&code(&[GOTO, 0, 2, RETURN], &[]), BlockRule::Komorium, 50).is_err());
        assert!(basic_blocks(&code(&[GOTO, 0x80, 0, RETURN], &[]), BlockRule::Komorium, 50).is_err());
        assert!(basic_blocks(&code(&[RETURN], &[0, 0, 0, 1, 0, 9, 0, 0]), BlockRule::Komorium, 50).is_err());
    }
}
