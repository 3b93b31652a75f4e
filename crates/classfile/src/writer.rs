//! Writing a class: the original bytes with the appended constants and the edited `Code` attributes spliced in.

use super::bytes::put_u16;
use super::class::ClassFile;
use super::edit::{CodeEditor, EditError, EditLimits, MethodContext};
use super::{Error, Result};

/// A replacement `Code` attribute for method `method`: bytes `range` of the caller's buffer (header included).
#[derive(Clone, Debug)]
pub struct MethodEdit {
    pub method: usize,
    pub range: std::ops::Range<usize>,
}

/// Writes `class` to `out` with `edits` (in method order) taken from `buf`. With `reencode_pool`, the original
/// constants are re-encoded from their decoded form instead of copied (the round-trip check uses this).
pub fn write_class(
    class: &ClassFile<'_>,
    edits: &[MethodEdit],
    buf: &[u8],
    reencode_pool: bool,
    out: &mut Vec<u8>,
) -> Result<()> {
    let data = class.data;
    let cp = &class.constant_pool;
    out.reserve(data.len() + cp.appended_bytes().len() + edits.iter().map(|e| e.range.len()).sum::<usize>());
    out.extend_from_slice(&data[..8]);
    put_u16(out, cp.count());
    if reencode_pool {
        cp.encode_all(out)?;
    } else {
        out.extend_from_slice(&data[cp.original_range()]);
        out.extend_from_slice(cp.appended_bytes());
    }
    let mut copied = cp.original_range().end;
    let mut last_method = None;
    for e in edits {
        if last_method.is_some_and(|m| m >= e.method) {
            return Err(Error::new("method edits out of order", e.method));
        }
        last_method = Some(e.method);
        let attr = class.code_attribute(e.method).ok_or(Error::new("edited method has no code", e.method))?;
        out.extend_from_slice(&data[copied..attr.offset]);
        out.extend_from_slice(&buf[e.range.clone()]);
        copied = attr.offset + attr.total_len();
    }
    out.extend_from_slice(&data[copied..]);
    Ok(())
}

/// Parses `data`, decodes and re-encodes every constant and every `Code` attribute without edits, and writes
/// the class to `out`. A correct engine reproduces `data` exactly.
pub fn roundtrip_rebuild(data: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let mut class = ClassFile::parse(data)?;
    let mut editor = CodeEditor::new();
    let mut buf = Vec::new();
    let mut edits = Vec::new();
    let limits = EditLimits { budget: u32::MAX };
    for i in 0..class.methods.len() {
        let Some(code) = class.method_code(i)? else { continue };
        let ctx = MethodContext::of(&class, i)?;
        editor.begin(&code);
        let start = buf.len();
        match editor.finish(&code, &ctx, &mut class.constant_pool, &limits, true, &mut buf) {
            Ok(_) => edits.push(MethodEdit { method: i, range: start..buf.len() }),
            Err(EditError::Malformed(e)) => return Err(e),
            Err(EditError::Refused(_)) => return Err(Error::new("rebuild refused", i)),
        }
    }
    write_class(&class, &edits, &buf, true, out)
}

/// A field to add to a class: access flags, name and descriptor.
#[derive(Clone, Copy, Debug)]
pub struct NewField<'n> {
    pub access_flags: u16,
    pub name: &'n str,
    pub descriptor: &'n str,
}

/// Writes `data` to `out` with `fields` appended to its fields (no attributes), leaving everything else as it
/// was. A field the class already has (same name) is an error: the caller decides once per class.
pub fn add_fields(data: &[u8], fields: &[NewField<'_>], out: &mut Vec<u8>) -> Result<()> {
    let mut class = ClassFile::parse(data)?;
    for f in fields {
        if class.fields.iter().any(|m| class.member_name(m).is_ok_and(|n| n == f.name.as_bytes())) {
            return Err(Error::new("the class already has a field of that name", 0));
        }
    }
    let mut entries = Vec::with_capacity(fields.len() * 8);
    for f in fields {
        let name = class.constant_pool.add_utf8(f.name)?;
        let desc = class.constant_pool.add_utf8(f.descriptor)?;
        put_u16(&mut entries, f.access_flags);
        put_u16(&mut entries, name);
        put_u16(&mut entries, desc);
        put_u16(&mut entries, 0);
    }
    let cp = &class.constant_pool;
    let count_at = cp.original_range().end + 8 + 2 * class.interfaces.len();
    let fields_end = class.fields.last().map_or(count_at + 2, |m| m.range.end);
    let count =
        u16::try_from(class.fields.len() + fields.len()).map_err(|_| Error::new("too many fields", count_at))?;
    out.clear();
    out.extend_from_slice(&data[..8]);
    put_u16(out, cp.count());
    out.extend_from_slice(&data[cp.original_range()]);
    out.extend_from_slice(cp.appended_bytes());
    out.extend_from_slice(&data[cp.original_range().end..count_at]);
    put_u16(out, count);
    out.extend_from_slice(&data[count_at + 2..fields_end]);
    out.extend_from_slice(&entries);
    out.extend_from_slice(&data[fields_end..]);
    Ok(())
}
