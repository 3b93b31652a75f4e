//! `kprof rewrite`.

/// Runs `kprof rewrite ARGS`.
pub fn main(_args: &[String]) -> i32 {
    eprintln!("kprof rewrite: not built yet");
    2
}
