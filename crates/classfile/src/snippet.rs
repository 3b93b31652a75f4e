//! Snippets: short, stack-neutral instruction sequences to insert into a method.
//!
//! A snippet has no branches, switches, returns or throws, so inserting it adds no branch target and no
//! stack map frame. The builder encodes each instruction in its shortest form (`iload_1`, `bipush`, `wide` for
//! locals above 255, `ldc_w` for constants above 255), tracks the operand stack depth in slots, and records
//! the first error; [`CodeEditor`](super::CodeEditor) refuses a snippet that failed or is not stack-neutral.
//!
//! ```
//! use kprof_classfile::{ConstantPool, Snippet};
//! # let bytes = [0u8, 1];
//! # let mut cp = ConstantPool::parse(&bytes, 0).unwrap();
//! let f = cp.add_methodref("kprof/runtime/Helper", "f", "(II)I").unwrap();
//! let mut s = Snippet::new();
//! s.iload(300).push_int(&mut cp, 7).invokestatic(&cp, f).istore(300);
//! assert!(s.check().is_ok());
//! assert_eq!(s.max_stack(), 2);
//! ```

use super::bytes::put_u16;
use super::constant_pool::{Constant, ConstantPool};
use super::opcodes::*;
use super::{Error, Result};

#[derive(Clone, Debug, Default)]
pub struct Snippet {
    code: Vec<u8>,
    depth: i32,
    peak: i32,
    error: Option<Error>,
}

/// Operand-stack slots taken by the parameters and by the return value of a method descriptor.
pub fn descriptor_slots(desc: &[u8]) -> Result<(u32, u32)> {
    let bad = || Error::new("bad method descriptor", 0);
    if desc.first() != Some(&b'(') {
        return Err(bad());
    }
    let mut i = 1;
    let mut args = 0;
    loop {
        match *desc.get(i).ok_or_else(bad)? {
            b')' => break,
            b'J' | b'D' => args += 2,
            b'B' | b'C' | b'I' | b'S' | b'Z' | b'F' => args += 1,
            b'L' | b'[' => {
                while desc.get(i) == Some(&b'[') {
                    i += 1;
                }
                if desc.get(i) == Some(&b'L') {
                    while desc.get(i).is_some_and(|&c| c != b';') {
                        i += 1;
                    }
                }
                if i >= desc.len() {
                    return Err(bad());
                }
                args += 1;
            }
            _ => return Err(bad()),
        }
        i += 1;
    }
    let ret = match desc.get(i + 1) {
        Some(b'V') => 0,
        Some(b'J' | b'D') => 2,
        Some(_) => 1,
        None => return Err(bad()),
    };
    Ok((args, ret))
}

fn field_slots(desc: &[u8]) -> u32 {
    if matches!(desc.first(), Some(b'J' | b'D')) {
        2
    } else {
        1
    }
}

/// The kind of value a load or store moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    Int,
    Long,
    Float,
    Double,
    Reference,
}

impl ValueKind {
    fn offset(self) -> u8 {
        match self {
            ValueKind::Int => 0,
            ValueKind::Long => 1,
            ValueKind::Float => 2,
            ValueKind::Double => 3,
            ValueKind::Reference => 4,
        }
    }

    fn slots(self) -> i32 {
        match self {
            ValueKind::Long | ValueKind::Double => 2,
            _ => 1,
        }
    }
}

impl Snippet {
    pub fn new() -> Snippet {
        Snippet::default()
    }

    /// Empties the snippet for reuse (keeps its buffer).
    pub fn clear(&mut self) {
        self.code.clear();
        self.depth = 0;
        self.peak = 0;
        self.error = None;
    }

    pub fn bytes(&self) -> &[u8] {
        &self.code
    }

    pub fn len(&self) -> usize {
        self.code.len()
    }

    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    /// The most operand-stack slots the snippet uses above what was there before it.
    pub fn max_stack(&self) -> u16 {
        self.peak.min(u16::MAX as i32) as u16
    }

    /// Ok when every instruction was accepted and the snippet leaves the stack as it found it.
    pub fn check(&self) -> Result<()> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.depth != 0 {
            return Err(Error::new("snippet is not stack-neutral", self.code.len()));
        }
        Ok(())
    }

    fn fail(&mut self, what: &'static str) -> &mut Self {
        if self.error.is_none() {
            self.error = Some(Error::new(what, self.code.len()));
        }
        self
    }

    fn effect(&mut self, pops: i32, pushes: i32) {
        self.depth -= pops;
        if self.depth < 0 {
            self.fail("snippet pops values it did not push");
        }
        self.depth += pushes;
        self.peak = self.peak.max(self.depth);
    }

    fn op_u16(&mut self, op: u8, index: u16) {
        self.code.push(op);
        put_u16(&mut self.code, index);
    }

    /// An instruction without operands whose stack effect is fixed: constants, `pop`/`dup` family, `swap`,
    /// arithmetic, conversions and comparisons. Other opcodes are refused.
    pub fn op(&mut self, opcode: u8) -> &mut Self {
        let (pops, pushes) = match opcode {
            NOP => (0, 0),
            ACONST_NULL | ICONST_M1..=8 | 11..=13 => (0, 1),
            9 | 10 | 14 | 15 => (0, 2),
            POP => (1, 0),
            POP2 => (2, 0),
            DUP => (1, 2),
            90 => (2, 3),
            91 => (3, 4),
            92 => (2, 4),
            93 => (3, 5),
            94 => (4, 6),
            SWAP => (2, 2),
            96 | 100 | 104 | 108 | 112 | 120 | 122 | 124 | 126 | 128 | 130 => (2, 1), // int binary ops
            98 | 102 | 106 | 110 | 114 => (2, 1),                                     // float binary ops
            97 | 101 | 105 | 109 | 113 | 127 | 129 | 131 => (4, 2),                   // long binary ops
            121 | 123 | 125 => (3, 2),                                                // long shifts
            99 | 103 | 107 | 111 | 115 => (4, 2),                                     // double binary ops
            116 | 118 => (1, 1),                                                      // ineg, fneg
            117 | 119 => (2, 2),                                                      // lneg, dneg
            133 | 140 => (1, 2),                                                      // i2l, f2l ...
            135 | 141 => (1, 2),                                                      // i2d, f2d
            134 | 139 | 145..=147 => (1, 1),                                          // i2f, f2i, i2b, i2c, i2s
            136 | 137 | 142 | 144 => (2, 1),                                          // l2i, l2f, d2i, d2f
            138 | 143 => (2, 2),                                                      // l2d, d2l
            148 | 151 | 152 => (4, 1),                                                // lcmp, dcmpl, dcmpg
            149 | 150 => (2, 1),                                                      // fcmpl, fcmpg
            _ => return self.fail("opcode not allowed in a snippet"),
        };
        self.code.push(opcode);
        self.effect(pops, pushes);
        self
    }

    /// Pushes an int constant in the shortest form; values beyond `sipush` use an Integer constant.
    pub fn push_int(&mut self, cp: &mut ConstantPool<'_>, v: i32) -> &mut Self {
        match v {
            -1..=5 => self.code.push((ICONST_0 as i32 + v) as u8),
            -128..=127 => self.code.extend_from_slice(&[BIPUSH, v as i8 as u8]),
            -32768..=32767 => {
                self.code.push(SIPUSH);
                put_u16(&mut self.code, v as i16 as u16);
            }
            _ => match cp.add_integer(v) {
                Ok(i) => {
                    self.ldc_index(i, false);
                    return self;
                }
                Err(_) => return self.fail(super::constant_pool::CONSTANT_POOL_FULL),
            },
        }
        self.effect(0, 1);
        self
    }

    fn ldc_index(&mut self, index: u16, wide_value: bool) {
        if wide_value {
            self.op_u16(LDC2_W, index);
            self.effect(0, 2);
        } else {
            if index <= 255 {
                self.code.extend_from_slice(&[LDC, index as u8]);
            } else {
                self.op_u16(LDC_W, index);
            }
            self.effect(0, 1);
        }
    }

    /// Loads constant `index` (`ldc`, `ldc_w` or `ldc2_w` as its type requires).
    pub fn ldc(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        match cp.get(index) {
            Ok(Constant::Long(_) | Constant::Double(_)) => self.ldc_index(index, true),
            Ok(Constant::Dynamic(..)) => match cp.ref_descriptor(index) {
                Ok(d) => self.ldc_index(index, field_slots(d) == 2),
                Err(_) => return self.fail("bad constant for ldc"),
            },
            Ok(
                Constant::Integer(_)
                | Constant::Float(_)
                | Constant::String(_)
                | Constant::Class(_)
                | Constant::MethodHandle(..)
                | Constant::MethodType(_),
            ) => self.ldc_index(index, false),
            _ => return self.fail("bad constant for ldc"),
        }
        self
    }

    fn local(&mut self, base_short: u8, base: u8, kind: ValueKind, index: u16) {
        let k = kind.offset();
        if index <= 3 {
            self.code.push(base_short + k * 4 + index as u8);
        } else if index <= 255 {
            self.code.extend_from_slice(&[base + k, index as u8]);
        } else {
            self.code.extend_from_slice(&[WIDE, base + k]);
            put_u16(&mut self.code, index);
        }
    }

    pub fn load(&mut self, kind: ValueKind, index: u16) -> &mut Self {
        self.local(ILOAD_0, ILOAD, kind, index);
        self.effect(0, kind.slots());
        self
    }

    pub fn store(&mut self, kind: ValueKind, index: u16) -> &mut Self {
        self.local(ISTORE_0, ISTORE, kind, index);
        self.effect(kind.slots(), 0);
        self
    }

    pub fn iload(&mut self, index: u16) -> &mut Self {
        self.load(ValueKind::Int, index)
    }

    pub fn istore(&mut self, index: u16) -> &mut Self {
        self.store(ValueKind::Int, index)
    }

    pub fn lload(&mut self, index: u16) -> &mut Self {
        self.load(ValueKind::Long, index)
    }

    pub fn lstore(&mut self, index: u16) -> &mut Self {
        self.store(ValueKind::Long, index)
    }

    pub fn aload(&mut self, index: u16) -> &mut Self {
        self.load(ValueKind::Reference, index)
    }

    pub fn astore(&mut self, index: u16) -> &mut Self {
        self.store(ValueKind::Reference, index)
    }

    pub fn iinc(&mut self, index: u16, delta: i16) -> &mut Self {
        if index <= 255 && (-128..=127).contains(&delta) {
            self.code.extend_from_slice(&[IINC, index as u8, delta as i8 as u8]);
        } else {
            self.code.extend_from_slice(&[WIDE, IINC]);
            put_u16(&mut self.code, index);
            put_u16(&mut self.code, delta as u16);
        }
        self
    }

    fn invoke(&mut self, cp: &ConstantPool<'_>, op: u8, index: u16) -> &mut Self {
        let Ok(desc) = cp.ref_descriptor(index) else { return self.fail("bad method reference") };
        let Ok((args, ret)) = descriptor_slots(desc) else { return self.fail("bad method descriptor") };
        let receiver = if op == INVOKESTATIC { 0 } else { 1 };
        self.op_u16(op, index);
        if op == INVOKEINTERFACE {
            self.code.extend_from_slice(&[(args + 1).min(255) as u8, 0]);
        }
        self.effect((args + receiver) as i32, ret as i32);
        self
    }

    /// `invokestatic` of Methodref (or InterfaceMethodref) `index`.
    pub fn invokestatic(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        self.invoke(cp, INVOKESTATIC, index)
    }

    pub fn invokevirtual(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        self.invoke(cp, INVOKEVIRTUAL, index)
    }

    pub fn invokeinterface(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        self.invoke(cp, INVOKEINTERFACE, index)
    }

    fn field(&mut self, cp: &ConstantPool<'_>, op: u8, index: u16) -> &mut Self {
        let Ok(desc) = cp.ref_descriptor(index) else { return self.fail("bad field reference") };
        let s = field_slots(desc) as i32;
        self.op_u16(op, index);
        match op {
            GETSTATIC => self.effect(0, s),
            PUTSTATIC => self.effect(s, 0),
            GETFIELD => self.effect(1, s),
            _ => self.effect(1 + s, 0),
        }
        self
    }

    pub fn getstatic(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        self.field(cp, GETSTATIC, index)
    }

    pub fn putstatic(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        self.field(cp, PUTSTATIC, index)
    }

    pub fn getfield(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        self.field(cp, GETFIELD, index)
    }

    pub fn putfield(&mut self, cp: &ConstantPool<'_>, index: u16) -> &mut Self {
        self.field(cp, PUTFIELD, index)
    }

    pub fn checkcast(&mut self, class_index: u16) -> &mut Self {
        self.op_u16(CHECKCAST, class_index);
        self.effect(1, 1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_shortest_forms() {
        let bytes = [0u8, 1];
        let mut cp = ConstantPool::parse(&bytes, 0).unwrap();
        let m = cp.add_methodref("H", "f", "(JI)J").unwrap();
        let mut s = Snippet::new();
        s.load(ValueKind::Long, 2).iload(4).invokestatic(&cp, m).store(ValueKind::Long, 2);
        s.check().unwrap();
        assert_eq!(s.max_stack(), 3);
        assert_eq!(s.bytes(), &[32, ILOAD, 4, INVOKESTATIC, 0, m as u8, 59 + 4 + 2][..]);
        s.clear();
        s.push_int(&mut cp, 100_000).op(POP).iload(256).op(POP).iinc(300, 1000);
        s.check().unwrap();
        assert_eq!(s.bytes()[..3], [LDC, m as u8 + 1, POP]);
        assert_eq!(s.bytes()[3..7], [WIDE, ILOAD, 1, 0]);
        s.clear();
        s.op(POP);
        assert!(s.check().is_err());
        s.clear();
        s.op(GOTO);
        assert!(s.check().is_err());
        s.clear();
        s.iload(1);
        assert!(s.check().is_err());
        assert_eq!(descriptor_slots(b"([[Ljava/lang/String;DI)V").unwrap(), (4, 0));
    }
}
