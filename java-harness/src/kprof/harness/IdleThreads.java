package kprof.harness;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.locks.LockSupport;

/**
 * Many idle threads beside one working thread: N threads (default 1000), half sleeping in
 * {@code idleSleep}, half parked in {@code idlePark}, while the main thread repeats a fixed unit of work
 * for the given number of seconds and measures its own progress. Prints
 * {@code idlethreads: threads=N seconds=S units=U units_per_s=R units_per_cpu_s=C}. Arguments: [threads]
 * [seconds].
 */
public final class IdleThreads {
    static volatile boolean stop;
    static volatile long sink;

    static void idleSleep() {
        while (!stop) {
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                // woken to stop
            }
        }
    }

    static void idlePark() {
        while (!stop) {
            LockSupport.park();
        }
    }

    static long unit(long seed) {
        long x = seed | 1;
        for (int i = 0; i < 200_000; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 1000;
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 3;
        Thread[] threads = new Thread[n];
        for (int i = 0; i < n; i++) {
            threads[i] = new Thread(i % 2 == 0 ? IdleThreads::idleSleep : IdleThreads::idlePark, "idle-" + i);
            threads[i].setDaemon(true);
            threads[i].start();
        }
        // Warm up: the unit compiled before the measured period.
        long warm = System.nanoTime() + 300_000_000L;
        while (System.nanoTime() < warm) {
            sink += unit(sink);
        }
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long cpu0 = mx.getCurrentThreadCpuTime();
        long t0 = System.nanoTime();
        long end = t0 + (long) (seconds * 1e9);
        long units = 0;
        while (System.nanoTime() < end) {
            sink += unit(units);
            units++;
        }
        long wall = System.nanoTime() - t0;
        long cpu = mx.getCurrentThreadCpuTime() - cpu0;
        stop = true;
        for (int i = 0; i < n; i++) {
            if (i % 2 == 0) {
                threads[i].interrupt();
            } else {
                LockSupport.unpark(threads[i]);
            }
        }
        System.out.printf("idlethreads: threads=%d seconds=%.3f units=%d units_per_s=%.1f units_per_cpu_s=%.1f%n",
            n, wall / 1e9, units, units * 1e9 / wall, units * 1e9 / Math.max(1, cpu));
    }
}
