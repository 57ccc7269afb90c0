"""strata - a Python binding of libstrata (ctypes, no compiled extension).

    import numpy as np, strata
    c = strata.Client("127.0.0.1:7700", tenant="acme", model="k3")  # tls_ca="ca.pem": TLS
    chain = c.hash(np.arange(4096, dtype=np.uint32))          # bytes, 16 per block
    r = c.lookup(chain, layers=2)                              # r.matched_blocks, ...
    c.put(chain, [(0, strata.KV, 0, kv_array)])                # numpy arrays or bytes
    out = np.empty(41984, np.uint8)
    c.get(chain, [(0, strata.KV, 0, out)])                     # per-op statuses
    c.session_open("chat-1"); c.session_append("chat-1", chain)
    c.session_append("chat-1", chain, durable=True)            # on disk on W of R replicas

Errors raise strata.Error with the library's message and status code; a
durable write that reached fewer than write_quorum replicas raises
strata.PartialWrite (.written, .replicas: it is stored, with a weaker
guarantee than asked), and put() reports it per object (ERR_PARTIAL). The
library is found through $STRATA_LIB, then next to this file, then the
loader's path (libstrata.so.0). Thread safety is libstrata's: a Client may
be used from several threads.
"""

import ctypes
import ctypes.util
import os

KV, IDX, KDA = 0, 1, 2

_FIELD_NODES = 1 << 0
_FIELD_CONFIG_FILE = 1 << 1
_FIELD_TENANT = 1 << 2
_FIELD_MODEL = 1 << 3
_FIELD_TOKEN = 1 << 4
_FIELD_REPLICAS = 1 << 5
_FIELD_TIMEOUT = 1 << 7
_FIELD_WRITE_QUORUM = 1 << 14
_FIELD_TLS_CA = 1 << 15
_FIELD_TLS_CERT = 1 << 16
_FIELD_TLS_KEY = 1 << 17

ERR_NOT_FOUND = -3
ERR_UNSUPPORTED = -14
ERR_PARTIAL = -18  # written to fewer replicas than write_quorum

PUT_DURABLE = 1
SESSION_DURABLE = 1


class Error(Exception):
    """A libstrata call failed: .status is the st_status_t code."""

    def __init__(self, status, message):
        super().__init__("%s (status %d)" % (message, status))
        self.status = status


class PartialWrite(Error):
    """A durable write reached fewer replicas than write_quorum: .written of
    .replicas committed it (it is stored and readable, but survives fewer
    failures than asked)."""

    def __init__(self, message, written, replicas):
        super().__init__(ERR_PARTIAL, message)
        self.written = written
        self.replicas = replicas


class _Params(ctypes.Structure):
    _fields_ = [("field_mask", ctypes.c_uint64), ("nodes", ctypes.c_char_p),
                ("config_file", ctypes.c_char_p), ("tenant", ctypes.c_char_p),
                ("model", ctypes.c_char_p), ("token", ctypes.c_char_p),
                ("replicas", ctypes.c_uint32), ("vnodes", ctypes.c_uint32),
                ("timeout_ms", ctypes.c_uint32), ("transport", ctypes.c_char_p),
                ("health_interval_ms", ctypes.c_uint32), ("verify_reads", ctypes.c_char_p),
                ("cache_locations", ctypes.c_char_p), ("transport_calls", ctypes.c_int),
                ("copy_threads", ctypes.c_uint32), ("write_quorum", ctypes.c_uint32),
                ("tls_ca", ctypes.c_char_p), ("tls_cert", ctypes.c_char_p),
                ("tls_key", ctypes.c_char_p)]


class _WriteResult(ctypes.Structure):
    _fields_ = [("replicas", ctypes.c_uint32), ("quorum", ctypes.c_uint32),
                ("written", ctypes.c_uint32)]


class _Lookup(ctypes.Structure):
    _fields_ = [("matched_blocks", ctypes.c_uint64), ("resumable_blocks", ctypes.c_uint64),
                ("nodes_asked", ctypes.c_uint32), ("nodes_down", ctypes.c_uint32)]


class _GetOp(ctypes.Structure):
    _fields_ = [("block", ctypes.c_uint64), ("kind", ctypes.c_uint8), ("layer", ctypes.c_uint16),
                ("dst", ctypes.c_void_p), ("dst_len", ctypes.c_size_t),
                ("row_bytes", ctypes.c_uint32), ("rows", ctypes.POINTER(ctypes.c_uint32)),
                ("n_rows", ctypes.c_uint32), ("status", ctypes.c_int), ("length", ctypes.c_size_t)]


class _PutOp(ctypes.Structure):
    _fields_ = [("block", ctypes.c_uint64), ("kind", ctypes.c_uint8), ("layer", ctypes.c_uint16),
                ("src", ctypes.c_void_p), ("len", ctypes.c_size_t), ("status", ctypes.c_int),
                ("row_bytes", ctypes.c_uint32)]


class _Session(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char * 64), ("head", ctypes.c_uint8 * 16),
                ("length", ctypes.c_uint64), ("created_ms", ctypes.c_uint64),
                ("updated_ms", ctypes.c_uint64), ("ttl_ms", ctypes.c_uint64)]


def _load():
    candidates = []
    if os.environ.get("STRATA_LIB"):
        candidates.append(os.environ["STRATA_LIB"])
    here = os.path.dirname(os.path.abspath(__file__))
    candidates += [os.path.join(here, "libstrata.so"), "libstrata.so.0",
                   ctypes.util.find_library("strata") or "libstrata.so"]
    last = None
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            last = e
    raise OSError("cannot load libstrata (set STRATA_LIB): %s" % last)


_lib = _load()
_vp, _sz, _u32, _u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64
_lib.st_client_connect.argtypes = [ctypes.POINTER(_Params), ctypes.POINTER(_vp)]
_lib.st_client_close.argtypes = [_vp]
_lib.st_client_close.restype = None
_lib.st_client_last_error.restype = ctypes.c_char_p
_lib.st_strerror.argtypes = [ctypes.c_int]
_lib.st_strerror.restype = ctypes.c_char_p
_lib.st_client_block_tokens.argtypes = [_vp]
_lib.st_client_block_tokens.restype = _u32
_lib.st_client_hash.argtypes = [_vp, _vp, _sz, _vp, _sz, _vp, _sz, ctypes.POINTER(_sz)]
_lib.st_client_lookup.argtypes = [_vp, _vp, _sz, _u32, ctypes.POINTER(_Lookup)]
_lib.st_client_get.argtypes = [_vp, _vp, _sz, ctypes.POINTER(_GetOp), _sz, ctypes.POINTER(_vp)]
_lib.st_client_put.argtypes = [_vp, _vp, _sz, ctypes.POINTER(_PutOp), _sz, ctypes.c_uint,
                               ctypes.POINTER(_vp)]
_lib.st_handle_wait.argtypes = [_vp, ctypes.c_int]
_lib.st_handle_release.argtypes = [_vp]
_lib.st_handle_release.restype = None
_lib.st_session_open.argtypes = [_vp, ctypes.c_char_p, _u64, ctypes.POINTER(_Session)]
_lib.st_session_append.argtypes = [_vp, ctypes.c_char_p, _vp, _u64]
_lib.st_session_get.argtypes = [_vp, ctypes.c_char_p, ctypes.POINTER(_Session)]
_lib.st_session_close.argtypes = [_vp, ctypes.c_char_p]
_lib.st_session_open_ex.argtypes = [_vp, ctypes.c_char_p, _u64, ctypes.c_uint,
                                    ctypes.POINTER(_Session), ctypes.POINTER(_WriteResult)]
_lib.st_session_append_ex.argtypes = [_vp, ctypes.c_char_p, _vp, _u64, ctypes.c_uint,
                                      ctypes.POINTER(_WriteResult)]
_lib.st_handle_replicas_written.argtypes = [_vp, _sz]
_lib.st_handle_replicas_written.restype = _u32
_lib.st_client_write_quorum.argtypes = [_vp]
_lib.st_client_write_quorum.restype = _u32
_lib.st_client_replicas.argtypes = [_vp]
_lib.st_client_replicas.restype = _u32


def _check(status, result=None):
    if status == ERR_PARTIAL and result is not None:
        raise PartialWrite((_lib.st_client_last_error() or b"").decode(), result.written,
                           result.replicas)
    if status != 0:
        raise Error(status, (_lib.st_client_last_error() or b"").decode() or
                    _lib.st_strerror(status).decode())


def _buffer(obj, writable):
    """(address, length, keepalive) of a numpy array, bytes, bytearray or memoryview."""
    if hasattr(obj, "__array_interface__"):
        if not obj.flags["C_CONTIGUOUS"]:
            raise ValueError("arrays must be C-contiguous")
        if writable and not obj.flags["WRITEABLE"]:
            raise ValueError("the destination array is read-only")
        return obj.__array_interface__["data"][0], obj.nbytes, obj
    if isinstance(obj, bytes):
        if writable:
            raise ValueError("bytes are read-only: pass a bytearray or a numpy array")
        buf = ctypes.create_string_buffer(obj, len(obj))
        return ctypes.addressof(buf), len(obj), buf
    view = memoryview(obj)
    if writable and view.readonly:
        raise ValueError("the destination is read-only")
    holder = (ctypes.c_char * view.nbytes).from_buffer(view) if not view.readonly else \
        ctypes.create_string_buffer(view.tobytes(), view.nbytes)
    return ctypes.addressof(holder), view.nbytes, (holder, view)


class Session:
    """A session record: id, length in tokens, head hash (bytes), times."""

    def __init__(self, s):
        self.id = s.id.decode()
        self.length = s.length
        self.head = bytes(s.head)
        self.created_ms, self.updated_ms, self.ttl_ms = s.created_ms, s.updated_ms, s.ttl_ms


class Lookup:
    def __init__(self, r, block_tokens):
        self.matched_blocks = r.matched_blocks
        self.resumable_blocks = r.resumable_blocks
        self.matched_tokens = r.matched_blocks * block_tokens
        self.resumable_tokens = r.resumable_blocks * block_tokens
        self.nodes_down = r.nodes_down


class Client:
    """A connection to a strata cluster (see st_client_connect)."""

    def __init__(self, nodes=None, tenant=None, model=None, token=None, replicas=None,
                 timeout_ms=None, config_file=None, write_quorum=None, tls_ca=None,
                 tls_cert=None, tls_key=None):
        """write_quorum: W, the replicas a durable write must reach (default: all
        replicas). tls_ca: PEM file of the CA of the daemons' certificates (gRPC over
        TLS); tls_cert, tls_key: a client certificate for daemons that ask for one."""
        p = _Params()
        keep = []

        def s(v):
            b = v.encode()
            keep.append(b)
            return b
        if nodes:
            p.field_mask |= _FIELD_NODES
            p.nodes = s(nodes)
        if config_file:
            p.field_mask |= _FIELD_CONFIG_FILE
            p.config_file = s(config_file)
        if tenant:
            p.field_mask |= _FIELD_TENANT
            p.tenant = s(tenant)
        if model:
            p.field_mask |= _FIELD_MODEL
            p.model = s(model)
        if token:
            p.field_mask |= _FIELD_TOKEN
            p.token = s(token)
        if replicas:
            p.field_mask |= _FIELD_REPLICAS
            p.replicas = replicas
        if timeout_ms:
            p.field_mask |= _FIELD_TIMEOUT
            p.timeout_ms = timeout_ms
        if write_quorum is not None:
            p.field_mask |= _FIELD_WRITE_QUORUM
            p.write_quorum = write_quorum
        if tls_ca:
            p.field_mask |= _FIELD_TLS_CA
            p.tls_ca = s(tls_ca)
        if tls_cert:
            p.field_mask |= _FIELD_TLS_CERT
            p.tls_cert = s(tls_cert)
        if tls_key:
            p.field_mask |= _FIELD_TLS_KEY
            p.tls_key = s(tls_key)
        self._c = _vp()
        _check(_lib.st_client_connect(ctypes.byref(p), ctypes.byref(self._c)))
        self.block_tokens = _lib.st_client_block_tokens(self._c)
        self.replicas = _lib.st_client_replicas(self._c)
        self.write_quorum = _lib.st_client_write_quorum(self._c)

    def close(self):
        if self._c:
            _lib.st_client_close(self._c)
            self._c = _vp()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def hash(self, tokens):
        """The chain of a token sequence (numpy uint32 array or a list of ints):
        bytes, 16 per full block."""
        arr = (ctypes.c_uint32 * len(tokens))(*tokens) if not hasattr(
            tokens, "__array_interface__") else None
        if arr is not None:
            addr, n = ctypes.addressof(arr), len(tokens)
        else:
            if tokens.dtype.str not in ("<u4", "|u4", "=u4") and tokens.dtype.name != "uint32":
                raise ValueError("tokens must be uint32")
            addr, n, _ = _buffer(tokens, False)
            n //= 4
        cap = n // 16 + 1
        out = ctypes.create_string_buffer(cap * 16)
        nb = _sz()
        _check(_lib.st_client_hash(self._c, addr, n, None, 0, out, cap, ctypes.byref(nb)))
        return out.raw[:nb.value * 16]

    def lookup(self, chain, layers=0):
        """How much of chain (bytes from hash()) is cached: a Lookup."""
        r = _Lookup()
        buf = ctypes.create_string_buffer(chain, len(chain))
        _check(_lib.st_client_lookup(self._c, buf, len(chain) // 16, layers, ctypes.byref(r)))
        return Lookup(r, self.block_tokens)

    def put(self, chain, objects, durable=False):
        """Writes objects [(block, kind, layer, data)]; returns the per-object
        statuses (0: stored; with durable, a KDA object is 0 only when
        write_quorum replicas committed it to disk, ERR_PARTIAL when fewer did)."""
        return [st for st, _ in self.put_detailed(chain, objects, durable)]

    def put_detailed(self, chain, objects, durable=False):
        """put(), returning [(status, replicas that stored the object)]."""
        cbuf = ctypes.create_string_buffer(chain, len(chain))
        ops = (_PutOp * len(objects))()
        keep = []
        for i, (block, kind, layer, data) in enumerate(objects):
            addr, n, k = _buffer(data, False)
            keep.append(k)
            ops[i] = _PutOp(block, kind, layer, addr, n, 0, 0)
        h = _vp()
        _check(_lib.st_client_put(self._c, cbuf, len(chain) // 16, ops, len(objects),
                                  1 if durable else 0, ctypes.byref(h)))
        _lib.st_handle_wait(h, -1)
        written = [_lib.st_handle_replicas_written(h, i) for i in range(len(objects))]
        _lib.st_handle_release(h)
        return [(op.status, w) for op, w in zip(ops, written)]

    def get(self, chain, objects):
        """Reads objects [(block, kind, layer, dst)] into writable numpy arrays
        or bytearrays; returns [(status, length)] (status -3: not cached)."""
        cbuf = ctypes.create_string_buffer(chain, len(chain))
        ops = (_GetOp * len(objects))()
        keep = []
        for i, (block, kind, layer, dst) in enumerate(objects):
            addr, n, k = _buffer(dst, True)
            keep.append(k)
            ops[i] = _GetOp(block, kind, layer, addr, n, 0, None, 0, 0, 0)
        h = _vp()
        _check(_lib.st_client_get(self._c, cbuf, len(chain) // 16, ops, len(objects),
                                  ctypes.byref(h)))
        _lib.st_handle_wait(h, -1)
        _lib.st_handle_release(h)
        return [(op.status, op.length) for op in ops]

    def session_open(self, sid, ttl_ms=0, durable=False):
        """Opens session sid; durable: on disk on write_quorum replicas, or
        PartialWrite."""
        s = _Session()
        r = _WriteResult()
        _check(_lib.st_session_open_ex(self._c, sid.encode(), ttl_ms,
                                       SESSION_DURABLE if durable else 0, ctypes.byref(s),
                                       ctypes.byref(r)), r)
        return Session(s)

    def session_append(self, sid, chain, durable=False):
        """Records that session sid now covers the whole chain; returns how many
        replicas took it. durable: on disk on write_quorum replicas, or
        PartialWrite."""
        if len(chain) < 16:
            raise ValueError("the chain has no full block")
        head = ctypes.create_string_buffer(chain[-16:], 16)
        r = _WriteResult()
        _check(_lib.st_session_append_ex(self._c, sid.encode(), head,
                                         len(chain) // 16 * self.block_tokens,
                                         SESSION_DURABLE if durable else 0, ctypes.byref(r)), r)
        return r.written

    def session_get(self, sid):
        s = _Session()
        _check(_lib.st_session_get(self._c, sid.encode(), ctypes.byref(s)))
        return Session(s)

    def session_close(self, sid):
        _check(_lib.st_session_close(self._c, sid.encode()))
