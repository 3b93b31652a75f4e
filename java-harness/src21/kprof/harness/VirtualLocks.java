package kprof.harness;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Virtual threads contending for one monitor: each task takes it {@code ROUNDS} times and holds it for a
 * millisecond (sleeping: from JDK 24 on a virtual thread blocked on a monitor leaves its carrier, and may
 * come back on another), measuring with {@code System.nanoTime} how long it waited for it each time. Prints
 * {@code vlocks: tasks=N waited_ns=W}.
 */
public final class VirtualLocks {
    static final int TASKS = 6;
    static final int ROUNDS = 25;
    static final Object LOCK = new Object();
    static final AtomicLong WAITED = new AtomicLong();

    static void locked() throws InterruptedException {
        long asked = System.nanoTime();
        synchronized (LOCK) {
            WAITED.addAndGet(System.nanoTime() - asked);
            Thread.sleep(1);
        }
    }

    public static void main(String[] args) throws Exception {
        List<Thread> tasks = new ArrayList<>();
        for (int k = 0; k < TASKS; k++) {
            tasks.add(Thread.ofVirtual().name("vlock-" + k).start(() -> {
                try {
                    for (int r = 0; r < ROUNDS; r++) {
                        locked();
                        Thread.yield();
                    }
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }));
        }
        for (Thread t : tasks) {
            t.join();
        }
        System.out.println("vlocks: tasks=" + TASKS + " waited_ns=" + WAITED.get());
    }
}
