//! Writers (and, for `kprof report`/`kprof compare`, readers) of resolved profiles. They take a
//! [`Profile`] and know nothing of engines.
//!
//! Every file is written atomically: a temporary file in the same directory, created exclusively with
//! owner-only permissions and without following symlinks, then renamed over the target. Files are not
//! synced to disk before the rename (see [`write_atomic_with`]).

pub mod collapsed;
pub mod compare;
pub mod html;
pub mod jfr;
pub mod json;
pub mod pprof;
pub mod text;

use crate::model::{Metric, Profile};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// An output format.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    /// Collapsed stacks (`a;b;c 42`), for flamegraph.pl and speedscope.
    Collapsed,
    /// A self-contained interactive flame graph.
    Html,
    /// The calling context tree as JSON (schema in docs/json-format.md).
    Json,
    /// A JFR recording, for the JDK's `jfr` tool and `RecordingFile` readers.
    Jfr,
    /// pprof: gzipped protobuf.
    Pprof,
    /// The text report of `kprof report`.
    Text,
}

impl Format {
    pub const ACCEPTED: &'static str = "collapsed, html, jfr, json, pprof, text";

    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "collapsed" | "folded" => Format::Collapsed,
            "html" => Format::Html,
            "json" => Format::Json,
            "jfr" => Format::Jfr,
            "pprof" => Format::Pprof,
            "text" | "txt" => Format::Text,
            _ => return None,
        })
    }

    /// The format a file name implies: `.collapsed`/`.folded`, `.html`/`.htm`, `.json`, `.jfr`,
    /// `.pb.gz`/`.pprof`/`.pb`, `.txt`.
    pub fn from_path(path: &str) -> Option<Format> {
        let lower = path.to_ascii_lowercase();
        let ends = |s: &str| lower.ends_with(s);
        Some(if ends(".collapsed") || ends(".folded") {
            Format::Collapsed
        } else if ends(".html") || ends(".htm") {
            Format::Html
        } else if ends(".json") {
            Format::Json
        } else if ends(".jfr") {
            Format::Jfr
        } else if ends(".pb.gz") || ends(".pprof") || ends(".pb") {
            Format::Pprof
        } else if ends(".txt") {
            Format::Text
        } else {
            return None;
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Collapsed => "collapsed",
            Format::Html => "html",
            Format::Json => "json",
            Format::Jfr => "jfr",
            Format::Pprof => "pprof",
            Format::Text => "text",
        }
    }
}

/// Renders `profile` in `format`; `metric` is the counter collapsed stacks, the flame graph and the text
/// report show (JSON, JFR and pprof carry every counter).
pub fn render(profile: &Profile, format: Format, metric: Metric) -> Vec<u8> {
    render_with(profile, format, metric, html::FrameNames::Short)
}

/// [`render`], with the flame graph's frames named as `names` says.
pub fn render_with(profile: &Profile, format: Format, metric: Metric, names: html::FrameNames) -> Vec<u8> {
    match format {
        Format::Collapsed => collapsed::render(profile, metric),
        Format::Html => html::render_with(profile, metric, names),
        Format::Json => json::render(profile),
        Format::Jfr => jfr::render(profile),
        Format::Pprof => pprof::render(profile),
        Format::Text => text::render(profile, metric, text::DEFAULT_TOP).into_bytes(),
    }
}

/// The display name of every frame, indexed like [`Profile::frames`] (computed once per frame, not per node).
pub fn display_names(profile: &Profile) -> Vec<String> {
    profile.frames.iter().map(|f| f.display_name()).collect()
}

/// Reads a profile written by kprof as JSON, or any collapsed-stacks file.
pub fn read_profile(path: &Path) -> Result<Profile, String> {
    let bytes = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{}: not UTF-8 text (JSON or collapsed stacks expected)", path.display()))?;
    if text.trim_start().starts_with('{') {
        json::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    } else {
        collapsed::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Writes `profile` in `format` to `path` atomically, as [`render`] would make it; collapsed stacks and
/// JSON go to the file as they are made (see [`collapsed::Lines`], [`json::write_to`]).
pub fn write_profile(path: &Path, profile: &Profile, format: Format, metric: Metric) -> std::io::Result<PathBuf> {
    write_profile_with(path, profile, format, metric, html::FrameNames::Short)
}

/// [`write_profile`], with the flame graph's frames named as `names` says.
pub fn write_profile_with(
    path: &Path,
    profile: &Profile,
    format: Format,
    metric: Metric,
    names: html::FrameNames,
) -> std::io::Result<PathBuf> {
    match format {
        Format::Collapsed => {
            let lines = collapsed::Lines::new(profile, metric);
            let len = lines.byte_len();
            // Refused up front rather than failing once the disk is full (which would harm whatever else
            // writes there): collapsed stacks of an exact profile can outgrow any disk.
            if let Some(free) = free_bytes(path) {
                if len > free.saturating_sub(free / 20) {
                    return Err(std::io::Error::other(format!(
                        "collapsed stacks would take {} MB, {} MB free there; JSON or pprof keep the tree in far less",
                        len >> 20,
                        free >> 20
                    )));
                }
            }
            write_atomic_with(path, |out| lines.write(out))
        }
        Format::Json => write_atomic_with(path, |out| json::write_to(profile, out)),
        _ => write_atomic(path, &render_with(profile, format, metric, names)),
    }
}

/// Bytes free to an unprivileged writer on the file system of `path`'s directory.
fn free_bytes(path: &Path) -> Option<u64> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable memory of the struct's size;
    // statvfs only writes it, and it is read only when the call succeeded.
    let st = unsafe {
        if libc::statvfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
            return None;
        }
        st.assume_init()
    };
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// The longest file name Linux file systems take (NAME_MAX), in bytes.
const NAME_MAX: usize = 255;

/// The temporary name for writing `name`: `.<name>.<pid>.<attempt>.tmp`, with `name` cut (at a character
/// boundary where it is UTF-8) so that the whole stays within [`NAME_MAX`]: a 255-byte name must still be
/// writable. The pid and the attempt keep it unique.
fn temporary_name(name: &[u8], attempt: u32) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let suffix = format!(".{}.{attempt}.tmp", std::process::id());
    let room = NAME_MAX - 1 - suffix.len();
    let mut cut = name.len().min(room);
    if let Ok(text) = std::str::from_utf8(name) {
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
    }
    let mut out = Vec::with_capacity(1 + cut + suffix.len());
    out.push(b'.');
    out.extend_from_slice(&name[..cut]);
    out.extend_from_slice(suffix.as_bytes());
    std::ffi::OsString::from_vec(out)
}

/// Closes `file`, reporting what close() reports (dropping a `File` ignores it). EINTR means closed.
fn close(file: fs::File) -> std::io::Result<()> {
    use std::os::fd::IntoRawFd;
    let fd = file.into_raw_fd();
    // SAFETY: `fd` was just released by its only owner and is closed exactly once, here.
    if unsafe { libc::close(fd) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically (see the module comment). Returns the absolute path written.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    write_atomic_with(path, |out| out.write_all(bytes))
}

/// Writes what `fill` writes to `path` atomically (buffered). Returns the absolute path written.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let mut attempt = 0u32;
    let (tmp, file) = loop {
        let tmp = dir.join(temporary_name(name.as_encoded_bytes(), attempt));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let mut file = file;
    let mut buffered = std::io::BufWriter::with_capacity(1 << 20, &mut file);
    let result = fill(&mut buffered).and_then(|_| buffered.flush());
    drop(buffered);
    // No fsync: the rename is what makes the write atomic for every reader, and the kernel writes the
    // pages back on its own. Waiting for the disk at a JVM's exit, which waits for this, took 0.4 s for
    // an exact profile of 275 MB (1.5 s for 1 GB); durability across a power cut is not worth that. But
    // close() is checked: a file system may report a failed write only there (NFS, quotas), and then the
    // file must not replace the previous one.
    let result = result.and_then(|_| close(file));
    if let Err(e) = result.and_then(|_| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_extensions() {
        assert_eq!(Format::from_path("/tmp/a.html"), Some(Format::Html));
        assert_eq!(Format::from_path("a.COLLAPSED"), Some(Format::Collapsed));
        assert_eq!(Format::from_path("a.pb.gz"), Some(Format::Pprof));
        assert_eq!(Format::from_path("a.json"), Some(Format::Json));
        assert_eq!(Format::from_path("/tmp/profile.JFR"), Some(Format::Jfr));
        assert_eq!(Format::parse("jfr"), Some(Format::Jfr));
        assert_eq!(Format::from_path("a.txt"), Some(Format::Text));
        assert_eq!(Format::from_path("a.bin"), None);
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("kprof-out-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("p.txt");
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failing_streamed_write_is_reported_and_leaves_neither_file_nor_temporary() {
        let dir = std::env::temp_dir().join(format!("kprof-out-fail-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("p.collapsed");
        let err = write_atomic_with(&target, |out| {
            out.write_all(&vec![b'x'; 3 << 20])?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        // Streamed collapsed stacks are what render makes.
        let mut p = Profile::new(crate::model::Meta::default(), &[Metric::Samples]);
        let main = p.intern(crate::model::Frame::java("a.Main", "main", "()V"));
        let n = p.child(0, main, -1);
        p.set(n, Metric::Samples, 3);
        let path = write_profile(&target, &p, Format::Collapsed, Metric::Samples).unwrap();
        assert_eq!(fs::read(&path).unwrap(), render(&p, Format::Collapsed, Metric::Samples));
        assert_eq!(collapsed::Lines::new(&p, Metric::Samples).byte_len(), fs::metadata(&path).unwrap().len());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_name_of_255_bytes_is_written() {
        let dir = std::env::temp_dir().join(format!("kprof-out-long-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // ASCII, and multi-byte characters whose cut must fall between them.
        for name in ["p".repeat(250) + ".html", "é".repeat(125) + ".html"] {
            assert_eq!(name.len(), 255);
            let target = dir.join(&name);
            write_atomic(&target, b"one").unwrap();
            write_atomic(&target, b"two").unwrap();
            assert_eq!(fs::read(&target).unwrap(), b"two");
        }
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2, "temporaries left behind");
        assert!(temporary_name("é".repeat(125).as_bytes(), 7).len() <= NAME_MAX);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A full file system: the write fails, the previous file stays, no temporary is left. Needs root to
    /// mount a small tmpfs (skipped otherwise).
    #[test]
    fn a_full_file_system_keeps_the_previous_file() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting a tmpfs needs root");
            return;
        }
        let dir = std::env::temp_dir().join(format!("kprof-out-full-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs");
            return;
        }
        let target = dir.join("p.collapsed");
        let outcome = std::panic::catch_unwind(|| {
            write_atomic(&target, b"previous").unwrap();
            let err = write_atomic(&target, &vec![b'x'; 1 << 20]).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
            assert_eq!(fs::read(&target).unwrap(), b"previous");
            assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "a temporary was left behind");
        });
        let _ = std::process::Command::new("umount").arg(&dir).status();
        let _ = fs::remove_dir_all(&dir);
        if let Err(p) = outcome {
            std::panic::resume_unwind(p);
        }
    }

    #[test]
    fn atomic_write_reports_an_unwritable_directory() {
        let err = write_atomic(Path::new("/nonexistent-kprof-dir/x.html"), b"x").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
