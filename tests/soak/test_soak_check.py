#!/usr/bin/python3
"""test_soak_check.py - the soak's checker (soak_check.py) on synthetic runs:
a flat run passes (also when the SSD tier's mapped file grows), and each
planted fault fails with a message naming it: RSS
that grows 1 MiB a minute (a slow leak, under the range bound), RSS that
steps up by 64 MiB once, one descriptor leaked a minute, a thread leaked
per minute, descriptors not given back when idle, a lease and a reservation
left at the end, no eviction; and of the generator's report: wrong bytes, a
refusal that is not clean, a call kind never answered.

The samples are written to a CSV and read back, as a real run's are. No
daemon, no clock: it runs in a second.
"""

import csv
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_check as sc  # noqa: E402

MIB = 1 << 20
NODES = ("n0", "n1", "n2")


def run(minutes=30, step_s=5, plant=None, seed=1, file_mib_per_min=0.0, durable_kib=0.0):
    """Samples of a synthetic run: 30 s base, `minutes` of load, 30 s idle;
    RSS rises to a plateau in the first tenth of the load with +-2 MiB of
    noise."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    load_s = minutes * 60.0
    ramp_s = load_s / 10
    while t <= 30 + load_s + 30:
        phase = "base" if t < 30 else "load" if t < 30 + load_s else "idle"
        for i, node in enumerate(NODES):
            lt = min(max(t - 30, 0.0), load_s)  # seconds into the load
            rss = 40 * MIB + min(lt / ramp_s, 1.0) * 120 * MIB + rng.uniform(-2, 2) * MIB
            fds = 30 + (8 if phase == "load" else 0) + rng.choice((0, 0, 1))
            threads = 16 + (2 if phase == "load" else 0)
            leases = rng.randint(0, 20) if phase == "load" else 0
            res = rng.randint(0, 5) if phase == "load" else 0
            if plant and i == 1:  # the fault is on one node only
                rss, fds, threads, leases, res = plant(phase, lt, rss, fds, threads, leases, res)
            file_b = 36 * MIB + lt / 60.0 * file_mib_per_min * MIB
            catalog = 40 + int(lt)  # a durable object a second
            rss += catalog * durable_kib * 1024
            rows.append({"t_s": t, "phase": phase, "node": node, "pid": 100 + i,
                         "rss_bytes": int(rss + file_b - 36 * MIB),
                         "rss_anon_bytes": int(rss - 100 * MIB),
                         "rss_file_bytes": int(file_b), "rss_shmem_bytes": 64 * MIB,
                         "fds": fds, "threads": threads,
                         "self_rss_bytes": int(rss), "self_fds": fds, "self_threads": threads,
                         "leases": leases, "reservations": res, "pins": 0,
                         "sessions": 50, "evicted_objects": int(lt * 10),
                         "ssd_spills": int(lt * 5), "catalog": catalog})
        t += step_s
    return rows


def check(rows, bounds=None, **kw):
    """Problems of rows, written to a CSV and read back through the checker."""
    fd, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sc.COLUMNS)
        w.writeheader()
        w.writerows(rows)
    try:
        summaries, problems = sc.check_samples(sc.read_csv(path), bounds or sc.Bounds(), **kw)
    finally:
        os.unlink(path)
    return summaries, problems


def file_growth(phase, lt, rss, fds, threads, leases, res):
    return rss, fds, threads, leases, res  # the file pages grow: see run(file_mib_per_min)


def slow_leak(phase, lt, rss, fds, threads, leases, res):
    return rss + (lt / 60.0) * MIB, fds, threads, leases, res  # 10 MiB per 10 min


def step_leak(phase, lt, rss, fds, threads, leases, res):
    return rss + (64 * MIB if lt > 900 else 0), fds, threads, leases, res


def fd_leak(phase, lt, rss, fds, threads, leases, res):
    return rss, fds + int(lt / 60.0), threads, leases, res


def thread_leak(phase, lt, rss, fds, threads, leases, res):
    return rss, fds, threads + int(lt / 60.0), leases, res


def fds_kept(phase, lt, rss, fds, threads, leases, res):
    return rss, fds + (8 if phase == "idle" else 0), threads, leases, res


def lease_kept(phase, lt, rss, fds, threads, leases, res):
    return rss, fds, threads, (1 if phase == "idle" else leases), res


def reservation_kept(phase, lt, rss, fds, threads, leases, res):
    return rss, fds, threads, leases, (2 if phase == "idle" else res)


PLANTS = (
    (slow_leak, ("RSS (less mapped files) grows",)),
    (slow_leak, ("anonymous RSS (the heap) grows",)),
    (step_leak, ("RSS (less mapped files) moved",)),
    (fd_leak, ("open descriptors went from",)),
    (thread_leak, ("threads went from",)),
    (fds_kept, ("open descriptors", "when idle at the end")),
    (lease_kept, ("1 leases still held when idle",)),
    (reservation_kept, ("2 reservations still held when idle",)),
)

GOOD_REPORT = {
    "wrong_bytes": 0,
    "errors": {"ST_ERR_OVERLOADED": 12, "ST_ERR_EXHAUSTED": 3},
    "kinds": {k: {"count": 100, "ok": 90} for k in ("lookup", "get", "rows", "put")},
}


def main():
    failures = []

    def expect(what, cond):
        print(("ok    " if cond else "FAIL  ") + what, flush=True)
        if not cond:
            failures.append(what)

    summaries, problems = check(run())
    expect("a flat run passes (%s)" % problems, problems == [])
    expect("its table has a line per node",
           sc.table(summaries).count("\n") == 1 + len(NODES))
    slope = summaries[1]["rss_slope"]
    expect("its RSS slope is near 0 (%.2f MiB/10 min)" % slope, abs(slope) < 2.0)
    for seed in range(2, 7):  # the noise alone never trips the bounds
        _, p = check(run(seed=seed))
        expect("flat run, seed %d, passes (%s)" % (seed, p), p == [])

    for plant, want in PLANTS:
        _, problems = check(run(plant=plant))
        named = [p for p in problems if p.startswith("n1:") and all(w in p for w in want)]
        others = [p for p in problems if not p.startswith("n1:")]
        expect("%s is caught on n1 (%s)" % (plant.__name__, problems), named and not others)

    _, problems = check(run(plant=step_leak), bounds=sc.Bounds(rss_check=False))
    expect("with the RSS check off (sanitizers) RSS is not judged (%s)" % problems,
           problems == [])
    _, problems = check(run(plant=fd_leak), bounds=sc.Bounds(rss_check=False))
    expect("... but descriptors still are", any("open descriptors" in p for p in problems))

    _, problems = check(run(file_mib_per_min=20.0))
    expect("the SSD tier's mapped file growing 200 MiB per 10 min is not a leak (%s)" % problems,
           problems == [])

    _, problems = check(run(durable_kib=1.0))
    expect("a heap that grows 1 KiB per durable object held passes (%s)" % problems,
           problems == [])
    summaries, problems = check(run(durable_kib=16.0))
    expect("16 KiB per durable object, above the 1.25 KiB allowed, fails (%s)" % problems,
           any("anonymous RSS (the heap) grows" in p for p in problems))
    expect("the table says what one costs (%.2f KiB)" % summaries[0]["per_durable"],
           abs(summaries[0]["per_durable"] - 16.0) < 0.5)

    # The slow leak is under the range bound in 5 minutes but not under the slope's.
    _, problems = check(run(minutes=5, plant=slow_leak))
    expect("a 5-minute run catches the slow leak too (%s)" % problems,
           any("RSS (less mapped files) grows" in p for p in problems))

    rows = [r for r in run() if not (r["node"] == "n2" and r["phase"] == "idle")]
    _, problems = check(rows)
    expect("no idle samples of n2 is a problem (%s)" % problems,
           any(p.startswith("n2: no idle sample") for p in problems))

    rows = run()
    for r in rows:
        r["evicted_objects"] = 0 if r["node"] == "n0" else r["evicted_objects"]
    _, problems = check(rows)
    expect("a node that evicted nothing is named", any("n0 evicted nothing" in p
                                                       for p in problems))
    _, problems = check(rows, want_eviction=False)
    expect("... unless the eviction check is off", problems == [])

    expect("a clean report passes", sc.check_report(GOOD_REPORT) == [])
    bad = dict(GOOD_REPORT, wrong_bytes=64)
    expect("wrong bytes fail", any("64 wrong bytes" in p for p in sc.check_report(bad)))
    bad = dict(GOOD_REPORT, errors={"ST_ERR_OVERLOADED": 3, "ST_ERR_TIMEOUT": 2})
    expect("a timeout is not a clean refusal",
           any("ST_ERR_TIMEOUT" in p for p in sc.check_report(bad)))
    bad = dict(GOOD_REPORT, errors={"get": {"ST_ERR_UNAVAILABLE": 1}})
    expect("per-kind errors are read too",
           any("get calls failed with ST_ERR_UNAVAILABLE" in p for p in sc.check_report(bad)))
    kinds = dict(GOOD_REPORT["kinds"], rows={"count": 10, "ok": 0})
    expect("a kind with no success fails",
           any("'rows'" in p for p in sc.check_report(dict(GOOD_REPORT, kinds=kinds))))

    fd, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(fd, "w") as f:
        f.write("t_s,phase,node\n0,base,n0\n")
    try:
        sc.read_csv(path)
        expect("a CSV without the columns is refused", False)
    except ValueError as e:
        expect("a CSV without the columns is refused, naming them (%s)" % e,
               "lacks column(s) pid" in str(e))
    finally:
        os.unlink(path)

    if failures:
        print("FAIL: %d check(s) of the checker failed" % len(failures))
        return 1
    print("PASS: the checker passes flat runs and names every planted fault")
    return 0


if __name__ == "__main__":
    sys.exit(main())
