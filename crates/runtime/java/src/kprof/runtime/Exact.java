package kprof.runtime;

import jdk.internal.misc.Unsafe;
import jdk.internal.vm.annotation.DontInline;
import jdk.internal.vm.annotation.ForceInline;

/**
 * The helpers that exact-mode rewriting calls (JP2/CCCP complete calling-context profiles). Every
 * invocation of a rewritten method is counted in its callsite-aware calling context, with the bytecodes
 * its blocks execute ({@code bb=on}: a counter per basic block instead). A rewritten method does:
 *
 * <pre>
 *   prologue:             invokestatic Ef.state()S; astore S; aload S; ldc ID; ldc NK;
 *                         invokestatic Exact.enter(SII)J; lstore C
 *                         (bb=on: ... ldc BK; invokestatic Exact.enterBlocks(SII)J; lstore C)
 *   each basic block:     iinc B, N                 (bb=on: lload C; ldc K; invokestatic Exact.block(JI)V, block K)
 *   loop headers:         lload C; iload B; invokestatic Exact.spill(JI)I; istore B            (bb=off)
 *   before calls, throws: lload C; iload B; invokestatic Exact.count(JI)V; iconst_0; istore B   (bb=off)
 *   or, where that would take the method past the byte budget, a catch-all handler instead (appended, over
 *                         the whole original code, last in the exception table; not in constructors and
 *                         methods with monitorenter):
 *                         aload S; lload C; iload B; invokestatic Exact.countExit(SJI)V; athrow
 *   exception handlers:   aload S; lload C; invokestatic Exact.handler(SJ)V       (before the block's helper)
 *   before calls, new:    aload S; ldc SITE; putfield S.site
 *                         (a site past the method's table, SITE >= CAP: aload S; ldc SITE; invokestatic
 *                         Exact.atFar(SI)V)
 *   before each return:   aload S; lload C; iload B; invokestatic Exact.countExit(SJI)V
 *                         (bb=on: aload S; lload C; invokestatic Exact.exit(SJ)V)
 *                         (a returning block without calls uses countExit/blockExit at its start instead)
 *   leaf methods:         ldc ID; ldc N; invokestatic Ef.enterLeaf(II)J; lstore C; counts as above;
 *                         at returns B goes to C (count), nothing else at returns or handlers
 *   native wrappers:      enter as above with N = 0, then aload S; lload C; invokestatic Exact.nativeEnter(SJ)J;
 *                         lstore O; before the return: aload S; lload O; invokestatic Exact.nativeLeave(SJ)V
 *                         and exit; a catch-all handler: aload S; lload O; invokestatic Exact.nativeLeave; athrow
 *   intrinsic candidates: not counted; invokestatic Ef.mute()V before and Ef.unmute()V after each call
 * </pre>
 *
 * (Ef: when java.lang.Thread has kprof's fields, the agent having started with the JVM; otherwise the methods
 * of the same names here.)
 *
 * where S is the thread's {@link ExactState}, C the address of the invocation's context (an entry, below) and B
 * the bytecodes counted but not yet added to C, all new locals (B: a register in compiled code, where a
 * counter in memory would put a store-to-load chain into every loop iteration); ID the method's id, SITE the
 * call's number in the method (1, 2, ... in code order, calls and {@code new} alike), N a block's bytecode
 * count; NK is the first block's bytecodes when nothing jumps back to it (else 0; the agent counts them as
 * calls times their number) and, in its top 16 bits, the size of the method's own table of children (below);
 * BK the same with the number of the method's blocks in its low bits. An implicit exception (a null
 * dereference, say) that leaves the method loses what B holds: a block is counted at its start, so only the
 * blocks since the last call or throw. The catch-all handler, where there is one, hands B to C whatever
 * leaves the method (the method's own handlers see B in the local) and rethrows the same exception: fewer
 * bytes, but B stays live (so spilled) across every call once compiled, which costs more than the hand-over.
 *
 * <p><b>The tree.</b> Each thread counts into its own tree, in native memory it allocates itself ({@link
 * #alloc}): no atomics or shared writes on the fast path, no object for the garbage collector to trace. A
 * context is a 64-byte entry, one cache line:
 * <pre>
 *   +0  key        site &lt;&lt; 32 | USED | method id; 0 while the entry is empty
 *   +8  calls
 *   +16 bytecodes  (bb=off; the first block's, when it runs once per call, are calls times its size)
 *   +24 kids       the address of the entry's own table of children ({@link #MUTED} for a leaf method's
 *                  context, which cannot call; the thread's overflow table when there was no memory for one)
 *   +32 parent     the table the entry is in (for {@link #DUMMY}: {@link #MUTED}, see {@link #mute})
 *   +40 slots      in a slot of a table: the table's number of slots; in a table's overflow entry: the
 *                  table's others (below)
 *   +48 blocks     address of the entry's block counters (bb=on), else 0
 *   +56 int        the agent's CCT node of the context (written only by the merge; an overflow entry: the
 *                  number of the table's others)
 *   +60 int        the number of slots of the entry's own table (0: none of its own)
 * </pre>
 * A table of children has a slot per callsite of its context's method (slot 0 for calls of no known
 * callsite, slot i for the method's i-th call), up to {@link #CAP}, followed by the table's overflow entry;
 * the rewrite knows the method's number of slots, so a caller never names a slot past its table. A call
 * finds its context without hashing: the caller writes the call's site, the callee's prologue adds it to
 * the current table and compares the low word of the entry there with its own method's (a constant once
 * compiled), which matches in the common, monomorphic case. Contexts whose slot is taken (other callees of
 * a polymorphic callsite, and the callees of the sites of a large method past its table's slots, which
 * name the overflow entry and leave their site in {@link ExactState#far}) are the table's others, found
 * through an open hash table of their addresses that hangs from the table's overflow entry, by their full
 * key. A context of a method that calls gets its table when it is created, so that the caller's slot is
 * always there to read; empty slots know their table and its size, for the miss path.
 *
 * <p><b>The current context</b> is kept without instrumenting exceptional exits, like bytecode mode's depth:
 * {@code enter} takes the table {@code cur} the caller left and the callsite it wrote, finds or creates the
 * callee's entry there, and leaves {@code cur} = the callee's own table for its callees; a normal return
 * restores {@code cur} = the table its entry is in; an exception handler re-asserts {@code cur} = its own
 * entry's table. The callee, a return and a handler reset the site to 0, so a call the JVM makes itself (a
 * class initializer) is one of no known callsite. Leaf methods (no calls, no {@code new}) never move
 * {@code cur}. A native wrapper is an entry of the native method; code the native calls back runs with
 * {@code cur} = its table and callsite 0. Native code that catches what a callback threw (JNI
 * {@code ExceptionClear}, {@code ExceptionDescribe}) is no rewritten handler: the agent intercepts those two
 * JNI functions and, when the innermost Java frame is a wrapped native, calls {@link #caught}, which
 * re-asserts the wrapper's table as a handler would.
 *
 * <p><b>Muted calls</b> (those an intrinsic candidate makes, {@link #mute}) run with {@code cur} = {@link
 * #MUTED}, a table of {@link #CAP} slots and an overflow entry, none of which match a call: the prologues'
 * miss paths see it and return {@link #DUMMY}, whose table and parent are {@link #MUTED} again, so the hit
 * path and the return carry no check for muting.
 *
 * <p><b>Overflow.</b> All threads' trees together may take {@link #init}'s budget of bytes. Once a tree can
 * get no more memory, a context not seen before is created only where its slot is free, without a table of
 * its own: what it calls counts on the thread's overflow table ({@link #CAP} slots that match no call) and
 * its overflow entry; a context that would be one of a table's others counts on the table's overflow entry
 * (key {@link #OVERFLOW_KEY}), whose table of children is the thread's overflow table as well. Returns
 * restore the caller's table, as any return. The agent files them all under {@code [cct_overflow]}.
 *
 * <p>The trees go into the agent's one tree ({@link #merge}, which reads the native memory) when a thread
 * ends and when the agent writes the profile (then as the difference to what was merged before).
 *
 * <p>Everything here is leaf code: no allocation on the fast paths (a new context takes arena memory, a new
 * chunk of it a call to the agent), no JDK calls that could be rewritten. Fast paths are
 * {@code @ForceInline} but for the prologues of methods that call ({@link #enter}: one real call per
 * invocation, which measured faster than its code inlined everywhere on the JIT-bound workloads; a leaf's
 * prologue, {@link Ef#enterLeaf}, has its hit path inlined), slow paths {@code @DontInline}.
 * While profiling is off, every thread gets {@link #OFF}, whose context is {@link #DUMMY}.
 */
public final class Exact {
    static final Unsafe U = Unsafe.getUnsafe();

    /** Offsets in an entry, and its size (1 << ENTRY). */
    static final int ENTRY = 6;
    static final long KEY = 0, CALLS = 8, BYTECODES = 16, KIDS = 24, PARENT = 32, BLOCKS = 48, LIM = 60;
    /** In every slot of a table: the table's number of slots (where its overflow entry is). */
    static final long SLOTS = 40;
    /** In a table's overflow entry: the table's others' hash table, and their number. */
    static final long OTHERS = 40, OTHER_COUNT = 56;
    /** Most slots a table of children has (a power of two), besides its overflow entry. */
    static final int CAP = 32;
    static final long ADDRESS = (1L << 48) - 1;
    /** Set in the low word of every key, so that an empty entry (key 0) matches none. */
    static final int USED = 0x8000_0000;
    /** Key of an overflow entry: method id 0x7fffffff (no method's), site 0. */
    static final long OVERFLOW_KEY = 0xffff_ffffL;
    /** Key of the slots of the shared muted table and of a thread's overflow table: matches no call, so every
     *  call there takes the miss path. */
    static final long NEVER = -1L;
    /** Arena chunks: the first of a thread, and the largest but for a table that needs more (one huge page;
     *  the agent maps chunks of that size aligned to one). */
    private static final long MIN_CHUNK = 16 << 10;
    private static final long MAX_CHUNK = 2 << 20;

    /** Set by the agent once the runtime is ready; cleared when profiling stops. */
    static volatile boolean enabled;
    static boolean threadRoots;
    /** java.lang.Thread has kprof's fields: rewritten code finds its state in {@code Thread.kprof$x}
     *  ({@link Ef}), and this class keeps that field in step with the table. */
    static boolean fields;
    /** Bytes the trees may still take, over all threads: native memory, changed atomically. */
    private static final long BUDGET = U.allocateMemory(8);
    /** The session ({@link #init}) whose budget a state's bytes came from. */
    private static int session;
    /** Block counters of invocations that count nothing or on an overflow entry (bb=on): written by every
     *  thread, never read; any block index fits. */
    private static long garbageBlocks;
    private static final int MAX_BLOCKS = 1 << 16;
    /** The context of invocations that count nothing (profiling off, or below an intrinsic candidate): its
     *  table of children and its parent are {@link #MUTED}. Never written on the fast paths. */
    static final long DUMMY = zeroed(1L << ENTRY);
    /** The table of muted code ({@link #mute}), of {@link #DUMMY} and of contexts that cannot call (leaf
     *  methods): {@link #CAP} slots and an overflow entry, all keyed {@link #NEVER}, so the prologues' hit path
     *  needs no mute check of its own; their miss paths see this table and count nothing. */
    static final long MUTED = mutedTable();
    /** The state of threads while profiling is off: muted for good (its table is {@link #MUTED}), so its
     *  invocations count nothing and move nothing. */
    static final ExactState OFF = offState();

    private static final int BUCKETS = 1 << 12;
    /** Per-thread states, hashed by thread id, chained through {@link ExactState#next}; written under LOCK. */
    private static final ExactState[] TABLE = new ExactState[BUCKETS];
    /** States of threads still running whose trees were merged for the last time (profiling stopped): their
     *  frames may still count into them, so their memory is freed when their thread ends. Under LOCK. */
    private static ExactState retired;
    private static final Object LOCK = new Object();

    private Exact() {}

    /** {@code bytes} of zeroed native memory that is never freed (the shared entries). */
    private static long zeroed(long bytes) {
        long a = U.allocateMemory(bytes);
        U.setMemory(a, bytes, (byte) 0);
        return a;
    }

    private static long mutedTable() {
        long a = zeroed((CAP + 1L) << ENTRY);
        for (int i = 0; i <= CAP; i++) {
            long e = a + ((long) i << ENTRY);
            U.putLong(e + KEY, NEVER);
            U.putLong(e + PARENT, a);
            U.putLong(e + KIDS, a);
            U.putLong(e + SLOTS, CAP);
        }
        // Muted invocations return to muted code (see leave), and what they call is muted too.
        U.putLong(DUMMY + PARENT, a);
        U.putLong(DUMMY + KIDS, a);
        return a;
    }

    private static ExactState offState() {
        ExactState s = new ExactState(null, 0);
        s.cur = MUTED;
        s.mutedCur = MUTED;
        s.rootTable = MUTED;
        s.overflowTable = MUTED;
        return s;
    }

    /** Prologue, first: the thread's state (kept in a local for the exit, handler and callsite writes). */
    @ForceInline
    public static ExactState state() {
        return current();
    }

    /** Prologue, second: this method's context, the entry in the slot of the caller's site in the current
     *  table; counts the call. The first block's bytecodes ({@code nk}'s low 16 bits, when it runs once per call) are not
     *  added to the entry: the agent knows them and adds calls times their number when it merges, saving a
     *  read-modify-write per call; but for an overflow entry, whose calls come from many methods. Leaves
     *  {@code cur} = the context's own table for its callees.
     *
     *  <p>A real call, deliberately: inlined into every rewritten method (and into everything the JIT
     *  inlines those into) the lookup made the compiled code larger and the JIT slower, by more than the
     *  call costs (docs/BENCHMARKS.md, 2026-11-24). */
    @DontInline
    public static long enter(ExactState s, int method, int nk) {
        return enter(s, method, nk & 0xffff, nk >>> 16, 0);
    }

    /** {@link #enter} with {@code bb=on}: {@code bk} is the method's number of blocks and, in its top 16
     *  bits, its table's size; the entry gets a counter per block, and bytecodes are computed from them when
     *  the tree is merged. A real call, as {@link #enter}. */
    @DontInline
    public static long enterBlocks(ExactState s, int method, int bk) {
        return enter(s, method, 0, bk >>> 16, bk & 0xffff);
    }

    /** {@link #enter} and {@link #enterBlocks}: the hit path (the callee in the slot its caller named) is all
     *  that runs on most calls: the slot's address from the current table and the site, one compare of the
     *  low word of its key with the method's. */
    @ForceInline
    private static long enter(ExactState s, int method, int n, int lim, int blocks) {
        long e = s.cur + ((long) s.site << ENTRY);
        s.site = 0;
        if (U.getInt(e + KEY) == (USED | method)) {
            U.putLong(e + CALLS, U.getLong(e + CALLS) + 1);
            s.cur = U.getLong(e + KIDS);
            return e;
        }
        return enterMiss(s, e, method, n, lim, blocks);
    }

    /** {@link #enter} when the callee is not in the slot: one of the table's others, new, or an overflow
     *  entry (which counts the bytecodes {@code n} of the first block itself); or the call is muted (a slot
     *  of {@link #MUTED}). */
    @DontInline
    private static long enterMiss(ExactState s, long e, int method, int n, int lim, int blocks) {
        long c = find(s, e, method, lim, blocks);
        if (c != DUMMY) {
            U.putLong(c + CALLS, U.getLong(c + CALLS) + 1);
            if (U.getLong(c + KEY) == OVERFLOW_KEY) {
                U.putLong(c + BYTECODES, U.getLong(c + BYTECODES) + n);
            }
        }
        s.cur = U.getLong(c + KIDS);
        return c;
    }

    /** Prologue of a leaf method (no calls, no {@code new}): its context; calls the JVM makes while it runs
     *  (a class initializer) come from no known callsite of the caller. A real call, as {@link #enter}. */
    @DontInline
    public static long enterLeaf(int method, int n) {
        return leaf(current(), method, n, 0);
    }

    /** {@link #enterLeaf} with {@code bb=on}. */
    @DontInline
    public static long enterLeafBlocks(int method, int blocks) {
        return leaf(current(), method, 0, blocks);
    }

    /** {@link #enterLeaf} and {@link #enterLeafBlocks} for the state {@code s}: {@link #enter} without
     *  moving the current table. */
    @ForceInline
    static long leaf(ExactState s, int method, int n, int blocks) {
        long e = s.cur + ((long) s.site << ENTRY);
        s.site = 0;
        if (U.getInt(e + KEY) == (USED | method)) {
            U.putLong(e + CALLS, U.getLong(e + CALLS) + 1);
            return e;
        }
        return leafMiss(s, e, method, n, blocks);
    }

    /** {@link #leaf} when the callee is not in the slot, or the call is muted. */
    @DontInline
    private static long leafMiss(ExactState s, long e, int method, int n, int blocks) {
        long c = find(s, e, method, 0, blocks);
        if (c != DUMMY) {
            U.putLong(c + CALLS, U.getLong(c + CALLS) + 1);
            if (U.getLong(c + KEY) == OVERFLOW_KEY) {
                U.putLong(c + BYTECODES, U.getLong(c + BYTECODES) + n);
            }
        }
        return c;
    }

    /** The key of method {@code method}'s context at callsite {@code site}: the low word is what the hit
     *  paths compare, the site above it is for the others' lookup and the merge. */
    @ForceInline
    private static long key(int site, int method) {
        return ((long) site << 32) | ((USED | method) & 0xffffffffL);
    }

    /** Before a call at a callsite past the slots of its method's table (a method with more than
     *  {@link #CAP} - 1 calls): the callee is one of the table's others, found by the site, which goes in
     *  {@link ExactState#far}; the call names the table's overflow entry, which matches no call. */
    @ForceInline
    public static void atFar(ExactState s, int site) {
        s.far = site;
        s.site = CAP;
    }

    /**
     * The context of {@code method} for the slot {@code e} a call named, with room for {@code blocks} block
     * counters and a table of {@code lim} slots of its own (none for a leaf method: 0): the slot's entry when
     * it is empty (then created there), else one of the others of the slot's table (another callee of the same
     * callsite, or a callsite past the table's slots), found through a hash table of their addresses that hangs
     * from the table's overflow entry, and created when new. The table's overflow entry once the memory is
     * spent; {@link #DUMMY} for a muted call; below an overflowing context, the overflow table's entry.
     */
    private static long find(ExactState s, long e, int method, int lim, int blocks) {
        long t = U.getLong(e + PARENT);
        if (t == MUTED) {
            return DUMMY;
        }
        if (t == s.overflowTable) {
            return t + ((long) CAP << ENTRY);
        }
        long k = U.getLong(e + KEY);
        int site;
        long o;
        if (k == OVERFLOW_KEY) {
            // A callsite past the slots (atFar): the caller wrote it.
            site = s.far;
            o = e;
        } else {
            site = (int) ((e - t) >>> ENTRY);
            o = t + (U.getLong(e + SLOTS) << ENTRY);
            if (k == 0) {
                return claim(s, t, e, key(site, method), lim, blocks) ? e : o;
            }
        }
        long key = key(site, method);
        long h = U.getLong(o + OTHERS);
        int hash = hash(key);
        if (h != 0) {
            long mask = U.getLong(h) - 1;
            for (long i = hash & mask; ; i = (i + 1) & mask) {
                long c = U.getLong(h + 8 + (i << 3));
                if (c == 0) {
                    break;
                }
                if (U.getLong(c + KEY) == key) {
                    return c;
                }
            }
        }
        long c = alloc(s, 1L << ENTRY);
        if (c == 0 || !claim(s, t, c, key, lim, blocks) || !addOther(s, o, h, c, hash)) {
            return o;
        }
        return c;
    }

    @ForceInline
    private static int hash(long key) {
        return (int) ((key * 0x9E3779B97F4A7C15L) >>> 40);
    }

    /** Adds entry {@code c} to the others of the table whose overflow entry is {@code o} ({@code h}: their hash
     *  table, 0 for none yet), growing the hash table at half full; false when there is no memory for that. */
    private static boolean addOther(ExactState s, long o, long h, long c, int hash) {
        long cap = h == 0 ? 0 : U.getLong(h);
        int count = U.getInt(o + OTHER_COUNT);
        if ((count + 1L) * 2 > cap) {
            long n = cap == 0 ? 4 : cap * 2;
            long g = alloc(s, (8 + n * 8 + 63) & ~63L);
            if (g == 0) {
                return false;
            }
            U.putLong(g, n);
            for (long i = 0; i < cap; i++) {
                long x = U.getLong(h + 8 + (i << 3));
                if (x != 0) {
                    place(g, x, hash(U.getLong(x + KEY)));
                }
            }
            place(g, c, hash);
            // The merge may read the hash table while the thread runs: complete before it is linked.
            U.putLongRelease(null, o + OTHERS, g);
        } else {
            place(h, c, hash);
        }
        U.putInt(o + OTHER_COUNT, count + 1);
        return true;
    }

    /** Puts entry {@code c} (complete: the store publishes it) into a free slot of the others' hash table {@code h}. */
    private static void place(long h, long c, int hash) {
        long mask = U.getLong(h) - 1;
        long i = hash & mask;
        while (U.getLong(h + 8 + (i << 3)) != 0) {
            i = (i + 1) & mask;
        }
        U.putLongRelease(null, h + 8 + (i << 3), c);
    }

    /** Makes the empty entry {@code e} of table {@code t} the context of {@code key}, with its own table of
     *  {@code lim} slots (a method that calls: its calls find their callees there) or none ({@code lim} 0: the
     *  table is {@link #MUTED}, which no call of a leaf method can reach); false when the memory its block
     *  counters need is not there. Without memory for its table, what the context calls counts as overflow. */
    private static boolean claim(ExactState s, long t, long e, long key, int lim, int blocks) {
        long b = 0;
        if (blocks > 0) {
            b = alloc(s, ((long) blocks * 8 + 63) & ~63L);
            if (b == 0) {
                return false;
            }
        }
        long kids = MUTED;
        // No JDK calls here (Math would be rewritten, and call back into this): lim is 0..CAP by the rewrite.
        int slots = lim < 0 ? 0 : lim > CAP ? CAP : lim;
        if (slots > 0) {
            kids = table(s, slots);
            if (kids == 0) {
                kids = s.overflowTable;
                slots = 0;
            }
        }
        U.putLong(e + BLOCKS, b);
        U.putLong(e + PARENT, t);
        U.putInt(e + LIM, slots);
        U.putLong(e + KIDS, kids);
        // The merge may read the entry while the thread runs: the key, last, publishes it.
        U.putLongRelease(null, e + KEY, key);
        return true;
    }

    /** A new table of {@code lim} slots (each knowing its table and the table's size, for the miss path) and
     *  its overflow entry in {@code s}'s arena; 0 when the memory is spent. */
    private static long table(ExactState s, int lim) {
        long a = alloc(s, (long) (lim + 1) << ENTRY);
        if (a == 0) {
            return 0;
        }
        for (int i = 0; i < lim; i++) {
            long e = a + ((long) i << ENTRY);
            U.putLong(e + PARENT, a);
            U.putLong(e + SLOTS, lim);
        }
        long o = a + ((long) lim << ENTRY);
        U.putLong(o + PARENT, a);
        U.putLong(o + KIDS, s.overflowTable != 0 ? s.overflowTable : a);
        U.putLong(o + BLOCKS, garbageBlocks);
        U.putLongRelease(null, o + KEY, OVERFLOW_KEY);
        return a;
    }

    /** {@code bytes} (a multiple of 64) of zeroed, 64-byte aligned memory from {@code s}'s arena; 0 when the
     *  budget or the machine has none left. */
    private static long alloc(ExactState s, long bytes) {
        long a = s.top;
        if (s.end - a < bytes) {
            a = chunk(s, bytes);
            if (a == 0) {
                return 0;
            }
        }
        s.top = a + bytes;
        return a;
    }

    /** A new chunk for {@code s}'s arena, large enough for {@code bytes}: chunks double with the tree, up to
     *  {@link #MAX_CHUNK}. Returns its first byte. */
    @DontInline
    private static long chunk(ExactState s, long bytes) {
        long size = s.bytes < MIN_CHUNK ? MIN_CHUNK : s.bytes > MAX_CHUNK ? MAX_CHUNK : s.bytes;
        if (size < bytes) {
            size = bytes;
        }
        // Once the budget is spent, every new context asks: a plain read first, no atomic.
        if (U.getLongVolatile(null, BUDGET) < size) {
            return 0;
        }
        if (U.getAndAddLong(null, BUDGET, -size) < size) {
            U.getAndAddLong(null, BUDGET, size);
            return 0;
        }
        long a = map(size);
        if (a == 0) {
            U.getAndAddLong(null, BUDGET, size);
            return 0;
        }
        if (s.chunkCount == s.chunks.length) {
            long[] more = new long[s.chunkCount * 2];
            for (int i = 0; i < s.chunkCount; i++) {
                more[i] = s.chunks[i];
            }
            s.chunks = more;
        }
        s.chunks[s.chunkCount++] = a;
        s.chunks[s.chunkCount++] = size;
        s.bytes += size;
        s.top = a;
        s.end = a + size;
        return a;
    }

    /** Frees {@code s}'s tree; its bytes go back to the budget when they came from the current session's. */
    private static void free(ExactState s) {
        for (int i = 0; i + 1 < s.chunkCount; i += 2) {
            unmap(s.chunks[i], s.chunks[i + 1]);
        }
        s.chunkCount = 0;
        if (s.session == session) {
            U.getAndAddLong(null, BUDGET, s.bytes);
        }
        s.bytes = 0;
        s.top = s.end = 0;
    }

    /** A new state for {@code owner}, with its root and overflow tables; {@link #OFF} when there is no
     *  memory even for those. */
    private static ExactState newState(Thread owner, long id) {
        ExactState s = new ExactState(owner, id);
        s.session = session;
        // The overflow table first: every other table's overflow entry leads to it.
        // CAP slots that match no call, so that any callsite of any method may name one below an overflowing
        // context; the miss path sends them all to the table's overflow entry.
        long ovf = table(s, CAP);
        if (ovf != 0) {
            for (int i = 0; i < CAP; i++) {
                U.putLong(ovf + ((long) i << ENTRY) + KEY, NEVER);
            }
            s.overflowTable = ovf;
        }
        long root = ovf == 0 ? 0 : table(s, 1);
        if (root == 0) {
            free(s);
            return OFF;
        }
        s.rootTable = root;
        s.cur = root;
        return s;
    }

    /** A basic block of {@code n} bytecodes. */
    @ForceInline
    public static void count(long c, int n) {
        U.putLong(c + BYTECODES, U.getLong(c + BYTECODES) + n);
    }

    /** Bytecodes kept in a local before they go to the entry. */
    private static final int SPILL = 1 << 16;

    /** At a loop header: the local count {@code b} goes to the entry once it is large, so that it cannot
     *  overflow and a profile written while a long loop runs misses little. Returns the new local count. */
    @ForceInline
    public static int spill(long c, int b) {
        if (b < SPILL) {
            return b;
        }
        U.putLong(c + BYTECODES, U.getLong(c + BYTECODES) + b);
        return 0;
    }

    /** Basic block {@code k} ({@code bb=on}). */
    @ForceInline
    public static void block(long c, int k) {
        long a = U.getLong(c + BLOCKS) + ((long) k << 3);
        U.putLong(a, U.getLong(a) + 1);
    }

    /** Before a return: callees of the caller hang below the caller's context again, from no known callsite
     *  (the site is reset), so code the JVM runs before the caller's next call (a class initializer, a native
     *  method's lookup, a callback from native code) is not taken for a callee of the call this method was
     *  (a method that is not rewritten leaves the site its caller wrote). */
    @ForceInline
    public static void exit(ExactState s, long c) {
        leave(s, c);
    }

    /** A block that returns and calls nothing: counted, and the caller's context restored. */
    @ForceInline
    public static void countExit(ExactState s, long c, int n) {
        U.putLong(c + BYTECODES, U.getLong(c + BYTECODES) + n);
        leave(s, c);
    }

    /** {@link #countExit} with {@code bb=on}. */
    @ForceInline
    public static void blockExit(ExactState s, long c, int k) {
        block(c, k);
        leave(s, c);
    }

    /** The caller's table again: the one the entry is in. An invocation that counted nothing ({@link #DUMMY})
     *  ran muted, or with profiling off, and returns to muted code: its parent is {@link #MUTED}. */
    @ForceInline
    private static void leave(ExactState s, long c) {
        s.cur = U.getLong(c + PARENT);
        s.site = 0;
    }

    /** At an exception handler: callees of this invocation hang below its context again, whatever table the
     *  frames the exception unwound left behind. A handler of an invocation that counts nothing (below an
     *  intrinsic candidate) changes nothing: the bracket is still open. */
    @ForceInline
    public static void handler(ExactState s, long c) {
        if (c != DUMMY) {
            resume(s, c);
        }
    }

    /** Callees hang below {@code c} again, from no known callsite; a mute bracket still open was opened
     *  below {@code c} (a muted invocation moves nothing), and the exception that brought us here ended it. */
    @ForceInline
    private static void resume(ExactState s, long c) {
        s.cur = U.getLong(c + KIDS);
        s.site = 0;
        s.muteNest = 0;
    }

    /** Native wrapper, after its prologue and before it calls the native: the wrapper's context is the one
     *  callbacks hang below, also after the native code clears an exception ({@link #caught}). Returns the
     *  outer wrapper's context, for {@link #nativeLeave}. */
    @ForceInline
    public static long nativeEnter(ExactState s, long c) {
        long outer = s.nativeNode;
        if (s != OFF) {
            // None when the wrapper counts nothing (muted, off).
            s.nativeNode = c != DUMMY ? c : 0;
            s.site = 0;
        }
        return outer;
    }

    /** Native wrapper, when the native returns or throws: the outer wrapper's context again. */
    @ForceInline
    public static void nativeLeave(ExactState s, long outer) {
        if (s != OFF) {
            s.nativeNode = outer;
        }
    }

    /** Called by the agent (JNI, on the thread itself) after native code whose innermost Java frame is a
     *  native wrapper cleared a pending exception: whatever the callbacks' frames it unwound left in
     *  {@code cur}, the native's code runs in the wrapper's context, as after a handler of a rewritten method.
     *  (With Thread fields the agent calls {@link Ef#caught}.) */
    static void caught() {
        caught(current());
    }

    static void caught(ExactState s) {
        long n = s.nativeNode;
        if (s != OFF && n != 0) {
            // A muted wrapper sets no context, so n was counted: as at a handler of n's invocation.
            resume(s, n);
        }
    }

    /** Before a call in an intrinsic candidate: the callee, and everything it calls, counts nothing, as it
     *  would not run at all once the JIT uses the intrinsic (counts do not depend on the JIT). */
    @ForceInline
    public static void mute() {
        mute(current());
    }

    @ForceInline
    static void mute(ExactState s) {
        if (s.muteNest++ == 0) {
            s.mutedCur = s.cur;
            s.mutedSite = s.site;
            s.mutedFar = s.far;
            s.cur = MUTED;
        }
    }

    /** After that call returns. */
    @ForceInline
    public static void unmute() {
        unmute(current());
    }

    @ForceInline
    static void unmute(ExactState s) {
        // OFF stays muted (its mute above rewrites the same values: harmless).
        if (s != OFF && s.muteNest > 0 && --s.muteNest == 0) {
            // Muted invocations moved nothing: the table and site of the code around the bracket. What the
            // muted calls wrote is no call of that code: a caller that is not rewritten would hand it to its
            // next callee.
            s.cur = s.mutedCur;
            s.site = s.mutedSite;
            s.far = s.mutedFar;
            s.site = s.mutedSite;
        }
    }

    @ForceInline
    static ExactState current() {
        long id = Thread.currentThread().getId();
        ExactState s = TABLE[(int) id & (BUCKETS - 1)];
        if (s != null && s.tid == id) {
            return s;
        }
        return lookup(id);
    }

    /** The fields flavour's slow path ({@link Ef#state}): the thread has no state in its field yet. */
    @DontInline
    static ExactState attach() {
        return lookup(Thread.currentThread().getId());
    }

    /** The state of thread {@code id}, created on its first rewritten invocation; moved to its bucket's head.
     *  With Thread fields, also put in the thread's field (under LOCK, so that a state is in a field only
     *  while it is in the table). */
    @DontInline
    static ExactState lookup(long id) {
        if (!enabled) {
            return OFF;
        }
        synchronized (LOCK) {
            if (!enabled) {
                return OFF;
            }
            int b = (int) id & (BUCKETS - 1);
            ExactState prev = null;
            ExactState s = TABLE[b];
            while (s != null && s.tid != id) {
                prev = s;
                s = s.next;
            }
            if (s == null) {
                s = newState(Thread.currentThread(), id);
                if (s == OFF) {
                    return OFF;
                }
                if (threadRoots) {
                    s.root = threadRoot(Thread.currentThread().getName());
                }
                s.listed = true;
                s.next = TABLE[b];
            } else if (prev != null) {
                prev.next = s.next;
                s.next = TABLE[b];
            } else {
                return publish(s);
            }
            // ExactState.tid is final, so a thread that reads this slot without the lock sees it set.
            TABLE[b] = s;
            return publish(s);
        }
    }

    /** With Thread fields, makes {@code s} its thread's state; caller holds LOCK. The field is read only by
     *  its own thread, the one calling this. */
    private static ExactState publish(ExactState s) {
        if (fields) {
            s.owner.kprof$x = s;
        }
        return s;
    }

    /** With Thread fields, {@code s} is no longer its thread's state; caller holds LOCK. Another thread may
     *  clear the field: its owner then takes the slow path once and finds its state (or a new one) in the
     *  table, as the table flavour does. */
    private static void unpublish(ExactState s) {
        if (fields && s.owner != null && s.owner.kprof$x == s) {
            s.owner.kprof$x = null;
        }
    }

    /** Adds what {@code s} counted since its last merge to the agent's tree; {@code last}: the state is not
     *  merged again (its thread ended, or profiling stops). Caller holds {@code s}'s monitor, and {@code s} is
     *  listed (its memory not freed). */
    private static void merge(ExactState s, boolean last) {
        // The agent names a table by its first entry's address with its number of slots in the top 16 bits.
        merge(s.rootTable | (1L << 48), s.overflowTable | ((long) CAP << 48), s.root, last);
    }

    /** Called by the agent when a thread ends (on that thread): merges its tree, forgets its state and frees
     *  its memory (and that of states the thread had in earlier sessions). */
    static void threadEnded() {
        long id = Thread.currentThread().getId();
        ExactState ended = null;
        synchronized (LOCK) {
            int b = (int) id & (BUCKETS - 1);
            ExactState prev = null;
            for (ExactState s = TABLE[b]; s != null; prev = s, s = s.next) {
                if (s.tid == id) {
                    if (prev == null) {
                        TABLE[b] = s.next;
                    } else {
                        prev.next = s.next;
                    }
                    unpublish(s);
                    ended = s;
                    break;
                }
            }
        }
        // Merged outside LOCK (other threads start and end meanwhile), under the state's monitor, which a
        // dump's merge of the same tree holds too; once unlisted, no merge reads the tree again.
        if (ended != null) {
            synchronized (ended) {
                ended.listed = false;
                merge(ended, true);
            }
        }
        synchronized (LOCK) {
            if (ended != null) {
                free(ended);
            }
            ExactState prior = null;
            for (ExactState s = retired; s != null; s = s.next) {
                if (s.tid == id) {
                    free(s);
                    if (prior == null) {
                        retired = s.next;
                    } else {
                        prior.next = s.next;
                    }
                } else {
                    prior = s;
                }
            }
        }
    }

    /** Called by the agent before it writes the profile: merges every live thread's tree. LOCK is held only
     *  to list the states, each merged under its own monitor: a thread that starts counting meanwhile does
     *  not wait for the merges, and one that ends waits for its own tree's. A state that left the table in
     *  between (its thread ended, profiling stopped or restarted) was merged for the last time there, or
     *  retired, and is skipped. */
    static void mergeAll() {
        ExactState[] live;
        synchronized (LOCK) {
            int n = 0;
            for (ExactState head : TABLE) {
                for (ExactState s = head; s != null; s = s.next) {
                    n++;
                }
            }
            live = new ExactState[n];
            n = 0;
            for (ExactState head : TABLE) {
                for (ExactState s = head; s != null; s = s.next) {
                    live[n++] = s;
                }
            }
        }
        for (ExactState s : live) {
            synchronized (s) {
                if (s.listed) {
                    merge(s, false);
                }
            }
        }
    }

    /** Called by the agent when everything is in place: a new session starts from empty trees, which may
     *  take {@code budget} bytes over all threads ({@code bb}: with block counters). */
    static void init(boolean perThreadRoots, boolean threadFields, boolean bb, long budget) {
        synchronized (LOCK) {
            for (int b = 0; b < BUCKETS; b++) {
                for (ExactState s = TABLE[b]; s != null; ) {
                    ExactState next = s.next;
                    synchronized (s) {
                        s.listed = false;
                    }
                    unpublish(s);
                    s.next = retired;
                    retired = s;
                    s = next;
                }
                TABLE[b] = null;
            }
            threadRoots = perThreadRoots;
            fields = threadFields;
            if (bb && garbageBlocks == 0) {
                garbageBlocks = zeroed((long) MAX_BLOCKS << 3);
                U.putLong(DUMMY + BLOCKS, garbageBlocks);
            }
            session++;
            U.putLongVolatile(null, BUDGET, budget);
            enabled = true;
        }
    }

    /** Called by the agent when profiling stops: merges what is left; rewritten code keeps running but
     *  counts nothing (a frame still running counts into its thread's retired tree, freed when the thread
     *  ends). */
    static void disable() {
        enabled = false;
        synchronized (LOCK) {
            for (int b = 0; b < BUCKETS; b++) {
                for (ExactState s = TABLE[b]; s != null; ) {
                    ExactState next = s.next;
                    unpublish(s);
                    synchronized (s) {
                        s.listed = false;
                        merge(s, true);
                    }
                    s.next = retired;
                    retired = s;
                    s = next;
                }
                TABLE[b] = null;
            }
        }
    }

    /** {@code bytes} (a multiple of 64) of zeroed native memory, 64-byte aligned (2 MiB-aligned when that
     *  large), from the agent; 0 when the system has none. */
    private static native long map(long bytes);

    /** Returns what {@link #map} gave. */
    private static native void unmap(long address, long bytes);

    /** Adds a thread's tree (root table {@code table}, overflow table {@code overflow}, CCT root {@code root})
     *  to the agent's tree, reading the native memory: see the agent's src/engine/rewriting/exact.rs. */
    private static native void merge(long table, long overflow, int root, boolean last);

    /** The CCT node of a thread's root ({@code threads=on}). */
    private static native int threadRoot(String name);
}
