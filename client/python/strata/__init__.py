"""strata - the Python package of libstrata (ctypes, no compiled extension).

    import numpy as np, strata
    c = strata.Client("127.0.0.1:7700", tenant="acme", model="k3")  # tls_ca="ca.pem": TLS
    chain = c.hash(np.arange(4096, dtype=np.uint32))          # bytes, 16 per block
    r = c.lookup(chain, layers=2)                              # r.matched_blocks, ...
    c.put(chain, [(0, strata.KV, 0, kv_array)])                # numpy arrays or bytes
    out = np.empty(41984, np.uint8)
    c.get(chain, [(0, strata.KV, 0, out)])                     # per-op GetResults
    h = c.get_async(chain, [strata.GetOp(0, strata.KV, 0, out)])  # a Handle
    h.wait()                                                   # or h.test(), h.done
    c.session_open("chat-1"); c.session_append("chat-1", chain)
    c.session_append("chat-1", chain, durable=True)            # on disk on W of R replicas

Modules: params (every st_client_params_t field), errors (a class per
status), buffers (zero-copy views of numpy arrays, torch CPU tensors and
buffers), ops (GetOp, PutOp, results, Handle), client (Client,
Registration), lookup, sessions, hashing. docs/python.md describes it all,
with the lifetime rules of buffers under asynchronous handles.

Images (docs/hashing.md, "Images"): hash_image() names an image by every
pixel and its size; hash(tokens, items=[...]) keys the blocks an image
overlaps by that name and its offset; put_vis()/get_vis() store and read the
image's VIS object under the same 16 bytes.

Errors raise strata.Error subclasses (NotFound, InvalidArgument,
Unavailable, PartialWrite, ...) with .status, .name and libstrata's
.message. libstrata is found through $STRATA_LIB, then next to this
package, then the checkout's build tree, then the loader's path. Thread
safety is libstrata's: a Client may be used from several threads, a Handle
by one at a time.
"""

from . import buffers, errors, hashing, lookup, ops, params, sessions
from ._lib import check, lib
from ._lib import path as library_path
from ._types import CGetOp, CHashItem, CLookup, CPutOp, CSession, CWriteResult
from .client import PUT_DURABLE, SCORE_K_MAX, SESSION_DURABLE, Client, Registration
from .errors import (CODES, Busy, Cancelled, Corrupt, Error, Exhausted, Exists, InternalError,
                     InvalidArgument, IOFailure, NotFound, OutOfMemory, Overloaded,
                     PartialWrite, PermissionDenied, ProtocolError, Timeout, TransportError,
                     Unauthenticated, Unavailable, Unsupported, error_for, status_name)
from .hashing import chain_blocks, from_hex, hash_chain, hash_image, to_hex
from .lookup import Lookup, ScoreResult, ScoreStats
from .ops import GetOp, GetResult, Handle, Kind, PutOp, PutResult
from .params import FIELDS, ClientParams
from .sessions import Session, SessionInfo, WriteResult

__version__ = "0.1.0"

KV, IDX, KDA, SESSION, VIS = Kind.KV, Kind.IDX, Kind.KDA, Kind.SESSION, Kind.VIS
OK = 0
# ERR_INVALID = -1, ERR_NOT_FOUND = -3, ... ERR_OVERLOADED = -19: every st_status_t.
for _n, _v in CODES.items():
    globals()["ERR_" + _n[len("ST_ERR_"):]] = _v

# The first binding's private names, which tests/multihost/mh_workload.py and
# bench/netns_stream.py still use: kept as aliases.
_lib = lib
_check = check
_content = hashing.content
_Params = params.CParams
_GetOp, _PutOp, _Lookup, _Session, _WriteResult, _HashItem = (CGetOp, CPutOp, CLookup, CSession,
                                                               CWriteResult, CHashItem)
for _f in FIELDS:
    globals()["_FIELD_" + _f.flag] = 1 << _f.bit
del _n, _v, _f

__all__ = [
    "Busy", "Cancelled", "Client", "ClientParams", "Corrupt", "Error", "Exhausted", "Exists",
    "FIELDS", "GetOp", "GetResult", "Handle", "IOFailure", "InternalError", "InvalidArgument",
    "Kind", "Lookup", "NotFound", "OutOfMemory", "Overloaded", "PartialWrite",
    "PermissionDenied", "ProtocolError", "PutOp", "PutResult", "Registration", "ScoreResult",
    "ScoreStats", "Session", "SessionInfo", "Timeout", "TransportError", "Unauthenticated",
    "Unavailable", "Unsupported", "WriteResult", "KV", "IDX", "KDA", "SESSION", "VIS",
    "PUT_DURABLE", "SESSION_DURABLE", "SCORE_K_MAX", "OK", "chain_blocks", "error_for",
    "from_hex", "hash_chain", "hash_image", "library_path", "status_name", "to_hex", "buffers",
    "errors", "hashing", "lookup", "ops", "params", "sessions",
]
