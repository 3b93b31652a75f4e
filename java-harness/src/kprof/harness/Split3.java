package kprof.harness;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * Spends CPU in three methods in the ratio 50:30:20, by construction: each round gives methodA 5 ms,
 * methodB 3 ms and methodC 2 ms of this thread's CPU time, measured with thread CPU time. Prints the
 * shares it measured itself: {@code split3: a=50.00 b=30.00 c=20.00 cpu_ns=N}.
 */
public final class Split3 {
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();
    static volatile long sink;
    static long usedA, usedB, usedC;

    static long cpu() {
        return MX.getCurrentThreadCpuTime();
    }

    static long mix(long x, int n) {
        for (int i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    static void methodA(long budget) {
        long start = cpu(), end = start + budget, now;
        long x = start;
        while ((now = cpu()) < end) {
            x = mix(x, 2000);
        }
        sink += x;
        usedA += now - start;
    }

    static void methodB(long budget) {
        long start = cpu(), end = start + budget, now;
        long x = start;
        while ((now = cpu()) < end) {
            x = mix(x, 2000);
        }
        sink += x;
        usedB += now - start;
    }

    static void methodC(long budget) {
        long start = cpu(), end = start + budget, now;
        long x = start;
        while ((now = cpu()) < end) {
            x = mix(x, 2000);
        }
        sink += x;
        usedC += now - start;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 4.0;
        long rounds = (long) (seconds * 100);
        for (long r = 0; r < rounds; r++) {
            methodA(5_000_000);
            methodB(3_000_000);
            methodC(2_000_000);
        }
        double total = usedA + usedB + usedC;
        System.out.printf("split3: a=%.3f b=%.3f c=%.3f cpu_ns=%d%n",
                100 * usedA / total, 100 * usedB / total, 100 * usedC / total, (long) total);
    }
}
