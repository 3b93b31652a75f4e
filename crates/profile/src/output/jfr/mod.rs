//! JFR recordings, written from the resolved profile (the JVM's own flight recorder need not be on):
//! one chunk that the JDK's `jfr` tool and `jdk.jfr.consumer.RecordingFile` (and so the tools built on
//! them) read.
//!
//! The chunk: the 68-byte header (big-endian fields); the metadata event (type 0), which declares every
//! class the recording uses (the primitive types, the annotations that give fields their labels and
//! units, the JDK's types for threads, classes, methods and stack traces, and the event types); one
//! checkpoint event (type 1) with the constant pools; then the events, in time order. Integers inside
//! events are compressed as the JDK reads them: seven bits a byte, low bits first, at most nine bytes, the
//! ninth holding eight bits. Ticks are nanoseconds since the start of the recording.
//!
//! Which events a profile becomes is the table [`EVENTS`]: each row names an event type, the profiles it
//! applies to, whether a context makes one event per unit of a counter (one `jdk.ExecutionSample` per
//! sample) or one event per context (bytecode and exact profiles, with their counters as fields), and
//! where each field's value comes from. A new kind of profile is a new row; see [`EventDef`].
//!
//! How contexts are mapped:
//! - The stack trace of an event is its context's path, leaf first; a frame's bytecode index is the
//!   callsite of the frame below it (-1 for the leaf and where no callsite was recorded); line numbers
//!   are not known (-1).
//! - A thread root (`[thread NAME]`, `threads=on`) becomes the event's thread, not a frame. Contexts
//!   under no thread root belong to one synthetic thread, `[all threads]` (`[no thread]` when the profile
//!   has thread roots).
//! - Java and native frames are methods of their classes (JVM forms: `java/lang/String`, `(II)I`). Whether
//!   a Java frame ran interpreted, compiled or inlined is not known to kprof: its frame type is `Unknown`;
//!   native methods have the type `Native` and the `native` modifier. A frame whose descriptor is not known
//!   gets `()V`, because readers parse descriptors.
//! - Pseudo-frames (`[GC_active]`, `[truncated]`, ...) are methods of the synthetic class `kprof`, named as
//!   kprof names them, with the descriptor `()V`. A stack with `[truncated]` is marked truncated.
//! - Events of a context are spread evenly and deterministically over the recording's duration; a
//!   counter split over several events is split in whole units that add up to the context's value.

mod encode;
mod events;
mod pools;
#[cfg(test)]
mod tests;

pub use encode::{varint_len, write_varint};
pub use events::*;
pub use pools::internal_class_name;

use crate::model::{FrameKind, Metric, Profile};
use encode::{metadata_event, push_event, ty, Out, FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, HEADER_SIZE};
use pools::{class_in_pseudo_frame, Pools};
use std::collections::HashMap;

/// Ticks per second of the recording's clock. The JDK's reader divides it by 10^9 in integers, so it
/// must be a multiple of 10^9: ticks are nanoseconds.
const TICKS_PER_SECOND: u64 = 1_000_000_000;

/// The class that pseudo-frames are methods of.
pub const PSEUDO_CLASS: &str = "kprof";

/// Frame type of Java frames: kprof does not know whether a frame ran interpreted, compiled or inlined.
pub const FRAME_TYPE_JAVA: &str = "Unknown";
/// Frame type of native methods, as the JVM's recordings name it.
pub const FRAME_TYPE_NATIVE: &str = "Native";

// ---------------------------------------------------------------------------------------------------
// The recording

/// `i`-th of `n` instants spread evenly over `span` ticks: the middle of the `i`-th of `n` equal parts,
/// always below `span` (for `span` ≥ 1).
pub fn spread(i: u64, n: u64, span: u64) -> u64 {
    ((2 * i as u128 + 1) * span as u128 / (2 * n.max(1) as u128)) as u64
}

/// The `j`-th of `k` whole shares of `total`: they differ by at most one and add up to `total`.
pub fn share(total: u64, j: u64, k: u64) -> u64 {
    let k = k.max(1);
    total / k + u64::from(j < total % k)
}

/// Renders `profile` as a JFR recording with the events of [`EVENTS`].
pub fn render(profile: &Profile) -> Vec<u8> {
    render_with(profile, EVENTS)
}

/// Renders `profile` as a JFR recording with the events of the rows of `events` that apply to it.
pub fn render_with(profile: &Profile, events: &[EventDef]) -> Vec<u8> {
    let meta = &profile.meta;
    let span = meta.duration_ns.max(1);
    let rows: Vec<(u64, &EventDef)> = events
        .iter()
        .enumerate()
        .filter(|(_, d)| profile.has(d.applies) && d.requires.is_none_or(|(m, present)| profile.has(m) == present))
        .map(|(i, d)| (ty::FIRST_EVENT + i as u64, d))
        .collect();
    let parents = profile.parents();
    let parks = if rows.iter().any(|(_, d)| d.contexts != Contexts::All) {
        park_contexts(profile, &parents)
    } else {
        Vec::new()
    };
    let selected = |def: &EventDef, node: u32| match def.contexts {
        Contexts::All => true,
        Contexts::Parks => parks[node as usize],
        Contexts::NotParks => !parks[node as usize],
    };

    // Every event as (time, row, node, index among the node's events, the node's event count).
    let mut list: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    for (r, (_, def)) in rows.iter().enumerate() {
        match def.emit {
            Emit::PerUnit(metric) => {
                for node in (0..profile.nodes.len() as u32).filter(|&n| selected(def, n)) {
                    let k = profile.value(node, metric);
                    list.extend((0..k).map(|j| (spread(j, k, span), r as u32, node, j, k)));
                }
            }
            Emit::PerContext => {
                let counters: Vec<Metric> = def
                    .fields
                    .iter()
                    .filter_map(|f| match f.value {
                        FieldValue::Counter(m, _) => Some(m),
                        _ => None,
                    })
                    .chain(def.duration)
                    .collect();
                let nodes: Vec<u32> = (0..profile.nodes.len() as u32)
                    .filter(|&n| selected(def, n) && counters.iter().any(|&m| profile.value(n, m) > 0))
                    .collect();
                let n = nodes.len() as u64;
                list.extend(
                    nodes.iter().enumerate().map(|(i, &node)| (spread(i as u64, n, span), r as u32, node, 0, 1)),
                );
            }
        }
    }
    list.sort_unstable();

    // Stack traces (one per context with events, keyed by node + 1) and threads.
    let mut pools = Pools::new();
    let mut stack_traces = Out::default();
    let mut stack_trace_count = 0u64;
    let has_thread_roots = profile.nodes[0]
        .children
        .iter()
        .any(|&c| profile.frames[profile.nodes[c as usize].frame as usize].kind == FrameKind::Thread);
    let no_thread = if has_thread_roots { "[no thread]" } else { "[all threads]" };
    let mut method_of_frame: Vec<Option<(u64, u64)>> = vec![None; profile.frames.len()];
    // (thread, leaf class, leaf state) of each context with events.
    let mut context: Vec<Option<(u64, u64, u64)>> = vec![None; profile.nodes.len()];
    let mut path: Vec<u32> = Vec::new();
    let needs_leaf_class = rows.iter().any(|(_, d)| d.fields.iter().any(|f| f.value == FieldValue::LeafClass));
    let mut state_ids: HashMap<&'static str, u64> = HashMap::new();
    for (_, def) in &rows {
        for f in def.fields {
            match f.value {
                FieldValue::ThreadState(s) => {
                    state_ids.insert(s, pools.states.id(s));
                }
                FieldValue::LeafState => {
                    for s in THREAD_STATES {
                        state_ids.insert(s, pools.states.id(s));
                    }
                }
                _ => {}
            }
        }
    }
    for &(_, _, node, _, _) in &list {
        if context[node as usize].is_some() {
            continue;
        }
        // The path from the root's child down to the node, in a buffer reused across contexts.
        path.clear();
        let mut n = node;
        while n != 0 {
            path.push(n);
            n = parents[n as usize];
        }
        path.reverse();
        let frame_of = |n: u32| &profile.frames[profile.nodes[n as usize].frame as usize];
        let (thread, frames) = match path.first() {
            Some(&first) if frame_of(first).kind == FrameKind::Thread => (frame_of(first).method.as_str(), &path[1..]),
            _ => (no_thread, &path[..]),
        };
        let thread = match pools.threads.index.get(thread) {
            Some(&id) => id,
            None => pools.threads.id(thread.to_string()),
        };
        let leaf_class = match frames.last() {
            Some(&leaf) if needs_leaf_class => {
                let f = frame_of(leaf);
                match (f.kind, class_in_pseudo_frame(&f.method)) {
                    (FrameKind::Pseudo, Some(c)) => pools.class(&internal_class_name(c)),
                    (FrameKind::Java | FrameKind::Native, _) if !f.class.is_empty() => {
                        pools.class(&internal_class_name(&f.class))
                    }
                    _ => 0,
                }
            }
            _ => 0,
        };
        let leaf_state = match frames.last() {
            Some(&leaf) if frame_of(leaf).kind == FrameKind::Pseudo && frame_of(leaf).method.starts_with("[state ") => {
                state_ids.get(thread_state(&frame_of(leaf).method)).copied().unwrap_or(0)
            }
            _ => state_ids.get("STATE_RUNNABLE").copied().unwrap_or(0),
        };
        context[node as usize] = Some((thread, leaf_class, leaf_state));
        // A leaf label that the events carry as a field is not a frame of their stack.
        let frames = match frames.split_last() {
            Some((&leaf, above))
                if frame_of(leaf).kind == FrameKind::Pseudo && is_field_label(&frame_of(leaf).method) =>
            {
                above
            }
            _ => frames,
        };
        let truncated = frames.iter().any(|&n| {
            let f = frame_of(n);
            f.kind == FrameKind::Pseudo && f.method == "[truncated]"
        });
        stack_traces.varint(node as u64 + 1);
        stack_traces.boolean(truncated);
        stack_traces.varint(frames.len() as u64);
        for (i, &n) in frames.iter().enumerate().rev() {
            let frame = profile.nodes[n as usize].frame as usize;
            let (method, frame_type) = match method_of_frame[frame] {
                Some(m) => m,
                None => {
                    let m = pools.method(&profile.frames[frame]);
                    method_of_frame[frame] = Some(m);
                    m
                }
            };
            let bci = frames.get(i + 1).map_or(-1, |&below| profile.nodes[below as usize].callsite);
            stack_traces.varint(method);
            stack_traces.int(-1); // line number: not known
            stack_traces.int(bci);
            stack_traces.varint(frame_type);
        }
        stack_trace_count += 1;
    }

    // The header (its chunk size filled in at the end), the metadata and the constant pools, then the
    // events straight into the file.
    let mut metadata = Vec::new();
    push_event(&mut metadata, &metadata_event(&rows));
    let mut checkpoint = Vec::new();
    push_event(&mut checkpoint, &pools.checkpoint_event(&stack_traces, stack_trace_count));
    drop(stack_traces);
    let mut file = Vec::with_capacity(HEADER_SIZE + metadata.len() + checkpoint.len() + list.len() * 16);
    file.extend_from_slice(b"FLR\0");
    file.extend_from_slice(&2u16.to_be_bytes()); // major version
    file.extend_from_slice(&1u16.to_be_bytes()); // minor version
    file.extend_from_slice(&0u64.to_be_bytes()); // chunk size, below
    file.extend_from_slice(&((HEADER_SIZE + metadata.len()) as u64).to_be_bytes()); // constant pools
    file.extend_from_slice(&(HEADER_SIZE as u64).to_be_bytes()); // metadata
    file.extend_from_slice(&meta.start_unix_ms.saturating_mul(1_000_000).to_be_bytes()); // start, epoch ns
    file.extend_from_slice(&span.to_be_bytes()); // duration, ns
    file.extend_from_slice(&0u64.to_be_bytes()); // start, ticks
    file.extend_from_slice(&TICKS_PER_SECOND.to_be_bytes());
    // File state 0 (complete: a reader waits while it is not), then the flags.
    file.extend_from_slice(&[0, 0, 0, FLAG_COMPRESSED_INTS | FLAG_FINAL_CHUNK]);
    debug_assert_eq!(file.len(), HEADER_SIZE);
    file.extend_from_slice(&metadata);
    file.extend_from_slice(&checkpoint);

    let mut body = Out::default();
    for &(time, r, node, j, k) in &list {
        let (type_id, def) = rows[r as usize];
        let (thread, leaf_class, leaf_state) = context[node as usize].unwrap_or((0, 0, 0));
        body.0.clear();
        body.varint(type_id);
        body.varint(time);
        if let Some(m) = def.duration {
            body.varint(share(profile.value(node, m), j, k));
        }
        body.varint(thread);
        body.varint(node as u64 + 1);
        for f in def.fields {
            match f.value {
                FieldValue::Counter(m, _) => body.varint(share(profile.value(node, m), j, k)),
                FieldValue::ThreadState(s) => body.varint(state_ids[s]),
                FieldValue::LeafClass => body.varint(leaf_class),
                FieldValue::LeafState => body.varint(leaf_state),
            }
        }
        push_event(&mut file, &body.0);
    }
    let size = file.len() as u64;
    file[8..16].copy_from_slice(&size.to_be_bytes());
    file
}

/// For each node, whether a park is on its path: `LockSupport.park*` or `Unsafe.park` (the frames above
/// every `java.util.concurrent` wait that mode=lock records as a park).
fn park_contexts(profile: &Profile, parents: &[u32]) -> Vec<bool> {
    let is_park = |node: usize| {
        let f = &profile.frames[profile.nodes[node].frame as usize];
        (f.class == "java.util.concurrent.locks.LockSupport" && f.method.starts_with("park"))
            || (f.method == "park" && f.class.ends_with(".Unsafe"))
    };
    let mut known: Vec<Option<bool>> = vec![None; profile.nodes.len()];
    known[0] = Some(false);
    let mut chain = Vec::new();
    for node in 0..profile.nodes.len() {
        let mut n = node;
        while known[n].is_none() {
            chain.push(n);
            n = parents[n] as usize;
        }
        let mut value = known[n].unwrap_or(false);
        for &c in chain.iter().rev() {
            value = value || is_park(c);
            known[c] = Some(value);
        }
        chain.clear();
    }
    known.into_iter().map(|k| k.unwrap_or(false)).collect()
}
