//! The `kprof` command-line tool: see `kprof help`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(kprof::cli::main(&args));
}
