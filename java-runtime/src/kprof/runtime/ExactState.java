package kprof.runtime;

import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * The per-thread state of exact mode: the thread's own calling context tree and where the thread is in it.
 * One per Java thread, found by {@link Exact#enter}. Only its own thread writes it (the merge, under
 * {@link Exact}'s lock, only reads it and writes {@link #merged} and {@link #cctNodes}), except
 * {@link Exact#OFF}, a shared dummy whose values are never read.
 *
 * <p>A node is an {@link ExactNode}; rewritten code keeps its invocation's node in a local and counts into
 * it directly. The tree refers to nodes by number ({@link #cur} is an int), so the call path stores no
 * references (no GC write barrier per call). Node 0 is the thread's root.
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
    ExactNode[] table;
    /** The nodes in creation order (parents before children); {@code nodes[0]} is the root. */
    ExactNode[] nodes;
    /** Nodes in use. */
    int size;
    /** CCT node of the thread's root in the agent's tree. */
    int root;
    /** Next state in the same bucket of {@link Exact}'s table. */
    ExactState next;

    ExactState(long tid, int capacity) {
        this.tid = tid;
        this.table = new ExactNode[capacity * 4];
        this.nodes = new ExactNode[capacity];
        nodes[0] = new ExactNode(-1, -1, 0, 0);
        size = 1;
    }

    /** The child of node {@code parent} for method {@code method} called from the current callsite, with
     *  room for {@code blocks} block counters; created on first use. */
    @ForceInline
    ExactNode child(int parent, int method, int blocks) {
        long key = ((long) site << 32) | (method & 0xffffffffL);
        // Consumed (leaf methods have no exit that resets it, see Exact.exit).
        site = -1;
        ExactNode[] t = table;
        int h = hash(parent, key) & (t.length - 1);
        ExactNode c = t[h];
        if (c != null && c.key == key && c.parent == parent) {
            return c;
        }
        return find(parent, key, h, blocks);
    }

    /** The children of one parent hash into the 32 slots after the parent's base (two cache lines), so a
     *  running method's callees are found in lines that its earlier calls already brought in. */
    @ForceInline
    static int hash(int parent, long key) {
        return parent * 0x9E3779B9 + (int) ((key * 0xBF58476D1CE4E5B9L) >>> 59);
    }

    /** The rest of the probe sequence; creates the node when it is not there. */
    @DontInline
    ExactNode find(int parent, long key, int h, int blocks) {
        ExactNode[] t = table;
        int mask = t.length - 1;
        while (true) {
            ExactNode c = t[h];
            if (c == null) {
                return create(parent, key, h, blocks);
            }
            if (c.key == key && c.parent == parent) {
                return c;
            }
            h = (h + 1) & mask;
        }
    }

    private ExactNode create(int parent, long key, int h, int blocks) {
        int n = size;
        ExactNode c = new ExactNode(key, parent, n, blocks);
        if (n == nodes.length) {
            ExactNode[] bigger = new ExactNode[n * 2];
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
        ExactNode[] t = new ExactNode[table.length * 2];
        int mask = t.length - 1;
        for (int i = 1; i < size; i++) {
            ExactNode c = nodes[i];
            int h = hash(c.parent, c.key) & mask;
            while (t[h] != null) {
                h = (h + 1) & mask;
            }
            t[h] = c;
        }
        table = t;
    }
}
