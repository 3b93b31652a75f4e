//! The control thread: serves the control socket (`kprof start|stop|dump|status`), ends sessions at
//! `duration=` and writes `dump=` snapshots. One per agent.

use super::{agent, lock, Agent};
use crate::guard::{guard, say};
use crate::jvmti::Jni;
use kprof_protocol::control;
use kprof_protocol::options::Options;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Agent {
    /// The control thread: serves the control socket and ends sessions at `duration=` and writes
    /// `dump=` snapshots. One per agent; attached to the JVM as a daemon (it resolves names).
    pub(super) fn spawn_control_thread(&'static self) {
        if self.control_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let socket = match control::ControlSocket::bind() {
            Ok(s) => {
                let _ = self.control_path.set(s.path().to_path_buf());
                Some(s)
            }
            Err(e) => {
                say(&format!("no control socket ({e}); kprof start/stop/dump/status will not reach this JVM"));
                None
            }
        };
        let spawned = std::thread::Builder::new().name("kprof-control".into()).spawn(move || {
            guard((), || {
                self.control_loop(socket.as_ref());
                drop(socket);
            })
        });
        if let Err(e) = spawned {
            say(&format!("cannot start the control thread ({e}); duration=, dump= and kprof commands are ignored"));
        }
    }

    /// Runs `work` on this thread attached to the JVM (as a daemon, named kprof-control), detached again
    /// afterwards. The thread waits detached: HotSpot's exit waits up to 300 ms for attached threads that
    /// sit in native code, which an idle control thread would be.
    fn attached<R>(&self, work: impl FnOnce(Jni) -> R) -> Option<R> {
        let jni = self.vm.attach_daemon("kprof-control")?;
        let r = guard(None, || Some(work(jni)));
        self.vm.detach();
        r
    }

    fn control_loop(&self, socket: Option<&control::ControlSocket>) {
        while !self.dead.load(Ordering::Acquire) {
            let (deadline, next_dump) = {
                let s = lock(&self.session);
                (s.deadline(), s.next_dump.filter(|_| s.running))
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                self.attached(|jni| drop(self.stop_session(Some(jni), false)));
                continue;
            }
            if let Some(t) = next_dump.filter(|t| now >= *t) {
                self.attached(|jni| drop(self.dump(Some(jni), None)));
                let mut s = lock(&self.session);
                let interval = Duration::from_nanos(s.options.dump_ns.max(1));
                s.next_dump = Some(t + interval).map(|n| if n < now { now + interval } else { n });
                continue;
            }
            let wake = [deadline, next_dump].into_iter().flatten().min();
            let wait = wake
                .map_or(Duration::from_millis(500), |w| w.saturating_duration_since(now))
                .min(Duration::from_millis(500));
            match socket {
                Some(sock) => {
                    if let Some(stream) = sock.accept(wait) {
                        if self.attached(|jni| self.serve(jni, &stream)).is_none() {
                            control::reply(&stream, Err("the JVM is shutting down".into()));
                        }
                    }
                }
                None => std::thread::sleep(wait),
            }
        }
    }

    fn serve(&self, jni: Jni, stream: &std::os::unix::net::UnixStream) {
        let result = control::read_request(stream).and_then(|request| match request {
            control::Request::Status => Ok(self.status()),
            control::Request::Stop => {
                // The reply carries the summary line, for the command's caller to show.
                self.stop_session(Some(jni), true).map(|w| {
                    let summary = w.summary.map(|s| format!("{s} ")).unwrap_or_default();
                    format!("ok {summary}files={}", w.files.join(","))
                })
            }
            control::Request::Dump(text) => {
                let files = if text.is_empty() {
                    None
                } else {
                    let o = Options::parse(Some(&text)).map_err(|e| e.0)?;
                    Some(o.files)
                };
                self.dump(Some(jni), files).map(|files| format!("ok files={}", files.join(",")))
            }
            control::Request::Start(text) => {
                let options = Options::parse(Some(&text)).map_err(|e| e.0)?;
                let me: &'static Agent = agent().ok_or("no agent")?;
                me.start_session(jni, options, true)
            }
        });
        control::reply(stream, result);
    }
}
