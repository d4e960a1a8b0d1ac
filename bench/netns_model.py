#!/usr/bin/env python3
"""Decode tokens/s of expert parallelism from link rate, latency and per-layer
compute; checked against bench/netns_ranks.sh's measurements, then projected
for Kimi K3 on 2 and 4 hosts.

Usage: bench/netns_model.py RESULTS.jsonl MODEL_DIR|CHECKPOINT.json [--cores N] [--k3-config CONFIG.json]
       bench/netns_model.py --summary MODEL_DIR > CHECKPOINT.json   (what the model needs of a checkpoint,
       so the measurements can be modelled after the checkpoint is deleted; netns_ranks.sh writes it)

The model (CPU decode is a pass over the weights a pass touches, so compute is
counted in bytes and turned into time by a rate measured with one process):

  one pass of batch B on one process:  T1(B) = (S + X(B)) / R(B)
    S     spine bytes a pass reads: every weight but the routed experts and the
          embedding (attention, dense and shared-expert MLPs, router, latent
          projections, lm_head), from the checkpoint's headers
    X(B)  the routed experts' bytes the pass touches (distinct experts of B
          tokens: E (1 - (1 - k/E)^B) per MoE layer, as the single run measured)
    R(B)  the rate one process reaches, measured: (S + X(B)) / T1(B)

  P ranks, each a host with its own cores:
    TP(B) = (S + X(B) * imb / P) / R(B) + L * tx(B)
    tx(B) = (P - 1) * (lat + a) + B k W 4 (P - 1) / P / rate
          one MPI_Allgatherv per MoE layer (L of them): a ring of P - 1 steps,
          each a link latency lat plus the software's a (measured: the exchange
          of 12 bytes), and every rank receiving the other ranks' rows (B k rows
          of the MoE width W in float32) over its one link
    imb   the busiest rank's distinct experts over the mean, a layer-pass (random routing,
          simulated: busiest(); the ranks meet at every layer's exchange)

  P ranks sharing this machine's C cores (P >= C; what bench/netns_ranks.sh
  measures; each rank runs one thread): every rank reads the whole spine and
  its share of the experts, on C cores in all:
    TP(B) = T1t(B) (P s + (1 - s)) / C + L * tx(B),  s = S / (S + X(B))
  T1t(B) one process on one thread (measured); tx(B) the exchange alone on the
  same links (measured, fastest of 200: the link's part, not the scheduler's)

Aggregate tokens/s = B / TP(B); the speed-up of P hosts is T1(B) / TP(B).
"""
import argparse
import json
import math
import os
import random
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


RATES = {"native": None, "10gbit": 10e9, "25gbit": 25e9}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        S, routed, c = checkpoint_bytes(sys.argv[2])
        print(json.dumps({"spine_bytes": S, "routed_bytes": routed, "config": c}))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("model")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--k3-config", help="a Kimi K3 config.json (default: the real widths of src/store/synthetic.cpp)")
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(args.results) if l.strip()]
    one = {r["batch"]: r for r in rows if r["kind"] == "one"}
    one_thread = {r["batch"]: r for r in rows if r["kind"] == "one_thread" and "paired" not in r}
    paired = {(r["paired"], r["batch"]): r for r in rows if r["kind"] == "one_thread" and "paired" in r}
    ranks = [r for r in rows if r["kind"] == "ranks"]
    probes = [r for r in rows if r["kind"] == "probe"]
    S, routed, c = checkpoint_bytes(args.model)
    E, k, L, W = config_numbers(c)
    per_expert = routed / (E * L)
    C = args.cores
    print(f"model {args.model}: spine {S / 1e9:.3f} GB a pass (no embedding), {L} MoE layers of {E} experts "
          f"({per_expert / 1e6:.2f} MB each), top-{k}, exchange width {W}; this machine: {C} cores")

    # The software's part of one exchange step: the 12-byte exchange's fastest time over its P - 1 steps.
    P = ranks[0]["ranks"] if ranks else 3
    tiny = [p["min_us"] for p in probes if p["width"] == 1]
    a_s = (min(tiny) * 1e-6 / (P - 1)) if tiny else 50e-6
    print(f"exchange software + veth latency a step: a = {a_s * 1e6:.0f} us (12-byte exchange, fastest of 200)")
    # The link term alone: the exchange with no compute against tx(), the veth's own rate capping tbf's.
    big = max((p for p in probes if p["rate"] == "native"), key=lambda p: p["bytes"], default=None)
    native_bps = None
    if big:
        native_bps = big["bytes"] * (P - 1) / P * 8 / (big["min_us"] * 1e-6 - (P - 1) * a_s)
        print(f"the veth's own rate (largest unshaped exchange): {native_bps / 1e9:.1f} Gbit/s")
        print("  exchange alone (fastest of 200), measured vs tx() with the rate min(tbf, veth):")
        for p in probes:
            if p["width"] == 1:
                continue
            rate_bps = min(RATES[p["rate"]] or native_bps, native_bps)
            t = tx(P, p["rows"] // k, k, p["width"], rate_bps, 0, a_s)
            print(f"    {p['rate']:7} {p['bytes'] / 1e3:7.0f} KB: {p['min_us']:7.0f} us measured, {t * 1e6:7.0f} us model "
                  f"({t / (p['min_us'] * 1e-6) - 1:+.0%}); mean {p['mean_us']:.0f} us (the scheduler's share)")
    print("\nper batch, one process (measured):")
    R = {}
    for B, r in sorted(one.items()):
        X = r["expert_bytes_needed_per_token"] * B
        R[B] = (S + X) / r["seconds_per_pass"]
        t1 = f", one thread {one_thread[B]['seconds_per_pass'] * 1e3:.1f} ms/pass" if B in one_thread else ""
        print(f"  B={B:>2}: {r['seconds_per_pass'] * 1e3:8.1f} ms/pass{t1}, {r['tokens_per_s']:.3f} tokens/s; spine "
              f"{S / 1e9:.2f} GB + experts {X / 1e9:.2f} GB a pass -> R = {R[B] / 1e9:.2f} GB/s; stall "
              f"{r['io_stall_fraction']:.0%}")

    print(f"\n{P} ranks in namespaces on these {C} cores: measured against the model")
    print(f"  (link B/layer: all ranks' links together, a MoE layer of a pass; round trips a token: exch/pass x "
          f"{P - 1} ring steps / B)")
    print("  rate     B   link B/layer  exch/pass  meas tok/s  model tok/s  (compute, exchange ms/pass)  error")
    worst = 0.0
    for r in ranks:
        B, rate = r["batch"], r["rate"]
        if B not in one:
            continue
        X = one[B]["expert_bytes_needed_per_token"] * B
        s = S / (S + X)
        ref = paired.get((rate, B), one_thread.get(B))  # measured just before these ranks, where there is one
        if ref:  # the rate of one thread, as each rank runs
            comp = ref["seconds_per_pass"] * (P * s + (1 - s)) / min(P, C)
        else:  # assumes one process's threads scale perfectly
            comp = one[B]["seconds_per_pass"] * (P * s + (1 - s)) * C / min(P, C)
        probe = [p for p in probes if p["rate"] == rate and p["rows"] == B * k and p["width"] > 1]
        ex = L * (probe[0]["min_us"] * 1e-6 if probe else tx(P, B, k, W, RATES[rate] or 10e9, 0, a_s))
        model = B / (comp + ex)
        err = model / r["tokens_per_s"] - 1
        worst = max(worst, abs(err))
        per_layer = r["link_bytes_per_row"] * B * k
        # Each sequence's prompt is prefilled alone (L exchanges each); then one exchange a MoE layer a pass.
        epp = (r["exchanges"] - B * L) / r["passes"] if "passes" in r else L
        print(f"  {rate:7} {B:>2}  {per_layer / 1e3:9.0f} KB  {epp:>9g}  {r['tokens_per_s']:10.3f}  {model:11.3f}  "
              f"({comp * 1e3:8.1f}, {ex * 1e3:6.2f})  {err:+6.1%}")
    if ranks:
        print(f"  worst error {worst:.1%}: {'within' if worst <= 0.20 else 'NOT within'} 20%")
        imbs = [max(r["rows_per_rank"]) / (sum(r["rows_per_rank"]) / len(r["rows_per_rank"])) for r in ranks]
        imb = sum(imbs) / len(imbs)
        print(f"  busiest rank's expert rows over the mean: {imb:.2f} (mean of the runs)")
        print("  On these cores the ranks split the experts but each computes the whole spine, so P ranks cost "
              f"{P} spines on {C} cores: compute, not the link, sets the rate here.")
    else:
        imb = 1.15

    # Kimi K3 on hosts of their own.
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
    print(f"\nKimi K3 projection ({NL} layers, {Lk} MoE, hidden {D}, top-{kk} of {Ek} experts of "
          f"{ex3 / 1e6:.1f} MB (MXFP4), exchange width {LW} (latent): {kk * LW * 4 / 1e3:.0f} KB a token a layer)")
    print(f"  spine {S3 / 1e9:.1f} GB a pass in bf16 (attention {2 * attn / 1e9:.1f}, MoE-layer dense parts "
          f"{2 * moe_spine / 1e9:.1f} (router, latent projections, 2 shared experts), lm_head {2 * head / 1e9:.1f}); "
          f"int8 spine: half")
    print(f"  inputs: exchange software a = {a_s * 1e6:.0f} us a step; "
          "host rate R: the bytes a pass reads per second")
    imbs = {(B, Ph): busiest(Ek, kk, B, Ph) for B in (1, 4, 16, 64) for Ph in (2, 4)}
    print("  busiest host's experts over the mean a layer (simulated, random routing): "
          + ", ".join(f"B={B} {Ph} hosts {x:.2f}" for (B, Ph), x in sorted(imbs.items())))
    verdict = {}
    for spine_name, Sx in (("bf16", S3), ("int8", S3 / 2)):
        for Rh in (100e9, 300e9):
            print(f"  spine {spine_name}, host rate R = {Rh / 1e9:.0f} GB/s:")
            print("    link     lat   B   1 host tok/s  2 hosts (x)       4 hosts (x)      "
                  "exchange ms/pass (4 hosts)")
            for rate in (10e9, 25e9):
                for lat in (0.1e-3, 0.5e-3):
                    for B in (1, 4, 16, 64):
                        X = distinct(Ek, kk, B) * ex3 * Lk
                        t1 = (Sx + X) / Rh
                        out = []
                        for Ph in (2, 4):
                            tp = (Sx + X * imbs[(B, Ph)] / Ph) / Rh + Lk * tx(Ph, B, kk, LW, rate, lat, a_s)
                            out.append((B / tp, t1 / tp))
                            verdict[(spine_name, Rh, rate, lat, B, Ph)] = t1 / tp
                        exch = Lk * tx(4, B, kk, LW, rate, lat, a_s)
                        print(f"    {rate / 1e9:.0f}gbit {lat * 1e3:.1f}ms {B:>2}  {B / t1:10.2f}    "
                              f"{out[0][0]:7.2f} ({out[0][1]:.2f}x)  {out[1][0]:7.2f} ({out[1][1]:.2f}x)  {exch * 1e3:8.1f}")
    ok = [key for key, x in verdict.items() if key[2] == 25e9 and key[4] >= 4 and
          x >= (1.8 if key[5] == 2 else 3.2)]
    print("\n  >= 1.8x for 2 hosts / >= 3.2x for 4 at batch >= 4 on 25 Gbit/s: "
          + ("reached where " + "; ".join(sorted({f'spine {k_[0]}, R {k_[1] / 1e9:.0f} GB/s, lat {k_[3] * 1e3:.1f} ms, '
                                                  f'B {k_[4]}, {k_[5]} hosts' for k_ in ok}))
             if ok else "not reached at any input above"))
    print("  The term that prevents it: S, the spine every rank reads whole each pass (attention and the MoE "
          "layers' dense parts are not split); the hosts divide only X(B). Removing it: split the spine too "
          "(tensor-parallel attention and shared experts, a second exchange a layer), or batches large enough "
          "that X(B) dwarfs S; and imb, the busiest host's experts (2 / imb caps 2 hosts even with S = 0): a "
          "split by measured load instead of equal bytes, or replicating the hottest experts.")


if __name__ == "__main__":
    sys.exit(main())
