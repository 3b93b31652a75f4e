package kprof.harness;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * CPU-bound work whose every bytecode is the same from run to run and JVM to JVM: a small stack-machine
 * interpreter, recursion, sorting with an explicit comparator class, hash maps keyed by strings, a tree
 * map and string building. It avoids what makes the JDK's own work vary between runs: lambdas and
 * string concatenation with {@code +} (both bootstrap through java.lang.invoke, whose caches hold soft
 * references that the garbage collector clears at its own pace), reflection and identity hash codes.
 * Prints {@code deterministic: rounds=N checksum=C}. Used by the determinism and accuracy tests.
 */
public final class Deterministic {
    static final class Item {
        final int key;
        final String name;

        Item(int key, String name) {
            this.key = key;
            this.name = name;
        }
    }

    static final class ByKeyThenName implements Comparator<Item> {
        @Override
        public int compare(Item a, Item b) {
            if (a.key != b.key) {
                return a.key < b.key ? -1 : 1;
            }
            return a.name.compareTo(b.name);
        }
    }

    /** Opcodes of the little stack machine. */
    static final int PUSH = 0, ADD = 1, MUL = 2, DUP = 3, SWAP = 4, POP = 5, JNZ = 6, DEC = 7, HALT = 8;

    static long run(int[] program, int arg) {
        long[] stack = new long[64];
        int sp = 0;
        stack[sp++] = arg;
        int pc = 0;
        long acc = 0;
        while (true) {
            int op = program[pc++];
            switch (op) {
                case PUSH:
                    stack[sp++] = program[pc++];
                    break;
                case ADD:
                    sp--;
                    stack[sp - 1] += stack[sp];
                    break;
                case MUL:
                    sp--;
                    stack[sp - 1] = stack[sp - 1] * stack[sp] % 1_000_003;
                    break;
                case DUP:
                    stack[sp] = stack[sp - 1];
                    sp++;
                    break;
                case SWAP: {
                    long t = stack[sp - 1];
                    stack[sp - 1] = stack[sp - 2];
                    stack[sp - 2] = t;
                    break;
                }
                case POP:
                    acc += stack[--sp];
                    break;
                case DEC:
                    stack[sp - 1]--;
                    break;
                case JNZ: {
                    int target = program[pc++];
                    if (stack[sp - 1] != 0) {
                        pc = target;
                    }
                    break;
                }
                default:
                    return acc + stack[sp - 1];
            }
        }
    }

    static long interpret(int n) {
        // counter on the stack; loop: push 7, mul-accumulate, decrement until zero.
        int[] program = {DUP, PUSH, 7, MUL, POP, DEC, JNZ, 0, HALT};
        return run(program, n);
    }

    static int ackermann(int m, int n) {
        if (m == 0) {
            return n + 1;
        }
        if (n == 0) {
            return ackermann(m - 1, 1);
        }
        return ackermann(m - 1, ackermann(m, n - 1));
    }

    static String name(int i) {
        char[] buf = new char[8];
        int n = 0;
        int v = i;
        do {
            buf[n++] = (char) ('a' + v % 26);
            v /= 26;
        } while (v > 0);
        return new String(buf, 0, n);
    }

    static long sortItems(int n, int seed) {
        List<Item> items = new ArrayList<>();
        int x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 1103515245 + 12345;
            items.add(new Item((x >>> 16) % 500, name(i)));
        }
        items.sort(new ByKeyThenName());
        long sum = 0;
        for (int i = 0; i < items.size(); i += 7) {
            sum = sum * 31 + items.get(i).key + items.get(i).name.length();
        }
        return sum;
    }

    static long countWords(int n, int seed) {
        Map<String, int[]> counts = new HashMap<>();
        int x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 1103515245 + 12345;
            String w = name((x >>> 16) % 3000);
            int[] c = counts.get(w);
            if (c == null) {
                c = new int[1];
                counts.put(w, c);
            }
            c[0]++;
        }
        TreeMap<String, int[]> sorted = new TreeMap<>(counts);
        long sum = 0;
        for (Map.Entry<String, int[]> e : sorted.entrySet()) {
            sum = sum * 17 + e.getKey().length() * e.getValue()[0];
        }
        return sum;
    }

    /** Called from two callsites of {@link #round}: two calling contexts. */
    static long leafWork(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += (long) i * i % 7;
        }
        return s;
    }

    static long round(int r) {
        long c = interpret(2000 + r);
        c += ackermann(2, 200 + r % 5);
        c += leafWork(3000);
        c += sortItems(4000, r + 1);
        c += countWords(6000, r + 7);
        c += leafWork(5000);
        return c;
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 20;
        long checksum = 0;
        for (int r = 0; r < rounds; r++) {
            checksum = checksum * 31 + round(r);
        }
        StringBuilder out = new StringBuilder();
        out.append("deterministic: rounds=").append(rounds).append(" checksum=").append(checksum);
        System.out.println(out.toString());
    }
}
