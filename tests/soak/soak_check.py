"""soak_check.py - the checker of a soak run (docs/testing.md "Soak").

A soak samples every daemon every few seconds into a CSV (soak.py writes it;
columns below) in three phases: `base` (the cluster up, no load), `load`
(`strata load` at a steady rate) and `idle` (the generator gone). This
module decides from those samples and the generator's JSON report whether
the daemons stayed flat, and prints the table of what it found. It reads
no clock and starts nothing, so a synthetic CSV (a planted leak) exercises
it exactly as a real run does: tests/soak/test_soak_check.py.

The rules, per node, over the `load` samples after the warm-up (the first
`warmup` fraction of the load phase's time):

- RSS less its file-backed pages (VmRSS - RssFile: the heap and the arenas'
  shared memory; the file pages are the binaries and the SSD tier's mapped
  LMDB file, which grow with what the tier holds and are the kernel's to
  drop) and its anonymous part alone (RssAnon: the heap, where a leak
  grows), each less `per_durable` bytes (1.25 KiB) per durable object the
  node holds (its rebalance catalog: KDA checkpoints and session records are
  never evicted, so a workload that never deletes grows their index for
  ever; the table shows what one costs): the least-squares slope of each at
  most `rss_slope` MiB per 10 minutes, and max - min of the first at most
  `rss_range` MiB;
- open descriptors and threads: max - min at most `fd_slack` and
  `thread_slack`;
- at the end of `idle`: no lease and no reservation left, and descriptors
  and threads back to at most their `base` maximum plus the same slack.

And of the report: zero wrong bytes, every refusal one of `ALLOWED`
(ST_ERR_OVERLOADED: admission control; ST_ERR_EXHAUSTED: a limit reached),
and every call kind of the mix answered at least once.

Standard library only; `python3 soak_check.py CSV [REPORT]` checks a kept run.
"""

import argparse
import csv
import json
import sys

COLUMNS = ("t_s", "phase", "node", "pid", "rss_bytes", "rss_anon_bytes", "rss_file_bytes",
           "rss_shmem_bytes", "fds", "threads", "self_rss_bytes",
           "self_fds", "self_threads", "leases", "reservations", "pins", "sessions",
           "evicted_objects", "ssd_spills", "catalog")
OPTIONAL = ("catalog",)  # added later: runs kept from before read as None
ALLOWED = ("ST_ERR_OVERLOADED", "ST_ERR_EXHAUSTED")
MIB = 1 << 20


class Bounds:
    """What counts as flat. The defaults are the ones docs/testing.md states."""

    def __init__(self, warmup=0.2, rss_slope=8.0, rss_range=48.0, fd_slack=4, thread_slack=2,
                 rss_check=True, per_durable=1280):
        self.rss_check = rss_check      # False under ASan: its shadow and quarantine grow
        self.per_durable = per_durable  # heap bytes allowed per durable object held
        self.warmup = warmup            # fraction of the load phase left out
        self.rss_slope = rss_slope      # MiB per 10 minutes
        self.rss_range = rss_range      # MiB
        self.fd_slack = fd_slack
        self.thread_slack = thread_slack


def read_csv(path):
    """The samples of a soak CSV as dicts of numbers (phase and node as text)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for i, r in enumerate(rows):
        missing = [c for c in COLUMNS if c not in r and c not in OPTIONAL]
        if missing:
            raise ValueError("%s: line %d lacks column(s) %s" % (path, i + 2, ", ".join(missing)))
        s = {"phase": r["phase"], "node": r["node"]}
        for c in COLUMNS:
            if c not in s:
                try:
                    s[c] = float(r[c]) if r.get(c) not in (None, "") else None
                except ValueError:
                    raise ValueError("%s: line %d: %s=%r is not a number" %
                                     (path, i + 2, c, r[c])) from None
        out.append(s)
    return out


def slope(xs, ys):
    """Least-squares slope of ys over xs (0 for fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def steady(samples, warmup):
    """The load samples after the warm-up: the last (1 - warmup) of the load
    phase's time span."""
    load = [s for s in samples if s["phase"] == "load"]
    if not load:
        return []
    t0, t1 = min(s["t_s"] for s in load), max(s["t_s"] for s in load)
    cut = t0 + warmup * (t1 - t0)
    return [s for s in load if s["t_s"] >= cut]


def spread(rows, col):
    vals = [r[col] for r in rows if r[col] is not None]
    return (min(vals), max(vals)) if vals else (None, None)


def check_node(node, samples, b):
    """(summary dict, problems list) of one node's samples."""
    mine = sorted((s for s in samples if s["node"] == node), key=lambda s: s["t_s"])
    st = steady(mine, b.warmup)
    base = [s for s in mine if s["phase"] == "base"]
    idle = [s for s in mine if s["phase"] == "idle"]
    problems = []
    sm = {"node": node, "samples": len(st)}
    if len(st) < 3:
        return sm, ["%s: %d samples after the warm-up; at least 3 are needed" % (node, len(st))]
    sm["vmrss_first"], sm["vmrss_last"] = st[0]["rss_bytes"] / MIB, st[-1]["rss_bytes"] / MIB
    sm["file_last"] = st[-1]["rss_file_bytes"] / MIB
    # The file-backed pages (the binaries, the SSD tier's map) are the
    # kernel's to drop and grow with what the tier holds: judged is the rest,
    # less per_durable bytes for each durable object the node holds (KDA
    # checkpoints and session records are never evicted: their index grows
    # with them, and a workload that never deletes grows them for ever).
    held = [(s["catalog"] or 0) * b.per_durable / MIB for s in st]
    rss = [(s["rss_bytes"] - s["rss_file_bytes"]) / MIB - h for s, h in zip(st, held)]
    sm["rss_first"], sm["rss_last"] = rss[0], rss[-1]
    sm["rss_min"], sm["rss_max"] = min(rss), max(rss)
    sm["rss_slope"] = slope([s["t_s"] for s in st], rss) * 600.0  # MiB per 10 min
    if b.rss_check and sm["rss_slope"] > b.rss_slope:
        problems.append("%s: RSS (less mapped files) grows %.1f MiB per 10 min after the "
                        "warm-up (bound %.1f)" % (node, sm["rss_slope"], b.rss_slope))
    anon = [s["rss_anon_bytes"] / MIB for s in st]
    sm["anon_first"], sm["anon_last"] = anon[0], anon[-1]
    cat = [s["catalog"] or 0 for s in st]
    sm["per_durable"] = slope(cat, anon) * MIB / 1024 if max(cat) > min(cat) else None
    anon = [a - h for a, h in zip(anon, held)]
    sm["anon_slope"] = slope([s["t_s"] for s in st], anon) * 600.0
    if b.rss_check and sm["anon_slope"] > b.rss_slope:
        problems.append("%s: anonymous RSS (the heap) grows %.1f MiB per 10 min after the "
                        "warm-up (bound %.1f)" % (node, sm["anon_slope"], b.rss_slope))
    if b.rss_check and sm["rss_max"] - sm["rss_min"] > b.rss_range:
        problems.append("%s: RSS (less mapped files) moved %.1f MiB after the warm-up "
                        "(%.1f..%.1f; bound %.1f)" %
                        (node, sm["rss_max"] - sm["rss_min"], sm["rss_min"], sm["rss_max"],
                         b.rss_range))
    for col, slack, what in (("fds", b.fd_slack, "open descriptors"),
                             ("threads", b.thread_slack, "threads")):
        lo, hi = spread(st, col)
        sm[col + "_min"], sm[col + "_max"] = lo, hi
        if hi - lo > slack:
            problems.append("%s: %s went from %d to %d after the warm-up (bound: %d apart)" %
                            (node, what, int(lo), int(hi), slack))
        base_hi = spread(base, col)[1]
        end = idle[-1][col] if idle else None
        sm[col + "_base"], sm[col + "_end"] = base_hi, end
        if base_hi is not None and end is not None and end > base_hi + slack:
            problems.append("%s: %s %d when idle at the end, %d before the load (bound: +%d)" %
                            (node, what, int(end), int(base_hi), slack))
    for col, what in (("leases", "leases"), ("reservations", "reservations")):
        sm[col + "_max"] = spread(mine, col)[1]
        sm[col + "_end"] = idle[-1][col] if idle else None
        if not idle:
            problems.append("%s: no idle sample at the end: cannot tell whether %s return to 0" %
                            (node, what))
        elif idle[-1][col] is None:
            problems.append("%s: the last idle sample has no %s count" % (node, what))
        elif idle[-1][col] != 0:
            problems.append("%s: %d %s still held when idle at the end (want 0)" %
                            (node, int(idle[-1][col]), what))
    last = mine[-1]
    sm["evicted_objects"], sm["ssd_spills"] = last["evicted_objects"], last["ssd_spills"]
    sm["sessions"], sm["catalog"] = last["sessions"], last["catalog"]
    return sm, problems


def check_samples(samples, b, want_eviction=True):
    """(summaries, problems) of every node of a run."""
    nodes = sorted({s["node"] for s in samples})
    summaries, problems = [], []
    if not nodes:
        return [], ["no samples"]
    for n in nodes:
        sm, p = check_node(n, samples, b)
        summaries.append(sm)
        problems += p
        if want_eviction and not sm.get("evicted_objects"):
            problems.append("%s evicted nothing: the working set did not exceed memory_limit "
                            "(raise the rate or the duration)" % n)
    return summaries, problems


def check_report(report, kinds=("lookup", "get", "rows", "put")):
    """Problems of `strata load`'s JSON report: wrong bytes, refusals other
    than ALLOWED, a kind of the mix never answered."""
    problems = []
    if report.get("wrong_bytes", 0) != 0:
        problems.append("the generator read %d wrong bytes" % report["wrong_bytes"])
    errors = report.get("errors", {})
    if isinstance(errors, dict):
        for name, n in sorted(errors.items()):
            if isinstance(n, dict):  # per kind: {"ST_ERR_X": n}
                for sub, m in sorted(n.items()):
                    if sub not in ALLOWED and m:
                        problems.append("%d %s calls failed with %s (only %s are clean refusals)"
                                        % (m, name, sub, " and ".join(ALLOWED)))
            elif name not in ALLOWED and n:
                problems.append("%d calls failed with %s (only %s are clean refusals)" %
                                (n, name, " and ".join(ALLOWED)))
    per_kind = report.get("kinds", {})
    for k in kinds:
        got = per_kind.get(k)
        if got is None:
            problems.append("the report has no %r calls" % k)
        elif not got.get("ok"):
            problems.append("no %r call succeeded (%s of them)" % (k, got.get("count")))
    return problems


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def table(summaries):
    """The summary table, one line per node (Markdown, as docs/performance.md has it)."""
    head = ("| node | samples | VmRSS MiB first / last | of it files, last | "
            "RSS less files, MiB first / last | min..max | slope MiB/10 min | "
            "anon RSS MiB first / last | anon slope | heap KiB per durable object | fds | "
            "threads | fds base / end | leases max / end | reservations max / end | sessions |"
            " durable catalog | evicted | spilled |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for s in summaries:
        if "rss_first" not in s:
            lines.append("| %s | %d | (too few samples) |" % (s["node"], s["samples"]))
            continue
        lines.append("| %s | %d | %s / %s | %s | %s / %s | %s..%s | %s | %s / %s | %s | %s | %s..%s |"
                     " %s..%s | %s / %s | %s / %s | %s / %s | %s | %s | %s | %s |" % (
                         s["node"], s["samples"], fmt(s["vmrss_first"]), fmt(s["vmrss_last"]),
                         fmt(s["file_last"]), fmt(s["rss_first"]), fmt(s["rss_last"]),
                         fmt(s["rss_min"]), fmt(s["rss_max"]), fmt(s["rss_slope"], "%+.2f"),
                         fmt(s["anon_first"]), fmt(s["anon_last"]),
                         fmt(s["anon_slope"], "%+.2f"), fmt(s["per_durable"], "%.2f"),
                         fmt(s["fds_min"], "%d"), fmt(s["fds_max"], "%d"),
                         fmt(s["threads_min"], "%d"), fmt(s["threads_max"], "%d"),
                         fmt(s["fds_base"], "%d"), fmt(s["fds_end"], "%d"),
                         fmt(s["leases_max"], "%d"), fmt(s["leases_end"], "%d"),
                         fmt(s["reservations_max"], "%d"), fmt(s["reservations_end"], "%d"),
                         fmt(s["sessions"], "%d"), fmt(s["catalog"], "%d"),
                         fmt(s["evicted_objects"], "%d"),
                         fmt(s["ssd_spills"], "%d")))
    return "\n".join(lines)


def add_bound_args(ap):
    d = Bounds()
    ap.add_argument("--warmup-frac", type=float, default=d.warmup,
                    help="fraction of the load phase left out as warm-up (default %(default)s)")
    ap.add_argument("--rss-slope", type=float, default=d.rss_slope,
                    help="largest RSS slope after the warm-up, MiB per 10 min (default %(default)s)")
    ap.add_argument("--rss-range", type=float, default=d.rss_range,
                    help="largest RSS max - min after the warm-up, MiB (default %(default)s)")
    ap.add_argument("--fd-slack", type=int, default=d.fd_slack,
                    help="largest spread of open descriptors (default %(default)s)")
    ap.add_argument("--thread-slack", type=int, default=d.thread_slack,
                    help="largest spread of threads (default %(default)s)")
    ap.add_argument("--per-durable", type=int, default=d.per_durable,
                    help="heap bytes allowed per durable object held (default %(default)s)")
    ap.add_argument("--no-rss-check", action="store_true",
                    help="report RSS but do not check it (sanitizer builds)")


def bounds_from(args):
    return Bounds(args.warmup_frac, args.rss_slope, args.rss_range, args.fd_slack,
                  args.thread_slack, not args.no_rss_check, args.per_durable)


def main():
    ap = argparse.ArgumentParser(description="checks a kept soak run's samples (and report)")
    ap.add_argument("csv")
    ap.add_argument("report", nargs="?")
    ap.add_argument("--no-eviction-check", action="store_true",
                    help="do not require that every node evicted something")
    add_bound_args(ap)
    args = ap.parse_args()
    summaries, problems = check_samples(read_csv(args.csv), bounds_from(args),
                                        not args.no_eviction_check)
    if args.report:
        with open(args.report) as f:
            problems += check_report(json.load(f))
    print(table(summaries))
    for p in problems:
        print("FAIL: " + p)
    print("PASS: flat within the bounds" if not problems else "%d problem(s)" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
