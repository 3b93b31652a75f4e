package kprof.harness;

import java.lang.reflect.Method;

/**
 * Java called back from native code, at known depths. {@code up} alternates with a JNI native method
 * ({@code libkprof_harness_callbacks.so}, built by build.rs from java-harness/jni, path in the system
 * property {@code kprof.harness.jni}): main → chain → up → [native] → up → [native] → ... → work, so
 * {@code work} is always below exactly {@code depth + 1} frames of {@code up}. A callback that throws
 * through the native frames is caught in {@code chain}, which then calls {@code afterThrow}; one that throws
 * through two native frames is caught by the outer native code ({@code catchThenCall}: JNI
 * {@code ExceptionClear}, in the first round {@code ExceptionDescribe}, which prints it to stderr), which
 * then calls {@code afterCatch} back: {@code afterCatch} is always below main → chain → catchThenCall. Reflection
 * ({@code Method.invoke}: native accessors on JDK 17, method handles on newer JDKs, neither rewritten)
 * calls {@code reflected}. Without the property only the reflection part runs. Prints
 * {@code callbacks: rounds=N jni=on|off checksum=S}.
 */
public final class NativeCallbacks {
    static final int DEPTH = 6;

    /** Calls {@code target.up(depth)} through JNI and returns its result; rethrows what it throws. */
    static native long callUp(NativeCallbacks target, int depth);

    /** Calls {@code thrower.up(depth)}, catches what it throws (clears it, or describes it when
     *  {@code describe}), then calls {@link #afterCatch} and returns its result plus 1000. */
    static native long catchThenCall(NativeCallbacks thrower, int depth, boolean describe);

    final boolean throwAtBottom;

    NativeCallbacks(boolean throwAtBottom) {
        this.throwAtBottom = throwAtBottom;
    }

    long up(int depth) {
        if (depth == 0) {
            if (throwAtBottom) {
                throw new IllegalArgumentException("through native frames");
            }
            return work(4000);
        }
        return callUp(this, depth - 1) + 1;
    }

    static long work(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += (long) i * 7 % 11;
        }
        return s;
    }

    static long afterThrow(int n) {
        long s = 1;
        for (int i = 0; i < n; i++) {
            s = s * 31 + i % 5;
        }
        return s;
    }

    static long afterCatch(int n) {
        long s = 7;
        for (int i = 0; i < n; i++) {
            s = s * 17 + i % 7;
        }
        return s;
    }

    public static long reflected(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += i % 3;
        }
        return s;
    }

    static long chain(boolean first) {
        long s = new NativeCallbacks(false).up(DEPTH);
        try {
            new NativeCallbacks(true).up(DEPTH);
        } catch (IllegalArgumentException e) {
            s += afterThrow(3000);
        }
        // Last: in bytecode mode the caught callback's frames stay on the reified stack until chain returns.
        return s + catchThenCall(new NativeCallbacks(true), 2, first);
    }

    static long viaReflection(Method m, int r) throws Exception {
        return (Long) m.invoke(null, 3000 + r % 3);
    }

    public static void main(String[] args) throws Exception {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 300;
        String lib = System.getProperty("kprof.harness.jni");
        if (lib != null) {
            System.load(lib);
        }
        Method m = NativeCallbacks.class.getMethod("reflected", int.class);
        long checksum = 0;
        for (int r = 0; r < rounds; r++) {
            if (lib != null) {
                checksum = checksum * 31 + chain(r == 0);
            }
            checksum = checksum * 31 + viaReflection(m, r);
        }
        System.out.println("callbacks: rounds=" + rounds + " jni=" + (lib != null ? "on" : "off") + " checksum=" + checksum);
    }
}
