package kprof.harness;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A fixed amount of deterministic, CPU-bound work in one thread, with a realistic mix of calls:
 * recursion, hashing, sorting with comparators, array arithmetic and string building. The work depends
 * only on the argument (rounds, default 200), so every run does the same work and prints the same
 * checksum: {@code fixedwork: rounds=N checksum=C} (and the time the work took on stderr). Used for overhead benchmarks and deterministic
 * profiles.
 */
public final class FixedWork {
    static final class Point {
        final int x, y;

        Point(int x, int y) {
            this.x = x;
            this.y = y;
        }

        int dist2() {
            return x * x + y * y;
        }
    }

    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static int sieve(int n) {
        boolean[] composite = new boolean[n + 1];
        int count = 0;
        for (int i = 2; i <= n; i++) {
            if (!composite[i]) {
                count++;
                for (long j = (long) i * i; j <= n; j += i) {
                    composite[(int) j] = true;
                }
            }
        }
        return count;
    }

    static long wordCounts(int words, long seed) {
        Map<String, Integer> counts = new HashMap<>();
        long x = seed;
        for (int i = 0; i < words; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            String w = word(x);
            counts.merge(w, 1, Integer::sum);
        }
        long sum = 0;
        for (Map.Entry<String, Integer> e : counts.entrySet()) {
            sum += (long) e.getKey().hashCode() * e.getValue();
        }
        return sum;
    }

    static String word(long x) {
        StringBuilder sb = new StringBuilder(6);
        long v = (x >>> 33) % 20000;
        for (int i = 0; i < 4; i++) {
            sb.append((char) ('a' + (v % 26)));
            v /= 26;
        }
        return sb.toString();
    }

    static long sortPoints(int n, long seed) {
        List<Point> pts = new ArrayList<>(n);
        long x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            pts.add(new Point((int) (x >>> 40) % 1000, (int) (x >>> 20) % 1000));
        }
        pts.sort(Comparator.comparingInt(Point::dist2).thenComparingInt(p -> p.x));
        long sum = 0;
        for (int i = 0; i < n; i += 97) {
            sum += pts.get(i).dist2();
        }
        return sum;
    }

    static double matmul(int n, long seed) {
        double[][] a = new double[n][n], b = new double[n][n], c = new double[n][n];
        long x = seed;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                a[i][j] = (x >>> 40) / 1e6;
                b[j][i] = (x >>> 20 & 0xfffff) / 1e6;
            }
        }
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < n; k++) {
                double aik = a[i][k];
                for (int j = 0; j < n; j++) {
                    c[i][j] += aik * b[k][j];
                }
            }
        }
        double trace = 0;
        for (int i = 0; i < n; i++) {
            trace += c[i][i];
        }
        return trace;
    }

    static long arraysWork(int n, long seed) {
        int[] v = new int[n];
        long x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            v[i] = (int) (x >>> 35);
        }
        Arrays.sort(v);
        long sum = 0;
        for (int i = 0; i < n; i += 13) {
            sum += Arrays.binarySearch(v, v[i]) >= 0 ? 1 : 0;
        }
        return sum;
    }

    static long round(int r) {
        long seed = 1000 + r;
        long c = fib(24);
        c += sieve(300_000);
        c += wordCounts(60_000, seed);
        c += sortPoints(30_000, seed);
        c += (long) matmul(70, seed);
        c += arraysWork(100_000, seed);
        return c;
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        long t0 = System.nanoTime();
        long checksum = 0;
        for (int r = 0; r < rounds; r++) {
            checksum = checksum * 31 + round(r);
        }
        long workMs = (System.nanoTime() - t0) / 1_000_000;
        System.out.println("fixedwork: rounds=" + rounds + " checksum=" + checksum);
        // Timing goes to stderr so stdout stays identical from run to run.
        System.err.println("fixedwork-time: work_ms=" + workMs);
    }
}
