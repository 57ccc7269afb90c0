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


IMAGE_MAGIC = 0x4D495453  # "STIM"
IMAGE_VERSION = 1
IMAGE_FORMAT_U8 = 1
IMAGE_SIDE_MAX = 16384


def image_hash(pixels: bytes, width: int, height: int, channels: int) -> bytes:
    """st_hash_image: XXH3-128 of the 24-byte header and every pixel byte
    (8-bit samples, channels interleaved, rows top to bottom)."""
    if not (1 <= width <= IMAGE_SIDE_MAX and 1 <= height <= IMAGE_SIDE_MAX):
        raise ValueError("image side out of range")
    if channels not in (1, 3):
        raise ValueError("channels must be 1 or 3")
    if len(pixels) != width * height * channels:
        raise ValueError("pixels must be width * height * channels bytes")
    head = struct.pack("<6I", IMAGE_MAGIC, IMAGE_VERSION, width, height, channels,
                       IMAGE_FORMAT_U8)
    return hash128_bytes(head + bytes(pixels))
