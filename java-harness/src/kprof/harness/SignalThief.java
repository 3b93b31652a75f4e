package kprof.harness;

import java.util.concurrent.atomic.AtomicLong;
import sun.misc.Signal;

/**
 * A program that handles signals kprof also uses, through the JDK's own signal API. With
 * {@code steal SIGS SECONDS} it works for a second, then installs a handler for each of SIGS (comma
 * separated JDK names: URG, VTALRM, PROF), which replaces whatever handled them, prints
 * {@code signalthief: installed}, and works on until SECONDS have passed. With {@code count SECONDS} it
 * installs a handler for URG at once, prints {@code signalthief: ready}, and keeps working, printing the
 * signals its handler has seen every 100 ms: {@code signalthief: seen=N}. At the end it prints
 * {@code signalthief: seen=N done}.
 */
public final class SignalThief {
    static final AtomicLong SEEN = new AtomicLong();
    static volatile long sink;

    static long work(long seed) {
        long x = seed | 1;
        for (int i = 0; i < 100_000; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    static void install(String names) {
        for (String name : names.split(",")) {
            Signal.handle(new Signal(name), s -> SEEN.incrementAndGet());
        }
    }

    public static void main(String[] args) {
        String mode = args[0];
        String signals = mode.equals("steal") ? args[1] : "URG";
        double seconds = Double.parseDouble(args[mode.equals("steal") ? 2 : 1]);
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        boolean installed = false;
        if (mode.equals("count")) {
            install(signals);
            installed = true;
            System.out.println("signalthief: ready");
        }
        long nextReport = start;
        while (System.nanoTime() < end) {
            sink += work(sink);
            long now = System.nanoTime();
            if (!installed && now - start > 1_000_000_000L) {
                install(signals);
                installed = true;
                System.out.println("signalthief: installed");
            }
            if (mode.equals("count") && now >= nextReport) {
                System.out.println("signalthief: seen=" + SEEN.get());
                nextReport = now + 100_000_000L;
            }
        }
        System.out.println("signalthief: seen=" + SEEN.get() + " done");
    }
}
