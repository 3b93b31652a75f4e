package java.lang;

/**
 * Compile-time stand-in for java.lang.Thread: only what the runtime helpers use, with the fields the agent adds
 * to the real class when it starts with the JVM (crates/agent/src/engine/rewriting/thread_fields.rs). Never shipped:
 * build.rs compiles the helpers against it (--patch-module) and packs only the helpers.
 */
public class Thread implements Runnable {
    /** Bytecode mode: the thread's state, its counter, the depth of its reified stack, where the stack is and
     *  how many entries it holds (see kprof.runtime.T). */
    public transient kprof.runtime.T kprof$t;
    public transient int kprof$c;
    public transient int kprof$sp;
    public transient long kprof$st;
    public transient int kprof$cap;
    /** Exact mode: the thread's state (see kprof.runtime.Ef). */
    public transient kprof.runtime.ExactState kprof$x;

    public static native Thread currentThread();

    public long getId() {
        return 0;
    }

    public final String getName() {
        return null;
    }

    public void run() {}
}
