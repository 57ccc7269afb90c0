"""mh_workload.py - the client workload of the multi-host tests.

Runs inside the client's namespace (ip netns exec), connects to the cluster
through libstrata (the Python binding, transport ucx or libfabric) and loops
over random operations until --seconds have passed or the file --stop
exists, appending one JSON line per operation to --history:

  {"op": "put"|"dput"|"get"|"rows"|"lookup"|"sopen"|"sappend"|"sget",
   "key": ..., "gen": ..., "t0": invoke, "t1": return (CLOCK_MONOTONIC s),
   "st": status (0 ok, -3 miss, else the error), ...}

Values are never stored in the history: the bytes of (key, gen) are a pure
function (value_bytes) that the checker (mh_history.py) computes again, and
a read records the digest of the bytes it got. --final reads every key that a
durable write acknowledged and ends (the check after the faults).

Run with /usr/bin/python3 (numpy); STRATA_LIB names libstrata.so.
"""

import argparse
import ctypes
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import strata  # noqa: E402
from mh_values import ROW_BYTES, digest, value_bytes  # noqa: E402

TENANT, MODEL = "mh", "mh-model"
KEYS = 48  # chains; a key is (chain, block, kind)
BLOCKS = 4  # blocks per chain
SESSIONS = 24
SESSION_BLOCKS = 64  # a session grows by one block per append, up to this
GENS = 3  # values a KV key may be written with
ST_MISS = -3


def connect(nodes, transport, timeout_ms, write_quorum=None, etcd=None):
    """A strata.Client with the data plane transport set (the binding's
    constructor has no transport argument: the params are filled here).
    etcd: its endpoint; the client finds the members there and follows
    their changes (nodes is then ignored)."""
    p = strata._Params()
    keep = []
    fields = [("nodes", strata._FIELD_NODES, nodes),
              ("tenant", strata._FIELD_TENANT, TENANT),
              ("model", strata._FIELD_MODEL, MODEL),
              ("token", strata._FIELD_TOKEN, os.environ["MH_TOKEN"]),
              ("transport", 1 << 8, transport)]
    if etcd:
        fields.append(("etcd", strata._FIELD_ETCD, etcd))
    for field, bit, v in fields:
        b = v.encode()
        keep.append(b)
        setattr(p, field, b)
        p.field_mask |= bit
    p.timeout_ms = timeout_ms
    p.field_mask |= strata._FIELD_TIMEOUT
    p.health_interval_ms = 500
    p.field_mask |= 1 << 9
    if write_quorum is not None:
        p.write_quorum = write_quorum
        p.field_mask |= strata._FIELD_WRITE_QUORUM
    c = strata.Client.__new__(strata.Client)
    c._c = ctypes.c_void_p()
    strata._check(strata._lib.st_client_connect(ctypes.byref(p), ctypes.byref(c._c)))
    c.block_tokens = strata._lib.st_client_block_tokens(c._c)
    c.replicas = strata._lib.st_client_replicas(c._c)
    c.write_quorum = strata._lib.st_client_write_quorum(c._c)
    return c


def get_rows(c, chain, block, kind, rows, dst):
    """A row read: rows of ROW_BYTES of one object into dst; (status, length)."""
    cbuf = ctypes.create_string_buffer(chain, len(chain))
    idx = (ctypes.c_uint32 * len(rows))(*rows)
    op = strata._GetOp(block, kind, 0, ctypes.addressof(dst), len(dst), ROW_BYTES, idx,
                       len(rows), 0, 0)
    ops = (strata._GetOp * 1)(op)
    h = ctypes.c_void_p()
    strata._check(strata._lib.st_client_get(c._c, cbuf, len(chain) // 16, ops, 1,
                                            ctypes.byref(h)))
    strata._lib.st_handle_wait(h, -1)
    strata._lib.st_handle_release(h)
    return ops[0].status, ops[0].length


class Workload:
    def __init__(self, c, rng, out, instance=0):
        self.c = c
        self.instance = instance  # a workload restarted (new members) opens new sessions
        self.rng = rng
        self.out = out
        bt = c.block_tokens
        self.chains = {}
        for k in range(KEYS):
            toks = [(k * 7919 + i * 31) % 50000 for i in range(BLOCKS * bt)]
            self.chains[k] = c.hash(toks)
        self.sess_chain = {}
        for s in range(SESSIONS):
            toks = [(s * 104729 + i * 17) % 50000 for i in range(SESSION_BLOCKS * bt)]
            self.sess_chain[s] = c.hash(toks)
        self.sess_len = {}  # sid -> blocks appended (acknowledged or not)
        self.sess_lost = set()
        self.sess_round = {}
        self.sess_durable = {s: s % 2 == 0 for s in range(SESSIONS)}

    def log(self, rec):
        self.out.write(json.dumps(rec, sort_keys=True) + "\n")
        self.out.flush()

    @staticmethod
    def key_name(k, block, kind):
        return "k%d/b%d/%s" % (k, block, {strata.KV: "kv", strata.KDA: "kda"}[kind])

    def timed(self, rec, fn):
        rec["t0"] = time.monotonic()
        try:
            rec.update(fn())
            rec.setdefault("st", 0)
        except strata.PartialWrite as e:
            rec["st"], rec["written"] = e.status, e.written
        except strata.Error as e:
            rec["st"], rec["err"] = e.status, str(e)[:200]
        rec["t1"] = time.monotonic()
        self.log(rec)
        return rec

    def op_put(self, durable):
        k = self.rng.randrange(KEYS)
        block = self.rng.randrange(BLOCKS)
        kind = strata.KDA if durable else strata.KV
        key = self.key_name(k, block, kind)
        # A KDA checkpoint is a function of its chain: an engine writes one value
        # per durable key (docs/testing.md says what conflicting writers do).
        gen = 0 if durable else self.rng.randrange(GENS)
        v = value_bytes(key, gen)

        def call():
            (st, written), = self.c.put_detailed(self.chains[k], [(block, kind, 0, v)],
                                                 durable=durable)
            return {"st": st, "written": written}

        return self.timed({"op": "dput" if durable else "put", "key": key, "gen": gen}, call)

    def op_get(self, durable):
        k = self.rng.randrange(KEYS)
        block = self.rng.randrange(BLOCKS)
        kind = strata.KDA if durable else strata.KV
        key = self.key_name(k, block, kind)
        dst = bytearray(ROW_BYTES * 128)

        def call():
            (st, n), = self.c.get(self.chains[k], [(block, kind, 0, dst)])
            return {"st": st, "digest": digest(bytes(dst[:n])) if st == 0 else None}

        return self.timed({"op": "get", "key": key}, call)

    def op_rows(self):
        k = self.rng.randrange(KEYS)
        block = self.rng.randrange(BLOCKS)
        key = self.key_name(k, block, strata.KV)
        rows = sorted(self.rng.sample(range(16), 3))
        dst = (ctypes.c_char * (ROW_BYTES * len(rows)))()

        def call():
            st, n = get_rows(self.c, self.chains[k], block, strata.KV, rows, dst)
            return {"st": st, "digest": digest(bytes(dst)[:n]) if st == 0 else None}

        return self.timed({"op": "rows", "key": key, "rows": rows}, call)

    def op_lookup(self):
        k = self.rng.randrange(KEYS)

        def call():
            r = self.c.lookup(self.chains[k])
            return {"matched": r.matched_blocks, "blocks": BLOCKS}

        return self.timed({"op": "lookup", "key": "k%d" % k}, call)

    def op_session(self):
        s = self.rng.randrange(SESSIONS)
        n = self.sess_len.get(s)
        if n is not None and n >= SESSION_BLOCKS:  # full: a new session in its place
            self.sess_round[s] = self.sess_round.get(s, 0) + 1
            n = None
            del self.sess_len[s]
        sid = "mh-i%d-s%d-r%d" % (self.instance, s, self.sess_round.get(s, 0))
        durable = self.sess_durable[s]
        roll = self.rng.random()
        if n is None or s in self.sess_lost:
            def call():
                self.c.session_open(sid, durable=durable)
                return {}

            r = self.timed({"op": "sopen", "key": sid, "durable": durable}, call)
            if r["st"] == 0:
                self.sess_len[s] = n or 0
                self.sess_lost.discard(s)
            return r
        if roll < 0.5:
            n += 1
            self.sess_len[s] = n
            chain = self.sess_chain[s][:16 * n]

            def call():
                return {"written": self.c.session_append(sid, chain, durable=durable)}

            r = self.timed({"op": "sappend", "key": sid, "length": n * self.c.block_tokens,
                            "head": chain[-16:].hex(), "durable": durable}, call)
            if r["st"] == ST_MISS:  # every copy lost (not durable): open it again
                self.sess_lost.add(s)
            return r

        def call():
            info = self.c.session_get(sid)
            return {"length": info.length, "head": info.head.hex()}

        return self.timed({"op": "sget", "key": sid}, call)

    def step(self):
        r = self.rng.random()
        if r < 0.18:
            return self.op_put(False)
        if r < 0.30:
            return self.op_put(True)
        if r < 0.48:
            return self.op_get(False)
        if r < 0.58:
            return self.op_get(True)
        if r < 0.66:
            return self.op_rows()
        if r < 0.72:
            return self.op_lookup()
        return self.op_session()


def final_reads(w, history):
    """Reads every key a durable write acknowledged, and every durable session."""
    keys, sessions = set(), set()
    with open(history) as f:
        for line in f:
            r = json.loads(line)
            if r.get("op") == "dput" and r.get("st") == 0:
                keys.add(r["key"])
            if r.get("op") == "sappend" and r.get("durable") and r.get("st") == 0:
                sessions.add(r["key"])
    for key in sorted(keys):
        k, block = int(key.split("/")[0][1:]), int(key.split("/")[1][1:])
        dst = bytearray(ROW_BYTES * 128)

        def call():
            (st, n), = w.c.get(w.chains[k], [(block, strata.KDA, 0, dst)])
            return {"st": st, "digest": digest(bytes(dst[:n])) if st == 0 else None}

        w.timed({"op": "get", "key": key, "final": True}, call)
    for sid in sorted(sessions):
        def call():
            info = w.c.session_get(sid)
            return {"length": info.length, "head": info.head.hex()}

        w.timed({"op": "sget", "key": sid, "final": True}, call)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--transport", default="ucx")
    ap.add_argument("--history", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--stop", default="")
    ap.add_argument("--timeout-ms", type=int, default=2000)
    ap.add_argument("--final", action="store_true")
    ap.add_argument("--instance", type=int, default=0)
    ap.add_argument("--etcd", default="", help="find the members in etcd (--nodes ignored)")
    a = ap.parse_args()
    c = connect(a.nodes, a.transport, a.timeout_ms, etcd=a.etcd)
    with open(a.history, "a") as out:
        w = Workload(c, random.Random(a.seed * 1000 + a.instance), out, a.instance)
        if a.final:
            final_reads(w, a.history)
            return 0
        w.log({"op": "meta", "timeout_ms": a.timeout_ms, "replicas": c.replicas,
               "write_quorum": c.write_quorum, "block_tokens": c.block_tokens,
               "t0": time.monotonic(), "t1": time.monotonic()})
        end = time.monotonic() + a.seconds
        while time.monotonic() < end and not (a.stop and os.path.exists(a.stop)):
            w.step()
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
