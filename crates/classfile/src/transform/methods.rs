//! Method ids: the numbers rewritten code pushes to name the running method, and the names behind them.
//!
//! Ids are dense and assigned on first sight of (class, method, descriptor); the same method gets the
//! same id when its class is retransformed or defined again by another loader. Shared by every thread
//! that rewrites classes (the ClassFileLoadHook runs on many).
//!
//! Exact mode with `bb=on` also records each method's basic blocks: its node arrays hold one counter per
//! block, so one id must always mean one block layout. A method whose code differs between two loaders
//! (two versions of a class) gets a second id with the same name when its blocks differ.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The name behind a method id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodName {
    /// Internal class name (`java/util/HashMap`).
    pub class: String,
    pub name: String,
    pub descriptor: String,
    /// A native method (exact mode's wrapper of it counts its calls).
    pub native: bool,
}

/// One basic block of a method as exact mode counts it: bytecode range and instruction count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSpan {
    pub start_bci: u32,
    pub end_bci: u32,
    pub insns: u32,
}

/// The blocks of one method: the spans, and whether the first block is counted by the prologue (nothing
/// jumps back to it, so it runs once per call and has no counter of its own); and its callsites, the
/// bytecode index of each call and `new` in code order (exact mode's callers name a call by its number
/// there, 1 for the first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodBlocks {
    pub spans: Vec<BlockSpan>,
    pub first_counted_by_calls: bool,
    pub sites: Vec<u32>,
}

impl MethodBlocks {
    /// The bci of callsite number `site` (1-based); -1 for 0 (no known callsite) and numbers out of range.
    pub fn site_bci(&self, site: u32) -> i32 {
        match site.checked_sub(1).and_then(|i| self.sites.get(i as usize)) {
            Some(&bci) => bci as i32,
            None => -1,
        }
    }
}

/// What a method's frame is to bytecode mode's stack: not rewritten (its frames are not part of a context)...
pub const STACK_NONE: u8 = 0;
/// ... rewritten, but not on the reified stack (a leaf: it names itself only when it samples) ...
pub const STACK_LEAF: u8 = 1;
/// ... or rewritten and on the reified stack while it runs.
pub const STACK_PUSHED: u8 = 2;

/// (class, method, descriptor, native), as in the class file.
type MethodKey = (Box<[u8]>, Box<[u8]>, Box<[u8]>, bool);

#[derive(Default)]
struct Inner {
    /// Every id of a key (more than one only for methods whose blocks differ between loaders).
    ids: HashMap<MethodKey, Vec<u32>>,
    names: Vec<MethodName>,
    /// Per id: [`STACK_NONE`], [`STACK_LEAF`] or [`STACK_PUSHED`].
    stack: Vec<u8>,
    blocks: Vec<Option<Arc<MethodBlocks>>>,
    /// Call sites by id: (method id, bci of the call).
    sites: Vec<(u32, u32)>,
    site_ids: HashMap<(u32, u32), u32>,
}

/// The table of method ids.
#[derive(Default)]
pub struct MethodTable {
    inner: Mutex<Inner>,
}

impl MethodTable {
    pub fn new() -> MethodTable {
        MethodTable::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The id of a method, assigned if new. `class` is the internal name.
    pub fn id(&self, class: &[u8], name: &[u8], descriptor: &[u8]) -> u32 {
        self.id_of(class, name, descriptor, false, None)
    }

    /// The id of native method `name` (a frame named as native).
    pub fn native_id(&self, class: &[u8], name: &[u8], descriptor: &[u8]) -> u32 {
        self.id_of(class, name, descriptor, true, None)
    }

    /// Bytecode mode rewrote method `id`, which the reified stack holds while it runs if `pushed`.
    pub fn mark_rewritten(&self, id: u32, pushed: bool) {
        if let Some(k) = self.lock().stack.get_mut(id as usize) {
            *k = if pushed { STACK_PUSHED } else { STACK_LEAF };
        }
    }

    /// The id of a (non-native) method already in the table, and what its frames are to bytecode mode's
    /// stack ([`STACK_NONE`] for a method never rewritten).
    pub fn find(&self, class: &[u8], name: &[u8], descriptor: &[u8]) -> Option<(u32, u8)> {
        let inner = self.lock();
        let key = (Box::<[u8]>::from(class), Box::<[u8]>::from(name), Box::<[u8]>::from(descriptor), false);
        let id = *inner.ids.get(&key)?.first()?;
        Some((id, inner.stack.get(id as usize).copied().unwrap_or(STACK_NONE)))
    }

    /// The id of a method whose node arrays hold one counter per block of `blocks`: an id already
    /// recorded with the same blocks (or with none), else a new one.
    pub fn id_with_blocks(&self, class: &[u8], name: &[u8], descriptor: &[u8], blocks: MethodBlocks) -> u32 {
        self.id_of(class, name, descriptor, false, Some(blocks))
    }

    fn id_of(&self, class: &[u8], name: &[u8], descriptor: &[u8], native: bool, blocks: Option<MethodBlocks>) -> u32 {
        let mut inner = self.lock();
        let key = (Box::<[u8]>::from(class), Box::<[u8]>::from(name), Box::<[u8]>::from(descriptor), native);
        if let Some(ids) = inner.ids.get(&key) {
            let found = match &blocks {
                None => Some(ids[0]),
                Some(b) => {
                    ids.iter().copied().find(|&id| inner.blocks[id as usize].as_deref().is_none_or(|have| have == b))
                }
            };
            if let Some(id) = found {
                if let Some(b) = blocks {
                    if inner.blocks[id as usize].is_none() {
                        inner.blocks[id as usize] = Some(Arc::new(b));
                    }
                }
                return id;
            }
        }
        let id = inner.names.len() as u32;
        inner.names.push(MethodName {
            class: String::from_utf8_lossy(class).into_owned(),
            name: String::from_utf8_lossy(name).into_owned(),
            descriptor: String::from_utf8_lossy(descriptor).into_owned(),
            native,
        });
        inner.blocks.push(blocks.map(Arc::new));
        inner.stack.push(STACK_NONE);
        inner.ids.entry(key).or_default().push(id);
        id
    }

    /// The id of the call at `bci` in method `method` (bytecode mode's stack entries with callsite=on).
    pub fn site(&self, method: u32, bci: u32) -> u32 {
        let mut inner = self.lock();
        if let Some(&id) = inner.site_ids.get(&(method, bci)) {
            return id;
        }
        let id = inner.sites.len() as u32;
        inner.sites.push((method, bci));
        inner.site_ids.insert((method, bci), id);
        id
    }

    /// The method and bci of call site `id`.
    pub fn site_of(&self, id: u32) -> Option<(u32, u32)> {
        self.lock().sites.get(id as usize).copied()
    }

    /// The name behind `id`.
    pub fn name(&self, id: u32) -> Option<MethodName> {
        self.lock().names.get(id as usize).cloned()
    }

    /// The blocks recorded for `id` (exact mode).
    pub fn blocks(&self, id: u32) -> Option<Arc<MethodBlocks>> {
        self.lock().blocks.get(id as usize).cloned().flatten()
    }

    pub fn len(&self) -> usize {
        self.lock().names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_and_stable() {
        let t = MethodTable::new();
        let a = t.id(b"a/B", b"f", b"()V");
        let b = t.id(b"a/B", b"f", b"(I)V");
        assert_eq!((a, b), (0, 1));
        assert_eq!(t.id(b"a/B", b"f", b"()V"), a);
        assert_eq!(t.name(b).unwrap().descriptor, "(I)V");
        assert_eq!(t.len(), 2);
        assert!(t.name(7).is_none());
        let n = t.native_id(b"a/B", b"f", b"()V");
        assert_ne!(n, a);
        assert!(t.name(n).unwrap().native);
        assert_eq!(t.find(b"a/B", b"f", b"()V"), Some((a, STACK_NONE)));
        t.mark_rewritten(a, true);
        t.mark_rewritten(b, false);
        assert_eq!(t.find(b"a/B", b"f", b"()V"), Some((a, STACK_PUSHED)));
        assert_eq!(t.find(b"a/B", b"f", b"(I)V"), Some((b, STACK_LEAF)));
        assert_eq!(t.find(b"a/B", b"g", b"()V"), None);
    }

    #[test]
    fn site_ids_are_dense_and_name_their_call() {
        let t = MethodTable::new();
        let m = t.id(b"a/B", b"f", b"()V");
        let s0 = t.site(m, 4);
        let s1 = t.site(m, 9);
        assert_eq!((s0, s1), (0, 1));
        assert_eq!(t.site(m, 4), s0);
        assert_eq!(t.site_of(s1), Some((m, 9)));
        assert_eq!(t.site_of(2), None);
    }

    #[test]
    fn one_id_per_block_layout() {
        let t = MethodTable::new();
        let blocks = |n: u32| MethodBlocks {
            spans: (0..n).map(|i| BlockSpan { start_bci: i, end_bci: i + 1, insns: 1 }).collect(),
            first_counted_by_calls: true,
            sites: vec![],
        };
        let plain = t.id(b"a/B", b"f", b"()V");
        let a = t.id_with_blocks(b"a/B", b"f", b"()V", blocks(2));
        assert_eq!(a, plain, "an id without blocks takes the first layout");
        assert_eq!(t.id_with_blocks(b"a/B", b"f", b"()V", blocks(2)), a);
        let b = t.id_with_blocks(b"a/B", b"f", b"()V", blocks(3));
        assert_ne!(a, b);
        assert_eq!(t.name(a), t.name(b));
        assert_eq!(t.blocks(b).unwrap().spans.len(), 3);
        assert_eq!(t.id(b"a/B", b"f", b"()V"), a);
    }
}
