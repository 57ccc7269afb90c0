#!/usr/bin/python3
"""test_dashboard_chromium.py - headless Chromium renders /dashboard of one
node with a peer and must show the hit rates the nodes serve, the get and
lookup hit rates per object kind (VIS included) and non-empty charts.

Two stand-in nodes (metrics_testd --mode scrape) add one fixed batch of
lookups per /stats poll, so every window of polls has a token hit rate of
76.0 %, a request hit rate of 80.0 % and a resumable-token hit rate of 64.0 %.
Chromium loads http://A/dashboard?peers=B with a virtual-time budget (about
a dozen polls), dumps the DOM (the per-kind chart "Get hit rate per kind"
must draw its lines and the kinds table show each kind's rates), and a second run takes a screenshot, kept as
<artifacts>/dashboard.png.

Exit 77 (skip) when chromium is not installed.
"""

import argparse
import html.parser
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402

CHARTS = ["chart-token", "chart-request", "chart-resumable", "chart-bytes", "chart-tiers",
          "chart-evictions", "chart-kinds"]
EXPECT = {"token-hit-rate": ("76.0%", 0.76), "request-hit-rate": ("80.0%", 0.80),
          "resumable-hit-rate": ("64.0%", 0.64),
          # The per-kind table (metrics_testd's fixed "kinds" batches, both nodes).
          "kind-kv-get-hit": ("80.0%", 0.80), "kind-kv-ssd": ("25.0%", 0.25),
          "kind-idx-get-hit": ("50.0%", 0.50), "kind-session-get-hit": ("100.0%", 1.0),
          "kind-vis-get-hit": ("25.0%", 0.25), "kind-vis-ssd": ("0.0%", 0.0),
          "kind-kv-lookup-hit": ("80.0%", 0.80), "kind-vis-lookup-hit": ("50.0%", 0.50)}


class Dom(html.parser.HTMLParser):
    """Collects attributes and text of elements that have an id, and <body>'s."""

    def __init__(self):
        super().__init__()
        self.by_id, self.body, self._open = {}, {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if "id" in a:
            self.by_id[a["id"]] = {"attrs": a, "text": ""}
            self._open = a["id"]

    def handle_endtag(self, tag):
        self._open = None

    def handle_data(self, data):
        if self._open:
            self.by_id[self._open]["text"] += data


def chromium_argv(binary, profile, budget_ms):
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--hide-scrollbars", "--user-data-dir=" + profile,
            "--window-size=1200,900", "--virtual-time-budget=%d" % budget_ms]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--testd", required=True, help="path of metrics_testd")
    ap.add_argument("--chromium", default=None, help="chromium binary (default: PATH)")
    ap.add_argument("--artifacts", required=True, help="folder for dashboard.png and the DOM")
    ap.add_argument("--budget-ms", type=int, default=12000, help="virtual time to run the page")
    args = ap.parse_args()

    binary = h.require_tool(args.chromium, "chromium", "CHROMIUM", "chromium")
    os.makedirs(args.artifacts, exist_ok=True)
    work = tempfile.mkdtemp(prefix="strata-chromium-")
    # The nodes' logs go with the artifacts, so a failure can be read after.
    servers = []
    try:
        a = h.Server([args.testd, "--mode", "scrape", "--node", "node-a", "--exit-after", "120"],
                     name="node-a", log_dir=args.artifacts)
        servers.append(a)
        # The page of A reads B's /stats across origins: B lists A's origin
        # (there is no wildcard CORS).
        b = h.Server([args.testd, "--mode", "scrape", "--node", "node-b", "--exit-after", "120",
                      "--cors-origin", "http://%s" % a.hostport],
                     name="node-b", log_dir=args.artifacts)
        servers.append(b)
        url = "http://%s/dashboard?peers=%s" % (a.hostport, b.hostport)

        dom_path = os.path.join(args.artifacts, "dashboard-dom.html")
        argv = chromium_argv(binary, os.path.join(work, "p1"), args.budget_ms)
        with open(dom_path, "wb") as out, open(os.path.join(args.artifacts, "chromium.log"), "wb") as err:
            rc = subprocess.run(argv + ["--dump-dom", url], stdout=out, stderr=err,
                                timeout=120).returncode
        if rc != 0:
            h.fail("chromium --dump-dom exited with %d; see %s/chromium.log" % (rc, args.artifacts))
        png = os.path.join(args.artifacts, "dashboard.png")
        argv = chromium_argv(binary, os.path.join(work, "p2"), args.budget_ms)
        rc = subprocess.run(argv + ["--screenshot=" + png, url], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=120).returncode
        if rc != 0 or not os.path.exists(png) or os.path.getsize(png) < 10000:
            h.fail("chromium --screenshot did not write a picture at %s (rc %d)" % (png, rc))

        with open(dom_path, encoding="utf-8") as f:
            page = f.read()
        dom = Dom()
        dom.feed(page)
        problems = []
        if dom.body.get("data-nodes") != "2" or dom.body.get("data-nodes-up") != "2":
            problems.append("body says nodes=%s up=%s, want 2 and 2" %
                            (dom.body.get("data-nodes"), dom.body.get("data-nodes-up")))
        polls = int(dom.body.get("data-polls") or 0)
        if polls < 3:
            problems.append("only %d polls ran; want at least 3" % polls)
        for el_id, (text, value) in EXPECT.items():
            el = dom.by_id.get(el_id)
            if el is None:
                problems.append("no element #%s" % el_id)
                continue
            got_text = el["text"].strip()
            got_value = float(el["attrs"].get("data-value") or "nan")
            if got_text != text or not h.close_enough(got_value, value, 1e-12):
                problems.append("#%s shows %r (data-value %r), want %r (%r)" %
                                (el_id, got_text, got_value, text, value))
        for chart in CHARTS:
            el = dom.by_id.get(chart)
            points = int(el["attrs"].get("data-points") or 0) if el else 0
            if points < (10 if chart == "chart-kinds" else 2):  # five kinds, 2 points each
                problems.append("chart #%s drew %d points; want at least 2" % (chart, points))
        for node in ("node-a", "node-b"):
            if ">%s<" % node not in page:
                problems.append("the node table does not name %s" % node)
        print("polls=%d; screenshot %s; DOM %s" % (polls, png, dom_path), flush=True)
        if problems:
            h.fail("; ".join(problems))
        h.stop_all(servers)
        print("dashboard shows 76.0%, 80.0%, 64.0%, the per-kind rates and seven non-empty "
              "charts", flush=True)
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
