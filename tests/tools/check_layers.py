#!/usr/bin/env python3
"""
check_layers.py BUILD_DIR SOURCE_DIR - the layering of strata's sources, from
the objects a build made: module A depends on module B when an object of A
uses a global symbol that an object of B defines. Fails (exit 1), printing
each cycle and the symbols that make it, when the modules of client/,
cached/, rpc/, proto/, transport/, engine/, metrics/ or common/ depend on
each other in a circle.

A module is one source file, except the groups below: files that share one
private header and are one concern cut into parts for size, which call each
other freely (docs/architecture.md, "Layout"). Objects of tests/, bench/ and
of sources no longer in the tree (a stale build directory) are ignored.
"""
import fnmatch
import os
import re
import subprocess
import sys

GROUPS = [
    ("client/dp", ["client/dp.c", "client/dp_*.c", "client/call.c"]),  # dp_internal.h
    ("client/cli", ["client/cli/cli.c", "client/cli/cli_cmds.c", "client/cli/cli_bench.c"]),
    ("cached/core", ["cached/core/*.c"]),  # store_internal.h
    ("cached/ssd", ["cached/ssd/*.c"]),  # ssd_internal.h
    ("cached/tier", ["cached/tier.c", "cached/tier_*.c"]),  # tier_internal.h
    ("transport", ["transport/transport.c", "transport/op.c", "transport/msg.c",
                   "transport/ucx.c", "transport/fabric.c"]),  # stt_internal.h
    ("rpc/server", ["rpc/server.c", "rpc/server_call.c", "rpc/server_sched.c",
                    "rpc/health.c"]),  # server_internal.h
    # The portable kernels and their AVX2 forms: each x dispatches to x_avx2,
    # whose tail falls back to x_portable (the documented x / x_avx2 pair).
    ("kernels/simd", ["kernels/simd.c", "kernels/simd_avx2.c"]),
    ("engine/engine", ["engine/engine.c", "engine/resume.c", "engine/put.c",
                       "engine/pool.c", "engine/score.c", "engine/vis.c"]),  # en_engine.h
    # The reference model on both devices (en_internal.h, en_dev.h): the CPU
    # layers, their CUDA forms, the sequence's rows, the DSA selection, the
    # device checks, the chunked prefill's spans on both devices.
    ("engine/model", ["engine/model.c", "engine/model_cuda.c", "engine/seq.c",
                      "engine/select.c", "engine/device.c", "engine/prefill.c",
                      "engine/prefill_cuda.c"]),
]
FOLDERS = ("client/", "cached/", "rpc/", "proto/", "transport/", "engine/", "metrics/",
           "common/", "kernels/")


def module_of(src):
    for name, pats in GROUPS:
        if any(fnmatch.fnmatch(src, p) for p in pats):
            return name
    return src


def target_dirs(build):
    """The CMakeFiles/<target>.dir folders of the targets this build defines now."""
    path = os.path.join(build, "CMakeFiles", "TargetDirectories.txt")
    try:
        with open(path, encoding="utf-8") as f:
            return {os.path.realpath(line.strip()) for line in f if line.strip()}
    except OSError:
        return None  # not a CMake build folder: every object counts


def objects(build, source):
    """(source path relative to the tree, object path) of every current object: in a
    folder of a target the build still has, of a source still in the tree."""
    out = []
    current = target_dirs(build)
    for root, _, files in os.walk(build):
        if current is not None and not any(
                os.path.realpath(root) == d or os.path.realpath(root).startswith(d + os.sep)
                for d in current):
            continue
        for f in files:
            if not f.endswith(".o"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, build)
            m = re.match(r"(.*?)/?CMakeFiles/[^/]+\.dir/(.*)\.o$", rel)
            if m is None:
                continue
            src = os.path.normpath(os.path.join(m.group(1), m.group(2)))
            if not src.startswith(FOLDERS) or not os.path.exists(os.path.join(source, src)):
                continue
            out.append((src, path))
    return out


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: check_layers.py BUILD_DIR SOURCE_DIR\n")
        return 2
    build, source = sys.argv[1], sys.argv[2]
    defs, uses = {}, {}
    objs = objects(build, source)
    if not objs:
        sys.stderr.write("check_layers: no objects of the sources under %s\n" % build)
        return 2
    for src, path in objs:
        mod = module_of(src)
        nm = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
        for line in nm.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBRC":
                defs.setdefault(p[2], mod)
            elif len(p) == 2 and p[0] == "U":
                uses.setdefault(mod, {}).setdefault(p[1], src)
    mods = sorted({module_of(s) for s, _ in objs})
    graph = {m: {} for m in mods}
    for m, syms in uses.items():
        for sym, src in syms.items():
            d = defs.get(sym)
            if d is not None and d != m:
                graph[m].setdefault(d, []).append(sym)
    # Tarjan's strongly connected components.
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index:
            visit(v)
    for comp in comps:
        print("check_layers: modules depend on each other in a circle: " + ", ".join(comp))
        for a in comp:
            for b in sorted(set(graph[a]) & set(comp)):
                print("  %s -> %s (%s)" % (a, b, ", ".join(sorted(graph[a][b])[:5])))
    print("check_layers: %d modules from %d objects, %d circles" % (len(mods), len(objs),
                                                                      len(comps)))
    return 1 if comps else 0


if __name__ == "__main__":
    sys.exit(main())
