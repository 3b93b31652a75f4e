//! Turns CCT frame ids into named frames, off the sampling path, and builds the resolved [`Profile`].
//!
//! jmethodIDs are resolved through JVMTI with every error checked: the method of an unloaded class
//! yields `JVMTI_ERROR_INVALID_METHODID` on the JDKs kprof supports, and becomes `[unknown_method]`.
//! Names are cached for the agent's lifetime, so a method named once keeps its name after its class is
//! unloaded.

use crate::cct::SnapNode;
use crate::frame::{FrameId, FrameRef, Pseudo};
use crate::jvmti::{Jni, Jvmti};
use crate::profile::{Frame, FrameInterner, FrameKind, Meta, Node, Profile};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Names frames; keeps what it learned.
#[derive(Default)]
pub struct Resolver {
    cache: HashMap<FrameId, Frame>,
}

/// Where names come from besides JVMTI.
pub struct NameSources<'a> {
    pub jvmti: Jvmti,
    /// The calling thread's JNI environment, to free local references.
    pub jni: Option<Jni>,
    /// Thread names by thread number (`threads=on`).
    pub threads: &'a [String],
    /// Names of the method ids of rewritten code (bytecode and exact modes).
    pub methods: Option<&'a crate::rewrite::methods::MethodTable>,
}

/// `Ljava/util/HashMap;` → `java.util.HashMap`; hidden classes lose their address suffix
/// (`a.B$$Lambda+0x0000000800c03000` → `a.B$$Lambda`) so that runs can be compared.
pub fn class_name_from_signature(sig: &str) -> String {
    let inner = sig.strip_prefix('L').and_then(|s| s.strip_suffix(';')).unwrap_or(sig);
    let mut name = inner.replace('/', ".");
    if let Some(pos) = name.rfind("0x") {
        let tail = &name[pos + 2..];
        let sep = name[..pos].chars().last();
        if !tail.is_empty() && tail.chars().all(|c| c.is_ascii_hexdigit()) && matches!(sep, Some('.' | '+' | '/')) {
            name.truncate(pos - 1);
        }
    }
    name
}

impl Resolver {
    /// The named frame for `id`.
    pub fn frame(&mut self, id: FrameId, src: &NameSources) -> Frame {
        if let Some(f) = self.cache.get(&id) {
            return f.clone();
        }
        let frame = match id.decode() {
            Some(FrameRef::JMethod(m)) => resolve_method(src, m, FrameKind::Java),
            Some(FrameRef::JNative(m)) => resolve_method(src, m, FrameKind::Native),
            Some(FrameRef::Pseudo(p)) => Frame::pseudo(p.name()),
            Some(FrameRef::Thread(n)) => {
                Frame::thread(src.threads.get(n as usize).map(String::as_str).unwrap_or("unknown"))
            }
            Some(FrameRef::Method(id)) => match src.methods.and_then(|t| t.name(id)) {
                Some(m) => {
                    let mut f = Frame::java(&m.class.replace('/', "."), &m.name, &m.descriptor);
                    if m.native {
                        f.kind = FrameKind::Native;
                    }
                    f
                }
                None => Frame::pseudo(Pseudo::UnknownMethod.name()),
            },
            None => Frame::pseudo(Pseudo::UnknownMethod.name()),
        };
        // Do not cache failures of jmethodIDs: nothing changes them, but they are cheap and rare.
        self.cache.insert(id, frame.clone());
        frame
    }

    /// Builds the resolved profile from a CCT snapshot.
    pub fn profile(&mut self, snap: &[SnapNode], meta: Meta, src: &NameSources) -> Profile {
        let mut profile = Profile { meta, frames: Vec::new(), nodes: Vec::with_capacity(snap.len()) };
        let mut interner = FrameInterner::default();
        // Each frame id is named and interned once: an exact profile has millions of nodes and thousands
        // of frames, and cloning and hashing a name per node took seconds.
        let mut interned: HashMap<FrameId, u32, BuildHasherDefault<FrameIdHasher>> = HashMap::default();
        // Each node's children in one allocation of the right size (a push at a time regrew most of them).
        let mut child_counts = vec![0u32; snap.len()];
        for n in snap.iter().skip(1) {
            child_counts[n.parent as usize] += 1;
        }
        for (i, n) in snap.iter().enumerate() {
            let frame = match interned.get(&n.frame) {
                Some(&f) => f,
                None => {
                    let f = interner.intern(&mut profile, self.frame(n.frame, src));
                    interned.insert(n.frame, f);
                    f
                }
            };
            profile.nodes.push(Node {
                frame,
                callsite: n.callsite,
                samples: n.samples,
                weight: n.weight,
                calls: n.calls,
                blocks: Vec::new(),
                children: Vec::with_capacity(child_counts[i] as usize),
            });
            if i > 0 {
                profile.nodes[n.parent as usize].children.push(i as u32);
            }
        }
        profile
    }
}

/// Hashes a frame id (one `u64`) with a multiplication: the default hasher's cost, once per node, was a
/// noticeable part of writing an exact profile of millions of nodes.
#[derive(Default)]
struct FrameIdHasher(u64);

impl Hasher for FrameIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // The product's high bits are its well-mixed ones; the table indexes with the low ones.
        self.0 ^ (self.0 >> 29)
    }
}

fn resolve_method(src: &NameSources, method: u64, kind: FrameKind) -> Frame {
    let m = method as crate::jvmti::bindings::jmethodID;
    let Ok((name, sig)) = src.jvmti.method_name(m) else {
        return Frame::pseudo(Pseudo::UnknownMethod.name());
    };
    let class = match src.jvmti.method_declaring_class(m) {
        Ok(k) => {
            let c = src.jvmti.class_signature(k).map(|s| class_name_from_signature(&s)).unwrap_or_default();
            if let Some(jni) = src.jni {
                jni.delete_local_ref(k);
            }
            c
        }
        Err(_) => String::new(),
    };
    Frame { kind, class, method: name, signature: sig }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_from_signatures() {
        assert_eq!(class_name_from_signature("Ljava/util/HashMap;"), "java.util.HashMap");
        assert_eq!(class_name_from_signature("Ljava/util/Map$Entry;"), "java.util.Map$Entry");
        assert_eq!(class_name_from_signature("La/B$$Lambda$14.0x0000000800c03000;"), "a.B$$Lambda$14");
        assert_eq!(class_name_from_signature("La/B$$Lambda+0x00007f3c1c00a000;"), "a.B$$Lambda");
        assert_eq!(class_name_from_signature("La/Cafe0x;"), "a.Cafe0x");
        assert_eq!(class_name_from_signature("La/x0xff;"), "a.x0xff");
    }
}
