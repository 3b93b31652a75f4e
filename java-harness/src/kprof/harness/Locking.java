package kprof.harness;

/**
 * Hot methods whose exception handlers javac makes cover themselves: a {@code synchronized} block and a
 * {@code try/finally}, both calling a method (so not leaves). Rewritten, they must still be compiled by C1 (tests check PrintCompilation for
 * C1's bailouts "exception handler covers itself" and "invalid parsing"). Prints
 * {@code locking: rounds=N sum=S}.
 */
public final class Locking {
    private static final Object LOCK = new Object();
    private static long shared;
    private static int depth;

    static int step(int i) {
        return i & 1023;
    }

    static long locked(int i) {
        synchronized (LOCK) {
            shared += step(i);
            return shared;
        }
    }

    static int guarded(int i) {
        depth++;
        try {
            return step(i) % 7 == 0 ? i / 7 : i;
        } finally {
            depth--;
        }
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 2_000_000;
        long sum = 0;
        for (int i = 0; i < rounds; i++) {
            sum += locked(i) + guarded(i);
        }
        System.out.println("locking: rounds=" + rounds + " sum=" + sum + " depth=" + depth);
    }
}
