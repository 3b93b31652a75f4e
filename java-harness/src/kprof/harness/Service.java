package kprof.harness;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * A long-running service for sidecar tests: worker threads (default 1) handle small, identical
 * CPU-bound "requests" (parse, hash, sort, sum) as fast as they can, and every 500 ms the main thread
 * prints the throughput of the last period: {@code service: t_ms=T ops_per_s=R ops_per_cpu_s=C}, where R
 * is requests per wall-clock second and C requests per CPU-second of the workers (the measure that other
 * processes competing for the CPU do not move). Runs for the given number of seconds (default 0: until
 * killed). Arguments: [seconds] [threads].
 */
public final class Service {
    /** Per-worker request counters, 16 longs apart so that workers do not share a cache line. */
    static AtomicLongArray counters;

    static volatile long sink;

    static int parse(String request) {
        int sum = 0;
        for (String field : request.split(",")) {
            sum += Integer.parseInt(field.trim());
        }
        return sum;
    }

    static long index(int n, long seed) {
        Map<Integer, Long> map = new HashMap<>();
        long x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            map.merge((int) (x >>> 52), x, Long::sum);
        }
        long h = 0;
        for (Map.Entry<Integer, Long> e : map.entrySet()) {
            h = h * 31 + e.getKey() * e.getValue();
        }
        return h;
    }

    static long sortAndSum(int n, long seed) {
        int[] v = new int[n];
        long x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            v[i] = (int) (x >>> 33);
        }
        Arrays.sort(v);
        long s = 0;
        for (int i = 0; i < n; i += 7) {
            s += v[i];
        }
        return s;
    }

    static long handle(long seq) {
        String request = (seq % 97) + ", " + (seq % 89) + ", " + (seq % 83) + ", 17, 4, 1999";
        long r = parse(request);
        r += index(200, seq);
        r += sortAndSum(400, seq);
        return r;
    }

    static void work(int slot) {
        long seq = slot * 1_000_000_007L;
        long local = 0;
        while (true) {
            local += handle(seq++);
            counters.lazySet(slot * 16, counters.get(slot * 16) + 1);
            if ((seq & 1023) == 0) {
                sink += local;
            }
        }
    }

    public static void main(String[] args) throws InterruptedException {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 0;
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 1;
        counters = new AtomicLongArray(threads * 16);
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            int slot = i;
            Thread t = new Thread(() -> work(slot), "worker-" + i);
            t.setDaemon(true);
            workers.add(t);
            t.start();
        }
        System.out.println("service: started threads=" + threads);
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long start = System.nanoTime();
        long lastTime = start;
        long lastOps = 0;
        long lastCpu = 0;
        while (seconds <= 0 || System.nanoTime() - start < seconds * 1e9) {
            Thread.sleep(500);
            long now = System.nanoTime();
            long ops = 0;
            long cpu = 0;
            for (int i = 0; i < threads; i++) {
                ops += counters.get(i * 16);
                cpu += mx.getThreadCpuTime(workers.get(i).getId());
            }
            double rate = (ops - lastOps) * 1e9 / (now - lastTime);
            double cpuRate = cpu > lastCpu ? (ops - lastOps) * 1e9 / (cpu - lastCpu) : 0;
            System.out.printf("service: t_ms=%d ops_per_s=%.1f ops_per_cpu_s=%.1f%n", (now - start) / 1_000_000, rate, cpuRate);
            lastTime = now;
            lastOps = ops;
            lastCpu = cpu;
        }
    }
}
