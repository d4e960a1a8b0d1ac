#!/usr/bin/env python3
"""`sluice bench --batch B` under mpirun reports where each pass's time went,
and its routes are one process's.

Usage: bench_timers_test.py SLUICE MPIRUN MODEL_DIR [RANKS]

One process and RANKS ranks each decode the same batch: every pass's routes
(per MoE layer the distinct experts and how many rows picked each) must be the
same in both, as the ranks compute the same tokens; one process spends no time
in an exchange and part of each pass in its routed experts; under mpirun rank
0's pass has both parts, and "ranks" gives the fastest and slowest rank's time
in each (fastest <= slowest, every rank exchanging, rank 0's own values between
them). Another rank's parts are not bounded by rank 0's pass: a rank waiting in
the exchange also waits through rank 0's work between its timed passes.
bench/netns_model.py reads these timers.
"""
import json
import os
import subprocess
import sys
import tempfile


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=600)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def check(cond, what, j=None):
    if not cond:
        sys.exit(f"FAIL: {what}" + (f"\n{json.dumps(j)[:4000]}" if j is not None else ""))


def main():
    sluice, mpirun, model = sys.argv[1:4]
    ranks = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")
    with tempfile.TemporaryDirectory() as tmp:
        args = ["bench", "--model", model, "--batch", "3", "--tokens", "4", "--prompt-tokens", "5", "--ram", "0.05",
                "--probe-seconds", "0"]
        run([sluice] + args + ["--json", os.path.join(tmp, "one.json")])
        run([mpirun, "--oversubscribe", "-np", str(ranks), sluice] + args + ["--json", os.path.join(tmp, "many.json")],
            env)
        one = json.load(open(os.path.join(tmp, "one.json")))
        many = json.load(open(os.path.join(tmp, "many.json")))
    check("ranks" not in one, "one process reports ranks", one)
    check(one["exchange_seconds_per_pass"] == 0, "one process spent time in an exchange", one)
    check(len(one["per_pass"]) == 4 and len(many["per_pass"]) == 4, "not 4 timed passes")
    for k, (a, b) in enumerate(zip(one["per_pass"], many["per_pass"])):
        check(a["routes"] == b["routes"] and len(a["routes"]) > 0,
              f"pass {k}: the ranks' routes differ from one process's", {"one": a["routes"], "ranks": b["routes"]})
        for p, who in ((a, "one process"), (b, "rank 0")):
            check(0 < p["routed_expert_seconds"] < p["seconds"], f"pass {k}: {who}'s routed-expert time not a part of "
                  "the pass", p)
            check(p["routed_expert_seconds"] + p["exchange_seconds"] <= p["seconds"],
                  f"pass {k}: {who}'s routed experts and exchange take longer than the pass", p)
        check(b["exchange_seconds"] > 0, f"pass {k}: rank 0 spent no time in the exchange", b)
        check(a["exchange_seconds"] == 0, f"pass {k}: one process spent time in an exchange", a)
    r = many.get("ranks")
    check(r is not None and r["count"] == ranks, "no ranks section under mpirun", many)
    per_pass = sum(p["seconds"] for p in many["per_pass"]) / 4
    for key in ("routed_expert_seconds_per_pass", "exchange_seconds_per_pass"):
        lo, hi = r[key]
        check(0 < lo <= hi, f"ranks' {key} [{lo}, {hi}] not a positive range", r)
        mine = many[key]
        check(lo - 1e-9 <= mine <= hi + 1e-9, f"rank 0's {key} {mine} outside the ranks' [{lo}, {hi}]", many)
    print(f"  routes of 4 passes the same; per pass {per_pass * 1e3:.2f} ms, routed experts "
          f"{r['routed_expert_seconds_per_pass'][0] * 1e3:.2f}-{r['routed_expert_seconds_per_pass'][1] * 1e3:.2f} ms, "
          f"exchange {r['exchange_seconds_per_pass'][0] * 1e3:.2f}-{r['exchange_seconds_per_pass'][1] * 1e3:.2f} ms "
          f"over the {ranks} ranks (one process: routed {one['routed_expert_seconds_per_pass'] * 1e3:.2f} ms)")
    print("PASS")


if __name__ == "__main__":
    main()
