"""Hash helpers: chains of token blocks, non-text items, images, hex.

A chain is bytes, 16 per full block (st_hash_t in order); chain_blocks()
splits it. Client.hash() hashes with the namespace's seed and block size;
hash_chain() takes them explicitly (the same st_hash_chain).
"""

import ctypes
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import buffers
from ._lib import lib
from ._types import CHashItem
from .errors import InvalidArgument

HashLike = Union[bytes, bytearray, str]
Item = Tuple[HashLike, int, int]  # (content hash, start, n_tokens)


def content(h: HashLike, what: str) -> bytes:
    """16 bytes of a hash given as bytes or 32 hex digits."""
    if isinstance(h, str):
        try:
            h = bytes.fromhex(h)
        except ValueError:
            raise InvalidArgument("%s: %r is not 32 hex digits" % (what, h)) from None
    h = bytes(h)
    if len(h) != 16:
        raise InvalidArgument("%s: a content hash has 16 bytes, not %d" % (what, len(h)))
    return h


def chain_blocks(chain: bytes) -> List[bytes]:
    """The chain's block hashes, 16 bytes each."""
    if len(chain) % 16:
        raise InvalidArgument("chain: %d bytes is not a whole number of 16-byte hashes" %
                              len(chain))
    return [bytes(chain[i:i + 16]) for i in range(0, len(chain), 16)]


def to_hex(h: bytes) -> str:
    """The 32 lowercase hex digits of a 16-byte hash."""
    return content(h, "hash").hex()


def from_hex(text: str) -> bytes:
    """The 16 bytes of 32 hex digits."""
    return content(text, "hash")


def items_array(items: Optional[Sequence[Item]]) -> Tuple[Any, int]:
    """The ctypes st_hash_item_t array for [(content, start, n_tokens)]."""
    if not items:
        return None, 0
    arr = (CHashItem * len(items))()
    for i, item in enumerate(items):
        try:
            h, start, n = item
        except (TypeError, ValueError):
            raise InvalidArgument("items[%d]: expected (content hash, start, n_tokens)" %
                                  i) from None
        if start < 0 or n <= 0:
            raise InvalidArgument("items[%d]: start %d must be >= 0 and n_tokens %d > 0" %
                                  (i, start, n))
        arr[i].content[:] = list(content(h, "items[%d]" % i))
        arr[i].start, arr[i].n_tokens = start, n
    return arr, len(items)


def hash_chain(seed: HashLike, tokens: Any, block_tokens: int,
               items: Optional[Sequence[Item]] = None) -> bytes:
    """st_hash_chain: the chain of tokens (numpy uint32 array or ints) under
    seed (16 bytes, the namespace's h[-1]) with block_tokens per block."""
    s = ctypes.create_string_buffer(content(seed, "seed"), 16)
    t = buffers.u32_array(tokens, "tokens")
    n = t.nbytes // 4
    cap = n // max(block_tokens, 1) + 1
    out = ctypes.create_string_buffer(cap * 16)
    nb = ctypes.c_size_t()
    arr, n_items = items_array(items)
    st = lib.st_hash_chain(s, t.address, n, block_tokens, arr, n_items, out, cap,
                           ctypes.byref(nb))
    if st != 0:
        raise InvalidArgument("hash_chain: block_tokens %d (a multiple of 16, 16..4096), or "
                              "items unsorted or too many in one block" % block_tokens, st)
    return out.raw[:nb.value * 16]


def hash_image(pixels: Any, width: Optional[int] = None, height: Optional[int] = None,
               channels: Optional[int] = None) -> bytes:
    """The 16-byte content hash of an image (st_hash_image: every pixel and
    the size). pixels: a uint8 numpy array of shape (height, width) or
    (height, width, channels), or bytes-like of width * height * channels
    bytes (rows top to bottom, channels interleaved) with the three sizes
    given. channels is 1 (grey) or 3 (RGB)."""
    if hasattr(pixels, "__array_interface__"):
        shape = tuple(pixels.__array_interface__["shape"])
        typestr = pixels.__array_interface__["typestr"]
        if typestr[1:] != "u1" or len(shape) not in (2, 3):
            raise InvalidArgument("an image array is uint8 of shape (h, w) or (h, w, c), not "
                                  "%s %s" % (getattr(pixels, "dtype", typestr), shape))
        got = (shape[1], shape[0], shape[2] if len(shape) == 3 else 1)
        for name, given, have in zip(("width", "height", "channels"),
                                     (width, height, channels), got):
            if given is not None and given != have:
                raise InvalidArgument("%s=%d does not match the array's %d" % (name, given, have))
        width, height, channels = got
    elif width is None or height is None or channels is None:
        raise InvalidArgument("pixels as bytes need width, height and channels")
    v = buffers.view(pixels, False, "pixels")
    if v.nbytes != width * height * channels:
        raise InvalidArgument("%d pixel bytes, but %dx%dx%d needs %d" %
                              (v.nbytes, width, height, channels, width * height * channels))
    out = ctypes.create_string_buffer(16)
    st = lib.st_hash_image(v.address, width, height, channels, out)
    if st != 0:
        raise InvalidArgument("hash_image: %dx%d with %d channels: sides are 1..16384, "
                              "channels 1 or 3" % (width, height, channels), st)
    return out.raw
