package kprof.runtime;

import jdk.internal.misc.Unsafe;
import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * {@link Bc}'s helpers for a JVM the agent attached to, whose java.lang.Thread has no kprof fields: the state
 * lives in a {@link T} found through a table keyed by thread id (created on a thread's first rewritten
 * invocation) and kept in a local of each rewritten method. The inserted code is {@link Bc}'s, with
 * {@code invokestatic Bt.t()T; astore S} first in the prologue and {@code aload S} as each helper's first
 * argument (one-block leaves call {@link #leafExit1}). Slower than {@link Bc} (the lookup in every prologue,
 * and a reference live in every rewritten frame), and the only way without the fields.
 */
public final class Bt {
    static final Unsafe U = Unsafe.getUnsafe();
    /** The state of threads that are not profiled: records nothing. */
    static final T OFF = new T(null, 0);
    static final int BUCKETS = 1 << 12;
    /** States by thread id, chained through {@link T#next}; written under LOCK. */
    static final T[] TABLE = new T[BUCKETS];
    private static final Object LOCK = new Object();

    static {
        OFF.c = Integer.MAX_VALUE;
    }

    private Bt() {}

    /** The calling thread's state. */
    @ForceInline
    public static T t() {
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
        if (!Bc.enabled) {
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
                t = Bc.create(Thread.currentThread());
                if (t == null) {
                    return OFF;
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

    /** Removes {@code t} from the table (its thread ended). */
    static void forget(T t) {
        synchronized (LOCK) {
            int b = (int) t.tid & (BUCKETS - 1);
            T prev = null;
            for (T u = TABLE[b]; u != null; prev = u, u = u.next) {
                if (u == t) {
                    if (prev == null) {
                        TABLE[b] = u.next;
                    } else {
                        prev.next = u.next;
                    }
                    return;
                }
            }
        }
    }

    @ForceInline
    public static int enter(T t, int id) {
        int d = t.sp;
        t.sp = d + 1;
        if (d >= 0 && d < t.cap) {
            U.putInt(t.stack + ((long) d << 2), id);
        }
        return d;
    }

    @ForceInline
    public static void site(T t, int d, int site) {
        if (d >= 0 && d < t.cap) {
            U.putInt(t.stack + ((long) d << 2), site);
        }
    }

    @ForceInline
    public static int check(T t, int d, int c, int id) {
        if (c > Bc.limit) {
            return c;
        }
        int x = t.c + c;
        if (x <= 0) {
            x = sample(t, x, d, id);
        }
        t.c = x;
        return 0;
    }

    @ForceInline
    public static void exit(T t, int d, int c, int id) {
        t.sp = d;
        int x = t.c + c;
        if (x <= 0) {
            x = sample(t, x, d, id);
        }
        t.c = x;
    }

    @ForceInline
    public static int leafCheck(T t, int c, int id) {
        if (c > Bc.limit) {
            return c;
        }
        int x = t.c + c;
        if (x <= 0) {
            x = sample(t, x, t.sp, id);
        }
        t.c = x;
        return 0;
    }

    @ForceInline
    public static void leafExit(T t, int c, int id) {
        int x = t.c + c;
        if (x <= 0) {
            x = sample(t, x, t.sp, id);
        }
        t.c = x;
    }

    /** A return or throw of a one-block leaf method (no locals: the state is looked up here). */
    @ForceInline
    public static void leafExit1(int c, int id) {
        leafExit(t(), c, id);
    }

    @ForceInline
    public static void handler(T t, int d) {
        t.sp = d + 1;
        if (t.mute != 0 && t.closeAbove(d)) {
            t.c = t.saved;
        }
    }

    /** See {@link Bc#mute}. {@link #OFF} is shared by the threads that are not profiled: it never mutes. */
    @ForceInline
    public static void mute() {
        T t = t();
        if (t != OFF && t.open(t.sp)) {
            t.saved = t.c;
            t.c = Integer.MAX_VALUE;
        }
    }

    @ForceInline
    public static void unmute() {
        T t = t();
        if (t.mute > 0 && --t.mute == 0) {
            t.c = t.saved;
        }
    }

    @DontInline
    static int sample(T t, int x, int n, int leaf) {
        if (!t.on) {
            return Integer.MAX_VALUE;
        }
        return Bc.next(t, x, n, leaf, t.stack, t.cap);
    }
}
