package kprof.harness;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import jdk.jfr.ValueDescriptor;
import jdk.jfr.consumer.RecordedClass;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordedFrame;
import jdk.jfr.consumer.RecordedMethod;
import jdk.jfr.consumer.RecordedStackTrace;
import jdk.jfr.consumer.RecordedThread;
import jdk.jfr.consumer.RecordingFile;

/**
 * Reads a JFR recording (the first argument) with {@code jdk.jfr.consumer.RecordingFile} and prints what
 * its events say, for tests that compare it with a profile: one line per distinct (event type, thread,
 * stack, other non-numeric fields), tab-separated, with the number of such events and the sums of their
 * numeric fields:
 *
 * <pre>
 * event TYPE THREAD STACK ATTRIBUTES COUNT SUMS
 * </pre>
 *
 * STACK is the frames from the outermost to the innermost, each {@code class.method(ParamTypes)ReturnType}
 * (the descriptor in Java form, as kprof names frames: {@code java.lang.String.indexOf(int,int)int}, a
 * malformed descriptor as it is; {@code " [native]"} appended to frames of type Native), joined by
 * {@code ;}; ATTRIBUTES are
 * the other fields as {@code name=value} joined by {@code ,} (classes by name); SUMS the numeric fields as
 * {@code name=sum} (the duration in nanoseconds). Then one {@code total TYPE COUNT} line per event type and
 * a {@code time FIRST LAST ORDERED} line: the earliest start and latest end, in nanoseconds since the epoch,
 * and whether the events came in order of start time. Tabs, line breaks and {@code ;} in names become
 * {@code _}.
 */
public final class JfrStacks {
    private static final Set<String> SKIPPED = Set.of("startTime", "duration", "stackTrace", "eventThread", "sampledThread");

    static String clean(String s) {
        return s == null ? "null" : s.replace('\t', '_').replace('\n', '_').replace('\r', '_').replace(';', '_');
    }

    static long nanos(Instant t) {
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    /** One type of a descriptor at {@code at[0]}, in Java form; moves {@code at[0]} past it. */
    static String type(String d, int[] at) {
        int dims = 0;
        while (d.charAt(at[0]) == '[') {
            dims++;
            at[0]++;
        }
        String base = switch (d.charAt(at[0])) {
            case 'B' -> "byte";
            case 'C' -> "char";
            case 'D' -> "double";
            case 'F' -> "float";
            case 'I' -> "int";
            case 'J' -> "long";
            case 'S' -> "short";
            case 'Z' -> "boolean";
            case 'V' -> "void";
            case 'L' -> {
                int end = d.indexOf(';', at[0]);
                if (end < 0) {
                    throw new IllegalArgumentException(d);
                }
                String name = d.substring(at[0] + 1, end).replace('/', '.');
                at[0] = end;
                yield name;
            }
            default -> throw new IllegalArgumentException(d);
        };
        at[0]++;
        return base + "[]".repeat(dims);
    }

    /** {@code (I[Ljava/lang/String;)V} as {@code (int,java.lang.String[])void}. */
    static String javaDescriptor(String d) {
        try {
            if (!d.startsWith("(")) {
                return d;
            }
            int[] at = {1};
            List<String> params = new ArrayList<>();
            while (d.charAt(at[0]) != ')') {
                params.add(type(d, at));
            }
            at[0]++;
            String result = type(d, at);
            return at[0] == d.length() ? "(" + String.join(",", params) + ")" + result : d;
        } catch (RuntimeException e) {
            return d;
        }
    }

    static String stack(RecordedStackTrace trace) {
        if (trace == null) {
            return "";
        }
        List<RecordedFrame> frames = trace.getFrames();
        List<String> names = new ArrayList<>();
        for (int i = frames.size() - 1; i >= 0; i--) {
            RecordedFrame f = frames.get(i);
            RecordedMethod m = f.getMethod();
            String name = m.getType().getName() + "." + m.getName() + javaDescriptor(m.getDescriptor());
            if ("Native".equals(f.getType())) {
                name += " [native]";
            }
            names.add(clean(name));
        }
        return String.join(";", names);
    }

    public static void main(String[] args) throws IOException {
        Map<String, long[]> counts = new TreeMap<>();
        Map<String, Map<String, Long>> sums = new TreeMap<>();
        Map<String, Long> totals = new TreeMap<>();
        long first = Long.MAX_VALUE;
        long last = Long.MIN_VALUE;
        long previousStart = Long.MIN_VALUE;
        boolean ordered = true;
        try (RecordingFile file = new RecordingFile(Path.of(args[0]))) {
            while (file.hasMoreEvents()) {
                RecordedEvent e = file.readEvent();
                String type = e.getEventType().getName();
                long start = nanos(e.getStartTime());
                ordered &= start >= previousStart;
                previousStart = start;
                first = Math.min(first, start);
                last = Math.max(last, nanos(e.getEndTime()));
                RecordedThread thread = e.hasField("sampledThread") ? e.getThread("sampledThread") : e.getThread();
                StringBuilder attributes = new StringBuilder();
                Map<String, Long> numbers = new TreeMap<>();
                if (e.hasField("duration")) {
                    numbers.put("duration", e.getDuration().toNanos());
                }
                for (ValueDescriptor v : e.getFields()) {
                    String name = v.getName();
                    if (SKIPPED.contains(name)) {
                        continue;
                    }
                    switch (v.getTypeName()) {
                        case "long", "int", "short", "byte" -> numbers.put(name, e.getLong(name));
                        case "java.lang.Class" -> {
                            RecordedClass c = e.getClass(name);
                            attributes.append(attributes.length() == 0 ? "" : ",").append(name).append('=')
                                    .append(c == null ? "null" : clean(c.getName()));
                        }
                        default -> attributes.append(attributes.length() == 0 ? "" : ",").append(name).append('=')
                                .append(clean(String.valueOf((Object) e.getValue(name))));
                    }
                }
                String key = String.join("\t", type, thread == null ? "null" : clean(thread.getJavaName()),
                        stack(e.getStackTrace()), attributes.toString());
                counts.computeIfAbsent(key, k -> new long[1])[0]++;
                Map<String, Long> s = sums.computeIfAbsent(key, k -> new TreeMap<>());
                numbers.forEach((k, n) -> s.merge(k, n, Long::sum));
                totals.merge(type, 1L, Long::sum);
            }
        }
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, long[]> c : counts.entrySet()) {
            List<String> s = new ArrayList<>();
            sums.get(c.getKey()).forEach((k, n) -> s.add(k + "=" + n));
            out.append("event\t").append(c.getKey()).append('\t').append(c.getValue()[0]).append('\t')
                    .append(String.join(",", s)).append('\n');
        }
        totals.forEach((type, n) -> out.append("total\t").append(type).append('\t').append(n).append('\n'));
        if (!totals.isEmpty()) {
            out.append("time\t").append(first).append('\t').append(last).append('\t').append(ordered).append('\n');
        }
        System.out.print(out);
    }
}
