package kprof.harness;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Starts and ends thousands of short threads, eight at a time, each allocating about a megabyte (byte
 * arrays of 16 bytes to 8 KiB and small instances) in {@code work}. Prints
 * {@code allocchurn: threads=N result=R allocated=B}, where R depends only on N and B is the bytes the
 * threads allocated in {@code work}, from their allocated-bytes counters. Argument: threads (default 2000).
 */
public final class AllocChurn {
    static final class Small {
        final long value;

        Small(long value) {
            this.value = value;
        }
    }

    static final com.sun.management.ThreadMXBean MX =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    static final AtomicLong allocated = new AtomicLong();

    static long work(long seed) {
        long before = MX.getCurrentThreadAllocatedBytes();
        Object[] sink = new Object[64];
        long x = seed, sum = 0;
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            Object o;
            if ((i & 3) == 0) {
                o = new Small(x);
            } else {
                byte[] a = new byte[16 << (int) ((x >>> 40) % 10)];
                a[a.length - 1] = (byte) x;
                o = a;
            }
            sink[i & 63] = o;
            sum += o instanceof byte[] ? ((byte[]) o).length : ((Small) o).value & 1;
        }
        allocated.addAndGet(MX.getCurrentThreadAllocatedBytes() - before);
        return sum;
    }

    public static void main(String[] args) throws Exception {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 2000;
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
        System.out.println("allocchurn: threads=" + total + " result=" + result.get() + " allocated=" + allocated.get());
    }
}
