#!/usr/bin/python3
"""Membership on etcd as an operator and a Python program see it
(docs/membership.md): two daemons on a real etcd-server (started by this
test, tests/integration/etcd_harness.py) show strata_etcd_up,
strata_ring_epoch and strata_members{state} on /metrics; `strata status
--etcd` lists both members, their state and one epoch; the Python binding
connects with etcd= and reports that epoch; etcd stopped: strata_etcd_up
falls to 0 and the daemons and the client keep serving; etcd back: 1 again.
Run with Debian's python3."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from etcd_harness import Etcd  # noqa: E402
from obs_harness import fail, free_port, http_get, stop_process, wait_until  # noqa: E402

SECRET = "membership-python-test-secret"


def metric(port, series):
    status, _, body = http_get("http://127.0.0.1:%d/metrics" % port)
    if status != 200:
        return None
    for line in body.decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def start_daemon(stratad, etcd, log_dir, i):
    port, mport = free_port(), free_port()
    log = open(os.path.join(log_dir, "stratad-%d.log" % i), "wb")
    proc = subprocess.Popen([stratad, "--listen", "127.0.0.1:%d" % port, "--etcd", etcd,
                             "--etcd-ttl", "4", "--metrics-listen", "127.0.0.1:%d" % mport,
                             "--cluster-secret", SECRET],
                            stdout=subprocess.PIPE, stderr=log)
    line = proc.stdout.readline().decode()
    if "stratad ready" not in line:
        fail("daemon %d did not start: %r (log %s)" % (i, line, log.name))
    return proc, port, mport


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--binding", required=True)
    ap.add_argument("--root", required=True)
    args = ap.parse_args()
    os.environ["STRATA_LIB"] = args.lib
    sys.path.insert(0, args.binding)
    import strata

    log_dir = tempfile.mkdtemp(prefix="strata-membership-py-")
    procs = []
    with Etcd(args.root) as etcd:
        try:
            for i in range(2):
                procs.append(start_daemon(args.stratad, etcd.endpoint, log_dir, i))
            mports = [p[2] for p in procs]
            epoch = wait_until(
                lambda: (all(metric(m, "strata_members{state=\"serving\"}") == 2 for m in mports)
                         and len({metric(m, "strata_ring_epoch") for m in mports}) == 1
                         and metric(mports[0], "strata_ring_epoch")),
                "both daemons see two serving members at one epoch", 20)
            for m in mports:
                if metric(m, "strata_etcd_up") != 1:
                    fail("strata_etcd_up is not 1 on :%d" % m)
            print("ok: /metrics: 2 serving, strata_ring_epoch %d, strata_etcd_up 1" % epoch)

            out = subprocess.run([args.strata, "status", "--etcd", etcd.endpoint],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if out.returncode != 0 or "2 registered, epoch %d" % epoch not in out.stdout:
                fail("strata status --etcd:\n" + out.stdout)
            rows = [r for r in out.stdout.splitlines() if re.match(r"127\.0\.0\.1:\d+ +UP +serving", r)]
            if len(rows) != 2 or not all(r.split()[-1] == str(int(epoch)) for r in rows):
                fail("strata status --etcd rows:\n" + out.stdout)
            print("ok: strata status --etcd lists both members, serving, epoch %d" % epoch)

            c = strata.Client(etcd=etcd.endpoint, tenant="acme", model="k3")
            if c.ring_epoch != epoch:
                fail("the binding's ring_epoch %d, the daemons' %d" % (c.ring_epoch, epoch))
            print("ok: strata.Client(etcd=...) connects at epoch %d" % c.ring_epoch)

            etcd.stop()
            wait_until(lambda: all(metric(m, "strata_etcd_up") == 0 for m in mports),
                       "strata_etcd_up 0 with etcd stopped", 20)
            for m in mports:
                if metric(m, "strata_members{state=\"serving\"}") != 2:
                    fail("the last ring was not kept with etcd away")
            out = subprocess.run([args.strata, "status", "--nodes",
                                  ",".join("127.0.0.1:%d" % p[1] for p in procs)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if out.returncode != 0 or out.stdout.count(" UP ") != 2:
                fail("the daemons do not serve with etcd away:\n" + out.stdout)
            if c.ring_epoch != epoch:
                fail("the client lost its ring with etcd away")
            print("ok: etcd stopped: strata_etcd_up 0, both daemons serve, the client keeps "
                  "its ring")
            etcd.restart()
            wait_until(lambda: all(metric(m, "strata_etcd_up") == 1 for m in mports),
                       "strata_etcd_up 1 with etcd back", 30)
            print("ok: etcd back: strata_etcd_up 1")
            c.close()
        finally:
            for p in procs:
                stop_process(p[0], 20)
    print("test_membership.py: all passed")


if __name__ == "__main__":
    main()
