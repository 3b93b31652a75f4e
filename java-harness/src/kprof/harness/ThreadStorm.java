package kprof.harness;

import java.util.concurrent.atomic.AtomicLong;

/**
 * Threads that start and end all the time, for the given number of seconds (default 20): a few workers
 * each start short threads one after another (each works for a moment and ends), so that at any instant
 * some threads are starting and some are ending. Prints {@code threadstorm: started} at once, and at the
 * end {@code threadstorm: threads=N result=R}. Arguments: [seconds] [workers].
 */
public final class ThreadStorm {
    static long work(long seed) {
        long x = seed | 1;
        for (int i = 0; i < 20_000; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 20;
        int workers = args.length > 1 ? Integer.parseInt(args[1]) : 8;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        AtomicLong started = new AtomicLong();
        AtomicLong result = new AtomicLong();
        Thread[] ws = new Thread[workers];
        for (int w = 0; w < workers; w++) {
            ws[w] = new Thread(() -> {
                while (System.nanoTime() < end) {
                    long n = started.incrementAndGet();
                    Thread t = new Thread(() -> result.addAndGet(work(n)), "storm-" + n);
                    t.start();
                    try {
                        t.join();
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }, "storm-worker-" + w);
            ws[w].start();
        }
        System.out.println("threadstorm: started");
        for (Thread w : ws) {
            w.join();
        }
        System.out.println("threadstorm: threads=" + started.get() + " result=" + result.get());
    }
}
