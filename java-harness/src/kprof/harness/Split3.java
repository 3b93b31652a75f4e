package kprof.harness;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * Spends CPU in three methods in the ratio 50:30:20, by construction: each round gives methodA 5.185 ms,
 * methodB 3.111 ms and methodC 2.074 ms of this thread's CPU time, measured with thread CPU time. Prints
 * the shares it measured itself: {@code split3: a=50.00 b=30.00 c=20.00 cpu_ns=N}.
 *
 * <p>A round is 10.37 ms, not a whole number of milliseconds: with 10 ms rounds, a 1 ms sampler can lock
 * to the program's phase (each round's samples falling at the same offsets), and a few hundred rounds
 * then err by whole samples per round wherever an offset sits near a method's boundary.
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
        long rounds = (long) (seconds * 1e9 / 10_370_000);
        for (long r = 0; r < rounds; r++) {
            methodA(5_185_000);
            methodB(3_111_000);
            methodC(2_074_000);
        }
        double total = usedA + usedB + usedC;
        System.out.printf("split3: a=%.3f b=%.3f c=%.3f cpu_ns=%d%n",
                100 * usedA / total, 100 * usedB / total, 100 * usedC / total, (long) total);
    }
}
