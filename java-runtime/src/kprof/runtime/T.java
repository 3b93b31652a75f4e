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
    public int site;
    /** Invocations entering at this depth count nothing (calls made by an intrinsic candidate); -1: none. */
    int muteArm = -1;
    /** Nesting of {@link Bc#mute} brackets. */
    int muteNest;
    /** The reified stack: at each depth, the method id (low 32 bits) and the callsite bci in the caller
     *  (high 32 bits). One array, so one store and one bounds check per invocation. */
    long[] frames;
    /** The path of the last sample and the CCT node of each of its depths. */
    long[] cacheFrames;
    int[] cacheNodes;
    int cacheLength;
    /** CCT node the samples of this thread hang below. */
    int root;
    /** State of the per-thread xorshift generator (fixed seed: profiles are reproducible). */
    int random = 0x9E3779B9;
    /** Next T in the same bucket of {@link Bc}'s table. */
    T next;

    T(long tid, int depth) {
        this.tid = tid;
        this.frames = new long[depth];
        this.cacheFrames = new long[depth];
        this.cacheNodes = new int[depth];
    }

    /** Makes room for depth {@code d}: called when the reified stack is full (deep recursion). */
    @jdk.internal.vm.annotation.DontInline
    void grow(int d) {
        int n = frames.length;
        while (n <= d) {
            n *= 2;
        }
        long[] b = new long[n];
        System.arraycopy(frames, 0, b, 0, frames.length);
        frames = b;
    }

    /** Makes the path cache as long as the stack. */
    void growCache() {
        int n = frames.length;
        long[] f = new long[n];
        System.arraycopy(cacheFrames, 0, f, 0, cacheFrames.length);
        int[] nodes = new int[n];
        System.arraycopy(cacheNodes, 0, nodes, 0, cacheNodes.length);
        cacheFrames = f;
        cacheNodes = nodes;
    }

    /** A stack entry. Force-inlined: C1 would otherwise call it from every rewritten prologue. */
    @jdk.internal.vm.annotation.ForceInline
    static long frame(int method, int site) {
        return ((long) site << 32) | (method & 0xffffffffL);
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
