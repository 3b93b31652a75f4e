package kprof.harness;

/**
 * Stand-in for the helpers of the bytecode and exact modes in kprof's class-file tests: snippets call
 * {@link #enter()} in a prologue and {@link #count(int, int)} at basic blocks, with an int local that the
 * snippets update (`iload N; sipush K; invokestatic count(II)I; istore N`).
 */
public final class RewriteHelper {
    public static long enters;
    public static long blocks;

    private RewriteHelper() {}

    public static Object enter() {
        enters++;
        return null;
    }

    public static int count(int local, int size) {
        blocks++;
        return local + size;
    }
}
