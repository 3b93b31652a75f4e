package kprof.harness;

/**
 * Many threads doing known work: thread {@code mt-i} (i from 0) runs {@code units(i) = 1 + i % 4} units
 * of the same leaf loop, so its bytecode count is proportional to its units. Threads start together and
 * run concurrently. Prints {@code manythreads: threads=N units=U checksum=S}.
 */
public final class ManyThreads {
    static final class Worker extends Thread {
        final int units;
        long result;

        Worker(int i) {
            super("mt-" + i);
            this.units = units(i);
        }

        @Override
        public void run() {
            long s = 0;
            for (int u = 0; u < units; u++) {
                s += unit(u);
            }
            result = s;
        }
    }

    static int units(int i) {
        return 1 + i % 4;
    }

    static long unit(int seed) {
        long s = seed;
        for (int i = 0; i < 50_000; i++) {
            s = s * 31 + (i ^ seed) % 17;
        }
        return s;
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 64;
        Worker[] workers = new Worker[n];
        int units = 0;
        for (int i = 0; i < n; i++) {
            workers[i] = new Worker(i);
            units += workers[i].units;
        }
        for (Worker w : workers) {
            w.start();
        }
        long checksum = 0;
        for (Worker w : workers) {
            w.join();
            checksum = checksum * 31 + w.result;
        }
        System.out.println("manythreads: threads=" + n + " units=" + units + " checksum=" + checksum);
    }
}
