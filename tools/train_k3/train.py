#!/usr/bin/env python3
"""Train sluice-k3-mini (Kimi K3 architecture, ~29M parameters) on the KJV, quantisation-aware at the end,
export it in the K3 release layout and prove it against k3_reference.py.

  python3 tools/train_k3/train.py --out OUTDIR [--steps 450] [--seed 1234] [--smoke]

Writes OUTDIR/sluice-k3-mini/ (config.json, model-0000{1,2}-of-000002.safetensors, index),
OUTDIR/sluice_k3_mini_reference.safetensors (k3_reference.py make_reference, float64, on 80 held-out tokens),
OUTDIR/report.json (loss curves, perplexities, samples, routing statistics, reproduction errors).
Needs a CUDA GPU for training (runs on CPU too, slowly); imports tests/fixtures/golden/k3_reference.py
(or K3_REF_DIR=dir). Defaults are the settings of the shipped model.
"""
import argparse, copy, json, math, os, sys, time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from model import K3Model, init_weights, count_params                      # noqa: E402
from export import PRESET, k3_config, to_release, write_release, read_release, load_release_into  # noqa: E402
from corpus import load_corpus                                               # noqa: E402
from bpe import Tokenizer                                                    # noqa: E402

TOK_DIR = os.path.join(ROOT, "models", "sluice-k3-mini")


def log(*a):
    print(*a, flush=True)


def encode_corpus(tok, c, eot):
    train_docs = [tok.encode(t) + [eot] for t in c["train_text"]]
    chat_docs = [tok.encode(t) + [eot] for t in c["chat_text"]]
    held_docs = [tok.encode(t) for t in c["heldout_text"]]
    return train_docs, chat_docs, held_docs


def hf_tokenizer_check(tok, c):
    try:
        from tokenizers import Tokenizer as HFTok
    except ImportError:
        return "tokenizers not installed"
    hf = HFTok.from_file(os.path.join(TOK_DIR, "tokenizer.json"))
    texts = c["heldout_text"] + c["chat_text"][:50] + c["train_text"][:50] + [
        "Hello world!  It's 2026, isn't it?\n\n  Tabs\tand   spaces; émigré naïve 東京 🙂 <|im_start|>x<|im_end|>"]
    bad = 0
    n = 0
    for t in texts:
        a = tok.encode(t)
        b = hf.encode(t, add_special_tokens=False).ids
        n += len(a)
        if a != b:
            bad += 1
        if hf.decode(b, skip_special_tokens=False) != t and "<|" not in t:
            bad += 1
    return f"HF tokenizers vs own encoder: {len(texts) - bad}/{len(texts)} texts identical ({n} tokens), decode round-trips"


@torch.no_grad()
def evaluate(model, held_docs, eot, dev, autocast=False, collect_routing=False, max_tokens=40000):
    """Per held-out chapter: [eot] + chapter + [eot]; NLL of every token after the first eot. Chapters are
    batched (sorted by length, right-padded with eot; padding cannot affect earlier positions: causal model,
    per-token routing) and padded positions are masked out."""
    model.eval()
    nll, n = 0.0, 0
    moes = model.moes()
    E, K = model.c["experts"], model.c["top_k"]
    hist = torch.zeros(len(moes), E, dtype=torch.long)
    reuse = torch.zeros(len(moes), dtype=torch.float64)
    reuse_n = 0
    seqs = sorted(([eot] + d + [eot] for d in held_docs), key=len)
    i = 0
    while i < len(seqs):
        j = i + 1
        while j < len(seqs) and (j + 1 - i) * len(seqs[j]) <= max_tokens:
            j += 1
        grp = seqs[i:j]
        i = j
        Lm = max(map(len, grp))
        ids = torch.full((len(grp), Lm), eot, dtype=torch.long)
        mask = torch.zeros(len(grp), Lm - 1, dtype=torch.bool)
        for r, s in enumerate(grp):
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s) - 1] = True
        ids, mask = ids.to(dev), mask.to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast):
            lg = model(ids[:, :-1]).float()
        ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        nll += float((ce * mask.reshape(-1)).sum())
        n += int(mask.sum())
        if collect_routing:
            for li, m in enumerate(moes):
                idx = m.last_idx.view(len(grp), Lm - 1, K).cpu()
                for r, s in enumerate(grp):
                    x = idx[r, :len(s) - 1]
                    hist[li] += torch.bincount(x.reshape(-1), minlength=E)
                    sel = torch.zeros(x.shape[0], E, dtype=torch.bool).scatter_(1, x, True)
                    reuse[li] += float((sel[1:] & sel[:-1]).sum()) / K
            reuse_n += sum(len(s) - 2 for s in grp)
    model.train()
    out = {"nll": nll / n, "ppl": math.exp(nll / n), "tokens": n}
    if collect_routing:
        frac = hist.double() / hist.sum(1, keepdim=True)
        ent = -(frac.clamp_min(1e-12) * frac.clamp_min(1e-12).log()).sum(1) / math.log(E)
        out["routing"] = {
            "layers": [l.l for l in model.layers if l.l != 0],
            "hist": hist.tolist(),
            "max_over_mean": (frac.max(1).values * E).tolist(),
            "min_over_mean": (frac.min(1).values * E).tolist(),
            "normalised_entropy": ent.tolist(),
            "top8_share": frac.sort(1, descending=True).values[:, :8].sum(1).tolist(),
            "consecutive_token_reuse": (reuse / reuse_n).tolist(),
            "reuse_if_independent_uniform": K / E,
        }
    return out


@torch.no_grad()
def greedy(model, ids, n, dev, stop=()):
    model.eval()
    cur = list(ids)
    out = []
    for _ in range(n):
        lg = model(torch.tensor(cur, device=dev)[None])[0, -1]
        t = int(lg.argmax())
        out.append(t)
        cur.append(t)
        if t in stop:
            break
    model.train()
    return out


def bf16_round_copy(model):
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    m.set_qat(False)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=450)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--qat-frac", type=float, default=0.2)
    ap.add_argument("--bias-gamma", type=float, default=2e-4)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--debug-small", action="store_true", help="debug: a 4-layer, 32-expert, hidden-128 model")
    ap.add_argument("--heldout-limit", type=int, default=0, help="debug: evaluate on the first N held-out chapters only")
    args = ap.parse_args()
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    c = dict(PRESET)
    if args.debug_small:
        c.update(hidden=128, layers=4, mla=[3], experts=32, latent=64, moe_inter=64, dense_inter=256, q_lora=64, kv_lora=32)
    report = {"args": vars(args), "preset": c, "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
              "torch": torch.__version__}
    tot, exp = count_params(c)
    report["params_total"], report["params_routed_experts"] = tot, exp
    log(f"params total {tot/1e6:.2f}M, routed experts {exp/1e6:.2f}M; device {report['device']} torch {torch.__version__}")

    # ---------------- data ----------------
    tok = Tokenizer(os.path.join(TOK_DIR, "tokenizer.json"))
    eot = tok.special["<|endoftext|>"]
    assert eot == c["endoftext"] and tok.special["<|im_end|>"] == c["eos"]
    corpus = load_corpus()
    t0 = time.time()
    train_docs, chat_docs, held_docs = encode_corpus(tok, corpus, eot)
    if args.heldout_limit:
        held_docs = held_docs[:args.heldout_limit]
        corpus["heldout_text"] = corpus["heldout_text"][:args.heldout_limit]
    report["hf_tokenizer_check"] = hf_tokenizer_check(tok, corpus)
    log(report["hf_tokenizer_check"])
    g = torch.Generator().manual_seed(args.seed)
    docs = train_docs + chat_docs
    order = torch.randperm(len(docs), generator=g).tolist()
    stream = torch.tensor([t for i in order for t in docs[i]], dtype=torch.long)
    n_held = sum(len(d) + 1 for d in held_docs)
    held_bytes = sum(len(t.encode()) for t in corpus["heldout_text"]) + len(held_docs)  # + 1 per chapter end
    report["data"] = {"train_tokens": int(stream.numel()), "train_chapter_tokens": sum(map(len, train_docs)),
                      "chat_docs": len(chat_docs), "heldout_chapters": len(held_docs), "heldout_tokens": n_held,
                      "heldout_bytes": held_bytes}
    log(f"tokenized in {time.time()-t0:.1f}s: {report['data']}")
    stream_dev = stream.to(dev)

    # ---------------- model ----------------
    model = K3Model(c)
    init_weights(model, args.seed)
    model.to(dev)
    if args.dropout > 0:   # training-only dropout on each layer's attention and FFN outputs (inference function unchanged)
        for layer in model.layers:
            for sub in (layer.self_attn, layer.mlp if layer.l == 0 else layer.block_sparse_moe):
                sub.register_forward_hook(lambda mod, inp, out: F.dropout(out, args.dropout, mod.training))
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if (p.dim() >= 2 and "res_proj" not in n and "conv1d" not in n) else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if dev.type == "cuda" else {}))
    qat_start = int(args.steps * (1 - args.qat_frac))

    def lr_at(s):
        if s < args.warmup:
            return args.lr * (s + 1) / args.warmup
        pr = (s - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * pr)))

    B, T = args.batch, args.seq
    losses, evals = [], []
    run_loss, run_n = 0.0, 0
    t_train = time.time()
    moes = model.moes()
    E, K = c["experts"], c["top_k"]
    for step in range(args.steps):
        if step == qat_start:
            pre = evaluate(model, held_docs, eot, dev)
            model.set_qat(True)
            ptq = evaluate(model, held_docs, eot, dev)
            mb = bf16_round_copy(model)
            pre_bf16 = evaluate(mb, held_docs, eot, dev)
            del mb
            report["pre_qat"] = {"step": step, "ppl_fp32": pre["ppl"], "ppl_bf16": pre_bf16["ppl"], "ppl_ptq_mxfp4": ptq["ppl"]}
            log(f"step {step}: QAT on. held-out ppl fp32 {pre['ppl']:.3f}, bf16 {pre_bf16['ppl']:.3f}, "
                f"post-training MXFP4 {ptq['ppl']:.3f}")
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step)
        offs = torch.randint(0, stream.numel() - T - 1, (B,), generator=g)
        ix = offs[:, None] + torch.arange(T + 1)[None]
        batch = stream_dev[ix.to(dev)]
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            lg = model(batch[:, :-1])
        loss = F.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():   # aux-loss-free balancing (DeepSeek-V3): bias += gamma * sign(mean load - load)
            for m in moes:
                load = torch.bincount(m.last_idx.reshape(-1), minlength=E).float()
                m.gate.e_score_correction_bias += args.bias_gamma * torch.sign(load.mean() - load)
        run_loss += loss.item()
        run_n += 1
        if (step + 1) % 10 == 0:
            losses.append([step + 1, run_loss / run_n])
            run_loss, run_n = 0.0, 0
        if (step + 1) % 50 == 0 or step == 0:
            el = time.time() - t_train
            log(f"step {step+1}/{args.steps} loss {loss.item():.4f} gnorm {float(gn):.2f} lr {lr_at(step):.2e} "
                f"{el:.0f}s {(step+1)*B*T/el/1e3:.0f}k tok/s"
                + (f" mem {torch.cuda.max_memory_allocated()/2**30:.1f}GiB" if dev.type == "cuda" else ""))
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            ev = evaluate(model, held_docs, eot, dev, autocast=True)
            evals.append([step + 1, ev["nll"]])
            log(f"   eval step {step+1}: held-out nll {ev['nll']:.4f} ppl {ev['ppl']:.3f}")
    report["train_seconds"] = time.time() - t_train
    report["train_loss_every_10"] = losses
    report["heldout_nll_curve"] = evals
    report["tokens_seen"] = args.steps * B * T
    report["epochs"] = args.steps * B * T / stream.numel()

    # ---------------- final numbers ----------------
    mb = bf16_round_copy(model)
    fin_bf16 = evaluate(mb, held_docs, eot, dev)
    del mb
    cfg = k3_config(c)
    rel = to_release(model)
    exp_dir = os.path.join(args.out, "sluice-k3-mini")
    total = write_release(exp_dir, rel, cfg)
    with open(os.path.join(exp_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": c["bos"], "eos_token_id": [c["eos"], c["endoftext"]], "pad_token_id": c["pad"],
                   "do_sample": False}, f, indent=2)
    mq = K3Model(c).float()
    load_release_into(mq, read_release(exp_dir))
    mq.to(dev)
    try:
        final_sections(args, report, c, dev, tok, corpus, held_docs, eot, mq, fin_bf16, held_bytes, total, exp_dir, cfg)
    except Exception:
        import traceback
        report["error"] = traceback.format_exc()
        log(report["error"])
    report["total_seconds"] = time.time() - t_start
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(f"done in {report['total_seconds']:.0f}s")


def final_sections(args, report, c, dev, tok, corpus, held_docs, eot, mq, fin_bf16, held_bytes, total, exp_dir, cfg):
    fin_q = evaluate(mq, held_docs, eot, dev, collect_routing=True)
    nb = held_bytes
    report["final"] = {
        "ppl_bf16": fin_bf16["ppl"], "ppl_mxfp4_export": fin_q["ppl"],
        "bits_per_byte_bf16": fin_bf16["nll"] * fin_q["tokens"] / nb / math.log(2),
        "bits_per_byte_mxfp4": fin_q["nll"] * fin_q["tokens"] / nb / math.log(2),
        "heldout_tokens": fin_q["tokens"], "export_bytes": total,
    }
    report["routing"] = fin_q["routing"]
    log(f"final held-out ppl: bf16 {fin_bf16['ppl']:.3f}, exported MXFP4 {fin_q['ppl']:.3f}")
    for i, l in enumerate(fin_q["routing"]["layers"]):
        r = fin_q["routing"]
        log(f"   layer {l}: max/mean {r['max_over_mean'][i]:.2f} min/mean {r['min_over_mean'][i]:.2f} "
            f"entropy {r['normalised_entropy'][i]:.3f} top8 {r['top8_share'][i]:.2f} reuse {r['consecutive_token_reuse'][i]:.3f}")

    # ---------------- samples (exported model, greedy) ----------------
    samples = []
    for j in range(10):
        ci = (j * 6) % len(held_docs)
        d = held_docs[ci]
        prompt = d[:16]
        gen = greedy(mq, prompt, 8 if args.smoke else 48, dev, stop=(eot,))
        samples.append({"chapter": corpus["heldout_names"][ci], "prompt": tok.decode(prompt), "continuation": tok.decode(gen),
                        "reference": tok.decode(d[16:16 + len(gen)])})
        log(f"[{samples[-1]['chapter']}] {samples[-1]['prompt']!r} -> {samples[-1]['continuation']!r}")
    chat = []
    for q in ["In the beginning God created the heaven and the earth.", "Who is like unto thee, O LORD?",
              "What shall we eat, and what shall we drink?"]:
        p = tok.encode(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n")
        gen = greedy(mq, p, 8 if args.smoke else 64, dev, stop=(c["eos"], eot))
        chat.append({"user": q, "assistant": tok.decode(gen)})
        log(f"[chat] {q!r} -> {chat[-1]['assistant']!r}")
    report["samples"] = samples
    report["chat_samples"] = chat

    # ---------------- proof against k3_reference.py (float64) ----------------
    ref_ids = torch.tensor(held_docs[0][:80], dtype=torch.long)
    m64 = K3Model(c).double()
    load_release_into(m64, read_release(exp_dir))
    m64.to(dev)
    with torch.no_grad():
        mine64, hid64, fin64 = m64(ref_ids.to(dev)[None], return_hidden=True)
        mine32 = mq(ref_ids.to(dev)[None])[0].double().cpu()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            mine_bf = mq(ref_ids.to(dev)[None])[0].double().cpu()
    sys.path.insert(0, os.environ.get("K3_REF_DIR", os.path.join(ROOT, "tests", "fixtures", "golden")))
    import k3_reference as ref   # noqa: E402  (sets torch's default dtype to float64)
    ref.check_layout(read_release(exp_dir), cfg)
    for fn in sorted(os.listdir(exp_dir)):
        if fn.endswith(".safetensors"):
            ref.expert_runs_contiguous(os.path.join(exp_dir, fn))
    t0 = time.time()
    rmodel, _ = ref.load_model_dir(exp_dir, kda_form="both")
    gold, out = ref.make_reference(rmodel, ref_ids, prompt_len=12, n_greedy=16)
    ref.st_write(os.path.join(args.out, "sluice_k3_mini_reference.safetensors"), gold)
    r64 = ref.rel_rows(mine64[0].cpu(), out["logits"])
    r32 = ref.rel_rows(mine32, out["logits"])
    rbf = ref.rel_rows(mine_bf, out["logits"])
    hmax = max(float(ref.rel_rows(h[0].cpu(), o).max()) for h, o in zip(hid64, out["hidden"]))
    mine_greedy = greedy(m64, ref_ids[:12].tolist(), 16, dev)
    report["reference_check"] = {
        "T": len(ref_ids), "text": tok.decode(ref_ids.tolist()),
        "float64_logits_max_rel_per_position": float(r64.max()),
        "float64_hidden_max_rel": hmax,
        "float32_logits_max_rel_per_position": float(r32.max()),
        "float32_logits_median_rel": float(r32.median()),
        "bf16_autocast_logits_max_rel_per_position": float(rbf.max()),
        "greedy_ids_equal": int(sum(int(a == b) for a, b in zip(mine_greedy, gold["greedy_ids"].tolist()))),
        "greedy_ids": gold["greedy_ids"].tolist(), "greedy_text": tok.decode(gold["greedy_ids"].tolist()),
        "greedy_margin_min": float(gold["greedy_margin"].min()),
        "route_min_gap": min(gp for gp, _ in rmodel.route_stats), "kda_forms_max_rel": rmodel.kda_form_diff,
        "reference_seconds": time.time() - t0,
    }
    log("reference check:", json.dumps(report["reference_check"]))


if __name__ == "__main__":
    main()
