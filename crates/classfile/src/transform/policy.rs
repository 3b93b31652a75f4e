//! Which methods a rewrite leaves alone on purpose, each with a reason that is counted.

use crate::annotations::for_each_annotation_type;
use crate::class::{ACC_ABSTRACT, ACC_NATIVE};
use crate::{ClassFile, Member};

/// Why a method was left alone by policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyReason {
    /// kprof's own runtime classes (rewriting them would call the helpers from the helpers).
    KprofClass,
    /// The path that fetches per-thread state: Thread, ThreadLocal, java.lang.ref.
    ThreadStatePath,
    ObjectInit,
    EmptyFinalize,
    /// java.lang.invoke (method handles, VarHandles, lambda forms).
    JavaLangInvoke,
    Unsafe,
    /// VirtualThread, continuations and the rest of jdk.internal.vm.
    VirtualThreads,
    IntrinsicCandidate,
    ReservedStackAccess,
    ChangesCurrentThread,
    JvmtiMountTransition,
}

impl PolicyReason {
    pub fn name(self) -> &'static str {
        match self {
            PolicyReason::KprofClass => "kprof-class",
            PolicyReason::ThreadStatePath => "thread-state-path",
            PolicyReason::ObjectInit => "object-init",
            PolicyReason::EmptyFinalize => "empty-finalize",
            PolicyReason::JavaLangInvoke => "java-lang-invoke",
            PolicyReason::Unsafe => "unsafe",
            PolicyReason::VirtualThreads => "virtual-threads",
            PolicyReason::IntrinsicCandidate => "@IntrinsicCandidate",
            PolicyReason::ReservedStackAccess => "@ReservedStackAccess",
            PolicyReason::ChangesCurrentThread => "@ChangesCurrentThread",
            PolicyReason::JvmtiMountTransition => "@JvmtiMountTransition",
        }
    }
}

/// A skip policy. [`SkipPolicy::agent`] is the list that the bytecode and exact modes use;
/// [`SkipPolicy::minimal`] (the probe mode's default, so it proves the engine on everything else) skips only
/// what must never change: kprof's own classes, `Object.<init>`, and empty `finalize()` methods (HotSpot
/// registers a finalizer for every object whose class has a non-empty one: a rewritten `Object.finalize()` would
/// make every allocation register one, and the VM dies during startup).
#[derive(Clone, Copy, Debug)]
pub struct SkipPolicy {
    pub full: bool,
}

const THREAD_STATE: &[&[u8]] = &[b"java/lang/Thread", b"java/lang/ThreadLocal", b"java/lang/InheritableThreadLocal"];

impl SkipPolicy {
    pub fn agent() -> SkipPolicy {
        SkipPolicy { full: true }
    }

    pub fn minimal() -> SkipPolicy {
        SkipPolicy { full: false }
    }

    /// A reason to leave every method of the class named `name` alone, if any.
    pub fn class_reason(&self, name: &[u8]) -> Option<PolicyReason> {
        if name.starts_with(b"kprof/runtime/") {
            return Some(PolicyReason::KprofClass);
        }
        if !self.full {
            return None;
        }
        // The class itself or one of its nested classes (`java/lang/Thread$State`).
        let is = |prefix: &[u8]| name == prefix || (name.starts_with(prefix) && name[prefix.len()] == b'$');
        if THREAD_STATE.iter().any(|p| is(p)) || name.starts_with(b"java/lang/ref/") {
            return Some(PolicyReason::ThreadStatePath);
        }
        if name.starts_with(b"java/lang/invoke/") {
            return Some(PolicyReason::JavaLangInvoke);
        }
        if is(b"sun/misc/Unsafe") || is(b"jdk/internal/misc/Unsafe") {
            return Some(PolicyReason::Unsafe);
        }
        if is(b"java/lang/VirtualThread") || name.starts_with(b"jdk/internal/vm/") {
            return Some(PolicyReason::VirtualThreads);
        }
        None
    }

    /// A reason to leave method `m` of `class` alone, if any (`class_name` is the class's internal name).
    pub fn method_reason(&self, class: &ClassFile<'_>, class_name: &[u8], m: &Member) -> Option<PolicyReason> {
        let name = class.member_name(m).unwrap_or(b"");
        let desc = class.member_descriptor(m).unwrap_or(b"");
        if class_name == b"java/lang/Object" && name == b"<init>" {
            return Some(PolicyReason::ObjectInit);
        }
        if name == b"finalize" && desc == b"()V" {
            if let Some(index) = class.methods.iter().position(|x| std::ptr::eq(x, m)) {
                if let Ok(Some(code)) = class.method_code(index) {
                    if code.code == [crate::opcodes::RETURN] {
                        return Some(PolicyReason::EmptyFinalize);
                    }
                }
            }
        }
        if !self.full {
            return None;
        }
        // Method.invoke is an intrinsic candidate only so that stack walks skip it: HotSpot never runs
        // other code in its place, and bracketing it would leave everything called by reflection
        // uncounted. It is rewritten like any method.
        if class_name == b"java/lang/reflect/Method" && name == b"invoke" {
            return None;
        }
        let mut reason = None;
        for a in class.member_attributes(m) {
            let Ok(n) = class.constant_pool.utf8(a.name_index) else { continue };
            if n != b"RuntimeVisibleAnnotations" && n != b"RuntimeInvisibleAnnotations" {
                continue;
            }
            let _ = for_each_annotation_type(a.info, |t| {
                let Ok(d) = class.constant_pool.utf8(t) else { return };
                let r = match d {
                    b"Ljdk/internal/vm/annotation/IntrinsicCandidate;"
                    | b"Ljdk/internal/HotSpotIntrinsicCandidate;" => PolicyReason::IntrinsicCandidate,
                    b"Ljdk/internal/vm/annotation/ReservedStackAccess;" => PolicyReason::ReservedStackAccess,
                    b"Ljdk/internal/vm/annotation/ChangesCurrentThread;" => PolicyReason::ChangesCurrentThread,
                    b"Ljdk/internal/vm/annotation/JvmtiMountTransition;"
                    | b"Ljdk/internal/vm/annotation/JvmtiHideEvents;" => PolicyReason::JvmtiMountTransition,
                    _ => return,
                };
                reason.get_or_insert(r);
            });
        }
        reason
    }
}

/// Whether method `name` `descriptor` of `class_name` is the JVM's entry into class loading,
/// `ClassLoader.loadClass(String)`. The JVM calls it to resolve a class and for each class its verifier or
/// reflection must load, in an order that follows the order of a class's methods; HotSpot sorts those by
/// the addresses of their names, which vary from run to run. The counting modes mute what it runs.
pub fn is_class_loading_entry(class_name: &[u8], name: &[u8], descriptor: &[u8]) -> bool {
    class_name == b"java/lang/ClassLoader"
        && name == b"loadClass"
        && descriptor == b"(Ljava/lang/String;)Ljava/lang/Class;"
}

/// Whether a left-alone method of java.lang.invoke's `class_name` mutes its call of method `name` of
/// `owner` (internal names). java.lang.invoke builds method types, lambda forms, species and their classes
/// on first use and caches them in tables keyed by identity hash codes, shared with other threads and held
/// by weak and soft references: what it runs in rewritten JDK code follows those tables, not the program.
/// So its calls out of java.lang.invoke are muted. Not its calls within java.lang.invoke (the callee mutes
/// its own), nor of Unsafe (never rewritten), nor anything in the VarHandle implementation, whose accesses
/// run in the program's hot paths and call only cheap checks whose counts do not depend on those tables.
/// A call within java.lang.invoke of a method that its classes inherit from `Object`, `Enum` or
/// `Throwable` (`kind.ordinal()` on one of its enums) runs that inherited, rewritten code: muted too. (A
/// class that extends one outside java.lang.invoke also mutes calls of its own methods, which may be
/// inherited: the rewriter knows.)
pub fn invoke_mutes_call(class_name: &[u8], owner: &[u8], name: &[u8]) -> bool {
    let var_handles = [&b"java/lang/invoke/VarHandle"[..], b"java/lang/invoke/VarForm"];
    if var_handles.iter().any(|p| class_name.starts_with(p)) {
        return false;
    }
    if owner.starts_with(b"java/lang/invoke/") {
        return INHERITED_FROM_OUTSIDE.contains(&name);
    }
    owner != b"jdk/internal/misc/Unsafe" && owner != b"sun/misc/Unsafe"
}

/// The instance methods a java.lang.invoke class can inherit from outside it: `Object`'s, `Enum`'s and
/// `Throwable`'s (an override in java.lang.invoke is left alone and counts nothing, so muting its call
/// changes nothing).
const INHERITED_FROM_OUTSIDE: &[&[u8]] = &[
    // Object
    b"toString",
    b"equals",
    b"hashCode",
    b"getClass",
    b"clone",
    b"notify",
    b"notifyAll",
    b"wait",
    b"finalize",
    // Enum
    b"name",
    b"ordinal",
    b"compareTo",
    b"getDeclaringClass",
    b"describeConstable",
    // Throwable
    b"getMessage",
    b"getLocalizedMessage",
    b"getCause",
    b"initCause",
    b"fillInStackTrace",
    b"getStackTrace",
    b"setStackTrace",
    b"printStackTrace",
    b"addSuppressed",
    b"getSuppressed",
];

/// Whether a java.lang.invoke class whose superclass is `super_name` inherits methods from outside
/// java.lang.invoke (other than Object's): calls of its own methods may run that inherited code, so they
/// are muted too. `TypeConvertingMethodAdapter` is the one class of java.lang.invoke that extends a class
/// outside it (the class-file writer's method visitor) and is extended in turn.
pub fn invoke_super_outside(super_name: &[u8]) -> bool {
    !super_name.is_empty()
        && super_name != b"java/lang/Object"
        && (!super_name.starts_with(b"java/lang/invoke/")
            || super_name == b"java/lang/invoke/TypeConvertingMethodAdapter")
}

/// True for methods that have no code to rewrite.
pub fn has_no_code(m: &Member) -> bool {
    m.access_flags & (ACC_ABSTRACT | ACC_NATIVE) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_lang_invoke_mutes_calls_out_and_calls_of_inherited_methods() {
        let lf = b"java/lang/invoke/LambdaForm";
        // Out of java.lang.invoke: muted, Unsafe excepted.
        assert!(invoke_mutes_call(lf, b"java/util/HashMap", b"get"));
        assert!(!invoke_mutes_call(lf, b"jdk/internal/misc/Unsafe", b"getReference"));
        // Within: the callee is left alone and mutes its own calls.
        assert!(!invoke_mutes_call(lf, b"java/lang/invoke/MethodType", b"methodType"));
        // Within, but run by rewritten code outside: `kind.ordinal()` is Enum.ordinal, `equals` may be
        // Object.equals.
        assert!(invoke_mutes_call(lf, b"java/lang/invoke/LambdaForm$BasicType", b"ordinal"));
        assert!(invoke_mutes_call(lf, b"java/lang/invoke/LambdaForm$Kind", b"name"));
        assert!(invoke_mutes_call(lf, b"java/lang/invoke/LambdaForm", b"equals"));
        // The VarHandle implementation mutes nothing.
        assert!(!invoke_mutes_call(
            b"java/lang/invoke/VarHandleInts$FieldInstanceReadWrite",
            b"java/util/Objects",
            b"requireNonNull"
        ));
        assert!(!invoke_mutes_call(
            b"java/lang/invoke/VarHandle",
            b"java/lang/invoke/VarHandle$AccessMode",
            b"ordinal"
        ));
    }
}
