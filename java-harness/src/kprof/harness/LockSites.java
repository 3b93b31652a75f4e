package kprof.harness;

import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Three lock sites whose threads measure their own waits: {@link #monitorA} synchronizes on a plain
 * {@code Object}, {@link #monitorB} on a {@link Ledger}, {@link #reentrant} takes a {@code ReentrantLock}.
 * Each site has three threads that take its lock in turn and hold it for a while (sleeping, so that the
 * waits do not depend on how busy the machine is: {@code HOLD_US} per site). Every thread reads
 * {@code System.nanoTime} before it asks for the lock and once it has it, and adds the difference to its
 * site's total: the right answer for a lock profiler's time per site. Prints
 * {@code locksites: a_ns=... b_ns=... c_ns=... a_n=... b_n=... c_n=...} (waits longer than 10 us, the
 * agent's default threshold, counted in {@code _n}).
 *
 * <p>Arguments: rounds per thread (default 60), and optionally a duration in seconds: then the threads go on
 * until it has passed (for attaching), printing a line per second.
 */
public final class LockSites {
    /** Hold times of sites A, B and C, microseconds. */
    static final int[] HOLD_US = {1500, 800, 500};
    static final int THREADS_PER_SITE = 3;

    static final Object MONITOR_A = new Object();
    static final Ledger MONITOR_B = new Ledger();
    static final ReentrantLock LOCK_C = new ReentrantLock();

    /** Waits (ns) and waits of at least 10 us, per site (atomic: counting must not wait on a lock). */
    static final AtomicLongArray WAITED = new AtomicLongArray(3);
    static final AtomicLongArray LONG_WAITS = new AtomicLongArray(3);
    static volatile long deadline;

    /** A lock object of a class of its own (its class names the lock in a profile). */
    static final class Ledger {
        long entries;
    }

    static void hold(int site) {
        try {
            Thread.sleep(HOLD_US[site] / 1000, (HOLD_US[site] % 1000) * 1000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void count(int site, long waited) {
        WAITED.addAndGet(site, waited);
        if (waited >= 10_000) {
            LONG_WAITS.incrementAndGet(site);
        }
    }

    static long monitorA() {
        long asked = System.nanoTime();
        synchronized (MONITOR_A) {
            long got = System.nanoTime();
            hold(0);
            return got - asked;
        }
    }

    static long monitorB() {
        long asked = System.nanoTime();
        synchronized (MONITOR_B) {
            long got = System.nanoTime();
            MONITOR_B.entries++;
            hold(1);
            return got - asked;
        }
    }

    static long reentrant() {
        long asked = System.nanoTime();
        LOCK_C.lock();
        try {
            long got = System.nanoTime();
            hold(2);
            return got - asked;
        } finally {
            LOCK_C.unlock();
        }
    }

    static void run(int site, int rounds) {
        for (int i = 0; i < rounds || System.nanoTime() < deadline; i++) {
            long waited = switch (site) {
                case 0 -> monitorA();
                case 1 -> monitorB();
                default -> reentrant();
            };
            count(site, waited);
            // Outside the lock for a moment, so that the others get their turns.
            Thread.yield();
        }
    }

    public static void main(String[] args) throws Exception {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 60;
        long seconds = args.length > 1 ? Long.parseLong(args[1]) : 0;
        long start = System.nanoTime();
        deadline = seconds > 0 ? start + seconds * 1_000_000_000L : 0;
        Thread[] threads = new Thread[3 * THREADS_PER_SITE];
        for (int t = 0; t < threads.length; t++) {
            int site = t % 3;
            threads[t] = new Thread(() -> run(site, rounds), "site-" + "abc".charAt(site) + "-" + t / 3);
            threads[t].start();
        }
        if (seconds > 0) {
            System.out.println("locksites: running");
            while (System.nanoTime() < deadline) {
                Thread.sleep(1000);
                System.out.println("locksites: t_ms=" + (System.nanoTime() - start) / 1_000_000
                        + " a_ns=" + WAITED.get(0) + " b_ns=" + WAITED.get(1) + " c_ns=" + WAITED.get(2));
            }
        }
        for (Thread t : threads) {
            t.join();
        }
        System.out.println("locksites: a_ns=" + WAITED.get(0) + " b_ns=" + WAITED.get(1) + " c_ns=" + WAITED.get(2)
                + " a_n=" + LONG_WAITS.get(0) + " b_n=" + LONG_WAITS.get(1) + " c_n=" + LONG_WAITS.get(2)
                + " entries=" + MONITOR_B.entries);
    }
}
