package kprof.runtime;

import jdk.internal.vm.annotation.ForceInline;

/**
 * The per-thread state of bytecode mode. Rewritten code reads and writes its hot part (the counter, the depth,
 * where the reified stack is) as fields of java.lang.Thread that the agent adds when it starts with the JVM
 * ({@code Thread.kprof$c}, {@code kprof$sp}, {@code kprof$st}, {@code kprof$cap}): {@code Thread.currentThread()}
 * is a register read for the JIT, where a reference to this object kept in a local would have to stay live,
 * and be saved around every call, in every rewritten method. Attached to a running JVM, Thread has no such
 * fields; the same values then live here ({@link #c}, {@link #sp}, {@link #stack}, {@link #cap}) and rewritten
 * code finds this object through a table ({@code Bt}). Either way the sample path reads the rest from here.
 *
 * <p>The thread's block is native memory the agent allocates ({@code Bc.block}), laid out as
 * <pre>
 *   hdr + 0      int  published: ring offset up to which records are complete (written last, by the thread)
 *   hdr + 4      int  dropped: samples that found the ring full (written by the thread)
 *   hdr + 8      long the bytecodes those samples stood for (written by the thread)
 *   hdr + 64     int  consumed: ring offset up to which the agent has read (written by the agent)
 *   hdr + 128    int[alloc] the reified stack: entry d names the invocation at depth d
 *   ...          int[alloc] the entries of the last recorded sample (its path, for the next one's prefix)
 *   ...          ring: mask + 1 bytes, a power of two
 * </pre>
 * The stack is native memory, written with {@code Unsafe}: a store into a Java {@code int[]} on every call
 * makes the JIT reload every {@code int[]} element the application keeps in registers across it (that alone
 * doubled xalan's run time), and a store of a reference would run the GC's write barrier.
 */
public final class T {
    /** Without Thread fields: bytecodes left before the next sample, and the depth of the next invocation. */
    public int c;
    public int sp;
    /** Without Thread fields: where the stack is and how many entries it holds (0: record nothing). */
    public long stack;
    public int cap;

    /** The period the counter started from (gran + r). */
    int period;
    /** State of the xorshift32 generator of r (fixed seed: profiles are reproducible). */
    int random = 0x9E3779B9;
    /** Entries of the last recorded sample's path that the block's path cache holds. */
    int cached;
    /** Entries the block was allocated for. */
    int alloc;
    /** Address of the block (its header), of the ring's data, and the ring's size - 1. */
    long hdr;
    long ring;
    int mask;
    /** Ring offset where the next record goes (wraps modulo 2^32; {@link #mask} addresses the ring). */
    int w;
    int dropped;
    /** Profiling is on for this thread (cleared when it stops, and when the thread ends). */
    boolean on;
    /** Nesting of mute brackets, and the counter the outermost one saved. */
    int mute;
    int saved;
    /** The depth callees had when each open bracket opened, innermost last (the first {@link #BRACKETS}). */
    final int[] bracketSp = new int[BRACKETS];
    static final int BRACKETS = 64;
    /** The thread this state belongs to, and its id (for the table). */
    final Thread owner;
    final long tid;
    /** Next state in the same bucket of {@code Bt.TABLE}. */
    T next;

    T(Thread owner, long tid) {
        this.owner = owner;
        this.tid = tid;
    }

    /** Opens a mute bracket whose callees take depth {@code sp}; true for the outermost one. */
    @ForceInline
    boolean open(int sp) {
        int m = mute++;
        if (m < BRACKETS) {
            bracketSp[m] = sp;
        }
        return m == 0;
    }

    /** An exception handler at depth {@code d}: closes the brackets opened for deeper frames (past
     *  {@link #BRACKETS} brackets, whose depths are not kept, all of them); true if none stays open. */
    boolean closeAbove(int d) {
        while (mute > 0 && (mute > BRACKETS || bracketSp[mute - 1] > d)) {
            mute--;
        }
        return mute == 0;
    }

    /** The next value in [0, bound) of the thread's generator (xorshift32). */
    @ForceInline
    int nextRandom(int bound) {
        int x = random;
        x ^= x << 13;
        x ^= x >>> 17;
        x ^= x << 5;
        random = x;
        return bound <= 1 ? 0 : (int) ((x & 0xffffffffL) % bound);
    }
}
