#!/usr/bin/python3
"""Hits and misses per object kind (docs/observability.md §2, "Per kind")
against a real daemon: KV, IDX and KDA objects put, read and missed through
the Python binding, a session found and not found, a VIS object written under
an image's hash (put_vis), looked up (a Lookup asking for VIS only, sent by a
stock gRPC client), read (get_vis) and an image one pixel apart missed. Each
kind's counters must move by exactly what was done, on /metrics
(strata_object_gets_total, strata_lookup_blocks_total), in /stats ("kinds")
and in the Stats call ("get_hits_vis", ...), and `strata metrics`
prints them; a KDA object read after a restart is a hit served by the SSD
tier; a real Prometheus evaluates the per-kind recording rules over live
traffic (skipped when prometheus is not installed). Run with Debian's python3 (numpy, python3-grpcio)."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import obs_harness  # noqa: E402
from obs_harness import free_port  # noqa: E402
from pb_wire import parse, varint  # noqa: E402

KINDS = ("kv", "idx", "kda", "session", "vis")


def field_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return varint(num << 3 | 2) + varint(len(b)) + b


def vis_lookup(addr, image):
    """Matched blocks of a Lookup of the one block image (its hash) whose
    kinds_mask asks for VIS objects only (1 << VIS, VIS = 5 on the wire)."""
    with grpc.insecure_channel(addr) as ch:
        hello = ch.unary_unary("/strata.v1.Cache/Hello")(
            varint(1 << 3) + varint(1) + field_bytes(2, "acme") + field_bytes(3, "k3"),
            timeout=10)
        ns = parse(hello)[8][0]
        seg = varint(1 << 3) + varint(0) + field_bytes(2, image)
        req = varint(1 << 3) + varint(ns) + field_bytes(2, seg) + varint(3 << 3) + varint(1 << 5)
        resp = parse(ch.unary_unary("/strata.v1.Cache/Lookup")(req, timeout=10))
        match = parse(resp[1][0]) if resp.get(1) else {}
        return match.get(1, [0])[0]


def scrape(port):
    """{(kind, outcome, tier): value} of strata_object_gets_total and
    {(kind, outcome): value} of strata_lookup_blocks_total, over namespaces."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    gets, blocks = {}, {}
    for line in text.decode().splitlines():
        m = re.match(r'strata_object_gets_total\{namespace="[^"]*",kind="(\w+)",'
                     r'outcome="(\w+)",tier="(\w+)"\} (\d+)$', line)
        if m:
            key = m.group(1, 2, 3)
            gets[key] = gets.get(key, 0) + int(m.group(4))
        m = re.match(r'strata_lookup_blocks_total\{namespace="[^"]*",kind="(\w+)",'
                     r'outcome="(\w+)"\} (\d+)$', line)
        if m:
            key = m.group(1, 2)
            blocks[key] = blocks.get(key, 0) + int(m.group(3))
    return gets, blocks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--binding", required=True)
    ap.add_argument("--root", required=True, help="the source tree (deploy/prometheus)")
    args = ap.parse_args()
    os.environ["STRATA_LIB"] = args.lib
    sys.path.insert(0, args.binding)
    import strata

    addr = "127.0.0.1:%d" % free_port()
    pr = subprocess.Popen([args.stratad, "--listen", addr, "--metrics-listen", "127.0.0.1:0"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    checks = 0
    try:
        line = pr.stdout.readline().decode()
        assert "stratad ready" in line, line
        mport = int(re.search(r"metrics_port=(\d+)", line).group(1))
        gets0, blocks0 = scrape(mport)
        # Every label set is there from the namespace's first Hello, at zero.
        assert gets0 == {} or set(gets0.values()) == {0}, gets0
        with strata.Client(addr, tenant="acme", model="k3") as c:
            bt = c.block_tokens
            chain = c.hash(np.arange(4 * bt, dtype=np.uint32))
            kv, idx, kda = (np.full(n, v, np.uint8) for n, v in ((4096, 1), (1024, 2), (512, 3)))
            assert c.put(chain, [(0, strata.KV, 0, kv), (1, strata.KV, 0, kv),
                                 (0, strata.IDX, 0, idx), (1, strata.KDA, 0, kda)]) == [0] * 4
            out = np.zeros(4096, np.uint8)
            got = c.get(chain, [(0, strata.KV, 0, out), (3, strata.KV, 0, out),
                                (0, strata.IDX, 0, out), (2, strata.IDX, 0, out),
                                (1, strata.KDA, 0, out), (2, strata.KDA, 0, out)])
            assert [st for st, _ in got] == [0, strata.ERR_NOT_FOUND] * 3, got
            r = c.lookup(chain)  # blocks 0 and 1 hold objects, 2 and 3 do not
            assert r.matched_blocks == 2, vars(r)
            c.session_open("kinds-chat")
            c.session_append("kinds-chat", chain[:16])
            assert c.session_get("kinds-chat").length == bt
            try:
                c.session_get("kinds-nobody")
                raise AssertionError("an unknown session was found")
            except strata.Error as e:
                assert e.status == strata.ERR_NOT_FOUND, e
            checks += 4

            img = np.arange(24 * 16 * 3, dtype=np.uint32).astype(np.uint8).reshape(16, 24, 3)
            other = img.copy()
            other[5, 7, 1] ^= 1  # one sample of one pixel
            h, h2 = strata.hash_image(img), strata.hash_image(other)
            assert len(h) == 16 and h != h2
            emb = np.arange(6144, dtype=np.uint32).astype(np.uint8)
            assert c.put_vis(h, emb) == 0
            assert vis_lookup(addr, h) == 1 and vis_lookup(addr, h2) == 0
            back = np.zeros(8192, np.uint8)
            assert c.get_vis(h, back) == (0, 6144) and back[:6144].tobytes() == emb.tobytes()
            assert c.get_vis(h2.hex(), back)[0] == strata.ERR_NOT_FOUND
            checks += 3

        gets, blocks = scrape(mport)
        for kind in KINDS:
            hit, miss = gets.get((kind, "hit", "dram"), -1), gets.get((kind, "miss", "none"), -1)
            assert (hit, miss) == (1, 1), (kind, hit, miss, gets)
            assert gets.get((kind, "hit", "ssd"), -1) == 0, (kind, gets)
        assert blocks[("kv", "hit")] == 2 and blocks[("kv", "miss")] == 2, blocks
        assert blocks[("vis", "hit")] == 1 and blocks[("vis", "miss")] == 1, blocks
        checks += 2

        stats = json.load(urllib.request.urlopen("http://127.0.0.1:%d/stats" % mport, timeout=10))
        for kind in KINDS:
            k = stats["kinds"][kind]
            assert (k["get_hits_dram"], k["get_hits_ssd"], k["get_misses"]) == (1, 0, 1), (kind, k)
        assert stats["kinds"]["vis"]["lookup_block_hits"] == 1, stats["kinds"]
        assert stats["kinds"]["kv"]["lookup_block_misses"] == 2, stats["kinds"]
        checks += 1

        out = subprocess.run([args.strata, "metrics", "--nodes", addr],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        rows = {m.group(1): m.group(2) for m in re.finditer(r"^  (\w+) +(gets=.*)$", out.stdout,
                                                            re.M)}
        assert rows.get("vis") == "gets=2 hits=1 from_ssd=0 misses=1 hit_rate=50.0% " \
            "lookup_blocks=2 block_hits=1", out.stdout
        assert rows.get("kda") == "gets=2 hits=1 from_ssd=0 misses=1 hit_rate=50.0%", out.stdout
        checks += 1
        checks += ssd_phase(args, strata)
        checks += prometheus_phase(args, strata)
        print("%d passed, 0 failed" % checks)
    finally:
        pr.terminate()
        pr.wait()


def rule_exprs(path):
    """{record: expr} of the per-kind recording rules in strata-rules.yml
    (the "kind:" ones; folded "expr: >" blocks, no YAML library needed)."""
    rules, name, expr = {}, None, None
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\s*- record: (\S+)", line)
        if m:
            name, expr = m.group(1), None
            continue
        if name and re.match(r"\s*expr: >\s*$", line):
            expr = []
        elif expr is not None and line.strip():
            expr.append(line.strip())
            rules[name] = " ".join(expr)
    return {k: v for k, v in rules.items() if k.startswith("kind:")}


def prometheus_phase(args, strata):
    """A real Prometheus scrapes a daemon while every round of traffic reads
    one KV hit and one KV miss, three VIS hits and one VIS miss and looks up
    two blocks present and two not: the per-kind recording rules of
    deploy/prometheus/strata-rules.yml (the Grafana panels' queries) give
    0.5 and 0.75, no SSD share, and a KV lookup block hit rate of 0.5, within
    the partial rounds at a window's edges."""
    binary = obs_harness.find_tool("prometheus", "PROMETHEUS")
    if binary is None:
        print("prometheus phase skipped: prometheus is not installed (Debian: prometheus)")
        return 0
    rules = rule_exprs(os.path.join(args.root, "deploy/prometheus/strata-rules.yml"))
    assert len(rules) == 3, rules
    work = tempfile.mkdtemp(prefix="strata-kinds-prom-")
    addr = "127.0.0.1:%d" % free_port()
    pr = subprocess.Popen([args.stratad, "--listen", addr, "--metrics-listen", "127.0.0.1:0",
                           "--transport", "none"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
    prom = None
    try:
        line = pr.stdout.readline().decode()
        assert "stratad ready" in line, line
        mport = int(re.search(r"metrics_port=(\d+)", line).group(1))
        prom = obs_harness.Prometheus(binary, ["127.0.0.1:%d" % mport], work).start()
        obs_harness.wait_until(prom.targets_up, "Prometheus to scrape the daemon")
        with strata.Client(addr, tenant="acme", model="k3") as c:
            chain = c.hash(np.arange(4 * c.block_tokens, dtype=np.uint32))
            kv = np.full(4096, 5, np.uint8)
            assert c.put(chain, [(0, strata.KV, 0, kv), (1, strata.KV, 0, kv)]) == [0, 0]
            img = strata.hash_image(np.full((8, 8), 3, np.uint8))
            absent = strata.hash_image(np.full((8, 8), 4, np.uint8))
            assert c.put_vis(img, kv) == 0
            out = np.zeros(4096, np.uint8)
            t_end = time.monotonic() + 8
            while time.monotonic() < t_end:
                assert [st for st, _ in c.get(chain, [(0, strata.KV, 0, out),
                                                      (3, strata.KV, 0, out)])] == [0, -3]
                for h in (img, img, img, absent):
                    c.get_vis(h, out)
                assert c.lookup(chain).matched_blocks == 2
        want = {"kind:strata_get_hit_rate:ratio_rate1m": {"kv": 0.5, "vis": 0.75},
                "kind:strata_get_ssd_share:ratio_rate1m": {"kv": 0.0, "vis": 0.0},
                "kind:strata_lookup_block_hit_rate:ratio_rate1m": {"kv": 0.5}}
        for name, expr in rules.items():
            got = obs_harness.wait_until(lambda: prom.query(expr), "a value of " + name)
            got = got if isinstance(got, dict) else {"?": got}
            got = {k: v for k, v in got.items() if v == v}  # kinds without traffic: NaN
            print("%s: %s" % (name, got))
            assert got.keys() == want[name].keys(), (name, got)
            for k, v in want[name].items():
                assert abs(got[k] - v) <= 0.03, (name, k, got[k], v)
        return 1
    finally:
        if prom is not None:
            prom.stop()
        pr.terminate()
        pr.wait()
        shutil.rmtree(work, ignore_errors=True)


def ssd_phase(args, strata):
    """A KDA object written through to a daemon's SSD tier, the daemon
    restarted on the same data_dir: the get that follows is a hit served from
    the SSD tier (promoted), the next one from DRAM."""
    data = tempfile.mkdtemp(prefix="strata-kinds-")
    addr = "127.0.0.1:%d" % free_port()
    cmd = [args.stratad, "--listen", addr, "--metrics-listen", "127.0.0.1:0", "--data-dir", data,
           "--ssd-map-size", "256M", "--transport", "none"]
    try:
        for restart in (0, 1):
            pr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            try:
                line = pr.stdout.readline().decode()
                assert "stratad ready" in line, line
                mport = int(re.search(r"metrics_port=(\d+)", line).group(1))
                with strata.Client(addr, tenant="acme", model="k3") as c:
                    chain = c.hash(np.arange(2 * c.block_tokens, dtype=np.uint32))
                    kda = np.full(4096, 9, np.uint8)
                    if not restart:
                        assert c.put(chain, [(1, strata.KDA, 0, kda)], durable=True) == [0]
                        continue
                    out = np.zeros(4096, np.uint8)
                    for _ in range(2):
                        assert c.get(chain, [(1, strata.KDA, 0, out)]) == [(0, 4096)]
                    assert out.tobytes() == kda.tobytes()
                gets, _ = scrape(mport)
                assert gets[("kda", "hit", "ssd")] == 1 and gets[("kda", "hit", "dram")] == 1, gets
            finally:
                pr.terminate()
                pr.wait()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return 1


if __name__ == "__main__":
    main()
