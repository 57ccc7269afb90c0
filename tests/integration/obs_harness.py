"""obs_harness.py - helpers shared by the observability integration tests.

Starts programs that print "port=N" when listening, fetches their /stats and
/metrics, runs a real Prometheus server that scrapes them and queries its
HTTP API. Nothing here knows about the stand-in daemon (metrics_testd): the
3-daemon cluster test reuses it with real stratad processes.

Standard library only (urllib, subprocess); run with /usr/bin/python3.
"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP = 77


def skip(message):
    """Exits with ctest's skip code and says why."""
    print("SKIP: " + message, flush=True)
    sys.exit(SKIP)


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def stop_process(proc, timeout):
    """Ends proc: SIGTERM, then SIGKILL when it has not exited within timeout
    seconds. Returns its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def free_port():
    """A loopback TCP port nobody listens on right now, drawn below the
    kernel's ephemeral range: a port the kernel handed out and took back
    could go to another socket (a daemon's own UCX listener) before the
    daemon binds it (tests/support/cluster.c, tc_free_port)."""
    lo, hi = 10000, 32767
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph_lo = int(f.read().split()[0])
        hi = eph_lo - 1 if eph_lo > lo + 1000 else 0
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200 if hi > lo else 0):
        port = random.randint(lo, hi)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, what, limit_s=60.0, pause_s=0.2):
    """Calls check() until it returns a true value, which it returns.

    Gives up after limit_s (a guard against a hang, not a speed assertion)
    with an error naming what was awaited and the last exception seen.
    """
    deadline = time.monotonic() + limit_s
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (OSError, ValueError, KeyError, urllib.error.URLError) as e:
            last = e
        time.sleep(pause_s)
    fail("gave up waiting for %s after %.0f s (last error: %s)" % (what, limit_s, last))


def http_get(url, timeout=10.0):
    """Returns (status, headers dict with lower-case names, body bytes)."""
    req = urllib.request.Request(url, headers={"Accept": "*/*"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def get_stats(hostport):
    status, _, body = http_get("http://%s/stats" % hostport)
    if status != 200:
        raise ValueError("GET /stats on %s answered %d" % (hostport, status))
    return json.loads(body)


class Server:
    """A program that prints "port=N" on stdout once it listens."""

    def __init__(self, argv, name="server", log_dir=None):
        self.name = name
        self.argv = argv
        log_dir = log_dir or tempfile.gettempdir()
        self.log_path = os.path.join(log_dir, "%s.log" % name)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("port="):
            self.stop()
            fail("%s did not report its port (got %r); see %s" % (name, line, self.log_path))
        self.port = int(line[5:])
        self.hostport = "127.0.0.1:%d" % self.port

    def stop(self):
        """Stops the program with SIGTERM and returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
        return self.proc.returncode


def stop_all(servers):
    """Stops every server; fails naming any that exited with an error (a
    sanitizer report, say) and its log."""
    bad = []
    for s in servers:
        rc = s.stop()
        if rc != 0:
            bad.append("%s exited with %d (log: %s)" % (s.name, rc, s.log_path))
    if bad:
        fail("; ".join(bad))


class Prometheus:
    """A real Prometheus server scraping the given host:port targets.

    The config carries one job, "strata", with instance relabelled to the
    node name given per target (default: host:port), as in
    deploy/prometheus/prometheus.yml.
    """

    def __init__(self, binary, targets, workdir, scrape_interval="1s", names=None, job=None):
        """job: more keys of the scrape job (scheme, tls_config, authorization)."""
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        names = names or {}
        static = [
            {"targets": [t], "labels": {"node": names.get(t, t)}} for t in targets
        ]
        config = {
            "global": {"scrape_interval": scrape_interval,
                       "evaluation_interval": scrape_interval},
            "scrape_configs": [{
                "job_name": "strata",
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "static_configs": static,
                "relabel_configs": [{"source_labels": ["node"],
                                     "target_label": "instance"}],
            }],
        }
        config["scrape_configs"][0].update(job or {})
        # JSON is valid YAML, so no YAML library is needed.
        self.config_path = os.path.join(workdir, "prometheus.yml")
        with open(self.config_path, "w") as f:
            json.dump(config, f, indent=2)
        self.log_path = os.path.join(workdir, "prometheus.log")
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--config.file=" + self.config_path,
             "--storage.tsdb.path=" + os.path.join(self.workdir, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port,
             "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: self._ready(), "Prometheus to be ready (log: %s)" % self.log_path)
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            fail("prometheus exited with %d; see %s" % (self.proc.returncode, self.log_path))
        return http_get(self.url + "/-/ready", timeout=2)[0] == 200

    def api(self, path, **params):
        url = self.url + path + "?" + urllib.parse.urlencode(params)
        status, _, body = http_get(url)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise ValueError("%s: %s %s" % (path, doc.get("errorType"), doc.get("error")))
        return doc["data"]

    def query(self, expr):
        """Evaluates expr now. Returns a float for a one-element result,
        a dict {label values joined by ',': float} for several, None if empty."""
        data = self.api("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return float(data["result"][1])
        result = data["result"]
        if not result:
            return None
        if len(result) == 1:
            return float(result[0]["value"][1])
        return {",".join(v for _, v in sorted(r["metric"].items())): float(r["value"][1])
                for r in result}

    def targets_up(self):
        data = self.api("/api/v1/targets", state="active")
        active = data["activeTargets"]
        return active and all(t["health"] == "up" for t in active)

    def stop(self):
        if self.proc:
            stop_process(self.proc, 30)
            self.log.close()


def close_enough(got, want, rel=1e-9):
    if got is None or want is None:
        return got is want
    if isinstance(want, dict) or isinstance(got, dict):
        return (isinstance(got, dict) and isinstance(want, dict) and got.keys() == want.keys()
                and all(close_enough(got[k], want[k], rel) for k in want))
    return abs(got - want) <= rel * max(1.0, abs(want))


def find_tool(name, env_var):
    """The path of a tool from $env_var or PATH, or None."""
    path = os.environ.get(env_var) or shutil.which(name)
    return path if path and os.access(path, os.X_OK) else None


def require_tool(given, name, env_var, package):
    """given, else the tool find_tool finds; skips the test (saying which
    Debian package has it) when there is none."""
    path = given or find_tool(name, env_var)
    if not path:
        skip("%s is not installed (Debian: apt-get install %s)" % (name, package))
    return path


def finish(problems, work, message):
    """Fails with the problems, if any; else removes the work folder and
    says message."""
    if problems:
        fail("; ".join(problems))
    shutil.rmtree(work, ignore_errors=True)
    print(message, flush=True)
