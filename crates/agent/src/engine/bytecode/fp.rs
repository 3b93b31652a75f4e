//! `stack=fp`: a sample's calling context from the thread's frame-pointer chain, decoding only what
//! changed since the thread's previous sample.
//!
//! `stack=walk` asks AsyncGetCallTrace for the whole stack at every sample: on a deep stack that is
//! most of a sample's cost, yet from one sample to the next only the few innermost frames change. Here
//! the sample first checks, from the outermost frame in, which frames of its previous chain still hold
//! the words that walk read (their saved frame pointers and return addresses: loads independent of each
//! other, which the processor makes all at once), then follows the chain ([`fp_chain`], one load after
//! the other) from its own frame only until it reaches the innermost of those: from there the chain is
//! the one walked before, since the words it is made of are the same. A frame's part of the context is a
//! function of its return address (a compiled method's call site: the methods inlined there, from
//! [`code_map`]) or, in the interpreter, of the method in the frame; so the frames the two chains share
//! keep the ids decoded before, and only the changed ones are looked up, in a per-thread table of
//! return addresses. The context is the one `stack=walk` gives: the same frames, filtered the same way
//! ([`super::walk`]; `stack=fpcheck` compares the two at every sample).
//!
//! A changed frame the tables cannot place (the interpreter's, a compiled method whose load event has
//! not come, a deoptimized frame's patched return address) costs one walk as `stack=walk` makes it:
//! its frames are split over the chain's frames by their known counts, so that what they decode to is
//! kept for the next samples. A chain that breaks, a virtual thread's, or any doubt: the sample is left
//! to `stack=walk`.

use super::walk::{self, kind_of, STACK_CARRIER};
use crate::engine::rewriting::RewritingEngine;
use crate::engine::stack::code_map::{self, CodeAt};
use crate::engine::stack::fp_chain::{self, Chain, Link, Walked};
use crate::engine::{Host, Phase};
use crate::jvmti::bindings::jmethodID;
use crate::jvmti::bindings::jvmtiFrameInfo;
use crate::jvmti::vmstructs::{self, MethodIdPath};
use crate::jvmti::Jni;
use kprof_classfile::transform::methods::{STACK_NONE, STACK_PUSHED};
use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// A frame of the chain, with what it decoded to.
#[derive(Clone, Copy)]
struct Frame {
    /// Where its caller's frame pointer and its return address were read (the callee's frame pointer).
    at: usize,
    /// Its return address: where in its code the frame stands.
    pc: usize,
    /// Its frame pointer.
    fp: usize,
    /// An interpreter frame's `Method*` (0 for others).
    method: usize,
    /// Its first entry in the thread's ids.
    start: u32,
    /// The Java frames (inlined ones included) it holds, whether rewritten or not.
    frames: u32,
    /// It, or a frame outside it, is the JVM's generated code.
    code_outside: bool,
}

/// What a return address decodes to: the Java frames there and, of them, the rewritten ones (outermost
/// first, as (id, kind)), `len` entries of the thread's arena from `start`.
#[derive(Clone, Copy)]
struct Decoded {
    frames: u32,
    start: u32,
    len: u32,
}

impl Decoded {
    fn ids(self, arena: &[(u32, u8)]) -> &[(u32, u8)] {
        &arena[self.start as usize..(self.start + self.len) as usize]
    }
}

/// Hashes a code address with one multiplication: the tables are per thread, their keys not chosen by
/// anyone who could aim at collisions.
#[derive(Default)]
struct PcHasher(u64);

impl std::hash::Hasher for PcHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
    }

    fn write_usize(&mut self, pc: usize) {
        self.0 = (pc as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(26);
    }
}

type PcHash = std::hash::BuildHasherDefault<PcHasher>;

/// A thread's decoded return addresses and the arena their ids are in.
type DecodedIds<'a> = (&'a HashMap<usize, Decoded, PcHash>, &'a [(u32, u8)]);

/// How a changed frame was placed.
enum Placed {
    /// By its return address, in the decode table.
    Known,
    /// An interpreter frame whose method was read from the frame: (id, kind).
    Method(u32, u8),
    /// An interpreter frame whose method is to be found by a walk; the jmethodID read from the frame
    /// (0: none), to be checked against the walk's.
    Interpreted(usize),
    /// Java frames of a number and methods to be found.
    Unknown,
}

struct Thread {
    chain: Chain,
    /// The previous sample's frames (outermost first) and ids (outermost first; the last is the sampling
    /// method).
    frames: Vec<Frame>,
    ids: Vec<(u32, u8)>,
    /// Return address -> what it decodes to, for this code map epoch and session.
    decoded: HashMap<usize, Decoded, PcHash>,
    /// The ids the decoded return addresses hold.
    arena: Vec<(u32, u8)>,
    /// Return address in native code -> whether its library keeps frame pointers.
    natives: HashMap<usize, bool, PcHash>,
    epoch: (u64, u64),
    /// The top of the thread's stack (0: unknown).
    top: usize,
    /// How the changed frames of this sample were placed.
    placed: Vec<Placed>,
    counts: Counts,
}

/// Per-thread counts, added to the shared ones every [`FLUSH_EVERY`] samples and when the thread ends.
#[derive(Default, Clone, Copy)]
struct Counts {
    samples: u64,
    frames_reused: u64,
    frames_decoded: u64,
    walked: u64,
    walked_innermost: u64,
    interpreted_read: u64,
    left_to_walk: u64,
    lookups: u64,
}

const FLUSH_EVERY: u64 = 64;

/// The shared counts: samples taken from the chain, frames shared with the previous sample, frames
/// decoded, samples that also walked to place a frame (and of them those that walked only the changed
/// frames), interpreter frames placed by the method read from them, samples left to `stack=walk`, and
/// (`fpcheck`) samples whose context differed from the walk's.
static SAMPLES: AtomicU64 = AtomicU64::new(0);
static REUSED: AtomicU64 = AtomicU64::new(0);
static DECODED: AtomicU64 = AtomicU64::new(0);
static WALKED: AtomicU64 = AtomicU64::new(0);
static WALKED_INNERMOST: AtomicU64 = AtomicU64::new(0);
static INTERPRETED_READ: AtomicU64 = AtomicU64::new(0);
static LEFT: AtomicU64 = AtomicU64::new(0);
static MISMATCHES: AtomicU64 = AtomicU64::new(0);
static LOOKUPS: AtomicU64 = AtomicU64::new(0);

/// `stack=fpcheck`: every context is also walked and the walk's kept.
pub(super) static CHECK: AtomicBool = AtomicBool::new(false);

/// The path from an interpreter frame's `Method*` to its jmethodID (None: this JVM's structure table
/// lacks a link of it).
static METHOD_IDS: OnceLock<Option<MethodIdPath>> = OnceLock::new();
/// Interpreter frames whose jmethodID read from the frame was the one the walk found, and whether one
/// ever was not. The read is trusted once [`TRUST_AFTER`] agreed and none disagreed: on a JVM whose
/// structures are not what the path assumes it is never used.
static METHOD_IDS_AGREED: AtomicU64 = AtomicU64::new(0);
static METHOD_IDS_REFUTED: AtomicBool = AtomicBool::new(false);
const TRUST_AFTER: u64 = 256;

/// The jmethodID of the interpreter frame's `method` (0: none, not known how to read, or the read was
/// found wrong on this JVM).
fn interpreted_method_id(method: usize) -> usize {
    if METHOD_IDS_REFUTED.load(Relaxed) {
        return 0;
    }
    match METHOD_IDS.get() {
        // SAFETY: `method` is the `Method*` of an interpreter frame on this thread's stack, read from it
        // just now (the sample runs on that thread): a live method of a loaded class.
        Some(Some(path)) => unsafe { path.jmethod_id(method) },
        _ => 0,
    }
}

fn method_ids_trusted() -> bool {
    METHOD_IDS_AGREED.load(Relaxed) >= TRUST_AFTER && !METHOD_IDS_REFUTED.load(Relaxed)
}

impl Counts {
    fn flush(&mut self) {
        for (shared, n) in [
            (&SAMPLES, self.samples),
            (&REUSED, self.frames_reused),
            (&DECODED, self.frames_decoded),
            (&WALKED, self.walked),
            (&WALKED_INNERMOST, self.walked_innermost),
            (&INTERPRETED_READ, self.interpreted_read),
            (&LEFT, self.left_to_walk),
            (&LOOKUPS, self.lookups),
        ] {
            if n != 0 {
                shared.fetch_add(n, Relaxed);
            }
        }
        *self = Counts::default();
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        self.counts.flush();
    }
}

thread_local! {
    static THREAD: RefCell<Thread> = RefCell::new(Thread {
        chain: Chain::new(),
        frames: Vec::new(),
        ids: Vec::new(),
        decoded: HashMap::default(),
        arena: Vec::new(),
        natives: HashMap::default(),
        epoch: (0, 0),
        top: 0,
        placed: Vec::new(),
        counts: Counts::default(),
    });
}

/// The shared counts of [`counts`].
pub(crate) struct FpCounts {
    pub samples: u64,
    pub frames_reused: u64,
    pub frames_decoded: u64,
    /// Samples that walked to place a frame, and of them those that walked only the changed frames.
    pub walked: u64,
    pub walked_innermost: u64,
    /// Interpreter frames placed by the method read from the frame, without a walk.
    pub interpreted_read: u64,
    /// Whether that read is trusted (see [`TRUST_AFTER`]); and whether it was ever refuted.
    pub method_ids_trusted: bool,
    pub method_ids_refuted: bool,
    pub left_to_walk: u64,
    pub mismatches: u64,
    pub code_lookups: u64,
    pub code_unloads: u64,
}

/// What the samples of every thread counted so far (each thread adds its counts every [`FLUSH_EVERY`]
/// samples and when it ends).
pub(crate) fn counts() -> FpCounts {
    FpCounts {
        samples: SAMPLES.load(Relaxed),
        frames_reused: REUSED.load(Relaxed),
        frames_decoded: DECODED.load(Relaxed),
        walked: WALKED.load(Relaxed),
        walked_innermost: WALKED_INNERMOST.load(Relaxed),
        interpreted_read: INTERPRETED_READ.load(Relaxed),
        method_ids_trusted: method_ids_trusted(),
        method_ids_refuted: METHOD_IDS_REFUTED.load(Relaxed),
        left_to_walk: LEFT.load(Relaxed),
        mismatches: MISMATCHES.load(Relaxed),
        code_lookups: LOOKUPS.load(Relaxed),
        code_unloads: code_map::epoch() - 1,
    }
}

/// Whether `stack=auto` may take `stack=fp` on this JVM in `phase`: on x86-64, with HotSpot's flag table,
/// and the flag either on already or at its default at the JVM's start (kprof sets it then; a
/// `-XX:-PreserveFramePointer` given on the command line is the user's and stays).
pub(crate) fn possible(phase: Phase) -> bool {
    cfg!(target_arch = "x86_64")
        && vmstructs::bool_flag(c"PreserveFramePointer")
            .is_some_and(|f| f.get() || (phase == Phase::OnLoad && f.default_origin))
}

/// Sets up what `stack=fp` needs, when the engine is made: the code map's events and, at the JVM's
/// start, `-XX:+PreserveFramePointer` (set in HotSpot's flag table before any code is generated, as if
/// given on the command line). A JVM attached to later must have been started with the flag: code
/// compiled without it keeps no frame pointer, and its frames would break the chain unseen.
pub(super) fn enable(host: &dyn Host, phase: Phase) -> Result<(), String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("bad option 'stack=fp': x86-64 only; accepted here: stack=reified | walk | auto".into());
    }
    let flag = vmstructs::bool_flag(c"PreserveFramePointer").ok_or(
        "bad option 'stack=fp': this JVM does not export its flag table; accepted here: stack=reified | walk | auto",
    )?;
    if !flag.get() {
        if phase != Phase::OnLoad {
            return Err("bad option 'stack=fp': needs a JVM started with -XX:+PreserveFramePointer (this one was \
                        not); accepted here: stack=reified | walk | auto"
                .into());
        }
        flag.set(true);
    }
    METHOD_IDS.get_or_init(vmstructs::method_id_path);
    code_map::enable(host)
        .map_err(|e| format!("bad option 'stack=fp': {e}; accepted here: stack=reified | walk | auto"))
}

/// A session with `stack=fp` (`check`: `fpcheck`) starts, on a live JVM: the code generated so far is
/// added to the code map, and samples take their contexts from the chain.
pub(super) fn start(check: bool) -> Result<(), String> {
    code_map::replay().map_err(|e| format!("stack=fp: {e}"))?;
    CHECK.store(check, Relaxed);
    walk::FP.store(true, Relaxed);
    Ok(())
}

/// The session ends: samples (of a later session) walk as `stack=walk` unless it asks again.
pub(super) fn stop() {
    walk::FP.store(false, Relaxed);
}

/// Writes the context of the current thread's sample into `stack` (outermost first, at most `cap`
/// entries) and returns its depth, from the frame-pointer chain that begins at `fp` (a frame of this
/// thread's native call). None: the sample is left to `stack=walk`.
pub(super) fn walk_into(engine: &RewritingEngine, jni: Jni, fp: usize, stack: *mut u32, cap: usize) -> Option<usize> {
    // Until the classes loaded before the session are retransformed, a method's kind may still change.
    if !walk::SETTLED.load(Relaxed) {
        return None;
    }
    THREAD.with(|t| {
        let Ok(mut t) = t.try_borrow_mut() else { return None };
        let t = &mut *t;
        let depth = t.sample(engine, jni, fp, stack, cap);
        if depth.is_none() {
            t.counts.left_to_walk += 1;
            t.frames.clear();
            t.ids.clear();
        }
        t.counts.samples += 1;
        if t.counts.samples >= FLUSH_EVERY {
            t.counts.flush();
        }
        depth
    })
}

impl Thread {
    fn sample(&mut self, engine: &RewritingEngine, jni: Jni, fp: usize, stack: *mut u32, cap: usize) -> Option<usize> {
        let epoch = (code_map::epoch(), walk::EPOCH.load(Relaxed));
        if epoch != self.epoch {
            self.decoded.clear();
            self.arena.clear();
            self.frames.clear();
            self.ids.clear();
            self.epoch = epoch;
        }
        if self.top == 0 {
            self.top = fp_chain::stack_top()?;
        }
        // The previous chain's outer frames whose words still hold what that walk read (checked from the
        // outermost in, with loads the processor makes all at once): a walk that reaches the innermost of
        // them goes on exactly as that walk went, so this one stops there and walks, one load after the
        // other, only the frames inside it.
        self.chain.begin(fp, self.top);
        let chain = &self.chain;
        let good = self
            .frames
            .iter()
            .take_while(|f| {
                chain.still_above(&Link { at: f.at, pc: f.pc, fp: f.fp })
                    && (f.method == 0 || chain.interpreter_method(f.fp) == f.method)
            })
            .count();
        let target = good.checked_sub(1).map_or(0, |i| self.frames[i].at);
        let walked = self.chain.walk(fp, self.top, |at| at == target);
        // The innermost frames are kprof's own, up to Bc.walk's native wrapper: they hold no Java frame.
        let own = self.chain.links.iter().position(|l| code_map::in_code_cache(l.pc));
        let (own, shared) = match walked {
            Walked::Broken => return None,
            Walked::Stopped => (own.unwrap_or(self.chain.links.len()), good),
            Walked::Whole => {
                let own = own?;
                // The frames shared with the previous chain, from the outermost in.
                let links = &self.chain.links[own..];
                let mut shared = 0;
                while shared < links.len() && shared < self.frames.len() {
                    let link = &links[links.len() - 1 - shared];
                    let before = &self.frames[shared];
                    // An interpreter frame is its method's: the same return address serves every method.
                    if before.at != link.at
                        || before.pc != link.pc
                        || before.fp != link.fp
                        || (before.method != 0 && self.chain.interpreter_method(link.fp) != before.method)
                    {
                        break;
                    }
                    shared += 1;
                }
                (own, shared)
            }
        };
        // The changed frames are links[own..end], innermost first.
        let end = match walked {
            Walked::Whole => self.chain.links.len() - shared,
            _ => self.chain.links.len(),
        };
        self.counts.frames_reused += shared as u64;
        self.counts.frames_decoded += (end - own) as u64;
        let keep = self.frames.get(shared).map_or(self.ids.len(), |f| f.start as usize);
        self.frames.truncate(shared);
        self.ids.truncate(keep);
        // The changed frames, outermost first.
        self.placed.clear();
        let mut all_known = true;
        for i in (own..end).rev() {
            let Link { at, pc, fp: frame_fp } = self.chain.links[i];
            let start = self.ids.len() as u32;
            let code = code_map::in_code_cache(pc);
            let code_outside = code || self.frames.last().is_some_and(|f| f.code_outside);
            let mut frame = Frame { at, pc, fp: frame_fp, method: 0, start, frames: 0, code_outside };
            let placed = if !code {
                // Native code between Java frames (a JNI method's, calling back into Java) that may not
                // keep a frame pointer: the chain inside it cannot be trusted.
                if code_outside && !*self.natives.entry(pc).or_insert_with(|| code_map::native_keeps_frame_pointers(pc))
                {
                    return None;
                }
                Placed::Known
            } else if code_map::in_interpreter(pc) {
                frame.method = self.chain.interpreter_method(frame_fp);
                if frame.method == 0 {
                    return None;
                }
                frame.frames = 1;
                let jm = interpreted_method_id(frame.method);
                if jm != 0 && method_ids_trusted() {
                    let (id, kind) = kind_of(engine, jni, jm as jmethodID);
                    if kind == STACK_CARRIER {
                        return None;
                    }
                    if kind != STACK_NONE {
                        self.ids.push((id, kind));
                    }
                    self.counts.interpreted_read += 1;
                    Placed::Method(id, kind)
                } else {
                    Placed::Interpreted(jm)
                }
            } else {
                match decode(&mut self.decoded, &mut self.arena, &mut self.counts.lookups, engine, jni, pc) {
                    Some(Ok(d)) => {
                        frame.frames = d.frames;
                        self.ids.extend_from_slice(d.ids(&self.arena));
                        Placed::Known
                    }
                    Some(Err(())) => return None,
                    None => Placed::Unknown,
                }
            };
            all_known &= matches!(placed, Placed::Known | Placed::Method(..));
            self.placed.push(placed);
            self.frames.push(frame);
        }
        if !all_known {
            return self.place_by_walk(engine, jni, shared, stack, cap);
        }
        let depth = self.write(stack, cap);
        if CHECK.load(Relaxed) {
            return Some(self.check(engine, jni, depth, stack, cap));
        }
        Some(depth)
    }

    /// The context from a walk as `stack=walk` makes it, whose frames also place the changed frames the
    /// tables could not (`placed`: the chain's frames from `shared` in, outermost first): each known
    /// frame takes its count of the walk's frames, an interpreter frame one, and a single unknown one
    /// what is left. Where that does not add up, or gives another context than the walk's, nothing is
    /// kept for the next sample.
    ///
    /// Where no changed frame is of unknown count, only the changed frames are walked (the innermost Java
    /// frames, as many as they hold): the shared ones are the previous sample's, whose walk they matched.
    fn place_by_walk(
        &mut self,
        engine: &RewritingEngine,
        jni: Jni,
        shared: usize,
        stack: *mut u32,
        cap: usize,
    ) -> Option<usize> {
        self.counts.walked += 1;
        if !self.placed.iter().any(|p| matches!(p, Placed::Unknown)) {
            let want: usize = self.frames[shared..].iter().map(|f| f.frames as usize).sum();
            let Thread { frames, ids, placed, decoded, arena, .. } = self;
            let placed_all = walk::walked_innermost(engine, jni, want, |walked, context, trusted| {
                trusted
                    && walked.len() == want
                    && Self::split(engine, jni, frames, ids, placed, (decoded, arena), shared, walked, 0)
                    && context_of(&ids[frames.get(shared).map_or(ids.len(), |f| f.start as usize)..])
                        .eq(context.iter().rev().copied())
            });
            if placed_all == Some(true) {
                self.counts.walked_innermost += 1;
                let depth = self.write(stack, cap);
                if CHECK.load(Relaxed) {
                    return Some(self.check(engine, jni, depth, stack, cap));
                }
                return Some(depth);
            }
        }
        let Thread { frames, ids, placed, decoded, arena, .. } = self;
        let (depth, kept) = walk::walked(engine, jni, |walked, context, whole| {
            let outside = frames[..shared].iter().map(|f| f.frames as usize).sum();
            let kept = whole
                && Self::split(engine, jni, frames, ids, placed, (decoded, arena), shared, walked, outside)
                && context_of(ids).eq(context.iter().rev().copied());
            (walk::write_ids(context, stack, cap), kept)
        })?;
        if !kept {
            self.frames.clear();
            self.ids.clear();
        }
        Some(depth)
    }

    /// Rebuilds `ids` for the chain's frames from `shared` in, taking the Java frames of those the
    /// tables did not place from `walked` (innermost first, of which the last `outside` are those of the
    /// frames outside `shared`) by position. False where the counts do not add up or a frame is a virtual
    /// thread's carrier.
    #[allow(clippy::too_many_arguments)]
    fn split(
        engine: &RewritingEngine,
        jni: Jni,
        frames: &mut [Frame],
        ids: &mut Vec<(u32, u8)>,
        placed: &[Placed],
        (decoded, arena): DecodedIds,
        shared: usize,
        walked: &[jvmtiFrameInfo],
        mut outside: usize,
    ) -> bool {
        let known: usize = outside + frames[shared..].iter().map(|f| f.frames as usize).sum::<usize>();
        let unknown = placed.iter().filter(|p| matches!(p, Placed::Unknown)).count();
        let fits = match unknown {
            0 => known == walked.len(),
            1 => known <= walked.len(),
            _ => false,
        };
        if !fits {
            return false;
        }
        let left = walked.len() - known;
        // The walk is innermost first: a frame's Java frames end where those of the frames outside it begin.
        ids.truncate(frames.get(shared).map_or(ids.len(), |f| f.start as usize));
        for (frame, placed) in frames[shared..].iter_mut().zip(placed) {
            frame.start = ids.len() as u32;
            match placed {
                Placed::Known => {
                    if let Some(d) = decoded.get(&frame.pc) {
                        ids.extend_from_slice(d.ids(arena));
                    }
                }
                &Placed::Method(id, kind) => {
                    if kind != STACK_NONE {
                        ids.push((id, kind));
                    }
                }
                Placed::Interpreted(_) | Placed::Unknown => {
                    if matches!(placed, Placed::Unknown) {
                        frame.frames = left as u32;
                    }
                    let end = walked.len() - outside;
                    let begin = end - frame.frames as usize;
                    if let &Placed::Interpreted(jm) = placed {
                        // The frame's own jmethodID against the walk's, until the read is trusted.
                        if jm != 0 && !method_ids_trusted() {
                            if walked[begin].method as usize == jm {
                                METHOD_IDS_AGREED.fetch_add(1, Relaxed);
                            } else {
                                METHOD_IDS_REFUTED.store(true, Relaxed);
                            }
                        }
                    }
                    for f in walked[begin..end].iter().rev() {
                        let (id, kind) = kind_of(engine, jni, f.method);
                        if kind == STACK_CARRIER {
                            return false;
                        }
                        if kind != STACK_NONE {
                            ids.push((id, kind));
                        }
                    }
                }
            }
            outside += frame.frames as usize;
        }
        true
    }

    /// Writes the context of `ids` into `stack` (outermost first, at most `cap` entries); its depth.
    fn write(&self, stack: *mut u32, cap: usize) -> usize {
        let mut depth = 0;
        for id in context_of(&self.ids) {
            if depth < cap {
                // SAFETY: `stack` is the thread's block's stack of `cap` entries (`Bc.walk`'s contract),
                // and `depth < cap`.
                unsafe { stack.add(depth).write(id) };
            }
            depth += 1;
        }
        depth
    }

    /// `stack=fpcheck`: walks as `stack=walk` does, writes that context and counts the sample if it is
    /// not the chain's (the first few are described on stderr).
    fn check(&mut self, engine: &RewritingEngine, jni: Jni, depth: usize, stack: *mut u32, cap: usize) -> usize {
        let ids = &self.ids;
        let frames = &self.frames;
        let Some((walked_depth, same)) = walk::walked(engine, jni, |walked, context, _| {
            let same = context_of(ids).eq(context.iter().rev().copied());
            if !same && MISMATCHES.load(Relaxed) < 5 {
                eprintln!(
                    "kprof: stack=fpcheck: chain context {:?} (depth {depth}), walk {:?}; walk methods {:?}; chain (pc, \
                     frames), outermost first {:?}",
                    context_of(ids).collect::<Vec<_>>(),
                    context.iter().rev().collect::<Vec<_>>(),
                    walked.iter().map(|f| f.method as usize).collect::<Vec<_>>(),
                    frames.iter().map(|f| (f.pc, f.frames)).collect::<Vec<_>>()
                );
            }
            (walk::write_ids(context, stack, cap), same)
        }) else {
            return depth;
        };
        if !same {
            // Counted at once, not per thread: the first few are described as they come.
            MISMATCHES.fetch_add(1, Relaxed);
            self.frames.clear();
            self.ids.clear();
        }
        walked_depth
    }
}

/// The context `ids` (outermost first, the sampling method last) stands for: the rewritten methods that
/// push, less the sampling one, outermost first.
fn context_of(ids: &[(u32, u8)]) -> impl Iterator<Item = u32> + '_ {
    let outer = ids.len().saturating_sub(1);
    ids[..outer].iter().filter(|(_, kind)| *kind == STACK_PUSHED).map(|&(id, _)| id)
}

/// What the return address `pc` in compiled code decodes to: Some(Err) for a virtual thread's carrier
/// frame, None where the code map cannot place it.
fn decode(
    decoded: &mut HashMap<usize, Decoded, PcHash>,
    arena: &mut Vec<(u32, u8)>,
    lookups: &mut u64,
    engine: &RewritingEngine,
    jni: Jni,
    pc: usize,
) -> Option<Result<Decoded, ()>> {
    let entry = match decoded.entry(pc) {
        Entry::Occupied(known) => return Some(Ok(*known.get())),
        Entry::Vacant(entry) => entry,
    };
    *lookups += 1;
    let methods = match code_map::lookup(pc) {
        CodeAt::Java(methods) => methods,
        CodeAt::Stub | CodeAt::Native => Box::default(),
        CodeAt::Interpreter | CodeAt::Unknown => return None,
    };
    let start = arena.len();
    for &m in methods.iter().rev() {
        let (id, kind) = kind_of(engine, jni, m as _);
        if kind == STACK_CARRIER {
            arena.truncate(start);
            return Some(Err(()));
        }
        if kind != STACK_NONE {
            arena.push((id, kind));
        }
    }
    let d = Decoded { frames: methods.len() as u32, start: start as u32, len: (arena.len() - start) as u32 };
    Some(Ok(*entry.insert(d)))
}
