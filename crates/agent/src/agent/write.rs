//! Writing the profile: a snapshot of the tree, named, written to each file atomically (temporary file,
//! then rename), and at a session's end the summary line.

use super::resolve::{NameSources, ResolvedSnapshot};
use super::session::Session;
use super::{lock, Agent};
use crate::engine::Engine;
use crate::guard::say;
use crate::jvmti::Jni;
use kprof_profile::output;
use kprof_profile::{Meta, Metric};
use kprof_protocol::options::{expand_path, OutputFile};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What a write needs from the session, copied so that the session lock is not held while writing.
pub(super) struct WriteJob {
    files: Vec<OutputFile>,
    meta: Meta,
    /// The metrics of the session's engines: the profile's columns.
    metrics: Vec<Metric>,
    /// What collapsed stacks, the flame graph and the text report show.
    metric: Metric,
    engines: Vec<&'static dyn Engine>,
    start_secs: u64,
    number: u32,
    /// Print the summary line (the session ended).
    summary: bool,
    /// The flame graph names frames with their signatures.
    signatures: bool,
}

/// What a write did: the absolute paths written and, at a session's end, the summary line (without its
/// `files=`).
pub(super) struct Written {
    pub files: Vec<String>,
    pub summary: Option<String>,
}

/// A snapshot made ready to write: named as it is, with its inclusive totals (JSON), or as a profile.
enum Resolved<'a> {
    Tree(ResolvedSnapshot<'a>, Vec<Vec<u64>>),
    Profile(kprof_profile::Profile),
}

impl Agent {
    pub(super) fn write_job(&self, session: &mut Session, files: Option<Vec<OutputFile>>, summary: bool) -> WriteJob {
        session.writes += 1;
        WriteJob {
            files: files.unwrap_or_else(|| session.options.files.clone()),
            meta: self.meta(session),
            metrics: session.options.metrics(),
            metric: session.options.effective_metric(),
            engines: session.engines.clone(),
            start_secs: session.start_unix_ms / 1000,
            number: session.writes,
            summary,
            signatures: session.options.signatures,
        }
    }

    /// Facts about the session: the agent's, then each engine's.
    pub(super) fn meta(&self, session: &Session) -> Meta {
        let o = &session.options;
        let mut meta = Meta {
            mode: o.mode_name(),
            default_metric: Some(o.effective_metric()),
            jvm: format!(
                "{} {}",
                self.jvmti.system_property("java.vm.name").unwrap_or_default(),
                self.jvmti.system_property("java.vm.version").unwrap_or_default()
            ),
            start_unix_ms: session.start_unix_ms,
            duration_ns: session.started.elapsed().as_nanos() as u64,
            ..Meta::default()
        };
        for e in &session.engines {
            e.describe(o, &mut meta);
        }
        let cs = self.cct.stats();
        meta.counters.insert("cct_nodes".into(), cs.nodes as u64);
        meta.counters.insert("cct_overflow_samples".into(), cs.overflow_samples);
        meta
    }

    /// Resolves names and writes every file of `job`. Returns the absolute paths written. Nothing is
    /// written after the profile of the VM's exit: a dump that waited for that write finds the tree gone.
    pub(super) fn write(&self, jni: Option<Jni>, mut job: WriteJob) -> Written {
        let _g = lock(&self.write_lock);
        if self.final_written.load(Ordering::Acquire) {
            return Written { files: Vec::new(), summary: None };
        }
        let t0 = Instant::now();
        let snapshot = self.cct.snapshot(&job.metrics);
        let exiting = job.summary && self.dead.load(Ordering::Acquire);
        if exiting {
            // The VM's exit: the tree is not needed any more, and what the write allocates next (the
            // file's page cache above all) takes its pages back (see `Cct::discard`).
            self.cct.discard();
        }
        let names = lock(&self.thread_names).clone();
        let methods = job.engines.iter().find_map(|e| e.method_names());
        let sources = NameSources { jvmti: self.jvmti, jni, threads: &names, methods };
        // JSON alone (what exact profiles of millions of contexts are written as) is written from the
        // snapshot itself; other formats, and engines that add to the profile, need the profile.
        let annotated = job.engines.iter().any(|e| e.annotates());
        let json_only = !annotated && job.files.iter().all(|f| f.format == output::Format::Json);
        let tree = if json_only { lock(&self.resolver).resolved_snapshot(&snapshot, &sources) } else { None };
        let resolved = match tree {
            Some(tree) => {
                let totals = tree.totals();
                Resolved::Tree(tree, totals)
            }
            None => {
                let mut profile = lock(&self.resolver).profile(&snapshot, job.meta.clone(), &sources);
                for e in &job.engines {
                    e.annotate(&snapshot, &mut profile);
                }
                Resolved::Profile(profile)
            }
        };
        let metric = match &resolved {
            Resolved::Profile(p) => p.resolve_metric(job.metric).unwrap_or_else(|_| p.default_metric()),
            Resolved::Tree(..) => job.metric,
        };
        let mut written = Vec::new();
        for f in &job.files {
            let path = expand_path(&f.path, std::process::id(), job.start_secs, job.number);
            let target = std::path::Path::new(&path);
            let result = match &resolved {
                Resolved::Tree(tree, totals) => output::write_atomic_with(target, |out| {
                    output::json::write_tree_to(&job.meta, &tree.frames, tree.metrics(), tree, totals, out)
                }),
                Resolved::Profile(profile) => {
                    let naming = if job.signatures {
                        output::html::FrameNames::Signatures
                    } else {
                        output::html::FrameNames::Short
                    };
                    output::write_profile_with(target, profile, f.format, metric, naming)
                }
            };
            match result {
                Ok(abs) => written.push(abs.display().to_string()),
                Err(e) => say(&format!("cannot write {path}: {e}")),
            }
        }
        let mut summary = None;
        if job.summary {
            let contexts = (0..snapshot.nodes.len()).filter(|&i| snapshot.columns.iter().any(|c| c[i] > 0)).count();
            job.meta.counters.insert("contexts".into(), contexts as u64);
            let line = summary_line(&job.meta, &job.engines, t0.elapsed());
            let files = if written.is_empty() { "none".to_string() } else { written.join(",") };
            say(&format!("{line} files={files}"));
            summary = Some(line);
        }
        if exiting {
            self.final_written.store(true, Ordering::Release);
            // The VM is exiting: freeing millions of nodes one by one only delays the exit.
            std::mem::forget(resolved);
            std::mem::forget(snapshot);
        }
        Written { files: written, summary }
    }
}

/// The summary line: the mode, each engine's part (its keys prefixed by the engine's name when several
/// ran), the tree's overflow and the time the write took (the files follow it when printed).
fn summary_line(meta: &Meta, engines: &[&'static dyn Engine], write_time: Duration) -> String {
    let several = engines.len() > 1;
    let mut line = format!("mode={}", meta.mode);
    for e in engines {
        let part = e.summary(meta);
        for token in part.split(' ').filter(|t| !t.is_empty()) {
            line.push(' ');
            if several && token.contains('=') {
                line.push_str(e.kind().name());
                line.push('.');
            }
            line.push_str(token);
        }
    }
    let c = |k: &str| meta.counters.get(k).copied().unwrap_or(0);
    line.push_str(&format!(
        " overflow={} write_ms={}",
        c("cct_overflow_samples") + c("overflow_calls"),
        write_time.as_millis()
    ));
    line
}

/// `path`, absolute (relative to the working directory).
pub(super) fn absolute(path: &str) -> String {
    let p = std::path::Path::new(path);
    if p.is_absolute() {
        return path.to_string();
    }
    std::env::current_dir().map(|d| d.join(p).display().to_string()).unwrap_or_else(|_| path.to_string())
}

/// Checks that the directory of `path` lets this process create the file (and that `path` is not a
/// directory): Err says why not (`/dir: Permission denied`).
pub(super) fn check_writable(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if p.is_dir() {
        return Err("it is a directory".into());
    }
    let Ok(cdir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return Err("it has a NUL byte".into());
    };
    // SAFETY: access() with a NUL-terminated path.
    if unsafe { libc::access(cdir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(format!("{}: {err}", dir.display()));
    }
    Ok(())
}
