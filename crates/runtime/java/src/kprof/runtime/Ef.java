package kprof.runtime;

import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * {@link Exact}'s helpers that find the thread's state, for a JVM whose java.lang.Thread has kprof's fields
 * (the agent started with it): the state is {@code Thread.currentThread().kprof$x}, one load, where
 * {@link Exact#current} hashes the thread id into a table (bounds, null and id checks in every prologue, which
 * cost a sizeable share of exact mode's overhead on call-heavy programs). Rewritten code calls these instead of
 * Exact's methods of the same names; every other helper takes the state as an argument and is shared. A
 * thread without a state in its field (its first rewritten invocation, or profiling off) takes
 * {@link Exact#attach}, which also fills the field.
 */
public final class Ef {
    private Ef() {}

    /** Prologue, first: the thread's state. */
    @ForceInline
    public static ExactState state() {
        ExactState s = Thread.currentThread().kprof$x;
        return s != null ? s : Exact.attach();
    }

    /** {@link Exact#enterLeaf}: the hit path inlined into the leaf (a leaf's prologue as a call kept the JIT
     *  from compiling small hot methods into their callers' loops without one; the hit path is a few loads and
     *  a compare), the rest a call. */
    @ForceInline
    public static long enterLeaf(int method, int n) {
        ExactState s = Thread.currentThread().kprof$x;
        if (s != null) {
            long e = s.cur + ((long) s.site << Exact.ENTRY);
            if (Exact.U.getInt(e + Exact.KEY) == (Exact.USED | method)) {
                s.site = 0;
                Exact.U.putLong(e + Exact.CALLS, Exact.U.getLong(e + Exact.CALLS) + 1);
                return e;
            }
        }
        return leafMiss(method, n);
    }

    @DontInline
    private static long leafMiss(int method, int n) {
        return Exact.leaf(state(), method, n, 0);
    }

    /** {@link Exact#enterLeafBlocks} (a real call, as there). */
    @DontInline
    public static long enterLeafBlocks(int method, int blocks) {
        return Exact.leaf(state(), method, 0, blocks);
    }

    /** {@link Exact#caught}, for the thread's state in its field (the agent calls it through JNI). */
    static void caught() {
        ExactState s = Thread.currentThread().kprof$x;
        if (s != null) {
            Exact.caught(s);
        }
    }

    /** {@link Exact#mute}. */
    @ForceInline
    public static void mute() {
        Exact.mute(state());
    }

    /** {@link Exact#unmute}. */
    @ForceInline
    public static void unmute() {
        Exact.unmute(state());
    }
}
