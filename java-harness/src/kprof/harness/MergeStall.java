package kprof.harness;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;

/**
 * Large exact-mode trees on live threads, and new threads starting meanwhile: {@code T} holders (first
 * argument, default 16) each build a tree of 2^(D+1) - 1 contexts ({@code fan(D)} from two callsites per level,
 * D the second argument, default 16) and stay alive. Then {@code main} prints {@code mergestall: ready} and,
 * until the file named by the third argument exists, starts short threads one at a time, each making one
 * counted call, and measures how long each takes from {@code start} to {@code join}. A dump of the profile
 * merges the holders' trees meanwhile: a thread that starts then waits for as long as the merge keeps the
 * threads' table locked. The stop file may hold a window, two {@code System.nanoTime} values (CLOCK_MONOTONIC
 * on Linux, which other processes can read): the short threads that ended within it are counted. Prints
 * {@code mergestall: threads=N max_start_join_ms=M in_window=K}.
 */
public final class MergeStall {
    static volatile long sink;

    static int fan(int n) {
        if (n == 0) {
            return 1;
        }
        int left = fan(n - 1);
        int right = fan(n - 1);
        return left + right;
    }

    static int once(int x) {
        return x * 31 + 7;
    }

    public static void main(String[] args) throws Exception {
        int holders = args.length > 0 ? Integer.parseInt(args[0]) : 16;
        int depth = args.length > 1 ? Integer.parseInt(args[1]) : 16;
        Path stop = Path.of(args.length > 2 ? args[2] : "mergestall.stop");
        CountDownLatch built = new CountDownLatch(holders);
        CountDownLatch release = new CountDownLatch(1);
        Thread[] hs = new Thread[holders];
        for (int i = 0; i < holders; i++) {
            hs[i] = new Thread(() -> {
                sink += fan(depth);
                built.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "holder-" + i);
            hs[i].start();
        }
        built.await();
        System.out.println("mergestall: ready");
        long max = 0;
        int started = 0;
        long[] ended = new long[1 << 16];
        while (!Files.exists(stop)) {
            int k = started++;
            Thread t = new Thread(() -> sink += once(k), "short-" + k);
            long t0 = System.nanoTime();
            t.start();
            t.join();
            long t1 = System.nanoTime();
            max = Math.max(max, t1 - t0);
            if (k == ended.length) {
                ended = java.util.Arrays.copyOf(ended, 2 * k);
            }
            ended[k] = t1;
            Thread.sleep(1);
        }
        release.countDown();
        for (Thread h : hs) {
            h.join();
        }
        String[] window = Files.readString(stop).trim().split("\\s+");
        int inWindow = 0;
        if (window.length == 2) {
            long from = Long.parseLong(window[0]);
            long to = Long.parseLong(window[1]);
            for (int i = 0; i < started; i++) {
                inWindow += ended[i] >= from && ended[i] <= to ? 1 : 0;
            }
        }
        System.out.println("mergestall: threads=" + started + " max_start_join_ms=" + max / 1_000_000 + " in_window="
                + inWindow);
    }
}
