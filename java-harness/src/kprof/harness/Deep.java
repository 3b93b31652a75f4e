package kprof.harness;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * Burns CPU at the bottom of a recursion of the given depth (default 300) for the given seconds of the
 * thread's CPU time (default 1), so a loaded machine stretches the run but not the work. Prints
 * {@code deep: depth=N}.
 */
public final class Deep {
    static volatile long sink;

    static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    static long down(int n, long endCpuNanos) {
        if (n == 0) {
            long x = 1;
            while (THREADS.getCurrentThreadCpuTime() < endCpuNanos) {
                for (int i = 0; i < 10_000; i++) {
                    x = x * 6364136223846793005L + 1442695040888963407L;
                }
            }
            return x;
        }
        return down(n - 1, endCpuNanos) + 1;
    }

    public static void main(String[] args) {
        int depth = args.length > 0 ? Integer.parseInt(args[0]) : 300;
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 1.0;
        sink = down(depth, THREADS.getCurrentThreadCpuTime() + (long) (seconds * 1e9));
        System.out.println("deep: depth=" + depth);
    }
}
