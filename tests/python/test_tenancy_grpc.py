#!/usr/bin/python3
"""Tenants seen by a stock gRPC client (python3-grpcio, no strata code, raw
protobuf bytes): a daemon with a tenants file of two tenants; garbage from a
client without a token, or with a wrong one, is UNAUTHENTICATED (not
INVALID_ARGUMENT: it is not parsed); a Hello for the other tenant is
PERMISSION_DENIED; the other tenant's namespace id answers exactly as an
unknown one; the token-less health check still answers. Run with Debian's
python3 (python3-grpcio)."""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from obs_harness import free_port  # noqa: E402
from pb_wire import parse, varint  # noqa: E402

TOK_A = "py-alpha-token-0123456789"
TOK_B = "py-beta-token-9876543210"


def field_str(num, s):
    b = s.encode()
    return varint(num << 3 | 2) + varint(len(b)) + b


def hello_req(tenant, model):
    return varint(1 << 3) + varint(1) + field_str(2, tenant) + field_str(3, model)


def ns_only(ns):
    return varint(1 << 3) + varint(ns)


def parse_ns(resp):
    """namespace_id is field 8 (varint) of HelloResponse."""
    ns = parse(resp).get(8)
    if not ns:
        raise AssertionError("no namespace_id in the HelloResponse")
    return ns[0]


def call(ch, method, body, token=None):
    fn = ch.unary_unary("/strata.v1.Cache/" + method)
    md = [("authorization", "Bearer " + token)] if token else None
    try:
        return grpc.StatusCode.OK, fn(body, metadata=md, timeout=10), ""
    except grpc.RpcError as e:
        return e.code(), None, e.details()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    args = ap.parse_args()
    checks = 0
    with tempfile.TemporaryDirectory() as d:
        tenants = os.path.join(d, "tenants")
        with open(tenants, "w") as f:
            f.write("# two tenants\n")
            f.write("alpha sha256:%s models=m1\n" % hashlib.sha256(TOK_A.encode()).hexdigest())
            f.write("beta sha256:%s\n" % hashlib.sha256(TOK_B.encode()).hexdigest())
        port = free_port()
        addr = "127.0.0.1:%d" % port
        pr = subprocess.Popen([args.stratad, "--listen", addr, "--transport", "none",
                               "--tenants-file", tenants],
                              env=dict(os.environ, STRATA_CLUSTER_SECRET="python-tenancy-secret"),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            line = pr.stdout.readline().decode()
            assert "stratad ready" in line, line
            ch = grpc.insecure_channel(addr)
            garbage = b"\xff" * 4096
            for method in ("Lookup", "Get", "Put", "Reserve", "Stats", "ClusterLookup"):
                code, _, msg = call(ch, method, garbage)
                assert code == grpc.StatusCode.UNAUTHENTICATED, (method, code, msg)
                code, _, msg = call(ch, method, garbage, "not-a-token")
                assert code == grpc.StatusCode.UNAUTHENTICATED, (method, code, msg)
                code, _, msg = call(ch, method, garbage, TOK_A)
                assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, code, msg)
                checks += 3
            code, _, msg = call(ch, "Hello", hello_req("beta", "m1"), TOK_A)
            assert code == grpc.StatusCode.PERMISSION_DENIED, (code, msg)
            code, _, msg = call(ch, "Hello", hello_req("alpha", "m2"), TOK_A)
            assert code == grpc.StatusCode.PERMISSION_DENIED and "m2" in msg, (code, msg)
            code, resp_b, msg = call(ch, "Hello", hello_req("beta", "m1"), TOK_B)
            assert code == grpc.StatusCode.OK, (code, msg)
            ns_b = parse_ns(resp_b)
            checks += 3
            bogus = ns_b ^ 0x5A5A5A5A
            for method in ("Lookup", "Locate", "Get", "Delete", "Pin", "Stats", "GetSession"):
                code, _, msg = call(ch, method, ns_only(ns_b), TOK_A)
                code2, _, msg2 = call(ch, method, ns_only(bogus), TOK_A)
                assert code == code2 == grpc.StatusCode.NOT_FOUND, (method, code, msg, code2)
                assert msg.replace(str(ns_b), "N") == msg2.replace(str(bogus), "N"), (msg, msg2)
                checks += 1
            health = ch.unary_unary("/grpc.health.v1.Health/Check")
            assert health(b"", timeout=10) == b"\x08\x01"  # status: SERVING
            checks += 1
            ch.close()
        finally:
            pr.terminate()
            pr.wait(timeout=20)
    print("%d checks passed" % checks)


if __name__ == "__main__":
    main()
