//! A process as /proc shows it: its pid in its own namespace, its credentials, whether it is a JVM,
//! whether it may be signalled, and how paths inside its mount namespace read from here.
//!
//! Every read may fail because the process exits meanwhile; nothing here panics on that.

use super::creds::Credentials;
use super::inside::TargetFs;
use super::perfdata::PerfData;
use super::sys;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a JVM without counters may still be starting (see [`Target::still_starting`]).
pub const STARTING_AT_MOST: Duration = Duration::from_secs(10);

/// How much earlier than the process's start (as /proc gives it, in clock ticks) a counters file's VM may
/// say it began and still be the process's own: the start time's tick and the clocks' reading. A file
/// whose VM began earlier is an exited process's with the same pid (pids are reused; a killed JVM leaves
/// its file): its pid came round again through every other pid in between, which takes far longer.
const COUNTERS_BEFORE_START_AT_MOST: Duration = Duration::from_secs(1);

/// What a process does on SIGQUIT.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SigquitDisposition {
    /// A handler is installed (a running HotSpot JVM: thread dump or attach listener start).
    Caught,
    Ignored,
    /// The default action: the process dies and dumps core.
    Default,
}

/// One process.
#[derive(Clone, Debug)]
pub struct Target {
    /// The pid as this process sees it.
    pub pid: u32,
    /// The pid inside the process's own PID namespace (the last field of `NStgid`).
    pub nspid: u32,
    /// Effective uid and gid, and supplementary groups, as this process sees ids (what it acts as).
    pub creds: Credentials,
    /// The effective uid as the process itself sees it, in its own user namespace (a rootless container's
    /// root is 0 there and an unprivileged uid here): the agent names its directory by this one.
    pub ns_uid: u32,
    /// The command name (`Name:` of /proc/PID/status).
    pub name: String,
    /// `R`, `S`, `Z`, ... of /proc/PID/status.
    pub state: char,
    pub sigquit: SigquitDisposition,
    proc_dir: PathBuf,
}

fn field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')).map(str::trim)
}

fn numbers(s: &str) -> Vec<u32> {
    s.split_whitespace().filter_map(|n| n.parse().ok()).collect()
}

/// `id` through a `uid_map`/`gid_map` read from outside (each line: first id inside, first id outside,
/// count); an id the map does not cover stays as it is.
fn map_id(map: &str, id: u32) -> u32 {
    map.lines()
        .map(numbers)
        .filter(|f| f.len() == 3)
        .find(|f| id >= f[1] && id - f[1] < f[2])
        .map_or(id, |f| f[0] + (id - f[1]))
}

/// Whether bit `signal - 1` is set in a /proc signal mask (hexadecimal).
fn mask_has(mask: Option<&str>, signal: i32) -> bool {
    mask.and_then(|m| u64::from_str_radix(m, 16).ok()).is_some_and(|m| m & (1u64 << (signal - 1)) != 0)
}

impl Target {
    /// Reads /proc/PID/status. Err: a one-line reason (no such process, or /proc unreadable).
    pub fn read(pid: u32) -> Result<Target, String> {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let status = fs::read_to_string(proc_dir.join("status")).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => format!("no process with pid {pid}"),
            _ => format!("cannot read /proc/{pid}/status: {e}"),
        })?;
        if let Some(tgid) = field(&status, "Tgid").and_then(|t| t.parse::<u32>().ok()).filter(|&t| t != pid) {
            return Err(format!("{pid} is a thread of process {tgid}, not a process"));
        }
        let mut target = Self::from_status(pid, &status).ok_or_else(|| format!("cannot parse /proc/{pid}/status"))?;
        target.ns_uid = target.id_inside("uid_map", target.creds.uid);
        Ok(target)
    }

    /// `id` (of this process's user namespace) as the process sees it in its own, through its
    /// `uid_map`/`gid_map`: the same id when both share a namespace (or the map cannot be read).
    fn id_inside(&self, map: &str, id: u32) -> u32 {
        let ns = |dir: &Path| fs::read_link(dir.join("ns/user")).ok();
        let mine = ns(Path::new("/proc/self"));
        if mine.is_none() || mine == ns(&self.proc_dir) {
            return id;
        }
        map_id(&fs::read_to_string(self.proc_dir.join(map)).unwrap_or_default(), id)
    }

    fn from_status(pid: u32, status: &str) -> Option<Target> {
        // A thread id also has a /proc entry; only thread-group leaders are processes.
        let tgid: u32 = field(status, "Tgid")?.parse().ok()?;
        if tgid != pid {
            return None;
        }
        let nspid = field(status, "NStgid").and_then(|f| numbers(f).last().copied()).unwrap_or(pid);
        let uids = numbers(field(status, "Uid")?);
        let gids = numbers(field(status, "Gid")?);
        let groups = field(status, "Groups").map(numbers).unwrap_or_default();
        let sigquit = if mask_has(field(status, "SigCgt"), libc::SIGQUIT) {
            SigquitDisposition::Caught
        } else if mask_has(field(status, "SigIgn"), libc::SIGQUIT) {
            SigquitDisposition::Ignored
        } else {
            SigquitDisposition::Default
        };
        Some(Target {
            pid,
            nspid,
            creds: Credentials { uid: *uids.get(1)?, gid: *gids.get(1)?, groups },
            ns_uid: *uids.get(1)?,
            name: field(status, "Name").unwrap_or("").to_string(),
            state: field(status, "State").and_then(|s| s.chars().next()).unwrap_or('?'),
            sigquit,
            proc_dir: PathBuf::from(format!("/proc/{pid}")),
        })
    }

    /// The process's arguments (empty for kernel threads or when unreadable).
    pub fn cmdline(&self) -> Vec<String> {
        fs::read(self.proc_dir.join("cmdline"))
            .map(|b| {
                b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into()).collect()
            })
            .unwrap_or_default()
    }

    /// The process's environment variable `name`, if readable (its user or root only).
    pub fn env(&self, name: &str) -> Option<String> {
        let bytes = fs::read(self.proc_dir.join("environ")).ok()?;
        bytes.split(|&c| c == 0).find_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')).map(str::to_string)
        })
    }

    /// Whether libjvm.so is mapped: Ok(true) for a HotSpot JVM (a `java` launcher or any program that
    /// embeds the VM). Err when the maps cannot be read (another user's process, or it exited).
    pub fn maps_libjvm(&self) -> io::Result<bool> {
        let maps = fs::read_to_string(self.proc_dir.join("maps"))?;
        Ok(maps.lines().any(|l| l.ends_with("/libjvm.so")))
    }

    /// Whether the process is a `java` launcher (its program is named `java`, or it maps the launcher's
    /// libjli.so), with or without a VM loaded yet.
    pub fn is_java_launcher(&self) -> bool {
        let named_java = self.cmdline().first().is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "java"));
        named_java
            || fs::read_to_string(self.proc_dir.join("maps"))
                .is_ok_and(|maps| maps.lines().any(|l| l.ends_with("/libjli.so")))
    }

    /// When the process started, by the wall clock (its age subtracted from now).
    pub fn started_at(&self) -> Option<SystemTime> {
        SystemTime::now().checked_sub(self.age()?)
    }

    /// How long ago the process started (/proc/PID/stat's start time against /proc/uptime).
    pub fn age(&self) -> Option<Duration> {
        let stat = fs::read_to_string(self.proc_dir.join("stat")).ok()?;
        // Fields after the command name (which may hold spaces and parentheses): state is field 3, the
        // start time in clock ticks after boot field 22.
        let start_ticks: u64 = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()?;
        let uptime: f64 = fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
        let started = start_ticks as f64 / sys::clock_ticks_per_second() as f64;
        Some(Duration::from_secs_f64((uptime - started).max(0.0)))
    }

    /// Whether the process is a JVM still starting, as far as can be seen from outside: its counters say
    /// it has not finished creating the VM; or, younger than [`STARTING_AT_MOST`], it has no counters yet
    /// although it keeps them, or it is a `java` launcher that has not loaded the VM yet. HotSpot catches
    /// SIGQUIT some milliseconds before it writes its counters file (measured: 5–9 ms after exec, the file
    /// 1–2 ms later on an idle machine), and a SIGQUIT then starts no attach listener. Older than that, a
    /// missing file is taken for a VM without counters (an option not seen from outside, ids of another
    /// user namespace), so that no JVM is refused for ever. `perf`: [`Target::perfdata`].
    pub fn still_starting(&self, perf: Option<&PerfData>) -> bool {
        if let Some(started) = perf.and_then(PerfData::started) {
            return !started;
        }
        if self.age().is_some_and(|age| age >= STARTING_AT_MOST) {
            return false;
        }
        match self.maps_libjvm() {
            Ok(true) => {
                let options = self.jvm_options();
                bool_flag(&options, "UsePerfData") != Some(false)
                    && bool_flag(&options, "PerfDisableSharedMem") != Some(true)
            }
            Ok(false) => self.is_java_launcher(),
            Err(_) => false,
        }
    }

    /// The process's performance counters file, if it has one and it is readable: `/tmp/hsperfdata_<its
    /// user's name>/<nspid>` inside its root, a regular file of its uid whose VM began after the process
    /// started.
    pub fn perfdata(&self) -> Option<PerfData> {
        /// HotSpot maps `PerfDataMemorySize` (32 KiB by default) from this file.
        const PERFDATA_CAP: u64 = 64 << 20;
        let fs = TargetFs::open(self).ok()?;
        for dir in fs.names("/tmp").ok()? {
            if !dir.starts_with("hsperfdata_") {
                continue;
            }
            // The counters file belongs to the JVM's user; one of another user is another JVM's.
            let Ok(file) = fs.read_regular(&format!("/tmp/{dir}/{}", self.nspid), PERFDATA_CAP) else { continue };
            if file.uid != self.creds.uid {
                continue;
            }
            let Some(p) = PerfData::parse(&file.bytes) else { continue };
            // The file of an exited JVM that had this pid says nothing of this process: before this JVM
            // writes its own (milliseconds after exec, see `still_starting`), it would say "started" and
            // give another JVM's flags.
            if let (Some(began), Some(start)) = (p.began_at(), self.started_at()) {
                if began + COUNTERS_BEFORE_START_AT_MOST < start {
                    continue;
                }
            }
            return Some(p);
        }
        None
    }

    /// Whether the process runs in this process's mount namespace with the same root, so that its paths
    /// mean the same here.
    pub fn shares_mounts(&self) -> bool {
        let ns = |dir: &Path| fs::read_link(dir.join("ns/mnt")).ok();
        let root = |dir: &Path| fs::metadata(dir.join("root")).ok().map(|m| (m.dev(), m.ino()));
        let (mine, theirs) = (Path::new("/proc/self"), self.proc_dir.as_path());
        matches!((ns(mine), ns(theirs)), (Some(a), Some(b)) if a == b)
            && matches!((root(mine), root(theirs)), (Some(a), Some(b)) if a == b)
    }

    /// `/proc/PID/root`: the process's root directory as seen from here.
    pub fn root_dir(&self) -> PathBuf {
        self.proc_dir.join("root")
    }

    /// `/proc/PID/cwd`.
    pub fn cwd_dir(&self) -> PathBuf {
        self.proc_dir.join("cwd")
    }

    /// The path under which this process reaches `path` of the target's namespace (absolute).
    pub fn in_root(&self, path: &str) -> PathBuf {
        self.root_dir().join(path.trim_start_matches('/'))
    }

    /// A path of the target's namespace as the caller can read it: unchanged when the mounts are shared,
    /// else under `/proc/PID/root` (readable while the target lives).
    pub fn readable_path(&self, path: &str, shares_mounts: bool) -> PathBuf {
        if shares_mounts {
            PathBuf::from(path)
        } else {
            self.in_root(path)
        }
    }

    /// The user name of the target's uid in this namespace's /etc/passwd, else the number.
    pub fn user_name(&self) -> String {
        user_name(self.creds.uid)
    }
}

/// The name of `uid` in /etc/passwd, else the number.
pub fn user_name(uid: u32) -> String {
    fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

/// Launcher options that take the next argument as their value.
const OPTIONS_WITH_VALUE: &[&str] = &[
    "-cp",
    "-classpath",
    "--class-path",
    "-p",
    "--module-path",
    "--upgrade-module-path",
    "--add-modules",
    "--limit-modules",
    "--add-reads",
    "--add-exports",
    "--add-opens",
    "--patch-module",
    "--enable-native-access",
];

/// Splits a `java` command line into the JVM's options and the main class (or `-jar FILE`, `-m MODULE`)
/// with its arguments: options after the main class belong to the program, not the JVM.
pub fn split_java_command(cmdline: &[String]) -> (&[String], &[String]) {
    let mut i = 1;
    while i < cmdline.len() {
        let a = cmdline[i].as_str();
        if OPTIONS_WITH_VALUE.contains(&a) {
            i += 2;
        } else if a == "-jar" || a == "-m" || a == "--module" || !(a.starts_with('-') || a.starts_with('@')) {
            break;
        } else {
            i += 1;
        }
    }
    let i = i.min(cmdline.len());
    (&cmdline[1.min(cmdline.len())..i], &cmdline[i..])
}

/// The value a boolean `-XX:±Flag` finally has among `options` (the last occurrence wins), if set.
pub fn bool_flag(options: &[String], flag: &str) -> Option<bool> {
    options.iter().rev().find_map(|o| {
        let rest = o.strip_prefix("-XX:")?;
        match rest.strip_suffix(flag)? {
            "+" => Some(true),
            "-" => Some(false),
            _ => None,
        }
    })
}

impl Target {
    /// The JVM options in effect as far as they can be seen from outside, in HotSpot's order (the last
    /// setting of a flag wins): JAVA_TOOL_OPTIONS, then the launcher's JDK_JAVA_OPTIONS and the command
    /// line's JVM options (with `@argfiles` read), then _JAVA_OPTIONS. Flags from `-XX:Flags=` or
    /// `-XX:VMOptionsFile=` files are not followed: the counters file is the authority where it exists.
    pub fn jvm_options(&self) -> Vec<String> {
        let words = |v: Option<String>| v.map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>());
        let cmdline = self.cmdline();
        let mut all: Vec<String> = words(self.env("JAVA_TOOL_OPTIONS")).unwrap_or_default();
        all.extend(words(self.env("JDK_JAVA_OPTIONS")).unwrap_or_default());
        for option in split_java_command(&cmdline).0 {
            match option.strip_prefix('@') {
                Some(file) => all.extend(self.argfile(file).into_iter().filter(|w| w.starts_with('-'))),
                None => all.push(option.clone()),
            }
        }
        all.extend(words(self.env("_JAVA_OPTIONS")).unwrap_or_default());
        all
    }

    /// The words of a launcher `@argfile` (relative to the process's working directory), quotes removed;
    /// none when it is not a regular file inside the target or is larger than the launcher would take.
    fn argfile(&self, file: &str) -> Vec<String> {
        const ARGFILE_CAP: u64 = 1 << 20;
        let Ok(fs) = TargetFs::open(self) else { return Vec::new() };
        let bytes = fs.read_regular(file, ARGFILE_CAP).map(|c| c.bytes).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(|l| l.split_whitespace())
            .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_string())
            .collect()
    }

    /// A short description of the program: the main class and arguments from the counters file, else from
    /// the command line.
    pub fn program(&self, perf: Option<&PerfData>) -> String {
        if let Some(cmd) = perf.and_then(PerfData::java_command).filter(|c| !c.is_empty()) {
            return cmd.to_string();
        }
        let cmdline = self.cmdline();
        let (_, program) = split_java_command(&cmdline);
        if program.is_empty() {
            cmdline.join(" ")
        } else {
            program.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn status_fields_give_nspid_credentials_and_sigquit() {
        let status = "Name:\tjava\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t1\n\
Uid:\t1000\t1001\t1001\t1001\nGid:\t100\t101\t101\t101\nGroups:\t101 20 \nNStgid:\t4242\t7\nNSpid:\t4242\t7\n\
SigIgn:\t0000000000000000\nSigCgt:\t2000000181005ccf\n";
        let t = Target::from_status(4242, status).unwrap();
        assert_eq!(t.nspid, 7);
        assert_eq!(t.creds, Credentials { uid: 1001, gid: 101, groups: vec![101, 20] });
        assert_eq!(t.sigquit, SigquitDisposition::Caught);
        assert_eq!(t.state, 'S');
        let sleeper = status.replace("2000000181005ccf", "0000000000000000");
        assert_eq!(Target::from_status(4242, &sleeper).unwrap().sigquit, SigquitDisposition::Default);
        assert!(Target::from_status(4243, status).is_none(), "a thread is not a process");
    }

    #[test]
    fn ids_map_into_the_processs_user_namespace() {
        // `unshare --map-root-user` by nobody, and a rootless container's subordinate range.
        assert_eq!(map_id("         0      65534          1\n", 65534), 0);
        let podman = "0 1000 1\n1 100000 65536\n";
        assert_eq!(map_id(podman, 1000), 0);
        assert_eq!(map_id(podman, 100000), 1);
        assert_eq!(map_id(podman, 100032), 33);
        assert_eq!(map_id(podman, 5), 5, "an id the map does not cover");
        assert_eq!(map_id("0 0 4294967295", 1234), 1234);
    }

    #[test]
    fn this_process_reads_itself() {
        let me = Target::read(std::process::id()).unwrap();
        assert_eq!(me.pid, std::process::id());
        assert_eq!(me.ns_uid, me.creds.uid, "same user namespace: the same uid");
        assert!(me.shares_mounts());
        assert!(!me.maps_libjvm().unwrap());
        assert!(!me.is_java_launcher());
        assert!(!me.still_starting(None), "not a JVM, not a launcher");
        // Started with this test binary: some time ago, less than the suite's budget.
        let age = me.age().unwrap();
        assert!(age < Duration::from_secs(5400), "{age:?}");
        assert!(Target::read(1).unwrap().age().unwrap() >= age, "init started before this process");
        assert!(Target::read(u32::MAX - 1).unwrap_err().contains("no process"));
    }

    #[test]
    fn java_command_lines_split_at_the_main_class() {
        let cmd = args("java -cp a:b -Xrs @more -XX:+DisableAttachMechanism app.Main -XX:-DisableAttachMechanism");
        let (opts, program) = split_java_command(&cmd);
        assert_eq!(opts, &args("-cp a:b -Xrs @more -XX:+DisableAttachMechanism")[..]);
        assert_eq!(program, &args("app.Main -XX:-DisableAttachMechanism")[..]);
        assert_eq!(bool_flag(opts, "DisableAttachMechanism"), Some(true));
        let jar = args("java -XX:+DisableAttachMechanism -XX:-DisableAttachMechanism -jar app.jar -Xrs");
        let (opts, program) = split_java_command(&jar);
        assert_eq!(bool_flag(opts, "DisableAttachMechanism"), Some(false));
        assert_eq!(program, &args("-jar app.jar -Xrs")[..]);
        assert_eq!(bool_flag(&args("-XX:+NotDisableAttachMechanism"), "DisableAttachMechanism"), None);
        assert_eq!(split_java_command(&[]).0.len(), 0);
    }
}
