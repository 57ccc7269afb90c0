"""Reference implementation of the strata block-hash chain (docs/hashing.md).

Written from the specification alone, with Debian's python3-xxhash, so that a
connector in Python computes the same keys as the C library.
"""
import struct

import xxhash

HASH_BYTES = 16


def hash128_bytes(data: bytes) -> bytes:
    """XXH3-128 of data in strata's canonical order: low 64 bits, then high
    64 bits, each little-endian."""
    return xxhash.xxh3_128_intdigest(data).to_bytes(16, "little")


def block_hash(prev: bytes, tokens, extras=()) -> bytes:
    """One block: prev (16 bytes), its tokens, and (content, offset) extras."""
    msg = bytearray(prev)
    msg += struct.pack("<I", len(tokens))
    msg += struct.pack("<%dI" % len(tokens), *tokens)
    for content, offset in extras:
        msg += content
        msg += struct.pack("<i", offset)
    return hash128_bytes(bytes(msg))


def chain(seed: bytes, tokens, block_tokens: int, items=()):
    """The chain of a token sequence: one hash per full block.

    items are (content_hash_bytes, start, n_tokens), sorted by start."""
    if block_tokens < 16 or block_tokens > 4096 or block_tokens % 16:
        raise ValueError("block_tokens must be a multiple of 16 in 16..4096")
    out = []
    prev = seed
    for i in range(len(tokens) // block_tokens):
        b0, b1 = i * block_tokens, (i + 1) * block_tokens
        extras = [(c, s - b0) for (c, s, n) in items if s < b1 and s + n > b0]
        prev = block_hash(prev, tokens[b0:b1], extras)
        out.append(prev)
    return out
