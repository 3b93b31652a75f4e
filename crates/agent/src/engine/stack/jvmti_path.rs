//! Stacks from JVMTI GetStackTrace (taken on the thread itself, outside any signal handler) into the
//! tree, for the engines that record at an event: allocation samples and lock waits.

use crate::cct::{Cct, NodeId};
use crate::frame::{FrameId, Pseudo};
use crate::jvmti::bindings::*;

/// Adds a stack (innermost frame first, as GetStackTrace gives it) below `root`, then `label` at the bci
/// the innermost frame was at; returns the label's node (the overflow node when the tree is full). Each
/// frame's callsite is the bci its caller was executing, as in the cpu engine's stacks. Walks the tree
/// only from where the stack differs from the thread's previous one (`path`).
pub(crate) fn record_path(
    cct: &Cct,
    path: &mut Vec<(u64, i32, NodeId)>,
    path_base: &mut NodeId,
    root: NodeId,
    frames: &[jvmtiFrameInfo],
    truncated: bool,
    label: FrameId,
) -> NodeId {
    let overflow = cct.overflow();
    let base =
        if truncated { cct.child(root, FrameId::pseudo(Pseudo::Truncated), -1).unwrap_or(overflow) } else { root };
    if base != *path_base {
        path.clear();
        *path_base = base;
    }
    let mut node = base;
    let mut k = 0;
    for i in (0..frames.len()).rev() {
        if node == overflow {
            break;
        }
        let f = frames[i];
        let callsite = frames.get(i + 1).map_or(-1, |caller| bci(caller.location));
        let id = if f.method.is_null() {
            FrameId::pseudo(Pseudo::UnknownJava)
        } else if f.location < 0 {
            // JVMTI gives native methods location -1.
            FrameId::jnative(f.method as u64)
        } else {
            FrameId::jmethod(f.method as u64)
        };
        match path.get(k) {
            Some(&(frame, at, cached)) if frame == id.0 && at == callsite => node = cached,
            _ => {
                path.truncate(k);
                node = cct.child(node, id, callsite).unwrap_or(overflow);
                if node != overflow {
                    path.push((id.0, callsite, node));
                }
            }
        }
        k += 1;
    }
    path.truncate(k);
    if node == overflow {
        return overflow;
    }
    let at = frames.first().map_or(-1, |f| bci(f.location));
    cct.child(node, label, at).unwrap_or(overflow)
}

/// A jlocation as a callsite: HotSpot's locations are bcis; -1 for none.
fn bci(location: jlocation) -> i32 {
    location.clamp(-1, i32::MAX as jlocation) as i32
}
