//! What keeps a bug in kprof from reaching the JVM: every callback runs inside [`guard`], and nothing the
//! agent prints can panic.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into a message and `fallback`: a panic must never unwind into the JVM.
pub fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let msg = e.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| e.downcast_ref::<String>().cloned());
            say(&format!("internal error: {}", msg.unwrap_or_else(|| "panic".into())));
            fallback
        }
    }
}

/// Prints `kprof: LINE` on stderr. A message that cannot be written (stderr closed, a pipe whose reader
/// is gone: the JVM ignores SIGPIPE, so the write fails with EPIPE) is dropped: `eprintln!` would panic.
pub fn say(line: &str) {
    print_line(&format!("kprof: {line}\n"));
}

/// Writes `text` to stderr as it is, dropping it if it cannot be written.
pub fn print_line(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Writes `text` to stdout as it is, dropping it if it cannot be written (`help`).
pub fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_fallback() {
        assert_eq!(guard(7, || panic!("boom")), 7);
        assert_eq!(guard(7, || 3), 3);
    }
}
