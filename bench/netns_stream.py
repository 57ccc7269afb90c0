"""netns_stream.py - streaming across network namespaces against iperf3
(issue #23; docs/performance.md, "Across namespaces (issue #23)").

A client in namespace c, two stratad in namespaces n0 and n1, joined by veth
pairs through a bridge (tests/multihost/mh_netns.py): the stand-in for other
hosts until a NIC is there. Each round runs, on the same veth pairs:

  iperf3   two TCP streams at once, c -> n0 and c -> n1 (Debian's iperf3, -t S)
  put      libstrata puts of --objects objects of --object-mib MiB, --batch per
           call, --inflight calls at once, placed on both daemons by the ring
           (after untimed passes that fill the daemons' memory: the timed pass
           recycles faulted-in pages)
  get      libstrata gets of those objects back, --inflight calls at once; then
           every destination compared with what was put

for the data plane given (UCX with UCX_TLS=tcp, or libfabric tcp;ofi_rxm),
alternating the order each round. Prints per-round rates, medians, spreads
(min..max) and each median's ratio to iperf3's (the goal is 0.8), and the CPU
seconds per GB of each (client and daemons; iperf3's four processes).

  sudo /usr/bin/python3 bench/netns_stream.py --stratad build/release/cached/stratad \
       --lib build/release/client/libstrata.so [--transport ucx|libfabric] [--rounds 5]

Needs root (namespaces) and iperf3; run with /usr/bin/python3.
"""

import argparse
import ctypes
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MH = os.path.join(HERE, "..", "tests", "multihost")
sys.path.insert(0, MH)


def cpu_s(pids=()):
    """CPU seconds (user + system) of this process, or of the processes pids."""
    if not pids:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    total = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (all threads)
    return total / os.sysconf("SC_CLK_TCK")


def client_main(a):
    """Runs in namespace c: one put pass and one get pass; prints JSON."""
    import numpy as np
    import mh_workload

    c = mh_workload.connect(a.nodes, a.transport, 30000)
    obj = a.object_mib << 20
    n = a.objects
    batch = a.batch
    depth = a.inflight
    src = [np.random.default_rng(i).integers(0, 255, obj, dtype=np.uint8) for i in range(batch)]
    # One set of destinations per batch in flight: a get in flight owns its buffers.
    dst = [np.empty(obj, np.uint8) for _ in range(batch * depth)]
    # Registered once, as an engine registers its pools (st_client_register):
    # an unregistered buffer is registered for each batch.
    lib = mh_workload.strata._lib
    lib.st_client_register.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    lib.st_client_deregister.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    for arr in (src + dst) if a.register else ():
        mh_workload.strata._check(lib.st_client_register(
            c._c, arr.__array_interface__["data"][0], arr.nbytes))
    out = {}
    # The untimed passes fill the daemons' memory (--memory-mib) so that the
    # timed pass writes pages already faulted in, recycled by eviction: a
    # first write to a fresh page costs the kernel's page clearing (80 % of
    # stratad's time in clear_page_erms when the timed pass wrote fresh pages).
    # --inflight batches are in flight at once (put_async/get_async), as an
    # engine streams: the next batch's Reserve and transfers overlap the
    # previous one's Commit.
    for p in range(a.warm_passes + 1):
        toks = [(7 * i + a.round * 101 + p * 13) % 50000 for i in range(c.block_tokens * n)]
        chain = c.hash(toks)
        t0, c0, d0 = time.monotonic(), cpu_s(), cpu_s(a.daemon_pids)
        window = []
        for b in range(0, n, batch):
            window.append(c.put_async(chain, [(b + i, mh_workload.strata.KV, 0, src[i])
                                              for i in range(batch)]))
            while len(window) == depth or (b + batch >= n and window):
                with window.pop(0) as h:
                    st = [r.status for r in h.wait()]
                if any(s != 0 for s in st):
                    raise SystemExit("put statuses %s" % st)
        out["put_s"] = time.monotonic() - t0
        out["put_cpu"] = cpu_s() - c0 + cpu_s(a.daemon_pids) - d0
    t0, c0, d0 = time.monotonic(), cpu_s(), cpu_s(a.daemon_pids)
    window = []
    for k, b in enumerate(range(0, n, batch)):
        d = dst[(k % depth) * batch:(k % depth + 1) * batch]
        window.append(c.get_async(chain, [(b + i, mh_workload.strata.KV, 0, d[i])
                                          for i in range(batch)]))
        while len(window) == depth or (b + batch >= n and window):
            with window.pop(0) as h:
                r = h.wait()
            if any(s != 0 for s, _ in r):
                raise SystemExit("get statuses %s" % r)
    out["get_s"] = time.monotonic() - t0
    out["get_cpu"] = cpu_s() - c0 + cpu_s(a.daemon_pids) - d0
    # Each set of destinations holds the last batch read into it: all of its
    # bytes against what was put (libstrata verified every object as it came).
    if any(not np.array_equal(dst[j], src[j % batch]) for j in range(len(dst))):
        raise SystemExit("get returned other bytes")
    out["bytes"] = n * obj
    for arr in (src + dst) if a.register else ():
        lib.st_client_deregister(c._c, arr.__array_interface__["data"][0])
    c.close()
    print(json.dumps(out))
    return 0


def iperf3(net, daemons, seconds):
    """Bytes per second of two concurrent TCP streams c -> n0, c -> n1."""
    servers = [net.popen(d, ["iperf3", "-s", "-1", "-B", net.addr(d), "-p", "5201"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for d in daemons]
    time.sleep(0.5)
    clients = [net.popen("c", ["iperf3", "-c", net.addr(d), "-p", "5201", "-t", str(seconds),
                               "-J"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
               for d in daemons]
    total, cpu = 0.0, 0.0
    for p in clients:
        out, _ = p.communicate(timeout=seconds + 30)
        end = json.loads(out)["end"]
        total += end["sum_received"]["bits_per_second"] / 8
        # Sender and receiver processes, % of one CPU over the run (user + system).
        cpu += (end["cpu_utilization_percent"]["host_total"] +
                end["cpu_utilization_percent"]["remote_total"]) / 100 * seconds
    for s in servers:
        s.wait(timeout=10)
    return total, cpu / (total * seconds)


def fmt(xs):
    return "median %.2f GB/s (%.2f..%.2f)" % (statistics.median(xs) / 1e9, min(xs) / 1e9,
                                               max(xs) / 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad")
    ap.add_argument("--lib")
    ap.add_argument("--transport", default="ucx",
                    help="ucx or libfabric (the client mode gets libstrata's form)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4, help="iperf3 -t")
    ap.add_argument("--object-mib", type=int, default=4)
    ap.add_argument("--objects", type=int, default=256, help="objects per pass")
    ap.add_argument("--batch", type=int, default=8, help="objects per put or get call")
    ap.add_argument("--inflight", type=int, default=4,
                    help="batches in flight at once (Client.put_async/get_async); 1: one at a time")
    ap.add_argument("--memory-mib", type=int, default=384, help="each daemon's memory_limit")
    ap.add_argument("--warm-passes", type=int, default=8,
                    help="untimed put passes before the timed one (fill the daemons' memory)")
    ap.add_argument("--no-register", dest="register", action="store_false",
                    help="leave the client's buffers unregistered (registered per batch)")
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--nodes", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--daemon-pids", type=lambda t: [int(x) for x in t.split(",") if x],
                    default=[], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client:
        return client_main(a)
    if a.transport not in ("ucx", "libfabric"):
        ap.error("--transport: ucx or libfabric")
    import mh_cluster
    import mh_netns

    why = mh_netns.can_make_namespaces()
    if why:
        mh_netns.skip(why)
    if shutil.which("iperf3") is None:
        mh_netns.skip("iperf3 is not installed (Debian's iperf3: scripts/install-deps.sh)")
    root = tempfile.mkdtemp(prefix="strata-netns-bench-")
    net = mh_netns.Net(["c", "n0", "n1"])
    cl = mh_cluster.Cluster(net, a.stratad, 2, root, transport=a.transport, replicas=1,
                            memory="%dM" % a.memory_mib, chunk="64M", max_object="32M",
                            data=False)
    env = mh_cluster.transport_env(a.transport)
    env.update({"MH_TOKEN": mh_cluster.TOKEN, "STRATA_LIB": a.lib})
    tr = "ucx" if a.transport == "ucx" else "libfabric:tcp;ofi_rxm"
    rates = {"iperf3": [], "put": [], "get": []}
    cpus = {"iperf3": [], "put": [], "get": []}  # CPU seconds per byte moved
    try:
        cl.start()
        print("netns_stream: client c -> daemons n0, n1 over veth (a bridge), transport %s "
              "(%s), %d x %d MiB objects per pass, iperf3 2 streams x %d s, %d rounds" %
              (tr, "UCX_TLS=tcp" if a.transport == "ucx" else "FI_PROVIDER=tcp;ofi_rxm",
               a.objects, a.object_mib, a.seconds, a.rounds), flush=True)
        for rnd in range(a.rounds):
            order = ("iperf3", "strata") if rnd % 2 == 0 else ("strata", "iperf3")
            for what in order:
                if what == "iperf3":
                    rate, cpu = iperf3(net, ["n0", "n1"], a.seconds)
                    rates["iperf3"].append(rate)
                    cpus["iperf3"].append(cpu)
                    continue
                r = net.run("c", [sys.executable, os.path.abspath(__file__), "--client",
                                  "--nodes", cl.peers(), "--transport", tr, "--object-mib",
                                  str(a.object_mib), "--objects", str(a.objects), "--batch",
                                  str(a.batch), "--inflight", str(a.inflight), "--warm-passes",
                                  str(a.warm_passes), "--daemon-pids",
                                  ",".join(str(d.proc.pid) for d in cl.daemons)] +
                                 ([] if a.register else ["--no-register"]) + ["--round",
                                  str(rnd)], env=env, stdout=subprocess.PIPE, timeout=600)
                if r.returncode != 0:
                    raise RuntimeError("the streaming client failed (%d)" % r.returncode)
                res = json.loads(r.stdout.decode().strip().splitlines()[-1])
                rates["put"].append(res["bytes"] / res["put_s"])
                rates["get"].append(res["bytes"] / res["get_s"])
                cpus["put"].append(res["put_cpu"] / res["bytes"])
                cpus["get"].append(res["get_cpu"] / res["bytes"])
            print("round %d: iperf3 %.2f GB/s, put %.2f GB/s, get %.2f GB/s" % (
                rnd, rates["iperf3"][-1] / 1e9, rates["put"][-1] / 1e9,
                rates["get"][-1] / 1e9), flush=True)
        ip = statistics.median(rates["iperf3"])
        ic = statistics.median(cpus["iperf3"])
        # CPU: seconds of CPU (client and daemons, or iperf3's four processes)
        # per GB moved; on a shared machine a better guide than the rates.
        for k in ("iperf3", "put", "get"):
            print("%-6s %s  ratio to iperf3 %.2f  cpu %.2f s/GB (%.2f..%.2f), %.1fx iperf3's" % (
                k, fmt(rates[k]), statistics.median(rates[k]) / ip,
                statistics.median(cpus[k]) * 1e9, min(cpus[k]) * 1e9, max(cpus[k]) * 1e9,
                statistics.median(cpus[k]) / ic))
    finally:
        cl.stop()
        net.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
