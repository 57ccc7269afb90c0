#!/usr/bin/python3
"""load_sweep.py - the summary of bench/load_sweep.sh's runs.

    load_sweep.py OUT_DIR "RATES" LOWEST REPS

Reads OUT_DIR/<tag>.json (strata load reports), writes OUT_DIR/load_sweep.dat
(one row per offered rate: p99 in ms of lookup, get, rows, put on strata,
then on Redis, then each side's achieved rate and error count) for gnuplot,
and prints markdown tables and the issue's checks: the highest rate at which
strata refused nothing and kept up, its lookup p99 against 2 ms, the rate at
which refusals start, the recovery run, and small-get p99 with --big-load
against without (median and range of the ratio over the repetitions).
"""

import json
import os
import statistics
import sys

KINDS = ("lookup", "get", "rows", "put")


def load(out, tag):
    path = os.path.join(out, tag + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def p99_ms(r, kind):
    return r["kinds"][kind]["p99_us"] / 1000.0 if r and r["kinds"][kind]["count"] else float("nan")


def errors(r):
    return sum(r["errors"].values()) if r else -1


def kept_up(r):
    """Nothing refused or failed, and the achieved rate within 10% of the offered (Poisson noise over a 10 s window is about 3-4%)."""
    return r is not None and errors(r) == 0 and r["achieved_rate"] >= 0.9 * r["offered_rate"]


def sweep(out, rates):
    rows = []
    with open(os.path.join(out, "load_sweep.dat"), "w") as dat:
        dat.write("# rate  strata: lookup get rows put p99_ms  redis: lookup get rows put p99_ms"
                  "  strata_achieved redis_achieved strata_errors redis_errors\n")
        for rate in rates:
            s, r = load(out, "sweep-strata-%d" % rate), load(out, "sweep-redis-%d" % rate)
            vals = [p99_ms(s, k) for k in KINDS] + [p99_ms(r, k) for k in KINDS]
            dat.write("%d  %s  %.1f %.1f %d %d\n" % (
                rate, " ".join("%.3f" % v for v in vals),
                s["achieved_rate"] if s else 0, r["achieved_rate"] if r else 0,
                errors(s), errors(r)))
            rows.append((rate, s, r))
    print("| offered /s | backend | achieved /s | lookup p50 / p99 ms | get p99 ms | rows p99 ms "
          "| put p99 ms | lookup hit | errors |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rate, s, r in rows:
        for name, x in (("strata", s), ("Redis", r)):
            if x is None:
                print("| %d | %s | (no report) | | | | | | |" % (rate, name))
                continue
            print("| %d | %s | %.1f | %.2f / %.2f | %.2f | %.2f | %.2f | %.1f%% | %s |" % (
                rate, name, x["achieved_rate"], x["kinds"]["lookup"]["p50_us"] / 1000.0,
                p99_ms(x, "lookup"), p99_ms(x, "get"), p99_ms(x, "rows"), p99_ms(x, "put"),
                100.0 * x["hit_rates"]["lookup"],
                ", ".join("%s %d" % kv for kv in sorted(x["errors"].items())) or "0"))
    return rows


def checks(out, rows, lowest):
    for name, idx in (("strata", 1), ("Redis", 2)):
        ok = [row for row in rows if kept_up(row[idx])]
        best = max(ok, key=lambda row: row[0]) if ok else None
        bad = [row for row in rows if row[idx] is not None and errors(row[idx]) > 0]
        slow = [row for row in rows if row[idx] is not None and not kept_up(row[idx])]
        if best:
            p = p99_ms(best[idx], "lookup")
            print("%s: highest rate with nothing refused and kept up: %d/s, lookup p99 %.2f ms "
                  "(target < 2 ms: %s)" % (name, best[0], p, "met" if p < 2 else "not met"))
        else:
            print("%s: no rate with nothing refused and kept up" % name)
        if bad:
            print("%s: errors start at %d/s: %s" % (name, bad[0][0], bad[0][idx]["errors"]))
        else:
            print("%s: no errors up to %d/s" % (name, rows[-1][0]))
        if slow:
            print("%s: falls behind from %d/s (achieved %.1f/s)" % (
                name, slow[0][0], slow[0][idx]["achieved_rate"]))
    rec = load(out, "recover-strata-%d" % lowest)
    first = rows[0][1] if rows else None
    if rec:
        print("strata recovery at %d/s after the highest rate: errors %d, achieved %.1f/s, "
              "lookup p99 %.2f ms (first run at that rate: %.2f ms, errors %d)" % (
                  lowest, errors(rec), rec["achieved_rate"], p99_ms(rec, "lookup"),
                  p99_ms(first, "lookup"), errors(first)))


def big(out, reps):
    print()
    print("| backend | small-get p99 ms without | with --big-load | ratio | big_get p50 ms |"
          " big loads |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, tag in (("strata", "strata"), ("Redis", "redis")):
        ratios = []
        for rep in range(1, reps + 1):
            a, b = load(out, "small-%s-%d" % (tag, rep)), load(out, "big-%s-%d" % (tag, rep))
            if a is None or b is None:
                continue
            ratio = p99_ms(b, "get") / p99_ms(a, "get")
            ratios.append(ratio)
            print("| %s (run %d) | %.2f | %.2f | %.2f | %.1f | %d |" % (
                name, rep, p99_ms(a, "get"), p99_ms(b, "get"), ratio,
                b["kinds"]["big_get"]["p50_us"] / 1000.0, b["kinds"]["big_get"]["count"]))
        if ratios:
            print("| %s: median ratio | | | %.2f (%.2f-%.2f) | | |" % (
                name, statistics.median(ratios), min(ratios), max(ratios)))


def main():
    out, rates, lowest, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rows = sweep(out, [int(x) for x in rates.split()])
    print()
    checks(out, rows, lowest)
    big(out, reps)
    wrong = 0
    for name in os.listdir(out):
        if name.endswith(".json"):
            with open(os.path.join(out, name)) as f:
                wrong += json.load(f)["wrong_bytes"]
    print("\nwrong bytes over every run: %d" % wrong)


if __name__ == "__main__":
    main()
