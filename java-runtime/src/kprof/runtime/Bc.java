package kprof.runtime;

import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * The helpers that bytecode-mode rewriting calls (Komorium's bytecode-count sampling, on a native agent).
 * A rewritten method does, in this order:
 *
 * <pre>
 *   prologue:             ldc ID; ldc N; invokestatic Bc.enter(II)T (or enterCheck); astore T;
 *                         aload T; getfield T.sp; iconst_m1; iadd; istore D
 *   each basic block:     aload T; ldc N; invokestatic Bc.count(TI)V
 *                     or  aload T; iload D; ldc N; invokestatic Bc.check(TII)V    (count, then sample when due)
 *   exception handlers:   aload T; iload D; invokestatic Bc.handler(TI)V         (before the block's helper)
 *   before each call:     aload T; ldc BCI; putfield T.site                       (with callsite=on)
 *   before each return:   aload T; iload D; putfield T.sp
 *                         (a returning block without calls uses countExit/checkExit at its start instead)
 *   leaf methods:         ldc N; invokestatic Bc.enterLeaf(I)T (or enterLeafCheck(II)T with ID); astore T;
 *                         Bc.count(TI)V or Bc.checkLeaf(TII)V (with ID) in blocks; nothing at returns
 *   intrinsic candidates: not counted; invokestatic Bc.mute()V before and Bc.unmute()V after each call
 * </pre>
 *
 * (The one-line helpers are field accesses, which the interpreter runs much faster than calls. The first
 * field access of a class resolves T through the class's loader; {@code enter} has already moved the
 * depth, so a loadClass that runs then nests under this invocation.)
 *
 * where ID is the method's id, N a block's bytecode count (the prologue counts the first block when
 * nothing jumps back to it), BCI the call's offset in the original method, T and D new locals (the
 * thread's state and this invocation's depth in the reified stack). The depth is kept without
 * instrumenting exceptional exits: {@code enter} takes the depth {@code sp} the caller left and leaves
 * {@code sp = D + 1} for callees; a normal return restores {@code sp = D}; an exception handler
 * re-asserts {@code sp = D + 1} for the frame that caught the exception. Leaf methods never move it.
 *
 * <p>Everything here is leaf code: no allocation or JDK calls on the fast paths, nothing that can
 * recurse into rewritten code (the JDK classes it touches, Thread and System, are never rewritten).
 * Fast paths are {@code @ForceInline}, honoured for boot-class-path classes; slow paths are
 * {@code @DontInline}. While profiling is off, every thread gets {@link #OFF}, a shared state that never
 * samples.
 */
public final class Bc {
    /** Set by the agent once the runtime is ready; cleared when profiling stops. */
    static volatile boolean enabled;
    static int gran = 10_000;
    static int rand = 100;
    static boolean threadRoots;
    /** The state of threads while profiling is off. */
    static final T OFF = new T(0, 2);

    private static final int BUCKETS = 1 << 12;
    /** Per-thread states, hashed by thread id, chained through {@link T#next}; written under LOCK. */
    private static final T[] TABLE = new T[BUCKETS];
    private static final Object LOCK = new Object();
    /** Bytecodes counted by threads that have ended, since their last sample. */
    private static long endedResidual;
    private static final int INITIAL_DEPTH = 64;

    private Bc() {}

    /** This method (and the callsite its caller recorded) at the depth the caller left. */
    @ForceInline
    static T push(int method) {
        T t = current();
        if (t == OFF) {
            return OFF;
        }
        int d = t.sp;
        if (d == t.muteArm) {
            return OFF;
        }
        if (d + 1 >= t.frames.length) {
            t.grow(d + 1);
        }
        t.frames[d] = T.frame(method, t.site);
        t.sp = d + 1;
        return t;
    }

    /** Prologue; also counts the first block's {@code n} bytecodes (0 when it is counted on its own). */
    @ForceInline
    public static T enter(int method, int n) {
        T t = push(method);
        t.counter -= n;
        return t;
    }

    /** Prologue whose first block has a granularity check. */
    @ForceInline
    public static T enterCheck(int method, int n) {
        T t = push(method);
        int c = t.counter - n;
        t.counter = c;
        if (c <= 0) {
            sample(t, t.sp - 1);
        }
        return t;
    }

    /** Prologue of a leaf method (one that calls nothing): the thread's state; the method names itself
     *  only when it samples (Komorium §5.1). Counts the first block's {@code n} bytecodes. */
    @ForceInline
    public static T enterLeaf(int n) {
        T t = current();
        if (t == OFF || t.sp == t.muteArm) {
            return OFF;
        }
        t.counter -= n;
        return t;
    }

    /** {@link #enterLeaf} whose first block has a granularity check. */
    @ForceInline
    public static T enterLeafCheck(int n, int method) {
        T t = current();
        if (t == OFF || t.sp == t.muteArm) {
            return OFF;
        }
        int c = t.counter - n;
        t.counter = c;
        if (c <= 0) {
            sampleLeaf(t, method);
        }
        return t;
    }

    /** A basic block of {@code n} bytecodes that needs no granularity check. */
    @ForceInline
    public static void count(T t, int n) {
        t.counter -= n;
    }

    /** A basic block of {@code n} bytecodes with the granularity check: samples when the count is due. */
    @ForceInline
    public static void check(T t, int d, int n) {
        int c = t.counter - n;
        t.counter = c;
        if (c <= 0) {
            sample(t, d);
        }
    }

    /** {@link #check} in leaf method {@code method}, which names itself only when it samples. */
    @ForceInline
    public static void checkLeaf(T t, int n, int method) {
        int c = t.counter - n;
        t.counter = c;
        if (c <= 0) {
            sampleLeaf(t, method);
        }
    }

    /** A block that returns and calls nothing: counted, and the depth restored for the caller. */
    @ForceInline
    public static void countExit(T t, int d, int n) {
        t.counter -= n;
        t.sp = d;
    }

    /** {@link #countExit} with the granularity check. */
    @ForceInline
    public static void checkExit(T t, int d, int n) {
        int c = t.counter - n;
        t.counter = c;
        if (c <= 0) {
            sample(t, d);
        }
        t.sp = d;
    }

    /** At an exception handler: callees of this frame take depth {@code d + 1} again, whatever depth the
     *  frames the exception unwound left behind. */
    @ForceInline
    public static void handler(T t, int d) {
        t.sp = d + 1;
        t.muteNest = 0;
        t.muteArm = -1;
    }

    /** Before a call in an intrinsic candidate (a JDK method the JIT may replace by intrinsic code):
     *  the callee, and everything it calls, counts nothing, as it would not run at all once the
     *  intrinsic is in use. So the counts do not depend on when the JIT compiled the caller. */
    @ForceInline
    public static void mute() {
        T t = current();
        if (t.muteNest++ == 0) {
            t.muteArm = t.sp;
        }
    }

    /** After that call returns. */
    @ForceInline
    public static void unmute() {
        T t = current();
        if (t.muteNest > 0 && --t.muteNest == 0) {
            t.muteArm = -1;
        }
    }

    @DontInline
    static void sampleLeaf(T t, int method) {
        int d = t.sp;
        if (t != OFF && d >= 0) {
            if (d + 1 >= t.frames.length) {
                t.grow(d + 1);
            }
            t.frames[d] = T.frame(method, t.site);
        }
        sample(t, d);
    }

    @ForceInline
    static T current() {
        long id = Thread.currentThread().getId();
        T t = TABLE[(int) id & (BUCKETS - 1)];
        if (t != null && t.tid == id) {
            return t;
        }
        return lookup(id);
    }

    /** The state of thread {@code id}, created on its first rewritten invocation; moved to its bucket's head. */
    @DontInline
    static T lookup(long id) {
        if (!enabled) {
            return OFF;
        }
        synchronized (LOCK) {
            int b = (int) id & (BUCKETS - 1);
            T prev = null;
            T t = TABLE[b];
            while (t != null && t.tid != id) {
                prev = t;
                t = t.next;
            }
            if (t == null) {
                t = new T(id, INITIAL_DEPTH);
                t.period = gran + t.nextRandom(rand);
                t.counter = t.period;
                if (threadRoots) {
                    t.root = threadRoot(Thread.currentThread().getName());
                }
                t.next = TABLE[b];
            } else if (prev != null) {
                prev.next = t.next;
                t.next = TABLE[b];
            } else {
                return t;
            }
            // T.tid is final, so a thread that reads this slot without the lock sees it set.
            TABLE[b] = t;
            return t;
        }
    }

    /** The sample: the reified stack up to depth {@code d} goes to the CCT, resuming from the deepest
     *  entry the previous sample of this thread already resolved (Komorium's path cache). */
    @DontInline
    static void sample(T t, int d) {
        if (t == OFF) {
            t.counter = Integer.MAX_VALUE;
            return;
        }
        long weight = (long) t.period - t.counter;
        int p = gran + t.nextRandom(rand);
        t.period = p;
        t.counter = p;
        long[] f = t.frames;
        if (d < 0 || d >= f.length) {
            return;
        }
        if (t.cacheFrames.length <= d) {
            t.growCache();
        }
        long[] cf = t.cacheFrames;
        int limit = t.cacheLength < d + 1 ? t.cacheLength : d + 1;
        int k = 0;
        while (k < limit && cf[k] == f[k]) {
            k++;
        }
        System.arraycopy(f, k, cf, k, d + 1 - k);
        t.cacheLength = d + 1;
        deliver(t.cacheNodes, cf, k, d, weight, t.root);
    }

    /** Called by the agent when a thread ends (on that thread): forgets its state, keeps its count. */
    static void threadEnded() {
        long id = Thread.currentThread().getId();
        synchronized (LOCK) {
            int b = (int) id & (BUCKETS - 1);
            T prev = null;
            for (T t = TABLE[b]; t != null; prev = t, t = t.next) {
                if (t.tid == id) {
                    endedResidual += (long) t.period - t.counter;
                    if (prev == null) {
                        TABLE[b] = t.next;
                    } else {
                        prev.next = t.next;
                    }
                    return;
                }
            }
        }
    }

    /** Bytecodes counted since each thread's last sample, over all threads, ended ones included. */
    static long residual() {
        synchronized (LOCK) {
            long sum = endedResidual;
            for (T head : TABLE) {
                for (T t = head; t != null; t = t.next) {
                    sum += (long) t.period - t.counter;
                }
            }
            return sum;
        }
    }

    /** Called by the agent when everything is in place. */
    static void init(int granularity, int randomRange, boolean perThreadRoots) {
        gran = granularity;
        rand = randomRange;
        threadRoots = perThreadRoots;
        enabled = true;
    }

    /** Called by the agent when profiling stops: rewritten code keeps running but counts nothing. */
    static void disable() {
        enabled = false;
        synchronized (LOCK) {
            for (int b = 0; b < BUCKETS; b++) {
                for (T t = TABLE[b]; t != null; t = t.next) {
                    endedResidual += (long) t.period - t.counter;
                }
                TABLE[b] = null;
            }
        }
    }

    /** Adds a sample of {@code weight} bytecodes: walks (or extends) the CCT from {@code nodes[from - 1]}
     *  (or the thread's root) along {@code frames[from..to]} (see {@link T#frames}), storing each node in
     *  {@code nodes}. */
    private static native void deliver(int[] nodes, long[] frames, int from, int to, long weight, int root);

    /** The CCT node of a thread's root ({@code threads=on}). */
    private static native int threadRoot(String name);
}
