#!/usr/bin/env python3
"""Where a streamed decode's stall goes, from a `sluice bench --trace FILE` timeline.

usage: bench/trace_stall.py TRACE.json [--waits] [--tokens N]

For every wait (the decode blocked on an expert's read) it finds the read it
waited for: whether that read was a real miss ("read") or a next-layer guess
("prefetch"), how long before the wait it was issued, how long it took, and how
many reads were in flight ahead of it when it was issued (guesses among them):
a real miss queued behind many guesses is a stall the drive did not force.
Totals: wait time by the waited read's kind, checksum (verify) time, MoE time.
--tokens N prints the first N tokens' wait / verify / MoE times.
"""
import argparse
import collections
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--waits", action="store_true", help="one line per wait")
    ap.add_argument("--tokens", type=int, default=0, help="per-token lines for the first N tokens")
    a = ap.parse_args()
    ev = json.load(open(a.trace))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    reads, opened = {}, {}
    for e in sorted(ev, key=lambda e: e["ts"]):
        if e["ph"] == "b":
            opened[(e["name"], e["id"])] = (e["ts"], e["cat"])
        elif e["ph"] == "e":
            b = opened.pop((e["name"], e["id"]), None)
            if b:
                reads.setdefault(e["name"], []).append((b[0], e["ts"], b[1]))
    spans = [e for e in ev if e["ph"] == "X"]
    tokens = sorted((e for e in spans if e["cat"] == "token"), key=lambda e: e["ts"])
    waits = sorted((e for e in spans if e["cat"] == "wait"), key=lambda e: e["ts"])
    verifies = [e for e in spans if e["cat"] == "verify"]
    moe = [e for e in spans if e["cat"] == "compute"]
    every = [(n, b, z, c) for n, rs in reads.items() for (b, z, c) in rs]
    total = sum(t["dur"] for t in tokens)
    waited = sum(w["dur"] for w in waits)
    print(f"{len(tokens)} tokens, {total / 1e3:.1f} ms; {len(waits)} waits, {waited / 1e3:.1f} ms "
          f"({100 * waited / max(total, 1):.1f}%); verify {sum(v['dur'] for v in verifies) / 1e3:.1f} ms; "
          f"MoE blocks {sum(m['dur'] for m in moe) / 1e3:.1f} ms (waits included)")
    by_kind = collections.Counter()
    behind_guesses = 0.0
    for w in waits:
        rs = [r for r in reads.get("read " + w["name"][5:], []) if r[0] <= w["ts"] + w["dur"] and r[1] >= w["ts"] - 1]
        if not rs:
            by_kind["read not in the trace"] += w["dur"]
            continue
        b, z, kind = rs[-1]
        ahead = [r for r in every if r[1] < b and r[2] > b]
        guesses = sum(1 for r in ahead if r[3] == "prefetch")
        by_kind[kind] += w["dur"]
        if kind == "read" and guesses:
            behind_guesses += w["dur"]
        if a.waits:
            print(f"{w['name']:14s} {w['dur'] / 1e3:6.1f} ms: its read ({kind}) issued {(w['ts'] - b) / 1e3:6.1f} ms "
                  f"before, took {(z - b) / 1e3:6.1f} ms; {len(ahead)} reads in flight ahead of it ({guesses} guesses)")
    print("wait by the waited read's kind (ms):", {k: round(v / 1e3, 1) for k, v in by_kind.items()},
          f"; real misses issued behind guesses: {behind_guesses / 1e3:.1f} ms")
    for t in tokens[: a.tokens]:
        lo, hi = t["ts"], t["ts"] + t["dur"]
        part = lambda xs: sum(x["dur"] for x in xs if lo <= x["ts"] < hi) / 1e3  # noqa: E731
        print(f"{t['name']:10s} {t['dur'] / 1e3:7.1f} ms: wait {part(waits):6.1f}, verify {part(verifies):5.1f}, "
              f"MoE {part(moe):6.1f}")


if __name__ == "__main__":
    main()
