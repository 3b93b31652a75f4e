package kprof.harness;

import java.util.concurrent.atomic.AtomicLong;

/**
 * Starts and ends thousands of short threads, a few at a time, each doing a little work. Prints
 * {@code threadchurn: threads=N result=R}.
 */
public final class ThreadChurn {
    static long work(long seed) {
        long x = seed;
        for (int i = 0; i < 50_000; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 5000;
        int batch = 8;
        AtomicLong result = new AtomicLong();
        for (int i = 0; i < total; i += batch) {
            Thread[] ts = new Thread[Math.min(batch, total - i)];
            for (int j = 0; j < ts.length; j++) {
                long seed = i + j + 1;
                ts[j] = new Thread(() -> result.addAndGet(work(seed)), "churn-" + (i + j));
                ts[j].start();
            }
            for (Thread t : ts) {
                t.join();
            }
        }
        System.out.println("threadchurn: threads=" + total + " result=" + result.get());
    }
}
