package kprof.harness;

import java.lang.management.ManagementFactory;

/**
 * Allocates in three methods in the ratio 50:30:20 of bytes, by construction, each a different kind of
 * object: {@code smallObjects} small instances of {@link Small}, {@code byteArrays} byte arrays of 512 bytes
 * to 32.5 KiB, {@code largeArrays} long arrays of 256 KiB, 1 MiB and 4 MiB (around the default sampling
 * interval of 512 KiB, where the weight of a sample depends most on its size). Every object escapes into
 * a sink the program keeps, so the JIT cannot scalar-replace it. Each method's bytes are measured with
 * the thread's allocated-bytes counter and its objects counted; prints
 * {@code allocsplit: a_bytes=.. b_bytes=.. c_bytes=.. a_objects=.. b_objects=.. c_objects=.. check=..}.
 * Argument: megabytes to allocate in all (default 3000).
 */
public final class AllocSplit {
    static final class Small {
        final long value;
        final Small next;

        Small(long value, Small next) {
            this.value = value;
            this.next = next;
        }
    }

    static final com.sun.management.ThreadMXBean MX =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();

    static final Object[] smallSink = new Object[1024];
    static final Object[] arraySink = new Object[1024];
    static final Object[] largeSink = new Object[8];
    static int smallAt, arrayAt, largeAt;
    static long check;
    static long bytesA, bytesB, bytesC, objectsA, objectsB, objectsC;
    /** What each method still owes of its share, in estimated bytes. */
    static long owedA, owedB, owedC;
    static long seed = 0x9E3779B97F4A7C15L;

    static int random(int bound) {
        seed ^= seed << 13;
        seed ^= seed >>> 7;
        seed ^= seed << 17;
        return (int) ((seed >>> 33) % bound);
    }

    static void smallObjects(long budget) {
        owedA += budget;
        long n = 0;
        Small prev = null;
        while (owedA > 0) {
            Small s = new Small(n, (n & 7) == 0 ? null : prev);
            smallSink[smallAt++ & 1023] = s;
            prev = s;
            owedA -= 24;
            n++;
        }
        check += n + (prev == null ? 0 : prev.value);
        objectsA += n;
    }

    static void byteArrays(long budget) {
        owedB += budget;
        long n = 0;
        while (owedB > 0) {
            // 512 bytes to 32.5 KiB, evenly.
            int length = 512 + random(32 * 1024);
            byte[] a = new byte[length];
            a[length - 1] = (byte) n;
            arraySink[arrayAt++ & 1023] = a;
            owedB -= length + 16;
            n++;
        }
        check += n;
        objectsB += n;
    }

    static void largeArrays(long budget) {
        owedC += budget;
        long n = 0;
        while (owedC > 0) {
            int length = (32 * 1024) << (2 * random(3)); // 256 KiB, 1 MiB or 4 MiB of longs
            long[] a = new long[length];
            a[length - 1] = n;
            largeSink[largeAt++ & 7] = a;
            owedC -= 8L * length + 16;
            n++;
        }
        check += n;
        objectsC += n;
    }

    public static void main(String[] args) {
        long total = (args.length > 0 ? Long.parseLong(args[0]) : 3000) << 20;
        long round = 10 << 20;
        for (long done = 0; done < total; done += round) {
            long t0 = MX.getCurrentThreadAllocatedBytes();
            smallObjects(round * 5 / 10);
            long t1 = MX.getCurrentThreadAllocatedBytes();
            byteArrays(round * 3 / 10);
            long t2 = MX.getCurrentThreadAllocatedBytes();
            largeArrays(round * 2 / 10);
            long t3 = MX.getCurrentThreadAllocatedBytes();
            bytesA += t1 - t0;
            bytesB += t2 - t1;
            bytesC += t3 - t2;
        }
        for (Object[] sink : new Object[][] {smallSink, arraySink, largeSink}) {
            for (Object o : sink) {
                check += o == null ? 0 : 1;
            }
        }
        System.out.println("allocsplit: a_bytes=" + bytesA + " b_bytes=" + bytesB + " c_bytes=" + bytesC
                + " a_objects=" + objectsA + " b_objects=" + objectsB + " c_objects=" + objectsC
                + " check=" + check);
    }
}
