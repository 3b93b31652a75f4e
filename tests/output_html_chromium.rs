//! The HTML flame graph rendered by headless Chromium: expected frames in the DOM, search, zoom and the
//! metric driven through the URL hash the page honours (`#metric=cpu&search=...&zoom=NAME&icicle=1`) and
//! through its controls, the differential flame graph of `kprof compare --html` with its colour classes
//! (and a screenshot), big or deep profiles staying cheap to draw; no page logs anything to its console.
//! Needs Debian's `chromium` (scripts/install-test-deps installs it); set KPROF_CHROMIUM to use another
//! binary.

mod common;

use kprof_profile::output::html;
use kprof_profile::{Frame, FrameKind, Meta, Metric, Profile};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

fn scratch() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kprof-html-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the flame graph of `profile` and returns the DOM Chromium built from it at `#hash`.
fn rendered_dom(profile: &Profile, metric: Metric, hash: &str) -> String {
    rendered_dom_driven(profile, metric, hash, "")
}

/// Like [`rendered_dom`], with `driver` (a script standing in for a user: clicks, key presses) run after
/// the page's own script.
fn rendered_dom_driven(profile: &Profile, metric: Metric, hash: &str, driver: &str) -> String {
    let dir = scratch();
    let page = dir.join("flame.html");
    let html = String::from_utf8(html::render(profile, metric)).unwrap();
    assert_eq!(html.matches("</body>").count(), 1);
    let html = html.replace("</body>", &format!("<script>{driver}</script></body>"));
    std::fs::write(&page, html).unwrap();
    let url = format!("file://{}{}", page.display(), if hash.is_empty() { String::new() } else { format!("#{hash}") });
    let dom = common::dump_dom(&url, &dir.join("chromium-profile"));
    std::fs::remove_dir_all(&dir).ok();
    dom
}

/// How a frame name appears as text in the serialized DOM.
fn escaped(name: &str) -> String {
    name.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The text of every drawn frame element (`<div class="f ..." ...>NAME</div>`), with its classes.
fn frames(dom: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for piece in dom.split("<div class=\"f").skip(1) {
        let classes = piece[..piece.find('"').unwrap()].trim().to_string();
        let body = &piece[piece.find('>').unwrap() + 1..];
        let text = &body[..body.find("</div>").unwrap()];
        out.push((text.to_string(), classes));
    }
    out
}

fn text_of(dom: &str, id: &str) -> String {
    let open = format!("id=\"{id}\"");
    let at = dom.find(&open).unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let body = &dom[at + dom[at..].find('>').unwrap() + 1..];
    body[..body.find("</").unwrap()].to_string()
}

const ODD: &str = "[odd <&> \"quotes\" 'single' ü 名前]";

/// 100 samples: alpha 40, beta 10 + helper 20, Cache.<init> 10, sleep0 5, GC 5, the odd pseudo-frame 10.
fn demo_profile() -> Profile {
    let mut p = Profile::new(
        Meta { mode: "asgct".into(), interval: 1_000_000, timer: "perf".into(), ..Meta::default() },
        &[Metric::Samples, Metric::Cpu],
    );
    let t = p.intern(Frame::thread("main"));
    let main = p.intern(Frame::java("demo.Main", "main", "([Ljava/lang/String;)V"));
    let alpha = p.intern(Frame::java("demo.Work", "alpha", "()V"));
    let beta = p.intern(Frame::java("demo.Work", "beta", "()V"));
    let helper = p.intern(Frame::java("demo.Util", "helper", "(I)I"));
    let init = p.intern(Frame::java("demo.Cache", "<init>", "(Ljava/util/Map;)V"));
    let sleep = p.intern(Frame { kind: FrameKind::Native, ..Frame::java("java.lang.Thread", "sleep0", "(J)V") });
    let gc = p.intern(Frame::pseudo("[GC_active]"));
    let odd = p.intern(Frame::pseudo(ODD));
    let nt = p.add_child(0, t, -1);
    let nm = p.add_child(nt, main, -1);
    let na = p.add_child(nm, alpha, 4);
    let nb = p.add_child(nm, beta, 9);
    let nh = p.add_child(nb, helper, 2);
    let ni = p.add_child(nm, init, 14);
    let ns = p.add_child(nm, sleep, 20);
    let ng = p.add_child(0, gc, -1);
    let no = p.add_child(0, odd, -1);
    for (n, v) in [(na, 40), (nb, 10), (nh, 20), (ni, 10), (ns, 5), (ng, 5), (no, 10)] {
        p.set(n, Metric::Samples, v);
        p.set(n, Metric::Cpu, v * 1_000_000);
    }
    p
}

/// What the frames of [`demo_profile`] are drawn with: the class without its package and the method.
const ALL_NAMES: [&str; 10] = [
    "[root]",
    "[thread main]",
    "Main.main",
    "Work.alpha",
    "Work.beta",
    "Util.helper",
    "Cache.<init>",
    "Thread.sleep0 [native]",
    "[GC_active]",
    ODD,
];

#[test]
fn frames_title_and_totals_are_rendered() {
    let dom = rendered_dom(&demo_profile(), Metric::Samples, "");
    let drawn = frames(&dom);
    let texts: Vec<&str> = drawn.iter().map(|(t, _)| t.as_str()).collect();
    for name in ALL_NAMES {
        assert!(texts.contains(&escaped(name).as_str()), "{name} not drawn; drawn: {texts:?}");
    }
    assert_eq!(drawn.len(), ALL_NAMES.len());
    let title = text_of(&dom, "title");
    assert!(
        title.contains("mode asgct") && title.contains("metric samples") && title.contains("total 100 samples"),
        "{title}"
    );
    assert!(text_of(&dom, "subtitle").contains("timer perf"));
    assert!(text_of(&dom, "matched").is_empty());
    assert!(dom.contains("data-orientation=\"classic\""));
    // The odd name is text, not markup.
    assert!(!dom.contains("<&>"));
}

#[test]
fn short_names_merge_overloads_and_signatures_keep_them_apart() {
    // Two overloads of Work.run called from main, and two classes called Node in two packages.
    let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples]);
    let main = p.intern(Frame::java("demo.Main", "main", "([Ljava/lang/String;)V"));
    let nm = p.add_child(0, main, -1);
    for (class, method, signature, n) in [
        ("demo.Work", "run", "(I)V", 30),
        ("demo.Work", "run", "(J)V", 20),
        ("a.Node", "next", "()La/Node;", 25),
        ("b.Node", "next", "()Lb/Node;", 25),
    ] {
        let f = p.intern(Frame::java(class, method, signature));
        let node = p.add_child(nm, f, -1);
        p.set(node, Metric::Samples, n);
    }
    let dom = rendered_dom(&p, Metric::Samples, "search=a%5C.Node");
    let mut drawn = drawn_names(&dom);
    drawn.sort();
    assert_eq!(drawn, ["Main.main", "Node.next", "Node.next", "Work.run", "[root]"]);
    // The one Work.run frame holds both overloads: 50 of 100.
    let (_, run) = geometry(&dom, "Work.run");
    let (_, main_width) = geometry(&dom, "Main.main");
    assert!((run / main_width - 0.5).abs() < 0.01, "{run} / {main_width}");
    // Search reads full names: only a.Node's frame matches.
    assert_eq!(text_of(&dom, "matched"), "Matched 25.00% of all (25 samples)");

    let dir = scratch();
    let page = dir.join("flame.html");
    std::fs::write(&page, html::render_with(&p, Metric::Samples, html::FrameNames::Signatures)).unwrap();
    let dom = common::dump_dom(&format!("file://{}", page.display()), &dir.join("chromium"));
    std::fs::remove_dir_all(&dir).ok();
    let mut drawn = drawn_names(&dom);
    drawn.sort();
    assert_eq!(
        drawn,
        [
            "[root]",
            "a.Node.next()a.Node",
            "b.Node.next()b.Node",
            "demo.Main.main(java.lang.String[])void",
            "demo.Work.run(int)void",
            "demo.Work.run(long)void"
        ]
    );
}

#[test]
fn the_weight_metric_shows_cpu_time() {
    let dom = rendered_dom(&demo_profile(), Metric::Cpu, "search=alpha");
    let title = text_of(&dom, "title");
    assert!(title.contains("metric cpu · total 100.00 ms CPU (100,000,000 ns)"), "{title}");
    assert_eq!(text_of(&dom, "matched"), "Matched 40.00% of all (40.00 ms CPU (40,000,000 ns))");
    assert!(dom.contains("data-metric=\"cpu\""));
}

#[test]
fn search_highlights_and_reports_the_matched_share() {
    // A match covers its subtree: beta's 30 includes helper's 20.
    let dom = rendered_dom(&demo_profile(), Metric::Samples, "search=beta");
    assert_eq!(text_of(&dom, "matched"), "Matched 30.00% of all (30 samples)");
    let matched: Vec<String> =
        frames(&dom).into_iter().filter(|(_, c)| c.split(' ').any(|c| c == "match")).map(|(t, _)| t).collect();
    assert_eq!(matched, ["Work.beta"]);

    // Regular expressions; nested matches are not counted twice.
    let dom = rendered_dom(&demo_profile(), Metric::Samples, "search=demo%5C.(Work%7CUtil)");
    assert_eq!(text_of(&dom, "matched"), "Matched 70.00% of all (70 samples)");
    let matched = frames(&dom).into_iter().filter(|(_, c)| c.contains("match")).count();
    assert_eq!(matched, 3);

    // Odd characters search as text.
    let dom = rendered_dom(&demo_profile(), Metric::Samples, "search=%27single%27%20%C3%BC");
    assert_eq!(text_of(&dom, "matched"), "Matched 10.00% of all (10 samples)");
}

#[test]
fn zoom_shows_the_subtree_and_its_ancestors_only() {
    let dom = rendered_dom(&demo_profile(), Metric::Samples, "zoom=demo.Work.beta&search=helper");
    let drawn = frames(&dom);
    let texts: Vec<&str> = drawn.iter().map(|(t, _)| t.as_str()).collect();
    for name in ["[root]", "[thread main]", "Main.main", "Work.beta", "Util.helper"] {
        assert!(texts.contains(&name), "{name} missing after zoom: {texts:?}");
    }
    for name in ["Work.alpha", "[GC_active]", "Cache.<init>"] {
        assert!(!texts.contains(&escaped(name).as_str()), "{name} drawn outside the zoomed frame");
    }
    let ancestors = drawn.iter().filter(|(_, c)| c.contains("ancestor")).count();
    assert_eq!(ancestors, 3);
    assert_eq!(text_of(&dom, "zoomed"), "Zoomed: demo.Work.beta (30.00% of all)");
    assert_eq!(text_of(&dom, "matched"), "Matched 20.00% of all (20 samples), 66.67% of zoomed");
    // The zoomed frame spans the width: helper (20 of 30) is two thirds of it.
    let width_of = |name: &str| -> f64 {
        let piece = dom.split("<div class=\"f").find(|p| p.contains(&format!(">{name}</div>"))).unwrap();
        let w = &piece[piece.find("width:").unwrap() + 6..];
        w[..w.find("px").unwrap()].trim().parse().unwrap()
    };
    let ratio = width_of("Util.helper") / width_of("Work.beta");
    assert!((ratio - 2.0 / 3.0).abs() < 0.01, "{ratio}");
}

#[test]
fn icicle_puts_the_root_on_top() {
    let dom = rendered_dom(&demo_profile(), Metric::Samples, "icicle=1");
    assert!(dom.contains("data-orientation=\"icicle\""));
    let root = dom.split("<div class=\"f").find(|p| p.contains(">[root]</div>")).unwrap();
    assert!(root.contains("top: 0px") || root.contains("top:0px"), "{root}");
}

#[test]
fn clicks_keys_and_hover_work() {
    // Stands in for a user: click a frame, go back, hover, type a search, press Escape. Each step's
    // visible result is collected into a <pre id="driven"> as JSON.
    let driver = r#"
      (function () {
        const r = {};
        const frame = (name) => [...document.querySelectorAll(".f")].find((e) => e.textContent === name);
        const key = (target, k) => target.dispatchEvent(new KeyboardEvent("keydown", { key: k, bubbles: true }));
        frame("Work.beta").dispatchEvent(new MouseEvent("click", { bubbles: true }));
        r.zoomed = document.getElementById("zoomed").textContent;
        r.alphaDrawn = !!frame("Work.alpha");
        r.hash = decodeURIComponent(location.hash);
        r.backEnabled = !document.getElementById("back").disabled;
        frame("Util.helper").dispatchEvent(new MouseEvent("click", { bubbles: true }));
        document.getElementById("back").click();
        r.afterBack = document.getElementById("zoomed").textContent;
        frame("[root]").dispatchEvent(new MouseEvent("click", { bubbles: true }));
        r.afterRootClick = document.getElementById("zoomed").textContent;
        frame("Util.helper").dispatchEvent(
          new MouseEvent("mousemove", { bubbles: true, clientX: 50, clientY: 50 }));
        r.tip = [...document.getElementById("tip").children].map((d) => d.textContent);
        r.tipShown = document.getElementById("tip").style.display;
        const search = document.getElementById("search");
        search.value = "alpha|helper";
        key(search, "Enter");
        r.matched = document.getElementById("matched").textContent;
        r.highlighted = document.querySelectorAll(".f.match").length;
        search.focus();
        key(search, "Escape");
        r.matchedAfterEscape = document.getElementById("matched").textContent;
        document.getElementById("icicle").click();
        r.orientation = document.body.dataset.orientation;
        const out = document.createElement("pre");
        out.id = "driven";
        out.textContent = JSON.stringify(r);
        document.body.appendChild(out);
      })();
    "#;
    let dom = rendered_dom_driven(&demo_profile(), Metric::Samples, "", driver);
    let text = text_of(&dom, "driven").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["zoomed"], "Zoomed: demo.Work.beta (30.00% of all)");
    assert_eq!(r["alphaDrawn"], false);
    assert_eq!(r["hash"], "#zoom=demo.Work.beta");
    assert_eq!(r["backEnabled"], true);
    assert_eq!(r["afterBack"], "Zoomed: demo.Work.beta (30.00% of all)");
    assert_eq!(r["afterRootClick"], "");
    assert_eq!(r["tipShown"], "block");
    assert_eq!(
        r["tip"],
        serde_json::json!([
            "demo.Util.helper",
            "Total: 20 samples, 20.00% of all",
            "Self: 20 samples, 20.00% of all",
            "Also: cpu 20.00 ms (20.00%)",
            "Java method · depth 4",
            "click to zoom"
        ])
    );
    assert_eq!(r["matched"], "Matched 60.00% of all (60 samples)");
    assert_eq!(r["highlighted"], 2);
    assert_eq!(r["matchedAfterEscape"], "");
    assert_eq!(r["orientation"], "icicle");
}

#[test]
fn an_empty_profile_says_so() {
    let p = Profile::new(Meta { mode: "exact".into(), ..Meta::default() }, &[Metric::Calls, Metric::Bytecodes]);
    let dom = rendered_dom(&p, Metric::Calls, "");
    assert_eq!(text_of(&dom, "empty"), "No calls in this profile: nothing to draw.");
    assert!(frames(&dom).is_empty());
}

/// A deterministic random tree of `count` nodes over 2,000 methods.
fn big_profile(count: u64) -> Profile {
    let mut p = Profile::new(Meta { mode: "bytecode".into(), ..Meta::default() }, &[Metric::Samples]);
    let frames: Vec<u32> =
        (0..2000).map(|i| p.intern(Frame::java(&format!("pkg{}.Class{}", i % 13, i), "m", "(I)V"))).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 1..count {
        // Mostly extend recent nodes, so the tree is both wide and deep.
        let parent = if next() % 4 == 0 { next() % i } else { i - 1 - next() % i.min(8) } as u32;
        let n = p.add_child(parent, frames[(next() % 2000) as usize], -1);
        p.set(n, Metric::Samples, next() % 5);
    }
    p
}

#[test]
fn a_100k_node_profile_stays_cheap_to_draw() {
    let p = big_profile(100_000);
    let html = html::render(&p, Metric::Samples);
    assert!(html.len() < 8 << 20, "page is {} bytes", html.len());
    let started = Instant::now();
    let dom = rendered_dom(&p, Metric::Samples, "search=pkg3%5C.");
    let drawn = frames(&dom).len();
    assert!(drawn > 50 && drawn < 20_000, "{drawn} frame elements");
    assert!(text_of(&dom, "matched").starts_with("Matched "), "{}", text_of(&dom, "matched"));
    let render_ms: u64 = {
        let at = dom.find("data-render-ms=\"").unwrap() + 16;
        dom[at..at + dom[at..].find('"').unwrap()].parse().unwrap()
    };
    eprintln!(
        "100k nodes: {} bytes, {drawn} frames drawn, {render_ms} ms in the page, {:?} in all",
        html.len(),
        started.elapsed()
    );
    assert!(render_ms < 10_000, "first draw took {render_ms} ms");

    // With four metrics (self values of each go in the page), switching from one to another in the
    // selector: the figures are printed, not asserted (the machine is shared).
    let mut p = p;
    for n in 0..p.nodes.len() as u32 {
        let v = p.value(n, Metric::Samples);
        p.set(n, Metric::Cpu, v * 1_000_000 + u64::from(n % 7));
        p.set(n, Metric::AllocBytes, if n % 3 == 0 { u64::from(n) * 64 } else { 0 });
        p.set(n, Metric::LockNs, if n % 11 == 0 { 5_000 } else { 0 });
    }
    let html = html::render(&p, Metric::Samples);
    let driver = r#"
      (function () {
        const select = document.getElementById("metric");
        const times = [];
        for (const name of ["cpu", "alloc_bytes", "lock_ns", "samples", "cpu"]) {
          const t0 = performance.now();
          select.value = name;
          select.dispatchEvent(new Event("change", { bubbles: true }));
          times.push(name + "=" + Math.round(performance.now() - t0));
        }
        document.body.dataset.switchMs = times.join(" ");
      })();
    "#;
    let dom = rendered_dom_driven(&p, Metric::Samples, "", driver);
    assert!(dom.contains("data-metric=\"cpu\""), "the last switch shows cpu");
    assert!(text_of(&dom, "title").contains("metric cpu"), "{}", text_of(&dom, "title"));
    let switch_ms = dom.split("data-switch-ms=\"").nth(1).and_then(|s| s.split('"').next()).unwrap();
    eprintln!("100k nodes, 4 metrics: {} bytes; ms per switch: {switch_ms}", html.len());
}

#[test]
fn a_100k_deep_profile_draws_only_the_visible_rows() {
    let mut p = Profile::new(Meta { mode: "asgct".into(), ..Meta::default() }, &[Metric::Samples]);
    let f = p.intern(Frame::java("deep.Rec", "down", "(I)V"));
    let mut n = 0;
    for _ in 0..100_000 {
        n = p.add_child(n, f, 3);
    }
    p.set(n, Metric::Samples, 7);
    let dom = rendered_dom(&p, Metric::Samples, "");
    let drawn = frames(&dom).len();
    assert!(drawn > 10 && drawn < 200, "{drawn} frame elements for a 100,000-deep chain");
}

/// The demo profile as a run of `mode=asgct+alloc+lock` would make it: alpha and Cache.<init> allocate
/// (1 MiB and 3 MiB), a context that only waits for a lock (2 ms, no CPU sample) hangs under main.
fn multi_metric_profile() -> Profile {
    let mut p = demo_profile();
    p.meta.mode = "asgct+alloc+lock".into();
    let name = |p: &Profile, n: u32| p.frames[p.nodes[n as usize].frame as usize].display_name();
    let find = |p: &Profile, wanted: &str| (0..p.nodes.len() as u32).find(|&n| name(p, n) == wanted).unwrap();
    let (alpha, init) = (find(&p, "demo.Work.alpha()void"), find(&p, "demo.Cache.<init>(java.util.Map)void"));
    for (n, bytes) in [(alpha, 1 << 20), (init, 3 << 20)] {
        p.set(n, Metric::AllocBytes, bytes);
        p.set(n, Metric::AllocCount, bytes >> 10);
    }
    let main = find(&p, "demo.Main.main(java.lang.String[])void");
    let lock = p.intern(Frame::java("demo.Work", "lockWait", "()V"));
    let nl = p.add_child(main, lock, 30);
    p.set(nl, Metric::LockNs, 2_000_000);
    p.set(nl, Metric::LockCount, 4);
    p
}

fn drawn_names(dom: &str) -> Vec<String> {
    frames(dom).into_iter().map(|(t, _)| t.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")).collect()
}

#[test]
fn the_metric_selector_offers_every_metric_and_the_hash_picks_one() {
    let p = multi_metric_profile();
    // The run's metric first: the lock-only context has no samples and is not drawn.
    let dom = rendered_dom(&p, Metric::Samples, "");
    assert!(dom.contains("data-metric=\"samples\""));
    assert!(text_of(&dom, "title").contains("metric samples · total 100 samples"), "{}", text_of(&dom, "title"));
    assert!(!drawn_names(&dom).contains(&"Work.lockWait".to_string()));
    for option in ["samples (100)", "cpu (100.00 ms)", "alloc_count (4,096)", "alloc_bytes (4.0 MiB)", "lock_count (4)"]
    {
        assert!(dom.contains(&format!(">{option}</option>")), "no option {option}");
    }
    assert!(dom.contains(">lock_ns (2.00 ms)</option>"));

    // Bytes: sizes in the title, only the allocating contexts (and their callers) drawn.
    let dom = rendered_dom(&p, Metric::Samples, "metric=alloc_bytes&search=Cache");
    assert!(dom.contains("data-metric=\"alloc_bytes\""));
    let title = text_of(&dom, "title");
    assert!(title.contains("metric alloc_bytes · total 4.0 MiB allocated (4,194,304 B)"), "{title}");
    let mut drawn = drawn_names(&dom);
    drawn.sort();
    assert_eq!(drawn, ["Cache.<init>", "Main.main", "Work.alpha", "[root]", "[thread main]"]);
    assert_eq!(text_of(&dom, "matched"), "Matched 75.00% of all (3.0 MiB allocated (3,145,728 B))");

    // Nanoseconds of lock waits: time in the title, the lock-only context drawn, alone under main.
    let dom = rendered_dom(&p, Metric::Samples, "metric=lock_ns");
    assert!(text_of(&dom, "title").contains("total 2.00 ms waited (2,000,000 ns)"), "{}", text_of(&dom, "title"));
    let mut drawn = drawn_names(&dom);
    drawn.sort();
    assert_eq!(drawn, ["Main.main", "Work.lockWait", "[root]", "[thread main]"]);

    // A name the profile lacks leaves the run's metric.
    let dom = rendered_dom(&p, Metric::Cpu, "metric=bogus");
    assert!(dom.contains("data-metric=\"cpu\""));

    // The picture, for people: target/kprof-screenshots/flame-graph-alloc-bytes.png.
    let dir = scratch();
    let page = dir.join("flame.html");
    std::fs::write(&page, html::render(&p, Metric::Samples)).unwrap();
    let png = screenshots().join("flame-graph-alloc-bytes.png");
    common::screenshot(&format!("file://{}#metric=alloc_bytes", page.display()), &png, &dir.join("chromium"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn switching_metrics_keeps_the_view_where_it_can() {
    // Stands in for a user: zoom into main, pick alloc_bytes in the selector (main allocates: the zoom
    // stays), then lock_count, then zoom into Cache.<init> under alloc_bytes and switch to lock_ns (no
    // lock waits there: back to the whole profile). Each step's visible result goes into <pre id="driven">.
    let driver = r#"
      (function () {
        const r = {};
        const frame = (name) => [...document.querySelectorAll(".f")].find((e) => e.textContent === name);
        const pick = (name) => {
          const select = document.getElementById("metric");
          select.value = name;
          select.dispatchEvent(new Event("change", { bubbles: true }));
        };
        const state = () => ({
          title: document.getElementById("title").textContent,
          zoomed: document.getElementById("zoomed").textContent,
          hash: decodeURIComponent(location.hash),
          frames: [...document.querySelectorAll(".f")].map((e) => e.textContent).filter((t) => t).sort(),
        });
        frame("Main.main").dispatchEvent(new MouseEvent("click", { bubbles: true }));
        pick("alloc_bytes");
        r.alloc = state();
        frame("Cache.<init>").dispatchEvent(new MouseEvent("click", { bubbles: true }));
        r.allocZoomed = state();
        frame("Cache.<init>").dispatchEvent(
          new MouseEvent("mousemove", { bubbles: true, clientX: 50, clientY: 50 }));
        r.tip = [...document.getElementById("tip").children].map((d) => d.textContent);
        pick("lock_ns");
        r.lock = state();
        r.back = !document.getElementById("back").disabled;
        pick("samples");
        r.samples = state();
        const out = document.createElement("pre");
        out.id = "driven";
        out.textContent = JSON.stringify(r);
        document.body.appendChild(out);
      })();
    "#;
    let dom = rendered_dom_driven(&multi_metric_profile(), Metric::Samples, "", driver);
    let text = text_of(&dom, "driven").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(r["alloc"]["title"].as_str().unwrap().contains("metric alloc_bytes"), "{r}");
    assert_eq!(r["alloc"]["zoomed"], "Zoomed: demo.Main.main (100.00% of all)");
    assert_eq!(r["alloc"]["hash"], "#metric=alloc_bytes&zoom=demo.Main.main");
    assert_eq!(r["allocZoomed"]["zoomed"], "Zoomed: demo.Cache.<init> (75.00% of all)");
    assert_eq!(
        r["tip"],
        serde_json::json!([
            "demo.Cache.<init>",
            "Total: 3.0 MiB allocated (3,145,728 B), 75.00% of all, 100.00% of zoomed",
            "Self: 3.0 MiB allocated (3,145,728 B), 75.00% of all",
            "Also: samples 10 (10.00%) · cpu 10.00 ms (10.00%) · alloc_count 3,072 (75.00%)",
            "Java method · depth 3",
            "click an ancestor, Back or Esc to zoom out"
        ])
    );
    assert_eq!(r["lock"]["zoomed"], "", "Cache.<init> has no lock waits: the zoom is reset");
    assert_eq!(r["lock"]["hash"], "#metric=lock_ns");
    assert_eq!(r["lock"]["frames"], serde_json::json!(["Main.main", "Work.lockWait", "[root]", "[thread main]"]));
    assert_eq!(r["back"], true, "main, which has lock waits, stays in the zoom history");
    assert_eq!(r["samples"]["hash"], "");
    assert_eq!(r["samples"]["frames"].as_array().unwrap().len(), ALL_NAMES.len());
}

/// Profile A and B of a difference: A 100 samples, B 200. Shares A → B: alpha 40 % → 25 % (shrunk), beta
/// 30 % → 45 % (grown), steady 10 % → 10 % (same), gone 20 % → none, fresh none → 20 % (new).
const DIFF_A: &str = "[thread main];demo.Main.main()void;demo.Work.alpha()void 40\n\
                      [thread main];demo.Main.main()void;demo.Work.beta()void 30\n\
                      [thread main];demo.Main.main()void;demo.Work.steady()void 10\n\
                      [thread main];demo.Main.main()void;demo.Old.gone()void 20\n";
const DIFF_B: &str = "[thread main];demo.Main.main()void;demo.Work.alpha()void 50\n\
                      [thread main];demo.Main.main()void;demo.Work.beta()void 90\n\
                      [thread main];demo.Main.main()void;demo.Work.steady()void 20\n\
                      [thread main];demo.Main.main()void;demo.New.fresh()void 40\n";

/// Where the tests leave screenshots for people to look at: target/kprof-screenshots.
fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../kprof-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `kprof compare A B --html --collapsed` on [`DIFF_A`] and [`DIFF_B`]; returns the page's path.
fn difference_page(dir: &std::path::Path) -> PathBuf {
    let (a, b) = (dir.join("a.collapsed"), dir.join("b.collapsed"));
    std::fs::write(&a, DIFF_A).unwrap();
    std::fs::write(&b, DIFF_B).unwrap();
    let (page, folded) = (dir.join("diff.html"), dir.join("diff.txt"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kprof"))
        .args(["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--html", page.to_str().unwrap()])
        .arg(format!("--collapsed={}", folded.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("overlap: 65.00%\n"));
    // A's counts scaled to B's total (200 / 100).
    assert_eq!(
        std::fs::read_to_string(&folded).unwrap(),
        "[thread main];demo.Main.main()void;demo.New.fresh()void 0 40\n\
         [thread main];demo.Main.main()void;demo.Old.gone()void 40 0\n\
         [thread main];demo.Main.main()void;demo.Work.alpha()void 80 50\n\
         [thread main];demo.Main.main()void;demo.Work.beta()void 60 90\n\
         [thread main];demo.Main.main()void;demo.Work.steady()void 20 20\n"
    );
    page
}

/// The left edge and width of the frame element drawn with `name`.
fn geometry(dom: &str, name: &str) -> (f64, f64) {
    let piece = dom.split("<div class=\"f").find(|p| p.contains(&format!(">{name}</div>"))).unwrap();
    let number = |key: &str| -> f64 {
        let v = &piece[piece.find(key).unwrap() + key.len()..];
        v[..v.find("px").unwrap()].trim().parse().unwrap()
    };
    (number("left:"), number("width:"))
}

#[test]
fn the_differential_flame_graph_colours_frames_by_their_change() {
    let dir = scratch();
    let page = difference_page(&dir);
    let url = format!("file://{}", page.display());
    let dom = common::dump_dom(&url, &dir.join("chromium"));
    let class_of: std::collections::BTreeMap<String, String> = frames(&dom).into_iter().collect();
    let status = |name: &str| -> &str {
        let classes = class_of.get(name).unwrap_or_else(|| panic!("{name} not drawn: {class_of:?}"));
        ["grown", "shrunk", "same", "new", "gone"]
            .into_iter()
            .find(|s| classes.split(' ').any(|c| c == *s))
            .unwrap_or_else(|| panic!("{name} has no change class: {classes}"))
    };
    assert_eq!(status("Work.alpha"), "shrunk");
    assert_eq!(status("Work.beta"), "grown");
    assert_eq!(status("Work.steady"), "same");
    assert_eq!(status("New.fresh"), "new");
    assert_eq!(status("Old.gone"), "gone");
    assert_eq!(status("Main.main"), "same");
    assert_eq!(status("[root]"), "same");
    assert!(dom.contains("class=\"diff\""), "the page is in its difference mode");
    let title = text_of(&dom, "title");
    assert!(title.contains("B b.collapsed against A a.collapsed · metric samples"), "{title}");
    // Widths: B's shares (alpha 50, beta 90 of B's 200) and the gone frame A's (20 of 100).
    let (_, alpha) = geometry(&dom, "Work.alpha");
    let (_, beta) = geometry(&dom, "Work.beta");
    let (_, gone) = geometry(&dom, "Old.gone");
    assert!((beta / alpha - 1.8).abs() < 0.01, "{beta} / {alpha}");
    assert!((gone / alpha - 0.8).abs() < 0.01, "{gone} / {alpha}");
    // Colours: grown frames red, shrunk ones blue, the same ones pale.
    let rgb_of = |name: &str| -> [i32; 3] {
        let piece = dom.split("<div class=\"f").find(|p| p.contains(&format!(">{name}</div>"))).unwrap();
        let colour = &piece[piece.find("background-color: rgb(").unwrap() + 22..];
        let parts: Vec<i32> =
            colour[..colour.find(')').unwrap()].split(',').map(|v| v.trim().parse().unwrap()).collect();
        [parts[0], parts[1], parts[2]]
    };
    let [r, g, b] = rgb_of("Work.beta");
    assert!(r > b + 100 && r > g + 100, "grown: rgb({r}, {g}, {b})");
    let [r, g, b] = rgb_of("Work.alpha");
    assert!(b > r + 100, "shrunk: rgb({r}, {g}, {b})");
    let [r, g, b] = rgb_of("Work.steady");
    assert!(r.min(g).min(b) > 200, "same: rgb({r}, {g}, {b})");

    // Searchable like the flame graph, shares of both sides; gone frames can be hidden.
    let dom = common::dump_dom(&format!("{url}#search=beta%7Cgone&gone=0"), &dir.join("chromium"));
    assert_eq!(text_of(&dom, "matched"), "Matched B 45.00% (90 samples), A 50.00% (50 samples)");
    let drawn = drawn_names(&dom);
    assert!(!drawn.contains(&"Old.gone".to_string()), "{drawn:?}");
    assert_eq!(frames(&dom).iter().filter(|(_, c)| c.contains("match")).count(), 1);

    // The picture, for people: target/kprof-screenshots/differential-flame-graph.png.
    let png = screenshots().join("differential-flame-graph.png");
    common::screenshot(&url, &png, &dir.join("chromium"));
    eprintln!("screenshot: {}", png.canonicalize().unwrap().display());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_differential_flame_graph_tooltip_and_zoom() {
    let driver = r#"
      (function () {
        const r = {};
        const frame = (name) => [...document.querySelectorAll(".f")].find((e) => e.textContent === name);
        const hover = (name) => {
          frame(name).dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: 50, clientY: 50 }));
          return [...document.getElementById("tip").children].map((d) => d.textContent);
        };
        r.beta = hover("Work.beta");
        r.gone = hover("Old.gone");
        r.fresh = hover("New.fresh");
        frame("Work.beta").dispatchEvent(new MouseEvent("click", { bubbles: true }));
        r.zoomed = document.getElementById("zoomed").textContent;
        r.hash = decodeURIComponent(location.hash);
        document.getElementById("gone").click();
        r.hashNoGone = decodeURIComponent(location.hash);
        const out = document.createElement("pre");
        out.id = "driven";
        out.textContent = JSON.stringify(r);
        document.body.appendChild(out);
      })();
    "#;
    let dir = scratch();
    let page = difference_page(&dir);
    let html = std::fs::read_to_string(&page).unwrap().replace("</body>", &format!("<script>{driver}</script></body>"));
    std::fs::write(&page, html).unwrap();
    let dom = common::dump_dom(&format!("file://{}", page.display()), &dir.join("chromium"));
    std::fs::remove_dir_all(&dir).ok();
    let text = text_of(&dom, "driven").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["beta"][1], "B: 90 samples, 45.00% of B · A: 30 samples, 30.00% of A");
    assert_eq!(r["beta"][2], "Change: +15.00 points of the total (grown)");
    assert_eq!(r["beta"][3], "Self: B 90 samples (45.00%), A 30 samples (30.00%)");
    assert_eq!(r["gone"][2], "Gone: only in A");
    assert_eq!(r["fresh"][2], "New in B (A has no such context)");
    assert_eq!(r["zoomed"], "Zoomed: demo.Work.beta()void (B 45.00%, A 30.00%)");
    assert_eq!(r["hash"], "#zoom=demo.Work.beta()void");
    assert_eq!(r["hashNoGone"], "#zoom=demo.Work.beta()void&gone=0");
}
