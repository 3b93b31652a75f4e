//! Class inputs: `.class` files, directories, `.jar`s and `.jmod`s (a zip behind a 4-byte `JM\1\0` header).
//! The zip reader handles stored and deflated entries and zip64 archives.

use std::io::Read;
use std::path::{Path, PathBuf};

/// One entry of a zip archive's central directory.
#[derive(Clone, Debug)]
pub struct ZipEntry {
    pub name: String,
    method: u16,
    compressed: u64,
    size: u64,
    local_offset: u64,
}

/// A zip archive held in memory.
pub struct Zip<'a> {
    data: &'a [u8],
    pub entries: Vec<ZipEntry>,
}

fn le16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn le32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn le64(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

impl<'a> Zip<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Zip<'a>, String> {
        Self::parse_inner(data).ok_or_else(|| "not a zip archive (or a corrupt one)".to_string())
    }

    fn parse_inner(data: &'a [u8]) -> Option<Zip<'a>> {
        // End of central directory: the last signature within the final 64 KB + 22 bytes.
        let low = data.len().saturating_sub(65535 + 22);
        let eocd = (low..=data.len().checked_sub(22)?).rev().find(|&i| le32(data, i) == Some(0x0605_4b50))?;
        let mut count = le16(data, eocd + 10)? as u64;
        let mut cd_offset = le32(data, eocd + 16)? as u64;
        if eocd >= 20 && le32(data, eocd - 20) == Some(0x0706_4b50) {
            let e64 = le64(data, eocd - 20 + 8)? as usize;
            if le32(data, e64) == Some(0x0606_4b50) {
                count = le64(data, e64 + 32)?;
                cd_offset = le64(data, e64 + 48)?;
            }
        }
        let mut entries = Vec::with_capacity(count.min(1 << 20) as usize);
        let mut p = usize::try_from(cd_offset).ok()?;
        for _ in 0..count {
            if le32(data, p)? != 0x0201_4b50 {
                return None;
            }
            let method = le16(data, p + 10)?;
            let mut compressed = le32(data, p + 20)? as u64;
            let mut size = le32(data, p + 24)? as u64;
            let name_len = le16(data, p + 28)? as usize;
            let extra_len = le16(data, p + 30)? as usize;
            let comment_len = le16(data, p + 32)? as usize;
            let mut local_offset = le32(data, p + 42)? as u64;
            let name = String::from_utf8_lossy(data.get(p + 46..p + 46 + name_len)?).into_owned();
            // Zip64 extended information: the fields that overflowed, in this order.
            let extra = data.get(p + 46 + name_len..p + 46 + name_len + extra_len)?;
            let mut e = 0;
            while e + 4 <= extra.len() {
                let id = le16(extra, e)?;
                let len = le16(extra, e + 2)? as usize;
                if id == 1 {
                    let mut f = e + 4;
                    for v in [&mut size, &mut compressed, &mut local_offset] {
                        if *v == 0xFFFF_FFFF {
                            *v = le64(extra, f)?;
                            f += 8;
                        }
                    }
                }
                e += 4 + len;
            }
            entries.push(ZipEntry { name, method, compressed, size, local_offset });
            p += 46 + name_len + extra_len + comment_len;
        }
        Some(Zip { data, entries })
    }

    /// The uncompressed bytes of `e`.
    pub fn read(&self, e: &ZipEntry) -> Result<Vec<u8>, String> {
        let bad = || format!("corrupt zip entry {}", e.name);
        let h = usize::try_from(e.local_offset).map_err(|_| bad())?;
        if le32(self.data, h) != Some(0x0403_4b50) {
            return Err(bad());
        }
        let start = h
            + 30
            + le16(self.data, h + 26).ok_or_else(bad)? as usize
            + le16(self.data, h + 28).ok_or_else(bad)? as usize;
        let end = usize::try_from(e.compressed).ok().and_then(|c| start.checked_add(c)).ok_or_else(bad)?;
        let raw = self.data.get(start..end).ok_or_else(bad)?;
        match e.method {
            0 => Ok(raw.to_vec()),
            8 => {
                let mut out = Vec::with_capacity(e.size.min(1 << 30) as usize);
                flate2::read::DeflateDecoder::new(raw)
                    .read_to_end(&mut out)
                    .map_err(|err| format!("{}: {err}", e.name))?;
                Ok(out)
            }
            m => Err(format!("{}: unsupported compression method {m}", e.name)),
        }
    }
}

/// The archive bytes of a jar or jmod (the zip part).
pub fn zip_part(data: &[u8]) -> &[u8] {
    if data.starts_with(b"JM\x01\x00") {
        &data[4..]
    } else {
        data
    }
}

/// Called with (entry name, class bytes); an error stops the walk.
pub type ClassVisitor<'f> = dyn FnMut(&str, &[u8]) -> Result<(), String> + 'f;

/// Calls `f(entry_name, bytes)` for every class file in `input`: the path relative to the directory, the
/// entry name in a jar, or the name after `classes/` in a jmod. `f` returning an error stops the walk.
pub fn for_each_class(input: &Path, f: &mut ClassVisitor<'_>) -> Result<(), String> {
    let meta = std::fs::metadata(input).map_err(|e| format!("{}: {e}", input.display()))?;
    if meta.is_dir() {
        let mut files = Vec::new();
        walk(input, &mut files).map_err(|e| format!("{}: {e}", input.display()))?;
        files.sort();
        for p in files {
            let data = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            let rel = p.strip_prefix(input).unwrap_or(&p).to_string_lossy().into_owned();
            f(&rel, &data)?;
        }
        return Ok(());
    }
    let data = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
    if data.starts_with(&[0xCA, 0xFE, 0xBA, 0xBE]) || input.extension().is_some_and(|e| e == "class") {
        let name = input.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        return f(&name, &data);
    }
    let is_jmod = data.starts_with(b"JM\x01\x00");
    let zip = Zip::parse(zip_part(&data)).map_err(|e| format!("{}: {e}", input.display()))?;
    for e in &zip.entries {
        let name = if is_jmod {
            match e.name.strip_prefix("classes/") {
                Some(n) => n,
                None => continue,
            }
        } else {
            &e.name[..]
        };
        if !name.ends_with(".class") {
            continue;
        }
        let bytes = zip.read(e).map_err(|err| format!("{}: {err}", input.display()))?;
        f(name, &bytes)?;
    }
    Ok(())
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let p = entry.path();
        let t = entry.file_type()?;
        if t.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "class") {
            out.push(p);
        }
    }
    Ok(())
}

/// The path under an output directory for a class named `internal_name` found at entry `entry`: the package
/// path, under `META-INF/versions/N/` for a versioned entry of a multi-release jar.
pub fn output_path(entry: &str, internal_name: &str) -> String {
    if let Some(rest) = entry.strip_prefix("META-INF/versions/") {
        if let Some(v) = rest.split('/').next() {
            return format!("META-INF/versions/{v}/{internal_name}.class");
        }
    }
    format!("{internal_name}.class")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A zip of `(name, bytes, deflate)` entries; with `zip64`, sizes and offsets live in zip64 extra fields and
    /// the end record is a zip64 one.
    fn make_zip(entries: &[(&str, &[u8], bool)], zip64: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data, deflate) in entries {
            let body = if *deflate {
                let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            } else {
                data.to_vec()
            };
            let offset = out.len() as u64;
            let method: u16 = if *deflate { 8 } else { 0 };
            let (csize, usize_, off32) = if zip64 {
                (0xFFFF_FFFFu32, 0xFFFF_FFFFu32, 0xFFFF_FFFFu32)
            } else {
                (body.len() as u32, data.len() as u32, offset as u32)
            };
            out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
            out.extend_from_slice(&[20, 0, 0, 0]);
            out.extend_from_slice(&method.to_le_bytes());
            out.extend_from_slice(&[0; 8]);
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&body);
            let extra: Vec<u8> = if zip64 {
                let mut x = vec![1, 0, 24, 0];
                x.extend_from_slice(&(data.len() as u64).to_le_bytes());
                x.extend_from_slice(&(body.len() as u64).to_le_bytes());
                x.extend_from_slice(&offset.to_le_bytes());
                x
            } else {
                Vec::new()
            };
            central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            central.extend_from_slice(&[20, 0, 20, 0, 0, 0]);
            central.extend_from_slice(&method.to_le_bytes());
            central.extend_from_slice(&[0; 8]);
            central.extend_from_slice(&csize.to_le_bytes());
            central.extend_from_slice(&usize_.to_le_bytes());
            central.extend_from_slice(&(name.len() as u16).to_le_bytes());
            central.extend_from_slice(&(extra.len() as u16).to_le_bytes());
            central.extend_from_slice(&[0; 10]);
            central.extend_from_slice(&off32.to_le_bytes());
            central.extend_from_slice(name.as_bytes());
            central.extend_from_slice(&extra);
        }
        let cd_offset = out.len() as u64;
        out.extend_from_slice(&central);
        let n = entries.len() as u64;
        if zip64 {
            let e64 = out.len() as u64;
            out.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
            out.extend_from_slice(&44u64.to_le_bytes());
            out.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&(central.len() as u64).to_le_bytes());
            out.extend_from_slice(&cd_offset.to_le_bytes());
            out.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&e64.to_le_bytes());
            out.extend_from_slice(&1u32.to_le_bytes());
        }
        out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        let n16 = if zip64 { 0xFFFF } else { n as u16 };
        out.extend_from_slice(&n16.to_le_bytes());
        out.extend_from_slice(&n16.to_le_bytes());
        out.extend_from_slice(&(central.len() as u32).to_le_bytes());
        let off = if zip64 { 0xFFFF_FFFF } else { cd_offset as u32 };
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out
    }

    #[test]
    fn reads_stored_deflated_and_zip64_archives() {
        let big = vec![7u8; 10_000];
        let entries: [(&str, &[u8], bool); 2] =
            [("a/B.class", b"\xCA\xFE\xBA\xBEstored", false), ("c.txt", &big, true)];
        for zip64 in [false, true] {
            let data = make_zip(&entries, zip64);
            let z = Zip::parse(&data).unwrap();
            assert_eq!(z.entries.len(), 2);
            assert_eq!(z.entries[0].name, "a/B.class");
            assert_eq!(z.read(&z.entries[0]).unwrap(), entries[0].1);
            assert_eq!(z.read(&z.entries[1]).unwrap(), big);
            // Damage: truncations never panic.
            for cut in (0..data.len()).step_by(13) {
                if let Ok(z) = Zip::parse(&data[..cut]) {
                    for e in &z.entries {
                        let _ = z.read(e);
                    }
                }
            }
        }
        let mut jmod = b"JM\x01\x00".to_vec();
        jmod.extend_from_slice(&make_zip(&entries, false));
        assert_eq!(Zip::parse(zip_part(&jmod)).unwrap().entries.len(), 2);
        assert_eq!(output_path("META-INF/versions/11/a/B.class", "a/B"), "META-INF/versions/11/a/B.class");
        assert_eq!(output_path("x/y/B.class", "a/B"), "a/B.class");
    }
}
