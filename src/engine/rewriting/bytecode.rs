//! mode=bytecode's runtime side (Komorium): `kprof.runtime.Bc` counts bytecodes per thread and, every
//! `gran + r` of them, hands its reified stack to [`deliver`], which walks the CCT from where the
//! thread's previous sample diverged.

use super::{runtime_class, thread_root, RewritingEngine};
use crate::cct::{NodeId, ROOT};
use crate::frame::FrameId;
use crate::jvmti::bindings::*;
use crate::jvmti::Jni;
use crate::options::{Mode, Options};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of bytecode mode's sampling.
#[derive(Default)]
pub struct BytecodeStats {
    pub samples: AtomicU64,
    /// Sum of sample weights: bytecodes counted up to each thread's last sample.
    pub sampled_bytecodes: AtomicU64,
    /// Samples that found the CCT full.
    pub overflow: AtomicU64,
}

/// Global references into `kprof.runtime.Bc`.
pub(super) struct BcRuntime {
    pub(super) class: jclass,
    init: jmethodID,
    thread_ended: jmethodID,
    residual: jmethodID,
    disable: jmethodID,
}

impl BcRuntime {
    pub(super) fn load(jni: Jni) -> Result<BcRuntime, String> {
        let class = runtime_class(
            jni,
            "kprof/runtime/Bc",
            &[
                ("deliver", "([I[JIIJI)V", deliver as *mut c_void),
                ("threadRoot", "(Ljava/lang/String;)I", thread_root as *mut c_void),
            ],
        )?;
        let method = |name: &str, sig: &str| {
            jni.static_method_id(class, name, sig).ok_or(format!("kprof.runtime.Bc.{name} not found"))
        };
        Ok(BcRuntime {
            class,
            init: method("init", "(IIZ)V")?,
            thread_ended: method("threadEnded", "()V")?,
            residual: method("residual", "()J")?,
            disable: method("disable", "()V")?,
        })
    }

    pub(super) fn init(&self, jni: Jni, o: &Options) -> Result<(), String> {
        let args = [jvalue { i: o.gran as i32 }, jvalue { i: o.rand as i32 }, jvalue { z: o.threads as u8 }];
        jni.call_static_void(self.class, self.init, &args).map_err(|_| "kprof.runtime.Bc.init threw".to_string())
    }

    pub(super) fn thread_ended(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.thread_ended, &[]);
    }

    pub(super) fn residual(&self, jni: Jni) -> u64 {
        jni.call_static_long(self.class, self.residual, &[]).unwrap_or(0).max(0) as u64
    }

    pub(super) fn disable(&self, jni: Jni) {
        let _ = jni.call_static_void(self.class, self.disable, &[]);
    }
}

/// `Bc.deliver(int[] nodes, long[] frames, int from, int to, long weight, int root)`: see `Bc.java`.
///
/// # Safety
/// Called by the JVM as a registered native method, with the calling thread's JNIEnv.
unsafe extern "C" fn deliver(
    env: *mut JNIEnv,
    _class: jclass,
    nodes: jintArray,
    frames: jlongArray,
    from: jint,
    to: jint,
    weight: jlong,
    root: jint,
) {
    let Some(engine) = RewritingEngine::get().filter(|e| e.is_active() && e.mode() == Mode::Bytecode) else {
        return;
    };
    // SAFETY: the JVM passes the calling thread's JNIEnv.
    let jni = unsafe { Jni::from_raw(env) };
    let cct = engine.cct();
    let callsites = engine.callsites();
    let delivered = jni.with_int_long_arrays(nodes, frames, |nodes, frames| {
        let to = to as usize;
        // A path identical to the previous sample's comes with from = to + 1: its leaf is walked again.
        let from = (from.max(0) as usize).min(to);
        if to >= nodes.len() || to >= frames.len() {
            return None;
        }
        let mut node: NodeId = match from {
            0 if root > 0 => root as NodeId,
            0 => ROOT,
            _ => nodes[from - 1] as NodeId,
        };
        for i in from..=to {
            let method = frames[i] as u32;
            let callsite = if i == 0 || !callsites { -1 } else { (frames[i] >> 32) as i32 };
            node = cct.child(node, FrameId::method(method), callsite).unwrap_or(cct.overflow());
            nodes[i] = node as i32;
        }
        Some(node)
    });
    if let Some(Some(node)) = delivered {
        let weight = weight.max(0) as u64;
        cct.add_sample(node, weight);
        let st = &engine.bytecode;
        st.samples.fetch_add(1, Ordering::Relaxed);
        st.sampled_bytecodes.fetch_add(weight, Ordering::Relaxed);
        if node == cct.overflow() {
            st.overflow.fetch_add(1, Ordering::Relaxed);
        }
    }
}
