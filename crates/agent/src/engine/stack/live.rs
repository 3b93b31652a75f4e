//! The Java threads already running when a session starts.
//!
//! JVMTI cannot run code on a thread that already exists, yet a sampled thread's slot needs its kernel
//! thread id and its JNIEnv. kprof reads the `JavaThread*` from `java.lang.Thread.eetop`, finds the
//! JNIEnv at the same offset the calling thread's own JNIEnv has from its `JavaThread*`, and the kernel
//! thread id through HotSpot's structure table ([`vmstructs`]).
//!
//! A found thread may exit at any moment of this, and its `JavaThread` be freed: every read of it goes
//! through the kernel ([`vmstructs::read_word`]), so a freed one gives nothing rather than a crash; its
//! tid must name a thread of this process ([`is_own_thread`](super::is_own_thread), checked again by
//! the registration, before any timer is made for it); a thread that ends while the search is under way
//! is remembered ([`Registry::note_ended`](super::threads::Registry::note_ended): JVMTI posts ThreadEnd
//! before `eetop` is cleared) and refused; and after registering a found thread, the engine checks
//! that its `eetop` still holds the same `JavaThread` ([`Search::still_running`]), and takes it off
//! again if not.

use super::threads;
use crate::engine::OWN_THREAD_PREFIX;
use crate::jvmti::bindings::{jfieldID, jobject};
use crate::jvmti::{vmstructs, Jni, Jvmti};
use std::ffi::c_void;

/// A running thread found by a [`Search`].
pub struct Found {
    /// A global reference to the `java.lang.Thread` (the search deletes it unless taken).
    thread: jobject,
    pub name: String,
    pub tid: i32,
    pub env: *mut c_void,
    /// The `JavaThread*` read from `eetop`.
    java_thread: usize,
}

impl Found {
    /// The thread's `java.lang.Thread`, a global reference valid while the search lives.
    pub fn thread(&self) -> jobject {
        self.thread
    }
}

/// One search for running threads; registrations of found threads happen while it lives.
pub struct Search {
    jni: Jni,
    eetop: jfieldID,
    pub found: Vec<Found>,
    /// Running threads that could not be located (no usable offsets, or gone while being read).
    pub skipped: usize,
}

impl Search {
    /// Finds the running Java threads (kprof's own excepted). Err: why none can be found.
    pub fn run(jni: Jni, jvmti: Jvmti) -> Result<Search, String> {
        let eetop = jni
            .find_class("java/lang/Thread")
            .and_then(|k| {
                let f = jni.field_id(k, "eetop", "J");
                jni.delete_local_ref(k);
                f
            })
            .ok_or("cannot read Thread.eetop; only threads that start from now on are sampled")?;
        // Threads that end from now on are remembered until the search is dropped.
        threads::registry().begin_search();
        let mut search = Search { jni, eetop, found: Vec::new(), skipped: 0 };
        let offsets = vmstructs::thread_offsets();
        let Ok(current) = jvmti.current_thread() else { return Ok(search) };
        let my_tid = super::gettid();
        let my_env = jni.raw() as usize;
        let my_eetop = jni.long_field(current, eetop) as usize;
        jni.delete_local_ref(current);
        // The JNIEnv lives inside the JavaThread at the same offset in every thread.
        let env_offset = my_env.wrapping_sub(my_eetop);
        let env_offset_ok = my_eetop != 0 && env_offset < 1 << 16;
        // A JNIEnv's first word is the JNI function table, the same for every thread.
        let table = vmstructs::read_word(my_env);
        let Ok(all) = jvmti.all_threads() else { return Ok(search) };
        for &t in all.as_slice() {
            let name = jvmti.thread_name(t).unwrap_or_default();
            let top = jni.long_field(t, eetop) as usize;
            if name.starts_with(OWN_THREAD_PREFIX) || top == 0 {
                jni.delete_local_ref(t);
                continue;
            }
            let located = if top == my_eetop {
                Some((my_tid, my_env))
            } else if env_offset_ok {
                let env = top + env_offset;
                vmstructs::thread_tid(top, offsets)
                    .filter(|_| table.is_some() && vmstructs::read_word(env) == table)
                    .filter(|&tid| super::is_own_thread(tid))
                    .map(|tid| (tid, env))
            } else {
                None
            };
            match located {
                Some((tid, env)) => {
                    let thread = jni.new_global_ref(t);
                    search.found.push(Found { thread, name, tid, env: env as *mut c_void, java_thread: top });
                }
                None => search.skipped += 1,
            }
            jni.delete_local_ref(t);
        }
        Ok(search)
    }

    /// Whether `found` still runs as the `JavaThread` the search found: its `eetop` is cleared when it
    /// ends, after its ThreadEnd.
    pub fn still_running(&self, found: &Found) -> bool {
        !found.thread.is_null() && self.jni.long_field(found.thread, self.eetop) as usize == found.java_thread
    }
}

impl Drop for Search {
    fn drop(&mut self) {
        for f in &self.found {
            self.jni.delete_global_ref(f.thread);
        }
        threads::registry().end_search();
    }
}
