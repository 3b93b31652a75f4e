"""What kprof's Python scripts share: the release build, the JDKs, the agent's summary line and the real
workloads, run so that their result can be compared between a run with the agent and one without.

Scripts import it with `sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))`.
"""
import glob
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Build:
    """Paths of a release build: the agent, the `kprof` tool and the build script's output directory (the
    compiled java-harness, `harness-classes`, and its JNI library)."""

    def __init__(self, target):
        release = os.path.join(target, "release")
        self.target = target
        self.lib = os.path.join(release, "libkprof.so")
        self.kprof = os.path.join(release, "kprof")
        # Old build directories of other configurations may linger: the newest harness is this build's.
        self.out_dir = max(glob.glob(os.path.join(release, "build", "kprof-*", "out", "harness-classes")),
                           key=os.path.getmtime)[:-len("/harness-classes")]
        self.harness = os.path.join(self.out_dir, "harness-classes")


def build():
    """Builds kprof in release mode (CARGO_TARGET_DIR is honoured) and returns its paths."""
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    return Build(re.search(r'"target_directory":"([^"]+)"', meta).group(1))


def jdks():
    """Every JDK 17 or later under /usr/lib/jvm, once each (aliases resolved), oldest first."""
    found = {}
    for d in sorted(glob.glob("/usr/lib/jvm/*")):
        home = os.path.realpath(d)
        if not os.path.exists(os.path.join(home, "bin", "java")) or home in found.values():
            continue
        version = jdk_version(os.path.join(home, "bin", "java"))
        if version >= 17:
            found[version] = home
    return [found[v] for v in sorted(found)]


def jdk_version(java):
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)', out)
    return int(m.group(1)) if m else 0


def java_version_line(java):
    return subprocess.run([java, "-version"], capture_output=True, text=True).stderr.splitlines()[0]


def summary(text):
    """The agent's summary line in `text` as a dict (`left_alone` with its reasons), or None."""
    for line in text.splitlines():
        if line.startswith("kprof: mode="):
            s = dict(kv.split("=", 1) for kv in line[len("kprof: "):].split() if "=" in kv)
            reasons = re.search(r"left_alone=\d+ \(([^)]*)\)", line)
            if reasons and "left_alone" in s:
                s["left_alone"] += f" ({reasons.group(1).replace(',', ', ')})"
            return s
    return None


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def geomean(xs):
    xs = list(xs)
    if not xs or any(x != x for x in xs):
        return float("nan")
    return math.exp(statistics.mean(math.log(max(x, 1e-9)) for x in xs))


def geomean_interval(workloads, level=0.90, draws=2000, seed=20261128):
    """How far the geometric mean of per-workload ratios of medians could move with other runs of the
    same bench: `workloads` holds, per workload, (baseline times, configuration times), each indexed by
    round. The rounds are resampled with replacement `draws` times, each round's two runs kept together
    (they ran side by side, so the machine's state of the moment is in both), and the central `level`
    of the resampled geometric means is returned as (low, high). A fixed seed: the same runs give the
    same interval."""
    rng = random.Random(seed)
    means = []
    for _ in range(draws):
        logs = []
        for base, runs in workloads:
            n = min(len(base), len(runs))
            if n == 0:
                return (float("nan"), float("nan"))
            pick = [rng.randrange(n) for _ in range(n)]
            logs.append(math.log(median([runs[i] for i in pick]) / median([base[i] for i in pick])))
        means.append(math.exp(statistics.mean(logs)))
    means.sort()
    tail = (1 - level) / 2
    return (means[int(tail * draws)], means[min(draws - 1, int((1 - tail) * draws))])


def fmt(x, digits=0):
    return "n/a" if x != x else f"{x:.{digits}f}"


def workloads_dir():
    return os.environ.get("KPROF_WORKLOADS", os.path.join(ROOT, "..", "shared", "workloads"))


def workload_names():
    d = workloads_dir()
    return sorted(f[:-3] for f in os.listdir(d) if f.endswith(".sh") and f != "install.sh")


class WorkloadRun:
    """One run of a workload script: `ok`, its output, the JVM's stderr (`log`: the workloads keep it in
    their work directory), the JVM's wall time the script measured, and its result counters without what
    is not a result (`result`, comparable between a run with the agent and one without)."""

    def __init__(self, name, proc, log, elapsed, cpu_s=float("nan")):
        self.name = name
        # User and system CPU time of the script's processes (the JVM with all its threads, and the
        # script's own tools): what profiling costs the host, without the time spent waiting (I/O, other
        # processes on the machine), which wall time includes.
        self.cpu_s = cpu_s
        self.proc = proc
        self.log = log
        self.elapsed = elapsed
        m = re.search(r"^" + re.escape(name) + r": ok jvm_wall_s=([\d.]+)(.*)$", proc.stdout, re.M)
        self.ok = proc.returncode == 0 and m is not None
        self.jvm_wall_s = float(m.group(1)) if m else float("nan")
        self.counters = m.group(2).strip() if m else ""
        self.result = normalised_result(name, self.counters, log) if m else None
        self.summary = summary(log + proc.stderr)

    def failure(self):
        return (self.proc.stdout + self.proc.stderr).strip()[-3000:]


def normalised_result(name, counters, log):
    """A workload's result counters, less times (`*_s`) and luindex's index size (its merge threads'
    timing shapes it: it differs between two runs without an agent); jdeps counts the lines of its log,
    where the JVM's stderr goes too, so kprof's own lines are taken off."""
    result = " ".join(kv for kv in counters.split()
                      if not kv.split("=")[0].endswith("_s") and not kv.startswith("index_bytes="))
    if name == "jdeps":
        ours = sum(1 for line in log.splitlines() if line.startswith("kprof: "))
        result = re.sub(r"dependency_lines=(\d+)", lambda d: f"dependency_lines={int(d.group(1)) - ours}", result)
    return result


def run_workload(name, java, java_opts, tmp):
    """Runs workload `name` once with JAVA_OPTS `java_opts`, in a private BENCH_TMP under `tmp` that shares
    the generated inputs (`BENCH_TMP` or /tmp/javabench, `data`), keeping its work directory until the JVM's
    log is read, then removing it."""
    shared = os.environ.get("BENCH_TMP", "/tmp/javabench")
    os.makedirs(os.path.join(shared, "data"), exist_ok=True)
    bench_tmp = tempfile.mkdtemp(dir=tmp, prefix=f"{name}-")
    os.symlink(os.path.join(shared, "data"), os.path.join(bench_tmp, "data"))
    env = dict(os.environ, JAVA=java, JAVA_OPTS=java_opts, BENCH_TMP=bench_tmp, KEEP_WORK="1")
    t0 = time.monotonic()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([os.path.join(workloads_dir(), name + ".sh")], env=env, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    elapsed = time.monotonic() - t0
    # Children's usage counts processes once they are waited for: the script waits for its JVM, and
    # subprocess.run for the script.
    cpu_s = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    # The JVM's stderr: the work directory's `log` (tomcat's `base/logs/console.log`).
    log = ""
    for d in os.listdir(bench_tmp):
        if d == "data":
            continue
        for dirpath, _, files in os.walk(os.path.join(bench_tmp, d)):
            for f in files:
                if f in ("log", "console.log"):
                    with open(os.path.join(dirpath, f), errors="replace") as fh:
                        log += fh.read()
    shutil.rmtree(bench_tmp, ignore_errors=True)
    return WorkloadRun(name, p, log, elapsed, cpu_s)
