//! Acting as the target's user. Files kprof creates for a target (the attach trigger, the private
//! directory, the copied library) must belong to the target's user, and HotSpot and the kprof agent accept
//! connections only from their own user or root. When kprof runs as root for another user's JVM, that
//! work runs on a thread switched to the target's credentials; the rest of kprof keeps its own.

use super::sys;

/// Whom to act as.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Runs `work` as `creds`: on the calling thread when `creds` is `None` (already the right user), else on
/// a new thread that switches to `creds` first and ends with `work`.
pub fn run_as<T: Send>(
    creds: Option<&Credentials>,
    work: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    let Some(creds) = creds else { return work() };
    std::thread::scope(|scope| {
        let handle = scope.spawn(move || {
            sys::switch_thread_credentials(creds.uid, creds.gid, &creds.groups)
                .map_err(|e| format!("cannot switch to uid {} gid {}: {e}", creds.uid, creds.gid))?;
            work()
        });
        handle.join().unwrap_or_else(|_| Err("the worker acting as the target's user panicked".into()))
    })
}

/// The credentials to act with for a target owned by `target`: `None` when kprof already is that user,
/// or when kprof is root and so is the target; `Some(target)` when kprof is root and the target is not.
/// Err when kprof is neither root nor the target's user: the caller refuses before touching the target.
pub fn for_target(target: &Credentials) -> Result<Option<Credentials>, u32> {
    let me = sys::euid();
    if me == target.uid {
        Ok(None)
    } else if me == 0 {
        Ok(Some(target.clone()))
    } else {
        Err(me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_credentials_the_work_runs_here() {
        let here = std::thread::current().id();
        let ran_on = run_as(None, || Ok(std::thread::current().id())).unwrap();
        assert_eq!(here, ran_on);
    }

    #[test]
    fn switching_changes_only_the_worker_thread() {
        if sys::euid() != 0 {
            return; // needs root to switch
        }
        let nobody = Credentials { uid: 65534, gid: 65534, groups: vec![65534] };
        let seen = run_as(Some(&nobody), || Ok(sys::euid())).unwrap();
        assert_eq!(seen, 65534);
        assert_eq!(sys::euid(), 0, "the calling thread keeps its credentials");
    }
}
