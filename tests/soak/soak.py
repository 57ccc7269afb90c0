#!/usr/bin/python3
"""soak.py - hours at a steady rate: a cluster of real stratad daemons on
loopback under `strata load`, every daemon's resources sampled, and a check
that they stay flat (issue #19; docs/testing.md "Soak").

1. Starts --nodes daemons on loopback: static peers, a memory_limit well
   below the working set (64M by default) with the SSD tier on (a data_dir
   each, a 1G map of which 64M for spilled objects: DRAM evicts and spills
   to it, and the tier evicts spilled objects in its turn), metrics on a
   free port.
2. `base`: samples the idle cluster for --base-s seconds.
3. `load`: runs `strata load` at --rate ops/s with --engines engines for the
   whole duration (one run: its connections stay, as an engine's do), and
   samples meanwhile.
4. `idle`: the generator gone, samples until no node holds a lease or a
   reservation and --idle-s have passed (at most --idle-max-s).

Each sample (every --interval seconds, one row per node in the CSV) holds
what /proc says of the daemon (VmRSS, entries of /proc/PID/fd and
/proc/PID/task) and what the daemon says of itself on /stats (its
process_* gauges, leases, reservations, pins and sessions held, objects
evicted, objects spilled). soak_check.py decides from them and from the
generator's JSON report; the table it prints goes into docs/performance.md.
--plot draws the samples with gnuplot (when installed).

Exit status: 0 flat, 1 not (or a daemon died, or the generator failed), 77
when `strata` has no `load` command (ctest: skipped).

    /usr/bin/python3 tests/soak/soak.py --stratad build/release/cached/stratad \\
        --strata build/release/client/cli/strata --minutes 30
"""

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import obs_harness  # noqa: E402
import soak_check as sc  # noqa: E402

SKIP = 77
SECRET = "soak-test-cluster-secret-0123456789"


def log(msg):
    print("[soak %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Daemon:
    """One stratad on loopback, its metrics endpoint and its /proc entry."""

    def __init__(self, args, i, port, peers, work):
        self.name = "n%d" % i
        self.addr = "127.0.0.1:%d" % port
        data = os.path.join(work, "data-%d" % i)
        os.makedirs(data, exist_ok=True)
        self.log_path = os.path.join(work, "stratad-%d.log" % i)
        self.log = open(self.log_path, "wb")
        argv = [args.stratad, "--listen", self.addr, "--peers", peers,
                "--cluster-secret", SECRET, "--metrics-listen", "127.0.0.1:0",
                "--memory-limit", args.memory_limit, "--chunk-bytes", args.chunk_bytes,
                "--max-object", args.max_object,
                "--data-dir", data, "--ssd-map-size", args.ssd_map_size,
                "--ssd-spill-budget", args.ssd_spill_budget, "--ssd-sync", "none",
                "--reservation-ttl", "10s"] + args.daemon_arg
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"metrics_port=(\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError("stratad %s did not start (%r); log %s" %
                               (self.name, line, self.log_path))
        self.metrics = "127.0.0.1:%s" % m.group(1)
        self.pid = self.proc.pid

    def proc_sample(self):
        """{VmRSS, RssAnon, RssFile, RssShmem: bytes}, open descriptors and
        threads, from /proc/PID."""
        rss = {}
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                k = line.split(":")[0]
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    rss[k] = int(line.split()[1]) * 1024
        fds = len(os.listdir("/proc/%d/fd" % self.pid))
        threads = len(os.listdir("/proc/%d/task" % self.pid))
        return rss, fds, threads

    def stats(self):
        with urllib.request.urlopen("http://%s/stats" % self.metrics, timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        """SIGTERM, then SIGKILL after 30 s; the exit status."""
        code = obs_harness.stop_process(self.proc, 30)
        if not self.log.closed:
            self.log.close()
        return code


class Sampler:
    """Samples every daemon every interval seconds into rows (and the CSV)."""

    def __init__(self, daemons, interval, csv_path):
        self.daemons, self.interval = daemons, interval
        self.rows, self.phase, self.t0 = [], "base", time.monotonic()
        self.errors, self.tries, self.misses = [], {}, {}
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.f = open(csv_path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=sc.COLUMNS)
        self.w.writeheader()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.thread.start()

    def sample_once(self):
        t = round(time.monotonic() - self.t0, 1)
        for d in self.daemons:
            if d.proc.poll() is not None:
                self.errors.append("%s exited with %s during the soak (log %s)" %
                                   (d.name, d.proc.returncode, d.log_path))
                continue
            self.tries[d.name] = self.tries.get(d.name, 0) + 1
            try:
                rss, fds, threads = d.proc_sample()
                st = d.stats()
            except (OSError, ValueError) as e:
                # A busy machine may delay an answer past the timeout: a
                # missed sample, a problem only when many are (missed()).
                self.misses.setdefault(d.name, []).append("%.0f s: %s" % (t, e))
                continue
            g, c = st.get("gauges", {}), st.get("counters", {})
            row = {"t_s": t, "phase": self.phase, "node": d.name, "pid": d.pid,
                   "rss_bytes": rss.get("VmRSS", 0), "rss_anon_bytes": rss.get("RssAnon", 0),
                   "rss_file_bytes": rss.get("RssFile", 0),
                   "rss_shmem_bytes": rss.get("RssShmem", 0), "fds": fds, "threads": threads,
                   "self_rss_bytes": int(g.get("process_resident_bytes", 0)),
                   "self_fds": int(g.get("process_open_fds", 0)),
                   "self_threads": int(g.get("process_threads", 0)),
                   "leases": int(g.get("leases_active", 0)),
                   "reservations": int(g.get("reservations_active", 0)),
                   "pins": int(g.get("pins_active", 0)),
                   "sessions": int(g.get("sessions_active", 0)),
                   "evicted_objects": int(c.get("evictions_total", 0)),
                   "ssd_spills": int(c.get("spills_total", 0)),
                   "catalog": int(g.get("rebalance_catalog", 0))}
            with self.lock:
                self.rows.append(row)
                self.w.writerow(row)
        self.f.flush()

    def _loop(self):
        while not self.stop_ev.is_set():
            self.sample_once()
            self.stop_ev.wait(self.interval)

    def missed(self):
        """Problems: a node of which more than a tenth of the samples failed."""
        out = []
        for name, m in sorted(self.misses.items()):
            if len(m) * 10 > self.tries[name]:
                out.append("%s: %d of %d samples failed (first: %s)" %
                           (name, len(m), self.tries[name], m[0]))
            else:
                log("%s: %d of %d samples missed (first: %s)" % (name, len(m), self.tries[name],
                                                                   m[0]))
        return out

    def last(self, node):
        with self.lock:
            mine = [r for r in self.rows if r["node"] == node]
        return mine[-1] if mine else None

    def stop(self):
        self.stop_ev.set()
        self.thread.join()
        self.sample_once()  # the last word: the state at the end
        self.f.close()


def has_load(strata):
    """Whether this strata has the load command (`strata load --help`)."""
    try:
        r = subprocess.run([strata, "load", "--help"], capture_output=True, timeout=30)
    except OSError:
        return False
    return r.returncode == 0 and b"--rate" in r.stdout + r.stderr


def load_argv(args, daemons, report):
    nodes = ",".join(d.addr for d in daemons)
    return ([args.strata, "load", "--nodes", nodes, "--transport", args.transport,
             "--engines", str(args.engines), "--rate", str(args.rate),
             "--duration", "%ds" % args.load_s,
             "--warmup", "%ds" % args.warmup_s, "--report", report]
            + (["--mix", args.mix] if args.mix else [])
            + (["--mix-sessions", args.mix_sessions] if args.mix_sessions else [])
            + args.load_arg)


def progress(sampler, daemons, started, total):
    parts = []
    for d in daemons:
        r = sampler.last(d.name)
        if r:
            parts.append("%s rss=%.0fM fds=%d thr=%d leases=%d res=%d ev=%d" % (
                d.name, r["rss_bytes"] / sc.MIB, r["fds"], r["threads"], r["leases"],
                r["reservations"], r["evicted_objects"]))
    log("%4.0f/%.0f s  %s" % (time.monotonic() - started, total, "  ".join(parts)))


def run_load(args, daemons, sampler, work):
    """Runs the generator to its end; (its exit status, its report or None)."""
    report = os.path.join(work, "load-report.json")
    argv = load_argv(args, daemons, report)
    log("load: " + " ".join(argv))
    with open(os.path.join(work, "load.log"), "wb") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        started, total = time.monotonic(), args.warmup_s + args.load_s
        # A hang guard, not a speed bound: a lane may fall up to the duration
        # behind before it gives up (docs/cli.md), and setup comes first.
        limit = 2 * total + 300
        next_line = started + args.progress_s
        while p.poll() is None:
            time.sleep(1)
            if time.monotonic() >= next_line:
                progress(sampler, daemons, started, total)
                next_line += args.progress_s
            if time.monotonic() - started > limit:
                log("load still runs %.0f s past its duration: killed" % (limit - total))
                p.kill()
                p.wait()
    rep = None
    if os.path.exists(report):
        with open(report) as f:
            rep = json.load(f)
    return p.returncode, rep


def idle_phase(args, daemons, sampler):
    """Samples with no load until no lease or reservation is held and idle_s
    passed (at most idle_max_s)."""
    sampler.phase = "idle"
    t0 = time.monotonic()
    while True:
        time.sleep(args.interval)
        held = [sampler.last(d.name) for d in daemons]
        clear = all(r and r["phase"] == "idle" and r["leases"] == 0 and r["reservations"] == 0
                    for r in held)
        waited = time.monotonic() - t0
        if (clear and waited >= args.idle_s) or waited >= args.idle_max_s:
            return


def plot(csv_path, png, nodes):
    """A gnuplot PNG of RSS, its anonymous part, descriptors and threads over
    time, one line per node."""
    gp = shutil.which("gnuplot")
    if gp is None:
        log("no gnuplot: no plot (apt-get install gnuplot-nox)")
        return
    series = []
    for n in nodes:
        f = "'< grep -E \",%s,\" %s'" % (n, csv_path)
        series.append((f, n))
    script = ["set terminal pngcairo size 1200,1200", "set output '%s'" % png,
              "set datafile separator ','", "set multiplot layout 4,1 title 'soak'",
              "set xlabel 'seconds'", "set key right bottom", "set yrange [0:*]"]
    for name, title, scale in (("rss_bytes", "RSS (MiB)", "/1048576.0"),
                               ("rss_anon_bytes", "anonymous RSS (MiB)", "/1048576.0"),
                               ("fds", "open descriptors", ""), ("threads", "threads", "")):
        col = sc.COLUMNS.index(name) + 1
        script.append("set ylabel '%s'" % title)
        script.append("plot " + ", ".join("%s using 1:($%d%s) with lines title '%s'" %
                                          (f, col, scale, n) for f, n in series))
    script.append("unset multiplot")
    subprocess.run([gp], input="\n".join(script).encode(), check=False)
    log("plot: " + png)


def check_self(rows, b):
    """The daemon's own gauges against /proc: a gauge that lies fails."""
    problems = []
    for r in rows:
        if abs(r["self_fds"] - r["fds"]) > b.fd_slack:
            problems.append("%s at %.0f s: process_open_fds %d but /proc shows %d" %
                            (r["node"], r["t_s"], r["self_fds"], r["fds"]))
        off = abs(r["self_rss_bytes"] - r["rss_bytes"])
        if b.rss_check and off > r["rss_bytes"] / 10 + 4 * sc.MIB:
            problems.append("%s at %.0f s: process_resident_bytes %.1f MiB but VmRSS %.1f MiB" %
                            (r["node"], r["t_s"], r["self_rss_bytes"] / sc.MIB,
                             r["rss_bytes"] / sc.MIB))
    return problems[:10]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stratad", required=True)
    ap.add_argument("--strata", required=True)
    ap.add_argument("--minutes", type=float, default=30.0,
                    help="measured load time, minutes (default %(default)s)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rate", type=int, default=100, help="ops/s (default %(default)s)")
    ap.add_argument("--transport", default="ucx",
                    help="strata load --transport: ucx reads one-sided under leases "
                         "(default %(default)s)")
    ap.add_argument("--engines", type=int, default=16)
    ap.add_argument("--mix", default="", help="strata load --mix (default: its own)")
    ap.add_argument("--mix-sessions", default="", help="strata load --mix-sessions")
    ap.add_argument("--load-arg", action="append", default=[],
                    help="one more argument for strata load (repeatable)")
    ap.add_argument("--daemon-arg", action="append", default=[],
                    help="one more argument for every stratad (repeatable)")
    ap.add_argument("--memory-limit", default="64M")
    ap.add_argument("--chunk-bytes", default="8M")
    ap.add_argument("--max-object", default="4M")
    ap.add_argument("--ssd-map-size", default="1G",
                    help="SSD tier map per node: KDA checkpoints and sessions are durable, "
                         "never evicted, and fill it (default %(default)s)")
    ap.add_argument("--ssd-spill-budget", default="64M",
                    help="of it, spilled KV and IDX objects (default %(default)s)")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--base-s", type=float, default=15.0)
    ap.add_argument("--warmup-s", type=int, default=10, help="strata load --warmup")
    ap.add_argument("--idle-s", type=float, default=15.0)
    ap.add_argument("--idle-max-s", type=float, default=60.0)
    ap.add_argument("--progress-s", type=int, default=60)
    ap.add_argument("--workdir", help="keep everything here (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--plot", help="gnuplot PNG of the samples")
    ap.add_argument("--no-eviction-check", action="store_true")
    sc.add_bound_args(ap)
    args = ap.parse_args()
    args.load_s = int(round(args.minutes * 60))
    return args


def main():
    args = parse_args()
    if not has_load(args.strata):
        print("SKIP: %s has no load command (strata load)" % args.strata, flush=True)
        return SKIP
    work = args.workdir or tempfile.mkdtemp(prefix="strata-soak-")
    os.makedirs(work, exist_ok=True)
    csv_path = os.path.join(work, "samples.csv")
    log("work dir %s; %d nodes, memory_limit %s, %.1f min at %d ops/s, %d engines" %
        (work, args.nodes, args.memory_limit, args.minutes, args.rate, args.engines))
    ports = [obs_harness.free_port() for _ in range(args.nodes)]
    peers = ",".join("127.0.0.1:%d" % p for p in ports)
    daemons, problems, sampler, report = [], [], None, None
    try:
        for i, p in enumerate(ports):
            daemons.append(Daemon(args, i, p, peers, work))
        sampler = Sampler(daemons, args.interval, csv_path)
        sampler.start()
        time.sleep(args.base_s)
        sampler.phase = "load"
        rc, report = run_load(args, daemons, sampler, work)
        idle_phase(args, daemons, sampler)
        sampler.stop()
        if rc != 0:
            problems.append("strata load exited with %s (log %s)" %
                            (rc, os.path.join(work, "load.log")))
        if report is None:
            problems.append("strata load wrote no report")
        else:
            problems += sc.check_report(report)
    except RuntimeError as e:
        problems.append(str(e))
    finally:
        if sampler is not None and not sampler.stop_ev.is_set():
            sampler.stop()
        for d in daemons:
            code = d.stop()
            if code != 0:
                problems.append("%s exited with %s at the end (log %s)" %
                                (d.name, code, d.log_path))
    if sampler is not None:
        problems = sampler.errors + sampler.missed() + problems
        b = sc.bounds_from(args)
        rows = sc.read_csv(csv_path)
        summaries, p = sc.check_samples(rows, b, not args.no_eviction_check)
        problems += p + check_self(rows, b)
        text = sc.table(summaries)
        with open(os.path.join(work, "summary.md"), "w") as f:
            f.write(text + "\n")
        print(text, flush=True)
        if args.plot:
            plot(csv_path, args.plot, [d.name for d in daemons])
        if report is not None:
            print("load: offered %s ops/s, achieved %s ops/s, wrong_bytes %s, errors %s" % (
                report.get("offered_rate"), report.get("achieved_rate"),
                report.get("wrong_bytes"), json.dumps(report.get("errors"))), flush=True)
    for p in problems:
        print("FAIL: " + p, flush=True)
    if problems:
        print("kept: %s" % work, flush=True)
        return 1
    print("PASS: %d nodes flat for %.1f min at %d ops/s (samples: %s)" %
          (args.nodes, args.minutes, args.rate, csv_path if args.workdir or args.keep else "-"),
          flush=True)
    if not args.workdir and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
