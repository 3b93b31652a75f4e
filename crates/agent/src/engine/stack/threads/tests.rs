//! The thread table against real threads and real signals.

use super::*;
use crate::engine::stack::gettid;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// Tests that use the one table run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn own_tids(n: usize) -> (Vec<i32>, impl FnOnce()) {
    // Threads of this process that park until released: registrations need tids that are ours.
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for _ in 0..n {
        let tx = tx.clone();
        let stop = stop.clone();
        handles.push(std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
    }
    let tids = (0..n).map(|_| rx.recv().unwrap()).collect();
    (tids, move || {
        stop.store(true, Ordering::Release);
        for h in handles {
            h.join().unwrap();
        }
    })
}

fn env(n: usize) -> *mut c_void {
    n as *mut c_void
}

#[test]
fn join_lookup_leave_and_reuse() {
    let _s = SERIAL.lock().unwrap();
    let (tids, done) = own_tids(2);
    let mut reg = registry();
    let a = reg.join(tids[0], env(8), 1, 16, CPU, Origin::Started).unwrap();
    let b = reg.join(tids[1], env(16), 1, 16, CPU, Origin::Started).unwrap();
    assert_ne!(a.idx, b.idx);
    assert_eq!(lookup(tids[0]), Some(a.idx));
    // A second engine joins the same slot.
    let w = reg.join(tids[0], env(8), 1, 16, WALL, Origin::Started).unwrap();
    assert_eq!((w.idx, w.added), (a.idx, true));
    assert_eq!(reg.leave(a.idx, CPU), Left::Quiet);
    assert_eq!(lookup(tids[0]), Some(a.idx), "the wall engine still samples it");
    assert!(matches!(enter(tids[0], CPU), Entry::Idle));
    assert_eq!(reg.leave(a.idx, WALL), Left::Quiet);
    assert_eq!(lookup(tids[0]), None);
    // The tombstone does not hide entries further along the probe sequence.
    assert_eq!(lookup(tids[1]), Some(b.idx));
    assert_eq!(reg.leave(b.idx, CPU), Left::Quiet);
    for round in 0..20_000 {
        let j = reg.join(tids[round % 2], env(8), 1, 16, CPU, Origin::Started).unwrap();
        assert_eq!(lookup(tids[round % 2]), Some(j.idx));
        reg.leave(j.idx, CPU);
    }
    assert_eq!(lookup(tids[0]), None);
    drop(reg);
    done();
}

#[test]
fn a_reused_tid_gets_the_new_threads_env_and_a_found_thread_never_replaces_one() {
    let _s = SERIAL.lock().unwrap();
    let (tids, done) = own_tids(1);
    let t = tids[0];
    let mut reg = registry();
    // Found at a session's start with one JNIEnv, then the same tid starts with another: the slot
    // is the new thread's, for the new generation, and the wall engine's old membership is gone.
    let found = reg.join(t, env(8), 1, 16, CPU, Origin::Found).unwrap();
    reg.join(t, env(8), 1, 16, WALL, Origin::Found).unwrap();
    let started = reg.join(t, env(24), 1, 16, CPU, Origin::Started).unwrap();
    assert_eq!(started.idx, found.idx);
    assert!(started.added && started.generation != found.generation);
    match enter(t, CPU) {
        Entry::In(e) => assert_eq!(e.env(), env(24)),
        _ => panic!("the started thread's slot is not active"),
    }
    assert!(matches!(enter(t, WALL), Entry::Idle));
    // A search that finds the tid with a stale JNIEnv changes nothing.
    assert_eq!(reg.join(t, env(8), 1, 16, WALL, Origin::Found).unwrap_err(), Refused::Ended);
    match enter(t, CPU) {
        Entry::In(e) => assert_eq!(e.env(), env(24)),
        _ => panic!("the started thread's slot was replaced"),
    }
    reg.leave(started.idx, CPU);
    drop(reg);
    done();
}

#[test]
fn a_thread_that_ended_during_a_search_is_refused_and_other_processes_threads_too() {
    let _s = SERIAL.lock().unwrap();
    let (tids, done) = own_tids(2);
    let mut reg = registry();
    reg.begin_search();
    reg.note_ended(tids[0]);
    assert_eq!(reg.join(tids[0], env(8), 1, 16, CPU, Origin::Found).unwrap_err(), Refused::Ended);
    let ok = reg.join(tids[1], env(16), 1, 16, CPU, Origin::Found).unwrap();
    reg.end_search();
    reg.leave(ok.idx, CPU);
    let child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
    assert_eq!(reg.join(child.id() as i32, env(8), 1, 16, CPU, Origin::Started).unwrap_err(), Refused::NotOurs);
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();
    drop(reg);
    done();
}

/// The handler protocol against teardown, with real signals: handlers that stay inside a slot for a
/// long time (as one preempted for milliseconds would) while their slot is left and reused. A handler
/// checks, on its way out, that the slot still belongs to its thread and generation: a release while
/// a handler is inside would show as a slot given to another thread under it.
#[test]
fn no_slot_is_released_or_reused_while_a_handler_is_inside() {
    static INSIDE_NS: AtomicU64 = AtomicU64::new(0);
    static ENTERED: AtomicUsize = AtomicUsize::new(0);
    static BROKEN: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn handler(_sig: libc::c_int, _info: *mut libc::siginfo_t, _uc: *mut c_void) {
        let tid = gettid();
        if let Entry::In(e) = enter(tid, CPU) {
            ENTERED.fetch_add(1, Ordering::Relaxed);
            let generation = SLOTS[e.idx].generation.load(Ordering::Relaxed);
            let until = crate::engine::stack::monotonic_ns() + INSIDE_NS.load(Ordering::Relaxed);
            while crate::engine::stack::monotonic_ns() < until {
                std::hint::spin_loop();
            }
            let s = &SLOTS[e.idx];
            if s.tid.load(Ordering::SeqCst) != tid
                || s.generation.load(Ordering::SeqCst) != generation
                || s.state.load(Ordering::SeqCst) == FREE
            {
                BROKEN.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let _s = SERIAL.lock().unwrap();
    let sig = libc::SIGUSR1;
    kprof_timers::signals::install(sig, handler, &[]).unwrap();
    let (tids, done) = own_tids(3);
    // Handlers that stay 300 ms: longer than a bounded spin (a million pauses is some 50 ms here),
    // shorter than the quiet wait.
    INSIDE_NS.store(300_000_000, Ordering::Relaxed);
    let signal_and_wait_inside = |tid: i32| {
        let before = ENTERED.load(Ordering::Relaxed);
        kprof_timers::signals::queue_to_thread(tid, sig, 0).unwrap();
        let t = Instant::now();
        while ENTERED.load(Ordering::Relaxed) == before {
            assert!(t.elapsed() < Duration::from_secs(10), "the handler never ran");
            std::thread::sleep(Duration::from_micros(100));
        }
    };
    for round in 0..6 {
        let victim = tids[round % 2];
        let joined = registry().join(victim, env(8), 1, 16, CPU, Origin::Started).unwrap();
        // Leave while the handler is inside, and at once give the slot to the other thread (the first
        // free slot is the one just freed).
        signal_and_wait_inside(victim);
        let t0 = Instant::now();
        let mut reg = registry();
        assert_eq!(reg.leave(joined.idx, CPU), Left::Quiet);
        let waited = t0.elapsed();
        let next = reg.join(tids[2], env(16), 1, 16, CPU, Origin::Started).unwrap();
        reg.leave(next.idx, CPU);
        drop(reg);
        assert!(waited >= Duration::from_millis(200), "round {round}: leave returned after {waited:?}");
    }
    assert_eq!(BROKEN.load(Ordering::Relaxed), 0, "a slot changed under a handler");

    // A handler that stays longer than the quiet wait: the slot is quarantined, never reused.
    INSIDE_NS.store(QUIET_WAIT.as_nanos() as u64 + 500_000_000, Ordering::Relaxed);
    let before = quarantined();
    let joined = registry().join(tids[0], env(8), 1, 16, CPU, Origin::Started).unwrap();
    signal_and_wait_inside(tids[0]);
    let mut reg = registry();
    assert_eq!(reg.leave(joined.idx, CPU), Left::Quarantined);
    assert_eq!(quarantined(), before + 1);
    let next = reg.join(tids[1], env(16), 1, 16, CPU, Origin::Started).unwrap();
    assert_ne!(next.idx, joined.idx, "a quarantined slot was reused");
    reg.leave(next.idx, CPU);
    drop(reg);
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(BROKEN.load(Ordering::Relaxed), 0, "a slot changed under a handler");
    done();
}
