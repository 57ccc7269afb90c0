#!/usr/bin/python3
"""The Python binding (client/python/strata.py, ctypes over libstrata.so)
against two real daemons: hash, lookup, put and get with numpy arrays and
bytes, misses, sessions, durable writes (each daemon with its own data_dir;
one killed: PartialWrite), and errors. Run with Debian's python3 (numpy)."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# The ports daemons listen on come from the integration tests' shared helper.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from obs_harness import free_port  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--binding", required=True)
    args = ap.parse_args()
    os.environ["STRATA_LIB"] = args.lib
    sys.path.insert(0, args.binding)
    import strata

    ports = [free_port(), free_port()]
    peers = ",".join("127.0.0.1:%d" % p for p in ports)
    procs = []
    checks = 0
    data = tempfile.mkdtemp(prefix="strata-binding-")
    try:
        for i, p in enumerate(ports):
            os.mkdir(os.path.join(data, str(i)))
            pr = subprocess.Popen([args.stratad, "--listen", "127.0.0.1:%d" % p, "--peers", peers,
                                   "--cluster-secret", "python-binding-test-secret",
                                   "--ssd-map-size", "256M",
                                   "--data-dir", os.path.join(data, str(i))],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            line = pr.stdout.readline().decode()
            assert "stratad ready" in line, line
            procs.append(pr)

        try:
            strata.Client("not-an-address")
            raise AssertionError("a bad node list was accepted")
        except strata.Error as e:
            assert "not-an-address" in str(e) and e.status == -1, e
        checks += 1

        with strata.Client(peers, tenant="acme", model="k3") as c:
            bt = c.block_tokens
            assert bt == 64
            rng = np.random.default_rng()
            tokens = rng.integers(0, 150000, size=bt * 40 + 7, dtype=np.uint32)
            chain = c.hash(tokens)
            assert len(chain) == 40 * 16
            # A list gives the same chain as the array; a prefix is a prefix.
            assert c.hash([int(t) for t in tokens[:bt * 10]]) == chain[:160]
            checks += 2

            r = c.lookup(chain, layers=2)
            assert r.matched_blocks == 0 and r.nodes_down == 0
            objs, want = [], {}
            for b in range(30):
                for layer in range(2):
                    kv = rng.integers(0, 256, size=41984, dtype=np.uint8)
                    idx = rng.integers(0, 256, size=8448, dtype=np.uint8).tobytes()
                    objs += [(b, strata.KV, layer, kv), (b, strata.IDX, layer, idx)]
                    want[(b, strata.KV, layer)] = kv.tobytes()
                    want[(b, strata.IDX, layer)] = idx
            assert c.put(chain, objs) == [0] * len(objs)
            r = c.lookup(chain, layers=2)
            assert r.matched_blocks == 30 and r.matched_tokens == 30 * bt, vars(r)
            checks += 2

            outs = [(b, k, l, np.zeros(len(v), np.uint8)) for (b, k, l), v in want.items()]
            res = c.get(chain, outs)
            assert all(st == 0 for st, _ in res), res
            for (b, k, l, arr), (st, n) in zip(outs, res):
                assert n == len(want[(b, k, l)]) and arr.tobytes() == want[(b, k, l)]
            ba = bytearray(8448)
            assert c.get(chain, [(3, strata.IDX, 1, ba)]) == [(0, 8448)]
            assert bytes(ba) == want[(3, strata.IDX, 1)]
            # Blocks past the stored ones are misses, not errors.
            miss = np.zeros(16, np.uint8)
            assert c.get(chain, [(35, strata.KV, 0, miss)])[0][0] == strata.ERR_NOT_FOUND
            try:
                c.get(chain, [(0, strata.KV, 0, b"read-only")])
                raise AssertionError("bytes accepted as a destination")
            except ValueError:
                pass
            checks += 4

            s = c.session_open("py-chat")
            assert s.length == 0
            c.session_append("py-chat", chain[:20 * 16])
            s = c.session_get("py-chat")
            assert s.length == 20 * bt and s.head == chain[19 * 16:20 * 16]
            c.session_close("py-chat")
            try:
                c.session_get("py-chat")
                raise AssertionError("a closed session was found")
            except strata.Error as e:
                assert e.status == strata.ERR_NOT_FOUND
            checks += 3

            # Durable: W of R replicas committed it to disk, or PartialWrite.
            assert c.replicas == 2 and c.write_quorum == 2
            c.session_open("py-durable", durable=True)
            assert c.session_append("py-durable", chain[:2 * 16], durable=True) == 2
            kda = np.full(4096, 7, np.uint8)
            assert c.put_detailed(chain, [(3, strata.KDA, 0, kda)], durable=True) == [(0, 2)]
            procs[1].kill()
            procs[1].wait()
            try:
                c.session_append("py-durable", chain[:3 * 16], durable=True)
                raise AssertionError("a durable append on one of two replicas succeeded")
            except strata.PartialWrite as e:
                assert e.status == strata.ERR_PARTIAL and e.written == 1 and e.replicas == 2, e
                assert "durable on 1 of 2 replicas" in str(e), e
            assert c.put(chain, [(4, strata.KDA, 0, kda)], durable=True) == [strata.ERR_PARTIAL]
            assert c.session_get("py-durable").length == 3 * bt
            checks += 5
        with strata.Client(peers, tenant="acme", model="k3", write_quorum=1) as c1:
            assert c1.session_append("py-durable", chain[:4 * 16], durable=True) == 1
            assert c1.put_detailed(chain, [(5, strata.KDA, 0, kda)], durable=True) == [(0, 1)]
            checks += 2
        print("%d passed, 0 failed" % checks)
    finally:
        for pr in procs:
            pr.terminate()
            pr.wait()
        shutil.rmtree(data, ignore_errors=True)
        for pr in procs[:1]:  # procs[1] was killed on purpose
            if pr.returncode not in (0, -15):
                print("a daemon exited with %d" % pr.returncode)
                sys.exit(1)


if __name__ == "__main__":
    main()
