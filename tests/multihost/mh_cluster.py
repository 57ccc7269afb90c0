"""mh_cluster.py - stratad daemons in the namespaces of a Net (mh_netns.py).

Daemon i runs in host "n<i>" at 10.213.0.<i+1>:7700 with its own data dir,
static peers over those addresses and its data plane forced onto TCP:
UCX_TLS=tcp on eth0 (UCX would pick shared memory between processes of one
machine otherwise), or libfabric's tcp;ofi_rxm on eth0.

Standard library only; run with /usr/bin/python3.
"""

import os
import select
import shutil
import signal
import subprocess
import time

GRPC_PORT = 7700
SECRET = "multihost-test-cluster-secret"
TOKEN = "multihost-test-token-0123456789"


def transport_env(transport):
    """Environment that keeps a data plane on TCP over eth0."""
    env = dict(os.environ)
    env.update({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0", "FI_PROVIDER": "tcp;ofi_rxm",
                "FI_TCP_IFACE": "eth0", "FI_SOCKETS_IFACE": "eth0"})
    if transport != "libfabric":
        env.pop("FI_PROVIDER")
    return env


class Daemon:
    def __init__(self, cluster, index):
        self.cluster = cluster
        self.index = index
        self.host = "n%d" % index
        self.proc = None
        self.log_path = os.path.join(cluster.root, "%s.log" % self.host)
        self.data_dir = os.path.join(cluster.root, "data-%s" % self.host)
        self.starts = 0

    @property
    def addr(self):
        return "%s:%d" % (self.cluster.net.addr(self.host), GRPC_PORT)

    def argv(self):
        c = self.cluster
        # The peers live in a file that a member change rewrites and SIGHUP
        # re-reads (static mode, with rebalancing: docs/testing.md).
        # With etcd, the members are those registered there (docs/membership.md).
        if c.etcd:
            peers = ["--etcd", c.etcd, "--etcd-ttl", str(c.etcd_ttl)]
        elif c.peers_file:
            peers = ["--config", c.peers_file]
        else:
            peers = ["--peers", c.peers()]
        a = [c.stratad, "--listen", self.addr, "--node-id", self.host] + peers + [
             "--cluster-secret", SECRET, "--auth-token", TOKEN, "--memory-limit", c.memory,
             "--chunk-bytes", c.chunk, "--max-object", c.max_object, "--threads", "2",
             "--replicas", str(c.replicas),
             "--transport", c.transport]
        if c.transport == "libfabric":
            a += ["--fabric-provider", "tcp;ofi_rxm"]
        if c.drain_on_term:
            a += ["--drain-on-term"]
        if c.data:  # durable objects (KDA, sessions) need an SSD tier
            a += ["--data-dir", self.data_dir, "--ssd-sync", "none", "--ssd-map-size", "256M"]
        return a + list(c.extra)

    def start(self, env_extra=None):
        os.makedirs(self.data_dir, exist_ok=True)
        env = transport_env(self.cluster.transport)
        env.update(env_extra or {})
        log = open(self.log_path, "a")
        log.write("=== start %d: %s\n" % (self.starts, " ".join(self.argv())))
        log.flush()
        self.proc = self.cluster.net.popen(self.host, self.argv(), stdout=subprocess.PIPE,
                                           stderr=log, env=env)
        log.close()
        self.starts += 1
        self._wait_ready(60.0)

    def _wait_ready(self, limit_s):
        deadline = time.monotonic() + limit_s
        buf = b""
        fd = self.proc.stdout.fileno()
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.5)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
                if b"stratad ready" in buf and b"\n" in buf:
                    return
            elif self.proc.poll() is not None:
                break
        raise RuntimeError("%s did not become ready (exit %s); its log %s ends:\n%s" %
                           (self.host, self.proc.poll(), self.log_path, tail(self.log_path)))

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=30):
        """SIGTERM, then SIGKILL; returns the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


def stratad_flags(stratad):
    """The flags `stratad --help` lists."""
    r = subprocess.run([stratad, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return set(w.strip(",.;:") for w in r.stdout.split() if w.startswith("--"))


class Etcd:
    """etcd (scripts/etcd.sh) in host name of net: started, stopped and
    started again on the same data; stopped too once this process is gone."""

    def __init__(self, net, host, root, port=2379):
        self.net, self.host, self.port = net, host, port
        self.dir = os.path.join(root, "etcd")
        self.script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                   "scripts", "etcd.sh")
        self.endpoint = "http://%s:%d" % (net.addr(host), port)
        self.pid = 0

    def start(self):
        env = dict(os.environ, ETCD_WATCH_PID=str(os.getpid()))
        r = self.net.run(self.host, ["bash", self.script, "start", str(self.port), self.dir,
                                     self.net.addr(self.host)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError("etcd did not start in %s: %s" % (self.host, r.stderr))
        self.pid = int(r.stdout.split()[-1])

    def stop(self):
        if self.pid:
            subprocess.run(["bash", self.script, "stop", str(self.pid)], check=False)
            self.pid = 0


class Cluster:
    """n daemons on hosts n0..n{n-1} of net (which must have them), members of
    the ring; with spares, hosts n{n}..n{n+spares-1} are slots that a node
    added later takes. members_file: the peers go into a config file that
    set_members() rewrites and SIGHUP re-reads. etcd: its endpoint, where the
    daemons register (in place of peers) with a lease of etcd_ttl seconds."""

    def __init__(self, net, stratad, n, root, transport="ucx", replicas=2, extra=(),
                 memory="128M", chunk="8M", max_object="4M", data=True, spares=0,
                 members_file=False, drain_on_term=False, etcd="", etcd_ttl=4):
        self.net = net
        self.etcd, self.etcd_ttl = etcd, etcd_ttl
        members_file = members_file and not etcd
        self.memory, self.chunk, self.max_object = memory, chunk, max_object
        self.data = data
        self.stratad = stratad
        self.root = root
        self.transport = transport
        self.replicas = replicas
        self.extra = list(extra)
        self.drain_on_term = drain_on_term
        self.slots = [Daemon(self, i) for i in range(n + spares)]
        self.daemons = self.slots[:n]  # the members, in ring order
        self.peers_file = os.path.join(root, "peers.ini") if members_file else ""
        if self.peers_file:
            os.makedirs(root, exist_ok=True)
            self.write_peers()

    def peers(self):
        return ",".join(d.addr for d in self.daemons)

    def write_peers(self):
        """Writes the members into the peers file (renamed into place: a
        daemon never reads half a file)."""
        tmp = self.peers_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("peers = %s\n" % self.peers())
        os.rename(tmp, self.peers_file)

    def set_members(self, daemons):
        """Makes daemons the members: the peers file, then SIGHUP to each
        running member (with etcd: only the list; they registered there)."""
        self.daemons = list(daemons)
        if self.etcd:
            return
        self.write_peers()
        for d in self.daemons:
            if d.alive():
                d.proc.send_signal(signal.SIGHUP)

    def spare(self):
        """A slot that is not a member, or None."""
        return next((d for d in self.slots if d not in self.daemons), None)

    def start(self, env_for=None):
        """Starts every member; env_for(i) may add environment for daemon i."""
        for d in self.daemons:
            d.start(env_for(d.index) if env_for else None)

    def stop(self):
        for d in self.slots:
            d.stop()

    def wipe(self):
        shutil.rmtree(self.root, ignore_errors=True)


def tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(%s)" % e
