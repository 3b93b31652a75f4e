package kprof.harness;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A program that both contends for locks and waits on them, with a result that does not depend on timing:
 * <ul>
 * <li>producers and consumers handing numbers through a bounded buffer guarded by a monitor
 *     ({@code Object.wait}/{@code notifyAll}), and through one guarded by a {@code ReentrantLock} with two
 *     conditions: the consumers' sums;
 * <li>threads waiting in {@code lockInterruptibly}, {@code Condition.await} and {@code Object.wait} that are
 *     interrupted, a {@code tryLock} and a {@code parkNanos} that time out, a read-write lock, a semaphore
 *     and a latch: what each saw;
 * <li>short parks: a thread that unparks itself before it parks, so that each park returns at once.
 * </ul>
 * Prints {@code lockandwait: monitor_sum=... lock_sum=... interrupted=... timed_out=... rw=... permits=...
 * latch=... short_parks=...}. Argument: the numbers each producer hands over (default 20000).
 */
public final class LockAndWait {
    static final int PRODUCERS = 3;
    static final int CONSUMERS = 2;
    static final int CAPACITY = 8;
    static final long END = -1;

    /** A bounded buffer guarded by its monitor. */
    static final class MonitorBuffer {
        private final long[] items = new long[CAPACITY];
        private int head, count;

        synchronized void put(long v) throws InterruptedException {
            while (count == CAPACITY) {
                wait();
            }
            items[(head + count) % CAPACITY] = v;
            count++;
            notifyAll();
        }

        synchronized long take() throws InterruptedException {
            while (count == 0) {
                wait();
            }
            long v = items[head];
            head = (head + 1) % CAPACITY;
            count--;
            notifyAll();
            return v;
        }
    }

    /** A bounded buffer guarded by a ReentrantLock with two conditions. */
    static final class LockBuffer {
        private final long[] items = new long[CAPACITY];
        private int head, count;
        private final ReentrantLock lock = new ReentrantLock();
        private final Condition notFull = lock.newCondition();
        private final Condition notEmpty = lock.newCondition();

        void put(long v) throws InterruptedException {
            lock.lock();
            try {
                while (count == CAPACITY) {
                    notFull.await();
                }
                items[(head + count) % CAPACITY] = v;
                count++;
                notEmpty.signal();
            } finally {
                lock.unlock();
            }
        }

        long take() throws InterruptedException {
            lock.lock();
            try {
                while (count == 0) {
                    notEmpty.await();
                }
                long v = items[head];
                head = (head + 1) % CAPACITY;
                count--;
                notFull.signal();
                return v;
            } finally {
                lock.unlock();
            }
        }
    }

    interface Buffer {
        void put(long v) throws InterruptedException;

        long take() throws InterruptedException;
    }

    /** Sum of what the consumers took, each number 1..PRODUCERS*n once. */
    static long handOver(Buffer buffer, int n) throws InterruptedException {
        long[] sums = new long[CONSUMERS];
        Thread[] threads = new Thread[PRODUCERS + CONSUMERS];
        for (int p = 0; p < PRODUCERS; p++) {
            int first = p * n + 1;
            threads[p] = new Thread(() -> {
                try {
                    for (int i = 0; i < n; i++) {
                        buffer.put(first + i);
                    }
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }, "producer-" + p);
        }
        for (int c = 0; c < CONSUMERS; c++) {
            int me = c;
            threads[PRODUCERS + c] = new Thread(() -> {
                try {
                    for (long v; (v = buffer.take()) != END; ) {
                        sums[me] += v;
                    }
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }, "consumer-" + c);
        }
        for (Thread t : threads) {
            t.start();
        }
        for (int p = 0; p < PRODUCERS; p++) {
            threads[p].join();
        }
        for (int c = 0; c < CONSUMERS; c++) {
            buffer.put(END);
        }
        long sum = 0;
        for (int c = 0; c < CONSUMERS; c++) {
            threads[PRODUCERS + c].join();
            sum += sums[c];
        }
        return sum;
    }

    /** Waits until `t` is blocked in a wait (or has ended). */
    static void awaitWaiting(Thread t) throws InterruptedException {
        while (t.isAlive() && t.getState() != Thread.State.WAITING && t.getState() != Thread.State.TIMED_WAITING) {
            Thread.sleep(1);
        }
    }

    /** Three waits interrupted: lockInterruptibly, Condition.await, Object.wait. Returns how many saw it. */
    static int interrupts() throws InterruptedException {
        int[] seen = new int[1];
        ReentrantLock lock = new ReentrantLock();
        Condition never = lock.newCondition();
        Object monitor = new Object();
        Runnable[] waits = {
            () -> {
                try {
                    lock.lockInterruptibly();
                    lock.unlock();
                } catch (InterruptedException e) {
                    synchronized (seen) {
                        seen[0]++;
                    }
                }
            },
            () -> {
                lock.lock();
                try {
                    never.await();
                } catch (InterruptedException e) {
                    synchronized (seen) {
                        seen[0]++;
                    }
                } finally {
                    lock.unlock();
                }
            },
            () -> {
                synchronized (monitor) {
                    try {
                        monitor.wait();
                    } catch (InterruptedException e) {
                        synchronized (seen) {
                            seen[0]++;
                        }
                    }
                }
            },
        };
        for (int i = 0; i < waits.length; i++) {
            Thread t = new Thread(waits[i], "interrupted-" + i);
            if (i == 0) {
                lock.lock();
            }
            t.start();
            awaitWaiting(t);
            if (i == 0) {
                while (!lock.hasQueuedThread(t)) {
                    Thread.sleep(1);
                }
            }
            t.interrupt();
            if (i == 0) {
                lock.unlock();
            }
            t.join();
        }
        return seen[0];
    }

    /** A tryLock and a parkNanos that time out; true when both did. */
    static boolean timeouts() throws InterruptedException {
        ReentrantLock lock = new ReentrantLock();
        boolean[] got = new boolean[1];
        lock.lock();
        Thread t = new Thread(() -> {
            try {
                got[0] = lock.tryLock(30, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                got[0] = true;
            }
        }, "try-lock");
        t.start();
        t.join();
        lock.unlock();
        long start = System.nanoTime();
        LockSupport.parkNanos(lock, 20_000_000L);
        // A park may return early (spuriously): at least one of a few must run to its end.
        while (System.nanoTime() - start < 20_000_000L) {
            LockSupport.parkNanos(lock, 20_000_000L - (System.nanoTime() - start));
        }
        return !got[0];
    }

    /** Readers and writers of a ReentrantReadWriteLock: the writers' increments all land. */
    static long readWrite() throws InterruptedException {
        ReentrantReadWriteLock rw = new ReentrantReadWriteLock();
        long[] value = new long[1];
        long[] reads = new long[2];
        Thread[] threads = new Thread[4];
        for (int i = 0; i < 4; i++) {
            int me = i;
            threads[i] = new Thread(() -> {
                for (int k = 0; k < 3000; k++) {
                    if (me < 2) {
                        rw.writeLock().lock();
                        try {
                            value[0]++;
                        } finally {
                            rw.writeLock().unlock();
                        }
                    } else {
                        rw.readLock().lock();
                        try {
                            reads[me - 2] += value[0] >= 0 ? 1 : 0;
                        } finally {
                            rw.readLock().unlock();
                        }
                    }
                }
            }, "rw-" + i);
            threads[i].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        return value[0] + reads[0] + reads[1];
    }

    /** Workers sharing two permits, then a latch they all count down. */
    static String permitsAndLatch() throws InterruptedException {
        Semaphore permits = new Semaphore(2);
        CountDownLatch done = new CountDownLatch(6);
        int[] inside = new int[2];
        for (int i = 0; i < 6; i++) {
            new Thread(() -> {
                try {
                    for (int k = 0; k < 50; k++) {
                        permits.acquire();
                        try {
                            synchronized (inside) {
                                inside[0]++;
                                inside[1] = Math.max(inside[1], inside[0]);
                            }
                            Thread.sleep(0, 200_000);
                            synchronized (inside) {
                                inside[0]--;
                            }
                        } finally {
                            permits.release();
                        }
                    }
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                } finally {
                    done.countDown();
                }
            }, "permit-" + i).start();
        }
        done.await();
        return inside[1] <= 2 && permits.availablePermits() == 2 ? "ok" : "broken";
    }

    /** Parks that return at once: the thread's permit is set before each. */
    static int shortParks(int n) {
        Object blocker = new Object();
        int parks = 0;
        for (int i = 0; i < n; i++) {
            LockSupport.unpark(Thread.currentThread());
            LockSupport.park(blocker);
            parks++;
        }
        return parks;
    }

    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 20_000;
        MonitorBuffer mb = new MonitorBuffer();
        long monitorSum = handOver(new Buffer() {
            public void put(long v) throws InterruptedException {
                mb.put(v);
            }

            public long take() throws InterruptedException {
                return mb.take();
            }
        }, n);
        LockBuffer lb = new LockBuffer();
        long lockSum = handOver(new Buffer() {
            public void put(long v) throws InterruptedException {
                lb.put(v);
            }

            public long take() throws InterruptedException {
                return lb.take();
            }
        }, n);
        int interrupted = interrupts();
        boolean timedOut = timeouts();
        long rw = readWrite();
        String latch = permitsAndLatch();
        int shortParks = shortParks(2000);
        System.out.println("lockandwait: monitor_sum=" + monitorSum + " lock_sum=" + lockSum + " interrupted="
                + interrupted + " timed_out=" + timedOut + " rw=" + rw + " permits=" + latch + " short_parks="
                + shortParks);
    }
}
