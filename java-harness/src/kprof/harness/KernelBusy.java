package kprof.harness;

import java.io.FileInputStream;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * One thread spends a given number of CPU-seconds (default 2) largely in the kernel: it reads
 * {@code /dev/zero} one byte per system call. Prints the CPU time it used and the user-mode part of it,
 * so that a test can tell the samples a timer takes in the kernel from those it takes in user mode.
 */
public final class KernelBusy {
    public static void main(String[] args) throws IOException {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 2.0;
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long start = mx.getCurrentThreadCpuTime();
        long userStart = mx.getCurrentThreadUserTime();
        long limit = (long) (seconds * 1e9);
        long reads = 0;
        try (FileInputStream in = new FileInputStream("/dev/zero")) {
            while (mx.getCurrentThreadCpuTime() - start < limit) {
                for (int i = 0; i < 1000; i++) {
                    reads += 1 + in.read();
                }
            }
        }
        long used = mx.getCurrentThreadCpuTime() - start;
        long user = mx.getCurrentThreadUserTime() - userStart;
        System.out.printf("kernelbusy: cpu_ns=%d user_ns=%d reads=%d%n", used, user, reads);
    }
}
