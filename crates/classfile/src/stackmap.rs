//! StackMapTable: decoding every frame to a full frame, and re-encoding after relocation.
//!
//! Frames keep the kind they were written with. When only offsets move, each frame is written in its original
//! kind (widened to the `_extended` form if its offset delta no longer fits), so an unedited table comes back
//! byte for byte. When locals are added, chop/append/full frames and the first frame become full frames whose
//! locals are padded with Top up to the old `max_locals` and followed by the new locals; `same` frames stay
//! `same`, since their predecessor is extended the same way.

use super::bytes::{put_u16, Cursor};
use super::{Error, Result};

/// A verification type (JVMS §4.10.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VType {
    Top,
    Integer,
    Float,
    Double,
    Long,
    Null,
    UninitializedThis,
    /// A class, by constant-pool index of its Class entry.
    Object(u16),
    /// The object created by the `new` instruction at this code offset.
    Uninitialized(u16),
    /// A class named by the method descriptor at bytes `[start, end)` (a parameter type of the implicit first
    /// frame), given a Class entry only if it has to be written.
    Named(u16, u16),
}

impl VType {
    /// Local-variable slots the type takes.
    #[inline]
    pub fn slots(self) -> u32 {
        match self {
            VType::Long | VType::Double => 2,
            _ => 1,
        }
    }

    fn read(c: &mut Cursor<'_>) -> Result<VType> {
        let at = c.pos();
        Ok(match c.u8()? {
            0 => VType::Top,
            1 => VType::Integer,
            2 => VType::Float,
            3 => VType::Double,
            4 => VType::Long,
            5 => VType::Null,
            6 => VType::UninitializedThis,
            7 => VType::Object(c.u16()?),
            8 => VType::Uninitialized(c.u16()?),
            _ => return Err(Error::new("bad verification type tag", at)),
        })
    }

    pub(crate) fn write(self, out: &mut Vec<u8>) -> Result<()> {
        match self {
            VType::Top => out.push(0),
            VType::Integer => out.push(1),
            VType::Float => out.push(2),
            VType::Double => out.push(3),
            VType::Long => out.push(4),
            VType::Null => out.push(5),
            VType::UninitializedThis => out.push(6),
            VType::Object(i) => {
                out.push(7);
                put_u16(out, i);
            }
            VType::Uninitialized(o) => {
                out.push(8);
                put_u16(out, o);
            }
            VType::Named(..) => return Err(Error::new("unresolved descriptor type in a frame", 0)),
        }
        Ok(())
    }
}

/// One frame, decoded to full form: its code offset, the kind byte it was written with, and ranges into the
/// shared type arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub offset: u32,
    pub kind: u8,
    pub locals: std::ops::Range<u32>,
    pub stack: std::ops::Range<u32>,
}

/// Decoded frames; `types` is the arena that frames index into. Reusable across methods.
#[derive(Clone, Debug, Default)]
pub struct StackMap {
    pub frames: Vec<Frame>,
    pub types: Vec<VType>,
}

impl StackMap {
    pub fn locals(&self, f: &Frame) -> &[VType] {
        &self.types[f.locals.start as usize..f.locals.end as usize]
    }

    pub fn stack(&self, f: &Frame) -> &[VType] {
        &self.types[f.stack.start as usize..f.stack.end as usize]
    }

    /// Decodes a StackMapTable body. `initial` holds the locals of the implicit first frame.
    pub fn decode(&mut self, info: &[u8], initial: &[VType]) -> Result<()> {
        self.frames.clear();
        self.types.clear();
        self.types.extend_from_slice(initial);
        let mut locals = 0..initial.len() as u32;
        let mut c = Cursor::new(info);
        let n = c.u16()?;
        let mut offset: i64 = -1;
        for _ in 0..n {
            let at = c.pos();
            let kind = c.u8()?;
            let delta;
            let mut stack = 0..0;
            match kind {
                0..=63 => delta = kind as u32,
                64..=127 => {
                    delta = kind as u32 - 64;
                    stack = self.push_read(&mut c, 1)?;
                }
                247 => {
                    delta = c.u16()? as u32;
                    stack = self.push_read(&mut c, 1)?;
                }
                248..=250 => {
                    delta = c.u16()? as u32;
                    let k = 251 - kind as u32;
                    if locals.end - locals.start < k {
                        return Err(Error::new("chop frame removes more locals than exist", at));
                    }
                    locals = locals.start..locals.end - k;
                }
                251 => delta = c.u16()? as u32,
                252..=254 => {
                    delta = c.u16()? as u32;
                    let start = self.types.len() as u32;
                    self.types.extend_from_within(locals.start as usize..locals.end as usize);
                    self.push_read(&mut c, kind as usize - 251)?;
                    locals = start..self.types.len() as u32;
                }
                255 => {
                    delta = c.u16()? as u32;
                    let nl = c.u16()? as usize;
                    locals = self.push_read(&mut c, nl)?;
                    let ns = c.u16()? as usize;
                    stack = self.push_read(&mut c, ns)?;
                }
                _ => return Err(Error::new("reserved stack map frame type", at)),
            }
            offset = offset + 1 + delta as i64;
            if offset > 65535 {
                return Err(Error::new("stack map frame offset out of range", at));
            }
            self.frames.push(Frame { offset: offset as u32, kind, locals: locals.clone(), stack });
        }
        if !c.is_empty() {
            return Err(Error::new("bytes after the end of the StackMapTable", c.pos()));
        }
        Ok(())
    }

    fn push_read(&mut self, c: &mut Cursor<'_>, n: usize) -> Result<std::ops::Range<u32>> {
        // Every type takes at least one byte: bound the work by the input.
        if n > c.remaining() {
            return Err(Error::new("truncated stack map frame", c.pos()));
        }
        let start = self.types.len() as u32;
        for _ in 0..n {
            let t = VType::read(c)?;
            self.types.push(t);
        }
        Ok(start..self.types.len() as u32)
    }
}

/// How to re-encode a table.
pub struct Relocation<'m, M, T> {
    /// New offset of the frame at an old offset.
    pub frame_offset: M,
    /// Maps each written type (`Uninitialized` offsets, `Named` to a Class entry).
    pub map_type: T,
    /// `Some((old max_locals, new locals))` when locals were added.
    pub extend: Option<(u16, &'m [VType])>,
}

/// Writes the body of a StackMapTable (entry count first) for `map`, relocated.
pub fn encode<M, T>(map: &StackMap, reloc: &mut Relocation<'_, M, T>, out: &mut Vec<u8>) -> Result<()>
where
    M: FnMut(u32) -> Result<u32>,
    T: FnMut(VType) -> Result<VType>,
{
    put_u16(out, map.frames.len() as u16);
    let mut prev: i64 = -1;
    for (i, f) in map.frames.iter().enumerate() {
        let off = (reloc.frame_offset)(f.offset)? as i64;
        let delta = off - prev - 1;
        if !(0..=65535).contains(&delta) {
            return Err(Error::new("stack map frames out of order after relocation", f.offset as usize));
        }
        let delta = delta as u16;
        prev = off;
        let stack = map.stack(f);
        let same_locals = matches!(f.kind, 0..=127 | 247 | 251);
        let full = match reloc.extend {
            Some(_) => i == 0 || !same_locals,
            None => false,
        };
        if full {
            let (old_max, added) = reloc.extend.unwrap_or((0, &[]));
            out.push(255);
            put_u16(out, delta);
            let locals = map.locals(f);
            let slots: u32 = locals.iter().map(|t| t.slots()).sum();
            if slots > old_max as u32 {
                return Err(Error::new("stack map frame has more locals than max_locals", f.offset as usize));
            }
            let count = locals.len() + (old_max as u32 - slots) as usize + added.len();
            if count > 65535 {
                return Err(Error::new("too many locals in a frame", f.offset as usize));
            }
            put_u16(out, count as u16);
            for &t in locals {
                (reloc.map_type)(t)?.write(out)?;
            }
            for _ in slots..old_max as u32 {
                out.push(0);
            }
            for &t in added {
                (reloc.map_type)(t)?.write(out)?;
            }
            put_u16(out, stack.len() as u16);
            for &t in stack {
                (reloc.map_type)(t)?.write(out)?;
            }
            continue;
        }
        match f.kind {
            0..=63 | 251 => {
                if f.kind < 64 && delta < 64 {
                    out.push(delta as u8);
                } else {
                    out.push(251);
                    put_u16(out, delta);
                }
            }
            64..=127 | 247 => {
                if f.kind < 128 && delta < 64 {
                    out.push(64 + delta as u8);
                } else {
                    out.push(247);
                    put_u16(out, delta);
                }
                (reloc.map_type)(stack[0])?.write(out)?;
            }
            248..=250 => {
                out.push(f.kind);
                put_u16(out, delta);
            }
            252..=254 => {
                out.push(f.kind);
                put_u16(out, delta);
                let locals = map.locals(f);
                let k = f.kind as usize - 251;
                for &t in &locals[locals.len() - k..] {
                    (reloc.map_type)(t)?.write(out)?;
                }
            }
            _ => {
                out.push(255);
                put_u16(out, delta);
                let locals = map.locals(f);
                put_u16(out, locals.len() as u16);
                for &t in locals {
                    (reloc.map_type)(t)?.write(out)?;
                }
                put_u16(out, stack.len() as u16);
                for &t in stack {
                    (reloc.map_type)(t)?.write(out)?;
                }
            }
        }
    }
    Ok(())
}

/// The locals of the implicit first frame of a method (JVMS §4.10.1.6): `this` (uninitialized in constructors
/// other than Object's) and the parameters. Reference parameters are [`VType::Named`] by descriptor position.
pub fn initial_locals(
    descriptor: &[u8],
    is_static: bool,
    is_init: bool,
    this_class: u16,
    this_is_object: bool,
    out: &mut Vec<VType>,
) -> Result<()> {
    out.clear();
    if !is_static {
        out.push(if is_init && !this_is_object { VType::UninitializedThis } else { VType::Object(this_class) });
    }
    if descriptor.first() != Some(&b'(') || descriptor.len() > 65535 {
        return Err(Error::new("bad method descriptor", 0));
    }
    let mut i = 1;
    loop {
        let start = i;
        let b = *descriptor.get(i).ok_or(Error::new("bad method descriptor", i))?;
        let t = match b {
            b')' => return Ok(()),
            b'B' | b'C' | b'I' | b'S' | b'Z' => VType::Integer,
            b'F' => VType::Float,
            b'J' => VType::Long,
            b'D' => VType::Double,
            b'L' | b'[' => {
                while descriptor.get(i) == Some(&b'[') {
                    i += 1;
                }
                if descriptor.get(i) == Some(&b'L') {
                    while descriptor.get(i).is_some_and(|&c| c != b';') {
                        i += 1;
                    }
                }
                if i >= descriptor.len() {
                    return Err(Error::new("bad method descriptor", i));
                }
                if b == b'L' {
                    VType::Named(start as u16 + 1, i as u16)
                } else {
                    VType::Named(start as u16, i as u16 + 1)
                }
            }
            _ => return Err(Error::new("bad method descriptor", i)),
        };
        out.push(t);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_frame_from_descriptor() {
        let mut v = Vec::new();
        let d = b"(IJLjava/lang/String;[[DZ)V";
        initial_locals(d, false, true, 5, false, &mut v).unwrap();
        assert_eq!(
            v,
            vec![
                VType::UninitializedThis,
                VType::Integer,
                VType::Long,
                VType::Named(4, 20),
                VType::Named(21, 24),
                VType::Integer
            ]
        );
        assert_eq!(&d[4..20], b"java/lang/String");
        assert_eq!(&d[21..24], b"[[D");
        assert!(initial_locals(b"(L", true, false, 0, false, &mut v).is_err());
        assert!(initial_locals(b"(Q)V", true, false, 0, false, &mut v).is_err());
    }

    #[test]
    fn decode_encode_identity_and_extension() {
        // append(I) at 3, same at 10, same_locals_1(I) at 20, chop 1 at 90, full at 100
        let t = vec![0, 5, 252, 0, 3, 1, 6, 64 + 9, 1, 250, 0, 69, 255, 0, 9, 0, 1, 4, 0, 0];
        let mut m = StackMap::default();
        m.decode(&t, &[VType::Object(2)]).unwrap();
        assert_eq!(m.frames.len(), 5);
        assert_eq!(m.frames.iter().map(|f| f.offset).collect::<Vec<_>>(), vec![3, 10, 20, 90, 100]);
        assert_eq!(m.locals(&m.frames[2]), &[VType::Object(2), VType::Integer]);
        assert_eq!(m.locals(&m.frames[3]), &[VType::Object(2)]);
        let mut out = Vec::new();
        let mut r = Relocation { frame_offset: |o| Ok(o), map_type: Ok, extend: None };
        encode(&m, &mut r, &mut out).unwrap();
        assert_eq!(out, t);
        // Shift everything by 100: same frames become extended where the delta no longer fits.
        out.clear();
        let mut r = Relocation { frame_offset: |o| Ok(o * 2), map_type: Ok, extend: None };
        encode(&m, &mut r, &mut out).unwrap();
        let mut back = StackMap::default();
        back.decode(&out, &[VType::Object(2)]).unwrap();
        assert_eq!(back.frames.iter().map(|f| f.offset).collect::<Vec<_>>(), vec![6, 20, 40, 180, 200]);
        // Extend with one new local above max_locals 3.
        out.clear();
        let added = [VType::Integer];
        let mut r = Relocation { frame_offset: |o| Ok(o + 4), map_type: Ok, extend: Some((3, &added[..])) };
        encode(&m, &mut r, &mut out).unwrap();
        back.decode(&out, &[VType::Object(2)]).unwrap();
        assert_eq!(back.locals(&back.frames[0]), &[VType::Object(2), VType::Integer, VType::Top, VType::Integer]);
        assert_eq!(back.locals(&back.frames[3]), &[VType::Object(2), VType::Top, VType::Top, VType::Integer]);
        assert_eq!(back.locals(&back.frames[4]), &[VType::Long, VType::Top, VType::Integer]);
        assert_eq!(back.frames[2].kind, 64 + 9);
    }
}
