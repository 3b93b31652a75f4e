//! Frame identities as the CCT stores them: one `u64` that says what kind of frame it is and which one.
//!
//! The engines produce different raw identities (a `jmethodID` from AsyncGetCallTrace, a method number
//! assigned by the class rewriter, a pseudo-frame code, a thread number); the resolver turns each into a
//! name once, off the hot paths. The kind lives in the top four bits; user-space pointers on x86-64 and
//! aarch64 stay below 2^56, so a `jmethodID` is stored as is.

/// A frame identity in the CCT. `FrameId(0)` is never a valid frame.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct FrameId(pub u64);

/// What a [`FrameId`] refers to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FrameRef {
    /// A `jmethodID` (asgct mode): a Java method, interpreted, compiled or inlined.
    JMethod(u64),
    /// A JNI native method seen by AsyncGetCallTrace (bci -3): same method id, shown as native.
    JNative(u64),
    /// A method number assigned by the class rewriter (bytecode and exact modes).
    Method(u32),
    /// A pseudo-frame, see [`Pseudo`].
    Pseudo(Pseudo),
    /// A thread root (`threads=on`): the agent's thread number.
    Thread(u32),
    /// A label an engine made ([`label`]): `[alloc byte[]]`, `[lock java.lang.Object]`, a thread state.
    Label(u32),
}

const KIND_SHIFT: u32 = 60;
const PAYLOAD: u64 = (1 << KIND_SHIFT) - 1;
const KIND_JMETHOD: u64 = 0;
const KIND_JNATIVE: u64 = 1;
const KIND_METHOD: u64 = 2;
const KIND_PSEUDO: u64 = 3;
const KIND_THREAD: u64 = 4;
const KIND_LABEL: u64 = 5;

impl FrameId {
    pub fn jmethod(id: u64) -> FrameId {
        FrameId((KIND_JMETHOD << KIND_SHIFT) | (id & PAYLOAD))
    }
    pub fn jnative(id: u64) -> FrameId {
        FrameId((KIND_JNATIVE << KIND_SHIFT) | (id & PAYLOAD))
    }
    pub fn method(id: u32) -> FrameId {
        FrameId((KIND_METHOD << KIND_SHIFT) | id as u64)
    }
    pub fn pseudo(p: Pseudo) -> FrameId {
        FrameId((KIND_PSEUDO << KIND_SHIFT) | p as u64)
    }
    pub fn thread(n: u32) -> FrameId {
        FrameId((KIND_THREAD << KIND_SHIFT) | n as u64)
    }
    fn label_number(n: u32) -> FrameId {
        FrameId((KIND_LABEL << KIND_SHIFT) | n as u64)
    }

    /// What this identity refers to; `None` for a value no constructor makes.
    pub fn decode(self) -> Option<FrameRef> {
        let payload = self.0 & PAYLOAD;
        match self.0 >> KIND_SHIFT {
            KIND_JMETHOD if payload != 0 => Some(FrameRef::JMethod(payload)),
            KIND_JNATIVE => Some(FrameRef::JNative(payload)),
            KIND_METHOD => Some(FrameRef::Method(payload as u32)),
            KIND_PSEUDO => Pseudo::from_code(payload).map(FrameRef::Pseudo),
            KIND_THREAD => Some(FrameRef::Thread(payload as u32)),
            KIND_LABEL => Some(FrameRef::Label(payload as u32)),
            _ => None,
        }
    }
}

/// Labels by number ([`FrameRef::Label`]).
static LABELS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The frame of the label `name` (bracketed by convention: `[alloc byte[]]`), the same id for the same name
/// for the process's life. Takes a lock: not for a signal handler (which uses ids made beforehand).
pub fn label(name: &str) -> FrameId {
    let mut labels = LABELS.lock().unwrap_or_else(|e| e.into_inner());
    let n = match labels.iter().position(|l| l == name) {
        Some(n) => n,
        None => {
            labels.push(name.to_string());
            labels.len() - 1
        }
    };
    FrameId::label_number(n as u32)
}

/// The name of label number `n`.
pub fn label_name(n: u32) -> Option<String> {
    LABELS.lock().unwrap_or_else(|e| e.into_inner()).get(n as usize).cloned()
}

/// Pseudo-frames: what a sample shows when there is no Java method to name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Pseudo {
    /// The tree's root.
    Root = 1,
    /// Samples that arrived when the CCT arena was full.
    Overflow,
    /// The stack was deeper than `depth`: the outer frames were cut here.
    Truncated,
    /// AsyncGetCallTrace: no Java frame / thread not in Java (0, -3, -8).
    NotJava,
    /// AsyncGetCallTrace -1: class loading was not enabled (should not happen).
    NoClassLoad,
    /// -2
    GcActive,
    /// -4
    NotWalkableNotJava,
    /// -5
    UnknownJava,
    /// -6
    NotWalkableJava,
    /// -7
    UnknownState,
    /// -9
    Deoptimization,
    /// -10
    Safepoint,
    /// Any other negative AsyncGetCallTrace result.
    UnknownError,
    /// A frame whose method could not be named (a jmethodID of an unloaded class, say).
    UnknownMethod,
}

impl Pseudo {
    const ALL: [Pseudo; 14] = [
        Pseudo::Root,
        Pseudo::Overflow,
        Pseudo::Truncated,
        Pseudo::NotJava,
        Pseudo::NoClassLoad,
        Pseudo::GcActive,
        Pseudo::NotWalkableNotJava,
        Pseudo::UnknownJava,
        Pseudo::NotWalkableJava,
        Pseudo::UnknownState,
        Pseudo::Deoptimization,
        Pseudo::Safepoint,
        Pseudo::UnknownError,
        Pseudo::UnknownMethod,
    ];

    fn from_code(code: u64) -> Option<Pseudo> {
        Pseudo::ALL.iter().copied().find(|p| *p as u64 == code)
    }

    /// The pseudo-frame for a non-positive AsyncGetCallTrace result.
    pub fn from_asgct(num_frames: i32) -> Pseudo {
        match num_frames {
            0 | -3 | -8 => Pseudo::NotJava,
            -1 => Pseudo::NoClassLoad,
            -2 => Pseudo::GcActive,
            -4 => Pseudo::NotWalkableNotJava,
            -5 => Pseudo::UnknownJava,
            -6 => Pseudo::NotWalkableJava,
            -7 => Pseudo::UnknownState,
            -9 => Pseudo::Deoptimization,
            -10 => Pseudo::Safepoint,
            _ => Pseudo::UnknownError,
        }
    }

    /// The bracketed name the outputs show.
    pub fn name(self) -> &'static str {
        match self {
            Pseudo::Root => "[root]",
            Pseudo::Overflow => "[cct_overflow]",
            Pseudo::Truncated => "[truncated]",
            Pseudo::NotJava => "[not_java]",
            Pseudo::NoClassLoad => "[no_class_load]",
            Pseudo::GcActive => "[GC_active]",
            Pseudo::NotWalkableNotJava => "[not_walkable_not_Java]",
            Pseudo::UnknownJava => "[unknown_Java]",
            Pseudo::NotWalkableJava => "[not_walkable_Java]",
            Pseudo::UnknownState => "[unknown_state]",
            Pseudo::Deoptimization => "[deoptimization]",
            Pseudo::Safepoint => "[safepoint]",
            Pseudo::UnknownError => "[asgct_error]",
            Pseudo::UnknownMethod => "[unknown_method]",
        }
    }

    /// Whether a sample ending in this pseudo-frame counts as usable (it has a Java frame).
    pub fn is_usable(self) -> bool {
        matches!(self, Pseudo::Root | Pseudo::Truncated | Pseudo::UnknownMethod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_kind() {
        let ptr = 0x7f12_3456_7890u64;
        assert_eq!(FrameId::jmethod(ptr).decode(), Some(FrameRef::JMethod(ptr)));
        assert_eq!(FrameId::jnative(ptr).decode(), Some(FrameRef::JNative(ptr)));
        assert_eq!(FrameId::method(77).decode(), Some(FrameRef::Method(77)));
        assert_eq!(FrameId::thread(3).decode(), Some(FrameRef::Thread(3)));
        for p in Pseudo::ALL {
            assert_eq!(FrameId::pseudo(p).decode(), Some(FrameRef::Pseudo(p)));
        }
        assert_eq!(FrameId(0).decode(), None);
        assert_ne!(FrameId::jmethod(5), FrameId::jnative(5));
        let a = label("[alloc byte[]]");
        assert_eq!(label("[alloc byte[]]"), a, "one id per name");
        let Some(FrameRef::Label(n)) = a.decode() else { panic!("{a:?}") };
        assert_eq!(label_name(n).as_deref(), Some("[alloc byte[]]"));
        assert_ne!(label("[lock java.lang.Object]"), a);
    }

    #[test]
    fn asgct_codes_map_to_the_documented_pseudo_frames() {
        assert_eq!(Pseudo::from_asgct(-2).name(), "[GC_active]");
        assert_eq!(Pseudo::from_asgct(-5).name(), "[unknown_Java]");
        assert_eq!(Pseudo::from_asgct(-9).name(), "[deoptimization]");
        assert_eq!(Pseudo::from_asgct(-10).name(), "[safepoint]");
        for code in [0, -3, -8] {
            assert_eq!(Pseudo::from_asgct(code), Pseudo::NotJava);
        }
        assert_eq!(Pseudo::from_asgct(-42), Pseudo::UnknownError);
    }
}
