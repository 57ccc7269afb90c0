"""Objects to read and write, their per-object results, and the handle of
an asynchronous batch (st_handle_t).

A batch names objects of one chain by (block index, kind, layer). Each
object is given as a GetOp / PutOp, or as the tuple (block, kind, layer,
buffer) of the first binding. Buffers are used in place (buffers.py): a
get writes into the caller's array, a put reads from it.
"""

import ctypes
import threading
from enum import IntEnum
from typing import Any, List, NamedTuple, Optional, Sequence, Union

from . import buffers
from ._lib import check, lib
from ._types import CGetOp, CPutOp
from .errors import Error, InvalidArgument, error_for, status_name


class Kind(IntEnum):
    """st_kind_t."""

    KV = 0  # latent KV rows of one block, one DSA layer
    IDX = 1  # indexer key rows + block summary, one DSA layer
    KDA = 2  # KDA states of every KDA layer after a block
    SESSION = 3  # a session record
    VIS = 4  # projected vision embeddings of an image


class GetOp(NamedTuple):
    """One object to read: whole, or with rows (row indices, each
    row_bytes long) the selected rows, landing in dst in that order."""

    block: int
    kind: int
    layer: int
    dst: Any
    rows: Optional[Any] = None
    row_bytes: int = 0


class PutOp(NamedTuple):
    """One object to write; row_bytes (KV and IDX, at least 32) lets the
    daemon keep a checksum per row so row reads verify one-sided."""

    block: int
    kind: int
    layer: int
    src: Any
    row_bytes: int = 0


class _Outcome:
    """What GetResult and PutResult share: ok, name and error()."""

    __slots__ = ()
    status: int
    _op = "op"

    @property
    def ok(self) -> bool:
        return self.status == 0

    @property
    def name(self) -> str:
        return status_name(self.status)

    def error(self) -> Optional[Error]:
        """The exception of a failed status (None for 0)."""
        return error_for(self.status, "%s: %s" % (self._op, self.name)) if self.status else None


class GetResult(_Outcome, NamedTuple("GetResult", [("status", int), ("length", int)])):
    """A read's outcome: status 0, or ERR_NOT_FOUND (a miss), ...; length:
    bytes written to dst. Compares equal to the tuple (status, length)."""

    __slots__ = ()
    _op = "get"

    def __repr__(self) -> str:
        return "GetResult(%s, length=%d)" % (self.name, self.length)


class PutResult(_Outcome, NamedTuple("PutResult", [("status", int),
                                                   ("replicas_written", int)])):
    """A write's outcome: status (0: stored, or already there with the same
    bytes; ERR_PARTIAL: a durable KDA object on fewer than write_quorum
    replicas) and how many replicas stored it."""

    __slots__ = ()
    _op = "put"

    def __repr__(self) -> str:
        return "PutResult(%s, replicas_written=%d)" % (self.name, self.replicas_written)


ObjectSpec = Union[GetOp, PutOp, Sequence[Any]]


def _spec(obj: Any, i: int, cls: Any) -> Any:
    if isinstance(obj, cls):
        return obj
    try:
        return cls(*obj)
    except TypeError:
        raise InvalidArgument("objects[%d]: expected %s(block, kind, layer, buffer, ...) or a "
                              "tuple of those, not %r" % (i, cls.__name__, obj)) from None


def _fill_get(op: CGetOp, g: GetOp, v: buffers.View, i: int, keep: List[Any]) -> None:
    op.dst, op.dst_len = v.address, v.nbytes
    if g.rows is not None:
        if not g.row_bytes:
            raise InvalidArgument("objects[%d]: rows need row_bytes" % i)
        r = buffers.u32_array(g.rows, "objects[%d].rows" % i)
        keep.append(r.keep)
        op.rows = ctypes.cast(r.address, ctypes.POINTER(ctypes.c_uint32))
        op.n_rows, op.row_bytes = r.nbytes // 4, g.row_bytes


def _fill_put(op: CPutOp, p: PutOp, v: buffers.View, i: int, keep: List[Any]) -> None:
    op.src, op.len, op.row_bytes = v.address, v.nbytes, p.row_bytes


# get: (spec class, C op, the buffer's field, writable, fill); put likewise.
_BATCH = {"get": (GetOp, CGetOp, "dst", True, _fill_get),
          "put": (PutOp, CPutOp, "src", False, _fill_put)}


def c_ops(op: str, objects: Sequence[Any]) -> Any:
    """The CGetOp or CPutOp array (op "get" or "put") for objects, and the
    references it points into (buffers, row indices, the array itself)."""
    spec_cls, c_cls, field, writable, fill = _BATCH[op]
    ops = (c_cls * len(objects))()
    keep: List[Any] = [ops]
    for i, o in enumerate(objects):
        spec = o if type(o) is spec_cls else _spec(o, i, spec_cls)
        v = buffers.view(spec[3], writable, "objects[%d].%s" % (i, field))
        keep.append(v.keep)
        op = ops[i]
        op.block, op.kind, op.layer = spec.block, spec.kind, spec.layer
        fill(op, spec, v, i, keep)
    return ops, keep


class Handle:
    """An asynchronous get or put (st_handle_t). It holds the batch's
    buffers, its chain and its op array until released, so none of them
    can be freed while libstrata uses them. wait() or a `with` block ends
    it; release() (also on garbage collection) waits first if needed.
    One thread at a time per handle (libstrata's rule; a lock enforces it).
    libstrata offers no cancel: a handle runs to completion or its
    timeout_ms (the client's), then reports per-object statuses."""

    def __init__(self, client: Any, op: str, ptr: ctypes.c_void_p, ops: Any, keep: List[Any]):
        self._client = client
        self._op = op
        self._h = ptr
        self._ops = ops
        self._keep = keep
        self._results: Optional[list] = None
        self._lock = threading.Lock()

    @property
    def op(self) -> str:
        """"get" or "put"."""
        return self._op

    def __len__(self) -> int:
        return len(self._ops)

    def test(self) -> bool:
        """True once every object completed (st_handle_test; never blocks)."""
        with self._lock:
            if self._results is not None:
                return True
            if not self._h:
                return True
            if lib.st_handle_test(self._h):
                self._collect()
                return True
            return False

    done = property(test)

    def wait(self, timeout_ms: int = -1) -> list:
        """Waits (-1: forever) and returns the results (GetResult or
        PutResult per object, in order). Raises Timeout if the handle did not
        complete in timeout_ms (it is still pending then: wait again)."""
        with self._lock:
            if self._results is None:
                if not self._h:
                    raise InvalidArgument("wait: the handle was released before it completed")
                check(lib.st_handle_wait(self._h, timeout_ms))
                self._collect()
            return list(self._results or [])

    def _collect(self) -> None:
        if self._op == "put":
            self._results = [PutResult(o.status, lib.st_handle_replicas_written(self._h, i))
                             for i, o in enumerate(self._ops)]
        else:
            self._results = [GetResult(o.status, o.length) for o in self._ops]

    @property
    def results(self) -> list:
        """The results once completed (wait() first); InvalidArgument before."""
        if self._results is None and not self.test():
            raise InvalidArgument("results: the handle has not completed (wait() first)")
        return list(self._results or [])

    def raise_for_status(self) -> list:
        """wait(), then raise the first object's error other than a miss."""
        res = self.wait()
        for r in res:
            if r.status not in (0, -3):
                raise r.error()
        return res

    def release(self) -> None:
        """Frees the handle (waiting for it first if it has not completed)
        and drops the buffers it held. Idempotent."""
        with self._lock:
            if self._h:
                if self._results is None:
                    lib.st_handle_wait(self._h, -1)
                    self._collect()
                lib.st_handle_release(self._h)
                self._h = ctypes.c_void_p()
            self._keep = []

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "released" if not self._h and self._results is None else (
            "done" if self._results is not None else "pending")
        return "<strata.Handle %s of %d objects, %s>" % (self._op, len(self._ops), state)
