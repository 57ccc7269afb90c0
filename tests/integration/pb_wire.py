"""pb_wire.py - just enough of the protobuf wire format for tests that send
raw request bytes to a stock gRPC client (tests/integration/test_tls.py,
tests/python/test_tenancy_grpc.py): varints, fields, and a flat parse.

Standard library only; run with /usr/bin/python3.
"""


def varint(n):
    """The base-128 varint of n >= 0."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, i):
    """The varint at buf[i:] and the index after it."""
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def field_varint(num, n):
    return varint(num << 3) + varint(n)


def field_bytes(num, data):
    """Field num, length-delimited; a str is sent as its UTF-8 bytes."""
    if isinstance(data, str):
        data = data.encode()
    return varint((num << 3) | 2) + varint(len(data)) + data


def parse(buf):
    """Returns {field number: [values]}: ints for varints, bytes otherwise."""
    out, i = {}, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out
