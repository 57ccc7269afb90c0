"""Loading libstrata and declaring the prototypes of strata.h.

The library is found, in this order, at:
  1. $STRATA_LIB (a path to libstrata.so);
  2. next to this package (strata/libstrata.so, strata/libstrata.so.0: a
     wheel or an install that copied it there);
  3. the build tree of the checkout the package sits in
     (<root>/build/<preset>/client/libstrata.so, release first);
  4. the system loader's path (libstrata.so.0, then ctypes.util.find_library).
"""

import ctypes
import ctypes.util
import glob
import os
from typing import List

from ._types import (CGetOp, CHashItem, CLookup, CPutOp, CScoreQuery, CScoreStats, CSession,
                     CWriteResult)
from .params import CParams

_HERE = os.path.dirname(os.path.abspath(__file__))


def candidates() -> List[str]:
    """Where libstrata is looked for, in order (see the module's doc)."""
    out = []
    if os.environ.get("STRATA_LIB"):
        out.append(os.environ["STRATA_LIB"])
    out += [os.path.join(_HERE, "libstrata.so"), os.path.join(_HERE, "libstrata.so.0")]
    root = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))  # client/python/strata
    if os.path.isfile(os.path.join(root, "include", "strata", "strata.h")):
        found = glob.glob(os.path.join(root, "build", "*", "client", "libstrata.so"))
        found.sort(key=lambda p: (os.path.basename(os.path.dirname(os.path.dirname(p))) !=
                                  "release", p))
        out += found
    out += ["libstrata.so.0", ctypes.util.find_library("strata") or "libstrata.so"]
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise OSError("cannot load libstrata (set STRATA_LIB to libstrata.so); tried: %s" %
                  "; ".join(errors or candidates()))


lib = _load()
path = getattr(lib, "_name", "")

_vp, _sz, _u32, _u64, _int = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32,
                              ctypes.c_uint64, ctypes.c_int)
_str, _P = ctypes.c_char_p, ctypes.POINTER

# (function, restype, argtypes): every function of strata.h, status.h and hash.h used here.
_PROTOTYPES = (
    ("st_client_connect", _int, [_P(CParams), _P(_vp)]),
    ("st_client_close", None, [_vp]),
    ("st_client_last_error", _str, []),
    ("st_strerror", _str, [_int]),
    ("st_status_name", _str, [_int]),
    ("st_client_block_tokens", _u32, [_vp]),
    ("st_client_segment_blocks", _u32, [_vp]),
    ("st_client_hash", _int, [_vp, _vp, _sz, _vp, _sz, _vp, _sz, _P(_sz)]),
    ("st_client_lookup", _int, [_vp, _vp, _sz, _u32, _P(CLookup)]),
    ("st_client_score", _int, [_vp, _vp, _sz, _sz, _P(CScoreQuery), _vp, _vp, _P(_sz),
                               _P(CScoreStats)]),
    ("st_client_get", _int, [_vp, _vp, _sz, _P(CGetOp), _sz, _P(_vp)]),
    ("st_client_put", _int, [_vp, _vp, _sz, _P(CPutOp), _sz, ctypes.c_uint, _P(_vp)]),
    ("st_client_register", _int, [_vp, _vp, _sz]),
    ("st_client_deregister", _int, [_vp, _vp]),
    ("st_handle_test", _int, [_vp]),
    ("st_handle_wait", _int, [_vp, _int]),
    ("st_handle_replicas_written", _u32, [_vp, _sz]),
    ("st_handle_release", None, [_vp]),
    ("st_client_poll", _int, [_vp]),
    ("st_client_pin", _int, [_vp, _vp, _sz]),
    ("st_client_unpin", _int, [_vp, _vp, _sz]),
    ("st_client_delete", _int, [_vp, _vp, _sz, ctypes.c_uint, _u32]),
    ("st_session_open", _int, [_vp, _str, _u64, _P(CSession)]),
    ("st_session_append", _int, [_vp, _str, _vp, _u64]),
    ("st_session_open_ex", _int, [_vp, _str, _u64, ctypes.c_uint, _P(CSession),
                                  _P(CWriteResult)]),
    ("st_session_append_ex", _int, [_vp, _str, _vp, _u64, ctypes.c_uint, _P(CWriteResult)]),
    ("st_session_get", _int, [_vp, _str, _P(CSession)]),
    ("st_session_close", _int, [_vp, _str]),
    ("st_client_write_quorum", _u32, [_vp]),
    ("st_client_replicas", _u32, [_vp]),
    ("st_client_ring_epoch", _u64, [_vp]),
    ("st_hash_block", _int, [_vp, _vp, _u32, _vp, _vp, _sz, _vp]),
    ("st_hash_chain", _int, [_vp, _vp, _sz, _u32, _P(CHashItem), _sz, _vp, _sz, _P(_sz)]),
    ("st_hash_image", _int, [_vp, _u32, _u32, _u32, _vp]),
)

for _name, _res, _args in _PROTOTYPES:
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def last_error() -> str:
    """st_client_last_error() of this thread, decoded."""
    return (lib.st_client_last_error() or b"").decode(errors="replace")


def check(status: int, result: "CWriteResult | None" = None) -> None:
    """Raises the exception of a failed status, with this thread's message
    (a PartialWrite with result's counts)."""
    if status == 0:
        return
    from .errors import PartialWrite, error_for

    msg = last_error() or (lib.st_strerror(status) or b"").decode()
    if isinstance(status, int) and status == -18:
        w = result
        raise PartialWrite(msg, w.written if w else 0, w.replicas if w else 0,
                           w.quorum if w else 0)
    raise error_for(status, msg)
