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
    /** Key of {@link #overflow}: method id -1, which the agent maps to its overflow node. */
    static final long OVERFLOW_KEY = 0xffffffffL;
    /** Nodes that threads may still create, over all threads: the trees live on the application's heap,
     *  and a deeply recursive program has more call paths than any heap holds. Set by {@link Exact#init}. */
    static int nodesLeft;

    /** The owning thread's id ({@code Thread.getId()}); never reused by the JVM. */
    final long tid;
    /** The owning thread (null for {@link Exact#OFF}): with Thread fields, its {@code kprof$x} refers to this
     *  state while the state is in {@link Exact}'s table. */
    final Thread owner;
    /** The node whose callees are being called: the running invocation's node. */
    public int cur;
    /** Callsite of the call being made (callsite=on): written by the caller, read by the callee; -1 for
     *  calls from native code. */
    public int site = -1;
    /** Invocations entering below this node count nothing (calls made by an intrinsic candidate); -1: none. */
    int muteArm = -1;
    /** Nesting of {@link Exact#mute} brackets. */
    int muteNest;
    /** The nodes in creation order (parents before children); {@code nodes[0]} is the root. */
    ExactNode[] nodes;
    /** Nodes in use. */
    int size;
    /** CCT node of the thread's root in the agent's tree. */
    int root;
    /** Next state in the same bucket of {@link Exact}'s table. */
    ExactState next;
    /** Where invocations count once the node budget ({@link Exact#nodesLeft}) is spent: one node below the
     *  root that the agent files under {@code [cct_overflow]}; created when first needed. It never becomes
     *  {@link #cur}, so what an overflowing invocation calls is looked up below its caller's node. */
    ExactNode overflow;

    ExactState(Thread owner, long tid, int capacity) {
        this.owner = owner;
        this.tid = tid;
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
        ExactNode p = nodes[parent];
        ExactNode[] k = p.kids;
        if (k != null) {
            ExactNode c = k[hash(key) & (k.length - 1)];
            if (c != null && c.key == key) {
                return c;
            }
        }
        return find(p, key, blocks);
    }

    /** Each node has its own table of children, so only siblings collide, and the table of a method that
     *  runs is in the cache when it calls. */
    @ForceInline
    static int hash(long key) {
        return (int) ((key * 0x9E3779B97F4A7C15L) >>> 40);
    }

    /** The rest of the probe sequence; creates the node when it is not there. */
    @DontInline
    ExactNode find(ExactNode p, long key, int blocks) {
        ExactNode[] k = p.kids;
        if (k == null) {
            k = new ExactNode[4];
            p.kids = k;
        }
        int mask = k.length - 1;
        int h = hash(key) & mask;
        while (true) {
            ExactNode c = k[h];
            if (c == null) {
                return create(p, key, h, blocks);
            }
            if (c.key == key) {
                return c;
            }
            h = (h + 1) & mask;
        }
    }

    private ExactNode create(ExactNode p, long key, int h, int blocks) {
        // A racy count (no atomics on any path that rewritten code runs): lost updates can only let a few
        // more nodes in.
        if (nodesLeft <= 0) {
            return overflowNode();
        }
        nodesLeft--;
        ExactNode c = append(new ExactNode(key, p.id, size, blocks));
        p.kids[h] = c;
        if (++p.kidCount * 4 > p.kids.length) {
            grow(p);
        }
        return c;
    }

    /** The node of invocations whose context found the budget spent. Its block counters (bb=on) take any
     *  block index and are not reported. */
    private ExactNode overflowNode() {
        ExactNode o = overflow;
        if (o == null) {
            o = append(new ExactNode(OVERFLOW_KEY, 0, size, 65536));
            overflow = o;
        }
        return o;
    }

    /** Adds node {@code c} (numbered {@link #size}) to {@link #nodes}. */
    private ExactNode append(ExactNode c) {
        int n = size;
        if (n == nodes.length) {
            ExactNode[] bigger = new ExactNode[n * 2];
            System.arraycopy(nodes, 0, bigger, 0, n);
            nodes = bigger;
        }
        nodes[n] = c;
        size = n + 1;
        return c;
    }

    /** Doubles a node's table of children. */
    private static void grow(ExactNode p) {
        ExactNode[] old = p.kids;
        ExactNode[] k = new ExactNode[old.length * 2];
        int mask = k.length - 1;
        for (ExactNode c : old) {
            if (c != null) {
                int h = hash(c.key) & mask;
                while (k[h] != null) {
                    h = (h + 1) & mask;
                }
                k[h] = c;
            }
        }
        p.kids = k;
    }
}
