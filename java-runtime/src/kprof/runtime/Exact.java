package kprof.runtime;

import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * The helpers that exact-mode rewriting calls (JP2/CCCP complete calling-context profiles). Every
 * invocation of a rewritten method is counted in its callsite-aware calling context, with the bytecodes
 * its blocks execute ({@code bb=on}: a counter per basic block instead). A rewritten method does:
 *
 * <pre>
 *   prologue:             invokestatic Ef.state()S; astore S; aload S; ldc ID; ldc N;
 *                         invokestatic Exact.enter(SII)C; astore C
 *                         (bb=on: ... ldc BLOCKS; invokestatic Exact.enterBlocks(SII)C; astore C)
 *   each basic block:     iinc B, N                 (bb=on: aload C; ldc K; invokestatic Exact.block(CI)V, block K)
 *   loop headers:         aload C; iload B; invokestatic Exact.spill(CI)I; istore B            (bb=off)
 *   before calls, throws: aload C; iload B; invokestatic Exact.count(CI)V; iconst_0; istore B   (bb=off)
 *   or, where that would take the method past the byte budget, a catch-all handler instead (appended, over
 *                         the whole original code, last in the exception table; not in constructors and
 *                         methods with monitorenter):
 *                         aload S; aload C; iload B; invokestatic Exact.countExit(SCI)V; athrow
 *   exception handlers:   aload S; aload C; invokestatic Exact.handler(SC)V       (before the block's helper)
 *   before calls, new:    aload S; ldc BCI; putfield S.site                        (callsite=on)
 *   before each return:   aload S; aload C; iload B; invokestatic Exact.countExit(SCI)V
 *                         (bb=on: aload S; aload C; invokestatic Exact.exit(SC)V)
 *                         (a returning block without calls uses countExit/blockExit at its start instead)
 *   leaf methods:         ldc ID; ldc N; invokestatic Ef.enterLeaf(II)C; astore C; counts as above;
 *                         at returns B goes to C (count), nothing else at returns or handlers
 *   native wrappers:      enter as above with N = 0, then aload S; aload C; invokestatic Exact.nativeEnter(SC)C;
 *                         astore O; before the return: aload S; aload O; invokestatic Exact.nativeLeave(SC)V
 *                         and exit; a catch-all handler: aload S; aload O; invokestatic Exact.nativeLeave; athrow
 *   intrinsic candidates: not counted; invokestatic Ef.mute()V before and Ef.unmute()V after each call
 * </pre>
 *
 * (Ef: when java.lang.Thread has kprof's fields, the agent having started with the JVM; otherwise the methods
 * of the same names here.)
 *
 * where S is the thread's {@link ExactState}, C the invocation's {@link ExactNode} and B the bytecodes counted
 * but not yet added to C, all new locals (B: a register in compiled code, where a counter in C would put a
 * store-to-load chain through memory into every loop iteration); ID the method's id, N a block's bytecode
 * count (the prologue's N: the first block's, when nothing jumps back to it, which the agent counts as calls
 * times N), BCI the call's offset in the original method. An implicit exception (a null dereference, say)
 * that leaves the method loses what B holds: a block is counted at its start, so only the blocks since the
 * last call or throw. The catch-all
 * handler, where there is one, hands B to C whatever leaves the method (the method's own handlers see B in
 * the local) and rethrows the same exception: fewer bytes, but B stays live (so spilled) across every call
 * once compiled, which costs more than the hand-over.
 *
 * <p>The current node is kept without instrumenting exceptional exits, like bytecode mode's depth:
 * {@code enter} takes the node {@code cur} the caller left (held as that node's table of children) and the
 * callsite it wrote, finds or creates the child, and leaves {@code cur} = that child for callees; a normal
 * return restores {@code cur} = parent; an exception handler re-asserts {@code cur} = its own node. Leaf
 * methods (no calls, no {@code new}) never move it. A native wrapper is a node of the native method; code the native calls back runs with
 * {@code cur} = that node and callsite -1. Native code that catches what a callback threw (JNI
 * {@code ExceptionClear}, {@code ExceptionDescribe}) is no rewritten handler: the agent intercepts those
 * two JNI functions and, when the innermost Java frame is a wrapped native, calls {@link #caught}, which
 * re-asserts the wrapper's node as a handler would.
 *
 * <p>Each thread counts into its own tree ({@link ExactState}): no atomics or shared writes on the fast
 * path. The trees go into the agent's one tree ({@link #merge}) when a thread ends and when the agent
 * writes the profile (then as the difference to what was merged before).
 *
 * <p>Everything here is leaf code: no allocation on the fast paths (a new node allocates its array, once
 * per context and thread), no JDK calls that could be rewritten. Fast paths are {@code @ForceInline}
 * but for the prologues ({@link #enter}, {@link #enterLeaf}: one real call per invocation, which measured
 * faster than their code inlined everywhere), slow paths {@code @DontInline}. While profiling is off,
 * every thread gets {@link #OFF}, whose node is {@link #DUMMY}.
 */
public final class Exact {
    /** Set by the agent once the runtime is ready; cleared when profiling stops. */
    static volatile boolean enabled;
    static boolean threadRoots;
    /** java.lang.Thread has kprof's fields: rewritten code finds its state in {@code Thread.kprof$x}
     *  ({@link Ef}), and this class keeps that field in step with the table. */
    static boolean fields;
    /** The node of invocations that count nothing (profiling off, or below an intrinsic candidate);
     *  written by every thread, never read. */
    static final ExactNode DUMMY = new ExactNode(0, 0, 0, 65536);
    /** The state of threads while profiling is off. Its mute is armed on its current node for good, so the
     *  prologues' mute check also tells OFF (one compare less per call); nothing moves either. */
    static final ExactState OFF = offState();

    private static final int BUCKETS = 1 << 12;
    /** Per-thread states, hashed by thread id, chained through {@link ExactState#next}; written under LOCK. */
    private static final ExactState[] TABLE = new ExactState[BUCKETS];
    private static final Object LOCK = new Object();
    private static final int INITIAL_NODES = 1024;
    static final long OVERFLOW_KEY = ExactState.OVERFLOW_KEY;
    /** Heap bytes a node costs: the object (104), its slots in the node array and in its parent's tables of
     *  children (typically up to 16 slots, with the tables it outgrew and the array's doubling; 64 at worst), and its share of the
     *  arrays a merge builds (40). */
    private static final long BYTES_PER_NODE = 240;
    /** Nodes over all threads, whatever the heap: see {@link #init}. */
    private static final long MAX_NODES = 1 << 24;

    private Exact() {}

    private static ExactState offState() {
        ExactState s = new ExactState(null, 0, 2);
        s.muteArm = s.cur;
        return s;
    }

    /** Prologue, first: the thread's state (kept in a local for the exit, handler and callsite writes). */
    @ForceInline
    public static ExactState state() {
        return current();
    }

    /** Prologue, second: this method's node under the caller's node and callsite; counts the call. The
     *  first block's {@code n} bytecodes (when it runs once per call) are not added to the node: the agent
     *  knows {@code n} and adds calls times {@code n} when it merges, saving a read-modify-write per call;
     *  but for the overflow node, whose calls come from many methods. Leaves {@code cur} = the node for
     *  callees.
     *
     *  <p>A real call, deliberately: inlined into every rewritten method (and into everything the JIT
     *  inlines those into) the lookup made the compiled code larger and the JIT slower, by more than the
     *  call costs (docs/BENCHMARKS.md, 2026-11-24). */
    @DontInline
    public static ExactNode enter(ExactState s, int method, int n) {
        return enter(s, method, n, 0);
    }

    /** {@link #enter} with {@code bb=on}: the node has {@code blocks} block counters; bytecodes are
     *  computed from them when the tree is written. A real call, as {@link #enter}. */
    @DontInline
    public static ExactNode enterBlocks(ExactState s, int method, int blocks) {
        return enter(s, method, 0, blocks);
    }

    /** {@link #enter} and {@link #enterBlocks}. The hit path (the child in its home slot) is all that runs
     *  on most calls, so it does no more than it must: a node found in a table is never {@link #DUMMY}
     *  nor the overflow node (neither is ever put in one), so only the miss path asks. */
    @ForceInline
    private static ExactNode enter(ExactState s, int method, int n, int blocks) {
        long t = s.cur;
        if (t == s.muteArm) {
            return DUMMY;
        }
        long key = s.key(method);
        ExactNode c = s.slots[ExactState.home(t, key)];
        if (c != null && c.key == key) {
            c.calls++;
            s.cur = s.tableOf(c);
            return c;
        }
        return enterMiss(s, t, key, n, blocks);
    }

    /** {@link #enter} when the child is not in its home slot: elsewhere in the table, new, or the overflow
     *  node (which never becomes current, and counts the bytecodes of the first block itself). */
    @DontInline
    private static ExactNode enterMiss(ExactState s, long t, long key, int n, int blocks) {
        ExactNode c = s.find(t, key, blocks);
        c.calls++;
        if (c != s.overflow) {
            s.cur = s.tableOf(c);
        } else {
            c.bytecodes += n;
        }
        return c;
    }

    /** Prologue of a leaf method (no calls, no {@code new}): its node; the current node stays the caller's.
     *  A real call, as {@link #enter}. */
    @DontInline
    public static ExactNode enterLeaf(int method, int n) {
        return leaf(current(), method, n, 0);
    }

    /** {@link #enterLeaf} with {@code bb=on}. */
    @DontInline
    public static ExactNode enterLeafBlocks(int method, int blocks) {
        return leaf(current(), method, 0, blocks);
    }

    /** {@link #enterLeaf} and {@link #enterLeafBlocks} for the state {@code s}: {@link #enter} without
     *  moving the current node. */
    @ForceInline
    static ExactNode leaf(ExactState s, int method, int n, int blocks) {
        long t = s.cur;
        if (t == s.muteArm) {
            return DUMMY;
        }
        long key = s.key(method);
        ExactNode c = s.slots[ExactState.home(t, key)];
        if (c != null && c.key == key) {
            c.calls++;
            return c;
        }
        return leafMiss(s, t, key, n, blocks);
    }

    /** {@link #leaf} when the child is not in its home slot. */
    @DontInline
    private static ExactNode leafMiss(ExactState s, long t, long key, int n, int blocks) {
        ExactNode c = s.find(t, key, blocks);
        c.calls++;
        if (c == s.overflow) {
            c.bytecodes += n;
        }
        return c;
    }

    /** A basic block of {@code n} bytecodes. */
    @ForceInline
    public static void count(ExactNode c, int n) {
        c.bytecodes += n;
    }

    /** Bytecodes kept in a local before they go to the node. */
    private static final int SPILL = 1 << 16;

    /** At a loop header: the local count {@code b} goes to the node once it is large, so that it cannot
     *  overflow and a profile written while a long loop runs misses little. Returns the new local count. */
    @ForceInline
    public static int spill(ExactNode c, int b) {
        if (b < SPILL) {
            return b;
        }
        c.bytecodes += b;
        return 0;
    }

    /** Basic block {@code k} ({@code bb=on}). */
    @ForceInline
    public static void block(ExactNode c, int k) {
        c.blocks[k]++;
    }

    /** Before a return: callees of the caller hang below the caller's node again. The callsite is reset,
     *  so code the JVM runs before the caller's next call (a class initializer, a native method's lookup,
     *  a callback from native code) comes from no known callsite, whatever this method called last (a
     *  method that is not rewritten leaves the callsite its caller wrote). */
    @ForceInline
    public static void exit(ExactState s, ExactNode c) {
        leave(s, c);
    }

    /** A block that returns and calls nothing: counted, and the caller's node restored. */
    @ForceInline
    public static void countExit(ExactState s, ExactNode c, int n) {
        c.bytecodes += n;
        leave(s, c);
    }

    /** {@link #countExit} with {@code bb=on}. */
    @ForceInline
    public static void blockExit(ExactState s, ExactNode c, int k) {
        c.blocks[k]++;
        leave(s, c);
    }

    /** The caller's node again. An invocation that never moved {@code cur} leaves it alone: one that
     *  counted nothing ({@link #DUMMY}: below an intrinsic candidate; restoring a parent would hang the rest
     *  of its caller's calls below the thread's root) or counted on the overflow node. Neither has a parent's
     *  table ({@link ExactNode#parentKids} 0, which no table is), so one load and test tells both. */
    @ForceInline
    private static void leave(ExactState s, ExactNode c) {
        long back = c.parentKids;
        if (back != 0) {
            s.cur = back;
            s.site = -1;
        }
    }

    /** At an exception handler: callees of this invocation hang below its node again, whatever node the
     *  frames the exception unwound left behind. A handler of an invocation that counts nothing (below an
     *  intrinsic candidate) changes nothing: the bracket is still open. */
    @ForceInline
    public static void handler(ExactState s, ExactNode c) {
        if (c != DUMMY && c != s.overflow) {
            resume(s, c);
        }
    }

    /** Callees hang below {@code n} again, from no known callsite; a mute bracket still open was opened
     *  below {@code n} (a muted invocation moves nothing), and the exception that brought us here ended it. */
    @ForceInline
    private static void resume(ExactState s, ExactNode n) {
        s.cur = s.tableOf(n);
        s.site = -1;
        s.muteNest = 0;
        s.muteArm = -1;
    }

    /** Native wrapper, after its prologue and before it calls the native: the wrapper's node is the one
     *  callbacks hang below, also after the native code clears an exception ({@link #caught}). Returns
     *  the outer wrapper's node, for {@link #nativeLeave}. */
    @ForceInline
    public static ExactNode nativeEnter(ExactState s, ExactNode c) {
        ExactNode outer = s.nativeNode;
        if (s != OFF) {
            // The node cur is now: the wrapper's own, or its caller's when the wrapper counted on the overflow
            // node (which never becomes current); none when the wrapper counts nothing (muted, off).
            s.nativeNode = c != DUMMY ? s.slots[(int) (s.cur >>> 32) - 1] : null;
            s.site = -1;
        }
        return outer;
    }

    /** Native wrapper, when the native returns or throws: the outer wrapper's node again. */
    @ForceInline
    public static void nativeLeave(ExactState s, ExactNode outer) {
        if (s != OFF) {
            s.nativeNode = outer;
        }
    }

    /** Called by the agent (JNI, on the thread itself) after native code whose innermost Java frame is a
     *  native wrapper cleared a pending exception: whatever the callbacks' frames it unwound left in
     *  {@code cur}, the native's code runs in the wrapper's node, as after a handler of a rewritten method.
     *  (With Thread fields the agent calls {@link Ef#caught}.) */
    static void caught() {
        caught(current());
    }

    static void caught(ExactState s) {
        ExactNode n = s.nativeNode;
        if (s != OFF && n != null) {
            // A muted wrapper sets no node, so n was counted: as at a handler of n's invocation.
            resume(s, n);
        }
    }

    /** Before a call in an intrinsic candidate: the callee, and everything it calls, counts nothing, as it
     *  would not run at all once the JIT uses the intrinsic (counts do not depend on the JIT). */
    @ForceInline
    public static void mute() {
        mute(current());
    }

    @ForceInline
    static void mute(ExactState s) {
        if (s.muteNest++ == 0) {
            s.muteArm = s.cur;
            s.mutedSite = s.site;
        }
    }

    /** After that call returns. */
    @ForceInline
    public static void unmute() {
        unmute(current());
    }

    @ForceInline
    static void unmute(ExactState s) {
        // OFF's mute stays armed (its mute above rewrites the same value: harmless).
        if (s != OFF && s.muteNest > 0 && --s.muteNest == 0) {
            s.muteArm = -1;
            // What the muted calls wrote (their callees counted nothing, so consumed nothing) is no call of
            // the code around the bracket: a caller that is not rewritten would hand it to its next callee.
            s.site = s.mutedSite;
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

    /** The fields flavour's slow path ({@link Ef#state}): the thread has no state in its field yet. */
    @DontInline
    static ExactState attach() {
        return lookup(Thread.currentThread().getId());
    }

    /** The state of thread {@code id}, created on its first rewritten invocation; moved to its bucket's head.
     *  With Thread fields, also put in the thread's field (under LOCK, so that a state is in a field only
     *  while it is in the table). */
    @DontInline
    static ExactState lookup(long id) {
        if (!enabled) {
            return OFF;
        }
        synchronized (LOCK) {
            if (!enabled) {
                return OFF;
            }
            int b = (int) id & (BUCKETS - 1);
            ExactState prev = null;
            ExactState s = TABLE[b];
            while (s != null && s.tid != id) {
                prev = s;
                s = s.next;
            }
            if (s == null) {
                s = new ExactState(Thread.currentThread(), id, INITIAL_NODES);
                if (threadRoots) {
                    s.root = threadRoot(Thread.currentThread().getName());
                }
                s.next = TABLE[b];
            } else if (prev != null) {
                prev.next = s.next;
                s.next = TABLE[b];
            } else {
                return publish(s);
            }
            // ExactState.tid is final, so a thread that reads this slot without the lock sees it set.
            TABLE[b] = s;
            return publish(s);
        }
    }

    /** With Thread fields, makes {@code s} its thread's state; caller holds LOCK. The field is read only by
     *  its own thread, the one calling this. */
    private static ExactState publish(ExactState s) {
        if (fields) {
            s.owner.kprof$x = s;
        }
        return s;
    }

    /** With Thread fields, {@code s} is no longer its thread's state; caller holds LOCK. Another thread may
     *  clear the field: its owner then takes the slow path once and finds its state (or a new one) in the
     *  table, as the table flavour does. */
    private static void unpublish(ExactState s) {
        if (fields && s.owner != null && s.owner.kprof$x == s) {
            s.owner.kprof$x = null;
        }
    }

    /**
     * Adds what {@code s} counted since its last merge to the agent's tree. {@code last}: the state is not
     * merged again (its thread ended, or profiling stops), so nothing is kept for a later difference.
     * Caller holds LOCK. Reads the owner's counters without synchronisation: a merge while the thread
     * runs takes whatever values it sees, and the next merge adds the rest.
     */
    private static void merge(ExactState s, boolean last) {
        ExactNode[] nodes = s.nodes;
        int n = s.size;
        if (n > nodes.length) {
            n = nodes.length;
        }
        int total = 0;
        for (int i = 1; i < n; i++) {
            ExactNode c = nodes[i];
            if (c == null) {
                n = i;
                break;
            }
            total += 3 + (c.blocks == null || c.key == OVERFLOW_KEY ? 0 : c.blocks.length);
        }
        if (n <= 1) {
            return;
        }
        int[] parents = new int[n];
        long[] keys = new long[n];
        long[] counts = new long[total];
        int[] cct = new int[n];
        cct[0] = s.root;
        int at = 0;
        for (int i = 1; i < n; i++) {
            ExactNode c = nodes[i];
            parents[i] = c.parent;
            keys[i] = c.key;
            cct[i] = c.cct;
            long calls = c.calls;
            long bytecodes = c.bytecodes;
            counts[at++] = calls - c.mergedCalls;
            counts[at++] = bytecodes - c.mergedBytecodes;
            if (!last) {
                c.mergedCalls = calls;
                c.mergedBytecodes = bytecodes;
            }
            long[] blocks = c.key == OVERFLOW_KEY ? null : c.blocks;
            int nb = blocks == null ? 0 : blocks.length;
            counts[at++] = nb;
            if (nb > 0) {
                long[] m = c.mergedBlocks;
                if (m == null && !last) {
                    m = new long[nb];
                    c.mergedBlocks = m;
                }
                for (int k = 0; k < nb; k++) {
                    long v = blocks[k];
                    counts[at++] = m == null ? v : v - m[k];
                    if (!last) {
                        m[k] = v;
                    }
                }
            }
        }
        merge(n, parents, keys, counts, cct);
        for (int i = 1; i < n; i++) {
            nodes[i].cct = cct[i];
        }
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
                    unpublish(s);
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
    static void init(boolean perThreadRoots, boolean threadFields) {
        synchronized (LOCK) {
            for (int b = 0; b < BUCKETS; b++) {
                for (ExactState s = TABLE[b]; s != null; s = s.next) {
                    unpublish(s);
                }
                TABLE[b] = null;
            }
            threadRoots = perThreadRoots;
            fields = threadFields;
            // A quarter of the heap the application may grow to, and no more than a thread's array of tables
            // of children can hold (2^30 slots; a node takes at most 64, with its padding and outgrown tables).
            ExactState.nodesLeft = (int) Math.min(MAX_NODES, Runtime.getRuntime().maxMemory() / 4 / BYTES_PER_NODE);
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
                    unpublish(s);
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
