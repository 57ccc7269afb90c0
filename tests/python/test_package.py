#!/usr/bin/python3
"""The Python package (client/python/strata/) family by family against two
real daemons on loopback: every st_client_params_t field reaching
libstrata, and bad ones refused with the field's name; errors as classes
with status names and messages; hashing; lookups; asynchronous get and put
handles (test, wait, results, replicas, the buffers they hold); row reads;
zero-copy from numpy arrays, buffers and torch-like tensors (the pointer
libstrata gets is the array's own); registration; pin, delete, poll, score;
sessions; and the first binding's private names that tests/multihost and
bench/ still use. Run with Debian's python3 (numpy)."""
import argparse
import array
import ctypes
import gc
import mmap
import os
import subprocess
import sys
import tempfile
import weakref

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
from obs_harness import free_port  # noqa: E402

strata = None  # imported in main(), once STRATA_LIB is set


class FakeTensor:
    """What the package reads of a torch tensor (data_ptr, numel,
    element_size, is_contiguous, device), over a numpy array: torch is not
    installed here."""

    def __init__(self, arr, device="cpu", contiguous=True):
        self.arr, self.device, self._contiguous = arr, device, contiguous

    def data_ptr(self):
        return self.arr.__array_interface__["data"][0]

    def numel(self):
        return self.arr.size

    def element_size(self):
        return self.arr.itemsize

    def is_contiguous(self):
        return self._contiguous


def expect(exc, fn, *words):
    """fn() raises exc whose text holds every word; returns the exception."""
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return e
    raise AssertionError("%s not raised (%s)" % (exc.__name__, words))


def check_params(peers, data):
    """Every field set at once connects (the values libstrata reports back
    where it has an accessor); a config file; bad values name their field,
    in Python and in libstrata."""
    c = strata.Client(peers, tenant="acme", model="pkg", token="unused", replicas=2,
                      timeout_ms=4000, write_quorum=1, vnodes=64, transport="inline",
                      health_interval_ms=500, verify_reads="always", cache_locations="all",
                      transport_calls=0, copy_threads=3, etcd_prefix="/strata/")
    assert (c.replicas, c.write_quorum, c.block_tokens) == (2, 1, 64), c.info()
    assert c.info()["segment_blocks"] > 0 and "tenant=acme" in repr(c), repr(c)
    assert "unused" not in repr(c.params) and "token='***'" in repr(c.params), repr(c.params)
    c.close()
    assert c.closed and repr(c) == "<strata.Client closed>"
    expect(strata.InvalidArgument, lambda: c.lookup(b""), "closed")
    cfg = os.path.join(data, "client.ini")
    with open(cfg, "w") as f:
        f.write("nodes = %s\ntenant = acme\nmodel = pkg\nreplicas = 1\n" % peers)
    with strata.Client.from_config(cfg) as c2:
        assert c2.replicas == 1, c2.info()
    with strata.Client(params=strata.ClientParams(nodes=peers, model="pkg"), replicas=1) as c3:
        assert c3.replicas == 1
    for kw, words in (({"replicas": 17}, ("replicas", "0..16")),
                      ({"copy_threads": 0}, ("copy_threads", "1..16")),
                      ({"verify_reads": "sometimes"}, ("verify_reads", "lease, always")),
                      ({"transport": "carrier-pigeon"}, ("transport", "libfabric:<provider>")),
                      ({"timeout_ms": "5s"}, ("timeout_ms", "integer")),
                      ({"tenant": 7}, ("tenant", "string"))):
        e = expect(strata.InvalidArgument, lambda: strata.Client(peers, **kw), *words)
        assert e.status == strata.ERR_INVALID and isinstance(e, ValueError), repr(e)
    expect(strata.InvalidArgument, lambda: strata.ClientParams(lease_ms=5), "lease_ms",
           "not a field")
    # libstrata's own checks, its message carried: a missing config file, a bad address,
    # a write quorum above the replicas, an unreadable CA.
    expect(strata.IOFailure, lambda: strata.Client(config_file=cfg + ".missing"), "missing")
    expect(strata.InvalidArgument, lambda: strata.Client("not-an-address"), "not-an-address")
    expect(strata.Error, lambda: strata.Client(peers, replicas=1, write_quorum=2), "quorum")
    e = expect(strata.Error, lambda: strata.Client(peers, tls_ca=os.path.join(data, "no.pem")),
               "no.pem")
    assert e.name in ("ST_ERR_IO", "ST_ERR_INVALID"), repr(e)
    e = expect(strata.Error, lambda: strata.Client(etcd="http://127.0.0.1:%d" % free_port(),
                                                   timeout_ms=500))
    assert e.name == "ST_ERR_UNAVAILABLE" and isinstance(e, strata.Unavailable), repr(e)
    return 18


def check_errors(c):
    """A class per status, its name and message, repr; unknown codes."""
    e = expect(strata.NotFound, lambda: c.session_get("no-such-session"))
    assert e.status == strata.ERR_NOT_FOUND and e.name == "ST_ERR_NOT_FOUND", repr(e)
    assert isinstance(e, strata.Error) and isinstance(e, LookupError)
    assert repr(e).startswith("NotFound(status=-3, name='ST_ERR_NOT_FOUND', message="), repr(e)
    assert e.message and "ST_ERR_NOT_FOUND" in str(e), str(e)
    u = strata.error_for(-77, "from a newer libstrata")
    assert type(u) is strata.Error and u.status == -77 and u.name == "ST_ERR_UNKNOWN", repr(u)
    assert type(strata.error_for(-8, "t")) is strata.Timeout
    assert isinstance(strata.error_for(-8, "t"), TimeoutError)
    strata.errors.register("ST_ERR_UNKNOWN", strata.Overloaded)  # as a new code would be
    try:
        o = strata.error_for(-77, "shed")
        assert type(o) is strata.Overloaded and o.status == -77, repr(o)
    finally:
        strata.errors._BY_NAME.pop("ST_ERR_UNKNOWN")
    assert strata.status_name(strata.ERR_PARTIAL) == "ST_ERR_PARTIAL"
    assert strata.status_name(0) == "ST_OK"
    p = strata.PartialWrite("short", 1, 2, 2)
    assert (p.status, p.written, p.replicas) == (-18, 1, 2) and "written=1" in repr(p)
    expect(strata.InvalidArgument, lambda: c.session_get(""), "session id")
    expect(strata.InvalidArgument, lambda: c.lookup(b"x" * 17), "17 bytes")
    return 8


def check_hashing(c):
    """Chains against the Python reference; hex; blocks; images."""
    import strata_hash

    toks = np.arange(c.block_tokens * 5 + 3, dtype=np.uint32)
    seed = bytes(range(16))
    want = strata_hash.chain(seed, [int(t) for t in toks], 64, [])
    got = strata.hash_chain(seed, toks, 64)
    assert got == b"".join(want) if isinstance(want, list) else got == want, (got, want)
    assert strata.hash_chain(seed.hex(), list(map(int, toks)), 64) == got
    assert len(strata.chain_blocks(got)) == 5 and strata.chain_blocks(got)[1] == got[16:32]
    assert strata.from_hex(strata.to_hex(got[:16])) == got[:16]
    expect(strata.InvalidArgument, lambda: strata.hash_chain(seed, toks, 65), "block_tokens 65")
    expect(strata.InvalidArgument, lambda: strata.from_hex("zz"), "hex")
    expect(strata.InvalidArgument, lambda: c.hash(np.arange(8, dtype=np.int64)), "uint32")
    img = np.zeros((3, 4), np.uint8)
    assert strata.hash_image(img) == strata_hash.image_hash(img.tobytes(), 4, 3, 1)
    assert len(c.hash(toks)) == 80
    return 8


def check_async(c, chain):
    """put_async/get_async: the Handle tests, waits, reports per object; it
    holds the buffers (a dropped array lives until release)."""
    rng = np.random.default_rng(3)
    srcs = [rng.integers(0, 256, 4096, dtype=np.uint8) for _ in range(4)]
    h = c.put_async(chain, [strata.PutOp(b, strata.KV, 0, s) for b, s in enumerate(srcs)])
    assert len(h) == 4 and h.op == "put" and "<strata.Handle put of 4 objects" in repr(h)
    res = h.wait()
    assert h.test() and h.done and "done" in repr(h)
    assert [r.status for r in res] == [0] * 4 and all(r.replicas_written == 1 for r in res), res
    assert res[0].ok and res[0].name == "ST_OK" and "PutResult(ST_OK" in repr(res[0])
    h.release()
    h.release()  # idempotent
    dst = np.zeros(4096, np.uint8)
    alive = weakref.ref(dst)
    h = c.get_async(chain, [(1, strata.KV, 0, dst)])
    assert h._ops[0].dst == dst.__array_interface__["data"][0]  # the array's own memory
    del dst
    gc.collect()
    assert alive() is not None, "the handle dropped its buffer"
    (r,) = h.wait(10000)
    assert r == (0, 4096) and r.length == 4096 and np.array_equal(alive(), srcs[1]), r
    h.release()
    gc.collect()
    assert alive() is None, "a released handle still holds its buffer"
    miss = np.zeros(16, np.uint8)
    with c.get_async(chain, [(2, strata.KDA, 0, miss)]) as h:
        (r,) = h.wait()
        assert r.status == strata.ERR_NOT_FOUND and not r.ok and isinstance(r.error(),
                                                                            strata.NotFound)
        assert h.raise_for_status() == [r]
    small = np.zeros(10, np.uint8)
    with c.get_async(chain, [(0, strata.KV, 0, small)]) as h:
        e = expect(strata.Error, h.raise_for_status)
        assert e.status == h.results[0].status != 0, (e, h.results)
    # A client closed with handles open releases them first.
    c2 = strata.Client(c.params.get("nodes"), tenant="acme", model="pkg")
    h = c2.get_async(chain, [(0, strata.KV, 0, np.zeros(4096, np.uint8))])
    c2.close()
    assert h.results[0].status == 0 and not h._h, h
    expect(strata.InvalidArgument, lambda: c.get_async(chain, [(0, strata.KV)]), "objects[0]")
    expect(strata.InvalidArgument, lambda: c.get_async(chain, [(9, strata.KV, 0, bytearray(8))]),
           "block")
    assert isinstance(c.poll(), int)
    return 12


def check_zero_copy(c, chain):
    """Bytes land in the caller's memory: numpy, a bytearray, a memoryview
    slice of a larger buffer, a torch-like tensor; read-only and
    non-contiguous destinations are refused with the object's index."""
    rng = np.random.default_rng(5)
    src = rng.integers(0, 256, 4096, dtype=np.uint8)
    ft_src = FakeTensor(src.view(np.float32))
    assert c.put(chain, [(3, strata.KV, 1, ft_src)]) == [0]
    ba = bytearray(4096)
    assert c.get(chain, [(3, strata.KV, 1, ba)]) == [(0, 4096)] and bytes(ba) == src.tobytes()
    big = bytearray(3 * 4096)
    assert c.get(chain, [(3, strata.KV, 1, memoryview(big)[4096:8192])]) == [(0, 4096)]
    assert bytes(big[4096:8192]) == src.tobytes() and not any(big[:4096])
    mm = mmap.mmap(-1, 4096)
    assert c.get(chain, [(3, strata.KV, 1, mm)]) == [(0, 4096)] and mm[:] == src.tobytes()
    words = array.array("I", src.view(np.uint32).tolist())
    assert c.put(chain, [(3, strata.KV, 1, words)]) == [0]  # the same bytes, from array.array
    t = FakeTensor(np.zeros(1024, np.float32))
    v = strata.buffers.view(t, True)
    assert v.address == t.data_ptr() and v.nbytes == 4096
    assert c.get(chain, [(3, strata.KV, 1, t)]) == [(0, 4096)]
    assert t.arr.tobytes() == src.tobytes()
    b = src.tobytes()
    assert strata.buffers.view(b, False).address == ctypes.cast(ctypes.c_char_p(b),
                                                                ctypes.c_void_p).value
    assert c.put(chain, [(3, strata.KV, 1, b)]) == [0]  # the same bytes again: stored
    ro = np.zeros(4096, np.uint8)
    ro.flags.writeable = False
    expect(strata.InvalidArgument, lambda: c.get(chain, [(3, strata.KV, 1, ro)]),
           "objects[0].dst", "read-only")
    expect(strata.InvalidArgument, lambda: c.get(chain, [(3, strata.KV, 1, b"x" * 4096)]),
           "objects[0].dst", "bytes")
    expect(strata.InvalidArgument, lambda: c.get(chain, [(3, strata.KV, 1,
                                                            np.zeros((64, 128), np.uint8)[:, ::2])]),
           "C-contiguous")
    expect(strata.InvalidArgument, lambda: c.put(chain, [(3, strata.KV, 1, FakeTensor(
        src, device="cuda:0"))]), "cuda:0", "CPU tensor")
    expect(strata.InvalidArgument, lambda: c.put(chain, [(3, strata.KV, 1, FakeTensor(
        src, contiguous=False))]), "not contiguous")
    expect(strata.InvalidArgument, lambda: c.put(chain, [(3, strata.KV, 1, object())]),
           "not a buffer")
    return 14


def check_rows_and_registration(c, chain):
    """Row reads of an object put with row_bytes; registration as a context
    manager (inline: a no-op that still checks its input)."""
    rows = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    assert c.put(chain, [strata.PutOp(4, strata.IDX, 1, rows, row_bytes=64)]) == [0]
    out = np.zeros((3, 64), np.uint8)
    r = c.get_rows(chain, 4, strata.IDX, 1, [5, 0, 63], 64, out)
    assert r == (0, 192) and np.array_equal(out, rows[[5, 0, 63]]), r
    out2 = np.zeros((2, 64), np.uint8)
    r = c.get(chain, [strata.GetOp(4, strata.IDX, 1, out2, np.array([7, 9], np.uint32), 64)])[0]
    assert r.ok and np.array_equal(out2, rows[[7, 9]])
    r = c.get_rows(chain, 4, strata.IDX, 1, [64], 64, np.zeros(64, np.uint8))
    assert r.status == strata.ERR_INVALID, r
    expect(strata.InvalidArgument, lambda: c.get(chain, [strata.GetOp(4, strata.IDX, 1, out, [1])]),
           "row_bytes")
    pool = np.zeros(1 << 16, np.uint8)
    with c.registered(pool, bytearray(4096)) as regs:
        assert len(regs) == 2 and regs[0].address == pool.__array_interface__["data"][0]
        assert c.get(chain, [(4, strata.IDX, 1, pool[:4096])])[0] == (0, 4096)
    assert not regs[0].registered and "closed" in repr(regs[0])
    with c.register(pool) as reg:
        assert reg.nbytes == pool.nbytes and "Registration" in repr(reg)
    expect(strata.InvalidArgument, lambda: c.register(bytearray()), "empty")
    c.deregister(pool)  # inline: ST_OK, as strata.h says
    return 8


def check_lookup_and_more(c, chain):
    """lookup's answer, pin/unpin, delete, score on a chain without IDX."""
    r = c.lookup(chain)
    assert r.matched_blocks == 5 and r.nodes_asked >= 1 and r.nodes_down == 0, r
    assert r.matched_tokens == 5 * c.block_tokens and "Lookup(matched_blocks=5" in repr(r)
    c.pin(chain)
    c.unpin(chain)
    q, w = np.ones((2, 32), np.float32), np.ones(2, np.float32)
    expect(strata.InvalidArgument, lambda: c.score(chain, 0, 5, 0, q, w, 0), "k 0")
    e = expect(strata.Error, lambda: c.score(chain, 0, 5, 7, q, w, 4))
    assert e.name in ("ST_ERR_NOT_FOUND", "ST_ERR_CORRUPT"), repr(e)
    other = c.hash(np.arange(64 * 2, dtype=np.uint32) + 999)
    assert c.put(other, [(0, strata.KV, 0, b"a" * 64), (1, strata.KV, 0, b"b" * 64)]) == [0, 0]
    assert c.lookup(other).matched_blocks == 2
    c.delete(other, kinds=[strata.KV], n_layers=1)
    assert c.lookup(other).matched_blocks == 0
    assert isinstance(c.ring_epoch, int) and c.info()["ring_epoch"] == c.ring_epoch
    return 7


def check_sessions(c, chain):
    s = c.session_open("pkg-chat", ttl_ms=60000)
    assert s.id == "pkg-chat" and s.length == 0 and "Session(id='pkg-chat'" in repr(s), s
    assert c.session_append("pkg-chat", chain) >= 1
    assert c.last_write.written >= 1 and "WriteResult(" in repr(c.last_write)
    s = c.session_get("pkg-chat")
    assert s.length == len(chain) // 16 * c.block_tokens and s.head == chain[-16:], s
    assert c.session_append("pkg-chat", chain, length=s.length + 3) >= 1
    assert c.session_get("pkg-chat").length == s.length + 3
    c.session_close("pkg-chat")
    expect(strata.NotFound, lambda: c.session_get("pkg-chat"))
    expect(strata.NotFound, lambda: c.session_append("pkg-chat", chain))
    return 6


def check_legacy(peers, chain):
    """The first binding's private names, as tests/multihost/mh_workload.py
    uses them (its connect() and get_rows())."""
    sys.path.insert(0, os.path.join(HERE, "..", "multihost"))
    os.environ.setdefault("MH_TOKEN", "unused")
    import mh_workload

    c = mh_workload.connect(peers, "inline", 5000)
    try:
        # A second namespace (tenant mh): write an object with rows, read two back.
        ch = c.hash(list(range(c.block_tokens)))
        data = bytes(range(256)) * 16
        assert c.put_detailed(ch, [(0, strata.KDA, 0, data)]) == [(0, 2)]
        dst = (ctypes.c_char * (2 * mh_workload.ROW_BYTES))()
        st, n = mh_workload.get_rows(c, ch, 0, strata.KDA, [1, 0], dst)
        rb = mh_workload.ROW_BYTES
        assert st == 0 and bytes(dst) == data[rb:2 * rb] + data[:rb], (st, n)
        assert strata._FIELD_NODES == 1 and strata._FIELD_ETCD == 1 << 18
        assert repr(c).startswith("<strata.Client ? tenant=None"), repr(c)
        assert strata._content(chain[:16].hex(), "x") == chain[:16]
    finally:
        c.close()
    return 4


def start(stratad, ports, data):
    peers = ",".join("127.0.0.1:%d" % p for p in ports)
    procs = []
    for i, p in enumerate(ports):
        d = os.path.join(data, str(i))
        os.mkdir(d)
        pr = subprocess.Popen([stratad, "--listen", "127.0.0.1:%d" % p, "--peers", peers,
                               "--cluster-secret", "python-package-test-secret",
                               "--ssd-map-size", "256M", "--data-dir", d],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = pr.stdout.readline().decode()
        assert "stratad ready" in line, line
        procs.append(pr)
    return peers, procs


def main():
    global strata
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--binding", required=True)
    args = ap.parse_args()
    os.environ["STRATA_LIB"] = args.lib
    sys.path.insert(0, args.binding)
    import strata as s

    strata = s
    data = tempfile.mkdtemp(prefix="strata-package-")
    peers, procs = start(args.stratad, [free_port(), free_port()], data)
    checks = 0
    try:
        checks += check_params(peers, data)
        with strata.Client(peers, tenant="acme", model="pkg", replicas=1) as c:
            chain = c.hash(np.arange(c.block_tokens * 5, dtype=np.uint32))
            checks += check_errors(c)
            checks += check_hashing(c)
            checks += check_async(c, chain)
            checks += check_zero_copy(c, chain)
            checks += check_rows_and_registration(c, chain)
            assert c.put(chain, [(0, strata.IDX, 0, b"i" * 64)]) == [0]
            checks += check_lookup_and_more(c, chain)
            checks += check_sessions(c, chain)
        checks += check_legacy(peers, chain)
    finally:
        for pr in procs:
            pr.terminate()
            pr.wait()
    print("%d checks passed" % checks)


if __name__ == "__main__":
    main()
