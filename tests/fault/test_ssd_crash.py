"""Kill -9 test of the SSD tier's durable writes.

Starts ssd_crash_writer (durable session appends and KDA puts, one
acknowledgement line per put that returned), kills it with SIGKILL at a
random point, and after each kill runs the verifier over the same data
directory: every acknowledged write, from this run and every earlier one,
must be present with exactly the acknowledged bytes, and nothing corrupt
may be found. Repeats --runs times on one environment.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def one_run(writer, data_dir, log, run, rng):
    proc = subprocess.Popen([writer, "write", data_dir, str(run)], stdout=subprocess.PIPE,
                            bufsize=0)
    target = rng.randint(0, 120)
    acks = 0
    buf = b""
    deadline = time.monotonic() + 20
    while acks < target and time.monotonic() < deadline:
        chunk = proc.stdout.read(4096 if target - acks > 20 else 64)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            log.write(line + b"\n")
            acks += line.startswith(b"A ")
    # A random moment inside the next put (or the one after): mid-commit kills.
    time.sleep(rng.uniform(0, 0.004))
    proc.kill()
    rest = proc.stdout.read()
    proc.wait()
    buf += rest
    *lines, _torn = buf.split(b"\n")
    for line in lines:
        log.write(line + b"\n")
        acks += line.startswith(b"A ")
    log.flush()
    if proc.returncode != -signal.SIGKILL:
        sys.exit(f"run {run}: writer ended on its own, code {proc.returncode}")
    return acks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writer", required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    print(f"seed={seed}")
    top = tempfile.mkdtemp(prefix="ssd_crash_")
    data_dir = os.path.join(top, "env")
    log_path = os.path.join(top, "acks.log")
    total = 0
    with open(log_path, "wb") as log:
        for run in range(1, args.runs + 1):
            acks = one_run(args.writer, data_dir, log, run, rng)
            total += acks
            res = subprocess.run([args.writer, "verify", data_dir, log_path],
                                 capture_output=True, text=True)
            print(f"run {run}: acks={acks} total={total} {res.stdout.strip()}")
            if res.returncode != 0:
                print(res.stderr[-4000:])
                sys.exit(f"run {run}: verification failed (seed={seed}, dir kept: {top})")
    if total == 0:
        sys.exit("no write was ever acknowledged: the test proved nothing")
    shutil.rmtree(top)
    print(f"ok: {args.runs} kills, {total} acknowledged durable writes verified")


if __name__ == "__main__":
    main()
