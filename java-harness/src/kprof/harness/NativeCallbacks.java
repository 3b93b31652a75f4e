package kprof.harness;

import java.lang.reflect.Method;

/**
 * Java called back from native code, at known depths. {@code up} alternates with a JNI native method
 * ({@code libkprof_harness_callbacks.so}, built by build.rs from java-harness/jni, path in the system
 * property {@code kprof.harness.jni}): main → chain → up → [native] → up → [native] → ... → work, so
 * {@code work} is always below exactly {@code depth + 1} frames of {@code up}. A callback that throws
 * through the native frames is caught in {@code chain}, which then calls {@code afterThrow}. Reflection
 * ({@code Method.invoke}: native accessors on JDK 17, method handles on newer JDKs, neither rewritten)
 * calls {@code reflected}. Without the property only the reflection part runs. Prints
 * {@code callbacks: rounds=N jni=on|off checksum=S}.
 */
public final class NativeCallbacks {
    static final int DEPTH = 6;

    /** Calls {@code target.up(depth)} through JNI and returns its result; rethrows what it throws. */
    static native long callUp(NativeCallbacks target, int depth);

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

    public static long reflected(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += i % 3;
        }
        return s;
    }

    static long chain() {
        long s = new NativeCallbacks(false).up(DEPTH);
        try {
            new NativeCallbacks(true).up(DEPTH);
        } catch (IllegalArgumentException e) {
            s += afterThrow(3000);
        }
        return s;
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
                checksum = checksum * 31 + chain();
            }
            checksum = checksum * 31 + viaReflection(m, r);
        }
        System.out.println("callbacks: rounds=" + rounds + " jni=" + (lib != null ? "on" : "off") + " checksum=" + checksum);
    }
}
