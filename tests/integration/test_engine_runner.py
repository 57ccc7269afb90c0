#!/usr/bin/python3
"""test_engine_runner.py - strata-engine against three real stratad daemons.

- --help, and the exit codes: 2 for an unknown flag, a value out of range, a
  bad --pattern, a --metrics-listen that is not host:port and a block size
  that differs from the cluster's (each message naming the flag); 1 for an
  unreachable cluster (the message says so).
- Three small turns (640 tokens of history, +200 per turn, 16 decoded) with
  --progress: turn 1 reuses nothing and recomputes its prompt; turns 2 and 3
  reuse more than 0 tokens and recompute fewer than their prompt, and reused
  + recomputed = prompt; the progress bar was drawn on stderr; the summary's
  result line adds up the turns.
- --compare with a pool of 2 local blocks: turn 2's logits are within 1e-5 of
  a full recompute, and some of its rows come from the cluster.
- /metrics of the runner, scraped while it runs and again after the last turn
  (--metrics-linger): both pass `promtool check metrics`, and the totals
  (turns, prompt, reused and computed tokens, decoded tokens, the TTFT
  histogram's count) equal what the runner printed.

Without promtool (Debian: apt-get install prometheus) everything else is
checked and the test then exits 77 (skip), naming it.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs_harness as h  # noqa: E402

problems = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
    if not ok:
        problems.append(what)


def run(argv, timeout=120):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


class Daemon:
    def __init__(self, stratad, port, peers, workdir, i):
        self.log_path = os.path.join(workdir, "stratad-%d.log" % i)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [stratad, "--listen", "127.0.0.1:%d" % port, "--peers", peers,
             "--cluster-secret", "engine-runner-test-secret", "--memory-limit", "256M",
             "--segment-blocks", "4"],
            stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode()
        if "stratad ready" not in line:
            self.stop()
            h.fail("stratad %d did not start (%r); log %s" % (i, line, self.log_path))

    def stop(self):
        code = h.stop_process(self.proc, 20)
        self.log.close()
        return code


def metric(text, name, labels=None):
    """The value of one series of the exposition (the first match)."""
    for line in text.splitlines():
        m = re.match(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
        if m and (labels is None or labels in (m.group(1) or "")):
            return float(m.group(2))
    return None


def promtool_ok(promtool, text, when):
    if not promtool:
        print("SKIP: promtool check metrics %s: promtool is not installed" % when, flush=True)
        return
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=60)
    out = (r.stdout + r.stderr).decode(errors="replace").strip()
    check(r.returncode == 0 and not out,
          "promtool check metrics on the runner's /metrics %s (rc=%d %s)" %
          (when, r.returncode, out or "no findings"))


def usage_cases(engine, peers, work):
    rc, out, _ = run([engine, "--help"])
    check(rc == 0 and out.startswith("Usage: strata-engine") and "--metrics-listen" in out
          and "--history-tokens" in out and "--progress" in out, "--help exits 0 with the usage")
    cases = [
        (["--frob"], "--frob", "an unknown flag"),
        (["--turns", "0"], "--turns", "--turns 0 (out of range)"),
        (["--history-tokens", "many"], "--history-tokens", "a value that is not a number"),
        (["--pattern", "KXD"], "--pattern", "a pattern with a letter that is not K or D"),
        (["--metrics-listen", "9100"], "--metrics-listen", "--metrics-listen without a host"),
        (["--session", ""], "--session", "an empty session id"),
        (["--nodes", peers, "--block-tokens", "32"], "--block-tokens",
         "a block size that differs from the cluster's"),
    ]
    for args, flag, what in cases:
        rc, _, err = run([engine, "--turns", "1", "--history-tokens", "64"] + args)
        check(rc == 2 and flag in err, "%s: exit %d (want 2), message %r names %s" %
              (what, rc, err.strip().splitlines()[-1] if err.strip() else "", flag))
    bad_ini = os.path.join(work, "bad.ini")
    with open(bad_ini, "w") as f:
        f.write("[strata-engine]\nturns = 2\nbogus_key = 1\n")
    rc, _, err = run([engine, "--config", bad_ini])
    check(rc == 2 and "bogus_key" in err and "bad.ini:3" in err,
          "an unknown key in the --config file: exit %d (want 2), message %r" %
          (rc, err.strip()))
    rc, _, err = run([engine, "--nodes", "127.0.0.1:1", "--timeout", "500ms", "--turns", "1",
                      "--history-tokens", "64"])
    check(rc == 1 and "cannot connect to the cluster at 127.0.0.1:1" in err,
          "an unreachable cluster: exit %d (want 1), message %r" %
          (rc, err.strip().splitlines()[-1] if err.strip() else ""))


TURN = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+(\S+)\s+(\S+)$")


def workload_case(engine, peers, promtool, work):  # noqa: C901
    # The workload's shape from an INI file, the rest as flags.
    ini = os.path.join(work, "engine.ini")
    with open(ini, "w") as f:
        f.write("[strata-engine]\nturns = 3\nhistory_tokens = 640\nturn_tokens = 200\n"
                "decode_tokens = 16\n")
    argv = [engine, "--config", ini, "--nodes", peers, "--kda-interval", "4",
            "--session", "runner-test", "--progress", "--metrics-listen", "127.0.0.1:0",
            "--metrics-linger", "60s"]
    err_path = os.path.join(work, "runner.err")
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        first = proc.stdout.readline()
        m = re.match(r"^metrics_port=(\d+)$", first.strip())
        if not m:
            proc.kill()
            h.fail("strata-engine did not print metrics_port first (%r); stderr: %s" %
                   (first, open(err_path).read()))
        url = "http://127.0.0.1:%s/metrics" % m.group(1)
        # While it runs: after turn 1's line, before turn 2's.
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if TURN.match(line):
                break
        status, _, body = h.http_get(url)
        check(status == 200, "/metrics answers while the runner runs")
        text = body.decode()
        promtool_ok(promtool, text, "during the run")
        check(metric(text, "strata_engine_turns_total") == 1 and
              metric(text, "strata_engine_computed_tokens_total") == 640 and
              metric(text, "strata_engine_reused_tokens_total") == 0,
              "after turn 1: 1 turn, 640 tokens computed, 0 reused")
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("result "):
                break
        stdout = first + "".join(lines)
        print(stdout, flush=True)
        res = re.search(r"^result (.*)$", stdout, re.M)
        if res is None:
            proc.kill()
            h.fail("strata-engine did not finish; stderr: %s" % open(err_path).read())
        result = {k: float(v) for k, v in (kv.split("=") for kv in res.group(1).split())}
        turns = [tuple(int(x) if x.isdigit() else x for x in t.groups())
                 for t in map(TURN.match, stdout.splitlines()) if t]
        check(len(turns) == 3, "three per-turn lines (got %d)" % len(turns))
        for t in turns:
            n, prompt, reused, recomputed = t[0], t[1], t[2], t[3]
            check(reused + recomputed == prompt,
                  "turn %d: reused %d + recomputed %d = prompt %d" %
                  (n, reused, recomputed, prompt))
            if n == 1:
                check(reused == 0 and recomputed == prompt == 640,
                      "turn 1 reuses nothing and computes its 640 tokens")
            else:
                check(reused > 0 and recomputed < prompt,
                      "turn %d reuses %d tokens and recomputes %d of %d" %
                      (n, reused, recomputed, prompt))
                check(float(t[6]) > 0, "turn %d fetched %s MB" % (n, t[6]))
        check([t[1] for t in turns] == [640, 640 + 16 + 200, 640 + 2 * (16 + 200)],
              "prompts grow by the reply and the new tokens: %r" % [t[1] for t in turns])
        check(result.get("reused_tokens") == sum(t[2] for t in turns) and
              result.get("prompt_tokens") == sum(t[1] for t in turns) and
              result.get("computed_tokens") == sum(t[3] for t in turns),
              "the result line adds up the turns: %r" % result)

        # After the last turn, while the runner lingers.
        status, _, body = h.http_get(url)
        text = body.decode()
        promtool_ok(promtool, text, "after the run")
        want = {
            "strata_engine_turns_total": 3,
            "strata_engine_prompt_tokens_total": result["prompt_tokens"],
            "strata_engine_reused_tokens_total": result["reused_tokens"],
            "strata_engine_computed_tokens_total": result["computed_tokens"],
            "strata_engine_decoded_tokens_total": 3 * 16,
            "strata_engine_fetched_bytes_total": result["fetched_bytes"],
            "strata_engine_ttft_seconds_count": 3,
            "strata_engine_decode_token_seconds_count": 3 * 16,
        }
        for name, value in want.items():
            got = metric(text, name)
            check(got == value, "%s = %r (want %r)" % (name, got, value))
        check(metric(text, "strata_engine_reused_tokens_total") > 0,
              "the reused-token total is above 0")
        for src in ("local", "remote"):
            check(metric(text, "strata_engine_dsa_rows_total", 'source="%s"' % src) is not None,
                  "strata_engine_dsa_rows_total{source=%s} is exported" % src)
        check(metric(text, "strata_engine_overlap_efficiency_ratio") is not None,
              "strata_engine_overlap_efficiency_ratio is exported")
        check('namespace="default/reference-' in text,
              "series are labelled with the namespace default/reference-<fingerprint>")
    finally:
        proc.terminate()
        proc.wait()
    stderr = open(err_path).read()
    check("turn 1 prefill [" in stderr and "100%" in stderr,
          "--progress drew the prefill bar on stderr")


def compare_case(engine, peers, remote=False):
    """--compare with a pool of 2 local blocks: the later turn's resumed logits equal
    a full recompute, rows are read from the cluster, and the local hit rate shows.
    remote: with --remote-scoring too (near-data scoring, no fallback)."""
    extra = ["--remote-scoring", "--session", "runner-compare-remote"] if remote else \
        ["--session", "runner-compare"]
    rc, out, err = run([engine, "--nodes", peers, "--turns", "2", "--history-tokens", "320",
                        "--turn-tokens", "100", "--decode-tokens", "8", "--local-blocks", "2",
                        "--token-seed", "7", "--compare"] + extra)
    print(out, flush=True)
    check(rc == 0, "--compare --local-blocks 2%s exits %d (want 0): %s" %
          (" --remote-scoring" if remote else "", rc, err.strip()))
    if remote:
        check("near-data scoring" in out, "the header says near-data scoring")
        check("near-data scoring off" not in err, "no scoring fallback: %s" % err.strip())
    row = re.compile(r"^\s*2\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+([\d.]+)\s+(\S+)\s+"
                     r"([\d.]+)%\s+([\d.]+)\s+([\d.]+)x\s+(\S+)$", re.M)
    m = row.search(out)
    check(m is not None, "turn 2's line has the pool's local hit rate and the comparison")
    if m:
        check(int(m.group(2)) > 0, "turn 2 reuses %s tokens" % m.group(2))
        check(float(m.group(6)) < 100.0, "turn 2's local hit rate %s%% is below 100%%" %
              m.group(6))
        check(float(m.group(9)) <= 1e-5,
              "turn 2's logits are within 1e-5 of the full recompute (%s)" % m.group(9))


def images_case(engine, peers, work):
    """Images in the turns: a PPM file in turn 1 and a generated image in every turn. Turn 2
    resumes turn 1 (its images included) and hits the VIS object of the generated image's
    new copy; --compare recomputes with the same images; the result line counts them. Bad
    image files are usage errors naming the file."""
    ppm = os.path.join(work, "gradient.ppm")
    with open(ppm, "wb") as f:
        f.write(b"P6\n# a test image\n40 24\n255\n" +
                bytes((x * 6 + y + c * 50) % 256 for y in range(24) for x in range(40)
                      for c in range(3)))
    rc, out, err = run([engine, "--nodes", peers, "--turns", "2", "--history-tokens", "300",
                        "--turn-tokens", "100", "--decode-tokens", "4", "--image", ppm + "@150",
                        "--gen-images", "1", "--gen-image-size", "48x32", "--kda-interval", "2",
                        "--session", "runner-images", "--compare"])
    print(out, flush=True)
    check(rc == 0, "images: exits %d (want 0): %s" % (rc, err.strip()))
    check("vis_hit" in out and "encoder_ms" in out, "images: the table has vis_hit, encoder_ms")
    res = dict(kv.split("=") for kv in out.strip().splitlines()[-1].split()[1:])
    # turn 1: the file (3 x 2 patches) and one generated image; turn 2: the generated again.
    check(res.get("images") == "3", "images: 3 images placed (result %r)" % res.get("images"))
    check(res.get("vis_misses") == "2" and res.get("vis_hits") == "1",
          "images: 2 VIS misses (turn 1) and 1 hit (turn 2's copy): %r" % res)
    m = re.search(r"^\s*2\s+.*\s(\d+)/(\d+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+x\s+(\S+)$", out, re.M)
    check(m is not None and m.group(1) == "1" and float(m.group(4)) <= 1e-5,
          "images: turn 2 hits VIS 1/1 and its logits are within 1e-5 of the recompute")
    bad = os.path.join(work, "bad.ppm")
    with open(bad, "wb") as f:
        f.write(b"P6 4 4 65535\n" + bytes(96))
    for spec, want in [(bad + "@0", "maxval 65535"), (ppm, "FILE@POS"),
                       (os.path.join(work, "none.png") + "@3", "none.png"),
                       (ppm + "@9:3", "turn 9")]:
        rc, _, err = run([engine, "--nodes", peers, "--turns", "1", "--history-tokens", "64",
                          "--image", spec])
        check(rc == 2 and want in err, "--image %s: exit %d (want 2), message %r names %r" %
              (os.path.basename(spec), rc, err.strip(), want))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--engine", required=True, help="path of strata-engine")
    args = ap.parse_args()
    promtool = h.find_tool("promtool", "PROMTOOL")

    work = tempfile.mkdtemp(prefix="strata-engine-runner-")
    daemons = []
    try:
        ports = [h.free_port() for _ in range(3)]
        peers = ",".join("127.0.0.1:%d" % p for p in ports)
        for i, p in enumerate(ports):
            daemons.append(Daemon(args.stratad, p, peers, work, i))
        usage_cases(args.engine, peers, work)
        workload_case(args.engine, peers, promtool, work)
        compare_case(args.engine, peers)
        compare_case(args.engine, peers, remote=True)
        images_case(args.engine, peers, work)
        for d in daemons:
            rc = d.stop()
            check(rc == 0, "stratad exited with %d (log %s)" % (rc, d.log_path))
    finally:
        for d in daemons:
            d.stop()
        if not problems:
            shutil.rmtree(work, ignore_errors=True)
    if problems:
        print("%d failed:\n  %s" % (len(problems), "\n  ".join(problems)), flush=True)
        sys.exit(1)
    if not promtool:
        h.skip("everything but promtool passed; promtool is not installed "
               "(Debian: apt-get install prometheus)")
    print("1 passed, 0 failed", flush=True)


if __name__ == "__main__":
    main()
