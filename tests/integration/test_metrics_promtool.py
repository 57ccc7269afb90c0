#!/usr/bin/python3
"""test_metrics_promtool.py - the HTTP server's /metrics passes
`promtool check metrics` (format and lint), and /stats carries schema 1.

Starts metrics_testd on loopback (port 0), scrapes it over HTTP, pipes the
text to promtool, and checks the headers (no CORS header: same origin only)
and the /stats fields that the dashboard reads (docs/observability.md). A known-bad exposition must be
rejected by the same promtool call, so the check itself can fail.

Exit 77 (skip) when promtool is not installed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402

STATS_KEYS = ["schema", "node", "version", "commit", "time_ms", "peers", "counters", "gauges",
              "histograms", "tiers"]
DASHBOARD_COUNTERS = ["lookups_total", "lookups_with_hit_total", "lookup_tokens_total",
                      "lookup_matched_tokens_total", "lookup_resumable_tokens_total",
                      "served_bytes_total", "evictions_total"]
BAD = b"""# HELP strata_lookups Lookups.
# TYPE strata_lookups counter
strata_lookups{namespace="a"} 1
"""


def promtool_check(promtool, text):
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       timeout=60)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace").strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--testd", required=True, help="path of metrics_testd")
    ap.add_argument("--promtool", default=None, help="promtool binary (default: PATH)")
    args = ap.parse_args()
    promtool = h.require_tool(args.promtool, "promtool", "PROMTOOL", "prometheus")

    problems = []
    rc, out = promtool_check(promtool, BAD)
    if rc == 0:
        problems.append("promtool accepted a counter without _total; the check is blind")

    work = tempfile.mkdtemp(prefix="strata-promtool-")
    node = h.Server([args.testd, "--mode", "scrape", "--node", "n1", "--peers",
                     "127.0.0.1:1,127.0.0.1:2", "--exit-after", "60"], name="testd",
                    log_dir=work)
    try:
        status, headers, body = h.http_get("http://%s/metrics" % node.hostport)
        if status != 200:
            problems.append("/metrics answered %d" % status)
        ctype = headers.get("content-type", "")
        if ctype != "text/plain; version=0.0.4; charset=utf-8":
            problems.append("/metrics Content-Type is %r" % ctype)
        if b"# TYPE strata_request_duration_seconds histogram" not in body:
            problems.append("/metrics lacks the latency histogram")
        rc, out = promtool_check(promtool, body)
        print("promtool check metrics: rc=%d %s" % (rc, out or "(no findings)"), flush=True)
        if rc != 0 or out:
            problems.append("promtool check metrics: rc=%d: %s" % (rc, out))

        status, headers, body = h.http_get("http://%s/stats" % node.hostport)
        stats = json.loads(body)
        if "access-control-allow-origin" in headers:
            problems.append("/stats answers other origins: Access-Control-Allow-Origin: %s" %
                            headers["access-control-allow-origin"])
        missing = [k for k in STATS_KEYS if k not in stats]
        missing += ["counters." + k for k in DASHBOARD_COUNTERS
                    if not isinstance(stats.get("counters", {}).get(k), int)]
        if missing:
            problems.append("/stats lacks %s" % ", ".join(missing))
        if stats.get("schema") != 1 or stats.get("node") != "n1":
            problems.append("/stats schema/node are %r/%r" % (stats.get("schema"),
                                                              stats.get("node")))
        if stats.get("peers") != ["127.0.0.1:1", "127.0.0.1:2"]:
            problems.append("/stats peers are %r" % stats.get("peers"))
        tiers = stats.get("tiers", {})
        if sorted(tiers) != ["dram", "ssd"] or any(
                set(t) != {"used_bytes", "limit_bytes"} for t in tiers.values()):
            problems.append("/stats tiers are %r" % tiers)
    finally:
        node.stop()
    h.stop_all([node])
    h.finish(problems, work, "metrics exposition and /stats are valid")


if __name__ == "__main__":
    main()
