//! A fixed seed for the iteration order of the JDK's immutable collections.
//!
//! `java.util.ImmutableCollections` (behind `Set.of`, `Map.of` and their copies) starts every iteration of a
//! set or map at a place derived from a salt that its class initializer draws from `System.nanoTime()`, so
//! that programs cannot come to depend on one order. The JDK's own code iterates such collections all the
//! time (the module graph, the built-in class loaders' package maps, java.lang.invoke's option sets), and
//! the order decides how many bytecodes it runs: every run would count differently. The counting modes
//! replace that one call by a constant as the class is defined, as the JDK itself does when it dumps a
//! class-data-sharing archive: every run then iterates in the same order, one of the orders the JDK may
//! pick. No other code changes.

use crate::code::Instructions;
use crate::opcodes::{INVOKESTATIC, LDC2_W};
use crate::{write_class, ClassFile, Constant};

/// The class whose initializer draws the salt.
pub const CLASS: &str = "java/util/ImmutableCollections";
/// The seed the salt is made from (any constant: a slice of the golden ratio).
pub const SEED: i64 = 0x9E37_79B9_7F4A_7C15_u64 as i64;

/// `data` (the class file of [`CLASS`]) with the one `System.nanoTime()` call of its class initializer
/// replaced by `ldc2_w SEED`: the same length and the same stack effect, so nothing else moves. `None` when
/// the class does not have exactly one such call there (another JDK: it is then left as it is).
pub fn fix_seed(data: &[u8]) -> Option<Vec<u8>> {
    let mut class = ClassFile::parse(data).ok()?;
    let clinit =
        (0..class.methods.len()).find(|&i| class.member_name(&class.methods[i]).is_ok_and(|n| n == b"<clinit>"))?;
    let code = class.method_code(clinit).ok()??;
    let mut calls = Vec::new();
    for insn in Instructions::new(code.code) {
        let insn = insn.ok()?;
        if insn.opcode != INVOKESTATIC {
            continue;
        }
        let at = insn.offset as usize;
        let index = u16::from_be_bytes([*code.code.get(at + 1)?, *code.code.get(at + 2)?]);
        if class.constant_pool.member_ref(index).ok()? == (&b"java/lang/System"[..], &b"nanoTime"[..], &b"()J"[..]) {
            calls.push(at);
        }
    }
    let [call] = calls[..] else { return None };
    // Where the call is in `data`: the code is a slice of it.
    let at = code.code.as_ptr() as usize - data.as_ptr() as usize + call;
    let seed = class.constant_pool.add(Constant::Long(SEED)).ok()?;
    let mut out = Vec::with_capacity(data.len() + 16);
    write_class(&class, &[], &[], false, &mut out).ok()?;
    // Everything after the constant pool moved by the bytes the new constant took.
    let at = at + class.constant_pool.appended_bytes().len();
    let [hi, lo] = seed.to_be_bytes();
    out[at..at + 3].copy_from_slice(&[LDC2_W, hi, lo]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class as the JDK at `home` has it (from its `lib/modules` image, through `jimage`), if there.
    fn jdk_class(home: &std::path::Path) -> Option<Vec<u8>> {
        let dir = std::env::temp_dir().join(format!(
            "kprof-seed-{}-{}",
            std::process::id(),
            home.display().to_string().len()
        ));
        let status = std::process::Command::new(home.join("bin/jimage"))
            .args(["extract", "--include", "regex:.*/java/util/ImmutableCollections.class", "--dir"])
            .arg(&dir)
            .arg(home.join("lib/modules"))
            .status()
            .ok()?;
        let data = status
            .success()
            .then(|| std::fs::read(dir.join("java.base/java/util/ImmutableCollections.class")).ok())??;
        let _ = std::fs::remove_dir_all(&dir);
        Some(data)
    }

    #[test]
    fn replaces_the_one_nano_time_call_of_every_installed_jdk() {
        let mut seen = 0;
        for entry in std::fs::read_dir("/usr/lib/jvm").into_iter().flatten().flatten() {
            let Some(data) = jdk_class(&entry.path()) else { continue };
            let out = fix_seed(&data).unwrap_or_else(|| panic!("{}: no single nanoTime call", entry.path().display()));
            let class = ClassFile::parse(&out).unwrap();
            assert_eq!(class.methods.len(), ClassFile::parse(&data).unwrap().methods.len());
            // The patched class has no nanoTime call left, and the seed constant is loaded.
            assert!(fix_seed(&out).is_none());
            assert_eq!(out.len(), data.len() + 9, "one long constant (9 bytes) appended, nothing else");
            seen += 1;
        }
        assert!(seen > 0, "no JDK under /usr/lib/jvm has a jimage to read the class from");
    }
}
