//! Comparing two profiles by calling context: the overlap percentage (as the Komorium and CCCP papers measure accuracy)
//! and the contexts whose shares differ most.
//!
//! A calling context is the path of frame display names from the root (callsites ignored unless asked
//! for), so profiles from different runs, modes or files line up. With rce(C, X) = counter(C) / Σ counter
//! in X, overlap(A, B) = Σ over contexts in both of min(rce(C, A), rce(C, B)): 100 % for identical
//! distributions, 0 % for disjoint ones.
//!
//! A comparison can be *projected* onto some frames ([`CompareOptions::only`], name prefixes such as
//! `kprof.harness.`): a context then keeps only those frames, the others are transparent (what they
//! count goes to the context of the nearest kept frame above them), and counts with no kept frame on
//! their path are left out of both totals. Profiles of one program on two JDKs differ in the JDK's
//! own frames; projected onto the application's frames they can be compared.

use crate::model::{Metric, Profile};
use std::collections::HashMap;

/// One calling context and its share in each profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextShare {
    /// Display names from the outermost frame to the leaf (the `[root]` excluded).
    pub path: Vec<String>,
    /// The callsite bci of each frame in `path` when callsites were compared; empty otherwise.
    pub callsites: Vec<i32>,
    pub count_a: u64,
    pub count_b: u64,
    /// rce(C, A) = count_a / total_a, in [0, 1].
    pub rce_a: f64,
    pub rce_b: f64,
}

impl ContextShare {
    /// The context as collapsed-stack text (`a;b;c`), with `@bci` after each frame when callsites count.
    pub fn label(&self) -> String {
        if self.path.is_empty() {
            return "[root]".to_string();
        }
        if self.callsites.is_empty() {
            return self.path.join(";");
        }
        let parts: Vec<String> = self.path.iter().zip(&self.callsites).map(|(n, c)| format!("{n}@{c}")).collect();
        parts.join(";")
    }
}

/// The result of [`compare`].
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub metric_a: Metric,
    pub metric_b: Metric,
    pub callsites: bool,
    /// Σ counter over all contexts of A.
    pub total_a: u64,
    pub total_b: u64,
    /// Contexts with a non-zero count in A.
    pub contexts_a: usize,
    pub contexts_b: usize,
    /// Contexts with a non-zero count in both.
    pub common: usize,
    /// Shares of A's and B's totals that fall in common contexts, in [0, 1].
    pub common_share_a: f64,
    pub common_share_b: f64,
    /// The overlap, in percent (0 when either total is 0).
    pub overlap_percent: f64,
    /// The contexts that differ most, by |rce_a − rce_b| descending (at most `top`; contexts with equal
    /// shares are left out).
    pub differ_most: Vec<ContextShare>,
    /// Counts left out of `total_a`/`total_b` because their path has no frame the projection keeps (0
    /// without a projection).
    pub left_out_a: u64,
    pub left_out_b: u64,
}

/// How [`compare_with`] compares.
#[derive(Clone, Debug, Default)]
pub struct CompareOptions {
    /// Keep contexts that differ only by callsite apart.
    pub callsites: bool,
    /// Bound of [`Comparison::differ_most`].
    pub top: usize,
    /// Project contexts onto the frames whose display name starts with one of these prefixes (see the
    /// module comment); empty: every frame counts.
    pub only: Vec<String>,
}

impl CompareOptions {
    fn keeps(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| name.starts_with(p.as_str()))
    }
}

/// Contexts of both profiles, keyed by (parent context, name id, callsite), with counts per side.
struct ContextTable {
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    /// (parent context, name, callsite) of each context; context 0 is the root.
    keys: Vec<(u32, u32, i32)>,
    ids: HashMap<(u32, u32, i32), u32>,
    counts: [Vec<u64>; 2],
    /// Per side, counts whose path has no kept frame (projections only).
    left_out: [u64; 2],
}

impl ContextTable {
    fn new() -> ContextTable {
        ContextTable {
            names: Vec::new(),
            name_ids: HashMap::new(),
            keys: vec![(0, u32::MAX, -1)],
            ids: HashMap::new(),
            counts: [vec![0], vec![0]],
            left_out: [0, 0],
        }
    }

    fn add(&mut self, side: usize, profile: &Profile, metric: Metric, options: &CompareOptions) {
        let projected = !options.only.is_empty();
        // Each frame's name id, or None for a frame the projection drops.
        let frame_names: Vec<Option<u32>> = profile
            .frames
            .iter()
            .map(|f| {
                let name = f.display_name();
                if !options.keeps(&name) {
                    return None;
                }
                Some(match self.name_ids.get(&name) {
                    Some(&id) => id,
                    None => {
                        let id = self.names.len() as u32;
                        self.names.push(name.clone());
                        self.name_ids.insert(name, id);
                        id
                    }
                })
            })
            .collect();
        // (profile node, its context)
        let mut work = vec![(0u32, 0u32)];
        while let Some((node, context)) = work.pop() {
            let value = profile.value(node, metric);
            if projected && context == 0 {
                self.left_out[side] += value;
            } else {
                self.counts[side][context as usize] += value;
            }
            for &child in &profile.nodes[node as usize].children {
                let c = &profile.nodes[child as usize];
                let Some(name) = frame_names[c.frame as usize] else {
                    // A dropped frame: it and what it counts stay in the context above it.
                    work.push((child, context));
                    continue;
                };
                let key = (context, name, if options.callsites { c.callsite } else { -1 });
                let id = match self.ids.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = self.keys.len() as u32;
                        self.keys.push(key);
                        self.ids.insert(key, id);
                        self.counts[0].push(0);
                        self.counts[1].push(0);
                        id
                    }
                };
                work.push((child, id));
            }
        }
    }

    fn share(&self, context: u32, callsites: bool, totals: [u64; 2]) -> ContextShare {
        let mut path = Vec::new();
        let mut sites = Vec::new();
        let mut c = context;
        while c != 0 {
            let (parent, name, site) = self.keys[c as usize];
            path.push(self.names[name as usize].clone());
            sites.push(site);
            c = parent;
        }
        path.reverse();
        sites.reverse();
        let [a, b] = [0, 1].map(|s| self.counts[s][context as usize]);
        ContextShare {
            path,
            callsites: if callsites { sites } else { Vec::new() },
            count_a: a,
            count_b: b,
            rce_a: ratio(a, totals[0]),
            rce_b: ratio(b, totals[1]),
        }
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Compares `a` under `metric_a` with `b` under `metric_b` (they may differ, e.g. bytecode-mode samples
/// against exact-mode bytecodes). `callsites` keeps contexts that differ only by callsite apart. `top`
/// bounds [`Comparison::differ_most`].
pub fn compare(
    a: &Profile,
    metric_a: Metric,
    b: &Profile,
    metric_b: Metric,
    callsites: bool,
    top: usize,
) -> Comparison {
    compare_with(a, metric_a, b, metric_b, &CompareOptions { callsites, top, only: Vec::new() })
}

/// [`compare`] with every option, projections included.
pub fn compare_with(
    a: &Profile,
    metric_a: Metric,
    b: &Profile,
    metric_b: Metric,
    options: &CompareOptions,
) -> Comparison {
    let (callsites, top) = (options.callsites, options.top);
    let mut table = ContextTable::new();
    table.add(0, a, metric_a, options);
    table.add(1, b, metric_b, options);
    let [ca, cb] = &table.counts;
    let totals = [ca.iter().sum::<u64>(), cb.iter().sum::<u64>()];
    let [ta, tb] = totals.map(u128::from);
    // Σ min(ca/ta, cb/tb) = Σ min(ca·tb, cb·ta) / (ta·tb), summed exactly in integers (the sum is at
    // most ta·tb < 2^128), so identical profiles give exactly 100 %.
    let mut numerator: u128 = 0;
    let (mut common, mut common_a, mut common_b) = (0usize, 0u64, 0u64);
    for (&x, &y) in ca.iter().zip(cb) {
        if x > 0 && y > 0 {
            common += 1;
            common_a += x;
            common_b += y;
            numerator += (x as u128 * tb).min(y as u128 * ta);
        }
    }
    let overlap_percent = if ta == 0 || tb == 0 { 0.0 } else { 100.0 * (numerator as f64 / (ta * tb) as f64) };
    let mut candidates: Vec<(f64, u32)> = (0..ca.len() as u32)
        .filter(|&i| ca[i as usize] > 0 || cb[i as usize] > 0)
        .map(|i| ((ratio(ca[i as usize], totals[0]) - ratio(cb[i as usize], totals[1])).abs(), i))
        .filter(|&(difference, _)| difference > 0.0)
        .collect();
    let take = top.min(candidates.len());
    if take > 0 && take < candidates.len() {
        candidates.select_nth_unstable_by(take - 1, |x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    }
    candidates.truncate(take);
    candidates.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let differ_most = candidates.iter().map(|&(_, i)| table.share(i, callsites, totals)).collect();
    Comparison {
        metric_a,
        metric_b,
        callsites,
        total_a: totals[0],
        total_b: totals[1],
        contexts_a: ca.iter().filter(|&&x| x > 0).count(),
        contexts_b: cb.iter().filter(|&&x| x > 0).count(),
        common,
        common_share_a: ratio(common_a, totals[0]),
        common_share_b: ratio(common_b, totals[1]),
        overlap_percent,
        differ_most,
        left_out_a: table.left_out[0],
        left_out_b: table.left_out[1],
    }
}

/// The calling contexts of two profiles in one tree (callsites merged, projected like [`compare_with`]
/// when `only` is not empty), with each side's self counts: what the differential flame graph draws and
/// [`difference_collapsed`] writes. Context 0 is the root; every context comes after its parent.
#[derive(Clone, Debug)]
pub struct UnionTree {
    /// Frame display names, indexed by [`UnionTree::name`].
    pub names: Vec<String>,
    /// The parent of each context (the root is its own).
    pub parent: Vec<u32>,
    /// The name of each context's frame (`u32::MAX` for the root).
    pub name: Vec<u32>,
    /// Self counts of each context, A's under its metric and B's under its own.
    pub counts: [Vec<u64>; 2],
    /// Σ of each side's counts.
    pub totals: [u64; 2],
    /// Counts left out of the totals by the projection (see [`Comparison::left_out_a`]).
    pub left_out: [u64; 2],
}

impl UnionTree {
    /// The children of every context, each list sorted by frame name.
    pub fn children(&self) -> Vec<Vec<u32>> {
        let mut children = vec![Vec::new(); self.parent.len()];
        for (c, &p) in self.parent.iter().enumerate().skip(1) {
            children[p as usize].push(c as u32);
        }
        for list in &mut children {
            list.sort_by(|&x, &y| {
                self.names[self.name[x as usize] as usize].cmp(&self.names[self.name[y as usize] as usize])
            });
        }
        children
    }
}

/// The [`UnionTree`] of `a` under `metric_a` and `b` under `metric_b`, projected onto the frames whose
/// names start with one of `only` (none: every frame).
pub fn union_tree(a: &Profile, metric_a: Metric, b: &Profile, metric_b: Metric, only: &[String]) -> UnionTree {
    let options = CompareOptions { callsites: false, top: 0, only: only.to_vec() };
    let mut table = ContextTable::new();
    table.add(0, a, metric_a, &options);
    table.add(1, b, metric_b, &options);
    let totals = [table.counts[0].iter().sum(), table.counts[1].iter().sum()];
    UnionTree {
        parent: table.keys.iter().map(|k| k.0).collect(),
        name: table.keys.iter().map(|k| k.1).collect(),
        names: table.names,
        counts: table.counts,
        totals,
        left_out: table.left_out,
    }
}

/// The difference of two profiles as collapsed stacks with two counts, the format flamegraph.pl draws
/// as a differential flame graph (and its difffolded.pl writes): `stack COUNT_A COUNT_B`, one line per
/// context with a self count in either profile, depth first, siblings by name. COUNT_B is B's own count;
/// COUNT_A is A's count scaled to B's total (rounded to the nearest whole count), so that the two columns
/// compare shares rather than raw counts; a context only in A has COUNT_B 0, one only in B COUNT_A 0.
pub fn difference_collapsed(tree: &UnionTree) -> Vec<u8> {
    use std::io::Write;
    let [total_a, total_b] = tree.totals.map(u128::from);
    let scale = |count: u64| -> u64 {
        if total_a == 0 {
            return 0;
        }
        ((count as u128 * total_b + total_a / 2) / total_a) as u64
    };
    let children = tree.children();
    let mut out = Vec::new();
    let mut prefix = String::new();
    let mut work: Vec<(u32, usize)> = children[0].iter().rev().map(|&c| (c, 0)).collect();
    while let Some((context, parent_len)) = work.pop() {
        prefix.truncate(parent_len);
        if parent_len > 0 {
            prefix.push(';');
        }
        prefix.push_str(&tree.names[tree.name[context as usize] as usize]);
        let (a, b) = (tree.counts[0][context as usize], tree.counts[1][context as usize]);
        if a > 0 || b > 0 {
            let _ = writeln!(out, "{prefix} {} {b}", scale(a));
        }
        let len = prefix.len();
        work.extend(children[context as usize].iter().rev().map(|&c| (c, len)));
    }
    out
}

/// The overlap percentage of `a` and `b` under one metric (see the module comment).
pub fn overlap_percent(a: &Profile, b: &Profile, metric: Metric, callsites: bool) -> f64 {
    compare(a, metric, b, metric, callsites, 0).overlap_percent
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, Meta};
    use crate::output::collapsed;

    fn from_collapsed(text: &str) -> Profile {
        collapsed::parse(text).unwrap()
    }

    #[test]
    fn identical_profiles_overlap_fully() {
        let a = from_collapsed("m;a 3\nm;b 7\nm 1\n[GC_active] 2\n");
        let c = compare(&a, Metric::Samples, &a, Metric::Samples, false, 10);
        assert_eq!(c.overlap_percent, 100.0);
        assert_eq!(c.common, 4);
        assert!(c.differ_most.is_empty(), "equal shares are no difference");
        // Scaling every count keeps the distribution and so the overlap.
        let b = from_collapsed("m;a 30\nm;b 70\nm 10\n[GC_active] 20\n");
        assert_eq!(overlap_percent(&a, &b, Metric::Samples, false), 100.0);
    }

    #[test]
    fn disjoint_profiles_do_not_overlap() {
        let a = from_collapsed("m;a 3\n");
        let b = from_collapsed("m;b 3\nn;a 4\n");
        let c = compare(&a, Metric::Samples, &b, Metric::Samples, false, 10);
        assert_eq!(c.overlap_percent, 0.0);
        assert_eq!(c.common, 0);
        assert_eq!((c.contexts_a, c.contexts_b), (1, 2));
    }

    #[test]
    fn a_known_fraction() {
        // A: m;a 50%, m;b 30%, m;c 20%.  B: m;a 25%, m;b 25%, m;d 50%.
        // overlap = min(.5,.25) + min(.3,.25) + 0 + 0 = 50 %.
        let a = from_collapsed("m;a 5\nm;b 3\nm;c 2\n");
        let b = from_collapsed("m;a 1\nm;b 1\nm;d 2\n");
        let c = compare(&a, Metric::Samples, &b, Metric::Samples, false, 2);
        assert!((c.overlap_percent - 50.0).abs() < 1e-12, "{}", c.overlap_percent);
        assert_eq!(c.common, 2);
        assert!((c.common_share_a - 0.8).abs() < 1e-12);
        assert!((c.common_share_b - 0.5).abs() < 1e-12);
        // |Δ|: m;d .5, m;a .25, m;c .2, m;b .05.
        let labels: Vec<String> = c.differ_most.iter().map(|d| d.label()).collect();
        assert_eq!(labels, ["m;d", "m;a"]);
        assert_eq!(c.differ_most[0].count_b, 2);
        assert_eq!(c.differ_most[0].rce_b, 0.5);
    }

    #[test]
    fn a_context_is_the_whole_path_and_callsites_count_only_when_asked() {
        let mut a = Profile::new(Meta::default(), &[Metric::Calls]);
        let m = a.intern(Frame::java("M", "m", "()V"));
        let f = a.intern(Frame::java("M", "f", "()V"));
        let nm = a.add_child(0, m, -1);
        let f1 = a.add_child(nm, f, 3);
        let f2 = a.add_child(nm, f, 9);
        a.set(f1, Metric::Calls, 1);
        a.set(f2, Metric::Calls, 3);
        let mut b = a.clone();
        b.set(f1, Metric::Calls, 3);
        b.set(f2, Metric::Calls, 1);
        assert_eq!(overlap_percent(&a, &b, Metric::Calls, false), 100.0);
        assert_eq!(overlap_percent(&a, &b, Metric::Calls, true), 50.0);
        let c = compare(&a, Metric::Calls, &b, Metric::Calls, true, 1);
        assert_eq!(c.differ_most[0].label(), "M.m()void@-1;M.f()void@3");
        // The same frame under another caller is another context.
        let x = from_collapsed("a;x 1\n");
        let y = from_collapsed("b;x 1\n");
        assert_eq!(overlap_percent(&x, &y, Metric::Samples, false), 0.0);
    }

    #[test]
    fn different_metrics_per_side_and_empty_profiles() {
        let mut a = from_collapsed("m;a 2\nm;b 2\n");
        for n in 0..a.nodes.len() as u32 {
            a.set(n, Metric::Calls, a.value(n, Metric::Samples) * 5);
        }
        let b = from_collapsed("m;a 1\nm;b 1\n");
        let c = compare(&a, Metric::Calls, &b, Metric::Samples, false, 5);
        assert_eq!(c.overlap_percent, 100.0);
        assert_eq!((c.total_a, c.total_b), (20, 2));
        let empty = Profile::new(Meta::default(), &[Metric::Samples]);
        let c = compare(&empty, Metric::Samples, &b, Metric::Samples, false, 5);
        assert_eq!(c.overlap_percent, 0.0);
        assert_eq!(c.total_a, 0);
    }

    fn projected(a: &Profile, b: &Profile, only: &[&str]) -> Comparison {
        let options = CompareOptions { callsites: false, top: 10, only: only.iter().map(|s| s.to_string()).collect() };
        compare_with(a, Metric::Samples, b, Metric::Samples, &options)
    }

    #[test]
    fn a_projection_keeps_only_matching_frames() {
        // The library frames between app.main and app.f differ, the app's contexts do not.
        let a = from_collapsed("app.main;lib.x;app.f 6\napp.main;lib.x 2\napp.main 2\nlib.boot 5\n");
        let b = from_collapsed("app.main;lib.y;lib.z;app.f 3\napp.main;lib.y 1\napp.main 1\n");
        assert!(overlap_percent(&a, &b, Metric::Samples, false) < 50.0);
        let c = projected(&a, &b, &["app."]);
        assert_eq!(c.overlap_percent, 100.0, "{c:?}");
        // lib.x's own samples went to app.main; lib.boot has no app frame and is left out.
        assert_eq!((c.total_a, c.left_out_a), (10, 5));
        assert_eq!((c.total_b, c.left_out_b), (5, 0));
        assert_eq!((c.contexts_a, c.common), (2, 2));
        // Projected, a difference in app frames still shows, under the app's path only.
        let d = from_collapsed("app.main;lib.x;app.g 6\napp.main 4\n");
        let c = projected(&a, &d, &["app."]);
        assert!((c.overlap_percent - 40.0).abs() < 1e-9, "{}", c.overlap_percent);
        let labels: Vec<String> = c.differ_most.iter().map(|d| d.label()).collect();
        assert_eq!(labels, ["app.main;app.f", "app.main;app.g"]);
        // Several prefixes; no projection leaves nothing out.
        let c = projected(&a, &b, &["app.main", "lib.x"]);
        assert_eq!(c.total_a, 10);
        assert_eq!(compare(&a, Metric::Samples, &b, Metric::Samples, false, 0).left_out_a, 0);
    }

    #[test]
    fn the_union_tree_holds_both_sides_and_the_difference_scales_a_to_b() {
        // A: 10 samples, B: 20; m;a keeps its share (50 %), m;b shrinks, m;c is gone, m;d is new.
        let a = from_collapsed("m;a 5\nm;b 3\nm;c 2\n");
        let b = from_collapsed("m;a 10\nm;b 2\nm;d 8\n");
        let tree = union_tree(&a, Metric::Samples, &b, Metric::Samples, &[]);
        assert_eq!(tree.totals, [10, 20]);
        assert_eq!(tree.parent.len(), 6, "root, m, a, b, c, d");
        assert!(tree.parent.iter().enumerate().skip(1).all(|(i, &p)| (p as usize) < i));
        let text = String::from_utf8(difference_collapsed(&tree)).unwrap();
        assert_eq!(text, "m;a 10 10\nm;b 6 2\nm;c 4 0\nm;d 0 8\n");
        // Projected: lib frames are transparent, paths without a kept frame left out.
        let a = from_collapsed("app.main;lib.x;app.f 6\nlib.boot 4\n");
        let b = from_collapsed("app.main;lib.y;app.f 3\n");
        let tree = union_tree(&a, Metric::Samples, &b, Metric::Samples, &["app.".to_string()]);
        assert_eq!((tree.totals, tree.left_out), ([6, 3], [4, 0]));
        assert_eq!(String::from_utf8(difference_collapsed(&tree)).unwrap(), "app.main;app.f 3 3\n");
    }

    #[test]
    fn collapsed_files_of_one_profile_overlap_fully() {
        let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples]);
        let names =
            ["a.A.f(int)void", "b.B.<init>(a.A[])void", "[GC_active]", "java.lang.Thread.sleep(long)void [native]"];
        let frames: Vec<u32> = names.iter().map(|n| p.intern(collapsed::frame_from_display_name(n))).collect();
        let mut n = 0;
        for (i, &f) in frames.iter().cycle().take(50).enumerate() {
            n = p.add_child(if i % 7 == 0 { 0 } else { n }, f, i as i32);
            p.set(n, Metric::Samples, i as u64 % 4);
        }
        let once = from_collapsed(std::str::from_utf8(&collapsed::render(&p, Metric::Samples)).unwrap());
        let twice = from_collapsed(std::str::from_utf8(&collapsed::render(&once, Metric::Samples)).unwrap());
        assert_eq!(overlap_percent(&p, &once, Metric::Samples, false), 100.0);
        assert_eq!(overlap_percent(&once, &twice, Metric::Samples, false), 100.0);
    }
}
