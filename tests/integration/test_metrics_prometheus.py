#!/usr/bin/python3
"""test_metrics_prometheus.py - a real Prometheus scrapes strata nodes and
its answers to hit-rate queries must equal what the nodes computed themselves.

Generic on purpose: the nodes are either started here (--start, repeatable;
each command prints "port=N") or already running (--target host:port). Then:

  1. Prometheus (--prometheus) scrapes every node each --interval.
  2. Wait until --wait-stats (a Python expression over `stats`, the list of
     the nodes' /stats documents) is true, e.g. "all(s['test']['done'] for s in stats)".
  3. Wait until --settle (PromQL) returns a non-empty result: Prometheus has
     scraped the final state.
  4. Each --check PROMQL PYEXPR: the PromQL answer must equal the Python
     expression evaluated over `stats` (relative error 1e-9). A dict answer
     (several series) compares against a dict keyed by the label values.
  5. Each expression of --grafana (a dashboard JSON) must evaluate without an
     error, and those of hit-rate panels must return data.

Exit 77 (skip) when prometheus is not installed.
"""

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402


def grafana_exprs(path):
    """(panel title, expr) of every target of a Grafana dashboard JSON."""
    with open(path) as f:
        doc = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(doc.get("panels", []))
    return out


def grafana_substitute(expr):
    """Replaces Grafana's variables by what a dashboard would send."""
    for var, value in (("$__rate_interval", "1m"), ("$__interval", "5s"),
                       ("$__range", "5m"), ("$namespace", ".*"), ("$instance", ".*"),
                       ("$kind", ".*"), ("$method", ".*"), ("$tier", ".*")):
        expr = expr.replace(var, value)
    return expr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prometheus", default=None, help="prometheus binary (default: PATH)")
    ap.add_argument("--start", action="append", default=[], help="command of a node to start")
    ap.add_argument("--target", action="append", default=[], help="host:port of a running node")
    ap.add_argument("--interval", default="1s", help="scrape interval")
    ap.add_argument("--wait-stats", default="True", help="Python condition over stats")
    ap.add_argument("--settle", default=None, help="PromQL that must return data first")
    ap.add_argument("--check", nargs=2, action="append", default=[],
                    metavar=("PROMQL", "PYEXPR"), help="compare a query with a value")
    ap.add_argument("--grafana", default=None, help="dashboard JSON whose queries must run")
    ap.add_argument("--artifacts", default=None, help="folder for logs and the config")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds before giving up")
    args = ap.parse_args()

    binary = h.require_tool(args.prometheus, "prometheus", "PROMETHEUS", "prometheus")

    work = tempfile.mkdtemp(prefix="strata-prom-")
    logs = args.artifacts or work
    os.makedirs(logs, exist_ok=True)
    servers, prom, passed = [], None, False
    try:
        for i, cmd in enumerate(args.start):
            servers.append(h.Server(shlex.split(cmd), name="node%d" % i, log_dir=logs))
        targets = args.target + [s.hostport for s in servers]
        if not targets:
            h.fail("no --start and no --target: nothing to scrape")
        names = {t: "node%d" % i for i, t in enumerate(targets)}
        prom = h.Prometheus(binary, targets, work, args.interval, names).start()
        h.wait_until(prom.targets_up, "every target to be up in Prometheus", args.limit)
        print("prometheus %s scrapes %s" % (prom.url, ", ".join(targets)), flush=True)

        def stats_ready():
            stats = [h.get_stats(t) for t in targets]
            return stats if eval(args.wait_stats, {}, {"stats": stats}) else None

        stats = h.wait_until(stats_ready, "--wait-stats: " + args.wait_stats, args.limit)
        if args.settle:
            h.wait_until(lambda: prom.query(args.settle) is not None,
                         "--settle: " + args.settle, args.limit)
        stats = [h.get_stats(t) for t in targets]

        failures = 0
        for promql, pyexpr in args.check:
            got = prom.query(promql)
            want = eval(pyexpr, {}, {"stats": stats})
            ok = h.close_enough(got, want)
            failures += not ok
            print("%s %s\n    prometheus: %r\n    nodes:      %r" %
                  ("ok  " if ok else "FAIL", promql, got, want), flush=True)

        if args.grafana:
            for title, expr in grafana_exprs(args.grafana):
                q = grafana_substitute(expr)
                try:
                    got = prom.query(q)
                    err = None
                except ValueError as e:
                    got, err = None, str(e)
                bad = err is not None or ("hit rate" in title.lower() and got is None)
                failures += bad
                print("%s grafana [%s] %s -> %s" % ("FAIL" if bad else "ok  ", title, q,
                                                    err or repr(got)), flush=True)
        if failures:
            h.fail("%d check(s) failed; Prometheus log: %s" % (failures, prom.log_path))
        prom.stop()
        h.stop_all(servers)
        print("all checks passed", flush=True)
        passed = True
    finally:
        if prom:
            prom.stop()
        for s in servers:
            s.stop()
        if passed:
            shutil.rmtree(work, ignore_errors=True)  # keep the TSDB and log only on failure


if __name__ == "__main__":
    main()
