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
