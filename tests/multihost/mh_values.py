"""mh_values.py - the bytes the multi-host workload writes, as a pure function
of (key, gen), so that the history holds digests only and the checker
(mh_history.py) computes the expected bytes again. Standard library only."""

import hashlib

ROW_BYTES = 64


def value_bytes(key, gen, size=None):
    """The bytes written for key (a string) in generation gen."""
    seed = hashlib.blake2b(("%s/%d" % (key, gen)).encode(), digest_size=16).digest()
    n = size or (ROW_BYTES * (16 + int.from_bytes(seed[:2], "little") % 112))
    out = bytearray()
    ctr = 0
    while len(out) < n:
        out += hashlib.blake2b(seed + ctr.to_bytes(4, "little"), digest_size=64).digest()
        ctr += 1
    return bytes(out[:n])


def digest(b):
    return hashlib.blake2b(b, digest_size=8).hexdigest()


def row_digest(key, gen, rows):
    v = value_bytes(key, gen)
    return digest(b"".join(v[r * ROW_BYTES:(r + 1) * ROW_BYTES] for r in rows))
