package kprof.runtime;

import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * The helpers that exact-mode rewriting calls (JP2/CCCP complete calling-context profiles). Every
 * invocation of a rewritten method is counted in its callsite-aware calling context, with the bytecodes
 * its blocks execute ({@code bb=on}: a counter per basic block instead). A rewritten method does:
 *
 * <pre>
 *   prologue:             invokestatic Exact.state()S; astore S; aload S; ldc ID; ldc N;
 *                         invokestatic Exact.enter(SII)[J; astore C
 *                         (bb=on: ... ldc BLOCKS; invokestatic Exact.enterBlocks(SII)[J; astore C)
 *   each basic block:     aload C; ldc N; invokestatic Exact.count([JI)V          (bb=on: Exact.block([JI)V, block index)
 *   exception handlers:   aload S; aload C; invokestatic Exact.handler(S[J)V       (before the block's helper)
 *   before calls, new:    aload S; ldc BCI; putfield S.site                        (callsite=on)
 *   before each return:   aload S; aload C; invokestatic Exact.exit(S[J)V
 *                         (a returning block without calls uses countExit/blockExit at its start instead)
 *   leaf methods:         ldc ID; ldc N; invokestatic Exact.enterLeaf(II)[J; astore C; counts as above;
 *                         nothing at returns or handlers
 *   native wrappers:      enter as above with N = 0; before the call of the native: aload S; iconst_m1;
 *                         putfield S.site; exit before the return
 *   intrinsic candidates: not counted; invokestatic Exact.mute()V before and Exact.unmute()V after each call
 * </pre>
 *
 * where S is the thread's {@link ExactState} and C the invocation's node (a {@code long[]}, see
 * {@link ExactState}), both new locals; ID the method's id, N a block's bytecode count (the prologue
 * counts the first block when nothing jumps back to it), BCI the call's offset in the original method.
 *
 * <p>The current node is kept without instrumenting exceptional exits, like bytecode mode's depth:
 * {@code enter} takes the node {@code cur} the caller left and the callsite it wrote, finds or creates the
 * child, and leaves {@code cur} = that child for callees; a normal return restores {@code cur} = parent;
 * an exception handler re-asserts {@code cur} = its own node. Leaf methods (no calls, no {@code new})
 * never move it. A native wrapper is a node of the native method; code the native calls back runs with
 * {@code cur} = that node and callsite -1.
 *
 * <p>Each thread counts into its own tree ({@link ExactState}): no atomics or shared writes on the fast
 * path. The trees go into the agent's one tree ({@link #merge}) when a thread ends and when the agent
 * writes the profile (then as the difference to what was merged before).
 *
 * <p>Everything here is leaf code: no allocation on the fast paths (a new node allocates its array, once
 * per context and thread), no JDK calls that could be rewritten. Fast paths are {@code @ForceInline},
 * slow paths {@code @DontInline}. While profiling is off, every thread gets {@link #OFF}, whose node
 * is {@link #DUMMY}.
 */
public final class Exact {
    /** Slots of a node array. */
    static final int CALLS = 0, BYTECODES = 1, KEY = 2, PARENT = 3, NODE = 4, BLOCKS = 5;

    /** Set by the agent once the runtime is ready; cleared when profiling stops. */
    static volatile boolean enabled;
    static boolean threadRoots;
    /** The node of invocations that count nothing (profiling off, or below an intrinsic candidate);
     *  written by every thread, never read. */
    static final long[] DUMMY = new long[BLOCKS + 65536];
    /** The state of threads while profiling is off. */
    static final ExactState OFF = new ExactState(0, 2);

    private static final int BUCKETS = 1 << 12;
    /** Per-thread states, hashed by thread id, chained through {@link ExactState#next}; written under LOCK. */
    private static final ExactState[] TABLE = new ExactState[BUCKETS];
    private static final Object LOCK = new Object();
    private static final int INITIAL_NODES = 1024;

    private Exact() {}

    /** Prologue, first: the thread's state (kept in a local for the exit, handler and callsite writes). */
    @ForceInline
    public static ExactState state() {
        return current();
    }

    /** Prologue, second: this method's node under the caller's node and callsite; counts the call and the
     *  first block's {@code n} bytecodes. Leaves {@code cur} = the node for callees. */
    @ForceInline
    public static long[] enter(ExactState s, int method, int n) {
        int p = s.cur;
        if (s == OFF || p == s.muteArm) {
            return DUMMY;
        }
        long[] c = s.child(p, method, 0);
        c[CALLS]++;
        c[BYTECODES] += n;
        s.cur = (int) c[NODE];
        return c;
    }

    /** {@link #enter} with {@code bb=on}: the node has {@code blocks} block counters; bytecodes are
     *  computed from them when the tree is written. */
    @ForceInline
    public static long[] enterBlocks(ExactState s, int method, int blocks) {
        int p = s.cur;
        if (s == OFF || p == s.muteArm) {
            return DUMMY;
        }
        long[] c = s.child(p, method, blocks);
        c[CALLS]++;
        s.cur = (int) c[NODE];
        return c;
    }

    /** Prologue of a leaf method (no calls, no {@code new}): its node; the current node stays the caller's. */
    @ForceInline
    public static long[] enterLeaf(int method, int n) {
        ExactState s = current();
        int p = s.cur;
        if (s == OFF || p == s.muteArm) {
            return DUMMY;
        }
        long[] c = s.child(p, method, 0);
        c[CALLS]++;
        c[BYTECODES] += n;
        return c;
    }

    /** {@link #enterLeaf} with {@code bb=on}. */
    @ForceInline
    public static long[] enterLeafBlocks(int method, int blocks) {
        ExactState s = current();
        int p = s.cur;
        if (s == OFF || p == s.muteArm) {
            return DUMMY;
        }
        long[] c = s.child(p, method, blocks);
        c[CALLS]++;
        return c;
    }

    /** A basic block of {@code n} bytecodes. */
    @ForceInline
    public static void count(long[] c, int n) {
        c[BYTECODES] += n;
    }

    /** Basic block {@code k} ({@code bb=on}). */
    @ForceInline
    public static void block(long[] c, int k) {
        c[BLOCKS + k]++;
    }

    /** Before a return: callees of the caller hang below the caller's node again. */
    @ForceInline
    public static void exit(ExactState s, long[] c) {
        s.cur = (int) c[PARENT];
    }

    /** A block that returns and calls nothing: counted, and the caller's node restored. */
    @ForceInline
    public static void countExit(ExactState s, long[] c, int n) {
        c[BYTECODES] += n;
        s.cur = (int) c[PARENT];
    }

    /** {@link #countExit} with {@code bb=on}. */
    @ForceInline
    public static void blockExit(ExactState s, long[] c, int k) {
        c[BLOCKS + k]++;
        s.cur = (int) c[PARENT];
    }

    /** At an exception handler: callees of this invocation hang below its node again, whatever node the
     *  frames the exception unwound left behind. */
    @ForceInline
    public static void handler(ExactState s, long[] c) {
        s.cur = (int) c[NODE];
        s.muteNest = 0;
        s.muteArm = -1;
    }

    /** Before a call in an intrinsic candidate: the callee, and everything it calls, counts nothing, as it
     *  would not run at all once the JIT uses the intrinsic (counts do not depend on the JIT). */
    @ForceInline
    public static void mute() {
        ExactState s = current();
        if (s.muteNest++ == 0) {
            s.muteArm = s.cur;
        }
    }

    /** After that call returns. */
    @ForceInline
    public static void unmute() {
        ExactState s = current();
        if (s.muteNest > 0 && --s.muteNest == 0) {
            s.muteArm = -1;
        }
    }

    @ForceInline
    static ExactState current() {
        long id = Thread.currentThread().getId();
        ExactState s = TABLE[(int) id & (BUCKETS - 1)];
        if (s != null && s.tid == id) {
            return s;
        }
        return lookup(id);
    }

    /** The state of thread {@code id}, created on its first rewritten invocation; moved to its bucket's head. */
    @DontInline
    static ExactState lookup(long id) {
        if (!enabled) {
            return OFF;
        }
        synchronized (LOCK) {
            int b = (int) id & (BUCKETS - 1);
            ExactState prev = null;
            ExactState s = TABLE[b];
            while (s != null && s.tid != id) {
                prev = s;
                s = s.next;
            }
            if (s == null) {
                s = new ExactState(id, INITIAL_NODES);
                if (threadRoots) {
                    s.root = threadRoot(Thread.currentThread().getName());
                }
                s.next = TABLE[b];
            } else if (prev != null) {
                prev.next = s.next;
                s.next = TABLE[b];
            } else {
                return s;
            }
            // ExactState.tid is final, so a thread that reads this slot without the lock sees it set.
            TABLE[b] = s;
            return s;
        }
    }

    /**
     * Adds what {@code s} counted since its last merge to the agent's tree. {@code last}: the state is not
     * merged again (its thread ended, or profiling stops), so nothing is kept for a later difference.
     * Caller holds LOCK. Reads the owner's counters without synchronisation: a merge while the thread
     * runs takes whatever values it sees, and the next merge adds the rest.
     */
    private static void merge(ExactState s, boolean last) {
        long[][] nodes = s.nodes;
        int n = s.size;
        if (n > nodes.length) {
            n = nodes.length;
        }
        int total = 0;
        for (int i = 1; i < n; i++) {
            long[] c = nodes[i];
            if (c == null) {
                n = i;
                break;
            }
            total += 3 + c.length - BLOCKS;
        }
        if (n <= 1) {
            return;
        }
        int[] parents = new int[n];
        long[] keys = new long[n];
        long[] counts = new long[total];
        long[][] merged = s.merged;
        if (!last && (merged == null || merged.length < n)) {
            long[][] bigger = new long[n][];
            if (merged != null) {
                System.arraycopy(merged, 0, bigger, 0, merged.length);
            }
            merged = bigger;
            s.merged = merged;
        }
        int at = 0;
        for (int i = 1; i < n; i++) {
            long[] c = nodes[i];
            long[] m = merged != null && i < merged.length ? merged[i] : null;
            if (m == null && !last) {
                m = new long[c.length];
                merged[i] = m;
            }
            parents[i] = (int) c[PARENT];
            keys[i] = c[KEY];
            int blocks = c.length - BLOCKS;
            counts[at++] = delta(c, m, CALLS, last);
            counts[at++] = delta(c, m, BYTECODES, last);
            counts[at++] = blocks;
            for (int k = 0; k < blocks; k++) {
                counts[at++] = delta(c, m, BLOCKS + k, last);
            }
        }
        int[] cct = s.cctNodes;
        if (cct == null || cct.length < n) {
            int[] bigger = new int[n];
            if (cct != null) {
                System.arraycopy(cct, 0, bigger, 0, cct.length);
            }
            cct = bigger;
            s.cctNodes = cct;
        }
        cct[0] = s.root;
        merge(n, parents, keys, counts, cct);
    }

    /** The counter {@code k} of {@code c} minus its value at the last merge; remembers the new value. */
    private static long delta(long[] c, long[] m, int k, boolean last) {
        long v = c[k];
        if (m == null) {
            return v;
        }
        long d = v - m[k];
        if (!last) {
            m[k] = v;
        }
        return d;
    }

    /** Called by the agent when a thread ends (on that thread): merges its tree and forgets its state. */
    static void threadEnded() {
        long id = Thread.currentThread().getId();
        synchronized (LOCK) {
            int b = (int) id & (BUCKETS - 1);
            ExactState prev = null;
            for (ExactState s = TABLE[b]; s != null; prev = s, s = s.next) {
                if (s.tid == id) {
                    if (prev == null) {
                        TABLE[b] = s.next;
                    } else {
                        prev.next = s.next;
                    }
                    merge(s, true);
                    return;
                }
            }
        }
    }

    /** Called by the agent before it writes the profile: merges every live thread's tree. */
    static void mergeAll() {
        synchronized (LOCK) {
            for (ExactState head : TABLE) {
                for (ExactState s = head; s != null; s = s.next) {
                    merge(s, false);
                }
            }
        }
    }

    /** Called by the agent when everything is in place: a new session starts from empty trees. */
    static void init(boolean perThreadRoots) {
        synchronized (LOCK) {
            for (int b = 0; b < BUCKETS; b++) {
                TABLE[b] = null;
            }
            threadRoots = perThreadRoots;
            enabled = true;
        }
    }

    /** Called by the agent when profiling stops: merges what is left; rewritten code keeps running but
     *  counts nothing. */
    static void disable() {
        enabled = false;
        synchronized (LOCK) {
            for (int b = 0; b < BUCKETS; b++) {
                for (ExactState s = TABLE[b]; s != null; s = s.next) {
                    merge(s, true);
                }
                TABLE[b] = null;
            }
        }
    }

    /** Adds nodes {@code 1..n-1} of a thread's tree to the agent's tree: node i has parent
     *  {@code parents[i]} (0 = the thread's root, agent node {@code cctNodes[0]}) and key {@code keys[i]};
     *  {@code counts} holds, node after node, calls, bytecodes, the number of block counters and those
     *  counters. {@code cctNodes[i]} is the agent's node of node i (0 until the first merge finds it). */
    private static native void merge(int n, int[] parents, long[] keys, long[] counts, int[] cctNodes);

    /** The CCT node of a thread's root ({@code threads=on}). */
    private static native int threadRoot(String name);
}
