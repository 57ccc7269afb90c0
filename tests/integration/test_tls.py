#!/usr/bin/python3
"""test_tls.py - stratad's gRPC over TLS, driven by a stock python3-grpcio
client and by the strata CLI, with a throwaway CA made by
tests/tools/make_test_certs.sh (the openssl CLI):

  1. TLS: grpcio with the CA calls Hello and Stats; a plaintext grpcio client
     and a client that trusts another CA are refused; `strata status`, `put`
     and `get` with --tls-ca work, and fail without it.
  2. Mutual TLS (tls_client_auth = require): no client certificate and one of
     another CA are refused; a client certificate of the CA is accepted, by
     grpcio and by the CLI (--tls-cert, --tls-key).
  3. Two daemons with TLS and require: a ClusterLookup at one reaches the
     other over a TLS peer channel (every segment answered, none failed).
  4. SIGHUP with replaced certificate files: new connections get the new
     certificate (its subject and its CA), the daemon keeps serving; bad
     files on SIGHUP are refused and the old certificate stays.
  5. With --lib and --binding: the Python binding (client/python/strata/)
     with tls_ca= puts and gets; without it the connection fails; with
     tls_cert=/tls_key= it passes tls_client_auth = require.
  6. With --engine: strata-engine runs a turn against a TLS daemon with
     --tls-ca, and cannot connect without it.
  7. Certificates name tenants (tenants file cert=<CN>, tls_client_auth =
     request): a Hello for the certificate's own tenant works without a
     token; for another tenant PERMISSION_DENIED; a token of another tenant
     with the certificate PERMISSION_DENIED; no certificate and no token
     UNAUTHENTICATED. Without a tenants file, tls_client_auth = require on a
     non-loopback address starts and serves a remote client's certificate
     (protected mode no longer refuses it).

Usage: test_tls.py --stratad PATH --strata PATH --certs-script PATH
                   [--lib libstrata.so --binding DIR] [--engine strata-engine]
Exit 77 (skip) when python3-grpcio or the openssl CLI is missing.
"""

import argparse
import hashlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402
from pb_wire import field_bytes, field_varint, parse  # noqa: E402

try:
    import grpc
except ImportError:
    print("python3-grpcio missing (apt-get install python3-grpcio): skipped")
    sys.exit(77)


def child_env():
    """The environment of the programs this test starts: without the ASan
    preload that a sanitized build gives this interpreter (for the binding),
    so the daemons keep their own leak checks."""
    env = dict(os.environ)
    if env.pop("STRATA_TEST_PRELOAD", None) is not None:
        env.pop("LD_PRELOAD", None)
        env.pop("ASAN_OPTIONS", None)
    return env


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


# --------------------------------------------------------------- protobuf --
# Just enough of the wire format for Hello, Stats and ClusterLookup (pb_wire.py).

def hello_request(tenant="default", model="default"):
    return field_varint(1, 1) + field_bytes(2, tenant) + field_bytes(3, model)


# ---------------------------------------------------------------- daemons --

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, stratad, work, name, port, extra):
        self.log_path = os.path.join(work, "stratad-%s.log" % name)
        self.log = open(self.log_path, "wb")
        self.addr = "127.0.0.1:%d" % port
        self.proc = subprocess.Popen(
            [stratad, "--listen", self.addr, "--transport", "none", "--memory-limit", "256M",
             "--cluster-secret", "tls-test-cluster-secret"] + extra,
            stdout=subprocess.PIPE, stderr=self.log, env=child_env())
        line = self.proc.stdout.readline().decode()
        if "stratad ready" not in line:
            self.stop()
            fail("stratad %s did not start (%r); its log:\n%s" %
                 (name, line, open(self.log_path).read()[-3000:]))

    def stop(self):
        h.stop_process(self.proc, 20)
        self.log.close()

    def log_text(self):
        self.log.flush()
        return open(self.log_path).read()


# ---------------------------------------------------------------- clients --

def read(path):
    with open(path, "rb") as f:
        return f.read()


def channel(addr, ca=None, cert=None, key=None, name=None):
    if ca is None:
        return grpc.insecure_channel(addr)
    creds = grpc.ssl_channel_credentials(
        root_certificates=read(ca),
        private_key=read(key) if key else None,
        certificate_chain=read(cert) if cert else None)
    opts = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(addr, creds, options=opts)


def call(addr, method, req, token=None, **tls):
    """Returns (grpc status code, response bytes or None)."""
    ch = channel(addr, **tls)
    md = [("authorization", "Bearer " + token)] if token else None
    try:
        rpc = ch.unary_unary("/strata.v1.Cache/" + method)
        return grpc.StatusCode.OK, rpc(req, timeout=5, metadata=md)
    except grpc.RpcError as e:
        return e.code(), None
    finally:
        ch.close()


def expect_ok(addr, method, req, what, **tls):
    code, resp = call(addr, method, req, **tls)
    if code != grpc.StatusCode.OK:
        fail("%s: %s answered %s, wanted OK" % (what, method, code))
    return parse(resp)


def expect_code(addr, want, req, what, **tls):
    code, _ = call(addr, "Hello", req, **tls)
    if code != want:
        fail("%s: Hello answered %s, wanted %s" % (what, code, want))


def expect_refused(addr, what, **tls):
    code, _ = call(addr, "Hello", hello_request(), **tls)
    if code != grpc.StatusCode.UNAVAILABLE:
        fail("%s: Hello answered %s, wanted UNAVAILABLE (no connection)" % (what, code))


def cli(strata, args, want_rc, what):
    p = subprocess.run([strata] + args, capture_output=True, text=True, timeout=60,
                       env=child_env())
    if p.returncode != want_rc:
        fail("%s: strata %s exited %d, wanted %d\nstdout: %s\nstderr: %s" %
             (what, " ".join(args), p.returncode, want_rc, p.stdout, p.stderr))
    return p.stdout


def served_cert(addr):
    """The certificate the server presents to a new connection (DER), via Python's ssl."""
    host, port = addr.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname=host) as t:
            return t.getpeercert(binary_form=True)


def pem_der(path):
    return ssl.PEM_cert_to_DER_cert(open(path).read())


# ------------------------------------------------------------------ cases --

def case_tls(args, work, c):
    ca = os.path.join(c, "ca.pem")
    d = Daemon(args.stratad, work, "tls", free_port(),
               ["--tls-cert", os.path.join(c, "server.pem"),
                "--tls-key", os.path.join(c, "server.key")])
    try:
        hello = expect_ok(d.addr, "Hello", hello_request(), "grpcio with the CA", ca=ca)
        if hello.get(8, [0])[0] == 0 or len(hello.get(9, [b""])[0]) != 16:
            fail("Hello over TLS: no namespace id or seed in %r" % hello)
        stats = expect_ok(d.addr, "Stats", b"", "grpcio with the CA", ca=ca)
        if not stats.get(1):
            fail("Stats over TLS: no node_id")
        expect_refused(d.addr, "plaintext grpcio client")
        expect_refused(d.addr, "grpcio trusting another CA", ca=os.path.join(c, "other-ca.pem"))

        out = cli(args.strata, ["status", "--nodes", d.addr, "--tls-ca", ca], 0, "status TLS")
        if " UP " not in out:
            fail("strata status over TLS: %r" % out)
        out = cli(args.strata, ["status", "--nodes", d.addr], 1, "status plaintext")
        if "DOWN" not in out:
            fail("strata status without --tls-ca: %r" % out)
        obj = os.path.join(work, "obj.bin")
        with open(obj, "wb") as f:
            f.write(os.urandom(4096))
        common = ["--nodes", d.addr, "--tls-ca", ca, "--random", "64"]
        cli(args.strata, ["put"] + common + ["--file", obj], 0, "put TLS")
        got = os.path.join(work, "got.bin")
        cli(args.strata, ["get"] + common + ["--out", got], 0, "get TLS")
        if read(got) != read(obj):
            fail("get over TLS returned other bytes than put stored")
        cli(args.strata, ["get", "--nodes", d.addr, "--random", "64", "--out", got], 1,
            "get plaintext")
    finally:
        d.stop()
    print("ok: TLS: grpcio with the CA, plaintext and wrong-CA refused, CLI status/put/get")


def case_mtls(args, work, c):
    ca = os.path.join(c, "ca.pem")
    acme = dict(ca=ca, cert=os.path.join(c, "client-acme.pem"),
                key=os.path.join(c, "client-acme.key"))
    d = Daemon(args.stratad, work, "mtls", free_port(),
               ["--tls-cert", os.path.join(c, "server.pem"),
                "--tls-key", os.path.join(c, "server.key"), "--tls-ca", ca,
                "--tls-client-auth", "require"])
    try:
        expect_refused(d.addr, "require: no client certificate", ca=ca)
        expect_refused(d.addr, "require: a certificate of another CA", ca=ca,
                       cert=os.path.join(c, "client-rogue.pem"),
                       key=os.path.join(c, "client-rogue.key"))
        expect_refused(d.addr, "require: plaintext")
        expect_ok(d.addr, "Hello", hello_request("acme"), "require: acme's certificate", **acme)
        cli(args.strata, ["status", "--nodes", d.addr, "--tls-ca", ca], 1, "status, no cert")
        cli(args.strata, ["status", "--nodes", d.addr, "--tls-ca", ca, "--tls-cert",
                          acme["cert"], "--tls-key", acme["key"]], 0, "status with acme's cert")
    finally:
        d.stop()
    print("ok: mutual TLS require: no or foreign certificate refused, a CA-signed one accepted")


def local_ip():
    """An address of this host that is not loopback, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def case_cert_tenant(args, work, c):
    ca = os.path.join(c, "ca.pem")

    def cert(name):
        return dict(ca=ca, cert=os.path.join(c, "client-%s.pem" % name),
                    key=os.path.join(c, "client-%s.key" % name))

    tokens = {"acme": "tls-test-acme-token-0123456789", "beta": "tls-test-beta-token-9876543210"}
    tenants = os.path.join(work, "tenants")
    with open(tenants, "w") as f:
        for name, tok in tokens.items():
            f.write("%s sha256:%s cert=%s\n" % (name, hashlib.sha256(tok.encode()).hexdigest(),
                                                  name))
    d = Daemon(args.stratad, work, "certtenant", free_port(),
               ["--tls-cert", os.path.join(c, "server.pem"),
                "--tls-key", os.path.join(c, "server.key"), "--tls-ca", ca,
                "--tls-client-auth", "request", "--tenants-file", tenants])
    try:
        hello = expect_ok(d.addr, "Hello", hello_request("acme", "m"),
                          "acme's certificate, no token", **cert("acme"))
        if hello.get(8, [0])[0] == 0:
            fail("Hello by certificate: no namespace id in %r" % hello)
        expect_code(d.addr, grpc.StatusCode.PERMISSION_DENIED, hello_request("beta", "m"),
                    "acme's certificate, Hello for beta", **cert("acme"))
        expect_code(d.addr, grpc.StatusCode.PERMISSION_DENIED, hello_request("beta", "m"),
                    "acme's certificate with beta's token", token=tokens["beta"],
                    **cert("acme"))
        expect_code(d.addr, grpc.StatusCode.UNAUTHENTICATED, hello_request("acme", "m"),
                    "no certificate, no token", ca=ca)
        expect_ok(d.addr, "Hello", hello_request("beta", "m"), "beta's token, no certificate",
                  token=tokens["beta"], ca=ca)
        expect_ok(d.addr, "Hello", hello_request("acme", "m"), "acme's certificate and token",
                  token=tokens["acme"], **cert("acme"))
        ns = field_varint(1, hello[8][0])
        expect_ok(d.addr, "Stats", ns, "Stats of acme's namespace, acme's certificate alone",
                  **cert("acme"))
        code, _ = call(d.addr, "Stats", ns, **cert("beta"))
        if code == grpc.StatusCode.OK:
            fail("Stats of acme's namespace with beta's certificate: OK")
    finally:
        d.stop()
    ip = local_ip()
    if ip is None:
        print("ok: certificates name tenants (no non-loopback address: remote case skipped)")
        return
    port = free_port()
    d = Daemon(args.stratad, work, "certremote", port,
               ["--listen", "0.0.0.0:%d" % port, "--tls-cert", os.path.join(c, "server.pem"),
                "--tls-key", os.path.join(c, "server.key"), "--tls-ca", ca,
                "--tls-client-auth", "require"])
    try:
        expect_ok("%s:%d" % (ip, port), "Hello", hello_request("acme", "m"),
                  "remote client with a verified certificate", name="localhost", **cert("acme"))
    finally:
        d.stop()
    print("ok: certificates name tenants: own tenant without a token, another tenant or "
          "another tenant's token refused, nothing UNAUTHENTICATED; remote certificate served")


def case_peers(args, work, c):
    ca = os.path.join(c, "ca.pem")
    ports = [free_port(), free_port()]
    peers = ",".join("127.0.0.1:%d" % p for p in ports)
    tls = ["--tls-cert", os.path.join(c, "server.pem"), "--tls-key",
           os.path.join(c, "server.key"), "--tls-ca", ca, "--tls-client-auth", "require",
           "--peers", peers, "--segment-blocks", "1"]
    ds = [Daemon(args.stratad, work, "peer%d" % i, p, tls) for i, p in enumerate(ports)]
    acme = dict(ca=ca, cert=os.path.join(c, "client-acme.pem"),
                key=os.path.join(c, "client-acme.key"))
    try:
        hello = expect_ok(ds[0].addr, "Hello", hello_request(), "peer 0", **acme)
        expect_ok(ds[1].addr, "Hello", hello_request(), "peer 1", **acme)
        ns = hello[8][0]
        hashes = os.urandom(16 * 64)  # 64 one-block segments, spread over both nodes
        req = field_varint(1, ns) + field_bytes(2, hashes) + field_varint(4, 1)
        resp = expect_ok(ds[0].addr, "ClusterLookup", req, "ClusterLookup", **acme)
        segs = [parse(s) for s in resp.get(3, [])]
        if len(segs) != 64:
            fail("ClusterLookup: %d segment answers, wanted 64" % len(segs))
        nodes = {s.get(3, [b""])[0] for s in segs}
        failed = [s for s in segs if s.get(5, [0])[0] != 0]
        if len(nodes) < 2 or failed:
            fail("ClusterLookup over TLS peers: owners %r, %d segments failed (first: %r)" %
                 (nodes, len(failed), failed[0].get(6) if failed else None))
    finally:
        for d in ds:
            d.stop()
    print("ok: peers: a ClusterLookup reaches the other daemon over TLS with require")


def case_sighup(args, work, c):
    live = os.path.join(work, "live")
    os.makedirs(live)
    cert, key = os.path.join(live, "cert.pem"), os.path.join(live, "key.pem")
    shutil.copy(os.path.join(c, "server.pem"), cert)
    shutil.copy(os.path.join(c, "server.key"), key)
    d = Daemon(args.stratad, work, "sighup", free_port(), ["--tls-cert", cert, "--tls-key", key])
    ca, other = os.path.join(c, "ca.pem"), os.path.join(c, "other-ca.pem")
    try:
        if served_cert(d.addr) != pem_der(os.path.join(c, "server.pem")):
            fail("before SIGHUP the daemon does not serve server.pem")
        expect_ok(d.addr, "Stats", b"", "before SIGHUP", ca=ca)

        # Bad files: refused, the old certificate stays.
        with open(key, "w") as f:
            f.write("not a key\n")
        d.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        if "SIGHUP: the TLS files were not taken" not in d.log_text():
            fail("a SIGHUP with a broken key was not reported in the log")
        if served_cert(d.addr) != pem_der(os.path.join(c, "server.pem")):
            fail("after a SIGHUP with a broken key the certificate changed")
        expect_ok(d.addr, "Stats", b"", "after a refused SIGHUP", ca=ca)

        # A certificate of another CA replaces it.
        shutil.copy(os.path.join(c, "server-other.pem"), cert)
        shutil.copy(os.path.join(c, "server-other.key"), key)
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while served_cert(d.addr) != pem_der(os.path.join(c, "server-other.pem")):
            if time.time() > deadline:
                fail("after SIGHUP new connections still get the old certificate")
            time.sleep(0.1)
        expect_ok(d.addr, "Stats", b"", "after SIGHUP, the new CA", ca=other)
        expect_refused(d.addr, "after SIGHUP, the old CA", ca=ca)
        if d.proc.poll() is not None:
            fail("stratad exited on SIGHUP")
    finally:
        d.stop()
    print("ok: SIGHUP: new connections get the replaced certificate; bad files refused")


def case_binding(args, work, c):
    os.environ["STRATA_LIB"] = args.lib
    sys.path.insert(0, args.binding)
    import strata

    ca = os.path.join(c, "ca.pem")
    d = Daemon(args.stratad, work, "binding", free_port(),
               ["--tls-cert", os.path.join(c, "server.pem"),
                "--tls-key", os.path.join(c, "server.key"), "--tls-ca", ca,
                "--tls-client-auth", "require"])
    try:
        cert = os.path.join(c, "client-acme.pem")
        key = os.path.join(c, "client-acme.key")
        with strata.Client(d.addr, tls_ca=ca, tls_cert=cert, tls_key=key) as cl:
            chain = cl.hash(list(range(4 * cl.block_tokens)))
            data = os.urandom(3000)
            if cl.put(chain, [(1, strata.KV, 0, data)]) != [0]:
                fail("binding: put over TLS did not store")
            out = bytearray(4096)
            st = cl.get(chain, [(1, strata.KV, 0, out)])
            if st != [(0, 3000)] or bytes(out[:3000]) != data:
                fail("binding: get over TLS returned %r" % st)
        for kw in ({}, {"tls_ca": ca}):
            try:
                strata.Client(d.addr, timeout_ms=2000, **kw).close()
                fail("binding: connected with %r to a daemon that requires a certificate" % kw)
            except strata.Error as e:
                if "no node of 1 answered" not in str(e):
                    fail("binding: unexpected error %s" % e)
        try:
            strata.Client(d.addr, tls_ca=os.path.join(work, "missing.pem")).close()
            fail("binding: a missing tls_ca file was accepted")
        except strata.Error as e:
            if "missing.pem" not in str(e):
                fail("binding: the error does not name the file: %s" % e)
    finally:
        d.stop()
    print("ok: binding: tls_ca/tls_cert/tls_key put and get; without them refused")


def case_engine(args, work, c):
    ca = os.path.join(c, "ca.pem")
    d = Daemon(args.stratad, work, "engine", free_port(),
               ["--tls-cert", os.path.join(c, "server.pem"),
                "--tls-key", os.path.join(c, "server.key")])
    run = [args.engine, "--nodes", d.addr, "--turns", "1", "--history-tokens", "256",
           "--decode-tokens", "1"]
    try:
        p = subprocess.run(run + ["--tls-ca", ca], capture_output=True, text=True, timeout=120,
                           env=child_env())
        if p.returncode != 0 or "result turns=1" not in p.stdout:
            fail("engine: a turn over TLS failed (rc %d):\n%s%s" %
                 (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        p = subprocess.run(run, capture_output=True, text=True, timeout=120, env=child_env())
        if p.returncode == 0 or "cannot connect" not in p.stderr:
            fail("engine: connected to a TLS daemon in plaintext (rc %d)" % p.returncode)
    finally:
        d.stop()
    print("ok: engine: strata-engine --tls-ca runs a turn; without it no connection")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--certs-script", required=True)
    ap.add_argument("--lib", default=None, help="libstrata.so, for the binding case")
    ap.add_argument("--binding", default=None, help="the folder holding the strata package")
    ap.add_argument("--engine", default=None, help="strata-engine, for the engine case")
    args = ap.parse_args()
    if shutil.which("openssl") is None:
        print("openssl CLI missing (apt-get install openssl): skipped")
        return 77
    work = tempfile.mkdtemp(prefix="strata-tls-")
    try:
        c = os.path.join(work, "certs")
        subprocess.run(["bash", args.certs_script, c, "acme", "beta"], check=True,
                       env=child_env())
        case_tls(args, work, c)
        case_mtls(args, work, c)
        case_cert_tenant(args, work, c)
        case_peers(args, work, c)
        case_sighup(args, work, c)
        if args.lib and args.binding:
            case_binding(args, work, c)
        if args.engine:
            case_engine(args, work, c)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("test_tls: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
