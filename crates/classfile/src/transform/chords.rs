//! Fewer counter updates for the bytecode mode (`count=chords`): Knuth's and Ball–Larus's event counting
//! on a spanning tree of the method's flow graph. Instead of one `iinc` per basic block, increments sit on
//! the chords (the edges outside a spanning tree), chosen so that every path between two places that read
//! the count (granularity checks, returns and throws) adds the same total as the blocks it runs through.
//!
//! How: give every vertex a potential `p`; the local holds `X = T - p(v)` at vertex `v`, where `T` is the
//! bytecodes counted since the last commit. An edge `u → v` then adds `n(u) + p(u) - p(v)`, zero on a tree
//! edge by the choice of `p`. The vertex `Z` (potential 0, `X` exact) stands for every place the count is
//! read or reset: the method's entry, the point after a granularity check (a checked block is split into
//! its entry vertex and `Z`, the split edge carrying the block's own count), and returns and throws.
//!
//! An increment can only go where one edge alone runs it: at a block's start when that edge is its only
//! way in, at a block's end when the block has one successor, or right after a conditional branch for its
//! fall-through. Edges where no place exists (a taken branch into a block with several predecessors, and
//! every exception edge, from each block a handler covers) must be tree edges: they are added to the tree
//! first, and when they contradict each other the method keeps one increment per block ([`Chords::place`]
//! returns false). Exception edges leave a block at any instruction, so a block's increments sit only at
//! its ends: in between, `X = T - p(u)` holds wherever it throws.
//!
//! Profiles are the same, bytecode for bytecode, as with one increment per block: checks and exits read
//! the same counts at the same places.

use crate::code::Instructions;
use crate::opcodes::*;
use crate::Error;

#[cfg(test)]
use super::flow::CheckPlaces;
use super::flow::Flow;

/// The vertex every check, return and throw reads at (potential 0).
const Z: u32 = 0;

/// Where the increments of one method go, as amounts added to the positive count `X` (the rewrite stores
/// `-X`). Indexed by block.
#[derive(Default)]
pub struct Chords {
    /// The count when the method starts (the prologue stores it).
    pub entry: i32,
    /// Added at the block's start, before its granularity check.
    pub start: Vec<i32>,
    /// Added before the block's last instruction (a branch, a switch or `goto`; the block has one successor).
    pub before_last: Vec<i32>,
    /// Added after the block's last instruction, on its fall-through only.
    pub after_last: Vec<i32>,
    /// Added before the block's return or throw (before the exit helper reads the count).
    pub exit: Vec<i32>,
    /// Offset and opcode of each block's last instruction.
    pub last: Vec<(u32, u8)>,
    /// Increments placed (non-zero entries above, the entry not included): the figure the tests compare.
    pub updates: usize,
    // Scratch: union-find with each vertex's potential relative to its parent.
    parent: Vec<u32>,
    offset: Vec<i64>,
    edges: Vec<Edge>,
    preds: Vec<u32>,
    succs: Vec<u32>,
    optional: Vec<Edge>,
    chord: Vec<bool>,
}

#[derive(Clone, Copy)]
enum Place {
    Entry,
    Start(u32),
    BeforeLast(u32),
    AfterLast(u32),
    Exit(u32),
    /// An edge where no increment can go: it must be a tree edge.
    Nowhere,
}

#[derive(Clone, Copy)]
struct Edge {
    from: u32,
    to: u32,
    weight: i64,
    place: Place,
}

/// Exception edges past this many (blocks covered, summed over handlers): the method keeps one increment
/// per block rather than spend time on a pathological exception table.
const MAX_EXCEPTION_EDGES: usize = 1 << 16;

impl Chords {
    /// Places the increments for the method whose flow `flow` analysed; `split[i]` says block `i` has a
    /// granularity check at its start. Returns false when the method should count block by block: its
    /// exception edges and unplaceable branches contradict each other, an increment would not fit an
    /// `iinc`, a handler's counting code does not sit at its start, or the code has `jsr`/`ret`.
    pub fn place(&mut self, flow: &Flow, code: &[u8], split: &[bool]) -> Result<bool, Error> {
        let n = flow.blocks.len();
        self.last.clear();
        let mut insns = Instructions::new(code);
        for b in &flow.blocks {
            let mut last = (b.start, NOP);
            for insn in insns.by_ref() {
                let insn = insn?;
                if matches!(insn.opcode, JSR | JSR_W | RET)
                    || (insn.opcode == WIDE && code[insn.offset as usize + 1] == RET)
                {
                    return Ok(false);
                }
                last = (insn.offset, insn.opcode);
                if insn.offset + insn.len >= b.end {
                    break;
                }
            }
            self.last.push(last);
        }
        if flow.info.iter().zip(&flow.blocks).any(|(i, b)| i.at != b.start) {
            return Ok(false);
        }
        // Distinct normal predecessors and successors (the edges are deduplicated).
        self.preds.clear();
        self.preds.resize(n, 0);
        self.succs.clear();
        self.succs.resize(n, 0);
        for &(from, to) in &flow.edges {
            self.preds[to as usize] += 1;
            self.succs[from as usize] += 1;
        }
        // The vertex an edge out of block u leaves from, and the count it carries: a checked block's count
        // went to Z on its split edge.
        let source = |u: usize| -> (u32, i64) {
            if split[u] {
                (Z, 0)
            } else {
                (1 + u as u32, flow.blocks[u].insns as i64)
            }
        };
        self.edges.clear();
        // Exception edges first (mandatory), then branches without a place, then the rest by preference.
        let mut exception_edges = 0usize;
        for (h, first, last) in flow.covered() {
            exception_edges += (last - first + 1) as usize;
            if exception_edges > MAX_EXCEPTION_EDGES {
                return Ok(false);
            }
            for u in first..=last {
                let (from, weight) = source(u as usize);
                self.edges.push(Edge { from, to: 1 + h, weight, place: Place::Nowhere });
                if self.last[u as usize].1 == ATHROW {
                    // A throw commits and resets the count before the handler sees it.
                    self.edges.push(Edge { from: Z, to: 1 + h, weight: 0, place: Place::Nowhere });
                }
            }
        }
        let mut optional = std::mem::take(&mut self.optional);
        optional.clear();
        for &(from, to) in &flow.edges {
            let (u, v) = (from as usize, to as usize);
            let (src, weight) = source(u);
            let (at, op) = self.last[u];
            let place = if v != 0 && self.preds[v] == 1 && !flow.info[v].handler {
                Place::Start(to)
            } else if self.succs[u] == 1 {
                if is_branch16(op) || matches!(op, GOTO_W | TABLESWITCH | LOOKUPSWITCH) {
                    Place::BeforeLast(from)
                } else {
                    Place::AfterLast(from)
                }
            } else if v == u + 1 && is_branch16(op) && op != GOTO && flow.blocks[v].start == at + 3 {
                Place::AfterLast(from)
            } else {
                Place::Nowhere
            };
            let e = Edge { from: src, to: 1 + to, weight, place };
            if matches!(place, Place::Nowhere) {
                self.edges.push(e);
            } else {
                optional.push(e);
            }
        }
        let mandatory = self.edges.len();
        for (v, b) in flow.blocks.iter().enumerate().filter(|&(v, _)| split[v]) {
            let weight = b.insns as i64;
            self.edges.push(Edge { from: 1 + v as u32, to: Z, weight, place: Place::Start(v as u32) });
        }
        self.edges.extend_from_slice(&optional);
        self.optional = optional;
        for u in 0..n {
            if flow.info[u].terminates {
                let (from, weight) = source(u);
                self.edges.push(Edge { from, to: Z, weight, place: Place::Exit(u as u32) });
            }
        }
        self.edges.push(Edge { from: Z, to: 1, weight: 0, place: Place::Entry });

        // Kruskal without weights: every edge that joins two trees is a tree edge.
        self.parent.clear();
        self.parent.extend(0..=n as u32);
        self.offset.clear();
        self.offset.resize(n + 1, 0);
        let mut chord = std::mem::take(&mut self.chord);
        chord.clear();
        chord.resize(self.edges.len(), false);
        let edges = std::mem::take(&mut self.edges);
        let placed = self.solve(&edges, mandatory, &mut chord, n);
        self.edges = edges;
        self.chord = chord;
        placed
    }

    /// Builds the tree and puts each chord's increment in its place (the second half of [`Self::place`]).
    fn solve(&mut self, edges: &[Edge], mandatory: usize, chord: &mut [bool], n: usize) -> Result<bool, Error> {
        for (k, e) in edges.iter().enumerate() {
            let (ra, pa) = self.find(e.from);
            let (rb, pb) = self.find(e.to);
            if ra == rb {
                // Closes a cycle: the edge needs an increment unless the tree already gives it its count.
                if pb - pa != e.weight {
                    if k < mandatory {
                        return Ok(false);
                    }
                    chord[k] = true;
                }
            } else {
                // p(rb) - p(ra) such that p(to) = p(from) + weight.
                self.parent[rb as usize] = ra;
                self.offset[rb as usize] = e.weight + pa - pb;
            }
        }
        for v in [&mut self.start, &mut self.before_last, &mut self.after_last, &mut self.exit] {
            v.clear();
            v.resize(n, 0);
        }
        self.entry = 0;
        let (_, pz) = self.find(Z);
        for (k, e) in edges.iter().enumerate() {
            if !chord[k] {
                continue;
            }
            let (_, pu) = self.find(e.from);
            let (_, pv) = self.find(e.to);
            // Potentials relative to Z's; in other components (unreachable code) any reference does.
            let add = e.weight + (pu - pz) - (pv - pz);
            let Ok(add) = i32::try_from(add) else { return Ok(false) };
            match e.place {
                Place::Entry => self.entry += add,
                Place::Start(b) => self.start[b as usize] += add,
                Place::BeforeLast(b) => self.before_last[b as usize] += add,
                Place::AfterLast(b) => self.after_last[b as usize] += add,
                Place::Exit(b) => self.exit[b as usize] += add,
                // Cannot happen (an unplaceable edge that closes a cycle returned above); count by blocks.
                Place::Nowhere => return Ok(false),
            }
        }
        // The entry is a constant store either way; the rest must fit an iinc (wide: 16 bits).
        let fits = |v: &Vec<i32>| v.iter().all(|&a| i16::try_from(a).is_ok() && a != i16::MIN as i32);
        if ![&self.start, &self.before_last, &self.after_last, &self.exit].into_iter().all(fits) {
            return Ok(false);
        }
        self.updates = [&self.start, &self.before_last, &self.after_last, &self.exit]
            .into_iter()
            .map(|v| v.iter().filter(|&&a| a != 0).count())
            .sum();
        Ok(true)
    }

    /// The root of `v`'s tree and `p(v) - p(root)`, compressing the path.
    fn find(&mut self, v: u32) -> (u32, i64) {
        let mut root = v;
        let mut sum = 0i64;
        while self.parent[root as usize] != root {
            sum += self.offset[root as usize];
            root = self.parent[root as usize];
        }
        // Compress: point every vertex on the path at the root with its full offset.
        let mut x = v;
        let mut rest = sum;
        while self.parent[x as usize] != x {
            let next = self.parent[x as usize];
            let own = self.offset[x as usize];
            self.parent[x as usize] = root;
            self.offset[x as usize] = rest;
            rest -= own;
            x = next;
        }
        (root, sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::Attribute;
    use crate::Code;

    const IF_ICMPGE: u8 = IFEQ + 9;

    fn code(bytes: &'static [u8]) -> Code<'static> {
        code_with(bytes, &[])
    }

    fn code_with(bytes: &'static [u8], exception_table: &'static [u8]) -> Code<'static> {
        Code {
            attr: Attribute { name_index: 0, offset: 0, info: &[] },
            max_stack: 2,
            max_locals: 2,
            code: bytes,
            exception_table,
            attributes: Vec::new(),
            narrow: false,
        }
    }

    /// The flow of `c` and the increments placed with no block split (no checks at block starts).
    fn placed(c: &Code<'_>, blocks: usize) -> (Flow, Chords, Vec<bool>) {
        let mut flow = Flow::default();
        flow.analyse(c, 50, CheckPlaces::CallsAndLoops).unwrap();
        assert_eq!(flow.blocks.len(), blocks);
        let split = vec![false; blocks];
        let mut chords = Chords::default();
        assert!(chords.place(&flow, c.code, &split).unwrap());
        (flow, chords, split)
    }

    /// Runs the method through `path` (block indices; an edge to the next block in the code is its
    /// fall-through, any other a branch) as the rewrite places the increments, and checks that every check
    /// (at a split block's start) and the exit read the bytecodes counted since the entry.
    fn run(c: &Chords, flow: &Flow, split: &[bool], path: &[usize]) {
        run_throwing(c, flow, split, path, None)
    }

    /// [`run`] where the block at `path[k]` throws to the handler at `path[k + 1]` for `throws == Some(k)`.
    fn run_throwing(c: &Chords, flow: &Flow, split: &[bool], path: &[usize], throws: Option<usize>) {
        let (mut x, mut t) = (c.entry, 0);
        for (k, &u) in path.iter().enumerate() {
            x += c.start[u];
            t += flow.blocks[u].insns as i32;
            if split[u] {
                assert_eq!(x, t, "check of block {u} on {path:?}");
            }
            match path.get(k + 1) {
                Some(_) if throws == Some(k) => {}
                Some(&v) => {
                    x += c.before_last[u];
                    if v == u + 1 && c.last[u].1 != GOTO {
                        x += c.after_last[u];
                    }
                }
                None => assert_eq!(x + c.exit[u], t, "exit of {path:?}"),
            }
        }
    }

    #[test]
    fn a_diamond_counts_each_path_with_one_update_at_most() {
        // 0 iload_0; 1 ifeq +9 (10); 4 iinc 1 1; 7 goto +6 (13); 10 iinc 1 2; 13 iload_1; 14 ireturn
        let c = code(&[ILOAD_0, IFEQ, 0, 9, IINC, 1, 1, GOTO, 0, 6, IINC, 1, 2, ILOAD_0 + 1, IRETURN]);
        let (flow, chords, split) = placed(&c, 4);
        run(&chords, &flow, &split, &[0, 1, 3]);
        run(&chords, &flow, &split, &[0, 2, 3]);
        // Block counting updates three times (the first block goes to the prologue), each path twice;
        // here one path runs no update and the other one.
        assert_eq!(chords.updates, 1, "{:?} {:?} {:?}", chords.start, chords.before_last, chords.exit);
    }

    #[test]
    fn a_loop_with_a_branch_reads_exact_counts_at_its_check() {
        // 0 iconst_0; 1 istore_1; 2 iload_1 (loop header: checked); 3 iload_0; 4 if_icmpge +12 (16);
        // 7 iload_1; 8 ifeq +6 (14); 11 iinc 1 1; 14 iinc 1 1; 17 goto -15 (2); 20 return
        let c = code(&[
            ICONST_0,
            ISTORE_0 + 1,
            ILOAD_0 + 1,
            ILOAD_0,
            IF_ICMPGE,
            0,
            16,
            ILOAD_0 + 1,
            IFEQ,
            0,
            6,
            IINC,
            1,
            1,
            IINC,
            1,
            1,
            GOTO,
            0xff,
            0xf1,
            RETURN,
        ]);
        let mut flow = Flow::default();
        flow.analyse(&c, 50, CheckPlaces::CallsAndLoops).unwrap();
        let split: Vec<bool> = flow.info.iter().map(|i| i.loop_header).collect();
        assert_eq!(split, [false, true, false, false, false, false]);
        let mut chords = Chords::default();
        assert!(chords.place(&flow, c.code, &split).unwrap());
        run(&chords, &flow, &split, &[0, 1, 5]);
        run(&chords, &flow, &split, &[0, 1, 2, 3, 4, 1, 2, 4, 1, 5]);
        run(&chords, &flow, &split, &[0, 1, 2, 4, 1, 2, 3, 4, 1, 2, 4, 1, 5]);
        // One update on each way round the loop at most, where block counting has three or four.
        assert!(chords.updates <= 3, "{:?} {:?} {:?}", chords.start, chords.before_last, chords.after_last);
    }

    #[test]
    fn a_block_that_throws_reaches_its_handler_with_its_whole_count() {
        // try { 0 iload_0; 1 ifeq +9 (10); 4 iinc 1 1; 7 goto +6 (13); 10 iinc 1 2;
        //       13 bipush 10; 15 iload_0; 16 idiv; 17 pop; 18 return } catch: 19 pop; 20 iinc 1 1; 23 return
        let c = code_with(
            &[
                ILOAD_0, IFEQ, 0, 9, IINC, 1, 1, GOTO, 0, 6, IINC, 1, 2, BIPUSH, 10, ILOAD_0, IDIV, POP, RETURN, POP,
                IINC, 1, 1, RETURN,
            ],
            &[0, 0, 0, 19, 0, 19, 0, 0],
        );
        let (flow, chords, split) = placed(&c, 5);
        run(&chords, &flow, &split, &[0, 1, 3]);
        run(&chords, &flow, &split, &[0, 2, 3]);
        // The division throws (block 3 counted whole, as block counting counts it), or anything earlier.
        run_throwing(&chords, &flow, &split, &[0, 1, 3, 4], Some(2));
        run_throwing(&chords, &flow, &split, &[0, 2, 3, 4], Some(2));
        run_throwing(&chords, &flow, &split, &[0, 1, 4], Some(1));
        run_throwing(&chords, &flow, &split, &[0, 2, 4], Some(1));
        run_throwing(&chords, &flow, &split, &[0, 4], Some(0));
    }

    #[test]
    fn exception_edges_that_contradict_a_branch_keep_block_counting() {
        // try { 0 iload_0; 1 ifeq +6 (7); 4 iinc 1 1; 7 bipush 10; 9 iload_0; 10 idiv; 11 pop; 12 return }
        // catch: 13 pop; 14 iinc 1 1; 17 return. The taken branch to 7 has no place of its own (7 has two
        // ways in, 1 two ways out), and the handler needs p(7) = p(0) + 2 - 5 where the branch needs p(0) + 2.
        let c = code_with(
            &[ILOAD_0, IFEQ, 0, 6, IINC, 1, 1, BIPUSH, 10, ILOAD_0, IDIV, POP, RETURN, POP, IINC, 1, 1, RETURN],
            &[0, 0, 0, 13, 0, 13, 0, 0],
        );
        let mut flow = Flow::default();
        flow.analyse(&c, 50, CheckPlaces::CallsAndLoops).unwrap();
        let mut chords = Chords::default();
        assert!(!chords.place(&flow, c.code, &[false; 4]).unwrap());
    }
}
