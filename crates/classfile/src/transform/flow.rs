//! Basic blocks of a method and what the counting rewrites (bytecode and exact modes) need to know about
//! each: whether it calls, allocates, returns or throws, heads a loop, is entered by an edge, and where
//! Komorium's granularity checks go (Komorium paper, section 5.2). Both modes count a block's instructions at its start,
//! so on the same code they count the same bytecodes.

use crate::blocks::{basic_blocks_into, Block, BlockRule};
use crate::code::{branch_target, for_each_switch_target, Instructions};
use crate::edit::{CodeEditor, EditError};
use crate::opcodes::*;
use crate::{Code, ConstantPool, Error, Snippet};

/// Where granularity checks go besides loop headers, returns and throws, and where a path would run past
/// MaxPath unchecked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CheckPlaces {
    /// Komorium's places (section 5.2): also at the start of every block that calls.
    #[default]
    CallsAndLoops,
    /// Not at calls: an invocation's count waits across its calls for a loop header, a long path or its
    /// exit. Every commit still holds bytecodes of one invocation only, so samples stay in context; what an
    /// exception unwinding the invocation through a call loses is bounded by twice MaxPath (less than
    /// MaxPath left at the last check, at most MaxPath since), where a check at the call bounds it by MaxPath.
    Loops,
}

impl CheckPlaces {
    /// Whether a block that calls gets a check at its start.
    pub fn at_calls(self) -> bool {
        self == CheckPlaces::CallsAndLoops
    }
}

/// What the analysis found about one block.
#[derive(Clone, Copy, Default, Debug)]
pub struct BlockInfo {
    /// Holds an invoke instruction.
    pub calls: bool,
    /// Holds a `new` (which may run a class initializer).
    pub allocates: bool,
    /// Ends in a return or athrow.
    pub terminates: bool,
    /// Target of a backward edge (a loop header).
    pub loop_header: bool,
    /// Some edge (branch, fall-through, switch, exception) leads here.
    pub entered: bool,
    /// An exception handler starts here.
    pub handler: bool,
    /// Bytecode mode places a granularity check here.
    pub check: bool,
    /// Bytecodes counted since the last check when the block starts (along the longest forward path).
    pub entering: u32,
    /// Bytecodes counted since the method's entry when the block starts, along the longest path, when no
    /// loop or handler leads here (`u32::MAX` otherwise): a check here that would find fewer than MaxPath
    /// bytecodes even then can never commit.
    pub from_entry: u32,
    /// Where the block's counting code goes: its start, except in a handler that its own exception range
    /// covers (javac's `synchronized` and `finally` handlers: `astore; aload; monitorexit` under a range
    /// that targets the handler itself). There the code goes at the end of that range: C1 will not
    /// compile a method whose handler entry holds a covered instruction that can throw ("exception
    /// handler covers itself"), and before that point the handler may still hold a monitor.
    pub at: u32,
}

/// The blocks of one method and their facts; buffers are kept across methods.
#[derive(Default)]
pub struct Flow {
    pub blocks: Vec<Block>,
    pub info: Vec<BlockInfo>,
    /// Edges from branches, switches and fall-through, one per (block, target), sorted by target then source.
    pub edges: Vec<(u32, u32)>,
    marks: Vec<u8>,
    /// The exception table's distinct (start, end, handler) triples, in that order of fields' priority.
    entries: Vec<(u16, u16, u16)>,
    /// What the entries cover, as intervals of blocks per handler block, merged, sorted by handler.
    ranges: Vec<CoveredBlocks>,
    run: MaxTree,
}

/// Blocks `first..=last` are covered by exception ranges that lead to the block `handler`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct CoveredBlocks {
    handler: u32,
    first: u32,
    last: u32,
}

impl Flow {
    /// Finds the blocks of `code` (Komorium's rule: calls do not end blocks; blocks longer than `max_path`
    /// are split) and analyses them. Checks are placed at `places`, then where a forward path would run past
    /// `max_path` bytecodes unchecked (0: no limit).
    pub fn analyse(&mut self, code: &Code<'_>, max_path: u32, places: CheckPlaces) -> Result<(), Error> {
        basic_blocks_into(code, BlockRule::Komorium, max_path, &mut self.marks, &mut self.blocks)?;
        let bytes = code.code;
        let n = self.blocks.len();
        self.info.clear();
        self.info.resize(n, BlockInfo::default());
        let mut edges = std::mem::take(&mut self.edges);
        edges.clear();
        let mut insns = Instructions::new(bytes);
        for i in 0..n {
            let b = self.blocks[i];
            let mut last = None;
            for insn in insns.by_ref() {
                let insn = insn?;
                if is_invoke(insn.opcode) {
                    self.info[i].calls = true;
                }
                if insn.opcode == NEW {
                    self.info[i].allocates = true;
                }
                last = Some(insn);
                if insn.offset + insn.len >= b.end {
                    break;
                }
            }
            let Some(last) = last else { continue };
            let op = last.opcode;
            let blocks = &self.blocks;
            let mut add = |t: i64| -> Result<(), Error> {
                match block_of(blocks, t) {
                    Some(j) => {
                        edges.push((i as u32, j as u32));
                        Ok(())
                    }
                    None => Err(Error::new("branch target out of range", last.offset as usize)),
                }
            };
            let falls_through =
                !(is_return(op) || matches!(op, GOTO | GOTO_W | ATHROW | RET | TABLESWITCH | LOOKUPSWITCH));
            if let Some(t) = branch_target(bytes, last.offset as usize)? {
                add(t)?;
            }
            if matches!(op, TABLESWITCH | LOOKUPSWITCH) {
                for_each_switch_target(bytes, last.offset as usize, &mut add)?;
            }
            if falls_through && (b.end as usize) < bytes.len() {
                add(b.end as i64)?;
            }
            self.info[i].terminates = is_return(op) || op == ATHROW;
        }
        for (i, b) in self.blocks.iter().enumerate() {
            self.info[i].at = b.start;
        }
        self.exception_ranges(code)?;
        self.place_self_covered_handlers(bytes)?;
        // Edges from branches, switches and fall-through: one per (block, target), so as many as the code
        // has bytes at most. Sorted by target, so that the pass below meets each block's predecessors in turn.
        edges.sort_unstable_by_key(|&(from, to)| (to, from));
        edges.dedup();
        for &(from, to) in &edges {
            self.info[to as usize].entered = true;
            if to <= from {
                self.info[to as usize].loop_header = true;
            }
        }
        // An exception range enters its handler from every block it covers; it is never turned into
        // one edge per covered block: the pass below asks for the largest `run` over a covered interval.
        for r in &self.ranges {
            let info = &mut self.info[r.handler as usize];
            info.entered = true;
            if r.last >= r.handler {
                info.loop_header = true;
            }
        }
        // `run[i]`: bytecodes executed since the last check when block i ends, kept in a tree of maxima
        // so that the largest over an interval of blocks takes log(blocks) steps.
        let max_path = if max_path == 0 { u32::MAX } else { max_path };
        self.run.reset(n);
        let (mut e, mut r) = (0, 0);
        for i in 0..n {
            let mut entering = 0;
            // Only the entry leads to block 0 unless it heads a loop; other blocks need a way in.
            let mut from_entry = if i == 0 { 0 } else { u32::MAX };
            let mut first_pred = true;
            while e < edges.len() && edges[e].1 as usize == i {
                let from = edges[e].0 as usize;
                if from < i {
                    entering = entering.max(self.run.get(from));
                    let via = self.info[from].from_entry.saturating_add(self.blocks[from].insns);
                    from_entry = if first_pred { via } else { from_entry.max(via) };
                    first_pred = false;
                }
                e += 1;
            }
            if self.info[i].loop_header || self.info[i].handler {
                from_entry = u32::MAX;
            }
            while r < self.ranges.len() && self.ranges[r].handler as usize == i {
                let range = self.ranges[r];
                if (range.first as usize) < i {
                    entering = entering.max(self.run.max(range.first as usize, (range.last as usize).min(i - 1)));
                }
                r += 1;
            }
            let info = &mut self.info[i];
            info.check = (info.calls && places.at_calls()) || info.terminates || info.loop_header;
            info.entering = entering;
            info.from_entry = from_entry;
            let insns = self.blocks[i].insns;
            if !info.check && entering.saturating_add(insns) > max_path {
                info.check = true;
            }
            self.run.set(i, if info.check { insns } else { entering + insns });
        }
        self.edges = edges;
        Ok(())
    }

    /// The exception table as intervals of covered blocks per handler: duplicates (a table may repeat one
    /// entry 65,535 times) and the catch type (which does not change where control goes) drop out, and
    /// overlapping or adjacent intervals of one handler merge, so the work is bounded by the table's
    /// distinct entries, never by entries × blocks.
    fn exception_ranges(&mut self, code: &Code<'_>) -> Result<(), Error> {
        self.entries.clear();
        self.entries.extend(code.exception_entries().map(|e| (e.start, e.end, e.handler)));
        self.entries.sort_unstable();
        self.entries.dedup();
        self.ranges.clear();
        for &(start, end, handler) in &self.entries {
            let h = block_of(&self.blocks, handler as i64)
                .ok_or(Error::new("exception handler out of range", handler as usize))?;
            self.info[h].handler = true;
            // The blocks that overlap [start, end).
            let first = self.blocks.partition_point(|b| b.end <= start as u32);
            let upto = self.blocks.partition_point(|b| b.start < end as u32);
            if first < upto {
                self.ranges.push(CoveredBlocks { handler: h as u32, first: first as u32, last: upto as u32 - 1 });
            }
        }
        self.ranges.sort_unstable();
        let mut kept = 0;
        for k in 0..self.ranges.len() {
            let r = self.ranges[k];
            if kept > 0 {
                let prev = &mut self.ranges[kept - 1];
                if prev.handler == r.handler && r.first <= prev.last.saturating_add(1) {
                    prev.last = prev.last.max(r.last);
                    continue;
                }
            }
            self.ranges[kept] = r;
            kept += 1;
        }
        self.ranges.truncate(kept);
        Ok(())
    }

    /// Moves the counting code of a handler that its own range covers to the end of that range, when the
    /// handler's block runs quietly (no call, allocation, return or throw) up to there: of several such
    /// ranges, the one ending last that still qualifies. Each such handler's block is decoded once.
    fn place_self_covered_handlers(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let mut ends: Vec<(u32, u32)> = Vec::new();
        for &(start, end, handler) in &self.entries {
            if start <= handler && handler < end {
                if let Some(h) = block_of(&self.blocks, handler as i64) {
                    ends.push((h as u32, end as u32));
                }
            }
        }
        if ends.is_empty() {
            return Ok(());
        }
        ends.sort_unstable();
        ends.dedup();
        let mut quiet_ends: Vec<u32> = Vec::new();
        for group in ends.chunk_by(|a, b| a.0 == b.0) {
            let h = group[0].0 as usize;
            let b = self.blocks[h];
            // The offsets `to` in the block for which [b.start, to) is a run of quiet whole instructions.
            quiet_ends.clear();
            for insn in Instructions::at(bytes, b.start as usize) {
                let insn = insn?;
                if insn.offset >= b.end {
                    break;
                }
                quiet_ends.push(insn.offset);
                if is_invoke(insn.opcode) || is_return(insn.opcode) || matches!(insn.opcode, NEW | ATHROW) {
                    break;
                }
            }
            if let Some(&(_, end)) = group.iter().rev().find(|&&(_, end)| quiet_ends.binary_search(&end).is_ok()) {
                self.info[h].at = self.info[h].at.max(end);
            }
        }
        Ok(())
    }

    /// The exception ranges as (handler block, first covered block, last covered block), merged per handler.
    pub fn covered(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.ranges.iter().map(|r| (r.handler, r.first, r.last))
    }

    /// The first block runs exactly once per invocation (nothing leads back to it), so a prologue can
    /// count it.
    pub fn first_runs_once(&self) -> bool {
        !self.info.is_empty() && !self.info[0].entered
    }
}

/// The largest of a vector of counters over any interval of it, in log(len) steps (a tree of maxima).
#[derive(Default)]
struct MaxTree {
    leaves: usize,
    tree: Vec<u32>,
}

impl MaxTree {
    /// `n` counters, all 0.
    fn reset(&mut self, n: usize) {
        self.leaves = n.next_power_of_two().max(1);
        self.tree.clear();
        self.tree.resize(2 * self.leaves, 0);
    }

    fn set(&mut self, i: usize, v: u32) {
        let mut p = i + self.leaves;
        self.tree[p] = v;
        while p > 1 {
            p /= 2;
            self.tree[p] = self.tree[2 * p].max(self.tree[2 * p + 1]);
        }
    }

    fn get(&self, i: usize) -> u32 {
        self.tree[i + self.leaves]
    }

    /// The largest counter of `lo..=hi`.
    fn max(&self, lo: usize, hi: usize) -> u32 {
        let (mut l, mut r) = (lo + self.leaves, hi + self.leaves + 1);
        let mut m = 0;
        while l < r {
            if l & 1 == 1 {
                m = m.max(self.tree[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                m = m.max(self.tree[r]);
            }
            l /= 2;
            r /= 2;
        }
        m
    }
}

fn block_of(blocks: &[Block], offset: i64) -> Option<usize> {
    if offset < 0 {
        return None;
    }
    let o = offset as u32;
    let i = blocks.partition_point(|b| b.start <= o);
    (i > 0 && o < blocks[i - 1].end).then(|| i - 1)
}

/// Brackets every call in `code` (an intrinsic candidate's body, left uncounted) with `invokestatic mute`
/// before and `invokestatic unmute` after, so what it calls counts nothing in either counting mode.
pub fn bracket_calls(
    code: &[u8],
    editor: &mut CodeEditor,
    cp: &mut ConstantPool<'_>,
    s: &mut Snippet,
    helpers: (u16, u16),
) -> Result<(), EditError> {
    bracket_calls_where(code, editor, cp, s, helpers, |_| true)
}

/// [`bracket_calls`] for the calls `which` accepts: it is given the class of the called method (internal
/// name) and the method's name; `None` for invokedynamic.
pub fn bracket_calls_where(
    code: &[u8],
    editor: &mut CodeEditor,
    cp: &mut ConstantPool<'_>,
    s: &mut Snippet,
    (mute, unmute): (u16, u16),
    which: impl Fn(Option<(&[u8], &[u8])>) -> bool,
) -> Result<(), EditError> {
    let insns: Vec<_> = Instructions::new(code).collect::<Result<_, _>>()?;
    for insn in &insns {
        if !is_invoke(insn.opcode) {
            continue;
        }
        let owner = if insn.opcode == INVOKEDYNAMIC {
            None
        } else {
            let at = insn.offset as usize;
            let Some(&[hi, lo]) = code.get(at + 1..at + 3) else { continue };
            cp.member_ref(u16::from_be_bytes([hi, lo])).ok().map(|(class, name, _)| (class, name))
        };
        if !which(owner) {
            continue;
        }
        s.clear();
        s.invokestatic(cp, mute);
        editor.insert_before(insn.offset, s)?;
        // After the call itself, not before the next instruction: a branch to that instruction must not
        // close a bracket it never opened (brackets nest, and an unpaired unmute would end an outer one).
        s.clear();
        s.invokestatic(cp, unmute);
        editor.insert_after(insn.offset, s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::Attribute;

    const PLACES: [CheckPlaces; 2] = [CheckPlaces::CallsAndLoops, CheckPlaces::Loops];

    /// A method body of `bytes` with no exception table.
    fn code_of(bytes: &[u8]) -> Code<'_> {
        Code {
            attr: Attribute { name_index: 0, offset: 0, info: &[] },
            max_stack: 2,
            max_locals: 1,
            code: bytes,
            exception_table: &[],
            attributes: Vec::new(),
            narrow: false,
        }
    }

    /// The analysis as first written: one edge per (exception entry, covered block), sorted and
    /// deduplicated, and predecessor lists. Quadratic in the table, exact by construction: the reference.
    fn reference(code: &Code<'_>, max_path: u32, places: CheckPlaces) -> (Vec<Block>, Vec<BlockInfo>) {
        let mut f = Flow::default();
        f.analyse(code, max_path, places).unwrap();
        let (blocks, mut info) = (f.blocks, f.info);
        let n = blocks.len();
        let bytes = code.code;
        let mut edges: Vec<(u32, u32)> = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            let last = Instructions::new(bytes).map(Result::unwrap).filter(|x| x.offset < b.end).last().unwrap();
            let op = last.opcode;
            let mut add = |t: i64| edges.push((i as u32, block_of(&blocks, t).unwrap() as u32));
            if let Some(t) = branch_target(bytes, last.offset as usize).unwrap() {
                add(t);
            }
            let falls_through = !(is_return(op) || matches!(op, GOTO | ATHROW));
            if falls_through && (b.end as usize) < bytes.len() {
                add(b.end as i64);
            }
        }
        for (i, inf) in info.iter_mut().enumerate() {
            *inf = BlockInfo { at: blocks[i].start, ..BlockInfo::default() };
            let b = blocks[i];
            for x in Instructions::new(bytes).map(Result::unwrap).filter(|x| x.offset >= b.start && x.offset < b.end) {
                inf.calls |= is_invoke(x.opcode);
                inf.allocates |= x.opcode == NEW;
                inf.terminates = is_return(x.opcode) || x.opcode == ATHROW;
            }
        }
        let quiet = |from: u32, to: u32| {
            for x in Instructions::new(bytes).map(Result::unwrap) {
                if x.offset + x.len <= from {
                    continue;
                }
                if x.offset >= to {
                    return x.offset == to;
                }
                if x.offset < from || is_invoke(x.opcode) || is_return(x.opcode) || matches!(x.opcode, NEW | ATHROW) {
                    return false;
                }
            }
            false
        };
        for e in code.exception_entries() {
            let (start, end, handler) = (e.start as u32, e.end as u32, e.handler as u32);
            let h = block_of(&blocks, handler as i64).unwrap();
            info[h].handler = true;
            if start <= handler && handler < end {
                let at = info[h].at.max(end);
                if at < blocks[h].end && quiet(blocks[h].start, at) {
                    info[h].at = at;
                }
            }
            for (i, b) in blocks.iter().enumerate() {
                if b.start < end && b.end > start {
                    edges.push((i as u32, h as u32));
                }
            }
        }
        edges.sort_unstable();
        edges.dedup();
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(from, to) in &edges {
            info[to as usize].entered = true;
            if to <= from {
                info[to as usize].loop_header = true;
            } else {
                preds[to as usize].push(from);
            }
        }
        let max_path = if max_path == 0 { u32::MAX } else { max_path };
        let mut run = vec![0u32; n];
        let mut from_entry = vec![0u32; n];
        for i in 0..n {
            let inf = &mut info[i];
            inf.check = (inf.calls && places == CheckPlaces::CallsAndLoops) || inf.terminates || inf.loop_header;
            let entering = preds[i].iter().map(|&p| run[p as usize]).max().unwrap_or(0);
            inf.entering = entering;
            from_entry[i] = if inf.loop_header || inf.handler {
                u32::MAX
            } else if i == 0 {
                0
            } else {
                let via = |&p: &u32| from_entry[p as usize].saturating_add(blocks[p as usize].insns);
                preds[i].iter().map(via).max().unwrap_or(u32::MAX)
            };
            inf.from_entry = from_entry[i];
            let insns = blocks[i].insns;
            if !inf.check && entering.saturating_add(insns) > max_path {
                inf.check = true;
            }
            run[i] = if inf.check { insns } else { entering + insns };
        }
        (blocks, info)
    }

    /// Random methods (branches, calls, allocations, returns and throws, and exception tables of up to
    /// 300 entries with repeats, inverted and self-covering ranges) get the same analysis as the reference.
    #[test]
    fn same_as_the_quadratic_reference_on_random_methods() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as u32
        };
        for round in 0..400 {
            // Instruction starts first (targets must be instruction starts), then the code.
            let count = 2 + next(120);
            let kinds: Vec<u32> = (0..count).map(|_| next(10)).collect();
            let len = |k: u32| match k {
                0..=2 => 1, // nop
                3 | 4 => 3, // goto, ifeq
                5 => 3,     // invokestatic
                6 => 3,     // new
                7 => 1,     // return
                8 => 1,     // athrow
                _ => 1,     // nop
            };
            let mut starts = Vec::new();
            let mut pos = 0u32;
            for &k in &kinds {
                starts.push(pos);
                pos += len(k);
            }
            let mut code = Vec::new();
            for (i, &k) in kinds.iter().enumerate() {
                let here = starts[i] as i32;
                let target = starts[next(count) as usize] as i32;
                let off = ((target - here) as i16).to_be_bytes();
                match k {
                    3 => code.extend_from_slice(&[GOTO, off[0], off[1]]),
                    4 => code.extend_from_slice(&[IFEQ, off[0], off[1]]),
                    5 => code.extend_from_slice(&[INVOKESTATIC, 0, 1]),
                    6 => code.extend_from_slice(&[NEW, 0, 1]),
                    7 => code.push(RETURN),
                    8 => code.push(ATHROW),
                    _ => code.push(NOP),
                }
            }
            let mut ends = starts.clone();
            ends.push(pos);
            let mut table = Vec::new();
            let entries = if round % 4 == 0 { 0 } else { next(300) };
            let mut prev = [0u8; 8];
            for _ in 0..entries {
                let e = if next(3) == 0 && table.len() >= 8 {
                    prev
                } else {
                    let s = ends[next(ends.len() as u32) as usize] as u16;
                    let en = ends[next(ends.len() as u32) as usize] as u16;
                    let h = starts[next(count) as usize] as u16;
                    let t = next(2) as u16;
                    let mut e = [0u8; 8];
                    for (k, v) in [s, en, h, t].into_iter().enumerate() {
                        e[2 * k..2 * k + 2].copy_from_slice(&v.to_be_bytes());
                    }
                    e
                };
                table.extend_from_slice(&e);
                prev = e;
            }
            let c = Code {
                attr: Attribute { name_index: 0, offset: 0, info: &[] },
                max_stack: 2,
                max_locals: 1,
                code: &code,
                exception_table: &table,
                attributes: Vec::new(),
                narrow: false,
            };
            for (max_path, places) in [0, 3, 50].into_iter().flat_map(|m| PLACES.map(|p| (m, p))) {
                let (blocks, want) = reference(&c, max_path, places);
                let mut f = Flow::default();
                f.analyse(&c, max_path, places).unwrap();
                assert_eq!(f.blocks, blocks, "round {round}");
                assert_eq!(format!("{:?}", f.info), format!("{want:?}"), "round {round} {max_path} {places:?}");
            }
        }
    }

    /// `from_entry`: the longest count from the entry, through forward edges only; nothing after a loop
    /// header or a handler is bounded.
    #[test]
    fn counts_from_the_entry_are_bounded_only_before_loops() {
        // 0 iload_0; 1 ifeq +6 (7); 4 nop; 5 nop; 6 nop; 7 invokestatic #1; 10 return
        let bytes = [ILOAD_0, IFEQ, 0, 6, NOP, NOP, NOP, INVOKESTATIC, 0, 1, RETURN];
        let c = code_of(&bytes);
        let mut f = Flow::default();
        f.analyse(&c, 50, CheckPlaces::CallsAndLoops).unwrap();
        let from: Vec<u32> = f.info.iter().map(|i| i.from_entry).collect();
        // Blocks: [0,4) 2 insns, [4,7) 3 insns, [7,11) 2 insns: the longest way into the last is 2 + 3.
        assert_eq!(from, [0, 2, 5]);
        // A loop back to the call block: it and what follows it are unbounded.
        let looping = [ILOAD_0, IFEQ, 0, 6, NOP, NOP, NOP, INVOKESTATIC, 0, 1, GOTO, 0xff, 0xfd, RETURN];
        let c = Code { code: &looping, ..c };
        f.analyse(&c, 50, CheckPlaces::CallsAndLoops).unwrap();
        let from: Vec<u32> = f.info.iter().map(|i| i.from_entry).collect();
        assert_eq!(from, [0, 2, u32::MAX, u32::MAX]);
    }

    /// Without checks at calls, a call block in a loop body checks only where the path since the loop
    /// header's check would pass MaxPath; the header and the return keep theirs.
    #[test]
    fn checks_at_loops_only_leave_call_blocks_to_the_path_bound() {
        // 0 iload_0; 1 ifeq +12 (13); 4 invokestatic #1; 7 iinc 0 -1; 10 goto -10 (0); 13 return
        let bytes = [ILOAD_0, IFEQ, 0, 12, INVOKESTATIC, 0, 1, IINC, 0, 0xff, GOTO, 0xff, 0xf6, RETURN];
        let c = code_of(&bytes);
        let mut f = Flow::default();
        let checks = |f: &Flow| f.info.iter().map(|i| (i.calls, i.loop_header, i.check)).collect::<Vec<_>>();
        f.analyse(&c, 50, CheckPlaces::CallsAndLoops).unwrap();
        assert_eq!(checks(&f), [(false, true, true), (true, false, true), (false, false, true)]);
        f.analyse(&c, 50, CheckPlaces::Loops).unwrap();
        assert_eq!(checks(&f), [(false, true, true), (true, false, false), (false, false, true)]);
        // A bound shorter than header and body together brings the check back.
        f.analyse(&c, 3, CheckPlaces::Loops).unwrap();
        assert_eq!(checks(&f), [(false, true, true), (true, false, true), (false, false, true)]);
    }
}
