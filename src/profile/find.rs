//! Finding the JVM `kprof profile` names: a pid, a main class or a jar; and waiting for one still starting.

use super::args::bad;
use super::INTERRUPTED;
use crate::attach::{self, Failure};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The first word of a JVM's program (main class, `-jar` file or `module/class`), past `-jar`/`-m`.
fn program_head(program: &str) -> &str {
    let mut words = program.split_whitespace();
    match words.next() {
        Some("-jar" | "-m" | "--module") => words.next().unwrap_or(""),
        Some(w) => w,
        None => "",
    }
}

/// Whether `name` names the JVM running `program`: its main class in full or without the package, its
/// jar by path or file name, or the class of `module/class`.
fn names_program(name: &str, program: &str) -> bool {
    let head = program_head(program);
    if head.is_empty() {
        return false;
    }
    let class = head.rsplit_once('/').map_or(head, |(_, c)| c);
    let simple = class.rsplit_once('.').map_or(class, |(_, c)| c);
    let is_jar = head.ends_with(".jar");
    name == head || name == class || (!is_jar && name == simple)
}

/// The pid of the JVM `target` names: a pid as it is, else the one JVM whose main class or jar it names.
pub(super) fn find_jvm(target: &str) -> Result<u32, Failure> {
    if let Ok(pid) = target.parse::<u32>() {
        return if pid > 0 { Ok(pid) } else { Err(bad("pid 0 is no process".into())) };
    }
    let jvms = attach::jvms()?;
    let matching: Vec<&attach::Jvm> = jvms.iter().filter(|j| names_program(target, &j.program)).collect();
    let describe = |js: &[&attach::Jvm]| -> String {
        js.iter().map(|j| format!("{} ({})", j.target.pid, program_head(&j.program))).collect::<Vec<_>>().join(", ")
    };
    match matching.len() {
        1 => Ok(matching[0].target.pid),
        0 if jvms.is_empty() => Err(attach::fail(format!("no JVM runs '{target}': kprof sees no JVM from here"))),
        0 => Err(attach::fail(format!(
            "no JVM runs '{target}' (main class or jar); JVMs here: {}",
            describe(&jvms.iter().collect::<Vec<_>>())
        ))),
        _ => {
            Err(attach::fail(format!("'{target}' names {} JVMs: {}; give a pid", matching.len(), describe(&matching))))
        }
    }
}

/// Waits while the JVM `pid` is still starting (its counters say so, or it does not handle SIGQUIT yet),
/// up to `timeout`: a JVM started a moment ago can be profiled as soon as it can be attached.
pub(super) fn wait_until_started(pid: u32, timeout: Duration) {
    let start = Instant::now();
    while start.elapsed() < timeout && !INTERRUPTED.load(Ordering::SeqCst) {
        let Ok(target) = attach::target::Target::read(pid) else { return };
        // Without counters (-XX:-UsePerfData) a VM has started once it handles SIGQUIT.
        let handles_sigquit = target.sigquit == attach::target::SigquitDisposition::Caught;
        let starting = target.still_starting(target.perfdata().as_ref())
            || (!handles_sigquit && target.maps_libjvm().unwrap_or(false));
        if !starting {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_main_classes_and_jars() {
        assert!(names_program("app.Main", "app.Main --port 80"));
        assert!(names_program("Main", "app.Main --port 80"));
        assert!(!names_program("app", "app.Main"));
        assert!(names_program("server.jar", "/opt/app/server.jar -v"));
        assert!(names_program("/opt/app/server.jar", "/opt/app/server.jar"));
        assert!(names_program("server.jar", "-jar /opt/app/server.jar"));
        assert!(!names_program("jar", "/opt/app/server.jar"));
        assert!(names_program("com.x.Main", "my.module/com.x.Main"));
        assert!(names_program("Main", "-m my.module/com.x.Main"));
        assert!(!names_program("Main", ""));
    }
}
