"""Client: a connection to a strata cluster (st_client_t)."""

import contextlib
import ctypes
import weakref
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from . import buffers, hashing
from ._lib import check, lib
from ._types import CLookup, CScoreQuery, CScoreStats, CSession, CWriteResult
from .errors import InvalidArgument
from .lookup import Lookup, ScoreResult, ScoreStats
from .ops import GetOp, GetResult, Handle, Kind, c_ops
from .params import ClientParams
from .sessions import Session, WriteResult

PUT_DURABLE = 1
SESSION_DURABLE = 1
SCORE_K_MAX = 2048


def _chain(chain: Any) -> Tuple[Any, int]:
    """A ctypes copy of a chain (bytes, 16 per block) and its block count."""
    chain = bytes(chain)
    if len(chain) % 16:
        raise InvalidArgument("chain: %d bytes is not a whole number of 16-byte hashes" %
                              len(chain))
    return ctypes.create_string_buffer(chain, len(chain) or 1), len(chain) // 16


class Client:
    """A connection to a strata cluster (st_client_connect). Every field of
    st_client_params_t is a keyword (params.FIELDS; None leaves it at
    libstrata's default); `params` gives them as a ClientParams instead.
    Usable from several threads at once; close() (or `with`) ends it."""

    def __init__(self, nodes: Optional[str] = None, tenant: Optional[str] = None,
                 model: Optional[str] = None, token: Optional[str] = None,
                 replicas: Optional[int] = None, timeout_ms: Optional[int] = None,
                 config_file: Optional[str] = None, write_quorum: Optional[int] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, etcd: Optional[str] = None,
                 etcd_prefix: Optional[str] = None, *, vnodes: Optional[int] = None,
                 transport: Optional[str] = None, health_interval_ms: Optional[int] = None,
                 verify_reads: Optional[str] = None, cache_locations: Optional[str] = None,
                 transport_calls: Optional[int] = None, copy_threads: Optional[int] = None,
                 params: Optional[ClientParams] = None) -> None:
        given = dict(nodes=nodes, tenant=tenant, model=model, token=token, replicas=replicas,
                     timeout_ms=timeout_ms, config_file=config_file, write_quorum=write_quorum,
                     tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, etcd=etcd,
                     etcd_prefix=etcd_prefix, vnodes=vnodes, transport=transport,
                     health_interval_ms=health_interval_ms, verify_reads=verify_reads,
                     cache_locations=cache_locations, transport_calls=transport_calls,
                     copy_threads=copy_threads)
        if params is not None:
            merged = dict(params.items())
            merged.update({k: v for k, v in given.items() if v is not None})
            given = merged
        self.params = ClientParams(**given)
        self._c = ctypes.c_void_p()
        p, keep = self.params.to_c()
        check(lib.st_client_connect(ctypes.byref(p), ctypes.byref(self._c)))
        del keep
        self.block_tokens: int = lib.st_client_block_tokens(self._c)
        self.segment_blocks: int = lib.st_client_segment_blocks(self._c)
        self.replicas: int = lib.st_client_replicas(self._c)
        self.write_quorum: int = lib.st_client_write_quorum(self._c)

    @classmethod
    def from_config(cls, path: str, **fields: Any) -> "Client":
        """Connects with an INI config file (nodes = ..., and the other keys;
        docs/configuration.md); fields given here are set as well."""
        return cls(config_file=path, **fields)

    # --- lifetime --------------------------------------------------------

    def _handles(self) -> "weakref.WeakSet[Handle]":
        hs = self.__dict__.get("_live")
        if hs is None:
            hs = self.__dict__["_live"] = weakref.WeakSet()
        return hs

    def _ptr(self) -> ctypes.c_void_p:
        if not self._c:
            raise InvalidArgument("the client is closed")
        return self._c

    def close(self) -> None:
        """Releases every handle still open (waiting for it), then closes
        the connection (st_client_close). Idempotent."""
        if getattr(self, "_c", None):
            for h in list(self._handles()):
                h.release()
            lib.st_client_close(self._c)
            self._c = ctypes.c_void_p()

    @property
    def closed(self) -> bool:
        return not getattr(self, "_c", None)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        if self.closed:
            return "<strata.Client closed>"
        p = getattr(self, "params", None) or ClientParams()
        where = ("etcd=" + p.get("etcd")) if p.get("etcd") else p.get("nodes")
        return "<strata.Client %s tenant=%s model=%s block_tokens=%d replicas=%d ring_epoch=%d>" % (
            where or "?", p.get("tenant"), p.get("model"), getattr(self, "block_tokens", 0),
            getattr(self, "replicas", 0), self.ring_epoch)

    # --- what the client knows ---------------------------------------------

    @property
    def ring_epoch(self) -> int:
        """The ring epoch the client places by (st_client_ring_epoch)."""
        return lib.st_client_ring_epoch(self._ptr())

    def info(self) -> dict:
        """What libstrata says of this client: block_tokens, segment_blocks,
        replicas (R), write_quorum (W), ring_epoch."""
        c = self._ptr()
        return {"block_tokens": lib.st_client_block_tokens(c),
                "segment_blocks": lib.st_client_segment_blocks(c),
                "replicas": lib.st_client_replicas(c),
                "write_quorum": lib.st_client_write_quorum(c),
                "ring_epoch": lib.st_client_ring_epoch(c)}

    # --- hashing and lookups -----------------------------------------------

    def hash(self, tokens: Any, items: Optional[Sequence[hashing.Item]] = None) -> bytes:
        """The chain of a token sequence (numpy uint32 array or a list of
        ints): bytes, 16 per full block, under the namespace's seed. items:
        non-text items (images) as [(content hash, start, n_tokens)], sorted
        by start, the hash 16 bytes (hash_image()) or 32 hex digits; every
        block an item overlaps is keyed by its hash and offset."""
        t = buffers.u32_array(tokens, "tokens")
        n = t.nbytes // 4
        cap = n // max(self.block_tokens, 16) + 1
        out = ctypes.create_string_buffer(cap * 16)
        nb = ctypes.c_size_t()
        arr, n_items = hashing.items_array(items)
        check(lib.st_client_hash(self._ptr(), t.address, n, arr, n_items, out, cap,
                                 ctypes.byref(nb)))
        return out.raw[:nb.value * 16]

    def lookup(self, chain: bytes, layers: int = 0) -> Lookup:
        """How much of chain is cached (st_client_lookup): a Lookup. layers:
        the DSA layers that must all hold KV and IDX for a block to count
        (0: any object of the block counts)."""
        r = CLookup()
        buf, n = _chain(chain)
        check(lib.st_client_lookup(self._ptr(), buf, n, layers, ctypes.byref(r)))
        return Lookup(r, self.block_tokens)

    def score(self, chain: bytes, first: int, n: int, layer: int, q: Any, w: Any,
              k: int) -> ScoreResult:
        """Near-data scoring (st_client_score): the global top-k rows of blocks
        [first, first + n) by the IDX objects of DSA layer `layer`. q: one
        token's indexer query, float32 heads x dim (a 2-D numpy array, or a
        flat buffer with w giving heads); w: float32 head weights."""
        if not 1 <= k <= SCORE_K_MAX:
            raise InvalidArgument("score: k %d is out of range 1..%d" % (k, SCORE_K_MAX))
        qv, wv = buffers.view(q, False, "q"), buffers.view(w, False, "w")
        heads = wv.nbytes // 4
        if heads == 0 or qv.nbytes % (4 * heads):
            raise InvalidArgument("score: q has %d bytes, not heads (%d, from w) x dim float32" %
                                  (qv.nbytes, heads))
        query = CScoreQuery(layer, heads, qv.nbytes // 4 // heads, qv.address, wv.address, k)
        pos = (ctypes.c_uint64 * k)()
        sc = (ctypes.c_float * k)()
        got = ctypes.c_size_t()
        stats = CScoreStats()
        buf, nb = _chain(chain)
        check(lib.st_client_score(self._ptr(), buf, first, n, ctypes.byref(query), pos, sc,
                                  ctypes.byref(got), ctypes.byref(stats)))
        return ScoreResult(list(pos[:got.value]), list(sc[:got.value]), ScoreStats(stats))

    # --- reads and writes ----------------------------------------------------

    def get_async(self, chain: bytes, objects: Sequence[Any]) -> Handle:
        """Starts reading objects (GetOp or (block, kind, layer, dst)) of
        chain into their dst buffers, in place; returns the Handle. The
        buffers are held by the handle until it is released."""
        buf, n = _chain(chain)
        ops, keep = c_ops("get", objects)
        h = ctypes.c_void_p()
        check(lib.st_client_get(self._ptr(), buf, n, ops, len(objects), ctypes.byref(h)))
        handle = Handle(self, "get", h, ops, keep + [buf])
        self._handles().add(handle)
        return handle

    def put_async(self, chain: bytes, objects: Sequence[Any], durable: bool = False) -> Handle:
        """Starts writing objects (PutOp or (block, kind, layer, src)) of chain
        from their buffers, in place; returns the Handle. durable: a KDA
        object completes only once write_quorum replicas have it on disk."""
        buf, n = _chain(chain)
        ops, keep = c_ops("put", objects)
        h = ctypes.c_void_p()
        check(lib.st_client_put(self._ptr(), buf, n, ops, len(objects),
                                PUT_DURABLE if durable else 0, ctypes.byref(h)))
        handle = Handle(self, "put", h, ops, keep + [buf])
        self._handles().add(handle)
        return handle

    def get(self, chain: bytes, objects: Sequence[Any]) -> List[GetResult]:
        """Reads objects and waits: [GetResult(status, length)] in order
        (status ERR_NOT_FOUND: not cached)."""
        with self.get_async(chain, objects) as h:
            return h.wait()

    def put(self, chain: bytes, objects: Sequence[Any], durable: bool = False) -> List[int]:
        """Writes objects and waits; returns the per-object statuses (0:
        stored; with durable, a KDA object is 0 only when write_quorum
        replicas committed it to disk, ERR_PARTIAL when fewer did)."""
        return [r.status for r in self.put_detailed(chain, objects, durable)]

    def put_detailed(self, chain: bytes, objects: Sequence[Any],
                     durable: bool = False) -> list:
        """put(), returning [PutResult(status, replicas_written)]."""
        with self.put_async(chain, objects, durable) as h:
            return h.wait()

    def get_rows(self, chain: bytes, block: int, kind: int, layer: int, rows: Any,
                 row_bytes: int, dst: Any) -> GetResult:
        """Reads the rows (indices, numpy uint32 or ints) of one object, each
        row_bytes long, into dst in that order (a row read)."""
        return self.get(chain, [GetOp(block, kind, layer, dst, rows, row_bytes)])[0]

    def put_vis(self, image: hashing.HashLike, data: Any) -> int:
        """Stores the VIS object (an image's projected embeddings) of image
        (its hash_image() 16 bytes or 32 hex digits); returns its status."""
        return self.put(hashing.content(image, "image"), [(0, Kind.VIS, 0, data)])[0]

    def get_vis(self, image: hashing.HashLike, dst: Any) -> GetResult:
        """Reads image's VIS object into dst: GetResult (ERR_NOT_FOUND on a miss)."""
        return self.get(hashing.content(image, "image"), [(0, Kind.VIS, 0, dst)])[0]

    def poll(self) -> int:
        """Drives transfers (st_client_poll): handles completed since the last call."""
        return lib.st_client_poll(self._ptr())

    def pin(self, chain: bytes, n_blocks: Optional[int] = None) -> None:
        """Pins blocks [0, n_blocks) of chain (all by default) on their owners."""
        buf, n = _chain(chain)
        check(lib.st_client_pin(self._ptr(), buf, n if n_blocks is None else n_blocks))

    def unpin(self, chain: bytes, n_blocks: Optional[int] = None) -> None:
        buf, n = _chain(chain)
        check(lib.st_client_unpin(self._ptr(), buf, n if n_blocks is None else n_blocks))

    def delete(self, chain: bytes, kinds: Sequence[int] = (Kind.KV, Kind.IDX, Kind.KDA),
               n_layers: int = 1, n_blocks: Optional[int] = None) -> None:
        """Deletes the objects of kinds and layers [0, n_layers) of blocks
        [0, n_blocks) of chain, replicas included (missing ones are fine)."""
        mask = 0
        for k in kinds:
            mask |= 1 << int(k)
        buf, n = _chain(chain)
        check(lib.st_client_delete(self._ptr(), buf, n if n_blocks is None else n_blocks, mask,
                                   n_layers))

    # --- registration --------------------------------------------------------

    def register(self, buf: Any) -> "Registration":
        """Registers buf's memory with the transport once (st_client_register),
        so gets into it and puts from it skip per-batch registration; a no-op
        without a transport. Returns a Registration (a context manager that
        deregisters); buf is held until then."""
        v = buffers.view(buf, False, "register")
        if v.nbytes == 0:
            raise InvalidArgument("register: the buffer is empty")
        check(lib.st_client_register(self._ptr(), v.address, v.nbytes))
        return Registration(self, v)

    def deregister(self, buf: Any) -> None:
        """Deregisters what register(buf) registered (no operation on it may
        be in flight)."""
        if isinstance(buf, Registration):
            buf.close()
            return
        check(lib.st_client_deregister(self._ptr(), buffers.view(buf, False, "deregister").address))

    @contextlib.contextmanager
    def registered(self, *bufs: Any) -> Iterator[List["Registration"]]:
        """with client.registered(a, b): ... registers the buffers for the block."""
        regs: List[Registration] = []
        try:
            for b in bufs:
                regs.append(self.register(b))
            yield regs
        finally:
            for r in reversed(regs):
                r.close()

    # --- sessions --------------------------------------------------------------

    def session_open(self, sid: str, ttl_ms: int = 0, durable: bool = False) -> Session:
        """Opens (creates or reopens) session sid; durable: on disk on
        write_quorum replicas, or PartialWrite."""
        s, r = CSession(), CWriteResult()
        check(lib.st_session_open_ex(self._ptr(), _sid(sid), ttl_ms,
                                     SESSION_DURABLE if durable else 0, ctypes.byref(s),
                                     ctypes.byref(r)), r)
        self.last_write = WriteResult(r)
        return Session(s)

    def session_append(self, sid: str, chain: bytes, durable: bool = False,
                       length: Optional[int] = None) -> int:
        """Records that session sid now ends in chain's last block, with
        length tokens (default: the chain's blocks x block_tokens); returns
        how many replicas took it (last_write holds the WriteResult).
        durable: on disk on write_quorum replicas, or PartialWrite."""
        if len(chain) < 16:
            raise InvalidArgument("session_append: the chain has no full block")
        head = ctypes.create_string_buffer(bytes(chain[-16:]), 16)
        r = CWriteResult()
        n = len(chain) // 16 * self.block_tokens if length is None else length
        check(lib.st_session_append_ex(self._ptr(), _sid(sid), head, n,
                                       SESSION_DURABLE if durable else 0, ctypes.byref(r)), r)
        self.last_write = WriteResult(r)
        return r.written

    def session_get(self, sid: str) -> Session:
        """The session record (NotFound if no live replica has it)."""
        s = CSession()
        check(lib.st_session_get(self._ptr(), _sid(sid), ctypes.byref(s)))
        return Session(s)

    def session_close(self, sid: str) -> None:
        """Closes and deletes the session record."""
        check(lib.st_session_close(self._ptr(), _sid(sid)))


def _sid(sid: str) -> bytes:
    b = sid.encode() if isinstance(sid, str) else bytes(sid)
    if not b or len(b) > 63 or b"\0" in b:
        raise InvalidArgument("session id %r: 1 to 63 bytes, no NUL" % (sid,))
    return b


class Registration:
    """A buffer registered with a client's transport; close() (or the end of
    a `with` block) deregisters it. Holds the buffer until then."""

    def __init__(self, client: Client, v: buffers.View) -> None:
        self._client = client
        self._view = v
        self.address = v.address
        self.nbytes = v.nbytes
        self.registered = True

    def close(self) -> None:
        if self.registered and not self._client.closed:
            check(lib.st_client_deregister(self._client._c, self.address))
        self.registered = False

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<strata.Registration 0x%x %d bytes%s>" % (self.address, self.nbytes,
                                                           "" if self.registered else " closed")
