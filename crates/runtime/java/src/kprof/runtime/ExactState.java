package kprof.runtime;

/**
 * The per-thread state of exact mode: where the thread is in its own calling context tree, and the native
 * memory that tree lives in. One per Java thread, found by {@link Exact#enter}'s callers ({@link Ef#state},
 * {@link Exact#current}). Only its own thread writes it (the merge, under this state's monitor, reads the
 * tree through {@link #rootTable}), except {@link Exact#OFF}, a shared state whose values are never read.
 *
 * <p>The tree is native memory ({@link Exact} describes the layout): a context is a 64-byte entry in its
 * parent's table of children, in the slot of the call's site, which the caller names ({@link #site}), so a call touches one
 * cache line of the tree and the garbage collector none. Data only: the logic is in {@link Exact} (this
 * class is compiled on its own, before the stub of java.lang.Thread that names it).
 */
public final class ExactState {
    /** The owning thread's id ({@code Thread.getId()}); never reused by the JVM. */
    final long tid;
    /** The owning thread (null for {@link Exact#OFF}): with Thread fields, its {@code kprof$x} refers to this
     *  state while the state is in {@link Exact}'s table. */
    final Thread owner;
    /** The table of children of the running invocation's context (the address of its slot 0). Never 0. */
    public long cur;
    /** The callsite of the call being made: its slot in {@link #cur} (1, 2, ... in code order), written by the
     *  caller, read and reset by the callee; 0: unknown (a call from native code or the JVM). Always within the
     *  table's slots and its overflow entry. */
    public int site;
    /** The callsite of a call at a site past its method's table ({@link Exact#atFar}, which names the table's
     *  overflow entry as its slot), read by the callee's miss path only then. */
    public int far;
    /** {@link #cur}, {@link #site} and {@link #far} when the outermost {@link Exact#mute} bracket opened (calls
     *  made by an intrinsic candidate count nothing: {@link #cur} is {@link Exact#MUTED} while they run),
     *  restored when it closes. */
    long mutedCur;
    int mutedSite;
    int mutedFar;
    /** Nesting of {@link Exact#mute} brackets. */
    int muteNest;
    /** The entry of the innermost native wrapper running on this thread, whose table {@link #cur} must be
     *  while its native code runs (0: none, or one that counts nothing). Set and reset by the wrappers
     *  ({@link Exact#nativeEnter}, {@link Exact#nativeLeave}); read when the native code clears an exception
     *  that Java code it called back threw ({@link Exact#caught}). */
    long nativeNode;
    /** The table of the thread's root, and the thread's overflow table (see {@link Exact#OVERFLOW_KEY}). */
    long rootTable;
    long overflowTable;
    /** The arena: next free byte and end of the current chunk, the chunks (address and size, to free them),
     *  their bytes. */
    long top;
    long end;
    long[] chunks = new long[4];
    int chunkCount;
    long bytes;
    /** The session ({@code Exact.init}) whose budget the arena's bytes came from. */
    int session;
    /** CCT node of the thread's root in the agent's tree. */
    int root;
    /** Next state in the same bucket of {@link Exact}'s table, or of its list of retired states. */
    ExactState next;
    /** Its tree may still be merged: set when the state enters {@link Exact}'s table (under its lock),
     *  cleared under this state's monitor once the tree is merged for the last time (thread ended, profiling
     *  stopped) or retired by a new session; merges hold the monitor and check it. */
    boolean listed;

    ExactState(Thread owner, long tid) {
        this.owner = owner;
        this.tid = tid;
    }
}
