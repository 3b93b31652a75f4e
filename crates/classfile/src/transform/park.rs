//! Park bracketing for mode=lock: every `invokevirtual jdk/internal/misc/Unsafe.park(ZJ)V` of a class
//! (the agent applies it to `java.util.concurrent.locks.LockSupport`, where every `java.util.concurrent`
//! lock, semaphore, latch and condition waits) becomes `invokestatic kprof/runtime/Lk.park(Ljdk/internal/
//! misc/Unsafe;ZJ)V`, a helper that calls the same `Unsafe.park` with the same arguments and measures how
//! long it took.
//!
//! The edit is made in place: both instructions are three bytes (an opcode and a constant-pool index) and
//! take the same operands from the stack (the receiver becomes the helper's first argument) and leave
//! nothing, so no offset, exception range or stack map frame changes, and the method's code keeps its size.
//! Only a `Methodref` is appended to the constant pool. That also makes the edit compose with the other
//! rewriting transforms in either order: whatever they insert around the call stays where it was.

use crate::bytes::put_u16;
use crate::opcodes::{INVOKESTATIC, INVOKEVIRTUAL};
use crate::{write_class, ClassFile, Result};

/// The class the agent rewrites.
pub const LOCK_SUPPORT: &str = "java/util/concurrent/locks/LockSupport";
/// The call that is redirected.
pub const UNSAFE: &str = "jdk/internal/misc/Unsafe";
pub const PARK: &str = "park";
pub const PARK_DESCRIPTOR: &str = "(ZJ)V";
/// The helper that takes its place: the receiver becomes its first argument.
pub const HELPER_CLASS: &str = "kprof/runtime/Lk";
pub const HELPER_DESCRIPTOR: &str = "(Ljdk/internal/misc/Unsafe;ZJ)V";

/// A class whose park calls go through the helper.
#[derive(Debug)]
pub struct Bracketed {
    pub bytes: Vec<u8>,
    /// How many calls were redirected.
    pub calls: usize,
}

/// Redirects every `Unsafe.park(ZJ)V` call of `data` to the helper. `Ok(None)`: the class has no such call
/// (it is left as it is).
pub fn bracket_parks(data: &[u8]) -> Result<Option<Bracketed>> {
    let mut class = ClassFile::parse(data)?;
    // Offsets (in `data`) of the invokevirtual instructions to rewrite.
    let mut sites = Vec::new();
    for i in 0..class.methods.len() {
        let Some(code) = class.method_code(i)? else { continue };
        let start = code.attr.offset + 6 + if code.narrow { 4 } else { 8 };
        for insn in code.instructions() {
            let insn = insn?;
            if insn.opcode != INVOKEVIRTUAL {
                continue;
            }
            let at = insn.offset as usize;
            let index = u16::from_be_bytes([code.code[at + 1], code.code[at + 2]]);
            let (owner, name, desc) = class.constant_pool.member_ref(index)?;
            if owner == UNSAFE.as_bytes() && name == PARK.as_bytes() && desc == PARK_DESCRIPTOR.as_bytes() {
                sites.push(start + at);
            }
        }
    }
    if sites.is_empty() {
        return Ok(None);
    }
    let helper = class.constant_pool.add_methodref(HELPER_CLASS, PARK, HELPER_DESCRIPTOR)?;
    let mut out = Vec::with_capacity(data.len() + 64);
    write_class(&class, &[], &[], false, &mut out)?;
    // Everything after the constant pool moved by what was appended to it.
    let shift = out.len() - data.len();
    let mut operand = Vec::with_capacity(2);
    put_u16(&mut operand, helper);
    for &at in &sites {
        out[at + shift] = INVOKESTATIC;
        out[at + shift + 1..at + shift + 3].copy_from_slice(&operand);
    }
    Ok(Some(Bracketed { bytes: out, calls: sites.len() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constant_pool::Constant;
    use crate::opcodes::*;

    const ICONST_1: u8 = 4;
    const LCONST_0: u8 = 9;
    const LCONST_1: u8 = 10;
    const DCONST_1: u8 = 15;
    const ALOAD_0: u8 = 42;

    /// A class `T` of version 61 with one static method `m(Ljdk/internal/misc/Unsafe;)V` whose code is
    /// `code` (max_stack 8, max_locals 4), and the constant-pool indexes of `Unsafe.park(ZJ)V`,
    /// `Unsafe.unpark(Ljava/lang/Object;)V` and `Unsafe.park(ZJ)V` of another class (`sun/misc/Unsafe`).
    fn class_with(code: impl Fn(u16, u16, u16) -> Vec<u8>) -> Vec<u8> {
        let mut pool = Vec::new();
        let mut n: u16 = 1;
        let mut add = |c: Constant<'_>| {
            c.encode(&mut pool);
            n += 1;
            n - 1
        };
        let this_name = add(Constant::Utf8(b"T"));
        let this = add(Constant::Class(this_name));
        let object_name = add(Constant::Utf8(b"java/lang/Object"));
        let object = add(Constant::Class(object_name));
        let unsafe_name = add(Constant::Utf8(UNSAFE.as_bytes()));
        let unsafe_class = add(Constant::Class(unsafe_name));
        let sun_name = add(Constant::Utf8(b"sun/misc/Unsafe"));
        let sun = add(Constant::Class(sun_name));
        let park = add(Constant::Utf8(b"park"));
        let park_desc = add(Constant::Utf8(b"(ZJ)V"));
        let park_nat = add(Constant::NameAndType(park, park_desc));
        let unpark = add(Constant::Utf8(b"unpark"));
        let unpark_desc = add(Constant::Utf8(b"(Ljava/lang/Object;)V"));
        let unpark_nat = add(Constant::NameAndType(unpark, unpark_desc));
        let park_ref = add(Constant::Methodref(unsafe_class, park_nat));
        let unpark_ref = add(Constant::Methodref(unsafe_class, unpark_nat));
        let other_ref = add(Constant::Methodref(sun, park_nat));
        let m = add(Constant::Utf8(b"m"));
        let m_desc = add(Constant::Utf8(b"(Ljdk/internal/misc/Unsafe;)V"));
        let code_name = add(Constant::Utf8(b"Code"));
        let body = code(park_ref, unpark_ref, other_ref);
        let mut c = Vec::new();
        c.extend_from_slice(&0xCAFEBABEu32.to_be_bytes());
        put_u16(&mut c, 0);
        put_u16(&mut c, 61);
        put_u16(&mut c, n);
        c.extend_from_slice(&pool);
        put_u16(&mut c, 0x0021); // public super
        put_u16(&mut c, this);
        put_u16(&mut c, object);
        put_u16(&mut c, 0); // interfaces
        put_u16(&mut c, 0); // fields
        put_u16(&mut c, 1); // methods
        put_u16(&mut c, 0x0009); // public static
        put_u16(&mut c, m);
        put_u16(&mut c, m_desc);
        put_u16(&mut c, 1);
        put_u16(&mut c, code_name);
        c.extend_from_slice(&(12 + body.len() as u32).to_be_bytes());
        put_u16(&mut c, 8);
        put_u16(&mut c, 4);
        c.extend_from_slice(&(body.len() as u32).to_be_bytes());
        c.extend_from_slice(&body);
        put_u16(&mut c, 0); // exception table
        put_u16(&mut c, 0); // attributes of Code
        put_u16(&mut c, 0); // attributes of the class
        c
    }

    fn invoke(op: u8, index: u16) -> Vec<u8> {
        let mut v = vec![op];
        put_u16(&mut v, index);
        v
    }

    /// (owner, name, descriptor) of every invoke instruction of method 0.
    fn calls(data: &[u8]) -> Vec<(u8, String)> {
        let class = ClassFile::parse(data).unwrap();
        let code = class.method_code(0).unwrap().unwrap();
        code.instructions()
            .map(|i| i.unwrap())
            .filter(|i| (INVOKEVIRTUAL..=INVOKEINTERFACE).contains(&i.opcode))
            .map(|i| {
                let at = i.offset as usize;
                let index = u16::from_be_bytes([code.code[at + 1], code.code[at + 2]]);
                let (o, n, d) = class.constant_pool.member_ref(index).unwrap();
                let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                (i.opcode, format!("{}.{}{}", s(o), s(n), s(d)))
            })
            .collect()
    }

    #[test]
    fn park_calls_go_to_the_helper_and_nothing_else_moves() {
        let data = class_with(|park, unpark, _| {
            // aload_0 iconst_0 lconst_0 invokevirtual park; aload_0 aconst_null invokevirtual unpark;
            // aload_0 iconst_1 lconst_1 invokevirtual park; return
            let mut c = vec![ALOAD_0, ICONST_0, LCONST_0];
            c.extend(invoke(INVOKEVIRTUAL, park));
            c.extend([ALOAD_0, ACONST_NULL]);
            c.extend(invoke(INVOKEVIRTUAL, unpark));
            c.extend([ALOAD_0, ICONST_1, LCONST_1]);
            c.extend(invoke(INVOKEVIRTUAL, park));
            c.push(RETURN);
            c
        });
        let out = bracket_parks(&data).unwrap().expect("two park calls");
        assert_eq!(out.calls, 2);
        let helper = format!("{HELPER_CLASS}.park{HELPER_DESCRIPTOR}");
        assert_eq!(
            calls(&out.bytes),
            vec![
                (INVOKESTATIC, helper.clone()),
                (INVOKEVIRTUAL, "jdk/internal/misc/Unsafe.unpark(Ljava/lang/Object;)V".to_string()),
                (INVOKESTATIC, helper),
            ]
        );
        // The code has the same length and the same bytes but for the two call instructions.
        let before = ClassFile::parse(&data).unwrap();
        let after = ClassFile::parse(&out.bytes).unwrap();
        let (b, a) = (before.method_code(0).unwrap().unwrap(), after.method_code(0).unwrap().unwrap());
        assert_eq!(a.code.len(), b.code.len());
        let differ: Vec<usize> = (0..a.code.len()).filter(|&i| a.code[i] != b.code[i]).collect();
        assert!(differ.contains(&3) && differ.contains(&14), "{differ:?}");
        assert!(differ.iter().all(|&i| (3..6).contains(&i) || (14..17).contains(&i)), "{differ:?}");
        assert!(after.constant_pool.count() > before.constant_pool.count());
        // Bracketing twice finds nothing more to do.
        assert!(bracket_parks(&out.bytes).unwrap().is_none());
    }

    #[test]
    fn other_calls_and_look_alike_bytes_are_left_alone() {
        let data = class_with(|park, unpark, other| {
            // `sipush` whose operand and the next opcode read as `invokevirtual park` (park is constant 15,
            // the opcode dconst_1); the same name and descriptor on another class; unpark; return
            assert_eq!(park, DCONST_1 as u16);
            let mut c = vec![SIPUSH, INVOKEVIRTUAL, 0, DCONST_1, POP2, POP];
            c.extend([ALOAD_0, ICONST_0, LCONST_0]);
            c.extend(invoke(INVOKEVIRTUAL, other));
            c.extend([ALOAD_0, ACONST_NULL]);
            c.extend(invoke(INVOKEVIRTUAL, unpark));
            c.push(RETURN);
            c
        });
        assert!(bracket_parks(&data).unwrap().is_none());
    }

    #[test]
    fn malformed_classes_are_errors() {
        let data = class_with(|park, _, _| {
            let mut c = vec![ALOAD_0, ICONST_0, LCONST_0];
            c.extend(invoke(INVOKEVIRTUAL, park));
            c.push(RETURN);
            c
        });
        for cut in [10, data.len() / 2, data.len() - 1] {
            assert!(bracket_parks(&data[..cut]).is_err(), "cut at {cut}");
        }
        // An invokevirtual whose index is not a method reference.
        let bad = class_with(|_, _, _| {
            let mut c = vec![ALOAD_0, ICONST_0, LCONST_0];
            c.extend(invoke(INVOKEVIRTUAL, 1));
            c.push(RETURN);
            c
        });
        assert!(bracket_parks(&bad).is_err());
    }
}
