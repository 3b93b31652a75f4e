package kprof.harness;

/**
 * Exceptions thrown through rewritten frames and caught higher up, each followed by known work whose
 * calling context is fixed: {@code work} is only ever called by {@code caughtAtTop} and by
 * {@code caughtInside} at recursion level 0, so any sample of {@code work} under {@code dive}, or under
 * more {@code nest} frames than the program made, means the reified stack was left wrong by an
 * exception. Exceptions come from the program ({@code dive}), from the JDK ({@code Integer.parseInt}),
 * from implicit checks (an array index) and from a leaf method. Prints
 * {@code throwing: rounds=N caught=C checksum=S}.
 */
public final class Throwing {
    static int caught;

    static long work(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += (long) i * i % 13;
        }
        return s;
    }

    static void dive(int n) {
        if (n == 0) {
            throw new IllegalStateException("bottom");
        }
        dive(n - 1);
    }

    /** A leaf (calls nothing) that throws from an implicit check. */
    static int leafThrow(int[] a, int i) {
        return a[i];
    }

    static int parseDeep(int n, String s) {
        if (n == 0) {
            return Integer.parseInt(s);
        }
        return parseDeep(n - 1, s) + 1;
    }

    /** Caught in main's direct callee: work then runs at depth 2. */
    static long caughtAtTop(int r) {
        try {
            dive(20 + r % 50);
        } catch (IllegalStateException e) {
            caught++;
        }
        try {
            parseDeep(10 + r % 7, "x" + r);
        } catch (NumberFormatException e) {
            caught++;
        }
        try {
            leafThrow(new int[2], 2 + r % 3);
        } catch (ArrayIndexOutOfBoundsException e) {
            caught++;
        }
        return work(3000);
    }

    /** Recurses {@code level} times, then catches at the bottom and works there. */
    static long caughtInside(int level, int r) {
        if (level > 0) {
            return caughtInside(level - 1, r) + 1;
        }
        try {
            dive(30 + r % 40);
        } catch (IllegalStateException e) {
            caught++;
        }
        return work(2000);
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 400;
        long checksum = 0;
        for (int r = 0; r < rounds; r++) {
            checksum = checksum * 31 + caughtAtTop(r);
            checksum = checksum * 31 + caughtInside(3, r);
        }
        System.out.println("throwing: rounds=" + rounds + " caught=" + caught + " checksum=" + checksum);
    }
}
