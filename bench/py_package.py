#!/usr/bin/python3
"""The Python package's cost over the least Python can do: batched gets and
puts through strata.Client (get/put, get_async + wait) against the same
batches through bare ctypes calls to st_client_get/st_client_put over op
arrays built once (the peer: libstrata with nothing of the package around
it), against one real daemon on loopback, in the same run, alternating
A/B per repetition. Reports per shape the medians, the spread (min..max)
and the ratio package / bare (1.0: the package adds nothing).

    /usr/bin/python3 bench/py_package.py --stratad build/release/cached/stratad \
        --lib build/release/client/libstrata.so [--reps 9]
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "client", "python"))
from obs_harness import free_port  # noqa: E402

import numpy as np  # noqa: E402


def bare_batch(strata, c, chain, arrays, op):
    """The peer's op array for arrays (built once, outside the timing)."""
    n = len(arrays)
    if op == "get":
        ops = (strata.CGetOp * n)()
        for i, a in enumerate(arrays):
            ops[i].block, ops[i].kind, ops[i].dst, ops[i].dst_len = (
                i, strata.KV, a.ctypes.data, a.nbytes)
    else:
        ops = (strata.CPutOp * n)()
        for i, a in enumerate(arrays):
            ops[i].block, ops[i].kind, ops[i].src, ops[i].len = (i, strata.KV, a.ctypes.data,
                                                                 a.nbytes)
    buf = ctypes.create_string_buffer(chain, len(chain))
    return ops, buf


def bare(strata, c, ops, buf, n, op):
    lib, h = strata.lib, ctypes.c_void_p()
    fn = lib.st_client_get if op == "get" else lib.st_client_put
    args = (c._c, buf, len(buf) // 16, ops, n) + (() if op == "get" else (0,))
    st = fn(*args, ctypes.byref(h))
    assert st == 0, st
    lib.st_handle_wait(h, -1)
    lib.st_handle_release(h)
    assert all(o.status == 0 for o in ops), [o.status for o in ops]


def package(strata, c, chain, arrays, op, mode):
    objs = [(i, strata.KV, 0, a) for i, a in enumerate(arrays)]
    if op == "put":
        assert c.put(chain, objs) == [0] * len(objs)
    elif mode == "sync":
        assert all(r.status == 0 for r in c.get(chain, objs))
    else:
        with c.get_async(chain, objs) as h:
            assert all(r.status == 0 for r in h.wait())


def measure(strata, c, shape, reps, calls):
    n, size, op, mode = shape
    chain = c.hash(np.arange(c.block_tokens * n, dtype=np.uint32) + size)
    src = [np.random.default_rng(i).integers(0, 256, size, dtype=np.uint8) for i in range(n)]
    assert c.put(chain, [(i, strata.KV, 0, a) for i, a in enumerate(src)]) == [0] * n
    arrays = src if op == "put" else [np.empty(size, np.uint8) for _ in range(n)]
    ops, buf = bare_batch(strata, c, chain, arrays, op)
    a_times, b_times = [], []
    for r in range(reps):
        for who in ((0, 1) if r % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            for _ in range(calls):
                if who == 0:
                    package(strata, c, chain, arrays, op, mode)
                else:
                    bare(strata, c, ops, buf, n, op)
            (a_times if who == 0 else b_times).append((time.perf_counter() - t0) / calls)
    if op == "get":
        assert all(np.array_equal(x, y) for x, y in zip(arrays, src))
    return a_times, b_times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    os.environ["STRATA_LIB"] = args.lib
    import strata

    port = free_port()
    d = subprocess.Popen([args.stratad, "--listen", "127.0.0.1:%d" % port, "--memory-limit", "1G"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert "stratad ready" in d.stdout.readline().decode()
        c = strata.Client("127.0.0.1:%d" % port, tenant="bench", model="py")
        shapes = [(1, 4096, "get", "sync"), (32, 4096, "get", "sync"),
                  (32, 4096, "get", "async"), (32, 4096, "put", "sync"),
                  (8, 1 << 20, "get", "sync")]
        print("%-26s %12s %12s %8s  %s" % ("batch", "package", "bare ctypes", "ratio",
                                          "spread package | bare (us)"))
        for shape in shapes:
            calls = 200 if shape[1] <= 4096 else 5
            a, b = measure(strata, c, shape, args.reps, calls)
            ma, mb = statistics.median(a), statistics.median(b)
            print("%-26s %9.1f us %9.1f us %8.3f  %.1f..%.1f | %.1f..%.1f" % (
                "%d x %d B %s %s" % shape, ma * 1e6, mb * 1e6, ma / mb, min(a) * 1e6,
                max(a) * 1e6, min(b) * 1e6, max(b) * 1e6))
        c.close()
    finally:
        d.terminate()
        d.wait()


if __name__ == "__main__":
    main()
