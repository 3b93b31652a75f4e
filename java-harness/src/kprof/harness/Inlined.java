package kprof.harness;

/**
 * A hot loop whose work is all in a small method the JIT inlines into it ({@code mix}: no call, no
 * safepoint poll inside). A timer signal interrupts the compiled loop almost always inside {@code mix}'s
 * code; where AsyncGetCallTrace puts such a sample depends on the debug information the JIT kept: with
 * HotSpot's DebugNonSafepoints, at every PC, so {@code loop;mix}; without, only at safepoints, so the
 * sample goes to the next safepoint's scope, {@code loop}'s poll. Runs for the given seconds (default 2)
 * of wall time and prints {@code inlined: h=H}.
 */
public final class Inlined {
    static int mix(int h, int i) {
        h ^= i;
        h *= 0x9E3779B1;
        h ^= h >>> 15;
        h *= 0x85EBCA77;
        h ^= h >>> 13;
        h *= 0xC2B2AE3D;
        return h ^ (h >>> 16);
    }

    static int loop(int n, int h) {
        for (int i = 0; i < n; i++) {
            h = mix(h, i);
        }
        return h;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 2.0;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        int h = 0;
        while (System.nanoTime() < end) {
            h = loop(1_000_000, h);
        }
        System.out.println("inlined: h=" + Integer.toUnsignedString(h));
    }
}
