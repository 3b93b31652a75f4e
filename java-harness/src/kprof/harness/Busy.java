package kprof.harness;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * One thread burns CPU for a given number of CPU-seconds (default 3) in a simple loop, then prints the
 * CPU time it used. Used to measure the sampling rate per CPU-second.
 */
public final class Busy {
    static volatile long sink;

    static long spin(long iterations) {
        long x = 0x9E3779B97F4A7C15L;
        for (long i = 0; i < iterations; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3.0;
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long start = mx.getCurrentThreadCpuTime();
        long limit = (long) (seconds * 1e9);
        while (mx.getCurrentThreadCpuTime() - start < limit) {
            sink += spin(200_000);
        }
        long used = mx.getCurrentThreadCpuTime() - start;
        System.out.printf("busy: cpu_ns=%d%n", used);
    }
}
