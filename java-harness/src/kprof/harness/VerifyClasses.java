package kprof.harness;

import java.io.IOException;
import java.io.PrintWriter;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * Loads and links classes and reports, per class, whether that worked and which error it raised. Used by kprof's
 * class-file tests to prove that rewritten classes pass the verifier (run it with
 * {@code -XX:+UnlockDiagnosticVMOptions -XX:+BytecodeVerificationLocal -XX:+BytecodeVerificationRemote}).
 *
 * <pre>
 * VerifyClasses --names FILE OUT        classes named in FILE (binary names), from the system class loader
 *                                       (JDK classes: patch their modules with --patch-module)
 * VerifyClasses [--lib CP] --dir DIR... OUT
 *                                       every class file under each DIR, defined child-first by a loader over
 *                                       that DIR that also defines the classes of the jars of CP
 * </pre>
 *
 * Each class is loaded without initialization and linked through reflection (HotSpot links a class before it
 * answers getDeclaredFields/Methods/Constructors). OUT gets one line per class: its name (prefixed with the
 * DIR's last component in --dir mode), OK or the simple name of the first error, and the error's message. A
 * summary by outcome goes to standard output.
 */
public final class VerifyClasses {
    /**
     * Defines the classes found under a directory itself, before asking the platform loader, so rewritten copies
     * win; classes of the library jars are defined by the same loader (not a parent), so that a class and the
     * library classes of its package share one runtime package, as they do on a plain class path.
     */
    static final class ChildFirstLoader extends ClassLoader {
        private final Path root;
        private final URLClassLoader libs;

        ChildFirstLoader(Path root, URLClassLoader libs) {
            super(ClassLoader.getPlatformClassLoader());
            this.root = root;
            this.libs = libs;
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            synchronized (getClassLoadingLock(name)) {
                Class<?> c = findLoadedClass(name);
                if (c == null) {
                    String file = name.replace('.', '/') + ".class";
                    Path p = root.resolve(file);
                    try {
                        if (!name.startsWith("java.") && Files.isRegularFile(p)) {
                            byte[] b = Files.readAllBytes(p);
                            c = defineClass(name, b, 0, b.length);
                        } else {
                            try {
                                c = getParent().loadClass(name);
                            } catch (ClassNotFoundException e) {
                                URL u = libs.findResource(file);
                                if (u == null) {
                                    throw e;
                                }
                                byte[] b;
                                try (java.io.InputStream in = u.openStream()) {
                                    b = in.readAllBytes();
                                }
                                c = defineClass(name, b, 0, b.length);
                            }
                        }
                    } catch (IOException e) {
                        throw new ClassNotFoundException(name, e);
                    }
                }
                if (resolve) {
                    resolveClass(c);
                }
                return c;
            }
        }
    }

    public static void main(String[] args) throws Exception {
        List<String> names = new ArrayList<>();
        String out = null;
        List<Path> dirs = new ArrayList<>();
        String lib = "";
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--names":
                    names.addAll(Files.readAllLines(Paths.get(args[++i])));
                    break;
                case "--dir":
                    dirs.add(Paths.get(args[++i]));
                    break;
                case "--lib":
                    lib = args[++i];
                    break;
                default:
                    out = args[i];
            }
        }
        if (out == null) {
            System.err.println("usage: VerifyClasses (--names FILE | --dir DIR [--lib CP]) OUT");
            System.exit(2);
        }
        Map<String, Integer> summary = new TreeMap<>();
        int count = 0;
        try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Paths.get(out)))) {
            if (dirs.isEmpty()) {
                count += checkAll("", names, ClassLoader.getSystemClassLoader(), w, summary);
            } else {
                List<URL> urls = new ArrayList<>();
                for (String s : lib.split(java.io.File.pathSeparator)) {
                    if (!s.isEmpty()) {
                        urls.add(Paths.get(s).toUri().toURL());
                    }
                }
                URLClassLoader libs = new URLClassLoader(urls.toArray(new URL[0]), null);
                for (Path dir : dirs) {
                    count += checkAll(dir.getFileName() + "/", classesUnder(dir), new ChildFirstLoader(dir, libs), w,
                            summary);
                }
            }
        }
        System.out.println("classes " + count);
        for (Map.Entry<String, Integer> e : summary.entrySet()) {
            System.out.println(e.getKey() + " " + e.getValue());
        }
    }

    static List<String> classesUnder(Path dir) throws IOException {
        List<String> names = new ArrayList<>();
        try (Stream<Path> s = Files.walk(dir)) {
            s.filter(p -> p.toString().endsWith(".class")).forEach(p -> {
                String rel = dir.relativize(p).toString();
                if (!rel.startsWith("META-INF") && !rel.endsWith("module-info.class")
                        && !rel.endsWith("package-info.class")) {
                    names.add(rel.substring(0, rel.length() - 6).replace('/', '.'));
                }
            });
        }
        names.sort(null);
        return names;
    }

    static int checkAll(String prefix, List<String> names, ClassLoader loader, PrintWriter w,
            Map<String, Integer> summary) {
        int n = 0;
        for (String name : names) {
            if (name.isEmpty()) {
                continue;
            }
            n++;
            String outcome = check(name, loader);
            summary.merge(outcome.split(" ", 2)[0], 1, Integer::sum);
            w.println(prefix + name + " " + outcome.replace('\n', ' '));
        }
        return n;
    }

    static String check(String name, ClassLoader loader) {
        try {
            Class<?> c = Class.forName(name, false, loader);
            c.getDeclaredFields();
            c.getDeclaredMethods();
            c.getDeclaredConstructors();
            return "OK";
        } catch (Throwable t) {
            return t.getClass().getSimpleName() + " " + t.getMessage();
        }
    }
}
