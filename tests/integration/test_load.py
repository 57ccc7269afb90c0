#!/usr/bin/python3
"""test_load.py - `strata load` against three real stratad daemons on loopback
(an SSD tier each, a memory limit of 128 MiB, the smallest a daemon takes), and
against a real redis-server: the JSON report parses, no byte came back wrong,
each call kind ran, each kind's count is its ok calls plus its errors, the
calls planned are the calls counted; --processes 2 merges two processes'
counts; a bad --mix is a usage error that names what was wrong.

At a low rate and a few seconds per run; it measures nothing (bench/load_sweep.sh
does). Redis missing: that part is skipped with a message.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402
from test_cluster_metrics import Daemon  # noqa: E402

KINDS = ("lookup", "get", "rows", "put", "big_get")


def run_load(strata, args, report, problems, what):
    """Runs strata load with args; returns the parsed report (or None)."""
    cmd = [strata, "load", "--rate", "60", "--warmup", "1s", "--duration", "3s",
           "--report", report] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        problems.append("%s: exit %d: %s" % (what, p.returncode, p.stderr[-2000:]))
        return None
    if "ops/s" not in p.stderr or "measured" not in p.stderr:
        problems.append("%s: no progress line on stderr: %r" % (what, p.stderr[-500:]))
    if "wrong bytes: 0" not in p.stdout:
        problems.append("%s: the text report does not say 'wrong bytes: 0'" % what)
    with open(report) as f:
        return json.load(f)


def check_report(r, want_kinds, problems, what, backend):
    """The report's invariants: see the module's docstring."""
    if r is None:
        return
    if r["backend"] != backend:
        problems.append("%s: backend %r, not %r" % (what, r["backend"], backend))
    if r["wrong_bytes"] != 0:
        problems.append("%s: %d wrong bytes" % (what, r["wrong_bytes"]))
    total = 0
    for k in KINDS:
        s = r["kinds"][k]
        errors = sum(s["errors"].values())
        total += s["count"]
        if s["count"] != s["ok"] + errors:
            problems.append("%s: %s count %d != ok %d + errors %d" %
                            (what, k, s["count"], s["ok"], errors))
        if k in want_kinds and s["count"] == 0:
            problems.append("%s: no %s call ran" % (what, k))
        if k in want_kinds and s["ok"] > 0 and not 0 < s["p50_us"] <= s["p99_us"] <= \
                s["p999_us"] <= s["max_us"]:
            problems.append("%s: %s latencies out of order: %r" % (what, k, s))
        if k in ("get", "rows", "put", "big_get") and s["ok"] > 0 and s["bytes"] == 0:
            problems.append("%s: %s moved no bytes" % (what, k))
    if r["issued"] != total:
        problems.append("%s: %d calls planned, %d counted" % (what, r["issued"], total))
    summed = {}
    for k in KINDS:
        for name, n in r["kinds"][k]["errors"].items():
            summed[name] = summed.get(name, 0) + n
    if summed != r["errors"]:
        problems.append("%s: errors %r are not the kinds' %r" % (what, r["errors"], summed))
    hr = r["hit_rates"]
    if hr["lookup_blocks_asked"] == 0 or hr["lookup_blocks_hit"] > hr["lookup_blocks_asked"]:
        problems.append("%s: lookup blocks hit/asked %r" % (what, hr))
    if hr["get_objects_hit"] > hr["get_objects_asked"] or hr["get_objects_hit"] == 0:
        problems.append("%s: get objects hit/asked %r" % (what, hr))


def check_usage(strata, peers, problems):
    p = subprocess.run([strata, "load", "--nodes", peers, "--mix", "lookup=1,gets=2"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 2 or "gets" not in p.stderr or "--mix" not in p.stderr:
        problems.append("a bad --mix: exit %d, %r (want 2 and a message naming 'gets')" %
                        (p.returncode, p.stderr))


def redis_part(strata, work, problems):
    server = shutil.which("redis-server")
    if server is None:
        print("redis part skipped: redis-server is not installed", flush=True)
        return
    port = h.free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", work, "--maxmemory", "64mb",
                             "--maxmemory-policy", "allkeys-lru"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        h.wait_until(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"],
                                            capture_output=True, text=True).stdout.strip()
                     == "PONG", "redis-server to answer")
        report = os.path.join(work, "redis.json")
        r = run_load(strata, ["--peer", "redis:127.0.0.1:%d" % port,
                              "--engines", "8", "--big-load", "--big-tokens", "16384"],
                     report, problems, "redis")
        check_report(r, KINDS, problems, "redis", "redis")
    finally:
        h.stop_process(proc, 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--strata", required=True)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="strata-load-")
    daemons, problems = [], []
    try:
        ports = [h.free_port() for _ in range(3)]
        peers = ",".join("127.0.0.1:%d" % p for p in ports)
        for i, p in enumerate(ports):
            data = os.path.join(work, "data-%d" % i)
            daemons.append(Daemon(args.stratad, p, peers, "", work, i,
                                  ["--memory-limit", "128M", "--data-dir", data,
                                   "--ssd-map-size", "1G", "--ssd-sync", "none"]))
        r = run_load(args.strata, ["--nodes", peers, "--engines", "8", "--big-load",
                                   "--big-tokens", "16384", "--fail-on-error"],
                     os.path.join(work, "strata.json"), problems, "strata")
        check_report(r, KINDS, problems, "strata", "strata")
        r = run_load(args.strata, ["--nodes", peers, "--engines", "6", "--processes", "2"],
                     os.path.join(work, "processes.json"), problems, "--processes 2")
        check_report(r, KINDS[:4], problems, "--processes 2", "strata")
        if r is not None and (r["processes"] != 2 or r["engines"] != 6):
            problems.append("--processes 2: the report says %d processes, %d engines" %
                            (r["processes"], r["engines"]))
        check_usage(args.strata, peers, problems)
        redis_part(args.strata, work, problems)
    finally:
        for d in daemons:
            d.stop()
    if problems:
        h.fail("; ".join(problems) + " (logs in %s)" % work)
    shutil.rmtree(work, ignore_errors=True)
    print("PASS: strata load against 3 daemons and Redis: reports consistent, no wrong bytes")


if __name__ == "__main__":
    main()
