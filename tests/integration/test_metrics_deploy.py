#!/usr/bin/python3
"""test_metrics_deploy.py - the Prometheus and Grafana files of deploy/ are
valid and speak only the metric names of the contract.

- `promtool check config` on deploy/prometheus/prometheus.yml (and through it
  the rule files it names);
- deploy/grafana/strata-dashboard.json parses as JSON and every panel has a
  query;
- every strata_* metric used by the Prometheus rules and the Grafana queries
  is in the table of docs/observability.md section 2, and so is every family
  metrics_testd (the stand-in node) exports, except its own strata_test_done.

Exit 77 (skip) when promtool is not installed.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402

NAME = re.compile(r"(?<![:\w])strata_[a-z0-9_]+(?![:\w])")
SUFFIXES = ("_bucket", "_sum", "_count")


def contract(doc_path):
    """The metric names of the table in section 2 of docs/observability.md."""
    names, in_section = set(), False
    with open(doc_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_section = line.startswith("## 2.")
            m = re.match(r"\| `(strata_[a-z0-9_]+)` \|", line)
            if in_section and m:
                names.add(m.group(1))
    return names


def base(name, known):
    for s in SUFFIXES:
        if name.endswith(s) and name[: -len(s)] in known:
            return name[: -len(s)]
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="the source tree")
    ap.add_argument("--testd", required=True, help="path of metrics_testd")
    ap.add_argument("--promtool", default=None)
    args = ap.parse_args()
    promtool = h.require_tool(args.promtool, "promtool", "PROMTOOL", "prometheus")

    problems = []
    prom_yml = os.path.join(args.root, "deploy/prometheus/prometheus.yml")
    r = subprocess.run([promtool, "check", "config", prom_yml], capture_output=True,
                       timeout=60)
    out = (r.stdout + r.stderr).decode(errors="replace")
    print(out.strip(), flush=True)
    if r.returncode != 0:
        problems.append("promtool check config failed (rc %d)" % r.returncode)
    # The HTTPS variant names files of the deployment (CA, token): syntax only.
    tls_yml = os.path.join(args.root, "deploy/prometheus/prometheus-tls.yml")
    r = subprocess.run([promtool, "check", "config", "--syntax-only", tls_yml],
                       capture_output=True, timeout=60)
    print((r.stdout + r.stderr).decode(errors="replace").strip(), flush=True)
    if r.returncode != 0:
        problems.append("promtool check config --syntax-only prometheus-tls.yml failed (rc %d)"
                        % r.returncode)
    with open(tls_yml, encoding="utf-8") as f:
        text = f.read()
    for want in ("scheme: https", "ca_file:", "credentials_file:"):
        if want not in text:
            problems.append("prometheus-tls.yml lacks %r" % want)

    known = contract(os.path.join(args.root, "docs/observability.md"))
    if len(known) < 20:
        problems.append("found only %d metrics in docs/observability.md section 2" % len(known))

    used = {}
    for rules_file in ("strata-rules.yml", "strata-alerts.yml"):
        with open(os.path.join(args.root, "deploy/prometheus", rules_file), encoding="utf-8") as f:
            for n in NAME.findall(f.read()):
                used.setdefault(n, rules_file)
    graf = os.path.join(args.root, "deploy/grafana/strata-dashboard.json")
    with open(graf, encoding="utf-8") as f:
        dash = json.load(f)
    for p in dash.get("panels", []):
        exprs = [t.get("expr", "") for t in p.get("targets", [])]
        if not any(exprs):
            problems.append("Grafana panel %r has no query" % p.get("title"))
        for e in exprs:
            for n in NAME.findall(e):
                used.setdefault(n, "Grafana panel %r" % p.get("title"))
    for v in dash.get("templating", {}).get("list", []):
        for n in NAME.findall(json.dumps(v)):
            used.setdefault(n, "Grafana variable %r" % v.get("name"))
    for n, where in sorted(used.items()):
        if base(n, known) not in known:
            problems.append("%s uses %s, which docs/observability.md does not define" %
                            (where, n))

    work = tempfile.mkdtemp(prefix="strata-deploy-")
    node = h.Server([args.testd, "--mode", "scrape", "--exit-after", "60"], name="testd",
                    log_dir=work)
    try:
        _, _, body = h.http_get("http://%s/metrics" % node.hostport)
    finally:
        node.stop()
    h.stop_all([node])
    exported = set(re.findall(r"^# TYPE (strata_[a-z0-9_]+) ", body.decode(), re.M))
    for n in sorted(exported - known - {"strata_test_done"}):
        problems.append("metrics_testd exports %s, which the contract does not define" % n)
    print("contract: %d metrics; deploy files use %d; the stand-in exports %d" %
          (len(known), len(used), len(exported)), flush=True)
    h.finish(problems, work, "deploy files are valid")


if __name__ == "__main__":
    main()
