package kprof.runtime;

/**
 * The helper that {@code kprof rewrite --mode probe} calls: {@link #enter()} once per invocation (its result is
 * kept in a new local) and {@link #block(Probe, int)} at the start of every basic block. The probe mode exists to
 * prove the class-file engine on every class, the JDK's own included, so both are leaf code: no allocation, no
 * JDK calls, nothing that could recurse into rewritten code. Counters are plain statics (races lose counts,
 * never correctness).
 */
public final class Probe {
    /** Invocations seen by {@link #enter()}. */
    public static long entries;
    /** Blocks seen by {@link #block(Probe, int)}. */
    public static long blocks;
    /** Sum of block ids seen (keeps the argument live). */
    public static long idSum;

    private Probe() {}

    /** Called in the prologue of every rewritten method; the result goes into a new local. */
    public static Probe enter() {
        entries++;
        return null;
    }

    /** Called at the start of every basic block with the method's local and the block's id. */
    public static void block(Probe local, int id) {
        blocks++;
        idSum += id;
    }
}
