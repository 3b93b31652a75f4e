//! The constant pool: entries are read lazily from the borrowed class bytes; new entries are appended (never
//! inserted or renumbered), so every index in the original class stays valid and the original pool bytes are
//! written back unchanged.

use super::bytes::{put_u16, put_u32, Cursor};
use super::{Error, Result};
use std::collections::HashMap;

pub const UTF8: u8 = 1;
pub const INTEGER: u8 = 3;
pub const FLOAT: u8 = 4;
pub const LONG: u8 = 5;
pub const DOUBLE: u8 = 6;
pub const CLASS: u8 = 7;
pub const STRING: u8 = 8;
pub const FIELDREF: u8 = 9;
pub const METHODREF: u8 = 10;
pub const INTERFACE_METHODREF: u8 = 11;
pub const NAME_AND_TYPE: u8 = 12;
pub const METHOD_HANDLE: u8 = 15;
pub const METHOD_TYPE: u8 = 16;
pub const DYNAMIC: u8 = 17;
pub const INVOKE_DYNAMIC: u8 = 18;
pub const MODULE: u8 = 19;
pub const PACKAGE: u8 = 20;

/// One constant-pool entry. `Utf8` holds the raw modified-UTF-8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constant<'a> {
    Utf8(&'a [u8]),
    Integer(i32),
    Float(u32),
    Long(i64),
    Double(u64),
    Class(u16),
    String(u16),
    Fieldref(u16, u16),
    Methodref(u16, u16),
    InterfaceMethodref(u16, u16),
    NameAndType(u16, u16),
    MethodHandle(u8, u16),
    MethodType(u16),
    Dynamic(u16, u16),
    InvokeDynamic(u16, u16),
    Module(u16),
    Package(u16),
}

impl Constant<'_> {
    /// Appends the entry's class-file encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let pair = |out: &mut Vec<u8>, tag: u8, a: u16, b: u16| {
            out.push(tag);
            put_u16(out, a);
            put_u16(out, b);
        };
        match *self {
            Constant::Utf8(b) => {
                out.push(UTF8);
                put_u16(out, b.len() as u16);
                out.extend_from_slice(b);
            }
            Constant::Integer(v) => {
                out.push(INTEGER);
                put_u32(out, v as u32);
            }
            Constant::Float(v) => {
                out.push(FLOAT);
                put_u32(out, v);
            }
            Constant::Long(v) => {
                out.push(LONG);
                out.extend_from_slice(&v.to_be_bytes());
            }
            Constant::Double(v) => {
                out.push(DOUBLE);
                out.extend_from_slice(&v.to_be_bytes());
            }
            Constant::Class(i) => {
                out.push(CLASS);
                put_u16(out, i);
            }
            Constant::String(i) => {
                out.push(STRING);
                put_u16(out, i);
            }
            Constant::Fieldref(a, b) => pair(out, FIELDREF, a, b),
            Constant::Methodref(a, b) => pair(out, METHODREF, a, b),
            Constant::InterfaceMethodref(a, b) => pair(out, INTERFACE_METHODREF, a, b),
            Constant::NameAndType(a, b) => pair(out, NAME_AND_TYPE, a, b),
            Constant::MethodHandle(k, i) => {
                out.push(METHOD_HANDLE);
                out.push(k);
                put_u16(out, i);
            }
            Constant::MethodType(i) => {
                out.push(METHOD_TYPE);
                put_u16(out, i);
            }
            Constant::Dynamic(a, b) => pair(out, DYNAMIC, a, b),
            Constant::InvokeDynamic(a, b) => pair(out, INVOKE_DYNAMIC, a, b),
            Constant::Module(i) => {
                out.push(MODULE);
                put_u16(out, i);
            }
            Constant::Package(i) => {
                out.push(PACKAGE);
                put_u16(out, i);
            }
        }
    }
}

/// The error text of an append to a full pool (edits turn it into a refusal).
pub const CONSTANT_POOL_FULL: &str = "constant pool full";

const APPENDED: u32 = 0x8000_0000;
const UNUSABLE: u32 = u32::MAX;

/// The constant pool of one class. Index 0 and the slot after a long/double are unusable.
#[derive(Clone, Debug)]
pub struct ConstantPool<'a> {
    data: &'a [u8],
    /// Per index: offset of the tag byte in `data`, or `APPENDED | offset` in `appended`, or `UNUSABLE`.
    offsets: Vec<u32>,
    original_count: u16,
    /// Byte range of the original entries in the class file.
    start: usize,
    end: usize,
    appended: Vec<u8>,
    /// Index of each appended entry by its encoding, so that adding finds an equal entry in one lookup (a
    /// scan of the appended entries per addition made a method with tens of thousands of blocks quadratic).
    appended_index: HashMap<Vec<u8>, u16>,
}

impl<'a> ConstantPool<'a> {
    /// Parses the pool that starts at `pos` (the `constant_pool_count` field) in `data`.
    pub fn parse(data: &'a [u8], pos: usize) -> Result<ConstantPool<'a>> {
        let mut c = Cursor::at(data, pos);
        let count = c.u16()?;
        if count == 0 {
            return Err(Error::new("constant_pool_count is 0", pos));
        }
        let start = c.pos();
        let mut offsets = Vec::with_capacity(count as usize);
        offsets.push(UNUSABLE);
        while offsets.len() < count as usize {
            let at = c.pos();
            let tag = c.u8()?;
            let size = match tag {
                UTF8 => c.u16()? as usize,
                INTEGER | FLOAT | FIELDREF | METHODREF | INTERFACE_METHODREF | NAME_AND_TYPE | DYNAMIC
                | INVOKE_DYNAMIC => 4,
                LONG | DOUBLE => 8,
                CLASS | STRING | METHOD_TYPE | MODULE | PACKAGE => 2,
                METHOD_HANDLE => 3,
                _ => return Err(Error::new("unknown constant pool tag", at)),
            };
            c.skip(size)?;
            offsets.push(at as u32);
            if tag == LONG || tag == DOUBLE {
                if offsets.len() >= count as usize {
                    return Err(Error::new("long/double constant in the last pool slot", at));
                }
                offsets.push(UNUSABLE);
            }
        }
        Ok(ConstantPool {
            data,
            offsets,
            original_count: count,
            start,
            end: c.pos(),
            appended: Vec::new(),
            appended_index: HashMap::new(),
        })
    }

    /// The number of slots, including appended entries (the `constant_pool_count` to write).
    pub fn count(&self) -> u16 {
        self.offsets.len() as u16
    }

    pub fn original_count(&self) -> u16 {
        self.original_count
    }

    /// Byte range of the original entries (after `constant_pool_count`) in the class file.
    pub fn original_range(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }

    /// Encoded bytes of the appended entries.
    pub fn appended_bytes(&self) -> &[u8] {
        &self.appended
    }

    pub fn has_appended(&self) -> bool {
        !self.appended.is_empty()
    }

    fn entry_bytes(&self, index: u16) -> Result<(&[u8], usize)> {
        let off = *self.offsets.get(index as usize).ok_or(Error::new("constant pool index out of range", 0))?;
        if off == UNUSABLE {
            return Err(Error::new("unusable constant pool index", index as usize));
        }
        if off & APPENDED != 0 {
            Ok((&self.appended, (off & !APPENDED) as usize))
        } else {
            Ok((self.data, off as usize))
        }
    }

    /// The tag of entry `index`.
    pub fn tag(&self, index: u16) -> Result<u8> {
        let (d, off) = self.entry_bytes(index)?;
        Ok(d[off])
    }

    /// Entry `index`, decoded.
    pub fn get(&self, index: u16) -> Result<Constant<'_>> {
        let (d, off) = self.entry_bytes(index)?;
        let mut c = Cursor::at(d, off);
        let tag = c.u8()?;
        Ok(match tag {
            UTF8 => {
                let n = c.u16()? as usize;
                Constant::Utf8(c.bytes(n)?)
            }
            INTEGER => Constant::Integer(c.u32()? as i32),
            FLOAT => Constant::Float(c.u32()?),
            LONG => Constant::Long(((c.u32()? as u64) << 32 | c.u32()? as u64) as i64),
            DOUBLE => Constant::Double((c.u32()? as u64) << 32 | c.u32()? as u64),
            CLASS => Constant::Class(c.u16()?),
            STRING => Constant::String(c.u16()?),
            FIELDREF => Constant::Fieldref(c.u16()?, c.u16()?),
            METHODREF => Constant::Methodref(c.u16()?, c.u16()?),
            INTERFACE_METHODREF => Constant::InterfaceMethodref(c.u16()?, c.u16()?),
            NAME_AND_TYPE => Constant::NameAndType(c.u16()?, c.u16()?),
            METHOD_HANDLE => Constant::MethodHandle(c.u8()?, c.u16()?),
            METHOD_TYPE => Constant::MethodType(c.u16()?),
            DYNAMIC => Constant::Dynamic(c.u16()?, c.u16()?),
            INVOKE_DYNAMIC => Constant::InvokeDynamic(c.u16()?, c.u16()?),
            MODULE => Constant::Module(c.u16()?),
            PACKAGE => Constant::Package(c.u16()?),
            _ => return Err(Error::new("unknown constant pool tag", off)),
        })
    }

    /// The raw modified-UTF-8 bytes of Utf8 entry `index`.
    pub fn utf8(&self, index: u16) -> Result<&[u8]> {
        match self.get(index)? {
            Constant::Utf8(b) => Ok(b),
            _ => Err(Error::new("expected a Utf8 constant", index as usize)),
        }
    }

    /// Like [`utf8`](Self::utf8) for an entry of the original pool, borrowing from the class bytes rather than
    /// from the pool (so the pool can be appended to while the string is in use).
    pub fn original_utf8(&self, index: u16) -> Result<&'a [u8]> {
        let off = *self.offsets.get(index as usize).ok_or(Error::new("constant pool index out of range", 0))?;
        if off == UNUSABLE || off & APPENDED != 0 || self.data[off as usize] != UTF8 {
            return Err(Error::new("expected a Utf8 constant of the original pool", index as usize));
        }
        let mut c = Cursor::at(self.data, off as usize + 1);
        let n = c.u16()? as usize;
        c.bytes(n)
    }

    /// The name (internal form) of Class entry `index`.
    pub fn class_name(&self, index: u16) -> Result<&[u8]> {
        match self.get(index)? {
            Constant::Class(n) => self.utf8(n),
            _ => Err(Error::new("expected a Class constant", index as usize)),
        }
    }

    /// (class name, member name, descriptor) of a Fieldref/Methodref/InterfaceMethodref entry.
    pub fn member_ref(&self, index: u16) -> Result<(&[u8], &[u8], &[u8])> {
        let (class, nat) = match self.get(index)? {
            Constant::Fieldref(a, b) | Constant::Methodref(a, b) | Constant::InterfaceMethodref(a, b) => (a, b),
            _ => return Err(Error::new("expected a member reference constant", index as usize)),
        };
        let (name, desc) = self.name_and_type(nat)?;
        Ok((self.class_name(class)?, name, desc))
    }

    /// (name, descriptor) of a NameAndType entry.
    pub fn name_and_type(&self, index: u16) -> Result<(&[u8], &[u8])> {
        match self.get(index)? {
            Constant::NameAndType(n, d) => Ok((self.utf8(n)?, self.utf8(d)?)),
            _ => Err(Error::new("expected a NameAndType constant", index as usize)),
        }
    }

    /// The descriptor of the NameAndType behind a member reference, InvokeDynamic or Dynamic entry.
    pub fn ref_descriptor(&self, index: u16) -> Result<&[u8]> {
        let nat = match self.get(index)? {
            Constant::Fieldref(_, b)
            | Constant::Methodref(_, b)
            | Constant::InterfaceMethodref(_, b)
            | Constant::InvokeDynamic(_, b)
            | Constant::Dynamic(_, b) => b,
            _ => return Err(Error::new("expected a reference constant", index as usize)),
        };
        Ok(self.name_and_type(nat)?.1)
    }

    /// Appends `c` (or returns the index of an equal entry appended earlier). Fails when the pool is full.
    pub fn add(&mut self, c: Constant<'_>) -> Result<u16> {
        let mut key = Vec::with_capacity(8);
        c.encode(&mut key);
        let key = &key[..];
        // Dedupe among appended entries only: searching the original pool would cost a scan per lookup.
        if let Some(&i) = self.appended_index.get(key) {
            return Ok(i);
        }
        let slots = if matches!(c, Constant::Long(_) | Constant::Double(_)) { 2 } else { 1 };
        if self.offsets.len() + slots > u16::MAX as usize {
            return Err(Error::new(CONSTANT_POOL_FULL, self.offsets.len()));
        }
        let index = self.offsets.len() as u16;
        self.offsets.push(APPENDED | self.appended.len() as u32);
        if slots == 2 {
            self.offsets.push(UNUSABLE);
        }
        self.appended.extend_from_slice(key);
        self.appended_index.insert(key.to_vec(), index);
        Ok(index)
    }

    pub fn add_utf8(&mut self, s: &str) -> Result<u16> {
        if s.len() > u16::MAX as usize || s.bytes().any(|b| b == 0) {
            return Err(Error::new("string cannot be a Utf8 constant", 0));
        }
        // Modified UTF-8 equals UTF-8 for strings without NUL or supplementary characters.
        if s.chars().any(|ch| ch as u32 > 0xFFFF) {
            return Err(Error::new("supplementary characters are not supported in added constants", 0));
        }
        self.add(Constant::Utf8(s.as_bytes()))
    }

    pub fn add_utf8_bytes(&mut self, s: &[u8]) -> Result<u16> {
        if s.len() > u16::MAX as usize {
            return Err(Error::new("string cannot be a Utf8 constant", 0));
        }
        self.add(Constant::Utf8(s))
    }

    pub fn add_class(&mut self, internal_name: &str) -> Result<u16> {
        let n = self.add_utf8(internal_name)?;
        self.add(Constant::Class(n))
    }

    pub fn add_class_bytes(&mut self, internal_name: &[u8]) -> Result<u16> {
        let n = self.add_utf8_bytes(internal_name)?;
        self.add(Constant::Class(n))
    }

    pub fn add_name_and_type(&mut self, name: &str, descriptor: &str) -> Result<u16> {
        let n = self.add_utf8(name)?;
        let d = self.add_utf8(descriptor)?;
        self.add(Constant::NameAndType(n, d))
    }

    pub fn add_methodref(&mut self, class: &str, name: &str, descriptor: &str) -> Result<u16> {
        let c = self.add_class(class)?;
        let nt = self.add_name_and_type(name, descriptor)?;
        self.add(Constant::Methodref(c, nt))
    }

    pub fn add_fieldref(&mut self, class: &str, name: &str, descriptor: &str) -> Result<u16> {
        let c = self.add_class(class)?;
        let nt = self.add_name_and_type(name, descriptor)?;
        self.add(Constant::Fieldref(c, nt))
    }

    pub fn add_integer(&mut self, v: i32) -> Result<u16> {
        self.add(Constant::Integer(v))
    }

    pub fn add_string(&mut self, s: &str) -> Result<u16> {
        let n = self.add_utf8(s)?;
        self.add(Constant::String(n))
    }

    /// Re-encodes every original entry from its decoded form (used by the round-trip check to prove the
    /// decoder), followed by the appended entries.
    pub fn encode_all(&self, out: &mut Vec<u8>) -> Result<()> {
        for i in 1..self.original_count {
            if self.offsets[i as usize] != UNUSABLE {
                self.get(i)?.encode(out);
            }
        }
        out.extend_from_slice(&self.appended);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool_bytes() -> Vec<u8> {
        let mut v = Vec::new();
        put_u16(&mut v, 6);
        Constant::Utf8(b"Foo").encode(&mut v);
        Constant::Class(1).encode(&mut v);
        Constant::Long(-5).encode(&mut v);
        Constant::Integer(7).encode(&mut v);
        v
    }

    #[test]
    fn parses_and_appends() {
        let bytes = pool_bytes();
        let mut cp = ConstantPool::parse(&bytes, 0).unwrap();
        assert_eq!(cp.count(), 6);
        assert_eq!(cp.class_name(2).unwrap(), b"Foo");
        assert_eq!(cp.get(3).unwrap(), Constant::Long(-5));
        assert!(cp.get(4).is_err());
        assert_eq!(cp.get(5).unwrap(), Constant::Integer(7));
        let m = cp.add_methodref("kprof/runtime/Probe", "block", "(I)V").unwrap();
        assert_eq!(cp.member_ref(m).unwrap(), (&b"kprof/runtime/Probe"[..], &b"block"[..], &b"(I)V"[..]));
        let again = cp.add_methodref("kprof/runtime/Probe", "block", "(I)V").unwrap();
        assert_eq!(m, again);
        let l = cp.add(Constant::Long(1)).unwrap();
        assert_eq!(cp.count(), l + 2);
        let mut out = Vec::new();
        cp.encode_all(&mut out).unwrap();
        assert_eq!(&out[..bytes.len() - 2], &bytes[2..]);
    }

    #[test]
    fn rejects_bad_pools() {
        assert!(ConstantPool::parse(&[0, 0], 0).is_err());
        assert!(ConstantPool::parse(&[0, 2, 99], 0).is_err());
        assert!(ConstantPool::parse(&[0, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0], 0).is_err());
        assert!(ConstantPool::parse(&[0, 2, 1, 0, 9, b'a'], 0).is_err());
    }
}
