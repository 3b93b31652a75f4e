package kprof.runtime;

/**
 * The per-thread state of rewritten code: the bytecode counter, the reified call stack and the path
 * cache of the last sample. One per Java thread (virtual threads included), found by {@link Bc#enter}.
 * Only its own thread writes it, except {@link Bc#OFF}, a shared dummy whose values are never read.
 */
public final class T {
    /** The owning thread's id ({@code Thread.getId()}); never reused by the JVM. */
    final long tid;
    /** Bytecodes left before the next sample; the sample is due when it reaches zero or below. */
    public int counter;
    /** The value {@link #counter} started from after the last sample (gran + r). */
    int period;
    /** Depth the next invocation takes: the caller's depth plus one. */
    public int sp;
    /** Callsite of the call being made (callsite=on): written by the caller, read by the callee. */
    int site;
    /** Invocations entering at this depth count nothing (calls made by an intrinsic candidate); -1: none. */
    int muteArm = -1;
    /** Nesting of {@link Bc#mute} brackets. */
    int muteNest;
    /** The depth {@link Bc#enter} just gave an invocation, read by its prologue through {@link Bc#depth}. */
    int depth;
    /** Method id at each depth. */
    public int[] methods;
    /** Callsite bci, in the caller, of the frame at each depth. */
    public int[] sites;
    /** The path of the last sample (methods, sites) and the CCT node of each of its depths. */
    int[] cacheMethods, cacheSites, cacheNodes;
    int cacheLength;
    /** CCT node the samples of this thread hang below. */
    int root;
    /** State of the per-thread xorshift generator (fixed seed: profiles are reproducible). */
    int random = 0x9E3779B9;
    /** Next T in the same bucket of {@link Bc}'s table. */
    T next;

    T(long tid, int depth) {
        this.tid = tid;
        this.methods = new int[depth];
        this.sites = new int[depth];
        this.cacheMethods = new int[depth];
        this.cacheSites = new int[depth];
        this.cacheNodes = new int[depth];
    }

    /** Makes room for depth {@code d}: called when the reified stack is full (deep recursion). */
    void grow(int d) {
        int n = methods.length;
        while (n <= d) {
            n *= 2;
        }
        methods = copy(methods, n);
        sites = copy(sites, n);
    }

    static int[] copy(int[] a, int n) {
        int[] b = new int[n];
        System.arraycopy(a, 0, b, 0, a.length);
        return b;
    }

    /** The next value in [0, bound) of the thread's generator (xorshift32). */
    int nextRandom(int bound) {
        if (bound <= 1) {
            return 0;
        }
        int x = random;
        x ^= x << 13;
        x ^= x >>> 17;
        x ^= x << 5;
        random = x;
        return (int) ((x & 0xffffffffL) % bound);
    }
}
