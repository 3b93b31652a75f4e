package kprof.runtime;

import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * The helpers that bytecode-mode rewriting calls (Komorium's bytecode-count sampling, on a native agent).
 * A rewritten method does, in this order:
 *
 * <pre>
 *   prologue:             ldc ID; invokestatic Bc.enter(I)T; astore T; aload T; invokestatic Bc.depth(T)I; istore D
 *   each basic block:     aload T; ldc N; invokestatic Bc.count(TI)V
 *                     or  aload T; iload D; ldc N; invokestatic Bc.check(TII)V    (count, then sample when due)
 *   exception handlers:   aload T; iload D; invokestatic Bc.handler(TI)V         (before the block's helper)
 *   before each call:     aload T; ldc BCI; invokestatic Bc.site(TI)V            (with callsite=on)
 *   before each return:   aload T; iload D; invokestatic Bc.exit(TI)V
 *   leaf methods:         Bc.enterLeaf()T and Bc.leafDepth(T)I in the prologue, Bc.checkLeaf(TIII)V (with ID) for checks,
 *                         nothing at returns: they never move the depth
 *   intrinsic candidates: not counted; invokestatic Bc.mute()V before and Bc.unmute()V after each call
 * </pre>
 *
 * where ID is the method's id, N the block's bytecode count, BCI the call's offset in the original
 * method, T and D two new locals (the thread's state and this invocation's depth in the reified stack).
 * The depth is kept without instrumenting exceptional exits: {@code enter} takes the depth {@code sp}
 * the caller left and leaves {@code sp = D + 1} for callees; a normal return restores {@code sp = D};
 * an exception handler re-asserts {@code sp = D + 1} for the frame that caught the exception.
 *
 * <p>Everything here is leaf code: no allocation or JDK calls on the fast paths, nothing that can
 * recurse into rewritten code (the JDK classes it touches, Thread and System, are never rewritten).
 * Fast paths are {@code @ForceInline}, honoured for boot-class-path classes; slow paths are
 * {@code @DontInline}. Until the agent calls {@link #init}, every thread gets {@link #OFF}, a shared
 * state that never samples.
 */
public final class Bc {
    /** Set by the agent once the runtime is ready; cleared when profiling stops. */
    static boolean enabled;
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

    /** Prologue: the thread's state, with this method (and the callsite its caller recorded) at the
     *  depth the caller left. */
    @ForceInline
    public static T enter(int method) {
        if (!enabled) {
            return OFF;
        }
        T t = current();
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

    /** Prologue, after {@link #enter}: the invocation's depth. A static call rather than a field read,
     *  so that rewritten classes never resolve class T: resolving it in a class loader other than the
     *  boot loader would run that loader's (rewritten) loadClass in the middle of the prologue. */
    @ForceInline
    public static int depth(T t) {
        return t.sp - 1;
    }

    /** Prologue of a leaf method, after {@link #enterLeaf}: its depth (leaf methods leave sp alone). */
    @ForceInline
    public static int leafDepth(T t) {
        return t.sp;
    }

    /** Prologue of a leaf method (one that calls nothing): the thread's state; the method names itself in
     *  {@link #checkLeaf} only when a sample is due (Komorium §5.1). */
    @ForceInline
    public static T enterLeaf() {
        if (!enabled) {
            return OFF;
        }
        T t = current();
        if (t.sp == t.muteArm) {
            return OFF;
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
    public static void checkLeaf(T t, int d, int n, int method) {
        int c = t.counter - n;
        t.counter = c;
        if (c <= 0) {
            sampleLeaf(t, d, method);
        }
    }

    /** Before a call at offset {@code site} of the caller: the callee records it in {@link #enter}. */
    @ForceInline
    public static void site(T t, int site) {
        t.site = site;
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
        if (enabled) {
            T t = current();
            if (t.muteNest++ == 0) {
                t.muteArm = t.sp;
            }
        }
    }

    /** After that call returns. */
    @ForceInline
    public static void unmute() {
        if (enabled) {
            T t = current();
            if (t.muteNest > 0 && --t.muteNest == 0) {
                t.muteArm = -1;
            }
        }
    }

    /** Before a return: the caller's next callee takes this depth again, even if the caller is not
     *  rewritten (a skipped JDK method, a frame older than the rewrite). */
    @ForceInline
    public static void exit(T t, int d) {
        t.sp = d;
    }

    @DontInline
    static void sampleLeaf(T t, int d, int method) {
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
    }

    /** Adds a sample of {@code weight} bytecodes: walks (or extends) the CCT from {@code nodes[from - 1]}
     *  (or the thread's root) along {@code frames[from..to]} (see {@link T#frames}), storing each node in
     *  {@code nodes}. */
    private static native void deliver(int[] nodes, long[] frames, int from, int to, long weight, int root);

    /** The CCT node of a thread's root ({@code threads=on}). */
    private static native int threadRoot(String name);
}
