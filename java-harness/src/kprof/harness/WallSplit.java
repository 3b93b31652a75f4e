package kprof.harness;

import java.util.concurrent.locks.LockSupport;

/**
 * Wall-clock ground truth. Thread "phases" repeats four phases of known, different lengths for the given
 * number of seconds: {@code sleepPhase} (Thread.sleep), {@code computePhase} (a busy loop),
 * {@code parkPhase} (LockSupport.parkNanos) and {@code waitPhase} (Object.wait), and measures the wall
 * time it spends in each (System.nanoTime around each call). Beside it, idle threads that stay in one
 * frame the whole run: "idle-sleep" in {@code idleSleep} (Thread.sleep), "idle-park" in {@code idlePark}
 * (LockSupport.park), "idle-wait" in {@code idleWait} (Object.wait), and "blocked" in
 * {@code blockedEnter}, blocked on a monitor that "holder" keeps (sleeping in {@code holdMonitor}).
 * Prints {@code wallsplit: started} once every thread runs, and at the end
 * {@code wallsplit: sleep_ms=S compute_ms=C park_ms=P wait_ms=W cycles=N}. Arguments: [seconds].
 */
public final class WallSplit {
    static final Object WAIT_LOCK = new Object();
    static final Object IDLE_LOCK = new Object();
    static final Object MONITOR = new Object();
    static volatile boolean stop;
    static volatile long sink;

    static void sleepPhase(long ms) throws InterruptedException {
        long end = System.nanoTime() + ms * 1_000_000;
        long left;
        while ((left = end - System.nanoTime()) > 0) {
            Thread.sleep(left / 1_000_000, (int) (left % 1_000_000));
        }
    }

    static void computePhase(long ms) {
        long end = System.nanoTime() + ms * 1_000_000;
        long x = end;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 500; i++) {
                x ^= x << 13;
                x ^= x >>> 7;
                x ^= x << 17;
            }
        }
        sink += x;
    }

    static void parkPhase(long ms) {
        long end = System.nanoTime() + ms * 1_000_000;
        long left;
        while ((left = end - System.nanoTime()) > 0) {
            LockSupport.parkNanos(left);
        }
    }

    static void waitPhase(long ms) throws InterruptedException {
        long end = System.nanoTime() + ms * 1_000_000;
        synchronized (WAIT_LOCK) {
            long left;
            while ((left = end - System.nanoTime()) > 0) {
                WAIT_LOCK.wait(Math.max(1, left / 1_000_000), (int) (left % 1_000_000));
            }
        }
    }

    static void idleSleep() {
        while (!stop) {
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                // woken to stop
            }
        }
    }

    static void idlePark() {
        while (!stop) {
            LockSupport.park();
        }
    }

    static void idleWait() throws InterruptedException {
        synchronized (IDLE_LOCK) {
            while (!stop) {
                IDLE_LOCK.wait();
            }
        }
    }

    static void holdMonitor(Thread[] started) throws InterruptedException {
        synchronized (MONITOR) {
            started[0] = Thread.currentThread();
            while (!stop) {
                Thread.sleep(20);
            }
        }
    }

    static void blockedEnter() {
        synchronized (MONITOR) {
            sink++;
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static Thread thread(String name, Body body) {
        Thread t = new Thread(() -> {
            try {
                body.run();
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, name);
        t.start();
        return t;
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 4;
        long[] ns = new long[4];
        int[] cycles = new int[1];
        Thread[] holding = new Thread[1];
        Thread holder = thread("holder", () -> holdMonitor(holding));
        while (holding[0] == null) {
            Thread.sleep(1);
        }
        Thread[] idle = {
            thread("idle-sleep", WallSplit::idleSleep),
            thread("idle-park", WallSplit::idlePark),
            thread("idle-wait", WallSplit::idleWait),
            thread("blocked", WallSplit::blockedEnter),
        };
        System.out.println("wallsplit: started");
        System.out.flush();
        Thread phases = thread("phases", () -> {
            long until = System.nanoTime() + (long) (seconds * 1e9);
            while (System.nanoTime() < until) {
                long t0 = System.nanoTime();
                sleepPhase(37);
                long t1 = System.nanoTime();
                computePhase(53);
                long t2 = System.nanoTime();
                parkPhase(29);
                long t3 = System.nanoTime();
                waitPhase(17);
                long t4 = System.nanoTime();
                ns[0] += t1 - t0;
                ns[1] += t2 - t1;
                ns[2] += t3 - t2;
                ns[3] += t4 - t3;
                cycles[0]++;
            }
        });
        phases.join();
        stop = true;
        idle[0].interrupt();
        LockSupport.unpark(idle[1]);
        synchronized (IDLE_LOCK) {
            IDLE_LOCK.notifyAll();
        }
        holder.join();
        for (Thread t : idle) {
            t.join();
        }
        System.out.printf("wallsplit: sleep_ms=%.3f compute_ms=%.3f park_ms=%.3f wait_ms=%.3f cycles=%d%n",
            ns[0] / 1e6, ns[1] / 1e6, ns[2] / 1e6, ns[3] / 1e6, cycles[0]);
    }
}
