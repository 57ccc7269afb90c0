"""test_netns_faults.py - daemons on separate "hosts" under a randomized fault
schedule, checked afterwards by the history checker (mh_history.py).

Three stratad in namespaces n0..n2 (10.213.0.2-4), a client workload in
namespace c (10.213.0.1), all joined through a bridge in a switch namespace
(mh_netns.py); the data plane runs over TCP (UCX_TLS=tcp or libfabric
tcp;ofi_rxm, on eth0). For --seconds the schedule draws a fault, a target and
how long it lasts from a seeded generator, applies it, heals it, and waits
for the ring to converge; then the workload stops, reads back every durable
write it got acknowledged, and the checker runs over the whole history.

  --seed N         replay a schedule (the seed is printed at the start)
  --seconds S      length of the schedule (default $STRATA_SOAK_S, else 300)
  --plant stale-session
                   the daemons of a build with STRATA_FAULT_INJECT serve stale
                   session records (cached/fault.h); the test then passes only
                   if the checker FAILS on the history (skips in a build without)

Faults: partition (a host's switch port down, then up), loss (netem 30 %
packet loss on a host's port, where the kernel has sch_netem), flap (the
port down 150 ms of every 500 ms), kill9
(SIGKILL, then a restart on the same data dir), and with a stratad that
rebalances (it lists --drain-on-term) node-add and node-drain (peers file +
SIGHUP; SIGTERM drains).

  --etcd           membership on etcd: etcd-server in host e (scripts/etcd.sh),
                   the daemons register there (--etcd, a lease of 4 s), the
                   client finds them there and follows every change without a
                   restart; node-add and node-drain go through etcd (a new
                   daemon registers; SIGTERM drains and deregisters), the
                   etcd-restart fault stops etcd for the hold and starts it
                   again on its data, and the ring check compares the epochs.

Needs root for the namespaces (skips otherwise). Run with /usr/bin/python3.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mh_cluster  # noqa: E402
import mh_history  # noqa: E402
import mh_netns  # noqa: E402

N_DAEMONS = 3
SPARES = 2  # slots a node added later takes (with member changes)
TIMEOUT_MS = 2000


class Workload:
    """The client workload in host c; restarted with the new members after a
    member change (static peers: a client knows the nodes it was given)."""

    def __init__(self, net, cluster, argv, env, log, seed, seconds):
        self.net, self.cluster, self.argv, self.env, self.log = net, cluster, argv, env, log
        if cluster.etcd:
            self.argv = argv + ["--etcd", cluster.etcd]
        self.seed, self.seconds = seed, seconds
        self.instance = -1
        self.proc = None
        self.stop_file = ""

    def start(self):
        self.instance += 1
        self.stop_file = os.path.join(self.cluster.root, "stop-%d" % self.instance)
        self.proc = self.net.popen("c", self.argv + [
            "--nodes", self.cluster.peers(), "--seed", str(self.seed), "--seconds",
            str(self.seconds + 600), "--stop", self.stop_file, "--instance",
            str(self.instance)], env=self.env, stderr=self.log)

    def check(self):
        if self.proc.poll() is not None:
            raise RuntimeError("the workload exited early (status %s)" % self.proc.returncode)

    def stop(self):
        open(self.stop_file, "w").close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            raise
        if self.proc.returncode != 0:
            raise RuntimeError("workload status %s" % self.proc.returncode)

    def dump_stacks(self):
        """A workload that does not stop is a call that hangs: every thread's stack
        (gdb, where installed) goes to workload-stacks.txt and stderr before the run
        fails, so that the hang can be read afterwards."""
        path = os.path.join(self.cluster.root, "workload-stacks.txt")
        if shutil.which("gdb") is None:
            print("workload did not stop; gdb is not installed, no stacks", file=sys.stderr)
            return
        try:
            out = subprocess.run(["gdb", "-p", str(self.proc.pid), "-batch", "-ex",
                                  "thread apply all bt"], capture_output=True, text=True,
                                 timeout=120).stdout
        except subprocess.TimeoutExpired:
            out = "gdb did not answer within 120 s\n"
        with open(path, "w") as f:
            f.write(out)
        print("workload did not stop; its threads (%s):\n%s" % (path, out[-20000:]),
              file=sys.stderr)


class Schedule:
    """The faults of a run, drawn from random.Random(seed), logged to events."""

    def __init__(self, net, cluster, events_path, probe, rng, workload, members, etcd=None):
        self.net = net
        self.cluster = cluster
        self.events = open(events_path, "a")
        self.probe = probe
        self.rng = rng
        self.workload = workload
        self.etcd = etcd
        self.epochs = etcd is not None  # ring epochs comparable across nodes (etcd's)
        self.kinds = {"partition": self.partition, "loss": self.loss, "flap": self.flap,
                      "kill9": self.kill9,
                      "node-add": None, "node-drain": None, "etcd-restart": None}
        if members:
            self.kinds.update({"node-add": self.node_add, "node-drain": self.node_drain})
        if etcd is not None:
            self.kinds["etcd-restart"] = self.etcd_restart
        if shutil.which("tc") is None or not net.has_netem():
            print("loss: not available (tc's netem qdisc, module sch_netem, is missing)")
            self.kinds["loss"] = None

    def log(self, rec):
        self.events.write(json.dumps(rec, sort_keys=True) + "\n")
        self.events.flush()

    def available(self):
        return sorted(k for k, fn in self.kinds.items() if fn is not None)

    def partition(self, d, hold):
        self.net.cut(d.host)
        time.sleep(hold)
        self.net.heal(d.host)
        return False

    def loss(self, d, hold):
        self.net.loss(d.host, 30)
        time.sleep(hold)
        self.net.loss(d.host, 0)
        return False

    def flap(self, d, hold):
        """A flaky link where netem is missing: the host's port down 150 ms
        out of every 500 ms for hold seconds."""
        end = time.monotonic() + hold
        while time.monotonic() < end:
            self.net.cut(d.host)
            time.sleep(0.15)
            self.net.heal(d.host)
            time.sleep(0.35)
        return False

    def kill9(self, d, hold):
        d.kill9()
        time.sleep(hold)
        d.start()
        return True

    def etcd_restart(self, d, hold):
        """etcd stopped for the hold (the daemons and the client serve with
        the last ring), then started again on its data."""
        self.etcd.stop()
        time.sleep(hold)
        self.etcd.start()
        return False

    def node_add(self, d, hold):
        """A spare slot joins: started with the new peers, SIGHUP to the others,
        the client restarted with them (with etcd: it registers, and the
        others and the client follow). Needs a spare; else does nothing."""
        new = self.cluster.spare()
        if new is None:
            return None
        if not self.etcd:
            self.workload.stop()
        shutil.rmtree(new.data_dir, ignore_errors=True)  # a fresh node
        self.cluster.daemons.append(new)
        if not self.etcd:
            self.cluster.write_peers()
        new.start()
        self.cluster.set_members(self.cluster.daemons)
        time.sleep(hold)
        if not self.etcd:
            self.workload.start()
        return new.host

    def node_drain(self, d, hold):
        """d drains (SIGTERM with drain_on_term: hands its durable objects to
        the ring without it, then exits), the others get the peers without it.
        Keeps at least 3 members (R = 2 and one more to fail)."""
        if len(self.cluster.daemons) <= 3:
            return None
        if not self.etcd:
            self.workload.stop()
        rc = d.stop(timeout=90)
        self.cluster.set_members([x for x in self.cluster.daemons if x is not d])
        time.sleep(hold)
        if not self.etcd:
            self.workload.start()
        if rc != 0:
            self.log({"op": "ring", "converged": False, "t0": time.monotonic(),
                      "t1": time.monotonic(), "why": "drain of %s exited %s" % (d.host, rc)})
        return d.host

    def one(self, i):
        kind = self.rng.choice(self.available())
        d = self.rng.choice(self.cluster.daemons)
        if kind in ("node-add", "node-drain"):
            hold = round(self.rng.uniform(1.0, 6.0), 2)
            t0 = time.monotonic()
            target = self.kinds[kind](d, hold)
            if target is None:  # no spare slot, or too few members: a kill -9 instead
                kind = "kill9"
            else:
                print("fault %d: %s %s (members now %s)" % (
                    i, kind, target, ",".join(x.host for x in self.cluster.daemons)), flush=True)
                self.log({"op": "fault", "kind": kind, "target": target, "hold_s": hold,
                          "t0": t0, "t1": time.monotonic(), "loses_dram": True})
                self.converge()
                return
        hold = round(self.rng.uniform(1.0, 6.0), 2)
        print("fault %d: %s %s for %.2f s" % (i, kind, d.host, hold), flush=True)
        t0 = time.monotonic()
        loses = self.kinds[kind](d, hold)
        self.log({"op": "fault", "kind": kind, "target": d.host, "hold_s": hold, "t0": t0,
                  "t1": time.monotonic(), "loses_dram": loses})
        self.converge()

    def converge(self, limit_s=30.0):
        """Waits until every member answers Hello with the peer set the clients
        use (and, with etcd, one ring epoch); logs a ring record either way."""
        want = sorted(self.cluster.peers().split(","))
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < limit_s:
            last = self.probe()
            views = [v for v in last.values()]
            # Static peers: the epoch is each node's own count of ring changes
            # (a node added later starts at 1), so only the peer sets compare;
            # with membership on etcd the epochs (etcd's) must agree too.
            if all("peers" in v for v in views) and \
                    all(v["peers"] == want for v in views) and \
                    (not self.epochs or len({v["epoch"] for v in views}) == 1):
                self.log({"op": "ring", "converged": True, "t0": t0, "t1": time.monotonic(),
                          "epoch": views[0]["epoch"], "peers": want})
                return True
            time.sleep(0.5)
        self.log({"op": "ring", "converged": False, "t0": t0, "t1": time.monotonic(),
                  "views": last, "want": want})
        return False


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--lib", required=True, help="libstrata.so")
    ap.add_argument("--seconds", type=float,
                    default=float(os.environ.get("STRATA_SOAK_S", "300")))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--transport", default="ucx", choices=("ucx", "libfabric"))
    ap.add_argument("--plant", default="", choices=("", "stale-session"))
    ap.add_argument("--fault-inject", default="OFF",
                    help="whether the build has STRATA_FAULT_INJECT (ON/OFF)")
    ap.add_argument("--keep", action="store_true", help="keep the logs and history")
    ap.add_argument("--etcd", action="store_true",
                    help="membership on etcd (etcd-server in host e) in place of static peers")
    ap.add_argument("--strict", action="store_true",
                    help="count writes acknowledged during a fault too (mh_history.py)")
    return ap.parse_args()


def main():
    a = parse_args()
    why = mh_netns.can_make_namespaces()
    if why:
        mh_netns.skip(why)
    if a.plant and a.fault_inject.upper() not in ("ON", "1", "TRUE"):
        mh_netns.skip("--plant needs a build with STRATA_FAULT_INJECT (a Debug build: "
                      "docs/testing.md); this one has none")
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    replay = "%s %s --stratad %s --lib %s --seed %d --seconds %g --transport %s%s" % (
        sys.executable, os.path.abspath(__file__), a.stratad, a.lib, seed, a.seconds,
        a.transport, " --plant %s --fault-inject ON" % a.plant if a.plant else "")
    replay += " --strict" if a.strict else ""
    replay += " --etcd" if a.etcd else ""
    print("seed=%d seconds=%g transport=%s plant=%s membership=%s" % (
        seed, a.seconds, a.transport, a.plant or "none", "etcd" if a.etcd else "static"),
        flush=True)
    print("replay: " + replay, flush=True)
    root = tempfile.mkdtemp(prefix="strata-mh-")
    # Member changes need a stratad that re-reads peers on SIGHUP and drains
    # on SIGTERM (rebalancing): it lists --drain-on-term.
    flags = mh_cluster.stratad_flags(a.stratad)
    if a.etcd and ("--etcd" not in flags or shutil.which("etcd") is None):
        mh_netns.skip("--etcd needs a stratad with --etcd and etcd-server installed "
                      "(scripts/install-deps.sh)")
    members = "--drain-on-term" in flags
    spares = SPARES if members else 0
    # etcd, when used, runs in a host of its own after the daemons' slots.
    net = mh_netns.Net(["c"] + ["n%d" % i for i in range(N_DAEMONS + spares)] +
                       (["e"] if a.etcd else []))
    etcd = mh_cluster.Etcd(net, "e", root) if a.etcd else None
    cl = mh_cluster.Cluster(net, a.stratad, N_DAEMONS, root, transport=a.transport,
                            spares=spares, members_file=members, drain_on_term=members,
                            extra=["--drain-timeout", "60s"] if members else [],
                            etcd=etcd.endpoint if etcd else "")
    env = mh_cluster.transport_env(a.transport)
    env.update({"MH_TOKEN": mh_cluster.TOKEN, "STRATA_LIB": a.lib})
    if os.environ.get("STRATA_MH_PRELOAD"):  # a sanitized libstrata in a plain python
        env.update({"LD_PRELOAD": os.environ["STRATA_MH_PRELOAD"],
                    "ASAN_OPTIONS": "detect_leaks=0"})
    ops, events = os.path.join(root, "ops.jsonl"), os.path.join(root, "events.jsonl")
    status = 1
    try:
        # The planted fault is armed on one daemon: it acknowledges session
        # appends but keeps serving the record as it was.
        if etcd is not None:
            etcd.start()
        cl.start(env_for=(lambda i: {"STRATA_FAULT": "stale-session"} if i == 0 else {})
                 if a.plant else None)

        def probe():
            r = net.run("c", [sys.executable, os.path.join(HERE, "mh_probe.py"), cl.peers(),
                              mh_cluster.TOKEN, "mh", "mh-model"], stdout=subprocess.PIPE,
                        env=env, timeout=60)
            return json.loads(r.stdout or "{}")

        wlog = open(os.path.join(root, "workload.log"), "a")
        wl = [sys.executable, os.path.join(HERE, "mh_workload.py"),
              "--transport", a.transport if a.transport == "ucx" else "libfabric:tcp;ofi_rxm",
              "--history", ops, "--timeout-ms", str(TIMEOUT_MS)]
        w = Workload(net, cl, wl, env, wlog, seed, a.seconds)
        sched = Schedule(net, cl, events, probe, random.Random(seed), w, members, etcd)
        print("faults drawn from: %s (not available: %s)" % (
            ", ".join(sched.available()),
            ", ".join(k for k, f in sorted(sched.kinds.items()) if f is None)), flush=True)
        w.start()
        sched.converge()
        end = time.monotonic() + a.seconds
        i = 0
        while time.monotonic() < end:
            time.sleep(sched.rng.uniform(1.0, 4.0))
            w.check()
            sched.one(i)
            i += 1
        w.stop()
        r = net.run("c", wl + ["--nodes", cl.peers(), "--final"], env=env, timeout=300,
                    stderr=wlog)
        if r.returncode != 0:
            raise RuntimeError("final reads: status %s" % r.returncode)
        recs = mh_history.load(ops) + mh_history.load(events)
        violations = mh_history.Checker(recs, strict=a.strict).run()
        print("%d faults; history: %s" % (i, mh_history.summary(recs)), flush=True)
        for v in violations[:30]:
            print("VIOLATION " + v, flush=True)
        print("%d violations" % len(violations), flush=True)
        if a.plant:
            caught = [v for v in violations if v.startswith("sessions:")]
            print("%s: the checker %s the planted stale copy" % (
                "PASS" if caught else "FAIL", "caught" if caught else "did not catch"))
            status = 0 if caught else 1
        else:
            status = 1 if violations else 0
            print("PASS" if status == 0 else "FAIL (replay: %s)" % replay, flush=True)
    finally:
        cl.stop()
        if etcd is not None:
            etcd.stop()
        net.close()
        if status != 0 or a.keep:
            print("logs and history kept in " + root, flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
