//! Method ids: the numbers rewritten code pushes to name the running method, and the names behind them.
//!
//! Ids are dense and assigned on first sight of (class, method, descriptor); the same method gets the
//! same id when its class is retransformed or defined again by another loader. Shared by every thread
//! that rewrites classes (the ClassFileLoadHook runs on many).

use std::collections::HashMap;
use std::sync::Mutex;

/// The name behind a method id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodName {
    /// Internal class name (`java/util/HashMap`).
    pub class: String,
    pub name: String,
    pub descriptor: String,
}

/// (class, method, descriptor), as in the class file.
type MethodKey = (Box<[u8]>, Box<[u8]>, Box<[u8]>);

#[derive(Default)]
struct Inner {
    ids: HashMap<MethodKey, u32>,
    names: Vec<MethodName>,
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

    /// The id of a method, assigned if new. `class` is the internal name.
    pub fn id(&self, class: &[u8], name: &[u8], descriptor: &[u8]) -> u32 {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (Box::<[u8]>::from(class), Box::<[u8]>::from(name), Box::<[u8]>::from(descriptor));
        if let Some(&id) = inner.ids.get(&key) {
            return id;
        }
        let id = inner.names.len() as u32;
        inner.names.push(MethodName {
            class: String::from_utf8_lossy(class).into_owned(),
            name: String::from_utf8_lossy(name).into_owned(),
            descriptor: String::from_utf8_lossy(descriptor).into_owned(),
        });
        inner.ids.insert(key, id);
        id
    }

    /// The name behind `id`.
    pub fn name(&self, id: u32) -> Option<MethodName> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).names.get(id as usize).cloned()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).names.len()
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
    }
}
