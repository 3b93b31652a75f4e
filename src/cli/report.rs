//! `kprof report`.

/// Runs `kprof report ARGS`.
pub fn main(_args: &[String]) -> i32 {
    eprintln!("kprof report: not built yet");
    2
}
