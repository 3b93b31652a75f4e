//! The class file as a whole: header, constant pool, fields, methods and attributes, all borrowed.

use super::bytes::Cursor;
use super::code::Code;
use super::constant_pool::ConstantPool;
use super::{Error, Result, MAX_MAJOR, MIN_MAJOR};

pub const ACC_STATIC: u16 = 0x0008;
pub const ACC_NATIVE: u16 = 0x0100;
pub const ACC_INTERFACE: u16 = 0x0200;
pub const ACC_ABSTRACT: u16 = 0x0400;
pub const ACC_MODULE: u16 = 0x8000;

/// One attribute: where its header starts in the class file and its body.
#[derive(Clone, Copy, Debug)]
pub struct Attribute<'a> {
    pub name_index: u16,
    /// Offset of the attribute header (`attribute_name_index`) in the class file.
    pub offset: usize,
    pub info: &'a [u8],
}

impl Attribute<'_> {
    /// Length of the whole attribute including its 6-byte header.
    pub fn total_len(&self) -> usize {
        6 + self.info.len()
    }
}

/// A field or method. Its attributes are `ClassFile::attributes[attrs]`.
#[derive(Clone, Debug)]
pub struct Member {
    pub access_flags: u16,
    pub name_index: u16,
    pub descriptor_index: u16,
    pub attrs: std::ops::Range<u32>,
    /// Byte range of the whole member in the class file.
    pub range: std::ops::Range<usize>,
}

#[derive(Clone, Debug)]
pub struct ClassFile<'a> {
    pub data: &'a [u8],
    pub minor_version: u16,
    pub major_version: u16,
    pub constant_pool: ConstantPool<'a>,
    pub access_flags: u16,
    pub this_class: u16,
    pub super_class: u16,
    pub interfaces: Vec<u16>,
    pub fields: Vec<Member>,
    pub methods: Vec<Member>,
    /// Attributes of all members (each member holds a range) followed by the class's own.
    pub attributes: Vec<Attribute<'a>>,
    pub class_attrs: std::ops::Range<u32>,
}

fn parse_attributes<'a>(c: &mut Cursor<'a>, out: &mut Vec<Attribute<'a>>) -> Result<std::ops::Range<u32>> {
    let n = c.u16()?;
    let first = out.len() as u32;
    for _ in 0..n {
        let offset = c.pos();
        let name_index = c.u16()?;
        let len = c.u32()? as usize;
        let info = c.bytes(len)?;
        out.push(Attribute { name_index, offset, info });
    }
    Ok(first..out.len() as u32)
}

fn parse_members<'a>(c: &mut Cursor<'a>, attrs: &mut Vec<Attribute<'a>>) -> Result<Vec<Member>> {
    let n = c.u16()? as usize;
    // Each member takes at least 8 bytes: cap the reservation by what the input can hold.
    let mut members = Vec::with_capacity(n.min(c.remaining() / 8));
    for _ in 0..n {
        let start = c.pos();
        let access_flags = c.u16()?;
        let name_index = c.u16()?;
        let descriptor_index = c.u16()?;
        let r = parse_attributes(c, attrs)?;
        members.push(Member { access_flags, name_index, descriptor_index, attrs: r, range: start..c.pos() });
    }
    Ok(members)
}

impl<'a> ClassFile<'a> {
    /// Parses `data` as a class file. Only the structure is read here; constants, code and attributes are
    /// decoded when asked for.
    pub fn parse(data: &'a [u8]) -> Result<ClassFile<'a>> {
        let mut c = Cursor::new(data);
        if c.u32()? != 0xCAFEBABE {
            return Err(Error::new("bad magic", 0));
        }
        let minor_version = c.u16()?;
        let major_version = c.u16()?;
        if !(MIN_MAJOR..=MAX_MAJOR).contains(&major_version) {
            return Err(Error::new("unsupported class-file version", 6));
        }
        let constant_pool = ConstantPool::parse(data, 8)?;
        let mut c = Cursor::at(data, constant_pool.original_range().end);
        let access_flags = c.u16()?;
        let this_class = c.u16()?;
        let super_class = c.u16()?;
        let n = c.u16()? as usize;
        let mut interfaces = Vec::with_capacity(n.min(c.remaining() / 2));
        for _ in 0..n {
            interfaces.push(c.u16()?);
        }
        let mut attributes = Vec::new();
        let fields = parse_members(&mut c, &mut attributes)?;
        let methods = parse_members(&mut c, &mut attributes)?;
        let class_attrs = parse_attributes(&mut c, &mut attributes)?;
        if !c.is_empty() {
            return Err(Error::new("bytes after the end of the class file", c.pos()));
        }
        Ok(ClassFile {
            data,
            minor_version,
            major_version,
            constant_pool,
            access_flags,
            this_class,
            super_class,
            interfaces,
            fields,
            methods,
            attributes,
            class_attrs,
        })
    }

    /// Attributes of a field or method.
    pub fn member_attributes(&self, m: &Member) -> &[Attribute<'a>] {
        &self.attributes[m.attrs.start as usize..m.attrs.end as usize]
    }

    /// The class's own attributes.
    pub fn class_attributes(&self) -> &[Attribute<'a>] {
        &self.attributes[self.class_attrs.start as usize..self.class_attrs.end as usize]
    }

    /// The internal name of this class (`java/lang/Object`).
    pub fn name(&self) -> Result<&[u8]> {
        self.constant_pool.class_name(self.this_class)
    }

    pub fn member_name(&self, m: &Member) -> Result<&'a [u8]> {
        self.constant_pool.original_utf8(m.name_index)
    }

    pub fn member_descriptor(&self, m: &Member) -> Result<&'a [u8]> {
        self.constant_pool.original_utf8(m.descriptor_index)
    }

    /// The attribute of `attrs` named `name`, if any.
    pub fn find_attribute(&self, attrs: &[Attribute<'a>], name: &[u8]) -> Option<Attribute<'a>> {
        attrs.iter().find(|a| self.constant_pool.utf8(a.name_index).map(|n| n == name).unwrap_or(false)).copied()
    }

    /// The `Code` attribute of method `index` (its position in `attributes`), if any.
    pub fn code_attribute(&self, index: usize) -> Option<Attribute<'a>> {
        let m = self.methods.get(index)?;
        self.find_attribute(self.member_attributes(m), b"Code")
    }

    /// The parsed `Code` of method `index`, `Ok(None)` for methods without one (abstract, native).
    pub fn method_code(&self, index: usize) -> Result<Option<Code<'a>>> {
        match self.code_attribute(index) {
            Some(a) => Code::parse_versioned(a, self.major_version, self.minor_version).map(Some),
            None => Ok(None),
        }
    }
}
