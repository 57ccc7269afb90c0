"""A throwaway etcd-server for a Python test, through scripts/etcd.sh: every
test starts its own (none is assumed to be running).

    with Etcd(repo_root) as etcd:       # skips (exit 77) without etcd-server
        etcd.endpoint                   # "http://127.0.0.1:PORT"
        etcd.ctl("get", "--prefix", "/strata/")
        etcd.restart()
"""
import os
import shutil
import subprocess
import sys
import tempfile

from obs_harness import free_port


def _plain_env():
    """The environment without a preloaded sanitizer runtime (a sanitized
    libstrata in this python needs one; etcd and etcdctl must not get it)."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}


class Etcd:
    def __init__(self, root, skip_missing=True):
        self.script = os.path.join(root, "scripts", "etcd.sh")
        self.pid = 0
        self.port = 0
        self.dir = tempfile.mkdtemp(prefix="strata-etcd-")
        self.skip_missing = skip_missing

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def _launch(self):
        # ETCD_WATCH_PID: etcd goes when this test does, however it ends.
        r = subprocess.run(["bash", self.script, "start", str(self.port), self.dir],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(_plain_env(), ETCD_WATCH_PID=str(os.getpid())))
        if r.returncode == 2 and self.skip_missing:
            print("SKIP: " + r.stderr.strip())
            sys.exit(77)
        if r.returncode != 0:
            raise RuntimeError("etcd did not start: " + r.stderr)
        self.pid = int(r.stdout.strip())

    def start(self):
        for _ in range(5):
            self.port = free_port()
            try:
                self._launch()
                return self
            except RuntimeError:
                continue
        raise RuntimeError("etcd did not start on 5 free ports")

    def stop(self):
        if self.pid:
            subprocess.run(["bash", self.script, "stop", str(self.pid)], env=_plain_env())
            self.pid = 0

    def restart(self):
        self.stop()
        self._launch()

    def ctl(self, *args):
        env = dict(_plain_env(), ETCDCTL_API="3")
        r = subprocess.run(["etcdctl", "--endpoints", self.endpoint] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError("etcdctl %s: %s" % (" ".join(args), r.stderr))
        return r.stdout

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
