package kprof.harness;

import java.util.ArrayList;
import java.util.List;
import java.util.function.IntUnaryOperator;

/**
 * Code shapes that a class rewrite must keep working: switches at every alignment, loops that branch back to
 * offset 0, nested try/catch/finally, synchronized blocks, `new` values on the stack across branches in
 * constructor arguments (Uninitialized frames), long/double locals, more than 256 local slots (so added locals
 * need `wide`), lambdas, string concatenation and type annotations inside code. main() prints a deterministic digest; kprof's class-file
 * tests rewrite this class and compare the output with the original's.
 */
public class RewriteSample {
    static int counter;
    final String label;

    static {
        counter = 3;
    }

    RewriteSample(String label) {
        this.label = label;
    }

    RewriteSample(int n, boolean flag) {
        // `new StringBuilder` stays uninitialized on the stack across the conditional: an Uninitialized frame.
        this(new StringBuilder(flag ? "yes" : "no").append(n > 2 ? n : -n).toString());
    }

    static class Child extends RewriteSample {
        Child(int n) {
            super(n > 0 ? "pos" + n : new String("neg"));
        }
    }

    static int loopToZero(int n) {
        do {
            n -= 3;
        } while (n > 0);
        return n;
    }

    static int whileTrue(int n) {
        while (true) {
            if (n % 7 == 0) {
                return n;
            }
            n++;
        }
    }

    static int table(int k) {
        switch (k) {
            case 0: return 10;
            case 1: return 11;
            case 2: return 12;
            case 3: return 13;
            case 5: return 15;
            default: return -1;
        }
    }

    static int table1(byte pad, int k) {
        int x = pad;
        switch (k) {
            case 10: x += 1; break;
            case 11: x += 2; break;
            case 12: x += 3; break;
            case 13: x += 4; break;
            default: x += 5;
        }
        return x;
    }

    static int table2(int a, int k) {
        int x = a * 3;
        switch (k) {
            case 20: x += 1;
            case 21: x += 2; break;
            case 22: x += 3; break;
            default: x += 5;
        }
        return x;
    }

    static int lookup(int k) {
        switch (k) {
            case -1000: return 1;
            case 7: return 2;
            case 100000: return 3;
            case Integer.MAX_VALUE: return 4;
            default: return 0;
        }
    }

    static int strings(String s) {
        switch (s) {
            case "alpha": return 1;
            case "beta": return 2;
            case "gamma": return 3;
            default: return s.length();
        }
    }

    static int tryCatch(int[] a, int i) {
        int r = 0;
        try {
            r = a[i];
            try {
                r += 10 / (i - 1);
            } catch (ArithmeticException e) {
                r += 100;
            } finally {
                r += 1000;
            }
        } catch (ArrayIndexOutOfBoundsException e) {
            r = -1;
        } catch (RuntimeException e) {
            r = -2;
        } finally {
            counter++;
        }
        return r;
    }

    static int sync(Object lock, int n) {
        int r = 0;
        synchronized (lock) {
            for (int i = 0; i < n; i++) {
                r += i;
            }
        }
        return r;
    }

    static double wide(long a, double b, int c) {
        long x = a * c;
        double y = b / 2;
        for (int i = 0; i < c; i++) {
            x += i;
            y += x;
        }
        return x + y;
    }

    static long manyLocals(long seed) {
        long l0 = seed + 0;
        long l1 = seed + 1;
        long l2 = seed + 2;
        long l3 = seed + 3;
        long l4 = seed + 4;
        long l5 = seed + 5;
        long l6 = seed + 6;
        long l7 = seed + 7;
        long l8 = seed + 8;
        long l9 = seed + 9;
        long l10 = seed + 10;
        long l11 = seed + 11;
        long l12 = seed + 12;
        long l13 = seed + 13;
        long l14 = seed + 14;
        long l15 = seed + 15;
        long l16 = seed + 16;
        long l17 = seed + 17;
        long l18 = seed + 18;
        long l19 = seed + 19;
        long l20 = seed + 20;
        long l21 = seed + 21;
        long l22 = seed + 22;
        long l23 = seed + 23;
        long l24 = seed + 24;
        long l25 = seed + 25;
        long l26 = seed + 26;
        long l27 = seed + 27;
        long l28 = seed + 28;
        long l29 = seed + 29;
        long l30 = seed + 30;
        long l31 = seed + 31;
        long l32 = seed + 32;
        long l33 = seed + 33;
        long l34 = seed + 34;
        long l35 = seed + 35;
        long l36 = seed + 36;
        long l37 = seed + 37;
        long l38 = seed + 38;
        long l39 = seed + 39;
        long l40 = seed + 40;
        long l41 = seed + 41;
        long l42 = seed + 42;
        long l43 = seed + 43;
        long l44 = seed + 44;
        long l45 = seed + 45;
        long l46 = seed + 46;
        long l47 = seed + 47;
        long l48 = seed + 48;
        long l49 = seed + 49;
        long l50 = seed + 50;
        long l51 = seed + 51;
        long l52 = seed + 52;
        long l53 = seed + 53;
        long l54 = seed + 54;
        long l55 = seed + 55;
        long l56 = seed + 56;
        long l57 = seed + 57;
        long l58 = seed + 58;
        long l59 = seed + 59;
        long l60 = seed + 60;
        long l61 = seed + 61;
        long l62 = seed + 62;
        long l63 = seed + 63;
        long l64 = seed + 64;
        long l65 = seed + 65;
        long l66 = seed + 66;
        long l67 = seed + 67;
        long l68 = seed + 68;
        long l69 = seed + 69;
        long l70 = seed + 70;
        long l71 = seed + 71;
        long l72 = seed + 72;
        long l73 = seed + 73;
        long l74 = seed + 74;
        long l75 = seed + 75;
        long l76 = seed + 76;
        long l77 = seed + 77;
        long l78 = seed + 78;
        long l79 = seed + 79;
        long l80 = seed + 80;
        long l81 = seed + 81;
        long l82 = seed + 82;
        long l83 = seed + 83;
        long l84 = seed + 84;
        long l85 = seed + 85;
        long l86 = seed + 86;
        long l87 = seed + 87;
        long l88 = seed + 88;
        long l89 = seed + 89;
        long l90 = seed + 90;
        long l91 = seed + 91;
        long l92 = seed + 92;
        long l93 = seed + 93;
        long l94 = seed + 94;
        long l95 = seed + 95;
        long l96 = seed + 96;
        long l97 = seed + 97;
        long l98 = seed + 98;
        long l99 = seed + 99;
        long l100 = seed + 100;
        long l101 = seed + 101;
        long l102 = seed + 102;
        long l103 = seed + 103;
        long l104 = seed + 104;
        long l105 = seed + 105;
        long l106 = seed + 106;
        long l107 = seed + 107;
        long l108 = seed + 108;
        long l109 = seed + 109;
        long l110 = seed + 110;
        long l111 = seed + 111;
        long l112 = seed + 112;
        long l113 = seed + 113;
        long l114 = seed + 114;
        long l115 = seed + 115;
        long l116 = seed + 116;
        long l117 = seed + 117;
        long l118 = seed + 118;
        long l119 = seed + 119;
        long l120 = seed + 120;
        long l121 = seed + 121;
        long l122 = seed + 122;
        long l123 = seed + 123;
        long l124 = seed + 124;
        long l125 = seed + 125;
        long l126 = seed + 126;
        long l127 = seed + 127;
        long l128 = seed + 128;
        long l129 = seed + 129;
        long l130 = seed + 130;
        long l131 = seed + 131;
        long l132 = seed + 132;
        long l133 = seed + 133;
        long l134 = seed + 134;
        long l135 = seed + 135;
        long l136 = seed + 136;
        long l137 = seed + 137;
        long l138 = seed + 138;
        long l139 = seed + 139;
        long sum = l0 + l1 + l2 + l3 + l4 + l5 + l6 + l7 + l8 + l9 + l10 + l11 + l12 + l13 + l14 + l15 + l16 + l17 + l18 + l19 + l20 + l21 + l22 + l23 + l24 + l25 + l26 + l27 + l28 + l29 + l30 + l31 + l32 + l33 + l34 + l35 + l36 + l37 + l38 + l39 + l40 + l41 + l42 + l43 + l44 + l45 + l46 + l47 + l48 + l49 + l50 + l51 + l52 + l53 + l54 + l55 + l56 + l57 + l58 + l59 + l60 + l61 + l62 + l63 + l64 + l65 + l66 + l67 + l68 + l69 + l70 + l71 + l72 + l73 + l74 + l75 + l76 + l77 + l78 + l79 + l80 + l81 + l82 + l83 + l84 + l85 + l86 + l87 + l88 + l89 + l90 + l91 + l92 + l93 + l94 + l95 + l96 + l97 + l98 + l99 + l100 + l101 + l102 + l103 + l104 + l105 + l106 + l107 + l108 + l109 + l110 + l111 + l112 + l113 + l114 + l115 + l116 + l117 + l118 + l119 + l120 + l121 + l122 + l123 + l124 + l125 + l126 + l127 + l128 + l129 + l130 + l131 + l132 + l133 + l134 + l135 + l136 + l137 + l138 + l139;
        for (int i = 0; i < 3; i++) {
            sum += i * l139;
        }
        return sum;
    }

    static int lambdas(int n) {
        IntUnaryOperator f = x -> x * n + counter;
        List<Integer> out = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            out.add(f.applyAsInt(i));
        }
        return out.stream().mapToInt(Integer::intValue).sum();
    }

    static String concat(String a, int b, double c) {
        return a + "/" + b + "/" + c;
    }

    static int thrower(int n) {
        if (n > 3) {
            throw new IllegalStateException("n=" + n);
        }
        return n;
    }

    static int catcher(int n) {
        try {
            return thrower(n);
        } catch (IllegalStateException e) {
            return e.getMessage().length();
        }
    }

    @java.lang.annotation.Target(java.lang.annotation.ElementType.TYPE_USE)
    @java.lang.annotation.Retention(java.lang.annotation.RetentionPolicy.RUNTIME)
    @interface Tag {
        int value() default 0;
    }

    /** Type annotations inside the code: on a local, a cast, a `new` and an instanceof. */
    static int annotated(Object x) {
        @Tag(1) String s = String.valueOf(x);
        Object o = (@Tag(2) Object) s;
        List<@Tag(3) String> l = new @Tag(4) ArrayList<>();
        l.add(s);
        if (o instanceof @Tag(5) String) {
            return l.size() + s.length();
        }
        return 0;
    }

    static boolean ternaries(int a, int b) {
        return (a > b ? a - b : b - a) > 2 && (a == 0 || b != 0);
    }

    public static void main(String[] args) {
        StringBuilder out = new StringBuilder();
        out.append(new RewriteSample(3, true).label).append(' ');
        out.append(new RewriteSample(1, false).label).append(' ');
        out.append(new Child(4).label).append(new Child(-1).label).append(' ');
        out.append(loopToZero(10)).append(' ').append(whileTrue(9)).append(' ');
        for (int k = -1; k < 7; k++) {
            out.append(table(k)).append(',').append(table1((byte) k, k + 10)).append(',').append(table2(k, k + 20));
            out.append(',').append(lookup(k == 3 ? 100000 : k == 4 ? -1000 : k)).append(';');
        }
        out.append(strings("alpha")).append(strings("gamma")).append(strings("delta")).append(' ');
        int[] a = {5, 6, 7};
        for (int i = 0; i < 5; i++) {
            out.append(tryCatch(a, i)).append(',');
        }
        out.append(sync(out, 10)).append(' ').append(wide(3L, 2.5, 4)).append(' ').append(manyLocals(7));
        out.append(' ').append(lambdas(3)).append(' ').append(concat("x", 2, 0.5)).append(' ');
        out.append(catcher(2)).append(catcher(5)).append(' ').append(ternaries(5, 1)).append(ternaries(0, 0));
        out.append(' ').append(annotated(42)).append(' ').append(counter);
        System.out.println(out);
    }
}
