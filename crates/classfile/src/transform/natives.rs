//! Native method wrappers (JVMTI native method prefixing, as in JP2 and CCCP): a native method `foo`
//! becomes a Java method `foo` with the same flags, name, descriptor and attributes, whose body calls a
//! new `private native $kprof$foo` with the same descriptor. With the agent's prefix set
//! (`SetNativeMethodPrefix("$kprof$")`), the JVM links `$kprof$foo` to `foo`'s native code, by JNI name and
//! through RegisterNatives alike. Exact mode then counts the wrapper as the native method's node, and code
//! the native calls back into Java hangs below it.
//!
//! Adding methods changes a class's schema, which only its first definition may do: the agent wraps at
//! load time (with early ClassFileLoadHook events, also the classes loaded before VMInit), and every later
//! rewrite of the class (retransformation starts again from the original bytes) must add exactly the same
//! wrappers. So the choice depends only on the class bytes and the fixed list below, never on options.
//! The wrapper's body touches nothing but the class itself, so it is safe before the runtime exists.
//!
//! Left alone: natives of classes the agent policy leaves alone (Thread, java.lang.invoke, Unsafe, ...),
//! of interfaces, of `java.lang.Object` (its vtable is special to HotSpot) and of the classes whose natives
//! inspect their callers' frames (Throwable's stack trace, stack walking, access control, reflection's
//! caller checks) or that HotSpot's native lookup itself calls (`findEntry0`), and natives annotated with any `jdk.internal` annotation (intrinsic candidates, caller
//! sensitive, hidden frames): an extra frame or a lost intrinsic would change what they do or cost.

use super::policy::SkipPolicy;
use crate::annotations::for_each_annotation_type;
use crate::bytes::{put_u16, put_u32};
use crate::class::{ACC_INTERFACE, ACC_NATIVE, ACC_STATIC};
use crate::{ClassFile, Constant, Error, Member};

/// The prefix of the renamed native methods (what the agent passes to SetNativeMethodPrefix).
pub const NATIVE_PREFIX: &str = "$kprof$";

const ACC_PRIVATE: u16 = 0x0002;
const ACC_SYNCHRONIZED: u16 = 0x0020;
const ACC_SYNTHETIC: u16 = 0x1000;

/// Classes whose natives are never wrapped (see the module comment).
const DENIED_CLASSES: &[&[u8]] = &[
    b"java/lang/Object",
    b"java/lang/Throwable",
    b"java/lang/StackTraceElement",
    b"java/lang/StackStreamFactory",
    b"java/lang/StackWalker",
    b"java/lang/LiveStackFrameInfo",
    b"java/lang/StackFrameInfo",
    b"java/security/AccessController",
    b"jdk/internal/reflect/Reflection",
    // HotSpot links a boot class's prefixed native by first looking the prefixed name up through
    // ClassLoader.findNative, which ends in `findEntry0` (NativeLibraries on 17, NativeLibrary on 25): a
    // wrapped `findEntry0` would need itself linked to link itself (a StackOverflowError in the first
    // lookup of a native method from an application library).
    b"jdk/internal/loader/NativeLibrary",
    b"jdk/internal/loader/NativeLibraries",
];

/// A class with its natives wrapped.
#[derive(Debug)]
pub struct Wrapped {
    pub bytes: Vec<u8>,
    /// (name, descriptor) of each wrapper (the original native's name).
    pub wrappers: Vec<(Vec<u8>, Vec<u8>)>,
}

fn denied_class(name: &[u8]) -> bool {
    DENIED_CLASSES.iter().any(|d| name == *d || (name.starts_with(d) && name.get(d.len()) == Some(&b'$')))
}

/// Whether native method `m` may be wrapped (the class is already known to be wrappable).
fn wrappable(class: &ClassFile<'_>, m: &Member) -> bool {
    if m.access_flags & ACC_NATIVE == 0 {
        return false;
    }
    let Ok(name) = class.member_name(m) else { return false };
    if name.starts_with(b"<") || name.starts_with(NATIVE_PREFIX.as_bytes()) {
        return false;
    }
    let attrs = class.member_attributes(m);
    if class.find_attribute(attrs, b"Code").is_some() {
        return false;
    }
    let mut internal = false;
    for a in attrs {
        let Ok(n) = class.constant_pool.utf8(a.name_index) else { return false };
        if n != b"RuntimeVisibleAnnotations" && n != b"RuntimeInvisibleAnnotations" {
            continue;
        }
        let ok = for_each_annotation_type(a.info, |t| {
            if class.constant_pool.utf8(t).map(|d| d.starts_with(b"Ljdk/internal/")).unwrap_or(true) {
                internal = true;
            }
        });
        if ok.is_err() {
            return false;
        }
    }
    !internal
}

/// What a wrapper needs to know of a descriptor: (load opcode, slots) of each parameter, the return
/// opcode and the return value's slots.
type Signature = (Vec<(u8, u16)>, u8, u16);

/// The [`Signature`] of a method descriptor.
fn signature(desc: &[u8]) -> Option<Signature> {
    const ILOAD: u8 = 21;
    const LLOAD: u8 = 22;
    const FLOAD: u8 = 23;
    const DLOAD: u8 = 24;
    const ALOAD: u8 = 25;
    let mut i = 1;
    if desc.first() != Some(&b'(') {
        return None;
    }
    let mut params = Vec::new();
    // (load opcode, slots) of the type starting at `i`; moves `i` past it.
    let one = |i: &mut usize| -> Option<(u8, u16)> {
        let mut array = false;
        while desc.get(*i) == Some(&b'[') {
            array = true;
            *i += 1;
        }
        let t = *desc.get(*i)?;
        if t == b'L' {
            *i += desc[*i..].iter().position(|&b| b == b';')? + 1;
            return Some((ALOAD, 1));
        }
        *i += 1;
        if array {
            return Some((ALOAD, 1));
        }
        Some(match t {
            b'B' | b'C' | b'I' | b'S' | b'Z' => (ILOAD, 1),
            b'J' => (LLOAD, 2),
            b'F' => (FLOAD, 1),
            b'D' => (DLOAD, 2),
            _ => return None,
        })
    };
    while *desc.get(i)? != b')' {
        params.push(one(&mut i)?);
    }
    i += 1;
    let (ret, ret_slots) = if desc.get(i) == Some(&b'V') {
        i += 1;
        (177, 0) // return
    } else {
        let (load, slots) = one(&mut i)?;
        // xreturn = xload + 151 (ireturn 172 .. areturn 176).
        (load + 151, slots)
    };
    (i == desc.len()).then_some((params, ret, ret_slots))
}

/// Wraps the wrappable native methods of `data`. `Ok(None)`: nothing to wrap (the class stays as it is).
pub fn wrap_natives(data: &[u8]) -> Result<Option<Wrapped>, Error> {
    let mut class = ClassFile::parse(data)?;
    if class.access_flags & ACC_INTERFACE != 0 || !class.methods.iter().any(|m| m.access_flags & ACC_NATIVE != 0) {
        return Ok(None);
    }
    let name = class.name()?.to_vec();
    if SkipPolicy::agent().class_reason(&name).is_some() || denied_class(&name) {
        return Ok(None);
    }
    let chosen: Vec<usize> = (0..class.methods.len()).filter(|&i| wrappable(&class, &class.methods[i])).collect();
    let mut plans = Vec::new();
    for &i in &chosen {
        let m = &class.methods[i];
        let mname = class.member_name(m)?.to_vec();
        let desc = class.member_descriptor(m)?.to_vec();
        let Some(sig) = signature(&desc) else { continue };
        plans.push((i, mname, desc, sig));
    }
    if plans.is_empty() {
        return Ok(None);
    }
    let cp = &mut class.constant_pool;
    let full = |_| Error::new("constant pool full", 0);
    let code_name = cp.add_utf8("Code").map_err(full)?;
    let mut natives = Vec::new();
    for (i, mname, desc, _) in &plans {
        let mut prefixed = NATIVE_PREFIX.as_bytes().to_vec();
        prefixed.extend_from_slice(mname);
        let n = cp.add_utf8_bytes(&prefixed).map_err(full)?;
        let d = cp.add_utf8_bytes(desc).map_err(full)?;
        let nat = cp.add(Constant::NameAndType(n, d)).map_err(full)?;
        let mref = cp.add(Constant::Methodref(class.this_class, nat)).map_err(full)?;
        natives.push((*i, n, d, mref));
    }
    let methods = &class.methods;
    let mut out = Vec::with_capacity(data.len() + 64 * plans.len() + cp.appended_bytes().len());
    out.extend_from_slice(&data[..8]);
    put_u16(&mut out, cp.count());
    out.extend_from_slice(&data[cp.original_range()]);
    out.extend_from_slice(cp.appended_bytes());
    let methods_count_at = methods[0].range.start - 2;
    out.extend_from_slice(&data[cp.original_range().end..methods_count_at]);
    let count = methods.len() + plans.len();
    if count > u16::MAX as usize {
        return Ok(None);
    }
    put_u16(&mut out, count as u16);
    let mut plan = plans.iter().zip(&natives).peekable();
    for (i, m) in methods.iter().enumerate() {
        let Some(((_, _, _, (params, ret, ret_slots)), &(_, _, _, mref))) = plan.next_if(|(p, _)| p.0 == i) else {
            out.extend_from_slice(&data[m.range.clone()]);
            continue;
        };
        let is_static = m.access_flags & ACC_STATIC != 0;
        put_u16(&mut out, m.access_flags & !ACC_NATIVE);
        put_u16(&mut out, m.name_index);
        put_u16(&mut out, m.descriptor_index);
        put_u16(&mut out, (m.attrs.end - m.attrs.start + 1) as u16);
        out.extend_from_slice(&data[m.range.start + 8..m.range.end]);
        // The wrapper's Code: load `this` and every parameter, call the prefixed native, return its value.
        let mut code = Vec::new();
        let mut slot: u16 = 0;
        if !is_static {
            code.extend_from_slice(&[25, 0]); // aload 0
            slot = 1;
        }
        for &(load, slots) in params {
            if slot > 255 {
                return Ok(None);
            }
            code.extend_from_slice(&[load, slot as u8]);
            slot += slots;
        }
        code.push(if is_static { 184 } else { 183 }); // invokestatic / invokespecial
        put_u16(&mut code, mref);
        code.push(*ret);
        let max_stack = slot.max(*ret_slots);
        put_u16(&mut out, code_name);
        put_u32(&mut out, (2 + 2 + 4 + code.len() + 2 + 2) as u32);
        put_u16(&mut out, max_stack);
        put_u16(&mut out, slot);
        put_u32(&mut out, code.len() as u32);
        out.extend_from_slice(&code);
        put_u16(&mut out, 0); // exception table
        put_u16(&mut out, 0); // attributes
    }
    let mut wrappers = Vec::new();
    for ((i, mname, desc, _), &(_, n, d, _)) in plans.iter().zip(&natives) {
        let flags = methods[*i].access_flags;
        // Private: not virtual, not seen by serialization's default serialVersionUID; not synchronized
        // (the wrapper holds the monitor).
        let native_flags = (flags & ACC_STATIC) | ACC_PRIVATE | ACC_NATIVE | ACC_SYNTHETIC;
        debug_assert_eq!(native_flags & ACC_SYNCHRONIZED, 0);
        put_u16(&mut out, native_flags);
        put_u16(&mut out, n);
        put_u16(&mut out, d);
        put_u16(&mut out, 0);
        wrappers.push((mname.clone(), desc.clone()));
    }
    let end = methods.last().map(|m| m.range.end).unwrap_or(methods_count_at + 2);
    out.extend_from_slice(&data[end..]);
    Ok(Some(Wrapped { bytes: out, wrappers }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        let (p, r, rs) = signature(b"(I[JLjava/lang/String;DZ)J").unwrap();
        assert_eq!(p, vec![(21, 1), (25, 1), (25, 1), (24, 2), (21, 1)]);
        assert_eq!((r, rs), (173, 2));
        assert_eq!(signature(b"()V").unwrap(), (vec![], 177, 0));
        assert_eq!(signature(b"()[[I").unwrap().1, 176);
        assert!(signature(b"(Q)V").is_none());
        assert!(signature(b"(I)").is_none());
    }

    #[test]
    fn denied_classes_and_nested_ones() {
        assert!(denied_class(b"java/lang/Object"));
        assert!(denied_class(b"java/lang/StackStreamFactory$AbstractStackWalker"));
        assert!(denied_class(b"jdk/internal/loader/NativeLibrary"));
        assert!(denied_class(b"jdk/internal/loader/NativeLibraries$NativeLibraryImpl"));
        assert!(!denied_class(b"java/lang/ObjectX"));
        assert!(!denied_class(b"java/io/FileInputStream"));
    }
}
