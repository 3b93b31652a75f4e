//! The `kprof` command-line tool. Each subcommand lives in its own module and takes its arguments
//! (without the subcommand name); it returns the process exit status.

mod attach;
mod compare;
mod profile;
mod report;
mod rewrite;
mod timer_cost;

const USAGE: &str = "\
usage: kprof COMMAND [ARGS]

commands:
  rewrite [--roundtrip] [--mode MODE] [--out DIR] INPUT...   show (or check) what the agent does to classes
  report FILE [--metric M] [--top N]                         text report of a profile (JSON or collapsed)
  compare A B [--metric M] [--html F] [--collapsed F]        overlap of two profiles; differential flame graph
  profile [-d 30s] [-e cpu,alloc,...] [-i 1ms] [-f FILE]... PID|NAME
                                                             profile a running JVM, write the files
  list                                                       JVMs visible from here: pid, user, agent, main class
  attach PID [OPTIONS] [--lib PATH] [--timeout S]            load the agent into a running JVM and start
  start PID OPTIONS                                          start a new session in a loaded agent
  stop PID [--copy-to DIR]                                   stop and write the profile
  dump PID [file=PATH] [--copy-to DIR]                       write the profile now, keep running
  status PID                                                 state, mode, samples, files of the agent
  timer-cost [--interval D] [--timer T] [--runs N]           what a sampling signal costs on this machine
  help                                                       this text

The agent: java -agentpath:/path/to/libkprof.so=help";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(run(&args));
}

/// Runs the command line `args` (without the program name) and returns the exit status.
fn run(args: &[String]) -> i32 {
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return 2;
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "rewrite" => rewrite::main(rest),
        "report" => report::main(rest),
        "compare" => compare::main(rest),
        "profile" => profile::main(rest),
        "list" => attach::list_main(rest),
        "attach" => attach::attach_main(rest),
        "start" | "stop" | "dump" | "status" => attach::control_main(cmd, rest),
        "timer-cost" => timer_cost::main(rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            0
        }
        other => {
            eprintln!("kprof: unknown command '{other}' (accepted: rewrite, report, compare, profile, list, attach, start, stop, dump, status, timer-cost, help)");
            2
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    /// Owned arguments, as `main` takes them.
    pub fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }
}
