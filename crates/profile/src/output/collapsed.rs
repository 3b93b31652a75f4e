//! Collapsed stacks: one line per calling context with a non-zero count, outermost frame first, frames
//! `;`-joined, then a space and the count (`a.Main.main()void;a.Work.run(int)void 42`). This is what
//! flamegraph.pl and speedscope read. Contexts that differ only by callsite are merged.

use crate::model::{descriptor_to_java, Frame, FrameKind, Meta, Metric, Profile};
use std::collections::HashMap;
use std::io::Write;

/// Renders collapsed stacks under `metric`, in depth-first order.
pub fn render(profile: &Profile, metric: Metric) -> Vec<u8> {
    let mut out = Vec::new();
    Lines::new(profile, metric).write(&mut out).expect("writing to memory");
    out
}

/// The collapsed stacks of a profile, to be measured and written. Every line repeats its whole stack, so
/// a tree of millions of deep contexts (an exact profile of a compiler) makes tens of gigabytes: they are
/// written as they are made, never built in memory, and [`Lines::byte_len`] tells beforehand what they take.
pub struct Lines {
    merged: Profile,
    names: Vec<String>,
    metric: Metric,
}

impl Lines {
    pub fn new(profile: &Profile, metric: Metric) -> Lines {
        let merged = profile.merged_by_frame();
        let names = super::display_names(&merged);
        Lines { merged, names, metric }
    }

    /// Bytes that [`Lines::write`] writes.
    pub fn byte_len(&self) -> u64 {
        let mut total = 0u64;
        let _ = self.walk(|stack, value| {
            total += stack.len() as u64 + 2 + value.checked_ilog10().unwrap_or(0) as u64 + 1;
            Ok(())
        });
        total
    }

    /// Writes the lines, in depth-first order.
    pub fn write(&self, out: &mut dyn Write) -> std::io::Result<()> {
        self.walk(|stack, value| writeln!(out, "{stack} {value}"))
    }

    /// Calls `line` with each context's stack and value, depth first.
    fn walk(&self, mut line: impl FnMut(&str, u64) -> std::io::Result<()>) -> std::io::Result<()> {
        let merged = &self.merged;
        // The current stack as text; each work item carries the length of its parent's prefix, so a
        // node's line is built without walking back to the root (deep trees stay linear).
        let mut prefix = String::new();
        let mut work: Vec<(u32, usize)> = merged.nodes[0].children.iter().rev().map(|&c| (c, 0)).collect();
        while let Some((node, parent_len)) = work.pop() {
            prefix.truncate(parent_len);
            if parent_len > 0 {
                prefix.push(';');
            }
            prefix.push_str(&self.names[merged.nodes[node as usize].frame as usize]);
            let value = merged.value(node, self.metric);
            if value > 0 {
                line(&prefix, value)?;
            }
            let len = prefix.len();
            work.extend(merged.nodes[node as usize].children.iter().rev().map(|&c| (c, len)));
        }
        Ok(())
    }
}

/// Reads any collapsed-stacks file into a profile with mode `collapsed`; the counts become samples.
/// Blank lines are skipped; the count is the last space-separated token of a line, so frame names may
/// contain spaces; a line repeated adds up. Frame names are turned back into frames by
/// [`frame_from_display_name`], so they render to the same names again.
pub fn parse(text: &str) -> Result<Profile, String> {
    let mut profile = Profile::new(Meta { mode: "collapsed".to_string(), ..Meta::default() }, &[Metric::Samples]);
    let mut frames_by_name: HashMap<String, u32> = HashMap::new();
    frames_by_name.insert(profile.frames[0].display_name(), 0);
    let mut child_of: HashMap<(u32, u32), u32> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim_end();
        if line.trim_start().is_empty() {
            continue;
        }
        let bad =
            |what: &str| format!("line {line_no}: {what} (expected 'frame;frame;... COUNT'): '{}'", excerpt(line));
        let (stack, count) = line.rsplit_once([' ', '\t']).ok_or_else(|| bad("no count after the stack"))?;
        let count: u64 = count.parse().map_err(|_| bad(&format!("'{}' is not a whole count", excerpt(count))))?;
        let stack = stack.trim_end();
        if stack.trim_start().is_empty() {
            return Err(bad("no stack before the count"));
        }
        let mut node = 0u32;
        for name in stack.split(';') {
            let frame = match frames_by_name.get(name) {
                Some(&f) => f,
                None => {
                    let f = profile.frames.len() as u32;
                    profile.frames.push(frame_from_display_name(name));
                    frames_by_name.insert(name.to_string(), f);
                    f
                }
            };
            node = match child_of.get(&(node, frame)) {
                Some(&n) => n,
                None => {
                    let n = profile.add_child(node, frame, -1);
                    child_of.insert((node, frame), n);
                    n
                }
            };
        }
        profile.value(node, Metric::Samples).checked_add(count).ok_or_else(|| bad("counts overflow"))?;
        profile.add(node, Metric::Samples, count);
    }
    Ok(profile)
}

/// The start of `s`, for error messages.
fn excerpt(s: &str) -> String {
    const MAX: usize = 60;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// The frame whose [`Frame::display_name`] is `name`: `[thread X]` is a thread, other bracketed names are
/// pseudo-frames, a ` [native]` suffix marks a native method, and `pkg.Class.method(int,a.B[])void` is
/// split into class, method and JVM descriptor. A name that does not read back exactly (foreign
/// collapsed files: `libc.so.6`, `java/lang/Thread.run_[j]`) becomes an opaque Java frame whose method
/// is the whole name, so it still renders unchanged.
pub fn frame_from_display_name(name: &str) -> Frame {
    if name.starts_with('[') && name.ends_with(']') {
        if let Some(thread) = name.strip_prefix("[thread ").and_then(|s| s.strip_suffix(']')) {
            return Frame::thread(thread);
        }
        return Frame::pseudo(name);
    }
    let (body, kind) = match name.strip_suffix(" [native]") {
        Some(body) => (body, FrameKind::Native),
        None => (name, FrameKind::Java),
    };
    let (head, java_signature) = match body.find('(') {
        Some(i) => (&body[..i], Some(&body[i..])),
        None => (body, None),
    };
    let (class, method) = head.rsplit_once('.').unwrap_or(("", head));
    let signature = match java_signature {
        Some(s) => java_to_descriptor(s),
        None => Some(String::new()),
    };
    if let Some(signature) = signature {
        let frame = Frame { kind, class: class.to_string(), method: method.to_string(), signature };
        if frame.display_name() == name {
            return frame;
        }
    }
    Frame { kind: FrameKind::Java, class: String::new(), method: name.to_string(), signature: String::new() }
}

/// The inverse of [`descriptor_to_java`]: `(int,java.lang.String[])void` → `(I[Ljava/lang/String;)V`.
/// `None` when the text is not of that shape.
fn java_to_descriptor(java: &str) -> Option<String> {
    fn one(ty: &str, out: &mut String) -> Option<()> {
        let mut base = ty;
        let mut dims = 0;
        while let Some(b) = base.strip_suffix("[]") {
            base = b;
            dims += 1;
        }
        if base.is_empty() || base.contains(['[', ']', '(', ')', ',', ';', ' ', '/']) {
            return None;
        }
        out.push_str(&"[".repeat(dims));
        let code = match base {
            "byte" => "B",
            "char" => "C",
            "double" => "D",
            "float" => "F",
            "int" => "I",
            "long" => "J",
            "short" => "S",
            "boolean" => "Z",
            "void" => "V",
            class => {
                out.push('L');
                out.push_str(&class.replace('.', "/"));
                out.push(';');
                return Some(());
            }
        };
        out.push_str(code);
        Some(())
    }
    let rest = java.strip_prefix('(')?;
    let (params, ret) = rest.split_once(')')?;
    let mut desc = String::from("(");
    if !params.is_empty() {
        for p in params.split(',') {
            one(p, &mut desc)?;
        }
    }
    desc.push(')');
    one(ret, &mut desc)?;
    // Only accept what reads back the same (e.g. `(int)void` but not `( int )void`).
    (descriptor_to_java(&desc) == java).then_some(desc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Profile {
        let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples, Metric::Calls]);
        let t = p.intern(Frame::thread("main"));
        let main = p.intern(Frame::java("a.Main", "main", "([Ljava/lang/String;)V"));
        let work = p.intern(Frame::java("a.Work", "run", "(I)J"));
        let gc = p.intern(Frame::pseudo("[GC_active]"));
        let nat = p.intern(Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Thread", "sleep", "(J)V") });
        let nt = p.add_child(0, t, -1);
        let nm = p.add_child(nt, main, -1);
        let w1 = p.add_child(nm, work, 3);
        let w2 = p.add_child(nm, work, 9);
        let g = p.add_child(0, gc, -1);
        let s = p.add_child(nm, nat, 12);
        p.set(nm, Metric::Samples, 1);
        p.set(w1, Metric::Samples, 2);
        p.set(w2, Metric::Samples, 3);
        p.set(g, Metric::Samples, 4);
        p.set(s, Metric::Calls, 5);
        p
    }

    #[test]
    fn renders_golden_lines_with_callsites_merged() {
        let text = String::from_utf8(render(&sample(), Metric::Samples)).unwrap();
        assert_eq!(
            text,
            "[thread main];a.Main.main(java.lang.String[])void 1\n\
             [thread main];a.Main.main(java.lang.String[])void;a.Work.run(int)long 5\n\
             [GC_active] 4\n"
        );
        let calls = String::from_utf8(render(&sample(), Metric::Calls)).unwrap();
        assert_eq!(
            calls,
            "[thread main];a.Main.main(java.lang.String[])void;java.lang.Thread.sleep(long)void [native] 5\n"
        );
    }

    #[test]
    fn round_trips_names_and_counts() {
        let text = String::from_utf8(render(&sample(), Metric::Samples)).unwrap();
        let parsed = parse(&text).unwrap();
        assert_eq!(parsed.meta.mode, "collapsed");
        assert_eq!(String::from_utf8(render(&parsed, Metric::Samples)).unwrap(), text);
        let main = parsed.frames.iter().find(|f| f.method == "main" && f.kind == FrameKind::Java).unwrap();
        assert_eq!(*main, Frame::java("a.Main", "main", "([Ljava/lang/String;)V"));
        let native = parsed.frames.iter().find(|f| f.kind == FrameKind::Native);
        assert!(native.is_none(), "the calls-only native frame has no samples");
        assert!(parsed.frames.contains(&Frame::thread("main")));
        assert!(parsed.frames.contains(&Frame::pseudo("[GC_active]")));
    }

    #[test]
    fn names_read_back_to_the_same_display_name() {
        for name in [
            "a.b.C.m(int)void",
            "a.b.C$Inner.<init>(a.b.C,long[][],java.lang.String)void",
            "java.lang.Thread.sleep(long)void [native]",
            "C.m()void",
            "m",
            "java/lang/Thread.run_[j]",
            "libc.so.6",
            "__GI___libc_write",
            "a.b.C.m( int )void",
            "a.b.C.m(int",
            "[thread pool-1 worker 2]",
            "[GC_active]",
            "[]",
            "weird name with spaces (x) y",
            "ünïcødé.Klass.méthod(ünïcødé.T)void",
            "a.Foo$$Lambda.0x0000000801001234.run()void",
            "",
        ] {
            let frame = frame_from_display_name(name);
            assert_eq!(frame.display_name(), name, "{frame:?}");
        }
        let f = frame_from_display_name("a.b.C.m(int,java.lang.String[])boolean");
        assert_eq!(f, Frame::java("a.b.C", "m", "(I[Ljava/lang/String;)Z"));
        assert_eq!(frame_from_display_name("[thread main]").kind, FrameKind::Thread);
        assert_eq!(frame_from_display_name("[native]").kind, FrameKind::Pseudo);
        assert_eq!(frame_from_display_name("x.Y.z()void [native]").kind, FrameKind::Native);
    }

    #[test]
    fn tolerates_blank_lines_spaces_tabs_and_repeats() {
        let p = parse("\n  \na b;c d 3\r\n\na b;c d\t4\nx 1\n").unwrap();
        let text = String::from_utf8(render(&p, Metric::Samples)).unwrap();
        assert_eq!(text, "a b;c d 7\nx 1\n");
        assert_eq!(p.totals(Metric::Samples)[0], 8);
    }

    #[test]
    fn rejects_garbage_with_line_numbers() {
        let e = parse("a;b 1\nhello world\n").unwrap_err();
        assert!(e.starts_with("line 2: 'world' is not a whole count"), "{e}");
        let e = parse("a;b 1\n\nnocount\n").unwrap_err();
        assert!(e.starts_with("line 3: no count"), "{e}");
        let e = parse("a;b -4\n").unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        let e = parse("a;b 1.5\n").unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        let e = parse("   7\n").unwrap_err();
        assert!(e.starts_with("line 1: no stack"), "{e}");
        let e = parse("a 18446744073709551615\na 1\n").unwrap_err();
        assert!(e.starts_with("line 2: counts overflow"), "{e}");
    }

    #[test]
    fn deep_trees_render_and_parse_without_recursion() {
        let mut p = Profile::new(Meta::default(), &[Metric::Samples]);
        let f = p.intern(Frame::java("A", "r", "()V"));
        let mut n = 0;
        for _ in 0..100_000 {
            n = p.add_child(n, f, 1);
        }
        p.set(n, Metric::Samples, 2);
        let text = render(&p, Metric::Samples);
        assert_eq!(text.len(), 100_000 * "A.r()void;".len() - 1 + " 2\n".len());
        let back = parse(std::str::from_utf8(&text).unwrap()).unwrap();
        assert_eq!(back.nodes.len(), 100_001);
        assert_eq!(back.totals(Metric::Samples)[0], 2);
    }
}
