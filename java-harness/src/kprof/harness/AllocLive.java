package kprof.harness;

import java.lang.management.ManagementFactory;

/**
 * Allocates in three methods and keeps what two of them allocate: {@code keepMost} keeps 60 % of the kept
 * bytes, {@code keepLess} 40 %, and {@code dropAll} allocates four times as much as both together and
 * keeps nothing (its objects go through a ring of 16 that is overwritten). Objects are byte arrays of
 * 16 bytes to 16 KiB and small instances, kept in arrays made before the methods run, so that what the
 * methods allocate is exactly what they keep. Each method's bytes are measured with the thread's
 * allocated-bytes counter; prints {@code alloclive: most_bytes=.. less_bytes=.. drop_bytes=.. check=..}
 * and, with a second argument, stays alive that many milliseconds longer. Argument: megabytes to keep in
 * all (default 200).
 */
public final class AllocLive {
    static final class Small {
        final long value;

        Small(long value) {
            this.value = value;
        }
    }

    static final com.sun.management.ThreadMXBean MX =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();

    static Object[] most, less;
    static int mostAt, lessAt;
    static final Object[] ring = new Object[16];
    static int ringAt;
    static long check;
    static long seed = 0x2545F4914F6CDD1DL;

    static int random(int bound) {
        seed ^= seed << 13;
        seed ^= seed >>> 7;
        seed ^= seed << 17;
        return (int) ((seed >>> 33) % bound);
    }

    /** An object of about {@code 16 << random} bytes: a small instance or a byte array. */
    static Object make(int i) {
        if ((i & 3) == 0) {
            return new Small(i);
        }
        byte[] a = new byte[16 << random(11)];
        a[0] = (byte) i;
        return a;
    }

    static void keepMost(int n) {
        for (int i = 0; i < n; i++) {
            most[mostAt++] = make(i);
        }
    }

    static void keepLess(int n) {
        for (int i = 0; i < n; i++) {
            less[lessAt++] = make(i);
        }
    }

    static void dropAll(int n) {
        for (int i = 0; i < n; i++) {
            ring[ringAt++ & 15] = make(i);
        }
    }

    public static void main(String[] args) throws InterruptedException {
        long keep = (args.length > 0 ? Long.parseLong(args[0]) : 200) << 20;
        // Objects average about 1.5 KiB (three in four arrays of 16 B..16 KiB, one in four 16-byte instances).
        int perRound = 600;
        int rounds = (int) (keep / (perRound * 1500L)) + 1;
        most = new Object[rounds * perRound * 6 / 10];
        less = new Object[rounds * perRound * 4 / 10];
        long mostBytes = 0, lessBytes = 0, dropBytes = 0;
        for (int r = 0; r < rounds; r++) {
            long t0 = MX.getCurrentThreadAllocatedBytes();
            keepMost(perRound * 6 / 10);
            long t1 = MX.getCurrentThreadAllocatedBytes();
            keepLess(perRound * 4 / 10);
            long t2 = MX.getCurrentThreadAllocatedBytes();
            dropAll(perRound * 4);
            long t3 = MX.getCurrentThreadAllocatedBytes();
            mostBytes += t1 - t0;
            lessBytes += t2 - t1;
            dropBytes += t3 - t2;
        }
        for (Object[] kept : new Object[][] {most, less}) {
            for (Object o : kept) {
                check += o instanceof byte[] ? ((byte[]) o).length : 1;
            }
        }
        System.out.println("alloclive: most_bytes=" + mostBytes + " less_bytes=" + lessBytes + " drop_bytes=" + dropBytes
                + " check=" + check);
        if (args.length > 1) {
            Thread.sleep(Long.parseLong(args[1]));
        }
    }
}
