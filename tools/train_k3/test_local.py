"""CPU check (float64): model.py on a randomly perturbed model, exported in the release layout, equals k3_reference.py."""
import os, sys, time, tempfile
import torch
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import K3Model, init_weights, count_params, kda_chunk, kda_recurrent
from export import PRESET, k3_config, to_release, write_release, read_release, load_release_into
sys.path.insert(0, os.environ.get("K3_REF_DIR", os.path.join(HERE, "..", "..", "tests", "fixtures", "golden")))
import k3_reference as ref
torch.set_default_dtype(torch.float32)

c = dict(PRESET)
if len(sys.argv) > 1 and sys.argv[1] == "small":
    c.update(vocab=512, experts=32, layers=4, mla=[3])
tot, exp = count_params(c)
print(f"params total {tot/1e6:.2f}M, experts {exp/1e6:.2f}M")
m = K3Model(c)
init_weights(m, 0)
g = torch.Generator().manual_seed(1)
with torch.no_grad():
    for n, p in m.named_parameters():
        if n.endswith("res_proj") or n.endswith("A_log"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    for mo in m.moes():
        mo.gate.e_score_correction_bias.copy_(torch.randn(c["experts"], generator=g) * 0.1)
# KDA forms
B, T, H, K = 2, 37, 3, 16
q = torch.randn(B, T, H, K, generator=g, dtype=torch.float64)
k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g, dtype=torch.float64), dim=-1)
v = torch.randn(B, T, H, K, generator=g, dtype=torch.float64)
gg = -5 * torch.rand(B, T, H, K, generator=g, dtype=torch.float64)
bb = torch.rand(B, T, H, generator=g, dtype=torch.float64)
o1 = kda_chunk(q, k, v, gg, bb); o2 = kda_recurrent(q, k, v, gg, bb)
o3, _ = ref.kda_recurrent(q[0], k[0], v[0], gg[0], bb[0])
print("kda chunk vs recurrent", float((o1 - o2).abs().max()), "vs ref", float((o2[0] - o3).abs().max()))
d = tempfile.mkdtemp()
cfg = k3_config(c)
rel = to_release(m)
ref.check_layout(rel, cfg)
write_release(d, rel, cfg)
for fn in sorted(os.listdir(d)):
    print(fn, os.path.getsize(os.path.join(d, fn)))
m64 = K3Model(c).double()
load_release_into(m64, read_release(d))
ids = torch.randint(0, c["vocab"], (80,), generator=g)
t0 = time.time()
with torch.no_grad():
    mine = m64(ids[None])[0]
    mine_r = m64(ids[None], recurrent=True)[0]
print("mine fwd", time.time() - t0)
model, _ = ref.load_model_dir(d, kda_form="recurrent")
t0 = time.time()
out = model.forward(ids)
print("ref fwd", time.time() - t0)
r = ref.rel_rows(mine, out["logits"])
print("float64 chunk: max rel per position", float(r.max()), "recurrent:", float(ref.rel_rows(mine_r, out["logits"]).max()))
m32 = K3Model(c)
load_release_into(m32, read_release(d))
with torch.no_grad():
    r32 = ref.rel_rows(m32(ids[None])[0].double(), out["logits"])
print("float32 chunk: max rel per position", float(r32.max()))
