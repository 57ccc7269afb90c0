"""mh_probe.py - asks every daemon for its ring (Hello: peers and ring_epoch).

Runs in the client's namespace; prints one JSON object on stdout:
{"host:port": {"node": id, "peers": [sorted addresses], "epoch": n} or
{"error": "..."}}. Uses Debian's python3-grpcio; run with /usr/bin/python3.
"""

import json
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))
from pb_wire import field_bytes, field_varint, parse  # noqa: E402


def hello(addr, token, tenant, model, timeout_s=3.0):
    req = field_varint(1, 1) + field_bytes(2, tenant) + field_bytes(3, model)
    with grpc.insecure_channel(addr) as ch:
        fn = ch.unary_unary("/strata.v1.Cache/Hello")
        resp = parse(fn(req, metadata=[("authorization", "Bearer " + token)],
                        timeout=timeout_s))
    peers = sorted(parse(p)[2][0].decode() for p in resp.get(14, []))
    return {"node": resp[2][0].decode(), "peers": peers, "epoch": resp.get(15, [0])[0]}


def main():
    addrs, token, tenant, model = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
    out = {}
    for a in addrs:
        try:
            out[a] = hello(a, token, tenant, model)
        except grpc.RpcError as e:
            out[a] = {"error": "%s: %s" % (e.code(), e.details())}
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
