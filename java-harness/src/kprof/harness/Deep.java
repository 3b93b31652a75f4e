package kprof.harness;

/**
 * Burns CPU at the bottom of a recursion of the given depth (default 300) for the given seconds
 * (default 1). Prints {@code deep: depth=N}.
 */
public final class Deep {
    static volatile long sink;

    static long down(int n, long endNanos) {
        if (n == 0) {
            long x = 1;
            while (System.nanoTime() < endNanos) {
                for (int i = 0; i < 10_000; i++) {
                    x = x * 6364136223846793005L + 1442695040888963407L;
                }
            }
            return x;
        }
        return down(n - 1, endNanos) + 1;
    }

    public static void main(String[] args) {
        int depth = args.length > 0 ? Integer.parseInt(args[0]) : 300;
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 1.0;
        sink = down(depth, System.nanoTime() + (long) (seconds * 1e9));
        System.out.println("deep: depth=" + depth);
    }
}
