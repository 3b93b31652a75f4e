package kprof.harness;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * Two busy threads and a sleeping one: "worker-2x" burns twice the CPU time of "worker-1x"; "sleeper"
 * sleeps throughout. Each thread measures its own CPU time (the sleeper: all of it). Prints
 * {@code threadsplit: w2=N w1=N sleeper=N} (CPU nanoseconds).
 */
public final class ThreadSplit {
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();
    static volatile long sink;

    static long burn(long budget) {
        long start = MX.getCurrentThreadCpuTime();
        long x = start, now;
        while ((now = MX.getCurrentThreadCpuTime()) - start < budget) {
            for (int i = 0; i < 2000; i++) {
                x ^= x << 13;
                x ^= x >>> 7;
                x ^= x << 17;
            }
        }
        sink += x;
        return now - start;
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 1.5;
        long unit = (long) (seconds * 1e9);
        long[] used = new long[3];
        Thread w2 = new Thread(() -> used[0] = burn(2 * unit), "worker-2x");
        Thread w1 = new Thread(() -> used[1] = burn(unit), "worker-1x");
        Thread sleeper = new Thread(() -> {
            try {
                Thread.sleep((long) (seconds * 2000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            // All its CPU time, its start included: what a CPU-time profiler may sample.
            used[2] = MX.getCurrentThreadCpuTime();
        }, "sleeper");
        w2.start();
        w1.start();
        sleeper.start();
        w2.join();
        w1.join();
        sleeper.join();
        System.out.printf("threadsplit: w2=%d w1=%d sleeper=%d%n", used[0], used[1], used[2]);
    }
}
