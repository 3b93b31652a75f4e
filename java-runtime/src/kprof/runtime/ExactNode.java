package kprof.runtime;

/**
 * One calling context of a thread's tree in exact mode: the counters rewritten code adds to (fields, so
 * counting needs no range check), its key and its place in the tree. Its thread writes the counters; the
 * merge reads them and writes the {@code merged*} fields and {@link #cct} under {@link Exact}'s lock.
 */
public final class ExactNode {
    /** Invocations in this context. */
    public long calls;
    /** Bytecodes executed by them ({@code bb=off}). */
    public long bytecodes;
    /** Method id (low 32 bits) and callsite bci in the caller (high 32 bits). */
    final long key;
    /** The parent's number in the thread's tree (-1 for the root). */
    final int parent;
    /** This node's number: its index in {@link ExactState#nodes}. */
    final int id;
    /** One counter per basic block ({@code bb=on}), else null. */
    public final long[] blocks;
    /** Where the children are: {@link ExactState#table} of this node's children in the thread's
     *  {@link ExactState#slots} (0: none yet; made when the node first becomes the current node). */
    long kids;
    /** The parent's {@link #kids}, for the return: kept in step when the parent's table moves. 0 (no
     *  table) for the root, {@link Exact#DUMMY} and the overflow node, whose invocations never move the
     *  current node, so their returns must not either. */
    long parentKids;
    /** Children in the table {@link #kids}. */
    int kidCount;
    /** Counters as last merged into the agent's tree. */
    long mergedCalls;
    long mergedBytecodes;
    long[] mergedBlocks;
    /** The agent's CCT node of this context (0 until the first merge). */
    int cct;

    ExactNode(long key, int parent, int id, int blocks) {
        this.key = key;
        this.parent = parent;
        this.id = id;
        this.blocks = blocks > 0 ? new long[blocks] : null;
    }
}
