//! The `Code` attribute and instruction decoding.

use super::bytes::{get_u16, get_u32, Cursor};
use super::class::Attribute;
use super::opcodes::*;
use super::{Error, Result};

/// One entry of the exception table (offsets into the code array).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExceptionEntry {
    pub start: u16,
    pub end: u16,
    pub handler: u16,
    pub catch_type: u16,
}

/// A parsed `Code` attribute; everything borrows from the class bytes.
#[derive(Clone, Debug)]
pub struct Code<'a> {
    /// The whole attribute, as found in the method.
    pub attr: Attribute<'a>,
    pub max_stack: u16,
    pub max_locals: u16,
    pub code: &'a [u8],
    /// The raw exception table (8 bytes per entry).
    pub exception_table: &'a [u8],
    /// Attributes of the `Code` attribute (LineNumberTable, StackMapTable, ...).
    pub attributes: Vec<Attribute<'a>>,
    /// Class files before 45.3 use one-byte max_stack/max_locals and a two-byte code_length.
    pub narrow: bool,
}

impl<'a> Code<'a> {
    /// Parses `attr` (a `Code` attribute) of a class of version `major`.
    pub fn parse(attr: Attribute<'a>, major: u16) -> Result<Code<'a>> {
        Self::parse_versioned(attr, major, 3)
    }

    pub fn parse_versioned(attr: Attribute<'a>, major: u16, minor: u16) -> Result<Code<'a>> {
        let narrow = major == 45 && minor < 3;
        let base = attr.offset + 6;
        let mut c = Cursor::new(attr.info);
        let err = |what, at: usize| Error::new(what, base + at);
        let (max_stack, max_locals, code_len) = if narrow {
            (c.u8()? as u16, c.u8()? as u16, c.u16()? as usize)
        } else {
            (c.u16()?, c.u16()?, c.u32()? as usize)
        };
        if code_len == 0 || code_len > 65535 {
            return Err(err("code_length out of range", c.pos()));
        }
        let code = c.bytes(code_len).map_err(|_| err("truncated code", c.pos()))?;
        let n = c.u16()? as usize;
        let exception_table = c.bytes(n * 8).map_err(|_| err("truncated exception table", c.pos()))?;
        let count = c.u16()?;
        let mut attributes = Vec::with_capacity((count as usize).min(8));
        for _ in 0..count {
            let offset = base + c.pos();
            let name_index = c.u16()?;
            let len = c.u32()? as usize;
            let info = c.bytes(len)?;
            attributes.push(Attribute { name_index, offset, info });
        }
        if !c.is_empty() {
            return Err(err("bytes after the end of the Code attribute", c.pos()));
        }
        Ok(Code { attr, max_stack, max_locals, code, exception_table, attributes, narrow })
    }

    pub fn exception_entries(&self) -> impl Iterator<Item = ExceptionEntry> + '_ {
        self.exception_table.chunks_exact(8).map(|e| ExceptionEntry {
            start: u16::from_be_bytes([e[0], e[1]]),
            end: u16::from_be_bytes([e[2], e[3]]),
            handler: u16::from_be_bytes([e[4], e[5]]),
            catch_type: u16::from_be_bytes([e[6], e[7]]),
        })
    }

    pub fn instructions(&self) -> Instructions<'a> {
        Instructions { code: self.code, pos: 0 }
    }
}

/// Padding after a switch opcode at `pos` so that its operands start at a multiple of four.
#[inline]
pub fn switch_padding(pos: usize) -> usize {
    (4 - (pos + 1) % 4) % 4
}

/// The length of the instruction at `pos`, checked against the end of `code`.
pub fn insn_len(code: &[u8], pos: usize) -> Result<usize> {
    let op = *code.get(pos).ok_or(Error::new("truncated instruction", pos))?;
    let fixed = LENGTH[op as usize] as usize;
    let len = if fixed != 0 {
        fixed
    } else {
        match op {
            TABLESWITCH => {
                let base = pos + 1 + switch_padding(pos);
                let low = get_u32(code, base + 4)? as i32 as i64;
                let high = get_u32(code, base + 8)? as i32 as i64;
                if low > high {
                    return Err(Error::new("tableswitch low > high", pos));
                }
                (base - pos) as u64 as usize + 12 + 4 * ((high - low + 1) as usize)
            }
            LOOKUPSWITCH => {
                let base = pos + 1 + switch_padding(pos);
                let npairs = get_u32(code, base + 4)? as i32;
                if npairs < 0 {
                    return Err(Error::new("lookupswitch npairs < 0", pos));
                }
                (base - pos) + 8 + 8 * npairs as usize
            }
            WIDE => match code.get(pos + 1) {
                Some(&(ILOAD..=ALOAD | ISTORE..=ASTORE | RET)) => 4,
                Some(&IINC) => 6,
                _ => return Err(Error::new("bad wide instruction", pos)),
            },
            _ => return Err(Error::new("invalid opcode", pos)),
        }
    };
    if len > code.len() - pos {
        return Err(Error::new("instruction runs past the end of the code", pos));
    }
    Ok(len)
}

/// One decoded instruction: its offset, opcode and length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub offset: u32,
    pub opcode: u8,
    pub len: u32,
}

/// Iterates over the instructions of a code array. Yields an error once and then stops on malformed code.
pub struct Instructions<'a> {
    code: &'a [u8],
    pos: usize,
}

impl<'a> Instructions<'a> {
    pub fn new(code: &'a [u8]) -> Instructions<'a> {
        Instructions { code, pos: 0 }
    }

    /// Decoding from `pos`, which the caller knows to be an instruction's start (a block's, say).
    pub fn at(code: &'a [u8], pos: usize) -> Instructions<'a> {
        Instructions { code, pos }
    }
}

impl Iterator for Instructions<'_> {
    type Item = Result<Insn>;

    #[inline]
    fn next(&mut self) -> Option<Result<Insn>> {
        if self.pos >= self.code.len() {
            return None;
        }
        match insn_len(self.code, self.pos) {
            Ok(len) => {
                let i = Insn { offset: self.pos as u32, opcode: self.code[self.pos], len: len as u32 };
                self.pos += len;
                Some(Ok(i))
            }
            Err(e) => {
                self.pos = self.code.len();
                Some(Err(e))
            }
        }
    }
}

/// The target of a 16- or 32-bit branch at `pos` (`None` for other instructions). May be out of range.
#[inline]
pub fn branch_target(code: &[u8], pos: usize) -> Result<Option<i64>> {
    let op = code[pos];
    if is_branch16(op) {
        Ok(Some(pos as i64 + get_u16(code, pos + 1)? as i16 as i64))
    } else if op == GOTO_W || op == JSR_W {
        Ok(Some(pos as i64 + get_u32(code, pos + 1)? as i32 as i64))
    } else {
        Ok(None)
    }
}

/// Calls `f` with every target (default first) of the switch at `pos`, as absolute offsets (may be out of range).
pub fn for_each_switch_target(code: &[u8], pos: usize, mut f: impl FnMut(i64) -> Result<()>) -> Result<()> {
    let base = pos + 1 + switch_padding(pos);
    let at = |i: usize| -> Result<i64> { Ok(pos as i64 + get_u32(code, i)? as i32 as i64) };
    f(at(base)?)?;
    if code[pos] == TABLESWITCH {
        let low = get_u32(code, base + 4)? as i32 as i64;
        let high = get_u32(code, base + 8)? as i32 as i64;
        for k in 0..(high - low + 1).max(0) as usize {
            f(at(base + 12 + 4 * k)?)?;
        }
    } else {
        let n = get_u32(code, base + 4)? as i32;
        for k in 0..n.max(0) as usize {
            f(at(base + 12 + 8 * k)?)?;
        }
    }
    Ok(())
}

/// The local-variable index used by a load/store/iinc/ret at `pos`, if it is one.
pub fn local_index(code: &[u8], pos: usize) -> Option<u16> {
    let op = code[pos];
    match op {
        ILOAD..=ALOAD | ISTORE..=ASTORE | RET | IINC => code.get(pos + 1).map(|&b| b as u16),
        26..=45 => Some(((op - 26) % 4) as u16),
        59..=78 => Some(((op - 59) % 4) as u16),
        WIDE => get_u16(code, pos + 2).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_switches_and_wide() {
        // 0: iload_0; 1: tableswitch pad 2 default low=0 high=1 two offsets; 24: wide iinc 300 1; 30: return
        let mut code = vec![ILOAD_0, TABLESWITCH, 0, 0];
        for v in [29i32, 0, 1, 29, 29] {
            code.extend_from_slice(&v.to_be_bytes());
        }
        code.extend_from_slice(&[WIDE, IINC, 1, 44, 0, 1, RETURN]);
        let insns: Vec<_> = Instructions::new(&code).map(|i| i.unwrap()).collect();
        assert_eq!(
            insns.iter().map(|i| (i.offset, i.len)).collect::<Vec<_>>(),
            vec![(0, 1), (1, 23), (24, 6), (30, 1)]
        );
        let mut targets = Vec::new();
        for_each_switch_target(&code, 1, |t| {
            targets.push(t);
            Ok(())
        })
        .unwrap();
        assert_eq!(targets, vec![30, 30, 30]);
        assert_eq!(local_index(&code, 24), Some(300));
    }

    #[test]
    fn rejects_bad_code() {
        assert!(insn_len(&[0xca], 0).is_err());
        assert!(insn_len(&[WIDE, NOP, 0, 0], 0).is_err());
        assert!(insn_len(&[SIPUSH, 1], 0).is_err());
        let mut sw = vec![TABLESWITCH, 0, 0, 0];
        for v in [0i32, 5, 1] {
            sw.extend_from_slice(&v.to_be_bytes());
        }
        assert!(insn_len(&sw, 0).is_err());
        let mut sw = vec![LOOKUPSWITCH, 0, 0, 0];
        for v in [0i32, i32::MAX] {
            sw.extend_from_slice(&v.to_be_bytes());
        }
        assert!(insn_len(&sw, 0).is_err());
    }
}
