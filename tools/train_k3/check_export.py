#!/usr/bin/python3
"""CPU check of the shipped model (Debian: python3-torch python3-numpy):
  /usr/bin/python3 tools/train_k3/check_export.py [models/sluice-k3-mini] [tests/fixtures/golden/sluice_k3_mini_reference.safetensors]
- release layout checks of k3_reference.py (tensor counts per layer, expert runs contiguous, A_log padding);
- k3_reference.py (float64) recomputes the golden from the checkpoint and compares (logits, hidden, greedy);
- model.py (float64 and float32) on the same checkpoint vs k3_reference.py: max relative logit error per position;
- tokenizer: the golden's input_ids decode and re-encode to the same ids.
"""
import os, sys, time
import torch
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from model import K3Model
from export import PRESET, read_release, load_release_into
from bpe import Tokenizer
sys.path.insert(0, os.environ.get("K3_REF_DIR", os.path.join(ROOT, "tests", "fixtures", "golden")))
import k3_reference as ref

d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "sluice-k3-mini")
gpath = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "fixtures", "golden", "sluice_k3_mini_reference.safetensors")
import json
cfg = json.load(open(os.path.join(d, "config.json")))
raw = read_release(d)
ref.check_layout(raw, cfg)
for fn in sorted(os.listdir(d)):
    if fn.endswith(".safetensors"):
        print(f"{fn}: {ref.expert_runs_contiguous(os.path.join(d, fn))} contiguous expert runs")
gold, _, _ = ref.st_read(gpath)
tok = Tokenizer(os.path.join(d, "tokenizer.json"))
ids = gold["input_ids"]
text = tok.decode(ids.tolist())
assert tok.encode(text) == ids.tolist(), "tokenizer round trip"
print("golden text:", repr(text[:120]), "...")
t0 = time.time()
model, _ = ref.load_model_dir(d, kda_form="both")
mine, out = ref.make_reference(model, ids, len(gold["greedy_prompt"]), len(gold["greedy_ids"]))
res = ref.compare_reference(mine, gold)
print(f"k3_reference recompute vs stored golden ({time.time()-t0:.1f}s):")
for k, v in sorted(res.items()):
    print(f"   {k:14s} {v}")
assert res["greedy_ids"] == len(gold["greedy_ids"]) and res["logits"][0] < 1e-9
c = dict(PRESET)
for dt in (torch.float64, torch.float32):
    m = K3Model(c).to(dt)
    load_release_into(m, raw)
    with torch.no_grad():
        lg = m(ids[None])[0]
    r = ref.rel_rows(lg.to(torch.float64), out["logits"])
    print(f"model.py {str(dt):14s} vs k3_reference float64: max rel logit error per position {float(r.max()):.2e} (median {float(r.median()):.2e})")
print("greedy:", repr(tok.decode(gold["greedy_prompt"].tolist())), "->", repr(tok.decode(gold["greedy_ids"].tolist())))
print("ok")
