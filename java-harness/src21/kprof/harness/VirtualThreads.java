package kprof.harness;

import java.util.ArrayList;
import java.util.List;

/**
 * Virtual threads that interleave on their carriers: task k descends {@code 3 + k % 8} levels of
 * {@code descend}, then works in slices with {@code Thread.yield()} between them, so other tasks run on
 * the same carrier in the middle of its stack. Per-virtual-thread reified stacks give every sample of
 * {@code slice} the path Task.run → descend × (3 + k % 8) → slice; a stack shared by the tasks of one
 * carrier would mix depths. Prints {@code vthreads: tasks=N checksum=S}.
 */
public final class VirtualThreads {
    static final class Task implements Runnable {
        final int k;
        long result;

        Task(int k) {
            this.k = k;
        }

        @Override
        public void run() {
            result = descend(3 + k % 8, k);
        }
    }

    static long descend(int level, int k) {
        if (level > 1) {
            return descend(level - 1, k) + 1;
        }
        long s = 0;
        for (int i = 0; i < 20; i++) {
            s += slice(k + i);
            Thread.yield();
        }
        return s;
    }

    static long slice(int seed) {
        long s = seed;
        for (int i = 0; i < 2000; i++) {
            s = s * 31 + (i ^ seed) % 7;
        }
        return s;
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        List<Thread> threads = new ArrayList<>();
        Task[] tasks = new Task[n];
        for (int k = 0; k < n; k++) {
            tasks[k] = new Task(k);
            threads.add(Thread.ofVirtual().unstarted(tasks[k]));
        }
        for (Thread t : threads) {
            t.start();
        }
        long checksum = 0;
        for (int k = 0; k < n; k++) {
            threads.get(k).join();
            checksum = checksum * 31 + tasks[k].result;
        }
        System.out.println("vthreads: tasks=" + n + " checksum=" + checksum);
    }
}
