//! `kprof compare`.

/// Runs `kprof compare ARGS`.
pub fn main(_args: &[String]) -> i32 {
    eprintln!("kprof compare: not built yet");
    2
}
