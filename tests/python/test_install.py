#!/usr/bin/python3
"""`pip install client/python` offline with Debian's setuptools, pip and
wheel (--no-build-isolation --no-deps --no-index) into a temporary target,
from a copy of the folder with libstrata.so placed next to the package;
then, in a fresh interpreter that sees only that target: the package is the
installed one (with py.typed), libstrata is found next to it without
STRATA_LIB, $STRATA_LIB wins over it when set, and one call reaches a real
daemon (connect, hash, put, lookup). Uninstalled, the package in the
checkout finds the checkout's build tree."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from obs_harness import free_port  # noqa: E402

PROBE = r"""
import json, os, sys
import strata
c = strata.Client(sys.argv[1], tenant="acme", model="install")
chain = c.hash(list(range(c.block_tokens * 2)))
st = c.put(chain, [(0, strata.KV, 0, b"k" * 64), (1, strata.KV, 0, b"v" * 64)])
print(json.dumps({"file": strata.__file__, "lib": strata.library_path, "put": st,
                  "matched": c.lookup(chain).matched_blocks,
                  "typed": os.path.exists(os.path.join(os.path.dirname(strata.__file__),
                                                       "py.typed"))}))
c.close()
"""


def probe(site, peer, env_lib):
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = site
    if env_lib:
        env["STRATA_LIB"] = env_lib
    out = subprocess.run([sys.executable, "-c", PROBE, peer], env=env, cwd=site,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--package", required=True, help="client/python")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="strata-install-")
    src, site = os.path.join(tmp, "src"), os.path.join(tmp, "site")
    shutil.copytree(args.package, src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                     "*.egg-info"))
    shutil.copy(args.lib, os.path.join(src, "strata", "libstrata.so"))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                          "--no-deps", "--no-index", "--target", site, src],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    pkg = os.path.join(site, "strata")
    for f in ("__init__.py", "client.py", "params.py", "py.typed", "libstrata.so"):
        assert os.path.exists(os.path.join(pkg, f)), f
    port = free_port()
    d = subprocess.Popen([args.stratad, "--listen", "127.0.0.1:%d" % port],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = d.stdout.readline().decode()
        assert "stratad ready" in line, line
        peer = "127.0.0.1:%d" % port
        got = probe(site, peer, None)
        assert got["file"].startswith(pkg), got
        assert got["lib"] == os.path.join(pkg, "libstrata.so"), got
        assert got["put"] == [0, 0] and got["matched"] == 2 and got["typed"], got
        got = probe(site, peer, os.path.abspath(args.lib))
        assert got["lib"] == os.path.abspath(args.lib), got
        # Uninstalled, from the checkout, without STRATA_LIB: the checkout's build tree.
        root = os.path.dirname(os.path.dirname(os.path.abspath(args.package)))
        got = probe(os.path.abspath(args.package), peer, None)
        assert got["lib"].startswith(os.path.join(root, "build") + os.sep), got
    finally:
        d.terminate()
        d.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("installed with pip from the checkout; libstrata next to the package, STRATA_LIB "
          "first, the build tree uninstalled; one call against a daemon")


if __name__ == "__main__":
    main()
