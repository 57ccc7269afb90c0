"""mh_netns.py - several hosts on one machine for the multi-host tests.

A Net is a "switch" namespace holding a bridge, and one namespace per host,
each joined to the bridge by a veth pair whose host end is eth0 with a private
address 10.213.0.N/24 (nothing routes it out: the namespaces have no default
route and no link to the machine's own namespace). A partition takes the
switch end of a host's veth down; healing brings it up again.

Everything made here is removed by Net.close(), which atexit and the SIGINT /
SIGTERM handlers call too, so a failing or interrupted test leaves no
namespace, veth or process behind; a run killed with SIGKILL leaves its
namespaces, and the next Net removes those whose creator is gone (the
creator's pid is in the name).

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; skip() otherwise.
Standard library only; run with /usr/bin/python3.
"""

import atexit
import os
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77
SUBNET = "10.213.0"
PREFIX = "stmh"  # every namespace name starts stmh<creator pid>-


def skip(message):
    print("SKIP: " + message, flush=True)
    sys.exit(SKIP)


def _run(argv, check=True):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(argv), r.stderr.strip()))
    return r


def can_make_namespaces():
    """None when this process may create namespaces and veths, else why not."""
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    probe = "%s%d-probe" % (PREFIX, os.getpid())
    r = _run(["ip", "netns", "add", probe], check=False)
    if r.returncode != 0:
        return "ip netns add is not permitted here: " + r.stderr.strip()
    _run(["ip", "netns", "del", probe], check=False)
    return None


def sweep_stale():
    """Removes namespaces of earlier runs whose creating process is gone."""
    r = _run(["ip", "netns", "list"], check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-")[0]
        if pid.isdigit() and not os.path.exists("/proc/" + pid):
            _run(["ip", "netns", "del", name], check=False)


class Net:
    """A switch namespace and hosts "h0".."h{n-1}" on 10.213.0.{1..n}."""

    def __init__(self, hosts):
        sweep_stale()
        self.tag = "%s%d" % (PREFIX, os.getpid())
        self.switch = self.tag + "-sw"
        self.hosts = {}  # name -> (namespace, address)
        self.procs = []  # every Popen started in a namespace, ended by close()
        self._closed = False
        atexit.register(self.close)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self._ns_add(self.switch)
        _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
        for i, name in enumerate(hosts):
            self.add_host(name, i + 1)

    def _on_signal(self, signum, frame):
        self.close()
        sys.exit(128 + signum)

    def _ns_add(self, ns):
        _run(["ip", "netns", "add", ns])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def add_host(self, name, index):
        """Namespace <tag>-<name>, eth0 = 10.213.0.<index>/24 on the switch."""
        ns = "%s-%s" % (self.tag, name)
        port = "p%d" % index
        self._ns_add(ns)
        # Both ends are made inside the new namespaces: nothing of the pair
        # ever exists in the machine's own namespace.
        _run(["ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name",
              "eth0", "netns", ns])
        _run(["ip", "-n", self.switch, "link", "set", port, "master", "br0"])
        _run(["ip", "-n", self.switch, "link", "set", port, "up"])
        addr = "%s.%d" % (SUBNET, index)
        _run(["ip", "-n", ns, "addr", "add", addr + "/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        self.hosts[name] = (ns, addr, port)
        return addr

    def addr(self, name):
        return self.hosts[name][1]

    def ns(self, name):
        return self.hosts[name][0]

    def cut(self, name):
        """Partitions host name from every other host (its switch port down)."""
        _run(["ip", "-n", self.switch, "link", "set", self.hosts[name][2], "down"])

    def heal(self, name):
        _run(["ip", "-n", self.switch, "link", "set", self.hosts[name][2], "up"])

    def loss(self, name, percent):
        """netem packet loss on host name's switch port (0: removes it)."""
        port = self.hosts[name][2]
        _run(["tc", "-n", self.switch, "qdisc", "del", "dev", port, "root"], check=False)
        if percent > 0:
            _run(["tc", "-n", self.switch, "qdisc", "add", "dev", port, "root", "netem", "loss",
                  "%g%%" % percent])

    def has_netem(self):
        """Whether tc's netem qdisc (the sch_netem module) is there."""
        port = next(iter(self.hosts.values()))[2]
        r = _run(["tc", "-n", self.switch, "qdisc", "add", "dev", port, "root", "netem", "loss",
                  "0%"], check=False)
        _run(["tc", "-n", self.switch, "qdisc", "del", "dev", port, "root"], check=False)
        return r.returncode == 0

    def popen(self, name, argv, **kw):
        """Starts argv inside host name's namespace; close() ends it.
        `ip netns exec` execs argv, so the Popen's pid is argv's own."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(name)] + list(argv), **kw)
        self.procs.append(p)
        return p

    def run(self, name, argv, timeout=60, **kw):
        return subprocess.run(["ip", "netns", "exec", self.ns(name)] + list(argv),
                              timeout=timeout, **kw)

    def close(self):
        """Ends every process started here, then removes the namespaces (and
        with them the veths and the bridge). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns, _, _ in self.hosts.values():
            _run(["ip", "netns", "del", ns], check=False)
        _run(["ip", "netns", "del", self.switch], check=False)
        left = [n for n in _run(["ip", "netns", "list"], check=False).stdout.split()
                if n.startswith(self.tag + "-")]
        if left:
            time.sleep(0.5)
            for n in left:
                _run(["ip", "netns", "del", n], check=False)
