#!/usr/bin/python3
"""The Python binding (client/python/strata/, ctypes over libstrata.so)
against two real daemons: hash (with items: images named by hash_image),
lookup, put and get with numpy arrays and bytes, misses, sessions, durable writes (each daemon with its own data_dir;
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


def images(strata, c, tokens, chain, bt):
    """hash_image against the Python reference (numpy arrays of both shapes,
    bytes), hash() with items: each block after the first is the reference's
    block hash of the one before, with the items' extras (the seed is the
    daemon's); blocks before an item keep their text hashes; bad input is
    refused with a reason."""
    import strata_hash

    rng = np.random.default_rng(7)
    rgb = rng.integers(0, 256, size=(30, 41, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, size=(9, 5), dtype=np.uint8)
    h_rgb = strata.hash_image(rgb)
    assert h_rgb == strata_hash.image_hash(rgb.tobytes(), 41, 30, 3)
    assert strata.hash_image(grey) == strata_hash.image_hash(grey.tobytes(), 5, 9, 1)
    assert strata.hash_image(rgb.tobytes(), width=41, height=30, channels=3) == h_rgb
    other = rgb.copy()
    other[29, 40, 2] ^= 0x80
    h_other = strata.hash_image(other)
    assert h_other != h_rgb
    for bad, kw, why in ((rgb.astype(np.uint16), {}, "uint8"),
                         (rgb.tobytes(), {"width": 41, "height": 30}, "need width"),
                         (rgb.tobytes(), {"width": 40, "height": 30, "channels": 3}, "needs"),
                         (rgb, {"width": 40}, "does not match"),
                         (np.zeros((2, 2, 4), np.uint8), {}, "channels")):
        try:
            strata.hash_image(bad, **kw)
            raise AssertionError("hash_image accepted %s" % why)
        except (ValueError, strata.Error) as e:
            assert why in str(e), (why, e)

    # An image at tokens 100..355 (4 x 64-token blocks from block 1 on), a hash item later.
    items = [(h_rgb, 100, 256), ("ab" * 16, 900, 30)]
    with_items = c.hash(tokens, items=items)
    assert len(with_items) == len(chain) and with_items[:16] == chain[:16]
    for i in range(1, len(chain) // 16):
        b0 = i * bt
        extras = [(strata._content(h, "t"), s - b0) for h, s, n in items
                  if s < b0 + bt and s + n > b0]
        want = strata_hash.block_hash(with_items[(i - 1) * 16:i * 16],
                                      [int(t) for t in tokens[b0:b0 + bt]], extras)
        assert with_items[i * 16:(i + 1) * 16] == want, i
        assert (with_items[i * 16:(i + 1) * 16] == chain[i * 16:(i + 1) * 16]) == (i < 1), i
    moved = c.hash(tokens, items=[(h_rgb, 101, 256)])
    assert moved[16:32] != with_items[16:32]
    assert c.hash(tokens, items=[(h_other, 100, 256)])[16:32] != with_items[16:32]
    for bad, why in (([(h_rgb, 500, 10), (h_rgb, 100, 10)], "sorted"),
                     ([(b"short", 0, 10)], "16 bytes"), ([(h_rgb, 0, 0)], "n_tokens"),
                     ([(h_rgb, 0)], "expected")):
        try:
            c.hash(tokens, items=bad)
            raise AssertionError("hash accepted items that are %s" % why)
        except (ValueError, strata.Error) as e:
            assert why in str(e) or isinstance(e, strata.Error), (why, e)
    return 4


def in_flight(strata, c, chain, want):
    """put_async/get_async: several batches in flight on the worker threads,
    each waited for in turn; what they read is what was put; a handle
    waited for again gives the same results."""
    rng = np.random.default_rng(5)
    batches = [[(b, strata.KV, 2, rng.integers(0, 256, size=41984, dtype=np.uint8))
                for b in range(first, first + 5)] for first in (0, 5, 10, 15)]
    pend = [c.put_async(chain, objs) for objs in batches]
    assert [[r.status for r in p.wait()] for p in pend] == [[0] * 5] * 4
    outs = [[(b, k, l, np.zeros(len(v), np.uint8)) for b, k, l, v in objs] for objs in batches]
    pend = [c.get_async(chain, o) for o in outs]
    assert [p.wait() for p in pend] == [[(0, 41984)] * 5] * 4
    for objs, o in zip(batches, outs):
        for (_, _, _, v), (_, _, _, got) in zip(objs, o):
            assert np.array_equal(v, got)
    p = c.put_async(chain, batches[0][:1])
    assert [(r.status, r.replicas_written) for r in p.wait()] == [(0, 1)]
    assert p.wait() == p.wait()
    p.release()
    # A miss in flight is a miss, not an error of the batch.
    assert c.get_async(chain, [(35, strata.KV, 0, np.zeros(16, np.uint8))]).wait()[0][0] == \
        strata.ERR_NOT_FOUND
    return 4


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
            checks += images(strata, c, tokens, chain, bt)

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
            checks += in_flight(strata, c, chain, want)

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
