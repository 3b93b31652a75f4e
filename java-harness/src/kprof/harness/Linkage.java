package kprof.harness;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.function.Function;
import java.util.function.IntBinaryOperator;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

/**
 * Single-threaded work with fixed input in which everything the JDK links or initializes on first use
 * happens inside the methods being profiled: each phase's first run links its invokedynamic call sites
 * (method references such as {@code Integer::sum} passed to {@code HashMap.merge}, lambdas, a record's
 * {@code toString}/{@code equals}/{@code hashCode} through {@code ObjectMethods}, {@code String}
 * concatenation through {@code StringConcatFactory}), initializes classes (a {@code ClassValue}, a
 * {@code ThreadLocal} with an initial value, streams and collectors) and runs a string switch. The same
 * phases then repeat, linked, so that the profile also has steady-state work after each linkage. Prints {@code linkage: rounds=N checksum=C}. Used by the determinism test of bytecode mode: the
 * bootstraps run JDK code the rewriter leaves alone, and what that code calls must count the same in
 * every run.
 */
public final class Linkage {
    record Point(int x, int y) {
        int dist2() {
            return x * x + y * y;
        }
    }

    record Named(String name, int weight, Point at) {}

    /** Per class, a name computed once (ClassValue.computeValue runs on first get). */
    static final ClassValue<String> SHORT_NAMES = new ClassValue<>() {
        @Override
        protected String computeValue(Class<?> type) {
            String n = type.getName();
            return n.substring(n.lastIndexOf('.') + 1);
        }
    };

    /** A per-thread scratch buffer, made by its initial-value supplier on first get. */
    static final ThreadLocal<int[]> SCRATCH = ThreadLocal.withInitial(() -> new int[32]);

    static String word(int i) {
        char[] buf = new char[6];
        int n = 0;
        int v = i;
        do {
            buf[n++] = (char) ('a' + v % 26);
            v /= 26;
        } while (v > 0);
        return new String(buf, 0, n);
    }

    /** The shape of the reported program: the first HashMap.merge with Integer::sum links its call site. */
    static long mergeCounts(int n, int seed) {
        Map<String, Integer> counts = new HashMap<>();
        int x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 1103515245 + 12345;
            counts.merge(word((x >>> 16) % 700), 1, Integer::sum);
        }
        long sum = 0;
        for (Map.Entry<String, Integer> e : new TreeMap<>(counts).entrySet()) {
            sum = sum * 31 + e.getKey().length() * e.getValue();
        }
        return sum;
    }

    /** A string switch (hash codes, then equals) on words made on the spot. */
    static int classify(String s) {
        switch (s) {
            case "a":
                return 1;
            case "b":
            case "c":
                return 2;
            case "ba":
                return 3;
            case "zz":
                return 4;
            default:
                return s.length() > 1 ? 5 : 0;
        }
    }

    static long switches(int n) {
        long sum = 0;
        for (int i = 0; i < n; i++) {
            sum += classify(word(i % 900));
        }
        return sum;
    }

    /** Records: toString, equals and hashCode are bootstrapped through ObjectMethods on first call. */
    static long records(int n) {
        long sum = 0;
        Map<Point, Integer> seen = new HashMap<>();
        for (int i = 0; i < n; i++) {
            Point p = new Point(i % 37, i % 11);
            Named named = new Named(word(i % 50), i % 7, p);
            sum += named.toString().length();
            seen.merge(p, 1, Integer::sum);
            if (named.equals(new Named(named.name(), named.weight(), new Point(p.x(), p.y())))) {
                sum += p.dist2();
            }
        }
        return sum + seen.size();
    }

    /** String concatenation with + (StringConcatFactory), of several shapes. */
    static long concat(int n) {
        long sum = 0;
        for (int i = 0; i < n; i++) {
            String a = "w" + i;
            String b = a + ':' + (i * 3L) + '/' + (i % 2 == 0);
            String c = b + word(i % 40) + 1.5f;
            sum += c.length() + a.charAt(a.length() - 1);
        }
        return sum;
    }

    /** Lambdas and method references, each linked on first use, then called many times. */
    static long lambdas(int n) {
        IntBinaryOperator mix = (a, b) -> a * 31 + b;
        Function<String, Integer> len = String::length;
        Function<String, String> upper = s -> s.toUpperCase(java.util.Locale.ROOT);
        Supplier<List<Point>> fresh = ArrayList::new;
        List<Point> points = fresh.get();
        long sum = 0;
        for (int i = 0; i < n; i++) {
            sum += mix.applyAsInt(i, i % 13);
            sum += len.andThen(k -> k + 1).apply(upper.apply(word(i % 300)));
            points.add(new Point(i % 101, (i * 7) % 103));
        }
        points.sort(Comparator.comparingInt(Point::x).thenComparing(Point::y, Comparator.reverseOrder()));
        for (int i = 0; i < points.size(); i += 17) {
            sum = sum * 7 + points.get(i).dist2();
        }
        sum += Optional.of(points.get(0)).map(Point::dist2).orElse(-1);
        return sum;
    }

    /** Streams and collectors: lambdas linked inside the JDK's own stream code too. */
    static long streams(int n) {
        Map<Integer, Long> byRest = IntStream.range(0, n)
                .filter(i -> i % 3 != 0)
                .boxed()
                .collect(Collectors.groupingBy(i -> i % 10, TreeMap::new, Collectors.counting()));
        long sum = byRest.values().stream().mapToLong(Long::longValue).sum();
        sum += IntStream.range(0, n).map(i -> i * i % 17).sum();
        String joined = IntStream.range(0, 40).mapToObj(Linkage::word).collect(Collectors.joining(","));
        return sum + joined.length();
    }

    /** A ClassValue and a ThreadLocal with an initial value, both computed on first get. */
    static long perClassAndThread(int n) {
        long sum = 0;
        Class<?>[] types = {Point.class, Named.class, Linkage.class, String.class, Integer.class};
        for (int i = 0; i < n; i++) {
            sum += SHORT_NAMES.get(types[i % types.length]).length();
            int[] scratch = SCRATCH.get();
            scratch[i & 31] += i;
            sum += scratch[(i * 7) & 31] & 0xff;
        }
        return sum;
    }

    static long round(int r) {
        long c = mergeCounts(8000, r + 1);
        c = c * 31 + switches(6000);
        c = c * 31 + records(3000);
        c = c * 31 + concat(3000);
        c = c * 31 + lambdas(3000);
        c = c * 31 + streams(4000);
        c = c * 31 + perClassAndThread(5000);
        return c;
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 3;
        long checksum = 0;
        for (int r = 0; r < rounds; r++) {
            checksum = checksum * 131 + round(r);
        }
        StringBuilder out = new StringBuilder();
        out.append("linkage: rounds=").append(rounds).append(" checksum=").append(checksum);
        System.out.println(out.toString());
    }
}
