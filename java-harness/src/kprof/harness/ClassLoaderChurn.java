package kprof.harness;

import java.io.InputStream;
import java.util.function.LongUnaryOperator;

/**
 * Creates and drops thousands of class loaders, each defining its own copy of {@link ChurnTarget} and
 * running it, with periodic GCs so the classes are unloaded while the program runs. Prints
 * {@code classloaderchurn: loaders=N result=R}.
 */
public final class ClassLoaderChurn {
    static final class OneClassLoader extends ClassLoader {
        private final byte[] bytes;

        OneClassLoader(byte[] bytes) {
            super(ClassLoaderChurn.class.getClassLoader());
            this.bytes = bytes;
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            if (name.equals("kprof.harness.ChurnTarget")) {
                synchronized (getClassLoadingLock(name)) {
                    Class<?> c = findLoadedClass(name);
                    if (c == null) {
                        c = defineClass(name, bytes, 0, bytes.length);
                    }
                    return c;
                }
            }
            return super.loadClass(name, resolve);
        }
    }

    public static void main(String[] args) throws Exception {
        int loaders = args.length > 0 ? Integer.parseInt(args[0]) : 3000;
        byte[] bytes;
        try (InputStream in = ClassLoaderChurn.class.getResourceAsStream("ChurnTarget.class")) {
            bytes = in.readAllBytes();
        }
        long result = 0;
        for (int i = 0; i < loaders; i++) {
            Class<?> c = new OneClassLoader(bytes).loadClass("kprof.harness.ChurnTarget");
            LongUnaryOperator op = (LongUnaryOperator) c.getDeclaredConstructor().newInstance();
            result += op.applyAsLong(i + 1);
            if (i % 500 == 499) {
                System.gc();
            }
        }
        System.out.println("classloaderchurn: loaders=" + loaders + " result=" + result);
    }
}
