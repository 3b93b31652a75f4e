//! A bounds-checked big-endian cursor over borrowed bytes, and helpers to append big-endian values.

use super::{Error, Result};

#[derive(Clone, Copy, Debug)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Cursor<'a> {
        Cursor { data, pos: 0 }
    }

    pub fn at(data: &'a [u8], pos: usize) -> Cursor<'a> {
        Cursor { data, pos }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8> {
        let b = *self.data.get(self.pos).ok_or(Error::new("truncated", self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub fn u16(&mut self) -> Result<u16> {
        let s = self.bytes(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }

    #[inline]
    pub fn u32(&mut self) -> Result<u32> {
        let s = self.bytes(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len()).ok_or(Error::new("truncated", self.pos))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn skip(&mut self, n: usize) -> Result<()> {
        self.bytes(n).map(|_| ())
    }
}

#[inline]
pub fn get_u16(data: &[u8], pos: usize) -> Result<u16> {
    match data.get(pos..pos.wrapping_add(2)) {
        Some(s) if pos <= usize::MAX - 2 => Ok(u16::from_be_bytes([s[0], s[1]])),
        _ => Err(Error::new("truncated", pos)),
    }
}

#[inline]
pub fn get_u32(data: &[u8], pos: usize) -> Result<u32> {
    match data.get(pos..pos.wrapping_add(4)) {
        Some(s) if pos <= usize::MAX - 4 => Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]])),
        _ => Err(Error::new("truncated", pos)),
    }
}

#[inline]
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

#[inline]
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

#[inline]
pub fn set_u16(out: &mut [u8], pos: usize, v: u16) {
    out[pos..pos + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub fn set_u32(out: &mut [u8], pos: usize, v: u32) {
    out[pos..pos + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_reads_and_stops_at_end() {
        let mut c = Cursor::new(&[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(c.u8().unwrap(), 1);
        assert_eq!(c.u16().unwrap(), 0x0203);
        assert_eq!(c.u32().unwrap(), 0x04050607);
        assert!(c.u8().is_err());
        assert!(c.bytes(usize::MAX).is_err());
        assert!(get_u16(&[1], 0).is_err());
        assert!(get_u32(&[1, 2, 3, 4], usize::MAX).is_err());
        assert_eq!(get_u32(&[0, 0, 1, 0], 0).unwrap(), 256);
    }
}
