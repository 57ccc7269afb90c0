#!/usr/bin/python3
"""test_metrics_tls.py - stratad's metrics server: no wildcard CORS, no
non-loopback address in the clear, HTTPS with a bearer token.

Cases (--case NAME runs one; the default runs all):
  cors     a daemon with metrics on loopback and no options: /stats and
           /metrics carry no Access-Control-Allow-Origin for a foreign Origin;
           metrics_cors_origin lists the origins that get it back.
  public   metrics_listen = 0.0.0.0 without TLS or a token: stratad refuses
           to start, naming the reason; with a token it starts.
  https    metrics_tls_cert/key and metrics_token_file: /metrics over HTTPS
           with the CA and the token passes `promtool check metrics`; without
           the token 401 with WWW-Authenticate; plain HTTP gets no answer;
           /healthz needs no token; a real Prometheus scrapes it with scheme
           https, ca_file and a bearer token file (target up, series present).
  badcert  a metrics key that is not the certificate's: stratad refuses to start.
  sighup   replaced metrics_tls_cert/key files and SIGHUP: new connections get
           the new certificate on the same port; bad files are refused and the
           old certificate keeps serving.
  client   (with --strata and --engine) the metrics servers of `strata bench` and
           strata-engine: a non-loopback --metrics-listen in the clear is
           refused; with --metrics-tls-cert/key and --metrics-token-file they
           serve HTTPS behind the token.

Usage: test_metrics_tls.py --stratad PATH --certs-script PATH [--case NAME]
                           [--strata PATH] [--engine PATH]
Exit 77 (skip) when promtool or the openssl CLI is missing.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402

TOKEN = "metrics-token-0123456789abcdef"


class Daemon:
    def __init__(self, stratad, work, name, extra, expect_start=True):
        self.log_path = os.path.join(work, "stratad-%s.log" % name)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [stratad, "--listen", "127.0.0.1:%d" % h.free_port(), "--transport", "none",
             "--memory-limit", "256M", "--cluster-secret", "metrics-tls-test-secret"] + extra,
            stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode()
        self.started = "stratad ready" in line
        if self.started != expect_start:
            self.stop()
            h.fail("stratad %s: %s (%r); its log:\n%s" %
                   (name, "did not start" if expect_start else "started, but should not have",
                    line, self.log_text()[-3000:]))
        m = re.search(r"metrics_port=(\d+)", line)
        self.metrics_port = int(m.group(1)) if m else 0

    def stop(self):
        code = h.stop_process(self.proc, 20)
        self.log.close()
        return code

    def log_text(self):
        if not self.log.closed:
            self.log.flush()
        return open(self.log_path).read()


def get(url, headers=None, ca=None):
    """Returns (status, headers with lower-case names, body); status None when no HTTP answer."""
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
    except (urllib.error.URLError, ConnectionError, OSError) as e:
        return None, {}, str(e).encode()


def case_cors(args, work, certs):
    d = Daemon(args.stratad, work, "cors", ["--metrics-listen", "127.0.0.1:0"])
    try:
        base = "http://127.0.0.1:%d" % d.metrics_port
        for path in ("/stats", "/metrics"):
            st, hd, _ = get(base + path, {"Origin": "http://evil.example"})
            if st != 200:
                h.fail("cors: GET %s answered %s" % (path, st))
            if "access-control-allow-origin" in hd:
                h.fail("cors: %s lets any page read it: Access-Control-Allow-Origin: %s" %
                       (path, hd["access-control-allow-origin"]))
    finally:
        d.stop()
    d = Daemon(args.stratad, work, "cors2", ["--metrics-listen", "127.0.0.1:0",
                                             "--metrics-cors-origin", "https://dash.example:9101"])
    try:
        base = "http://127.0.0.1:%d" % d.metrics_port
        st, hd, _ = get(base + "/stats", {"Origin": "https://dash.example:9101"})
        if st != 200 or hd.get("access-control-allow-origin") != "https://dash.example:9101":
            h.fail("cors: a listed origin is not let in: %s %r" % (st, hd))
        st, hd, _ = get(base + "/stats", {"Origin": "https://other.example:9101"})
        if "access-control-allow-origin" in hd:
            h.fail("cors: an origin that is not listed is let in")
    finally:
        d.stop()
    Daemon(args.stratad, work, "cors3", ["--metrics-listen", "127.0.0.1:0",
                                         "--metrics-cors-origin", "*"], expect_start=False).stop()
    print("ok: cors: no wildcard; only listed origins", flush=True)


def case_public(args, work, certs):
    d = Daemon(args.stratad, work, "public", ["--metrics-listen", "0.0.0.0:0"],
               expect_start=False)
    d.stop()
    if "refusing to serve /metrics and /stats on a non-loopback address" not in d.log_text():
        h.fail("public: the refusal does not say why:\n%s" % d.log_text()[-2000:])
    tok = os.path.join(work, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    d = Daemon(args.stratad, work, "public-token", ["--metrics-listen", "0.0.0.0:0",
                                                    "--metrics-token-file", tok])
    try:
        st, _, _ = get("http://127.0.0.1:%d/metrics" % d.metrics_port)
        if st != 401:
            h.fail("public: /metrics without the token answered %s" % st)
    finally:
        d.stop()
    print("ok: public: a non-loopback address in the clear without a token is refused",
          flush=True)


def case_https(args, work, certs):
    promtool = h.find_tool("promtool", "PROMTOOL")
    ca = os.path.join(certs, "ca.pem")
    tok = os.path.join(work, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    d = Daemon(args.stratad, work, "https",
               ["--metrics-listen", "127.0.0.1:0",
                "--metrics-tls-cert", os.path.join(certs, "server.pem"),
                "--metrics-tls-key", os.path.join(certs, "server.key"),
                "--metrics-token-file", tok])
    prom = None
    try:
        base = "https://127.0.0.1:%d" % d.metrics_port
        auth = {"Authorization": "Bearer " + TOKEN}
        st, hd, body = get(base + "/metrics", auth, ca=ca)
        if st != 200 or b"# TYPE strata_request_duration_seconds histogram" not in body:
            h.fail("https: /metrics with the token answered %s: %r" % (st, body[:200]))
        r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                           timeout=60)
        out = (r.stdout + r.stderr).decode(errors="replace").strip()
        print("promtool check metrics over HTTPS: rc=%d %s" % (r.returncode, out or "(clean)"),
              flush=True)
        if r.returncode != 0 or out:
            h.fail("https: promtool check metrics: rc=%d %s" % (r.returncode, out))
        if "access-control-allow-origin" in hd:
            h.fail("https: /metrics carries a CORS header")
        for path in ("/metrics", "/stats"):
            st, hd, _ = get(base + path, ca=ca)
            if st != 401 or not hd.get("www-authenticate", "").startswith("Bearer"):
                h.fail("https: %s without the token answered %s %r" % (path, st, hd))
            st, _, _ = get(base + path, {"Authorization": "Bearer wrong"}, ca=ca)
            if st != 401:
                h.fail("https: %s with a wrong token answered %s" % (path, st))
        st, _, _ = get(base + "/stats", auth, ca=ca)
        if st != 200:
            h.fail("https: /stats with the token answered %s" % st)
        st, _, _ = get(base + "/healthz", ca=ca)
        if st != 200:
            h.fail("https: /healthz answered %s" % st)
        st, _, _ = get("http://127.0.0.1:%d/metrics" % d.metrics_port, auth)
        if st is not None:
            h.fail("https: plain HTTP on the HTTPS port got an HTTP answer (%s)" % st)
        st, _, _ = get(base + "/metrics", auth, ca=os.path.join(certs, "other-ca.pem"))
        if st is not None:
            h.fail("https: a client trusting another CA got an answer (%s)" % st)

        prom_bin = h.find_tool("prometheus", "PROMETHEUS")
        if prom_bin:
            target = "127.0.0.1:%d" % d.metrics_port
            job = {"scheme": "https", "tls_config": {"ca_file": ca},
                   "authorization": {"type": "Bearer", "credentials_file": tok}}
            prom = h.Prometheus(prom_bin, [target], work, names={target: "node1"}, job=job)
            prom.start()
            h.wait_until(prom.targets_up, "Prometheus to scrape stratad over HTTPS with the token")
            h.wait_until(lambda: prom.query("count(strata_build_info)") == 1,
                         "Prometheus to hold strata_build_info from the HTTPS target")
            print("ok: https: a real Prometheus scrapes with scheme https, ca_file and a "
                  "bearer token", flush=True)
        else:
            print("SKIP (Prometheus part): prometheus is not installed", flush=True)
    finally:
        if prom:
            prom.stop()
        d.stop()
    print("ok: https: token required, promtool passes, HTTP and a foreign CA get nothing",
          flush=True)


def case_badcert(args, work, certs):
    d = Daemon(args.stratad, work, "badcert",
               ["--metrics-listen", "127.0.0.1:0",
                "--metrics-tls-cert", os.path.join(certs, "server.pem"),
                "--metrics-tls-key", os.path.join(certs, "server2.key")], expect_start=False)
    d.stop()
    if "metrics http: cannot start HTTPS" not in d.log_text():
        h.fail("badcert: the refusal does not say why:\n%s" % d.log_text()[-2000:])
    d = Daemon(args.stratad, work, "halfcert",
               ["--metrics-listen", "127.0.0.1:0",
                "--metrics-tls-cert", os.path.join(certs, "server.pem")], expect_start=False)
    d.stop()
    if "metrics_tls_cert and metrics_tls_key go together" not in d.log_text():
        h.fail("halfcert: the refusal does not say why:\n%s" % d.log_text()[-2000:])
    print("ok: badcert: a key of another certificate, or no key, is refused", flush=True)


def served_cert(port):
    """The DER certificate a new TLS connection to 127.0.0.1:port gets."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as so:
        with ctx.wrap_socket(so, server_hostname="127.0.0.1") as t:
            return t.getpeercert(binary_form=True)


def pem_der(path):
    return ssl.PEM_cert_to_DER_cert(open(path).read())


def case_sighup(args, work, certs):
    live = os.path.join(work, "live")
    os.makedirs(live, exist_ok=True)
    cert, key = os.path.join(live, "metrics.pem"), os.path.join(live, "metrics.key")
    shutil.copy(os.path.join(certs, "server.pem"), cert)
    shutil.copy(os.path.join(certs, "server.key"), key)
    tok = os.path.join(work, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    d = Daemon(args.stratad, work, "sighup", ["--metrics-listen", "127.0.0.1:0",
                                              "--metrics-tls-cert", cert, "--metrics-tls-key", key,
                                              "--metrics-token-file", tok])
    auth = {"Authorization": "Bearer " + TOKEN}
    base = "https://127.0.0.1:%d/metrics" % d.metrics_port
    try:
        if served_cert(d.metrics_port) != pem_der(os.path.join(certs, "server.pem")):
            h.fail("sighup: the metrics server does not serve server.pem at start")
        with open(key, "w") as f:
            f.write("not a key\n")
        d.proc.send_signal(signal.SIGHUP)
        h.wait_until(lambda: "the metrics TLS files were not taken" in d.log_text(),
                     "stratad to refuse the broken metrics key", limit_s=10)
        if served_cert(d.metrics_port) != pem_der(os.path.join(certs, "server.pem")):
            h.fail("sighup: a refused reload changed the certificate")
        st, _, _ = get(base, auth, ca=os.path.join(certs, "ca.pem"))
        if st != 200:
            h.fail("sighup: after a refused reload /metrics answered %s" % st)
        shutil.copy(os.path.join(certs, "server-other.pem"), cert)
        shutil.copy(os.path.join(certs, "server-other.key"), key)
        d.proc.send_signal(signal.SIGHUP)
        want = pem_der(os.path.join(certs, "server-other.pem"))
        h.wait_until(lambda: served_cert(d.metrics_port) == want,
                     "the metrics server to serve the new certificate", limit_s=10)
        st, _, body = get(base, auth, ca=os.path.join(certs, "other-ca.pem"))
        if st != 200 or b"strata_build_info" not in body:
            h.fail("sighup: /metrics with the new certificate answered %s" % st)
        st, _, _ = get(base, ca=os.path.join(certs, "other-ca.pem"))
        if st != 401:
            h.fail("sighup: the token is no longer asked for after a reload (%s)" % st)
        if d.proc.poll() is not None:
            h.fail("sighup: stratad exited")
    finally:
        d.stop()
    print("ok: sighup: the metrics certificate is replaced on the same port; bad files refused",
          flush=True)


def serve_and_scrape(what, argv, ca):
    """Runs argv (which lingers with its metrics server), reads metrics_port=N from
    its stdout, checks HTTPS with and without the token, then stops it."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stdout:
            m = re.search(r"metrics_port=(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            h.fail("%s: no metrics_port line; stderr: %s" % (what, proc.stderr.read()[-2000:]))
        base = "https://127.0.0.1:%d/metrics" % port
        st, _, body = get(base, {"Authorization": "Bearer " + TOKEN}, ca=ca)
        if st != 200 or b"# TYPE" not in body:
            h.fail("%s: /metrics over HTTPS with the token answered %s" % (what, st))
        st, hd, _ = get(base, ca=ca)
        if st != 401 or "www-authenticate" not in hd:
            h.fail("%s: /metrics without the token answered %s" % (what, st))
    finally:
        proc.kill()
        proc.wait()


def case_client(args, work, certs):
    if not args.strata and not args.engine:
        print("SKIP (client): no --strata or --engine", flush=True)
        return
    ca = os.path.join(certs, "ca.pem")
    tok = os.path.join(work, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    # One daemon for both programs, on a known port.
    port = h.free_port()
    log = open(os.path.join(work, "stratad-client.log"), "wb")
    proc = subprocess.Popen([args.stratad, "--listen", "127.0.0.1:%d" % port, "--transport",
                             "none", "--memory-limit", "256M", "--cluster-secret",
                             "metrics-tls-test-secret"], stdout=subprocess.PIPE, stderr=log)
    if "stratad ready" not in proc.stdout.readline().decode():
        h.fail("client: stratad did not start")
    node = "127.0.0.1:%d" % port
    sec = ["--metrics-tls-cert", os.path.join(certs, "server.pem"),
           "--metrics-tls-key", os.path.join(certs, "server.key"), "--metrics-token-file", tok]
    try:
        progs = []
        if args.strata:
            progs.append(("strata bench", [args.strata, "bench", "--nodes", node, "--sessions",
                                           "1", "--turns", "1", "--prompt-tokens", "256",
                                           "--metrics-linger", "60s"]))
        if args.engine:
            progs.append(("strata-engine", [args.engine, "--nodes", node, "--turns", "1",
                                            "--history-tokens", "256", "--decode-tokens", "1",
                                            "--metrics-linger", "60s"]))
        for what, argv in progs:
            p = subprocess.run(argv + ["--metrics-listen", "0.0.0.0:0"], capture_output=True,
                               text=True, timeout=120)
            if p.returncode == 0 or "refusing to serve /metrics" not in p.stderr:
                h.fail("%s: a non-loopback --metrics-listen in the clear was not refused "
                       "(rc %d): %s" % (what, p.returncode, p.stderr[-1000:]))
            serve_and_scrape(what, argv + ["--metrics-listen", "127.0.0.1:0"] + sec, ca)
    finally:
        proc.terminate()
        proc.wait()
        log.close()
    print("ok: client: strata bench and strata-engine refuse 0.0.0.0 in the clear and serve "
          "HTTPS behind the token", flush=True)


CASES = {"cors": case_cors, "public": case_public, "https": case_https,
         "badcert": case_badcert, "sighup": case_sighup, "client": case_client}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--certs-script", required=True)
    ap.add_argument("--case", choices=sorted(CASES), default=None)
    ap.add_argument("--strata", default=None, help="the strata CLI, for the client case")
    ap.add_argument("--engine", default=None, help="strata-engine, for the client case")
    args = ap.parse_args()
    if not h.find_tool("promtool", "PROMTOOL"):
        h.skip("promtool is not installed (Debian: apt-get install prometheus)")
    if shutil.which("openssl") is None:
        h.skip("the openssl CLI is not installed (Debian: apt-get install openssl)")
    work = tempfile.mkdtemp(prefix="strata-metrics-tls-")
    try:
        certs = os.path.join(work, "certs")
        subprocess.run(["bash", args.certs_script, certs], check=True)
        for name, fn in CASES.items():
            if args.case in (None, name):
                fn(args, work, certs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("test_metrics_tls: all passed", flush=True)


if __name__ == "__main__":
    main()
