//! Profiling sessions: one run with one set of options and its engines. A session starts at VMInit (or on
//! attach, or on `kprof start`) and ends at VM death, after `duration=`, on `kprof stop`, or when a new
//! session starts; each end writes the session's files and prints the summary line. The calling context
//! tree lives as long as the agent; a new session resets its counters.

use super::{lock, Agent};
use crate::engine::{Engine, Phase};
use crate::jvmti::Jni;
use kprof_protocol::options::{expand_path, Options, OutputFile};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One profiling run.
pub(super) struct Session {
    pub options: Options,
    pub started: Instant,
    pub start_unix_ms: u64,
    /// The engines of this session, in the order `mode=` gives them.
    pub engines: Vec<&'static dyn Engine>,
    pub running: bool,
    /// Files written so far in this session (`%n` of the next write is this plus one).
    pub writes: u32,
    /// The session's end has been written (by stop, duration, a new session or VM death).
    pub ended: bool,
    /// When the next periodic dump is due.
    pub next_dump: Option<Instant>,
}

impl Session {
    /// A session that has not started (its options, from Agent_OnLoad, wait for VMInit).
    pub fn pending(options: Options) -> Session {
        Session {
            options,
            started: Instant::now(),
            start_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            engines: Vec::new(),
            running: false,
            writes: 0,
            ended: true,
            next_dump: None,
        }
    }

    /// When `duration=` ends the session.
    pub fn deadline(&self) -> Option<Instant> {
        (self.running && self.options.duration_ns > 0)
            .then(|| self.started + Duration::from_nanos(self.options.duration_ns))
    }
}

impl Agent {
    /// Starts a session with `options`. A session that runs is first ended the way `stop` ends it (its
    /// files written), once the new one's engines have agreed to run. `check_files`: refuse output paths
    /// that cannot be written (a command's, answered at once). Returns the one-line description the control
    /// socket replies with.
    pub(super) fn start_session(
        &'static self,
        jni: Jni,
        mut options: Options,
        check_files: bool,
    ) -> Result<String, String> {
        if self.dead.load(Ordering::Acquire) {
            return Err("the JVM is shutting down".into());
        }
        crate::engine::resolve_options(&mut options, Phase::Live);
        let mut engines = Vec::new();
        for &kind in &options.engines {
            let e =
                self.engine(kind, &options, Phase::Live).map_err(|e| format!("kprof: mode={}: {e}", kind.name()))?;
            e.check(&options).map_err(|e| format!("kprof: mode={}: {e}", kind.name()))?;
            engines.push(e);
        }
        for f in options.files.iter().filter(|_| check_files) {
            let path = expand_path(&f.path, std::process::id(), 0, 1);
            super::write::check_writable(&path)
                .map_err(|e| format!("kprof: bad option 'file={}': cannot write there ({e})", f.path))?;
        }
        // The session before this one ends as `stop` ends it.
        if !lock(&self.session).ended {
            let _ = self.stop_session(Some(jni), true);
        }
        let mut session = lock(&self.session);
        if session.writes > 0 || !session.engines.is_empty() {
            self.cct.reset_counters();
        }
        *session = Session::pending(options);
        let o = session.options.clone();
        self.per_thread.store(o.threads, Ordering::Release);
        self.names_jmethods.store(o.engines.iter().any(|e| !e.rewrites()), Ordering::Release);
        for m in o.metrics() {
            self.cct.enable(m)?;
        }
        self.set_session_events(true);
        self.find_permanent_loaders(jni);
        self.preallocate_method_ids(jni);
        let mut parts = Vec::new();
        for (i, e) in engines.iter().enumerate() {
            match e.start(jni, &o) {
                Ok(part) => parts.push(part),
                Err(err) => {
                    for started in &engines[..i] {
                        started.stop(Some(jni), true);
                    }
                    self.set_session_events(false);
                    return Err(format!("kprof: mode={} not started: {err}", e.kind().name()));
                }
            }
        }
        session.engines = engines.clone();
        session.running = true;
        session.ended = false;
        session.next_dump = (o.dump_ns > 0).then(|| session.started + Duration::from_nanos(o.dump_ns));
        *self.running.write().unwrap_or_else(|e| e.into_inner()) = engines;
        let parts: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        Ok(format!("ok state=running mode={} {}", o.mode_name(), parts.join(" ")).trim_end().to_string())
    }

    /// Ends the running session: stops its engines, writes its files, prints the summary. Returns the
    /// paths written and the summary line. `restore`: engines give the application its original code back.
    pub(super) fn stop_session(&self, jni: Option<Jni>, restore: bool) -> Result<super::write::Written, String> {
        let job = {
            let mut session = lock(&self.session);
            if session.ended {
                return Err("no session is running".into());
            }
            // Thread callbacks stop reaching the engines before they stop.
            self.running.write().unwrap_or_else(|e| e.into_inner()).clear();
            for e in &session.engines {
                e.stop(jni, restore);
            }
            session.running = false;
            session.ended = true;
            self.set_session_events(false);
            self.write_job(&mut session, None, true)
        };
        Ok(self.write(jni, job))
    }

    /// Writes the profile so far without ending the session (or the last session's profile again, once it
    /// has stopped), to `files` or the session's files. An error when there is no profile yet or when a
    /// file could not be written (the files that could are written all the same).
    pub(super) fn dump(&self, jni: Option<Jni>, files: Option<Vec<OutputFile>>) -> Result<Vec<String>, String> {
        if self.dead.load(Ordering::Acquire) {
            return Err("the JVM is shutting down".into());
        }
        let engines = {
            let session = lock(&self.session);
            if !session.running && session.engines.is_empty() {
                return Err("no session has run yet: nothing to dump (kprof start PID mode=... starts one)".into());
            }
            if session.running {
                session.engines.clone()
            } else {
                Vec::new()
            }
        };
        // Engines bring their counts into the tree without the session lock: a large merge must not hold
        // up the threads that start meanwhile.
        for e in &engines {
            e.before_write(jni);
        }
        let job = self.write_job(&mut lock(&self.session), files, false);
        let written = self.write(jni, job);
        if written.errors.is_empty() {
            Ok(written.files)
        } else {
            Err(written.errors.join("; "))
        }
    }

    pub(super) fn status(&self) -> String {
        let session = lock(&self.session);
        let meta = self.meta(&session);
        let files: Vec<String> = session
            .options
            .files
            .iter()
            .map(|f| {
                super::write::absolute(&expand_path(
                    &f.path,
                    std::process::id(),
                    session.start_unix_ms / 1000,
                    session.writes + 1,
                ))
            })
            .collect();
        // Each engine's part of the summary line, its keys prefixed with its name (`wall.rate=...`).
        let mut parts = String::new();
        for e in session.engines.iter().filter(|_| session.running) {
            for token in e.summary(&meta).split(' ').filter(|t| t.contains('=')) {
                parts.push_str(&format!(" {}.{token}", e.kind().name()));
            }
        }
        format!(
            "ok state={} mode={} timer={} interval={} samples={} elapsed_ms={}{parts} files={}",
            if session.running { "running" } else { "stopped" },
            session.options.mode_name(),
            if meta.timer.is_empty() { "none" } else { &meta.timer },
            crate::engine::format_interval(session.options.interval_ns),
            meta.counters.get("samples").copied().unwrap_or(0),
            session.started.elapsed().as_millis(),
            files.join(",")
        )
    }
}
