package kprof.harness;

import java.util.function.LongUnaryOperator;

/** The class {@link ClassLoaderChurn} defines again and again in fresh class loaders. */
public final class ChurnTarget implements LongUnaryOperator {
    @Override
    public long applyAsLong(long seed) {
        long x = seed;
        for (int i = 0; i < 20_000; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }
}
