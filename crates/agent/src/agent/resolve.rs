//! Turns CCT frame ids into named frames, off the sampling path, and builds the resolved [`Profile`].
//!
//! jmethodIDs are resolved through JVMTI with every error checked: the method of an unloaded class
//! yields `JVMTI_ERROR_INVALID_METHODID` on the JDKs kprof supports, and becomes `[unknown_method]`.
//! Names are cached for the agent's lifetime, so a method named once keeps its name after its class is
//! unloaded.

use crate::cct::{SnapNode, Snapshot};
use crate::frame::{FrameId, FrameRef, Pseudo};
use crate::jvmti::{Jni, Jvmti};
use kprof_profile::output::json::{Children, NodeLine, NodeLines};
use kprof_profile::{add_into_parents, Frame, FrameInterner, FrameKind, Meta, Node, Profile};
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
    pub methods: Option<&'a kprof_classfile::transform::methods::MethodTable>,
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
            Some(FrameRef::Label(n)) => {
                Frame::pseudo(&crate::frame::label_name(n).unwrap_or_else(|| Pseudo::UnknownMethod.name().to_string()))
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

    /// Builds the resolved profile from a CCT snapshot (its nodes keep the snapshot's numbering).
    pub fn profile(&mut self, snapshot: &Snapshot, meta: Meta, src: &NameSources) -> Profile {
        let snap = &snapshot.nodes;
        let (frames, frame_of) = self.frames_of(snap, src);
        let mut profile = Profile::new(meta, &[]);
        profile.frames = frames;
        profile.nodes = Vec::with_capacity(snap.len());
        // Each node's children in one allocation of the right size (a push at a time regrew most of them).
        let mut child_counts = vec![0u32; snap.len()];
        for n in snap.iter().skip(1) {
            child_counts[n.parent as usize] += 1;
        }
        for (i, n) in snap.iter().enumerate() {
            profile.nodes.push(Node {
                frame: frame_of[i],
                callsite: n.callsite,
                blocks: Vec::new(),
                children: Vec::with_capacity(child_counts[i] as usize),
            });
            if i > 0 {
                profile.nodes[n.parent as usize].children.push(i as u32);
            }
        }
        for (&metric, column) in snapshot.metrics.iter().zip(&snapshot.columns) {
            profile.set_column(metric, column.clone());
        }
        profile
    }

    /// The snapshot named, for [`kprof_profile::output::json::write_tree_to`]: writing an exact profile of
    /// millions of contexts as JSON from it skips building a [`Profile`] (a node and a child list per
    /// context, 0.3 s of the JVM's exit on 4 million contexts). `None` unless the snapshot is numbered
    /// as [`crate::cct::Cct::snapshot`] numbers it: every child after its parent, siblings consecutive.
    pub fn resolved_snapshot<'a>(&mut self, snapshot: &'a Snapshot, src: &NameSources) -> Option<ResolvedSnapshot<'a>> {
        let snap = &snapshot.nodes;
        let mut first_child = vec![0u32; snap.len()];
        let mut child_count = vec![0u32; snap.len()];
        for (i, n) in snap.iter().enumerate().skip(1) {
            let p = n.parent as usize;
            if p >= i {
                return None;
            }
            if child_count[p] == 0 {
                first_child[p] = i as u32;
            } else if (first_child[p] + child_count[p]) as usize != i {
                return None;
            }
            child_count[p] += 1;
        }
        let (frames, frame_of) = self.frames_of(snap, src);
        Some(ResolvedSnapshot { snapshot, frames, frame_of, first_child, child_count })
    }

    /// The frames of a snapshot, each named and interned once (an exact profile has millions of nodes
    /// and thousands of frames: cloning and hashing a name per node took seconds), and each node's
    /// index into them.
    fn frames_of(&mut self, snap: &[SnapNode], src: &NameSources) -> (Vec<Frame>, Vec<u32>) {
        let mut frames = Vec::new();
        let mut interner = FrameInterner::default();
        let mut interned: HashMap<FrameId, u32, BuildHasherDefault<FrameIdHasher>> = HashMap::default();
        let frame_of = snap
            .iter()
            .map(|n| match interned.get(&n.frame) {
                Some(&f) => f,
                None => {
                    let f = interner.intern(&mut frames, self.frame(n.frame, src));
                    interned.insert(n.frame, f);
                    f
                }
            })
            .collect();
        (frames, frame_of)
    }
}

/// A CCT snapshot with its frames named: see [`Resolver::resolved_snapshot`].
pub struct ResolvedSnapshot<'a> {
    snapshot: &'a Snapshot,
    pub frames: Vec<Frame>,
    frame_of: Vec<u32>,
    first_child: Vec<u32>,
    child_count: Vec<u32>,
}

impl ResolvedSnapshot<'_> {
    /// Inclusive values of every node, a vector per metric of the snapshot: one backward sweep, each node
    /// added into its parent (which comes before it).
    pub fn totals(&self) -> Vec<Vec<u64>> {
        let nodes = &self.snapshot.nodes;
        self.snapshot
            .columns
            .iter()
            .map(|column| {
                let mut totals = column.clone();
                add_into_parents(&mut totals, |i| nodes[i].parent as usize);
                totals
            })
            .collect()
    }

    /// The metrics of the snapshot, in its order.
    pub fn metrics(&self) -> &[kprof_profile::Metric] {
        &self.snapshot.metrics
    }
}

impl NodeLines for ResolvedSnapshot<'_> {
    fn count(&self) -> usize {
        self.snapshot.nodes.len()
    }

    fn value(&self, i: usize, k: usize) -> u64 {
        self.snapshot.columns[k][i]
    }

    fn line(&self, i: usize) -> NodeLine<'_> {
        let n = &self.snapshot.nodes[i];
        let first = self.first_child[i];
        NodeLine {
            frame: self.frame_of[i],
            callsite: n.callsite,
            parent: if i == 0 { -1 } else { n.parent as i64 },
            blocks: &[],
            children: Children::Run(first..first + self.child_count[i]),
        }
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

    #[test]
    fn a_snapshot_written_directly_is_the_profile_written() {
        use crate::cct::{Cct, Metric};
        use crate::frame::Pseudo;
        let cct = Cct::with_bytes(1 << 20).unwrap();
        let metrics = [Metric::Calls, Metric::Bytecodes, Metric::Samples, Metric::Cpu];
        for m in metrics {
            cct.enable(m).unwrap();
        }
        // Thread and pseudo frames only: naming them needs no JVM.
        let root = crate::cct::ROOT;
        let mut x = 7u64;
        let mut nodes = vec![root];
        for i in 0..2000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let parent = nodes[(x >> 33) as usize % nodes.len()];
            let frame = if i % 3 == 0 { FrameId::pseudo(Pseudo::UnknownMethod) } else { FrameId::thread(i % 5) };
            let n = cct.child(parent, frame, (i % 4) as i32).unwrap();
            cct.add(n, Metric::Calls, (x >> 40) % 9);
            cct.add(n, Metric::Bytecodes, (x >> 50) % 100);
            cct.add_events(n, Metric::Samples, (x >> 45) % 3, Metric::Cpu, (x >> 30) % 1000);
            nodes.push(n);
        }
        let snap = cct.snapshot(&metrics);
        let threads: Vec<String> = (0..5).map(|t| format!("worker-{t}")).collect();
        // SAFETY: no frame of this tree is a method, so the environment is never called.
        let jvmti = unsafe { Jvmti::from_raw(std::ptr::null_mut()) };
        let src = NameSources { jvmti, jni: None, threads: &threads, methods: None };
        let meta = Meta { mode: "exact".into(), ..Meta::default() };
        let mut resolver = Resolver::default();
        let profile = resolver.profile(&snap, meta.clone(), &src);
        let tree = resolver.resolved_snapshot(&snap, &src).expect("the tree's own snapshot");
        let totals = tree.totals();
        let mut direct = Vec::new();
        kprof_profile::output::json::write_tree_to(&meta, &tree.frames, tree.metrics(), &tree, &totals, &mut direct)
            .unwrap();
        assert!(direct == kprof_profile::output::json::render(&profile), "the two ways wrote different text");
        assert_eq!(totals[0][0], profile.column(Metric::Calls).unwrap().iter().sum::<u64>());

        // Siblings apart, or a child before its parent: not a snapshot this writer takes.
        let mut apart = snap.clone();
        let last = apart.nodes.len() - 1;
        assert_ne!(snap.nodes[last].parent, 0, "the last node is deep in the tree, not one of the root's children");
        apart.nodes[last].parent = 0;
        assert!(resolver.resolved_snapshot(&apart, &src).is_none());
        let mut backwards = snap.clone();
        backwards.nodes[1].parent = 2;
        assert!(resolver.resolved_snapshot(&backwards, &src).is_none());
    }
}
