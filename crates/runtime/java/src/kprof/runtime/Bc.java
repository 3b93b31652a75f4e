package kprof.runtime;

import jdk.internal.misc.Unsafe;
import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;
import jdk.internal.vm.annotation.Stable;

/**
 * The helpers that bytecode-mode rewriting calls (Komorium's bytecode-count sampling, on a native agent), with
 * the thread's state in fields of java.lang.Thread (see {@link T}); {@link Bt} has the same helpers for a JVM
 * the agent attached to. A rewritten method does, with D its depth and C its count (new int locals):
 *
 * <pre>
 *   prologue:             ldc ID; invokestatic Bc.enter(I)I; istore D        (not in leaf methods)
 *                         ldc -N; istore C             (N: the first block's bytecodes when it runs once, else 0)
 *   each basic block:     iinc C, -N
 *   granularity checks:   iload D; iload C; ldc ID; invokestatic Bc.check(III)I; istore C
 *                         (blocks that call or head a loop, and where a path would pass MaxPath unchecked;
 *                         with checks=loops not at calls; not where every path from the entry brings fewer
 *                         than MaxPath bytecodes, as such a check never commits; leaf methods:
 *                         Bc.leafCheck(II)I)
 *   before each call:     iload D; ldc SITE; invokestatic Bc.site(II)V       (callsite=on)
 *   returns and throws:   iload D; iload C; ldc ID; invokestatic Bc.exit(III)V   (leaf: Bc.leafExit(II)V)
 *   exception handlers:   iload D; invokestatic Bc.handler(I)V
 *   one-block leaves:     ldc -N; ldc ID; invokestatic Bc.leafExit(II)V before each return (no locals)
 *   intrinsic candidates: not counted; invokestatic Bc.mute()V before and Bc.unmute()V after each call
 *   java.lang.invoke:     left alone; Bc.mute()V before and Bc.unmute()V after each call out of it
 *   ClassLoader.loadClass(String): Bc.mute()V first, Bc.unmute()V before each return and in a handler
 *                         that rethrows what escapes
 * </pre>
 *
 * <p>Counting: a block's bytecodes go to the local C; a check commits C to the thread's counter (the
 * bytecodes left before the next sample) once it holds MaxPath bytecodes, an exit always. A commit that
 * takes the counter to zero or below records a sample: the first D entries of the reified stack, the method
 * and the period that ended in that commit (Komorium: a sample stands for the period
 * before it). Checks sit where the Komorium paper (section 5.2) puts them, and every exit commits what the method
 * counted (a check before a call only once it holds MaxPath), so a sample is always in the context its bytecodes were counted in.
 *
 * <p>The reified stack is kept by the callee: {@code enter} writes the method's id at the depth the caller
 * left and leaves depth D + 1 for callees; a return restores D; an exception handler re-asserts D + 1, so
 * exceptions cannot leave it wrong. With callsite=on each call first writes its site over the entry. Leaf
 * methods (no calls) never move it.
 *
 * <p>What the JIT makes of this decides the overhead (docs/BENCHMARKS.md has the measurements): the fast
 * paths touch only Thread fields and native memory (no Java array: no aliasing of the application's arrays;
 * no reference: no GC barrier), hold no object in a local across the method, and no call; the sample itself
 * is a call on a branch taken once per period. Everything here is leaf code: no allocation, no JDK calls
 * that could be rewritten.
 */
public final class Bc {
    static final Unsafe U = Unsafe.getUnsafe();

    /** A check commits once the local count is this far below zero: -MaxPath (a huge bound without one,
     *  so that a local count never overflows). Stable (never zero): the JIT folds it into each check, so a
     *  check on a path whose count it knows, such as a short method's first block, folds away. */
    @Stable
    static int limit = -50;
    static int gran = 10_000;
    static int rand = 100;
    static boolean threadRoots;
    /** Entries of a thread's reified stack (the depth option). */
    static int depth = 2048;
    static int ringBytes = 1 << 20;
    /** The agent added kprof's fields to java.lang.Thread: rewritten code uses Bc; otherwise Bt. */
    static boolean fields;
    /** stack=walk: rewritten code keeps no stack; a sample walks the thread's own ({@link #walk}). */
    static boolean walk;
    /** Profiling is on (new threads get a state). */
    static volatile boolean enabled;

    private static final Object LOCK = new Object();
    /** States of the live threads (for {@link #residual} and {@link #disable}); written under LOCK. */
    private static T[] live = new T[64];
    private static int liveCount;
    /** Bytecodes counted by threads that have ended, since their last sample. */
    private static long endedResidual;

    private Bc() {}

    // ---- what rewritten code calls -----------------------------------------------------------------

    /** Prologue of a method that calls: pushes its id; returns its depth. */
    @ForceInline
    public static int enter(int id) {
        Thread ct = Thread.currentThread();
        int d = ct.kprof$sp;
        ct.kprof$sp = d + 1;
        if (d >= 0 && d < ct.kprof$cap) {
            U.putInt(ct.kprof$st + ((long) d << 2), id);
        }
        return d;
    }

    /** Before a call (callsite=on): the entry at depth {@code d} names the call's site. */
    @ForceInline
    public static void site(int d, int site) {
        Thread ct = Thread.currentThread();
        if (d >= 0 && d < ct.kprof$cap) {
            U.putInt(ct.kprof$st + ((long) d << 2), site);
        }
    }

    /** A granularity check in a method at depth {@code d}: once the invocation has counted MaxPath bytecodes
     *  since it last committed, commits them (and samples when the period is over). Returns the new C. */
    @ForceInline
    public static int check(int d, int c, int id) {
        if (c > limit) {
            return c;
        }
        Thread ct = Thread.currentThread();
        int x = ct.kprof$c + c;
        if (x <= 0) {
            x = sample(ct, x, d, id);
        }
        ct.kprof$c = x;
        return 0;
    }

    /** A return or throw of a method at depth {@code d}: pops it, commits and checks. */
    @ForceInline
    public static void exit(int d, int c, int id) {
        Thread ct = Thread.currentThread();
        ct.kprof$sp = d;
        int x = ct.kprof$c + c;
        if (x <= 0) {
            x = sample(ct, x, d, id);
        }
        ct.kprof$c = x;
    }

    /** A granularity check in a leaf method (which is not on the stack: its depth is {@code sp}). */
    @ForceInline
    public static int leafCheck(int c, int id) {
        if (c > limit) {
            return c;
        }
        Thread ct = Thread.currentThread();
        int x = ct.kprof$c + c;
        if (x <= 0) {
            x = sample(ct, x, ct.kprof$sp, id);
        }
        ct.kprof$c = x;
        return 0;
    }

    /** A return or throw of a leaf method. */
    @ForceInline
    public static void leafExit(int c, int id) {
        Thread ct = Thread.currentThread();
        int x = ct.kprof$c + c;
        if (x <= 0) {
            x = sample(ct, x, ct.kprof$sp, id);
        }
        ct.kprof$c = x;
    }

    /** At an exception handler of a method at depth {@code d}: callees take depth {@code d + 1} again,
     *  whatever depth the frames the exception unwound left behind, and the mute brackets opened below
     *  this method (which the exception left) end; a bracket this method runs inside stays open. */
    @ForceInline
    public static void handler(int d) {
        Thread ct = Thread.currentThread();
        ct.kprof$sp = d + 1;
        T t = ct.kprof$t;
        if (t != null && t.mute != 0 && t.closeAbove(d)) {
            ct.kprof$c = t.saved;
        }
    }

    /** Before a muted call: the callee, and everything it calls, counts nothing. In an intrinsic candidate
     *  (a JDK method the JIT may replace by intrinsic code), as the callee would not run at all once the
     *  intrinsic is in use, so counts do not depend on when the JIT compiled the caller; out of
     *  java.lang.invoke and in the JVM's class loading, whose paths depend on state other threads, the
     *  collector and the JVM's memory layout decide (see the policy in the rewriter). The counter is
     *  parked out of reach and restored after the call: what the callees count is dropped. */
    @ForceInline
    public static void mute() {
        Thread ct = Thread.currentThread();
        T t = ct.kprof$t;
        if (t != null && t.open(ct.kprof$sp)) {
            t.saved = ct.kprof$c;
            ct.kprof$c = Integer.MAX_VALUE;
        }
    }

    /** After that call returns. */
    @ForceInline
    public static void unmute() {
        Thread ct = Thread.currentThread();
        T t = ct.kprof$t;
        if (t != null && t.mute > 0 && --t.mute == 0) {
            ct.kprof$c = t.saved;
        }
    }

    /** The counter reached {@code x <= 0}: records the context (the first {@code n} stack entries and
     *  {@code leaf}) and returns the next period. A call (see the class comment): it runs once per period. */
    @DontInline
    static int sample(Thread ct, int x, int n, int leaf) {
        T t = ct.kprof$t;
        if (t == null || !t.on) {
            // Not profiled (no state, or profiling stopped): count on without recording.
            return Integer.MAX_VALUE;
        }
        return next(t, x, n, leaf, ct.kprof$st, ct.kprof$cap);
    }

    // ---- the sample, for both flavours ------------------------------------------------------------

    /**
     * Records a sample and starts the next period; returns the counter for it. The commit that ended the
     * period ({@code x <= 0} its count past the end) stands for that period, and what it brought past the
     * end opens the next one: sample points sit every gran + r bytecodes of the thread's stream, wherever
     * its commits cut it. Restarting the period at the commit's end instead put every sample point at
     * some commit boundary plus a period, and the longer the commits ({@code maxpath}) the more a loop
     * whose commits repeat with the period favoured some of them (docs/bytecode.md). A commit longer than
     * a whole period (maxpath at or above gran) weighs on its one sample and the next period starts afresh.
     */
    static int next(T t, int x, int n, int leaf, long stack, int cap) {
        if (walk) {
            n = walk(stack, cap);
        }
        long weight = t.period;
        int p = gran + t.nextRandom(rand);
        int left = p + x;
        if (left <= 0) {
            weight -= x;
            left = p;
        }
        t.period = p;
        record(t, stack, cap, n, leaf, weight);
        return left;
    }

    /**
     * Appends one record to the thread's ring: {@code k, n, depth, leaf, weight (2 ints)} and entries
     * {@code k..n-1} of the stack, where entries below {@code k} are those of the previous record (the agent
     * resumes its walk of the tree there: Komorium's path cache), {@code n} the entries recorded and
     * {@code depth} the true depth (more than {@code n} when the stack was deeper than its capacity). The words
     * go in order, then the published offset: the agent reads a record only once it is published. A full ring
     * (the drain fell behind: a loaded machine) is drained by its thread into the tree before the record goes
     * in, so no sample is lost and the profile stays the same on a busy machine; only a ring the agent no
     * longer knows drops the sample and counts it.
     */
    private static void record(T t, long st, int cap, int depth, int leaf, long weight) {
        int n = depth < 0 ? 0 : depth < cap ? depth : cap;
        long cache = st + ((long) t.alloc << 2);
        int lim = t.cached < n ? t.cached : n;
        int k = 0;
        while (k < lim && U.getInt(st + ((long) k << 2)) == U.getInt(cache + ((long) k << 2))) {
            k++;
        }
        long hdr = t.hdr;
        int mask = t.mask;
        int w = t.w;
        int bytes = (6 + n - k) << 2;
        if (w - U.getInt(hdr + 64) + bytes > mask + 1) {
            drainOwn(hdr);
        }
        if (w - U.getInt(hdr + 64) + bytes > mask + 1) {
            U.putInt(hdr + 4, ++t.dropped);
            // The bytecodes it stood for still count in the estimated total.
            U.putLong(hdr + 8, U.getLong(hdr + 8) + weight);
            return;
        }
        long ring = t.ring;
        U.putInt(ring + (w & mask), k);
        U.putInt(ring + ((w + 4) & mask), n);
        U.putInt(ring + ((w + 8) & mask), depth);
        U.putInt(ring + ((w + 12) & mask), leaf);
        U.putInt(ring + ((w + 16) & mask), (int) weight);
        U.putInt(ring + ((w + 20) & mask), (int) (weight >>> 32));
        w += 24;
        for (int i = k; i < n; i++) {
            int e = U.getInt(st + ((long) i << 2));
            U.putInt(cache + ((long) i << 2), e);
            U.putInt(ring + (w & mask), e);
            w += 4;
        }
        t.cached = n;
        t.w = w;
        // Raw stores stay in program order (one memory slice for the JIT, TSO for the processor), so the
        // agent that sees this offset sees the record.
        U.putInt(hdr, w);
    }

    // ---- what the agent calls (JNI) ----------------------------------------------------------------

    /** A state with its block for {@code th}. Null if the agent could not allocate one. */
    static T create(Thread th) {
        int root = threadRoots ? threadRoot(th.getName()) : 0;
        long hdr = block(depth, ringBytes, root);
        if (hdr == 0) {
            return null;
        }
        T t = new T(th, th.getId());
        t.hdr = hdr;
        t.alloc = depth;
        t.stack = hdr + 128;
        t.ring = hdr + 128 + 8L * depth;
        t.mask = ringBytes - 1;
        t.period = gran + t.nextRandom(rand);
        t.c = t.period;
        t.cap = depth;
        t.on = true;
        synchronized (LOCK) {
            if (liveCount == live.length) {
                T[] a = new T[live.length * 2];
                System.arraycopy(live, 0, a, 0, liveCount);
                live = a;
            }
            live[liveCount++] = t;
        }
        return t;
    }

    /** Gives {@code th} its state in its Thread fields (the fields flavour). */
    private static void install(Thread th) {
        if (th.kprof$t != null) {
            return;
        }
        T t = create(th);
        if (t != null) {
            th.kprof$st = t.stack;
            th.kprof$c = t.c;
            th.kprof$cap = t.cap;
            // Last: the sample path reads the state through it.
            th.kprof$t = t;
        }
    }

    /** Called by the agent when profiling starts. */
    static void init(int granularity, int randomRange, boolean perThreadRoots, int stackDepth, int ring,
            boolean threadFields, int maxPath, boolean walkStack) {
        limit = maxPath > 0 ? -maxPath : -(1 << 30);
        walk = walkStack;
        gran = granularity;
        rand = randomRange;
        threadRoots = perThreadRoots;
        depth = stackDepth;
        ringBytes = ring;
        fields = threadFields;
        synchronized (LOCK) {
            endedResidual = 0;
            // A session after a stopped one: the live threads count again, from a fresh period.
            for (int i = 0; i < liveCount; i++) {
                T t = live[i];
                t.cached = 0;
                t.mute = 0;
                t.period = gran + t.nextRandom(rand);
                t.c = t.period;
                t.cap = Math.min(depth, t.alloc);
                t.on = true;
                if (fields) {
                    t.owner.kprof$c = t.c;
                    t.owner.kprof$cap = t.cap;
                }
            }
        }
        enabled = true;
    }

    /** ThreadStart (or VirtualThreadStart), on the new thread. Without Thread fields, states are made on first
     *  use instead ({@link Bt}). */
    static void started() {
        if (enabled && fields) {
            install(Thread.currentThread());
        }
    }

    /** At start, for a thread that was running before (none of its rewritten code has run yet). */
    static void adopt(Thread th) {
        if (enabled && fields) {
            install(th);
        }
    }

    /** Called by the agent when a thread ends, on that thread: keeps its count and releases its block. */
    static void finish() {
        Thread th = Thread.currentThread();
        T t = null;
        synchronized (LOCK) {
            for (int i = 0; i < liveCount; i++) {
                if (live[i].owner == th) {
                    t = live[i];
                    live[i] = live[--liveCount];
                    live[liveCount] = null;
                    break;
                }
            }
            if (t == null) {
                return;
            }
            if (t.on) {
                endedResidual += (long) t.period - counter(t);
            }
        }
        // Outside LOCK: Bt's lookup holds its own lock when it calls create, which takes LOCK, so taking
        // Bt's lock under LOCK here deadlocked a thread ending against one starting to count.
        Bt.forget(t);
        // This thread is the block's only writer: after this it writes nothing there, and the agent drains it.
        t.on = false;
        t.cap = 0;
        if (fields) {
            th.kprof$cap = 0;
            th.kprof$t = null;
        }
        release(t.hdr);
    }

    /** The bytecodes {@code t}'s thread has left before its next sample (the saved counter while muted). */
    private static int counter(T t) {
        return t.mute != 0 ? t.saved : fields ? t.owner.kprof$c : t.c;
    }

    /** Bytecodes counted since each thread's last sample, over all threads, ended ones included. */
    static long residual() {
        synchronized (LOCK) {
            long sum = endedResidual;
            for (int i = 0; i < liveCount; i++) {
                T t = live[i];
                if (t.on) {
                    sum += (long) t.period - counter(t);
                }
            }
            return sum;
        }
    }

    /** Called by the agent when profiling stops: rewritten code keeps running but records nothing. Blocks
     *  stay (frames still running may write their stack entries) until their threads end. */
    static void disable() {
        enabled = false;
        synchronized (LOCK) {
            for (int i = 0; i < liveCount; i++) {
                T t = live[i];
                t.on = false;
                t.cap = 0;
                if (fields) {
                    t.owner.kprof$cap = 0;
                }
            }
        }
    }

    /** A zeroed native block for a thread: {@code entries} stack entries (twice: the stack and the path
     *  cache) and a ring of {@code ringBytes}; registered with the agent's drain. 0 if there is no memory. */
    private static native long block(int entries, int ringBytes, int root);

    /** The thread is done with its block: the agent drains it and frees it. */
    private static native void release(long hdr);

    /** The thread's ring is full: the agent adds its published records to the tree now, on this thread. */
    private static native void drainOwn(long hdr);

    /** stack=walk: writes the calling context of the innermost rewritten frame on this thread's stack (the
     *  method sampling), as the reified stack would hold it, into the {@code cap} entries at {@code stack},
     *  outermost first; returns its depth. */
    private static native int walk(long stack, int cap);

    /** The CCT node of a thread's root ({@code threads=on}). */
    private static native int threadRoot(String name);
}
