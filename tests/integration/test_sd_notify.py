#!/usr/bin/python3
"""test_sd_notify.py - stratad's sd_notify(3) datagrams, seen by a socket this
test listens on as systemd would (cached/notify.c, docs/operations.md
"Readiness").

- READY=1 comes only once the daemon serves: at the moment it arrives, the
  gRPC port and the metrics port accept a connection (one attempt, no retry)
  and grpc.health.v1.Health/Check answers SERVING; "STATUS=recovering the SSD
  tier" came before it (a data_dir is set), and READY's STATUS= names the
  gRPC port;
- WATCHDOG_USEC set: WATCHDOG=1 repeats; WATCHDOG_PID of another process:
  no WATCHDOG=1;
- SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1 again;
- SIGTERM: STOPPING=1, then exit 0;
- an abstract socket (NOTIFY_SOCKET=@name) gets READY=1 too;
- a NOTIFY_SOCKET nobody listens on: the daemon serves all the same.

Run with Debian's python3 (python3-grpcio).
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from obs_harness import fail, free_port, stop_process  # noqa: E402

LIMIT_S = 60.0  # a guard against a hang, not a speed assertion


class Notify:
    """A datagram socket standing in for systemd's notification socket."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.seen = []

    def recv(self, limit_s=LIMIT_S):
        """The next datagram as {key: value}, or None after limit_s."""
        self.sock.settimeout(limit_s)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return None
        msg = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
        self.seen.append(msg)
        return msg

    def wait_for(self, key, what, limit_s=LIMIT_S):
        """Datagrams until one carries key; fails naming what after limit_s."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            msg = self.recv(max(0.05, deadline - time.monotonic()))
            if msg is not None and key in msg:
                return msg
        fail("no %s= datagram (%s) within %.0f s; seen: %s" % (key, what, limit_s, self.seen))

    def count(self, key, window_s):
        """How many datagrams carrying key arrive within window_s."""
        n, deadline = 0, time.monotonic() + window_s
        while time.monotonic() < deadline:
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            if msg is not None and key in msg:
                n += 1
        return n

    def close(self):
        self.sock.close()


def start(stratad, work, name, env_extra, data_dir=True):
    """Starts stratad with the given environment; returns (proc, port, metrics_port)."""
    port, mport = free_port(), free_port()
    args = [stratad, "--listen", "127.0.0.1:%d" % port, "--metrics-listen",
            "127.0.0.1:%d" % mport, "--transport", "none", "--memory-limit", "256M",
            "--cluster-secret", "sd-notify-test-secret-0123456789", "--ssd-sync", "none",
            "--ssd-map-size", "64M"]
    if data_dir:
        d = os.path.join(work, name + ".data")
        os.makedirs(d, exist_ok=True)
        args += ["--data-dir", d]
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    env.update(env_extra)
    log = open(os.path.join(work, name + ".log"), "w")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, port, mport


def connects(port):
    """One TCP connect to 127.0.0.1:port, no retry."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
        return True
    except OSError:
        return False


def health(port):
    """grpc.health.v1.Health/Check of the whole server, one attempt."""
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        try:
            resp = check(b"", timeout=5.0)
        except grpc.RpcError as e:
            return "error %s" % e.code()
    return "SERVING" if resp == b"\x08\x01" else "answer %r" % resp


def expect_exit(proc, what):
    code = stop_process(proc, LIMIT_S)
    if code != 0:
        fail("%s: stratad exited with %s after SIGTERM" % (what, code))


def test_ready_reload_stop(stratad, work):
    n = Notify(os.path.join(work, "notify.sock"))
    proc, port, mport = start(stratad, work, "main", {
        "NOTIFY_SOCKET": os.path.join(work, "notify.sock"), "WATCHDOG_USEC": "300000"})
    try:
        ready = n.wait_for("READY", "readiness")
        # At once, before anything else: one connect each, no retry.
        grpc_up, metrics_up = connects(port), connects(mport)
        if not grpc_up or not metrics_up:
            fail("READY=1 arrived before the listeners were up: gRPC port %d %s, metrics port "
                 "%d %s" % (port, "accepts" if grpc_up else "refuses",
                            mport, "accepts" if metrics_up else "refuses"))
        h = health(port)
        if h != "SERVING":
            fail("READY=1 arrived but Health/Check answers %s" % h)
        if "port=%d" % port not in ready.get("STATUS", ""):
            fail("READY's STATUS= does not name port=%d: %r" % (port, ready.get("STATUS")))
        before = [m.get("STATUS", "") for m in n.seen[:-1]]
        if not any(s.startswith("recovering the SSD tier") for s in before):
            fail("no 'STATUS=recovering the SSD tier' before READY=1: %s" % n.seen)
        print("ok: READY=1 after both listeners and Health SERVING; STATUS=%s" % ready["STATUS"])

        pings = n.count("WATCHDOG", 1.5)
        if pings < 3:
            fail("WATCHDOG_USEC=300000: %d WATCHDOG=1 in 1.5 s (want 3 or more)" % pings)
        print("ok: %d WATCHDOG=1 in 1.5 s" % pings)

        proc.send_signal(signal.SIGHUP)
        rel = n.wait_for("RELOADING", "SIGHUP")
        if not rel.get("MONOTONIC_USEC", "").isdigit():
            fail("RELOADING=1 without MONOTONIC_USEC: %r" % rel)
        n.wait_for("READY", "after the reload")
        print("ok: SIGHUP gives RELOADING=1, then READY=1")

        proc.send_signal(signal.SIGTERM)
        stop = n.wait_for("STOPPING", "SIGTERM")
        print("ok: SIGTERM gives STOPPING=1 (STATUS=%s)" % stop.get("STATUS"))
        expect_exit(proc, "after STOPPING=1")
    finally:
        stop_process(proc, LIMIT_S)
        n.close()


def test_foreign_watchdog_and_abstract(stratad, work):
    name = "strata-notify-%d" % os.getpid()
    n = Notify("\0" + name)
    proc, port, _ = start(stratad, work, "abstract", {
        "NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "300000", "WATCHDOG_PID": "1"},
        data_dir=False)
    try:
        n.wait_for("READY", "abstract socket")
        if not connects(port):
            fail("abstract socket: READY=1 before the gRPC port %d accepts" % port)
        pings = n.count("WATCHDOG", 1.0)
        if pings != 0:
            fail("WATCHDOG_PID=1 (another process): %d WATCHDOG=1 sent" % pings)
        print("ok: abstract NOTIFY_SOCKET gets READY=1; no WATCHDOG=1 for WATCHDOG_PID=1")
        expect_exit(proc, "abstract socket")
    finally:
        stop_process(proc, LIMIT_S)
        n.close()


def test_nobody_listening(stratad, work):
    proc, port, _ = start(stratad, work, "nobody", {
        "NOTIFY_SOCKET": os.path.join(work, "absent.sock")}, data_dir=False)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not connects(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                fail("NOTIFY_SOCKET nobody listens on: stratad did not serve (exit %s)"
                     % proc.poll())
            time.sleep(0.1)
        if health(port) != "SERVING":
            fail("NOTIFY_SOCKET nobody listens on: Health/Check is not SERVING")
        expect_exit(proc, "NOTIFY_SOCKET nobody listens on")
        with open(os.path.join(work, "nobody.log")) as f:
            if "cannot notify the service manager" not in f.read():
                fail("a failed notification was not logged")
        print("ok: a NOTIFY_SOCKET nobody listens on is logged and does not stop the daemon")
    finally:
        stop_process(proc, LIMIT_S)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stratad", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-notify-") as work:
        test_ready_reload_stop(args.stratad, work)
        test_foreign_watchdog_and_abstract(args.stratad, work)
        test_nobody_listening(args.stratad, work)
    print("test_sd_notify: all passed")


if __name__ == "__main__":
    main()
