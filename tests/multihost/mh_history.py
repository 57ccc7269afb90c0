"""mh_history.py - the history checker of the multi-host tests.

Reads the JSON lines that mh_workload.py (operations) and the fault schedule
(records with "op": "fault" and "op": "ring") wrote, and returns the
violations of the rules below (docs/testing.md, "What the checker checks",
states them for people):

  objects  KV objects are write-once caches with one copy: an object stays
           as first committed until it is lost, and while its owner is down
           the client places it on the next node of the ring. So the
           history is cut into stable periods, separated by unstable windows:
           each fault from its start until SETTLE_S after the ring converged
           again. Within one stable period the successful reads of a KV key
           all return the same bytes; every successful read (stable or not)
           returns the bytes of a put of that key invoked before the read
           returned. Row reads must equal those rows of such bytes.
  durable  KDA objects written durable: the first put that was acknowledged
           OK (all R replicas on disk) fixes the bytes for good. Every
           successful read that begins after that acknowledgement returns
           exactly them, and none of those reads is a miss (no failure is
           allowed to lose an acknowledged durable write; the final reads
           after the schedule count too). Before it, a read returns a miss
           or the bytes of a durable put invoked before it returned.
  sessions A session read returns a record (length, head) that an append of
           that session invoked before the read returned wrote (or the empty
           record an open wrote), and its length is at least that of every
           append acknowledged by all R replicas that returned before the
           read began (after the last open for a session that is not
           durable: all its copies may be lost, and the open starts again).
           Unless strict, an acknowledgement counts for the durable and the
           session rules only when the write began and ended in a stable
           period: the code has no repair yet that copies a write taken by
           the fallback replicas during a fault back to its home replicas
           when the fault heals, and the strict rules fail on that today.
  deadline No call returns later than its deadline plus SLACK_S after it
           began. libstrata's timeout_ms is the deadline of the whole call
           (every phase gets what the ones before it left, and one-sided
           transfers still in flight at it are cancelled: docs/transport.md
           "Deadlines"), so the deadline of a call is PHASES x timeout_ms
           with PHASES 1, strict or not (it was 4 while each phase had the
           whole timeout).
  ring     After every fault is healed, every daemon answers Hello with the
           same peer set and ring epoch, and it is the set the clients use.

Standard library only; run with /usr/bin/python3.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mh_values as wl  # noqa: E402

SLACK_S = 1.0
PHASES = 1  # timeout_ms covers the whole call
# A client comes back to a healed node at its next gRPC reconnect attempt
# (backoff 1 s x 1.6^n, +-20 %): up to ~4 s after a fault of 6 s.
SETTLE_S = 6.0
ST_OK, ST_MISS, ST_PARTIAL = 0, -3, -18


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Checker:
    def __init__(self, records, strict=False):
        self.recs = records
        self.violations = []
        self.meta = next((r for r in records if r["op"] == "meta"), {"timeout_ms": 2000})
        # Unstable windows: each fault until SETTLE_S after the ring converged.
        faults = sorted((r for r in records if r["op"] == "fault"), key=lambda r: r["t0"])
        rings = sorted(r["t1"] for r in records if r["op"] == "ring")
        self.windows = []
        for f in faults:
            end = next((t for t in rings if t >= f["t1"]), f["t1"])
            self.windows.append((f["t0"], end + SETTLE_S))
        self._digests = {}
        self.strict = strict

    def counts(self, w):
        """Whether write w's acknowledgement binds later reads: always with
        strict; else only for a write that began and ended in a stable period
        (one acknowledged by the fallback replicas during a fault is not copied
        back to its home replicas when the fault heals: docs/testing.md)."""
        return self.strict or self.period(w) is not None

    def bad(self, rule, rec, why):
        self.violations.append("%s: %s (%s)" % (rule, why, json.dumps(rec, sort_keys=True)))

    def digest_of(self, key, gen, rows=None):
        k = (key, gen, tuple(rows or ()))
        if k not in self._digests:
            self._digests[k] = (wl.row_digest(key, gen, rows) if rows else
                                wl.digest(wl.value_bytes(key, gen)))
        return self._digests[k]

    def period(self, r):
        """The stable period r lies in (the number of windows before it), or
        None when r overlaps an unstable window."""
        n = 0
        for w0, w1 in self.windows:
            if r["t1"] >= w0 and r["t0"] <= w1:
                return None
            n += w1 < r["t0"]
        return n

    def by_key(self, ops):
        out = {}
        for r in self.recs:
            if r["op"] in ops:
                out.setdefault(r["key"], []).append(r)
        return out

    def check_deadlines(self):
        deadline = self.meta["timeout_ms"] / 1000.0 * (1 if self.strict else PHASES)
        limit = deadline + SLACK_S
        for r in self.recs:
            if r["op"] in ("meta", "fault", "ring"):
                continue
            if r["t1"] - r["t0"] > limit:
                self.bad("deadline", r, "took %.3f s, over its deadline %.3f s + slack %.1f s"
                         % (r["t1"] - r["t0"], deadline, SLACK_S))

    def _matching_gen(self, key, r, puts):
        """The gens of puts of key invoked before r returned whose bytes r got."""
        rows = r.get("rows")
        return [p["gen"] for p in puts if p["t0"] < r["t1"] and p.get("st") != -4 and
                self.digest_of(key, p["gen"], rows) == r["digest"]]

    def check_objects(self):
        puts = self.by_key(("put",))
        for key, reads in self.by_key(("get", "rows")).items():
            if not key.endswith("/kv"):
                continue
            seen = {}  # stable period -> (gen, first read)
            for r in reads:
                if r.get("st") != ST_OK:
                    continue
                gens = self._matching_gen(key, r, puts.get(key, []))
                if not gens:
                    self.bad("objects", r, "bytes that no put of %s invoked before wrote" % key)
                    continue
                p = self.period(r)
                if p is None:
                    continue
                if p in seen and seen[p][0] not in gens:
                    self.bad("objects", r, "gen %s, but an earlier read in the same stable "
                             "period got %s" % (gens, seen[p][0]))
                seen.setdefault(p, (gens[0], r))

    def check_durable(self):
        puts = self.by_key(("dput",))
        for key, reads in self.by_key(("get",)).items():
            if not key.endswith("/kda"):
                continue
            kp = sorted(puts.get(key, []), key=lambda p: p["t1"])
            acked = next((p for p in kp if p.get("st") == ST_OK and self.counts(p)), None)
            for r in reads:
                after = acked is not None and r["t0"] > acked["t1"]
                if r.get("st") == ST_MISS and after:
                    self.bad("durable", r, "a miss after the durable put of gen %d was "
                             "acknowledged at %.3f" % (acked["gen"], acked["t1"]))
                if r.get("st") != ST_OK:
                    continue
                if after:
                    if r["digest"] != self.digest_of(key, acked["gen"]):
                        self.bad("durable", r, "not the acknowledged gen %d" % acked["gen"])
                elif not self._matching_gen(key, r, kp):
                    self.bad("durable", r, "bytes that no durable put invoked before wrote")

    def check_sessions(self):
        ops = self.by_key(("sopen", "sappend", "sget"))
        replicas = self.meta.get("replicas", 2)
        for sid, rs in ops.items():
            writes = [r for r in rs if r["op"] == "sappend"]
            opens = [r for r in rs if r["op"] == "sopen"]
            for r in rs:
                if r["op"] != "sget" or r.get("st") != ST_OK:
                    continue
                if r["length"] == 0:
                    ok = any(o["t0"] < r["t1"] for o in opens)
                else:
                    ok = any(w["t0"] < r["t1"] and w["length"] == r["length"] and
                             w["head"] == r["head"] for w in writes)
                if not ok:
                    self.bad("sessions", r, "a record no append or open invoked before wrote")
                reset = max([o["t1"] for o in opens if o["t1"] < r["t0"] and
                             not o.get("durable")] or [0.0])
                floor = [w for w in writes if w.get("st") == ST_OK and
                         w.get("written", 0) >= replicas and reset < w["t0"] and
                         w["t1"] < r["t0"] and self.counts(w)]
                if floor:
                    top = max(floor, key=lambda w: w["length"])
                    if r["length"] < top["length"]:
                        self.bad("sessions", r, "stale: length %d, but an append of length %d "
                                 "on all %d replicas was acknowledged at %.3f" %
                                 (r["length"], top["length"], replicas, top["t1"]))

    def check_ring(self):
        for r in self.recs:
            if r["op"] == "ring" and not r.get("converged"):
                self.bad("ring", r, "the ring did not converge")

    def run(self):
        self.check_deadlines()
        self.check_objects()
        self.check_durable()
        self.check_sessions()
        self.check_ring()
        return self.violations


def summary(records):
    counts = {}
    for r in records:
        k = "%s:%s" % (r["op"], "ok" if r.get("st") == 0 else
                       "miss" if r.get("st") == ST_MISS else "err" if "st" in r else "-")
        counts[k] = counts.get(k, 0) + 1
    return " ".join("%s=%d" % kv for kv in sorted(counts.items()))


def main():
    recs = []
    for path in [p for p in sys.argv[1:] if p != "--strict"]:
        recs += load(path)
    v = Checker(recs, strict="--strict" in sys.argv).run()
    print(summary(recs))
    for line in v[:50]:
        print("VIOLATION " + line)
    print("%d violations" % len(v))
    return 1 if v else 0


if __name__ == "__main__":
    sys.exit(main())
