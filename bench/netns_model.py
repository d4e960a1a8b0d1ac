#!/usr/bin/env python3
"""Decode tokens/s of expert parallelism from per-layer compute, link rate and
latency; checked against bench/netns_ranks.sh's measurements, then projected
for Kimi K3 on 2 and 4 hosts.

Usage: bench/netns_model.py RESULTS.jsonl [RESULTS.jsonl ...] MODEL_DIR|CHECKPOINT.json [--others-max S]
                            [--k3-config CONFIG.json]
       bench/netns_model.py --summary MODEL_DIR > CHECKPOINT.json   (what the model needs of a checkpoint,
       so the measurements can be modelled after the checkpoint is deleted; netns_ranks.sh writes it)

The model of one decode pass of batch B on P ranks, each rank a core (or host) of its own:

  TP(B) = S(B) + sum over MoE layers of max_r X_r + L x(B, link) + e_P sd(B)

  S(B)    the spine: everything but the routed experts (attention, the dense and shared-expert MLPs,
          the router, lm_head, the weighted sums), computed whole by every rank. Measured on one
          process with one thread, alone on its core (one_t1): the pass minus its routed experts
          (bench's in-run timers), the median pass.
  X_r     rank r's routed experts in a layer: a e_r + b n_r, e_r the distinct experts it owns that
          the pass picked, n_r the rows it computes (token-expert pairs); a (an expert) and b (a
          row) fitted, a, b >= 0, to one_t1's passes at every batch size (routed time against the
          pass's e and n). Each pass's e_r and n_r come from that pass's routes as one process took
          them (the ranks take the same routes: mpi.bench_timers checks it), split as the ranks
          split the experts (contiguous runs of equal bytes); the ranks meet at each MoE layer's
          exchange, so each layer's slowest rank counts.
  x(B)    one exchange (MPI_Allgatherv) of the batch's rows, measured alone on the same links
          (bench/exchange_probe.cpp) with the link idle for one_t1's pass between exchanges, as in
          a run. Between real hosts: (P - 1) (lat + a_s) + B k W 4 (P - 1) / P / rate, checked
          against the probes.
  e_P sd  the pass-to-pass jitter of the spine (one_t1's sd within a run): a pass waits for the
          slowest of P ranks, E[max of P normals] = mean + e_P sd.

  That is the host model (each rank a host of its own). The ranks of one machine also share its
  memory: the machine model gives each part at least its bytes (the spine's, each rank's distinct
  experts') at the bandwidth one core gets while both stream, measured just before and after each
  ranks run (bench/stream_probe.cpp). pair_t1 (two single-thread processes at once, unsynchronized)
  is reported beside one_t1 for comparison.

Units in which other processes used more than --others-max CPU seconds (netns_ranks.sh's
unit_cpu) are left out and listed. Aggregate tokens/s = B / TP(B), per pass then over the run's passes.
"""
import argparse
import json
import math
import os
import random
import statistics
import struct
import sys


def checkpoint_bytes(model_dir):
    """Spine bytes a pass reads, all routed experts' bytes, and the config."""
    if model_dir.endswith(".json"):
        j = json.load(open(model_dir))
        return j["spine_bytes"], j["routed_bytes"], j["config"]
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    c = cfg.get("text_config", cfg)
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors") and f.startswith("model"))
    spine = routed = 0
    for f in files:
        with open(os.path.join(model_dir, f), "rb") as h:
            n = struct.unpack("<Q", h.read(8))[0]
            header = json.loads(h.read(n))
        for name, t in header.items():
            if name == "__metadata__":
                continue
            size = t["data_offsets"][1] - t["data_offsets"][0]
            if ".experts." in name:
                routed += size
            elif "embed_tokens" not in name:
                spine += size
    return spine, routed, c


def config_numbers(c):
    E = c.get("n_routed_experts", c.get("num_experts"))
    k = c.get("num_experts_per_tok", c.get("num_experts_per_token"))
    layers = c["num_hidden_layers"]
    L = layers - c.get("first_k_dense_replace", 0)
    W = c.get("routed_expert_hidden_size", c["hidden_size"])  # the width exchanged: latent where there is one
    return E, k, L, W


def first_experts(E, P):
    """compute/expert_exchange.cpp shard_experts for E experts of equal bytes: rank r owns [f[r], f[r+1])."""
    return [0] + [min(E, -(-E * (r + 1) // P)) for r in range(P - 1)] + [E]


def shares(routes, E, P):
    """Per rank (e_r, n_r): the distinct experts it owns that the pass picked and their rows, over the MoE
    layers; and per layer the same, for the slowest rank of each layer."""
    f = first_experts(E, P)
    per_layer = []
    for route in routes:
        s = [[0, 0] for _ in range(P)]
        for e, n in zip(route["experts"], route["rows"]):
            r = max(i for i in range(P) if f[i] <= e)
            s[r][0] += 1
            s[r][1] += n
        per_layer.append(s)
    return per_layer


def fit_routed(passes):
    """Least squares routed = a e + b n over (e, n, seconds), no intercept, a and b >= 0."""
    see = sum(e * e for e, n, t in passes)
    snn = sum(n * n for e, n, t in passes)
    sen = sum(e * n for e, n, t in passes)
    set_ = sum(e * t for e, n, t in passes)
    snt = sum(n * t for e, n, t in passes)
    det = see * snn - sen * sen
    a = (set_ * snn - snt * sen) / det if det else -1
    b = (snt * see - set_ * sen) / det if det else -1
    if a >= 0 and b >= 0:
        return a, b
    # The constraint binds: the better of a alone and b alone.
    fits = [(set_ / see, 0.0), (0.0, snt / snn)]
    return min(fits, key=lambda ab: sum((t - ab[0] * e - ab[1] * n) ** 2 for e, n, t in passes))


def distinct(E, k, B):
    return E * (1 - (1 - k / E) ** B)


def busiest(E, k, B, P, trials=400, seed=1):
    """The busiest rank's distinct experts over the mean, per layer-pass: the ranks wait for each other at
    every layer's exchange. Random routing (k distinct of E a token), experts split in P contiguous runs."""
    rng = random.Random(seed)
    total = 0.0
    for _ in range(trials):
        chosen = set()
        for _ in range(B):
            chosen.update(rng.sample(range(E), k))
        per = [0] * P
        for e in chosen:
            per[e * P // E] += 1
        total += max(per) / (len(chosen) / P)
    return total / trials


def tx(P, B, k, W, rate_bps, lat_s, a_s):
    if P == 1:
        return 0.0
    return (P - 1) * (lat_s + a_s) + B * k * W * 4 * (P - 1) / P / (rate_bps / 8)


def mean_spread(xs):
    """Mean and half the range (max - min) / 2, and the count."""
    m = statistics.fmean(xs)
    return m, (max(xs) - min(xs)) / 2, len(xs)


def compute_inputs(runs, E, P):
    """From one-thread runs of one process: per batch the spine's seconds a pass (the median over passes
    and runs) and the routed fit (a, b) over every pass of every batch."""
    spine = {}
    points = []
    for r in runs:
        for p in r["per_pass"]:
            spine.setdefault(r["batch"], []).append(p["seconds"] - p["routed_expert_seconds"] - p["exchange_seconds"])
            e = sum(len(x["experts"]) for x in p["routes"])
            n = sum(sum(x["rows"]) for x in p["routes"])
            points.append((e, n, p["routed_expert_seconds"]))
    a, b = fit_routed(points)
    resid = [t - (a * e + b * n) for e, n, t in points]
    rms = math.sqrt(sum(x * x for x in resid) / len(resid))
    mean_t = statistics.fmean(t for _, _, t in points)
    # The median pass: a pass another process on the machine disturbed is not the machine's own.
    return {B: statistics.median(v) for B, v in spine.items()}, a, b, rms / mean_t


def predict_pass(routes, E, P, spine_s, a, b, exch_s, bw=None, S_bytes=0, per_expert=0):
    """One pass on P ranks: the spine, each MoE layer's slowest rank, the exchanges. With bw (the bytes
    a second each core reads while every core streams), each part takes at least its bytes at that rate:
    the spine its S_bytes, a rank's routed experts their weights (each expert read once a pass)."""
    routed = 0.0
    for s in shares(routes, E, P):
        routed += max(max(a * e + b * n, e * per_expert / bw if bw else 0) for e, n in s)
    spine = max(spine_s, S_bytes / bw) if bw else spine_s
    return spine + routed + exch_s, routed, spine


E_MAX_NORMAL = {1: 0.0, 2: 0.5642, 3: 0.8463, 4: 1.0294, 8: 1.4236}  # E[max of P standard normals]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        S, routed, c = checkpoint_bytes(sys.argv[2])
        print(json.dumps({"spine_bytes": S, "routed_bytes": routed, "config": c}))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="results.jsonl files of netns_ranks.sh, then the model")
    ap.add_argument("--k3-config", help="a Kimi K3 config.json (default: the real widths of src/store/synthetic.cpp)")
    ap.add_argument("--others-max", type=float, default=3.0,
                    help="leave out units during which other processes used more CPU seconds than this (3)")
    args = ap.parse_args()
    files, model_path = args.results[:-1], args.results[-1]
    rows, left_out = [], {}
    for i, f in enumerate(files):
        for line in open(f):
            if line.strip():
                r = json.loads(line)
                r["run"] = (i, r.get("rep", 0))  # a repetition of one file: its one-process runs and its ranks
                others = r.get("unit_cpu", {}).get("others_s", 0)
                if others > args.others_max:
                    name = os.path.join(os.path.basename(os.path.dirname(os.path.abspath(f))), os.path.basename(f))
                    left_out[(name, r["batch"], r.get("rep"), round(others))] = 1
                    continue
                rows.append(r)
    # A unit measured again after a disturbed attempt: the quiet attempt's records (the last of each kind).
    seen = {}
    for r in rows:
        key = (r["run"], r["kind"], r["batch"], r.get("rate"), r.get("core"), r.get("when"), r.get("width"),
               r.get("gap_ms"))
        seen[key] = r
    rows = [r for r in rows if seen[(r["run"], r["kind"], r["batch"], r.get("rate"), r.get("core"), r.get("when"),
                                      r.get("width"), r.get("gap_ms"))] is r]
    S_bytes, routed_bytes, c = checkpoint_bytes(model_path)
    E, k, L, W = config_numbers(c)
    per_expert = routed_bytes / (E * L)
    of = lambda kind: [r for r in rows if r["kind"] == kind]
    # (run2.jsonl's ranks_copy, rank 1 on a copy of the spine file, is not modelled: each rank's spine is
    # its own anonymous memory whichever file it came from.)
    ranks, alone, pair, probes, one_all = of("ranks"), of("one_t1"), of("pair_t1"), of("probe"), of("one_all")
    P = ranks[0]["ranks"]["count"] if ranks else 2
    batches = sorted({r["batch"] for r in rows if "batch" in r})
    rates = sorted({r["rate"] for r in ranks}, key=lambda x: (x != "native", x))
    print(f"model {model_path}: spine {S_bytes / 1e9:.3f} GB a pass (no embedding), {L} MoE layer(s) of {E} experts "
          f"({per_expert / 1e6:.2f} MB each), top-{k}, exchange width {W}; {P} ranks; {len(files)} run(s)")
    if left_out:
        print("left out, disturbed by other processes (file, batch, repetition, their CPU seconds): "
              + "; ".join(f"{f} B={b} rep {r} {o} s" for f, b, r, o in left_out))
    quiet = [r["unit_cpu"] for r in rows if "unit_cpu" in r]
    if quiet:
        print(f"units kept: other processes used {min(q['others_s'] for q in quiet):.1f}-"
              f"{max(q['others_s'] for q in quiet):.1f} CPU s of each, the hypervisor stole "
              f"{min(q['steal_s'] for q in quiet):.1f}-{max(q['steal_s'] for q in quiet):.1f} s")
    loads = [float(x[0]) for r in rows for x in (r.get("load_before"), r.get("load_after")) if x]
    if loads:
        print(f"load average (1 min) at the measuring units' starts and ends: {min(loads):.2f}-{max(loads):.2f} "
              f"(median {statistics.median(loads):.2f})")

    # The compute inputs, from one-thread runs of one process (never from the ranks' runs).
    spine_alone, a1, b1, fit1 = compute_inputs(alone, E, P)
    spine_pair, a2, b2, fit2 = compute_inputs(pair, E, P)
    print("\ncompute inputs (one process, one thread; bench's in-run timers):")
    print(f"  routed experts alone: a = {a1 * 1e3:.3f} ms an expert + b = {b1 * 1e3:.3f} ms a row (fit's rms error "
          f"{fit1:.1%} of a pass's routed time); with both cores busy (pair_t1): a = {a2 * 1e3:.3f}, b = {b2 * 1e3:.3f} ms "
          f"({fit2:.1%})")
    for B in batches:
        if B in spine_alone and B in spine_pair:
            sa = [p["seconds"] - p["routed_expert_seconds"] for r in alone if r["batch"] == B for p in r["per_pass"]]
            print(f"  B={B:>2}: spine {spine_alone[B] * 1e3:6.1f} ms a pass alone (passes {min(sa) * 1e3:.0f}-"
                  f"{max(sa) * 1e3:.0f}; {S_bytes / spine_alone[B] / 1e9:.1f} GB/s of spine), {spine_pair[B] * 1e3:6.1f} ms "
                  f"with both cores busy ({spine_pair[B] / spine_alone[B] - 1:+.0%})")

    # The exchange alone: back to back and a pass apart; tx() against them.
    tiny = [p for p in probes if p["width"] == 1]
    a_s = statistics.fmean(p["mean_us"] for p in tiny) * 1e-6 / (P - 1) if tiny else 50e-6
    a_s_min = min(p["min_us"] for p in tiny) * 1e-6 / (P - 1) if tiny else 50e-6
    print(f"\nthe exchange alone (bench/exchange_probe.cpp, {P} ranks bound to cores):")
    print(f"  12-byte exchange (latency + software) a step: mean {a_s * 1e6:.0f} us, fastest {a_s_min * 1e6:.0f} us")
    b2b = lambda p: p["width"] > 1 and not p.get("gap_ms")
    native = [p for p in probes if p["rate"] == "native" and b2b(p)]
    big = max(native, key=lambda p: p["bytes"], default=None)
    native_bps = None
    if big:
        same = [p["mean_us"] for p in native if p["bytes"] == big["bytes"]]
        native_bps = big["bytes"] * (P - 1) / P * 8 / (statistics.fmean(same) * 1e-6 - (P - 1) * a_s)
        print(f"  the veth's own rate (largest unshaped exchange back to back, mean): {native_bps / 1e9:.1f} Gbit/s")
    exch = {}
    print("  link     B   bytes    back to back: mean (fastest)   a pass apart: mean (fastest)   tx()")
    for rate in rates:
        for B in batches:
            ps = [p for p in probes if p["rate"] == rate and p["rows"] == B * k and b2b(p)]
            gs = [p for p in probes if p["rate"] == rate and p["rows"] == B * k and p["width"] > 1 and p.get("gap_ms")]
            if not ps:
                continue
            m = statistics.fmean(p["mean_us"] for p in ps) * 1e-6
            g = statistics.fmean(p["mean_us"] for p in gs) * 1e-6 if gs else None
            exch[(rate, B)] = g if g is not None else m
            t = tx(P, B, k, W, min({"10gbit": 10e9, "25gbit": 25e9}.get(rate, native_bps), native_bps), 0, a_s) \
                if native_bps else float("nan")
            gtxt = (f"{g * 1e3:7.2f} ms ({min(p['min_us'] for p in gs) / 1e3:.2f})" if gs else "   (none)")
            print(f"  {rate:7} {B:>2} {ps[0]['bytes'] / 1e6:6.2f} MB  {m * 1e3:7.2f} ms ({min(p['min_us'] for p in ps) / 1e3:.2f})"
                  f"            {gtxt}          {t * 1e3:6.2f} ms ({t / m - 1:+.0%} of back to back)")

    # Jitter: a pass's compute varies from pass to pass (one_t1's passes, within a run); the ranks meet at
    # every MoE layer's exchange, so a pass takes the slowest rank's: E[max of P] = mean + e_P sigma.
    sigma = {}
    for B in batches:
        # The spine's part: the same work every pass (the routed part varies with the pass's routes, the
        # same on every rank); the median run's sd.
        sds = [statistics.stdev(p["seconds"] - p["routed_expert_seconds"] for p in r["per_pass"])
               for r in alone if r["batch"] == B]
        if sds:
            sigma[B] = statistics.median(sds)
    print("\npass-to-pass jitter of one process (one_t1, the spine's sd within a run, median run): "
          + ", ".join(f"B={B} {x * 1e3:.1f} ms" for B, x in sorted(sigma.items()))
          + f"; the slowest of {P} ranks adds {E_MAX_NORMAL.get(P, 1.0):.2f} sd a pass (normal)")
    streams = [r for r in rows if r["kind"] == "stream"]
    if streams:
        al = [x for r in streams for x in r["alone_gbps"]]
        bo = [min(r["both_gbps"]) for r in streams]
        print(f"memory bandwidth of a core (stream_probe, around every ranks run): alone {min(al):.1f}-{max(al):.1f} GB/s, "
              f"the slower core with both streaming {min(bo):.1f}-{max(bo):.1f} GB/s (median {statistics.median(bo):.1f})")

    def run_bw(run):
        """The slower core's bandwidth with both streaming, around this ranks run (mean of before and after)."""
        xs = [min(r["both_gbps"]) for r in streams if r["run"] == run["run"] and r["batch"] == run["batch"]
              and r["rate"] == run["rate"]]
        return statistics.fmean(xs) * 1e9 if xs else None

    def predict(run, rate, B, spine, a, b, bw=None):
        """Tokens/s of a run's passes: its repetition's one-process routes (else any at B)."""
        ref = next((x for x in alone if x["batch"] == B and x["run"] == run["run"]), None)
        ref = ref or next(x for x in alone if x["batch"] == B)
        ts, parts = [], []
        jit = E_MAX_NORMAL.get(P, 1.0) * sigma.get(B, 0)
        for p in ref["per_pass"]:
            t, routed, sp = predict_pass(p["routes"], E, P, spine[B], a, b, L * exch[(rate, B)], bw, S_bytes, per_expert)
            ts.append(t + jit)
            parts.append((sp, routed, L * exch[(rate, B)], jit))
        return B * len(ts) / sum(ts), [statistics.fmean(x[i] for x in parts) for i in range(4)]

    print(f"\n{P} ranks, one core and one thread each: measured tokens/s (mean +- half the range over repetitions) vs "
          "model")
    print("  host: one_t1's inputs (each rank a host of its own); machine: the same, each part at least its bytes at "
          "the bandwidth a core had with both streaming, measured around that run (stream_probe)")
    print("  link     B   measured tok/s       host model  error   (spine + routed + exchange + jitter, ms)   "
          "machine model  error")
    worst = {"host": 0.0, "machine": 0.0}
    for rate in rates:
        for B in batches:
            runs = [r for r in ranks if r["rate"] == rate and r["batch"] == B]
            if not runs:
                continue
            m, spread, n = mean_spread([r["tokens_per_s"] for r in runs])
            preds = [predict(r, rate, B, spine_alone, a1, b1) for r in runs]
            model = statistics.fmean(x[0] for x in preds)
            sp = [statistics.fmean(x[1][i] for x in preds) * 1e3 for i in range(4)]
            err = model / m - 1
            worst["host"] = max(worst["host"], abs(err))
            with_bw = [r for r in runs if run_bw(r)]
            mtxt = ""
            if with_bw:
                mm, _, _ = mean_spread([r["tokens_per_s"] for r in with_bw])
                vm = statistics.fmean(predict(r, rate, B, spine_alone, a1, b1, run_bw(r))[0] for r in with_bw)
                worst["machine"] = max(worst["machine"], abs(vm / mm - 1))
                mtxt = f"{vm:7.3f}  {vm / mm - 1:+6.1%}" + (f" (of {len(with_bw)} runs measuring {mm:.3f})"
                                                           if len(with_bw) < n else "")
            print(f"  {rate:7} {B:>2}  {m:7.3f} +- {spread:5.3f} ({n})  {model:7.3f}  {err:+6.1%}   "
                  f"({sp[0]:5.1f} + {sp[1]:4.1f} + {sp[2]:4.2f} + {sp[3]:3.1f})        {mtxt}")
    for key, w in worst.items():
        if w:
            print(f"  {key} model: worst error {w:.1%}: {'within' if w <= 0.20 else 'NOT within'} 20%")
    if streams:
        print("  each ranks run: measured tok/s, host and machine model, the slower core's bandwidth with both "
              "streaming before / after it (GB/s), the run's spine a pass (rank 0's timers, ms)")
        for r in ranks:
            bws = [min(x["both_gbps"]) for x in streams if x["run"] == r["run"] and x["batch"] == r["batch"]
                   and x["rate"] == r["rate"]]
            if not bws:
                continue
            h = predict(r, r["rate"], r["batch"], spine_alone, a1, b1)[0]
            v = predict(r, r["rate"], r["batch"], spine_alone, a1, b1, run_bw(r))[0]
            spine_run = r["mean_seconds_per_pass"] - r["routed_expert_seconds_per_pass"] - r["exchange_seconds_per_pass"]
            print(f"    B={r['batch']:>2} {r['rate']:7} rep {r['rep']}: {r['tokens_per_s']:7.3f}  host {h:7.3f} "
                  f"({h / r['tokens_per_s'] - 1:+.0%})  machine {v:7.3f} ({v / r['tokens_per_s'] - 1:+.0%})  bw "
                  + " / ".join(f"{x:.1f}" for x in bws) + f"  spine {spine_run * 1e3:.1f}")

    # Where the ranks' time went (rank 0's in-run timers; the fastest and slowest rank's routed and
    # exchange time), against the model's terms: which term misses, if one does.
    if ranks:
        print("\n  the ranks' in-run timers (ms a pass, mean of the repetitions) against the model's terms:")
        print("  kind        link     B    pass | spine: run model | slowest routed: run model | fastest routed | "
              "exchange: rank 0, fastest, slowest | probe a pass apart")
        for kind, runs_all, spine, a, b in (("ranks", ranks, spine_alone, a1, b1),):
            for rate in rates:
                for B in batches:
                    runs = [r for r in runs_all if r["rate"] == rate and r["batch"] == B]
                    if not runs:
                        continue
                    f = lambda key: statistics.fmean(key(r) for r in runs) * 1e3
                    pass_ms = f(lambda r: r["mean_seconds_per_pass"])
                    lo = f(lambda r: r["ranks"]["routed_expert_seconds_per_pass"][0])
                    hi = f(lambda r: r["ranks"]["routed_expert_seconds_per_pass"][1])
                    ex0 = f(lambda r: r["exchange_seconds_per_pass"])
                    exlo = f(lambda r: r["ranks"]["exchange_seconds_per_pass"][0])
                    exhi = f(lambda r: r["ranks"]["exchange_seconds_per_pass"][1])
                    spine_run = pass_ms - f(lambda r: r["routed_expert_seconds_per_pass"]) - ex0
                    ref = [x for x in alone if x["batch"] == B]
                    model_hi = statistics.fmean(predict_pass(p["routes"], E, P, 0, a, b, 0)[1]
                                                for x in ref for p in x["per_pass"]) * 1e3
                    print(f"  {kind:10}  {rate:7} {B:>2} {pass_ms:7.1f} | {spine_run:6.1f} {spine[B] * 1e3:6.1f} | "
                          f"{hi:6.1f} {model_hi:6.1f} | {lo:6.1f} | {ex0:6.2f} {exlo:6.2f} {exhi:6.2f} | "
                          f"{L * exch[(rate, B)] * 1e3:6.2f}")
        print("  rows each rank computed (SLUICE_CLUSTER_STATS, the whole run, prefill included): "
              + "; ".join(f"B={r['batch']} {r['rows_per_rank']}" for r in ranks
                          if r["run"] == ranks[0]["run"] and r["rate"] == "native"))

    if one_all:
        threads = one_all[0]["threads"]
        print(f"\none process on {threads} threads and on one, against the ranks (native link), tok/s:")
        for B in batches:
            o = [r["tokens_per_s"] for r in one_all if r["batch"] == B]
            t1 = [r["tokens_per_s"] for r in alone if r["batch"] == B]
            rk = [r["tokens_per_s"] for r in ranks if r["batch"] == B and r["rate"] == "native"]
            if o and t1 and rk:
                mo, so, _ = mean_spread(o)
                m1, s1, _ = mean_spread(t1)
                mr, sr, _ = mean_spread(rk)
                print(f"  B={B:>2}: {threads} threads {mo:6.2f} +- {so:.2f}, 1 thread {m1:6.2f} +- {s1:.2f}, {P} ranks "
                      f"{mr:6.2f} +- {sr:.2f}: {mr / mo:.2f}x the {threads}-thread process, {mr / m1:.2f}x one thread")

    # Imbalance: the real routes' slowest rank against the simulated random routing the projection uses.
    if alone:
        print("\nthe slowest rank's routed time over the mean (this slice's routes, cost a e + b n):")
        for B in batches:
            xs = []
            for x in alone:
                if x["batch"] != B:
                    continue
                for p in x["per_pass"]:
                    for s in shares(p["routes"], E, P):
                        costs = [a1 * e + b1 * n for e, n in s]
                        xs.append(max(costs) / (sum(costs) / P))
            ds = [len(r["experts"]) for x in alone if x["batch"] == B for p in x["per_pass"] for r in p["routes"]]
            if xs:
                print(f"  B={B:>2}: measured routes {statistics.fmean(xs):.2f} ({statistics.fmean(ds):.0f} distinct "
                      f"experts a layer; random routing: {distinct(E, k, B):.0f}); random routing, simulated (distinct "
                      f"experts): {busiest(E, k, B, P):.2f}")

    k3_projection(args, a_s_min, a1, b1, 3 * c["moe_intermediate_size"] * c["hidden_size"],
                  S_bytes / spine_alone[min(spine_alone)],
                  {B: spine_alone[B] / spine_alone[min(spine_alone)] for B in spine_alone})


def k3_projection(args, a_s, a_slice, b_slice, weights_slice, core_rate, spine_profile):
    """Kimi K3 on hosts of their own."""
    if args.k3_config:
        k3 = json.load(open(args.k3_config))
        k3 = k3.get("text_config", k3)
    else:
        k3 = {"hidden_size": 7168, "num_hidden_layers": 93, "first_k_dense_replace": 1, "num_experts": 896,
              "num_experts_per_token": 16, "moe_intermediate_size": 3072, "routed_expert_hidden_size": 3584,
              "intermediate_size": 33792, "num_attention_heads": 96, "q_lora_rank": 1536, "kv_lora_rank": 512,
              "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "num_shared_experts": 2,
              "vocab_size": 163840, "kda_heads": 96, "kda_dim": 128}
    D, NL, Ek, kk = k3["hidden_size"], k3["num_hidden_layers"], k3["num_experts"], k3["num_experts_per_token"]
    I, LW, DI = k3["moe_intermediate_size"], k3["routed_expert_hidden_size"], k3["intermediate_size"]
    H, ql, kl = k3["num_attention_heads"], k3["q_lora_rank"], k3["kv_lora_rank"]
    nope, rope, v = k3["qk_nope_head_dim"], k3["qk_rope_head_dim"], k3["v_head_dim"]
    Ck = k3.get("kda_heads", 96) * k3.get("kda_dim", 128)
    KD = k3.get("kda_dim", 128)
    # bf16 spine, the tensors of synthetic.cpp's k3_tensors: KDA on 3 layers of 4, MLA on the rest and the last.
    kda = 4 * Ck * D + KD * D + Ck * KD + k3.get("kda_heads", 96) * D + D * Ck
    mla = ql * D + H * (nope + rope) * ql + (kl + rope) * D + H * (nope + v) * kl + 2 * H * v * D
    n_mla = sum(1 for i in range(1, NL + 1) if i % 4 == 0 or i == NL)
    attn = (NL - n_mla) * kda + n_mla * mla
    Lk = NL - 1
    moe_spine = Lk * (Ek * D + 2 * LW * D + 3 * I * k3.get("num_shared_experts", 2) * D)
    dense = 3 * DI * D
    head = k3["vocab_size"] * D
    S3 = 2 * (attn + moe_spine + dense + head)
    ex3 = 3 * I * LW * (0.5 + 1 / 32)  # MXFP4: half a byte a weight and a scale byte per 32
    # 'kernel': the slice's per-core times scaled to K3 and to a host h times one core of this machine
    # (h = R / the core's spine bytes a second): the spine's time grows with the batch as measured on the
    # slice (its rows' arithmetic; measured batches only), the routed experts cost a an expert and b a row,
    # scaled by K3's weights an expert over the slice's.
    scale = 3 * I * LW / weights_slice
    print(f"\nKimi K3 projection ({NL} layers, {Lk} MoE, hidden {D}, top-{kk} of {Ek} experts of "
          f"{ex3 / 1e6:.1f} MB (MXFP4), exchange width {LW} (latent): {kk * LW * 4 / 1e3:.0f} KB a token a layer)")
    print(f"  spine {S3 / 1e9:.1f} GB a pass in bf16 (attention {2 * attn / 1e9:.1f}, MoE-layer dense parts "
          f"{2 * moe_spine / 1e9:.1f} (router, latent projections, 2 shared experts), lm_head {2 * head / 1e9:.1f}); "
          f"int8 spine: half")
    print(f"  inputs: exchange software a_s = {a_s * 1e6:.0f} us a ring step (12-byte exchange, fastest); link latency "
          f"0.1 / 0.5 ms; host rate R (bytes of weights a host reads a second, all its cores): 100 / 300 GB/s;")
    print(f"  compute, two ways: 'bytes' (the earlier projection) a pass reads the spine and each chosen expert's "
          f"{ex3 / 1e6:.1f} MB once at R, whatever its rows; 'kernel' as sluice's CPU kernels measured on the slice, "
          f"one core: spine time x " + ", ".join(f"{g:.2f} at B={B}" for B, g in sorted(spine_profile.items()))
          + f" of B=1's (rows' arithmetic), an expert a = {a_slice * 1e3:.3f} ms + a row b = {b_slice * 1e3:.3f} ms "
          f"(x {scale:.2f} for K3's expert), on a host R / {core_rate / 1e9:.1f} GB/s times one core")
    imbs = {(B, Ph): busiest(Ek, kk, B, Ph) for B in (1, 4, 16, 64) for Ph in (2, 4)}
    print("  busiest host's experts over the mean a layer (simulated, random routing): "
          + ", ".join(f"B={B} {Ph} hosts {x:.2f}" for (B, Ph), x in sorted(imbs.items())))
    verdict = {}
    for how in ("kernel", "bytes"):
        for spine_name, Sx in (("bf16", S3), ("int8", S3 / 2)):
            for Rh in (100e9, 300e9):
                lines = []
                h = Rh / core_rate
                for rate in (10e9, 25e9):
                    for lat in (0.1e-3, 0.5e-3):
                        for B in (1, 4, 16, 64):
                            d = distinct(Ek, kk, B)
                            if how == "kernel":
                                if B not in spine_profile:
                                    continue
                                spine_t = Sx / Rh * spine_profile[B]
                                X = (d * a_slice + B * kk * b_slice) * scale / h * Lk
                            else:
                                spine_t = Sx / Rh
                                X = d * ex3 * Lk / Rh
                            t1 = spine_t + X
                            out = []
                            for Ph in (2, 4):
                                tp = spine_t + X * imbs[(B, Ph)] / Ph + Lk * tx(Ph, B, kk, LW, rate, lat, a_s)
                                out.append((B / tp, t1 / tp))
                                verdict[(how, spine_name, Rh, rate, lat, B, Ph)] = t1 / tp
                            if rate == 25e9:
                                lines.append(f"    {lat * 1e3:.1f}ms {B:>2}  {B / t1:8.2f}  {out[0][0]:7.2f} ({out[0][1]:.2f}x)"
                                             f"  {out[1][0]:7.2f} ({out[1][1]:.2f}x)  {Lk * tx(4, B, kk, LW, rate, lat, a_s) * 1e3:7.1f}"
                                             f"  {spine_t / t1:5.0%}")
                print(f"  experts '{how}', spine {spine_name}, R = {Rh / 1e9:.0f} GB/s, 25 Gbit/s links:")
                print("    lat     B  1 host tok/s  2 hosts (x)     4 hosts (x)  exchange ms/pass (4 hosts)  spine's share (1 host)")
                print("\n".join(lines))
    for how in ("kernel", "bytes"):
        for Ph, need in ((2, 1.8), (4, 3.2)):
            for rate in (25e9, 10e9):
                xs = [x for key, x in verdict.items() if key[0] == how and key[3] == rate and key[5] >= 4 and key[6] == Ph]
                print(f"  experts '{how}': {Ph} hosts at batch >= 4 on {rate / 1e9:.0f} Gbit/s: {min(xs):.2f}-{max(xs):.2f}x "
                      f"(needed {need}x)")
        ok = sorted({f"spine {k_[1]}, R {k_[2] / 1e9:.0f} GB/s, B {k_[5]}, {k_[6]} hosts" for k_, x in verdict.items()
                     if k_[0] == how and k_[3] == 25e9 and k_[5] >= 4 and x >= (1.8 if k_[6] == 2 else 3.2)})
        print(f"  experts '{how}': >= 1.8x (2 hosts) / >= 3.2x (4 hosts) at 25 Gbit/s reached where: "
              + ("; ".join(ok) if ok else "nowhere above"))
    print("  What prevents it: S, the spine every host reads whole each pass (attention and the MoE layers' dense parts "
          "are not split; the hosts divide only the experts), then the busiest host's share of the experts and, at "
          "batch 1, the exchange's 92 latencies. Removing it: split the spine too (tensor-parallel attention and shared "
          "experts, a second exchange a layer), an int8 spine, batches where the experts dominate, a split by measured "
          "load instead of equal bytes.")


if __name__ == "__main__":
    sys.exit(main())
