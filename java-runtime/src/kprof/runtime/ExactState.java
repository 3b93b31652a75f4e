package kprof.runtime;

import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * The per-thread state of exact mode: the thread's own calling context tree and where the thread is in it.
 * One per Java thread, found by {@link Exact#enter}. Only its own thread writes it (the merge, under
 * {@link Exact}'s lock, only reads it and writes {@link #merged} and {@link #cctNodes}), except
 * {@link Exact#OFF}, a shared dummy whose values are never read.
 *
 * <p>A node is one {@code long[]}: {@link Exact#CALLS}, {@link Exact#BYTECODES}, its key (method id in the
 * low 32 bits, callsite bci in the high 32), its parent's node number, its own number, then one counter per
 * basic block with {@code bb=on}. Rewritten code keeps the array of its invocation's node in a local and
 * counts into it directly; the arrays never move, so a local stays valid while the tree grows. Node 0 is
 * the thread's root.
 */
public final class ExactState {
    /** The owning thread's id ({@code Thread.getId()}); never reused by the JVM. */
    final long tid;
    /** The node whose callees are being called: the running invocation's node. */
    public int cur;
    /** Callsite of the call being made (callsite=on): written by the caller, read by the callee; -1 for
     *  calls from native code. */
    public int site = -1;
    /** Invocations entering below this node count nothing (calls made by an intrinsic candidate); -1: none. */
    int muteArm = -1;
    /** Nesting of {@link Exact#mute} brackets. */
    int muteNest;
    /** Open-addressing hash table of the nodes by (parent, key); its length is a power of two. */
    long[][] table;
    /** The nodes in creation order (parents before children); {@code nodes[0]} is the root. */
    long[][] nodes;
    /** Nodes in use. */
    int size;
    /** CCT node of the thread's root in the agent's tree. */
    int root;
    /** The counters as last merged into the agent's tree, per node (merges while the thread runs). */
    long[][] merged;
    /** The agent's CCT node of each node, filled by the merge. */
    int[] cctNodes;
    /** Next state in the same bucket of {@link Exact}'s table. */
    ExactState next;

    ExactState(long tid, int capacity) {
        this.tid = tid;
        this.table = new long[capacity * 4][];
        this.nodes = new long[capacity][];
        long[] root = new long[Exact.BLOCKS];
        root[Exact.PARENT] = -1;
        nodes[0] = root;
        size = 1;
    }

    /** The child of node {@code parent} for method {@code method} called from the current callsite, with
     *  room for {@code blocks} block counters; created on first use. */
    @ForceInline
    long[] child(int parent, int method, int blocks) {
        long key = ((long) site << 32) | (method & 0xffffffffL);
        long[][] t = table;
        int h = hash(parent, key) & (t.length - 1);
        long[] c = t[h];
        if (c != null && c[Exact.KEY] == key && c[Exact.PARENT] == parent) {
            return c;
        }
        return find(parent, key, h, blocks);
    }

    /** Two multiplies: a probe that misses costs a call, so the table is kept at most a quarter full. */
    @ForceInline
    static int hash(int parent, long key) {
        long x = (key + parent * 0x9E3779B97F4A7C15L) * 0xBF58476D1CE4E5B9L;
        return (int) (x >>> 33);
    }

    /** The rest of the probe sequence; creates the node when it is not there. */
    @DontInline
    long[] find(int parent, long key, int h, int blocks) {
        long[][] t = table;
        int mask = t.length - 1;
        while (true) {
            long[] c = t[h];
            if (c == null) {
                return create(parent, key, h, blocks);
            }
            if (c[Exact.KEY] == key && c[Exact.PARENT] == parent) {
                return c;
            }
            h = (h + 1) & mask;
        }
    }

    private long[] create(int parent, long key, int h, int blocks) {
        long[] c = new long[Exact.BLOCKS + blocks];
        c[Exact.KEY] = key;
        c[Exact.PARENT] = parent;
        int n = size;
        c[Exact.NODE] = n;
        if (n == nodes.length) {
            long[][] bigger = new long[n * 2][];
            System.arraycopy(nodes, 0, bigger, 0, n);
            nodes = bigger;
        }
        nodes[n] = c;
        size = n + 1;
        table[h] = c;
        if (size * 4 > table.length) {
            rehash();
        }
        return c;
    }

    /** Doubles the hash table (kept at most a quarter full). */
    private void rehash() {
        long[][] t = new long[table.length * 2][];
        int mask = t.length - 1;
        for (int i = 1; i < size; i++) {
            long[] c = nodes[i];
            int h = hash((int) c[Exact.PARENT], c[Exact.KEY]) & mask;
            while (t[h] != null) {
                h = (h + 1) & mask;
            }
            t[h] = c;
        }
        table = t;
    }
}
