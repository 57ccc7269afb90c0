"""Zero-copy access to the caller's memory: numpy arrays (and anything with
__array_interface__), torch CPU tensors (anything with data_ptr(), numel(),
element_size() and is_contiguous(): pinned or not), and buffer-protocol
objects (bytearray, memoryview, mmap, array.array, bytes).

Lifetime: libstrata reads or writes the memory until the operation that
uses it completes (a get or put handle: until it is waited for or
released). Each View keeps a reference to its object, and a Handle keeps
its Views, so the object cannot be freed under an operation; what the
package cannot prevent is the caller resizing or freeing the memory by
other means (numpy's resize(refcheck=False), a torch tensor's
resize_()/set_()), which must not happen while a handle is pending.
"""

import ctypes
from typing import Any, NamedTuple

from .errors import InvalidArgument


class View(NamedTuple):
    """The address and size of an object's bytes, and what keeps them alive."""

    address: int
    nbytes: int
    keep: Any


def _is_tensor(obj: Any) -> bool:
    return all(callable(getattr(obj, m, None))
               for m in ("data_ptr", "numel", "element_size", "is_contiguous"))


def _tensor(obj: Any, what: str) -> View:
    dev = getattr(obj, "device", None)
    if dev is not None and str(getattr(dev, "type", dev)) != "cpu":
        raise InvalidArgument("%s: a tensor on %s; libstrata reads and writes host memory: "
                              "pass a CPU tensor (pinned or not)" % (what, dev))
    if not obj.is_contiguous():
        raise InvalidArgument("%s: the tensor is not contiguous (call .contiguous())" % what)
    return View(int(obj.data_ptr()), int(obj.numel()) * int(obj.element_size()), obj)


def _array(obj: Any, writable: bool, what: str, ai: Any = None) -> View:
    if ai is None:
        ai = obj.__array_interface__
    addr, readonly = ai["data"]
    shape = tuple(ai["shape"])
    itemsize = int(ai["typestr"][2:])
    n = itemsize
    for d in shape:
        n *= d
    strides = ai.get("strides")
    if strides is not None and len(shape) > 0:
        want, step = [], itemsize
        for d in reversed(shape):
            want.insert(0, step)
            step *= d
        if tuple(strides) != tuple(want) and n > 0:
            raise InvalidArgument("%s: the array is not C-contiguous (np.ascontiguousarray)" %
                                  what)
    if writable and readonly:
        raise InvalidArgument("%s: the destination array is read-only" % what)
    return View(addr or 0, n, obj)


def _buffer(obj: Any, writable: bool, what: str) -> View:
    if isinstance(obj, bytes):
        if writable:
            raise InvalidArgument("%s: bytes are read-only: pass a bytearray or a numpy array" %
                                  what)
        # The bytes object's own storage (it is immutable and we keep it).
        return View(ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value or 0, len(obj), obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise InvalidArgument("%s: %s is not a buffer (numpy array, torch CPU tensor, bytes, "
                              "bytearray or memoryview)" % (what, type(obj).__name__)) from None
    if not view.contiguous:
        raise InvalidArgument("%s: the buffer is not contiguous" % what)
    if view.readonly:
        if writable:
            raise InvalidArgument("%s: the destination is read-only" % what)
        try:
            import numpy

            return _array(numpy.frombuffer(view, numpy.uint8), False, what)
        except ImportError:  # no numpy: a copy, the one case that copies
            holder = ctypes.create_string_buffer(view.tobytes(), view.nbytes)
            return View(ctypes.addressof(holder), view.nbytes, (holder, view))
    flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    holder = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return View(ctypes.addressof(holder), flat.nbytes, (holder, flat, obj))


def view(obj: Any, writable: bool, what: str = "buffer") -> View:
    """The View of obj's memory, without copying. writable: libstrata will
    write into it (a get's destination). Errors name `what`."""
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None and not _is_tensor(obj):
        return _array(obj, writable, what, ai)
    if _is_tensor(obj):
        return _tensor(obj, what)
    return _buffer(obj, writable, what)


def u32_array(values: Any, what: str) -> View:
    """A uint32 array (tokens, row indices) as a View: a numpy uint32 array
    as it is, a sequence of ints copied into a ctypes array."""
    ai = getattr(values, "__array_interface__", None)
    if ai is not None:
        if ai["typestr"] not in ("<u4", "|u4", "=u4"):
            raise InvalidArgument("%s: expected uint32, not %s" % (what, ai["typestr"]))
        return _array(values, False, what)
    try:
        arr = (ctypes.c_uint32 * len(values))(*values)
    except (TypeError, OverflowError) as e:
        raise InvalidArgument("%s: expected a sequence of uint32 (%s)" % (what, e)) from None
    return View(ctypes.addressof(arr), len(values) * 4, arr)
