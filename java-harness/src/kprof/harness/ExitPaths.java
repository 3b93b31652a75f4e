package kprof.harness;

/**
 * Ends in the way its argument says, after burning some CPU in {@code work}: {@code return} (main
 * returns), {@code exit} (System.exit(3)), {@code wait} (prints "ready" and keeps working until the
 * process is killed), {@code throw} (main throws).
 */
public final class ExitPaths {
    static volatile long sink;

    static void work(long millis) {
        long end = System.nanoTime() + millis * 1_000_000;
        long x = 1;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 10_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
            sink += x;
        }
    }

    public static void main(String[] args) {
        String how = args.length > 0 ? args[0] : "return";
        work(300);
        switch (how) {
            case "return":
                System.out.println("exitpaths: returning");
                return;
            case "exit":
                System.out.println("exitpaths: exiting");
                System.exit(3);
                return;
            case "throw":
                throw new IllegalStateException("exitpaths: thrown");
            case "wait":
                System.out.println("ready");
                System.out.flush();
                while (true) {
                    work(100);
                }
            default:
                throw new IllegalArgumentException(how);
        }
    }
}
