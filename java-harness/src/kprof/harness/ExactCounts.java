package kprof.harness;

/**
 * Calls whose number in each calling context is known by construction, for the exact-mode tests. Each
 * part runs under its own method of this class, called once per round from {@code main} (R rounds, the
 * first argument, default 10):
 *
 * <ul>
 *   <li>{@code recursion}: {@code down(9)} recurses to {@code down(0)}: ten nested contexts of {@code down},
 *       R calls each; the innermost calls {@code leaf} once.
 *   <li>{@code twoSites}: {@code target} is called 3 times from one callsite and 5 times from another of the
 *       same method: two contexts of R×3 and R×5 calls (one of R×8 when callsites are merged).
 *   <li>{@code exceptions}: {@code thrower(4)} recurses to {@code thrower(0)}, which throws; {@code exceptions}
 *       catches it and calls {@code afterCatch} (a child of {@code exceptions}, not of any thrower).
 *       {@code rethrowing} catches one at its own level and calls {@code inHandler} from its handler.
 *   <li>{@code threads}: 4 threads each call {@code perThread} 250 times ({@code Worker.run} is the root of
 *       each thread's contexts: R×4 calls of {@code run}, R×1000 of {@code perThread}).
 *   <li>{@code branches}: {@code branchy(i)} for i = 0..9, whose basic blocks run a known number of times.
 *   <li>{@code longLoop}: {@code branchy(100000)}, one invocation whose loop runs some 900,000 bytecodes.
 *   <li>{@code intrinsicThenCall}: builds a string with StringBuilder (intrinsic candidates whose bodies call
 *       rewritten JDK code, counted nothing), then calls {@code afterIntrinsic}: R calls, below
 *       {@code intrinsicThenCall} and nowhere else.
 *   <li>{@code linking}: calls {@code Lazy.compute} 7 times from one callsite. The first call of the run
 *       loads {@code Lazy} (HotSpot calls the class loader's {@code loadClass} in Java) and initializes it
 *       ({@code <clinit>}, which calls {@code table}) between the caller's callsite and the callee: one
 *       context of R×7 calls at that callsite, and {@code Lazy.<clinit>} once below the same call.
 *   <li>{@code polymorphic}: one callsite calls {@code Shape.area} of twelve classes, {@code Shape$k}'s k + 1
 *       times: twelve contexts at that callsite, R×(k+1) calls each.
 *   <li>{@code manySites}: forty callsites in one method call {@code target}, the i-th of them i + 1 times:
 *       forty contexts, R×(i+1) calls each (more callsites than a context's table has slots).
 *   <li>{@code wide}: {@code fan(14)} calls {@code fan(n - 1)} from two callsites down to {@code fan(0)}: a
 *       complete binary tree of contexts, 2^k of {@code fan} at depth k (32,767 in all), R calls each (one
 *       context of R×2^k calls per depth when callsites are merged). Large enough that the agent merges it
 *       on several threads.
 * </ul>
 *
 * Prints {@code exactcounts: rounds=R checksum=C}.
 */
public final class ExactCounts {
    static long sink;

    static int leaf(int x) {
        return x * 31 + 7;
    }

    static int down(int n) {
        if (n == 0) {
            return leaf(n);
        }
        return down(n - 1) + 1;
    }

    static int recursion() {
        return down(9);
    }

    static int target(int x) {
        return x ^ 0x5a5a;
    }

    static int twoSites() {
        int s = 0;
        for (int i = 0; i < 3; i++) {
            s += target(i);
        }
        for (int i = 0; i < 5; i++) {
            s -= target(i);
        }
        return s;
    }

    static final class Boom extends RuntimeException {
        Boom() {
            super("boom", null, false, false);
        }
    }

    static int thrower(int n) {
        if (n == 0) {
            throw new Boom();
        }
        return thrower(n - 1) + 1;
    }

    static int afterCatch(int x) {
        return x + 1;
    }

    static int inHandler(int x) {
        return x + 2;
    }

    static int rethrowing() {
        try {
            return thrower(2);
        } catch (Boom e) {
            return inHandler(1);
        }
    }

    static int exceptions() {
        int s = 0;
        try {
            s += thrower(4);
        } catch (Boom e) {
            s += afterCatch(s);
        }
        return s + rethrowing();
    }

    static final class Worker implements Runnable {
        long sum;

        @Override
        public void run() {
            for (int i = 0; i < 250; i++) {
                sum += perThread(i);
            }
        }
    }

    static int perThread(int i) {
        return i * i;
    }

    static long threads() throws InterruptedException {
        Worker[] workers = new Worker[4];
        Thread[] ts = new Thread[4];
        for (int i = 0; i < 4; i++) {
            workers[i] = new Worker();
            ts[i] = new Thread(workers[i], "exactcounts-" + i);
            ts[i].start();
        }
        long s = 0;
        for (int i = 0; i < 4; i++) {
            ts[i].join();
            s += workers[i].sum;
        }
        return s;
    }

    /** Blocks: the test for {@code i % 3}, {@code r = 1} (i = 0, 3, 6, 9: 4 of 10), {@code r = 2} (6 of 10),
     *  the loop's start, its test (i + 1 times), its body (i times) and the return. */
    static int branchy(int i) {
        int r;
        if (i % 3 == 0) {
            r = 1;
        } else {
            r = 2;
        }
        for (int k = 0; k < i; k++) {
            r += k;
        }
        return r;
    }

    static int branches() {
        int s = 0;
        for (int i = 0; i < 10; i++) {
            s += branchy(i);
        }
        return s;
    }

    static int longLoop() {
        return branchy(100_000);
    }

    static int intrinsicThenCall(int r) {
        StringBuilder sb = new StringBuilder();
        sb.append("round ").append(r);
        return afterIntrinsic(sb.length());
    }

    static int afterIntrinsic(int x) {
        return x + 3;
    }

    static final class Lazy {
        static final int[] TABLE = table();

        static int[] table() {
            int[] t = new int[8];
            for (int i = 0; i < t.length; i++) {
                t[i] = i * i;
            }
            return t;
        }

        static int compute(int i) {
            return TABLE[i & 7] + i;
        }
    }

    static int linking() {
        int s = 0;
        for (int i = 0; i < 7; i++) {
            s += Lazy.compute(i);
        }
        return s;
    }

    interface Shape {
        int area(int x);
    }

    static final class Shape0 implements Shape {
        public int area(int x) {
            return x * 3 + 0;
        }
    }

    static final class Shape1 implements Shape {
        public int area(int x) {
            return x * 4 + 1;
        }
    }

    static final class Shape2 implements Shape {
        public int area(int x) {
            return x * 5 + 2;
        }
    }

    static final class Shape3 implements Shape {
        public int area(int x) {
            return x * 6 + 3;
        }
    }

    static final class Shape4 implements Shape {
        public int area(int x) {
            return x * 7 + 4;
        }
    }

    static final class Shape5 implements Shape {
        public int area(int x) {
            return x * 8 + 5;
        }
    }

    static final class Shape6 implements Shape {
        public int area(int x) {
            return x * 9 + 6;
        }
    }

    static final class Shape7 implements Shape {
        public int area(int x) {
            return x * 10 + 7;
        }
    }

    static final class Shape8 implements Shape {
        public int area(int x) {
            return x * 11 + 8;
        }
    }

    static final class Shape9 implements Shape {
        public int area(int x) {
            return x * 12 + 9;
        }
    }

    static final class Shape10 implements Shape {
        public int area(int x) {
            return x * 13 + 10;
        }
    }

    static final class Shape11 implements Shape {
        public int area(int x) {
            return x * 14 + 11;
        }
    }

    static int polymorphic() {
        // A local array, not a static field: a static initializer of the main class runs from the launcher's
        // native code, at a thread's root.
        Shape[] shapes = {
            new Shape0(), new Shape1(), new Shape2(), new Shape3(), new Shape4(), new Shape5(), new Shape6(), new Shape7(), new Shape8(), new Shape9(), new Shape10(), new Shape11()
        };
        int s = 0;
        for (int k = 0; k < shapes.length; k++) {
            for (int i = 0; i <= k; i++) {
                s += shapes[k].area(i);
            }
        }
        return s;
    }

    static int manySites() {
        int s = 0;
        for (int i = 0; i <= 0; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 1; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 2; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 3; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 4; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 5; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 6; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 7; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 8; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 9; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 10; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 11; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 12; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 13; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 14; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 15; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 16; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 17; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 18; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 19; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 20; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 21; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 22; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 23; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 24; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 25; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 26; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 27; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 28; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 29; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 30; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 31; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 32; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 33; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 34; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 35; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 36; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 37; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 38; i++) {
            s += target(i);
        }
        for (int i = 0; i <= 39; i++) {
            s += target(i);
        }
        return s;
    }

    static final int WIDE_DEPTH = 14;

    static int fan(int n) {
        if (n == 0) {
            return 1;
        }
        int left = fan(n - 1);
        int right = fan(n - 1);
        return left + right;
    }

    static int wide() {
        return fan(WIDE_DEPTH);
    }

    public static void main(String[] args) throws InterruptedException {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 10;
        long checksum = 0;
        for (int r = 0; r < rounds; r++) {
            checksum = checksum * 31 + recursion();
            checksum = checksum * 31 + twoSites();
            checksum = checksum * 31 + exceptions();
            checksum = checksum * 31 + threads();
            checksum = checksum * 31 + branches();
            checksum = checksum * 31 + longLoop();
            checksum = checksum * 31 + intrinsicThenCall(r);
            checksum = checksum * 31 + linking();
            checksum = checksum * 31 + polymorphic();
            checksum = checksum * 31 + manySites();
            checksum = checksum * 31 + wide();
        }
        sink = checksum;
        System.out.println("exactcounts: rounds=" + rounds + " checksum=" + checksum);
    }
}
