package kprof.runtime;

import java.util.concurrent.locks.AbstractQueuedLongSynchronizer;
import java.util.concurrent.locks.AbstractQueuedSynchronizer;
import jdk.internal.misc.Unsafe;
import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * Park bracketing for mode=lock. While a lock session runs, {@code java.util.concurrent.locks.LockSupport} is
 * rewritten so that its calls {@code U.park(absolute, time)} become {@code Lk.park(U, absolute, time)}: every
 * {@code java.util.concurrent} lock, semaphore, latch and condition waits there. This makes the same call and
 * measures it with {@code System.nanoTime}; a wait of at least {@link #threshold} nanoseconds goes to the agent
 * ({@link #waited}, a native method the agent registers) with the thread's park blocker (the object it waits
 * for, which LockSupport sets before and clears after parking), shorter ones are only counted.
 *
 * <p>A park on a condition ({@code Condition.await} of the JDK's synchronizers) is waiting, not contention,
 * as {@code Object.wait} is for a monitor: unless the session asks for them ({@code conditions=on}) such waits
 * are only counted, without the native call and the stack walk (idle pool workers wait there).
 *
 * <p>The park itself is untouched: same receiver, same arguments, nothing caught, so interrupts, timeouts,
 * spurious wakeups and exceptions reach LockSupport as before. Leaf code: no allocation and no JDK method that a
 * rewriting mode would count, on the path of a short park.
 */
public final class Lk {
    private static final Unsafe U = Unsafe.getUnsafe();
    /** Offset of {@code Thread.parkBlocker}. */
    private static final long BLOCKER = U.objectFieldOffset(Thread.class, "parkBlocker");

    /** Waits shorter than this are counted, not recorded; negative: no session (the park is not timed). */
    private static volatile long threshold = -1;
    /** Address of the agent's counter of waits below the threshold (native memory, added atomically). */
    private static long skipped;
    /** Address of the agent's counter of condition waits at the threshold that were not recorded. */
    private static long conditionWaits;
    /** Condition waits are recorded too. */
    private static boolean conditions;

    private Lk() {}

    /** What LockSupport's rewritten code calls in place of {@code u.park(absolute, time)}. */
    @ForceInline
    public static void park(Unsafe u, boolean absolute, long time) {
        if (threshold < 0) {
            u.park(absolute, time);
            return;
        }
        long start = System.nanoTime();
        u.park(absolute, time);
        long waited = System.nanoTime() - start;
        long limit = threshold;
        if (waited >= limit && limit >= 0) {
            if (conditions || !onCondition()) {
                record(waited);
            } else {
                U.getAndAddLong(null, conditionWaits, 1L);
            }
        } else if (limit >= 0) {
            U.getAndAddLong(null, skipped, 1L);
        }
    }

    /** The thread parks on a condition: LockSupport has set the condition as its blocker. */
    private static boolean onCondition() {
        Object blocker = U.getReferenceOpaque(Thread.currentThread(), BLOCKER);
        return blocker instanceof AbstractQueuedSynchronizer.ConditionObject
            || blocker instanceof AbstractQueuedLongSynchronizer.ConditionObject;
    }

    @DontInline
    private static void record(long waited) {
        waited(waited, U.getReferenceOpaque(Thread.currentThread(), BLOCKER));
    }

    /** The agent records the wait: the thread's stack below this frame, and the blocker's class. */
    private static native void waited(long nanos, Object blocker);

    /**
     * Called by the agent when a session starts: the threshold, where to count short waits and unrecorded
     * condition waits, and whether condition waits are recorded.
     */
    static void enable(long thresholdNanos, long skippedCounter, long conditionCounter, boolean recordConditions) {
        skipped = skippedCounter;
        conditionWaits = conditionCounter;
        conditions = recordConditions;
        threshold = thresholdNanos;
    }

    /** Called by the agent when the session ends. */
    static void disable() {
        threshold = -1;
    }
}
