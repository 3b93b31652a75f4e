//! Making the agent library loadable by the target. The JVM opens the library by a path of its own mount
//! namespace: kprof's own path when the target sees the same file there (and may read it), else a copy
//! kprof puts in the target's `/tmp/.kprof-<uid>/` — a directory of the target's user, mode 0700, created
//! and entered without following symbolic links, which the agent also uses for its control sockets (uid
//! as the target sees it).

use super::inside::TargetFs;
use super::sys;
use super::target::Target;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

/// The library file name next to the `kprof` binary.
pub const LIBRARY_NAME: &str = "libkprof.so";

/// The agent library as kprof sees it.
pub struct AgentLibrary {
    /// Canonical path in kprof's namespace.
    pub path: PathBuf,
    dev: u64,
    ino: u64,
    /// Its contents, read once by kprof's own user (the target's user may not be able to read it).
    bytes: Vec<u8>,
}

/// 64-bit FNV-1a: names a copy by its contents, so one copy serves every attach of the same build.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

impl AgentLibrary {
    /// `explicit` (`--lib PATH`), else `libkprof.so` in the directory of the running `kprof` binary.
    pub fn locate(explicit: Option<&str>) -> Result<AgentLibrary, String> {
        let path = match explicit {
            Some(p) => PathBuf::from(p),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find the kprof binary to locate {LIBRARY_NAME}: {e}"))?
                .with_file_name(LIBRARY_NAME),
        };
        let path = fs::canonicalize(&path)
            .map_err(|e| format!("agent library {}: {e} (give its path with --lib PATH)", path.display()))?;
        let mut file = File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let meta = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("{} is not a file", path.display()));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(AgentLibrary { path, dev: meta.dev(), ino: meta.ino(), bytes })
    }

    /// The name of a copy: `libkprof-<hash of the contents>.so`.
    pub fn copy_name(&self) -> String {
        format!("libkprof-{:016x}.so", fnv1a(&self.bytes))
    }
}

/// The private directory `/tmp/.kprof-<uid>` of the target's user inside the target's namespace (uid as
/// the target sees it, see [`Target::ns_uid`]), created if missing (run as that user, so it is theirs).
/// Refused if the directory is a symbolic link, belongs to someone else or is open to others. The target's
/// /tmp is found as the target finds it (a link there leads where it leads the target).
pub fn private_dir(target: &Target) -> Result<(OwnedFd, String), String> {
    let name = format!(".kprof-{}", target.ns_uid);
    let shown = format!("/tmp/{name}");
    let fs = TargetFs::open(target)?;
    let tmp = fs.dir("/tmp").map_err(|e| format!("cannot open the target's /tmp: {e}"))?;
    match sys::mkdirat(&tmp, &name, 0o700) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {shown} in the target: {e}")),
    }
    let dir = sys::openat_nofollow(&tmp, &name, libc::O_DIRECTORY | libc::O_RDONLY, 0)
        .map_err(|e| format!("cannot open {shown} in the target (a symbolic link?): {e}"))?;
    let meta = File::from(dir.try_clone().map_err(|e| e.to_string())?).metadata().map_err(|e| e.to_string())?;
    let uid = target.creds.uid;
    if meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "refusing {shown} in the target: it belongs to uid {} with mode {:o} (uid {uid}, mode 700 expected)",
            meta.uid(),
            meta.permissions().mode() & 0o7777
        ));
    }
    Ok((dir, shown))
}

fn same_contents(mut file: File, bytes: &[u8]) -> bool {
    let mut have = Vec::with_capacity(bytes.len());
    file.read_to_end(&mut have).is_ok() && have == bytes
}

/// The path, inside the target's namespace, from which the target can load `lib`: kprof's own when the
/// target sees the same file there and may read it, else a copy in the private directory. Run as the
/// target's user.
pub fn visible_path(target: &Target, lib: &AgentLibrary) -> Result<String, String> {
    let own = lib.path.to_string_lossy().into_owned();
    // Opened for reading (the target's user must be able to read it), without blocking (a FIFO there
    // would wait for a writer).
    if let Ok(f) = TargetFs::open(target)?.open_path(&own, libc::O_RDONLY | libc::O_NONBLOCK) {
        if sys::fstat(&f)
            .is_ok_and(|m| m.st_mode & libc::S_IFMT == libc::S_IFREG && m.st_dev == lib.dev && m.st_ino == lib.ino)
        {
            return Ok(own);
        }
    }
    let (dir, shown) = private_dir(target)?;
    let name = lib.copy_name();
    let path = format!("{shown}/{name}");
    match sys::openat_nofollow(&dir, &name, libc::O_RDONLY, 0) {
        Ok(fd) => {
            let file = File::from(fd);
            let ours = file.metadata().is_ok_and(|m| m.is_file() && m.uid() == target.creds.uid);
            if ours && same_contents(file, &lib.bytes) {
                return Ok(path);
            }
            // Damaged or foreign: replace it below (rename over it).
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot open {path} in the target: {e}")),
    }
    let tmp_name = format!(".{name}.{}.tmp", std::process::id());
    let _ = sys::unlinkat(&dir, &tmp_name);
    let fd = sys::openat_nofollow(&dir, &tmp_name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o500)
        .map_err(|e| format!("cannot create a copy of the agent in the target ({shown}): {e}"))?;
    let mut file = File::from(fd);
    let written = file.write_all(&lib.bytes).and_then(|_| file.sync_all());
    drop(file);
    if let Err(e) = written.and_then(|_| sys::renameat(&dir, &tmp_name, &name)) {
        let _ = sys::unlinkat(&dir, &tmp_name);
        return Err(format!("cannot copy the agent into the target ({path}): {e}"));
    }
    Ok(path)
}

/// The most kprof copies out of a target for one file (a profile of a large exact run is a few GB).
const COPY_CAP: u64 = 64 << 30;

/// Reads the regular file `path` of the target's namespace, resolved inside the target (see [`TargetFs`]),
/// up to its size when opened. Run as the target's user.
pub fn read_in_target(target: &Target, path: &str) -> Result<Vec<u8>, String> {
    let fs = TargetFs::open(target)?;
    let contents = fs.read_regular(path, COPY_CAP).map_err(|e| format!("cannot read {path} in the target: {e}"))?;
    Ok(contents.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
    }
}
