//! Annotations: walking `Runtime*Annotations` to find annotation types, and relocating the code offsets in
//! type annotations that sit inside a `Code` attribute (JVMS §4.7.20).

use super::bytes::{put_u16, Cursor};
use super::{Error, Result};

/// Nesting limit for annotation values, so hostile input cannot exhaust the stack.
const MAX_DEPTH: u32 = 64;

fn skip_element_value(c: &mut Cursor<'_>, depth: u32) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::new("annotation values nested too deeply", c.pos()));
    }
    let at = c.pos();
    match c.u8()? {
        b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z' | b's' | b'c' => c.skip(2),
        b'e' => c.skip(4),
        b'@' => skip_annotation(c, depth + 1),
        b'[' => {
            let n = c.u16()?;
            for _ in 0..n {
                skip_element_value(c, depth + 1)?;
            }
            Ok(())
        }
        _ => Err(Error::new("bad annotation element tag", at)),
    }
}

fn skip_annotation(c: &mut Cursor<'_>, depth: u32) -> Result<()> {
    c.skip(2)?;
    let pairs = c.u16()?;
    for _ in 0..pairs {
        c.skip(2)?;
        skip_element_value(c, depth)?;
    }
    Ok(())
}

/// Calls `f` with the type index (a Utf8 field descriptor) of every annotation in a
/// `RuntimeVisibleAnnotations`/`RuntimeInvisibleAnnotations` body.
pub fn for_each_annotation_type(info: &[u8], mut f: impl FnMut(u16)) -> Result<()> {
    let mut c = Cursor::new(info);
    let n = c.u16()?;
    for _ in 0..n {
        let start = c.pos();
        let type_index = c.u16()?;
        c = Cursor::at(info, start);
        skip_annotation(&mut c, 0)?;
        f(type_index);
    }
    Ok(())
}

/// Rewrites the body of a type-annotations attribute of a `Code` attribute into `out`, mapping instruction
/// offsets with `insn` (offset_target, type_argument_target: they name the instruction itself) and local-variable
/// ranges `(start, length)` with `range`.
pub fn relocate_type_annotations(
    info: &[u8],
    mut insn: impl FnMut(u32) -> Result<u32>,
    mut range: impl FnMut(u32, u32) -> Result<(u32, u32)>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let mut c = Cursor::new(info);
    let n = c.u16()?;
    put_u16(out, n);
    let mut copied = c.pos();
    for _ in 0..n {
        let at = c.pos();
        let target = c.u8()?;
        match target {
            0x00 | 0x01 | 0x16 => c.skip(1)?,
            0x10 | 0x17 | 0x42 => c.skip(2)?,
            0x11 | 0x12 => c.skip(2)?,
            0x13..=0x15 => {}
            0x40 | 0x41 => {
                out.extend_from_slice(&info[copied..c.pos()]);
                let len = c.u16()?;
                put_u16(out, len);
                for _ in 0..len {
                    let start = c.u16()? as u32;
                    let length = c.u16()? as u32;
                    let index = c.u16()?;
                    let (s, l) = range(start, length)?;
                    put_u16(out, s as u16);
                    put_u16(out, l as u16);
                    put_u16(out, index);
                }
                copied = c.pos();
            }
            0x43..=0x4B => {
                out.extend_from_slice(&info[copied..c.pos()]);
                let off = c.u16()? as u32;
                put_u16(out, insn(off)? as u16);
                copied = c.pos();
                if target >= 0x47 {
                    c.skip(1)?;
                }
            }
            _ => return Err(Error::new("bad type annotation target", at)),
        }
        let path_len = c.u8()? as usize;
        c.skip(path_len * 2)?;
        skip_annotation(&mut c, 0)?;
    }
    if !c.is_empty() {
        return Err(Error::new("bytes after the end of the type annotations", c.pos()));
    }
    out.extend_from_slice(&info[copied..]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relocates_offsets_and_ranges() {
        // Two annotations: NEW at offset 5 (type @A, no pairs), local variable [2, +3) index 1 with an
        // element value `[` of two ints.
        let info = vec![
            0, 2, //
            0x44, 0, 5, 0, 0, 9, 0, 0, //
            0x40, 0, 1, 0, 2, 0, 3, 0, 1, 0, 0, 9, 0, 1, 0, 10, b'[', 0, 2, b'I', 0, 11, b'I', 0, 12,
        ];
        let mut out = Vec::new();
        relocate_type_annotations(&info, |o| Ok(o + 10), |s, l| Ok((s + 10, l + 1)), &mut out).unwrap();
        let mut expect = info.clone();
        expect[4] = 15;
        expect[14] = 12;
        expect[16] = 4;
        assert_eq!(out, expect);
        let mut types = Vec::new();
        for_each_annotation_type(&[0, 1, 0, 7, 0, 1, 0, 8, b'@', 0, 9, 0, 0], |t| types.push(t)).unwrap();
        assert_eq!(types, vec![7]);
        assert!(relocate_type_annotations(&info[..20], Ok, |s, l| Ok((s, l)), &mut out).is_err());
    }
}
