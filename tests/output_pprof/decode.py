#!/usr/bin/env python3
"""Decodes a pprof file with Python protobuf and the profile.proto beside this script, checks its
internal consistency, and prints what it holds as JSON (for tests/output_pprof_decode.rs).

usage: decode.py FILE.pb.gz
Needs: python3 -m pip install protobuf grpcio-tools (scripts/install-test-deps), or protoc on PATH.
"""
import gzip
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_proto(out_dir):
    """Generates profile_pb2.py into out_dir with grpc_tools' protoc, else a protoc binary."""
    args = ["-I", HERE, "--python_out=" + out_dir, os.path.join(HERE, "profile.proto")]
    try:
        from grpc_tools import protoc  # noqa: PLC0415

        if protoc.main(["protoc"] + args) == 0:
            return
    except ImportError:
        pass
    if shutil.which("protoc"):
        subprocess.run(["protoc"] + args, check=True)
        return
    sys.exit("neither grpcio-tools nor protoc is installed: run scripts/install-test-deps")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        import google.protobuf  # noqa: F401,PLC0415
    except ImportError:
        sys.exit("Python protobuf is not installed: run scripts/install-test-deps")
    with tempfile.TemporaryDirectory() as tmp:
        compile_proto(tmp)
        sys.path.insert(0, tmp)
        pb = importlib.import_module("profile_pb2")
        with open(sys.argv[1], "rb") as f:
            raw = gzip.decompress(f.read())
        prof = pb.Profile()
        prof.ParseFromString(raw)

    problems = []
    strings = list(prof.string_table)
    if not strings or strings[0] != "":
        problems.append("string_table[0] is not the empty string")

    def s(i):
        if not 0 <= i < len(strings):
            problems.append("string index %d out of range" % i)
            return None
        return strings[i]

    functions = {}
    for fn in prof.function:
        if fn.id == 0 or fn.id in functions:
            problems.append("function id %d is zero or repeated" % fn.id)
        functions[fn.id] = fn
    names = [s(fn.name) for fn in prof.function]
    if len(set(names)) != len(names):
        problems.append("functions are not deduplicated by name")

    locations = {}
    for loc in prof.location:
        if loc.id == 0 or loc.id in locations:
            problems.append("location id %d is zero or repeated" % loc.id)
        if len(loc.line) != 1:
            problems.append("location %d has %d lines" % (loc.id, len(loc.line)))
        for line in loc.line:
            if line.function_id not in functions:
                problems.append("location %d names unknown function %d" % (loc.id, line.function_id))
        locations[loc.id] = loc
    keys = [(loc.line[0].function_id, loc.line[0].line) for loc in prof.location if loc.line]
    if len(set(keys)) != len(keys):
        problems.append("locations are not deduplicated by (function, line)")

    samples = []
    for sample in prof.sample:
        if len(sample.value) != len(prof.sample_type):
            problems.append("a sample has %d values for %d types" % (len(sample.value), len(prof.sample_type)))
        stack, lines = [], []
        for lid in sample.location_id:
            loc = locations.get(lid)
            if loc is None:
                problems.append("sample names unknown location %d" % lid)
                continue
            line = loc.line[0]
            stack.append(s(functions[line.function_id].name))
            lines.append(line.line)
        # pprof lists leaf first; print root first.
        samples.append({"stack": stack[::-1], "lines": lines[::-1], "values": list(sample.value)})

    def value_type(vt):
        return [s(vt.type), s(vt.unit)]

    out = {
        "sample_types": [value_type(vt) for vt in prof.sample_type],
        "period_type": value_type(prof.period_type) if prof.HasField("period_type") else None,
        "period": prof.period,
        "time_nanos": prof.time_nanos,
        "duration_nanos": prof.duration_nanos,
        "default_sample_type": s(prof.default_sample_type),
        "comments": [s(c) for c in prof.comment],
        "functions": len(prof.function),
        "system_names": sorted(s(fn.system_name) for fn in prof.function),
        "locations": len(prof.location),
        "mappings": len(prof.mapping),
        "samples": samples,
        "problems": problems,
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
