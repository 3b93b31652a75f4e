package kprof.harness;

/**
 * A method whose 500 calls take kprof's exact-mode rewrite past HotSpot's 8,000-byte limit when the local
 * bytecode count is handed to the node before every call, but not with a catch-all handler instead: exact
 * mode must still count it. {@code big(r)} runs 50 lines of ten nested calls of {@code f}, a loop, and
 * divides by {@code r % 2} (zero in even rounds: an implicit exception leaves {@code big}, caught in
 * {@code main}). R rounds (the first argument, default 10).
 *
 * <p>Prints {@code bigmethod: rounds=R checksum=C}.
 */
public final class BigMethod {
    static int f(int x) {
        return x * 31 + 7;
    }

    static int big(int r) {
        int s = r;
        s = f(f(f(f(f(f(f(f(f(f(s + 0))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 1))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 2))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 3))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 4))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 5))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 6))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 7))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 8))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 9))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 10))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 11))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 12))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 13))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 14))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 15))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 16))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 17))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 18))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 19))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 20))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 21))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 22))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 23))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 24))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 25))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 26))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 27))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 28))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 29))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 30))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 31))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 32))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 33))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 34))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 35))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 36))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 37))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 38))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 39))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 40))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 41))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 42))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 43))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 44))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 45))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 46))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 47))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 48))))))))));
        s = f(f(f(f(f(f(f(f(f(f(s + 49))))))))));
        for (int k = 0; k < 100; k++) {
            s += k ^ s;
        }
        return s / (r % 2);
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 10;
        long checksum = 0;
        for (int r = 0; r < rounds; r++) {
            try {
                checksum = checksum * 31 + big(r);
            } catch (ArithmeticException e) {
                checksum = checksum * 31 + 1;
            }
        }
        System.out.println("bigmethod: rounds=" + rounds + " checksum=" + checksum);
    }
}
