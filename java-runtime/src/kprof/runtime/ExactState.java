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
 * it directly. Where the thread is in its tree is the table of children of the running invocation's node, a
 * position in {@link #slots} ({@link #cur} is a long), so the call path stores no references (no GC write
 * barrier per call). Node 0 is the thread's root.
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
    /** Callsite of the call being made (callsite=on): written by the caller, read by the callee; -1 for
     *  calls from native code. */
    public int site = -1;
    /** Invocations entering below the node whose table this is count nothing (calls made by an intrinsic
     *  candidate); -1: none. {@link Exact#OFF}'s is always its {@link #cur}. */
    long muteArm = -1;
    /** Nesting of {@link Exact#mute} brackets. */
    int muteNest;
    /** {@link #site} when the outermost mute bracket opened, restored when it closes. */
    int mutedSite = -1;
    /** The nodes in creation order (parents before children); {@code nodes[0]} is the root. */
    ExactNode[] nodes;
    /** Nodes in use. */
    int size;
    /** The tables of children of all nodes that have been the current node ({@link ExactNode#kids}), each
     *  after a slot that holds its node. One array, so that a lookup is two dependent loads from the state
     *  (the slot, the node's key) rather than four (node array, parent, its table, the node). */
    ExactNode[] slots;
    /** Slots in use. */
    int slotTop;
    /** The node whose callees are being called, the running invocation's, as its table of children
     *  ({@link ExactNode#kids}): the lookup needs nothing else of it. Every node that becomes current gets
     *  a table ({@link #tableOf}), so the table tells the node. */
    public long cur;
    /** The node of the innermost native wrapper running on this thread, the node whose table {@link #cur}
     *  must be while its native code runs (null: none, or one that counts nothing). Set and reset by the
     *  wrappers ({@link Exact#nativeEnter}, {@link Exact#nativeLeave}); read when the native code clears an
     *  exception that Java code it called back threw ({@link Exact#caught}). A node, not its table: the
     *  node's table moves when it grows. */
    ExactNode nativeNode;
    /** CCT node of the thread's root in the agent's tree. */
    int root;
    /** Next state in the same bucket of {@link Exact}'s table. */
    ExactState next;
    /** Where invocations count once the node budget ({@link Exact#nodesLeft}) is spent: one node below the
     *  root that the agent files under {@code [cct_overflow]}; created when first needed. It never becomes
     *  current, so what an overflowing invocation calls is looked up below its caller's node. */
    ExactNode overflow;

    ExactState(Thread owner, long tid, int capacity) {
        this.owner = owner;
        this.tid = tid;
        this.nodes = new ExactNode[capacity];
        nodes[0] = new ExactNode(-1, -1, 0, 0);
        size = 1;
        slots = new ExactNode[Math.max(16, capacity * 2)];
        cur = tableOf(nodes[0]);
    }

    /** The key of a call of {@code method} from the current callsite, which it consumes (leaf methods have
     *  no exit that resets it, see {@link Exact#exit}). */
    @ForceInline
    long key(int method) {
        long key = ((long) site << 32) | (method & 0xffffffffL);
        site = -1;
        return key;
    }

    /** The home slot of {@code key} in table {@code t}: where the lookup looks first. */
    @ForceInline
    static int home(long t, long key) {
        return (int) (t >>> 32) + (hash(key) & (int) t);
    }

    /** Each node has its own table of children, so only siblings collide, and the table of a method that
     *  runs is in the cache when it calls. */
    @ForceInline
    static int hash(long key) {
        return (int) ((key * 0x9E3779B97F4A7C15L) >>> 40);
    }

    /** A table of children: {@code base << 32 | (length - 1)}, the slots {@code base .. base + length - 1}
     *  of {@link #slots}. Never 0: the slot before {@code base} holds the table's node. */
    static long table(int base, int length) {
        return ((long) base << 32) | (length - 1);
    }

    /** The node of {@code key} in table {@code t}, the current node's, with room for {@code blocks} block
     *  counters: created when it is not there (the overflow node once the budget is spent). The prologues'
     *  miss path ({@link Exact#enter} looks in the home slot first). */
    ExactNode find(long t, long key, int blocks) {
        int base = (int) (t >>> 32);
        int mask = (int) t;
        int h = hash(key) & mask;
        while (true) {
            ExactNode c = slots[base + h];
            if (c == null) {
                return create(slots[base - 1], key, base + h, blocks);
            }
            if (c.key == key) {
                return c;
            }
            h = (h + 1) & mask;
        }
    }

    /** The table of children of {@code c}, which becomes the current node: made when it first does. */
    @ForceInline
    long tableOf(ExactNode c) {
        long t = c.kids;
        return t != 0 ? t : newTable(c);
    }

    @DontInline
    private long newTable(ExactNode c) {
        long t = allocate(c, 4);
        c.kids = t;
        return t;
    }

    /** A new table of {@code length} (a power of two) free slots in {@link #slots} for node {@code owner},
     *  which goes in the slot before it; aligned to its length up to 16 slots so that a small table sits in
     *  one cache line. Tables a node outgrew are left behind. */
    private long allocate(ExactNode owner, int length) {
        int align = Math.min(length, 16) - 1;
        int base = (slotTop + 1 + align) & ~align;
        int end = base + length;
        if (end > slots.length) {
            int n = slots.length;
            while (n < end) {
                n *= 2;
            }
            ExactNode[] bigger = new ExactNode[n];
            System.arraycopy(slots, 0, bigger, 0, slotTop);
            slots = bigger;
        }
        slots[base - 1] = owner;
        slotTop = end;
        return table(base, length);
    }

    private ExactNode create(ExactNode p, long key, int slot, int blocks) {
        // A racy count (no atomics on any path that rewritten code runs): lost updates can only let a few
        // more nodes in.
        if (nodesLeft <= 0) {
            return overflowNode();
        }
        nodesLeft--;
        ExactNode c = append(new ExactNode(key, p.id, size, blocks));
        c.parentKids = p.kids;
        slots[slot] = c;
        if (++p.kidCount * 4 > (int) p.kids + 1) {
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

    /** Doubles the table of children of {@code p}, the current node: its children's {@link
     *  ExactNode#parentKids} and {@link #cur} follow it. (No mute is armed on it: a muted node gets no
     *  children.) */
    private void grow(ExactNode p) {
        long old = p.kids;
        int oldBase = (int) (old >>> 32);
        int oldLength = (int) old + 1;
        long t = allocate(p, oldLength * 2);
        slots[oldBase - 1] = null;
        int base = (int) (t >>> 32);
        int mask = (int) t;
        for (int i = oldBase; i < oldBase + oldLength; i++) {
            ExactNode c = slots[i];
            if (c != null) {
                slots[i] = null;
                int h = hash(c.key) & mask;
                while (slots[base + h] != null) {
                    h = (h + 1) & mask;
                }
                slots[base + h] = c;
                c.parentKids = t;
            }
        }
        p.kids = t;
        cur = t;
    }
}
