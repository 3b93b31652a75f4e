//! The `kprof` command-line tool. Each subcommand lives in its own module and takes its arguments
//! (without the subcommand name); it returns the process exit status.

pub mod compare;
pub mod report;
pub mod rewrite;

const USAGE: &str = "\
usage: kprof COMMAND [ARGS]

commands:
  rewrite [--roundtrip] [--mode MODE] [--out DIR] INPUT...   show (or check) what the agent does to classes
  report FILE [--metric M] [--top N]                         text report of a profile (JSON or collapsed)
  compare A B [--metric M] [--top N]                         overlap percentage of two profiles
  help                                                       this text

The agent: java -agentpath:/path/to/libkprof.so=help";

/// Runs the command line `args` (without the program name) and returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return 2;
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "rewrite" => rewrite::main(rest),
        "report" => report::main(rest),
        "compare" => compare::main(rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            0
        }
        other => {
            eprintln!("kprof: unknown command '{other}' (accepted: rewrite, report, compare, help)");
            2
        }
    }
}
