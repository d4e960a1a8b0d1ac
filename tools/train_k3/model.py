"""Trainable PyTorch Kimi K3 text model (same function as ../shared/golden/k3_reference.py, batched).

Parameter names are the release names without the `language_model.model.` prefix (lm_head.weight without
`model.`), so export is a rename. Differences from the release tensors, handled by export.py:
  - KDA A_log is a per-head [H] parameter here; the release stores it zero-padded to [head_dim].
  - routed experts are stacked per layer: block_sparse_moe.experts_w{1,2,3} [E, out, in]; the release stores
    experts.{e}.w{1,2,3} as MXFP4 (weight_packed U8 [out, in/2], weight_scale U8 [out, in/32]).
  - e_score_correction_bias is a buffer, updated by the aux-loss-free balancing rule (not by gradients).

Forward math (k3_spec.md section 3, k3_reference.py Model):
  KDA: q,k,v = SiLU(causal depthwise conv4(W x)); per-head l2norm (eps 1e-6 inside sqrt), q * D^-0.5;
       g = -5 sigmoid(exp(A_log[h]) (f_b f_a x + dt_bias)); beta = sigmoid(b x); gated delta rule;
       o = RMSNorm_head(o; o_norm) * sigmoid(g_proj x); out = o_proj o.
  MLA: NoPE, q = q_b RMSNorm(q_a x; 1e-6); [c | k_pe] = kv_a x; [k_nope | v] = kv_b RMSNorm(c; 1e-6);
       key = [k_nope | k_pe shared]; causal softmax(q.k / sqrt(nope+rope)); o * sigmoid(g_proj x); o_proj.
  MoE: sigmoid router, top-k of (score + e_score_correction_bias), weights = renormalised scores;
       latent: down -> experts (SiTU GLU) -> RMSNorm -> up; + fused shared experts on the full width.
  Block AttnRes instead of a residual stream.
The KDA core uses a chunked form (chunk 16, decays factored around the chunk middle so that every
exponential stays within e^+-40 in float32; exact, since the K3 gate bounds g to (-5, 0)).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


# ------------------------------------------------------------------------------------------------
# MXFP4 (E2M1 values, E8M0 scale per 32 inputs)
# ------------------------------------------------------------------------------------------------
E2M1_BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]   # midpoints between consecutive E2M1 magnitudes


def mxfp4_quantize(w):
    """w [..., out, in] float -> (codes int64 [..., out, in] in 0..15, scale_exp int64 [..., out, in/32]).
    Per group of 32 inputs: scale = 2^e with e = ceil(log2(amax / 6)) (the smallest power of two for which
    amax / scale <= 6, so nothing is clipped; computed exactly with frexp); x / scale is rounded to the nearest
    E2M1 magnitude, ties toward the smaller magnitude; -0 is stored as code 0. All steps are exact in float32,
    so the GPU (QAT forward) and CPU (export) give identical codes."""
    shp = w.shape
    g = w.detach().float().reshape(*shp[:-1], shp[-1] // 32, 32)
    amax = g.abs().amax(-1, keepdim=True)
    m, ex = torch.frexp(amax / 6.0)                            # amax/6 = m * 2^ex, m in [0.5, 1)
    e = torch.where(m == 0.5, ex - 1, ex)
    e = torch.where(amax > 0, e, torch.full_like(e, -127)).clamp(-127, 127)
    x = torch.ldexp(g, -e.float())
    bounds = torch.tensor(E2M1_BOUNDS, dtype=torch.float32, device=w.device)
    mag = torch.bucketize(x.abs(), bounds, right=False)          # b[i-1] < |x| <= b[i] -> i
    sign = (x < 0) & (mag > 0)
    codes = (mag + 8 * sign.long()).reshape(shp)
    return codes, e.squeeze(-1).long()


def mxfp4_dequant(codes, scale_exp):
    grid = torch.tensor(E2M1_GRID + [-v for v in E2M1_GRID], dtype=torch.float64, device=codes.device)
    vals = grid[codes]
    s = torch.pow(2.0, scale_exp.to(torch.float64)).repeat_interleave(32, dim=-1)
    return vals * s


def mxfp4_fake_quant(w):
    """Straight-through estimator: forward = exact MXFP4 value, backward = identity."""
    c, e = mxfp4_quantize(w)
    grid = torch.tensor(E2M1_GRID + [-v for v in E2M1_GRID], dtype=torch.float32, device=w.device)
    q = torch.ldexp(grid[c], e.float().repeat_interleave(32, dim=-1)).to(w.dtype)
    return w + (q - w).detach()


# ------------------------------------------------------------------------------------------------
def rmsnorm(x, w, eps):
    xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    y = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)
    return (y * w.to(y.dtype)).to(x.dtype)


def situ(g, u, b1=4.0, b2=25.0):
    return (b1 * torch.tanh(g / b1) * torch.sigmoid(g)) * (b2 * torch.tanh(u / b2))


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def kda_chunk(q, k, v, g, beta, C=16):
    """q,k [B,T,H,K] (q already scaled), v [B,T,H,V], g [B,T,H,K] log-decay in (-5, 0], beta [B,T,H].
    Returns o [B,T,H,V] with S <- diag(exp g) S; u = v - S^T k; S <- S + beta k u^T; o = S^T q."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    pad = (-T) % C
    if pad:
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    N = (T + pad) // C
    q, k, v, g = (x.transpose(1, 2).reshape(B, H, N, C, x.shape[-1]) for x in (q, k, v, g))
    beta = beta.transpose(1, 2).reshape(B, H, N, C)
    G = g.cumsum(-2)                                  # inclusive, within chunk
    Gm = G[..., C // 2 - 1:C // 2, :]
    kd = k * torch.exp(G - Gm)
    ku = k * torch.exp(Gm - G)
    qd = q * torch.exp(G - Gm)
    idx = torch.arange(C, device=q.device)
    strict = idx[:, None] > idx[None, :]
    incl = idx[:, None] >= idx[None, :]
    A = (kd @ ku.transpose(-1, -2)) * beta[..., :, None]
    A = A.masked_fill(~strict, 0.0)
    M = A + torch.eye(C, dtype=q.dtype, device=q.device)
    eG = torch.exp(G)
    U = torch.linalg.solve_triangular(M, beta[..., None] * v, upper=False, unitriangular=True)
    W = torch.linalg.solve_triangular(M, beta[..., None] * (eG * k), upper=False, unitriangular=True)
    QK = (qd @ ku.transpose(-1, -2)).masked_fill(~incl, 0.0)
    qg = q * eG
    Gl = G[..., -1:, :]
    kl = k * torch.exp(Gl - G)
    dec = torch.exp(Gl).transpose(-1, -2)             # [B,H,N,K,1]
    S = torch.zeros(B, H, K, V, dtype=q.dtype, device=q.device)
    outs = []
    for n in range(N):
        Vp = U[:, :, n] - W[:, :, n] @ S
        outs.append(qg[:, :, n] @ S + QK[:, :, n] @ Vp)
        S = dec[:, :, n] * S + kl[:, :, n].transpose(-1, -2) @ Vp
    o = torch.stack(outs, 2).reshape(B, H, N * C, V)[:, :, :T]
    return o.transpose(1, 2)


def kda_recurrent(q, k, v, g, beta):
    B, T, H, K = k.shape
    S = torch.zeros(B, H, K, v.shape[-1], dtype=q.dtype, device=q.device)
    out = []
    for t in range(T):
        S = S * torch.exp(g[:, t])[..., None]
        u = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])
        S = S + beta[:, t][..., None, None] * k[:, t][..., :, None] * u[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(out, 1)


def _lin(i, o):
    return nn.Linear(i, o, bias=False)


class KDA(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, H, D = c["hidden"], c["kda_heads"], c["kda_dim"]
        self.H, self.D, self.eps, self.lb = H, D, c["eps"], c["gate_lower_bound"]
        for n in "qkv":
            setattr(self, f"{n}_proj", _lin(d, H * D))
            setattr(self, f"{n}_conv1d", nn.Parameter(torch.empty(H * D, 1, 4)))
        self.f_a_proj = _lin(d, D)
        self.f_b_proj = _lin(D, H * D)
        self.dt_bias = nn.Parameter(torch.empty(H * D))
        self.A_log = nn.Parameter(torch.zeros(H))
        self.b_proj = _lin(d, H)
        self.g_proj = _lin(d, H * D)
        self.o_norm = nn.Parameter(torch.ones(D))
        self.o_proj = _lin(H * D, d)

    def conv(self, x, w):
        B, T, Cn = x.shape
        y = F.conv1d(F.pad(x.transpose(1, 2), (3, 0)), w.to(x.dtype), groups=Cn)
        return F.silu(y.transpose(1, 2))

    def forward(self, x, recurrent=False):
        B, T, _ = x.shape
        H, D = self.H, self.D
        q = self.conv(self.q_proj(x), self.q_conv1d).view(B, T, H, D)
        k = self.conv(self.k_proj(x), self.k_conv1d).view(B, T, H, D)
        v = self.conv(self.v_proj(x), self.v_conv1d).view(B, T, H, D)
        z = (self.f_b_proj(self.f_a_proj(x)) + self.dt_bias.to(x.dtype)).view(B, T, H, D)
        beta = torch.sigmoid(self.b_proj(x))
        core = torch.float64 if x.dtype == torch.float64 else torch.float32
        with torch.autocast(device_type=x.device.type, enabled=False):
            q, k, v, z, beta = (t.to(core) for t in (q, k, v, z, beta))
            q = l2norm(q) * D ** -0.5
            k = l2norm(k)
            g = self.lb * torch.sigmoid(torch.exp(self.A_log.to(core))[None, None, :, None] * z)
            o = kda_recurrent(q, k, v, g, beta) if recurrent else kda_chunk(q, k, v, g, beta)
            o = rmsnorm(o, self.o_norm, self.eps)
        o = o.to(x.dtype) * torch.sigmoid(self.g_proj(x)).view(B, T, H, D)
        return self.o_proj(o.reshape(B, T, H * D))


class MLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, H = c["hidden"], c["mla_heads"]
        self.H, self.nope, self.rope, self.vd, self.kvl = H, c["nope"], c["rope"], c["vdim"], c["kv_lora"]
        self.q_a_proj = _lin(d, c["q_lora"])
        self.q_a_layernorm = nn.Parameter(torch.ones(c["q_lora"]))
        self.q_b_proj = _lin(c["q_lora"], H * (c["nope"] + c["rope"]))
        self.kv_a_proj_with_mqa = _lin(d, c["kv_lora"] + c["rope"])
        self.kv_a_layernorm = nn.Parameter(torch.ones(c["kv_lora"]))
        self.kv_b_proj = _lin(c["kv_lora"], H * (c["nope"] + c["vdim"]))
        self.g_proj = _lin(d, H * c["vdim"])
        self.o_proj = _lin(H * c["vdim"], d)

    def forward(self, x, recurrent=False):
        B, T, _ = x.shape
        H, dq = self.H, self.nope + self.rope
        q = self.q_b_proj(rmsnorm(self.q_a_proj(x), self.q_a_layernorm, 1e-6)).view(B, T, H, dq)
        ckv = self.kv_a_proj_with_mqa(x)
        c, kpe = ckv[..., :self.kvl], ckv[..., self.kvl:]
        kv = self.kv_b_proj(rmsnorm(c, self.kv_a_layernorm, 1e-6)).view(B, T, H, self.nope + self.vd)
        knope, val = kv[..., :self.nope], kv[..., self.nope:]
        key = torch.cat([knope, kpe[:, :, None, :].expand(B, T, H, self.rope)], -1)
        qh, kh, vh = q.transpose(1, 2), key.transpose(1, 2), val.transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention") and x.dtype != torch.float64:
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=1.0 / math.sqrt(dq))
        else:
            sc = (qh @ kh.transpose(-1, -2)) / math.sqrt(dq)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            o = torch.softmax(sc.masked_fill(mask, float("-inf")), -1) @ vh
        o = o.transpose(1, 2).reshape(B, T, H * self.vd) * torch.sigmoid(self.g_proj(x))
        return self.o_proj(o)


class DenseMLP(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = _lin(d, inter), _lin(d, inter), _lin(inter, d)

    def forward(self, x):
        return self.down_proj(situ(self.gate_proj(x), self.up_proj(x)))


class Router(nn.Module):
    def __init__(self, d, E):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, d))
        self.register_buffer("e_score_correction_bias", torch.zeros(E))


class LatentMoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, E, I, Lt = c["hidden"], c["experts"], c["moe_inter"], c["latent"]
        self.E, self.I, self.Lt, self.k, self.eps = E, I, Lt, c["top_k"], c["eps"]
        self.gate = Router(d, E)
        self.routed_expert_down_proj = _lin(d, Lt)
        self.routed_expert_norm = nn.Parameter(torch.ones(Lt))
        self.routed_expert_up_proj = _lin(Lt, d)
        self.experts_w1 = nn.Parameter(torch.empty(E, I, Lt))    # gate [I, Lt]
        self.experts_w2 = nn.Parameter(torch.empty(E, Lt, I))    # down [Lt, I]
        self.experts_w3 = nn.Parameter(torch.empty(E, I, Lt))    # up   [I, Lt]
        self.shared_experts = DenseMLP(d, c["shared"] * I)
        self.qat = False
        self.last_idx = None

    def forward(self, x):
        shp = x.shape
        xf = x.reshape(-1, shp[-1])
        N = xf.shape[0]
        with torch.autocast(device_type=x.device.type, enabled=False):
            rd = torch.float64 if x.dtype == torch.float64 else torch.float32
            scores = torch.sigmoid(xf.to(rd) @ self.gate.weight.to(rd).t())
            choice = scores + self.gate.e_score_correction_bias.to(rd)
            idx = torch.topk(choice, self.k, dim=-1).indices
            w = scores.gather(1, idx)
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
            dense_w = torch.zeros_like(scores).scatter(1, idx, w)
        self.last_idx = idx.detach()
        w1, w2, w3 = self.experts_w1, self.experts_w2, self.experts_w3
        if self.qat:
            w1, w2, w3 = mxfp4_fake_quant(w1), mxfp4_fake_quant(w2), mxfp4_fake_quant(w3)
        E, I, Lt = self.E, self.I, self.Lt
        xin = self.routed_expert_down_proj(xf)                               # [N, Lt]
        h1 = F.linear(xin, w1.reshape(E * I, Lt))
        h3 = F.linear(xin, w3.reshape(E * I, Lt))
        a = situ(h1, h3).view(N, E, I) * dense_w.to(h1.dtype)[:, :, None]
        w2c = w2.transpose(1, 2).reshape(E * I, Lt)                          # rows e*I+i -> w2[e][:, i]
        y = F.linear(a.reshape(N, E * I), w2c.t())
        y = self.routed_expert_up_proj(rmsnorm(y, self.routed_expert_norm, self.eps))
        return (y + self.shared_experts(xf)).view(shp)


class Layer(nn.Module):
    def __init__(self, c, l):
        super().__init__()
        d = c["hidden"]
        self.l, self.eps, self.B = l, c["eps"], c["block"]
        self.is_mla = l in c["mla"]
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            setattr(self, n, nn.Parameter(torch.ones(d)))
        self.self_attention_res_proj = nn.Parameter(torch.zeros(1, d))
        self.mlp_res_proj = nn.Parameter(torch.zeros(1, d))
        self.self_attn = MLA(c) if self.is_mla else KDA(c)
        if l == 0:
            self.mlp = DenseMLP(d, c["dense_inter"])
        else:
            self.block_sparse_moe = LatentMoE(c)

    def forward(self, h, blocks, recurrent=False):
        p = h
        x = h if not blocks else attn_res(blocks, p, self.self_attention_res_norm, self.self_attention_res_proj, self.eps)
        if self.l % self.B == 0:
            blocks = blocks + [h]
            p = None
        a = self.self_attn(rmsnorm(x, self.input_layernorm, self.eps), recurrent=recurrent).to(h.dtype)
        p = a if p is None else p + a
        m = attn_res(blocks, p, self.mlp_res_norm, self.mlp_res_proj, self.eps)
        mlp = self.mlp if self.l == 0 else self.block_sparse_moe
        f = mlp(rmsnorm(m, self.post_attention_layernorm, self.eps)).to(h.dtype)
        return p + f, blocks


def attn_res(blocks, p, wn, wp, eps):
    V = torch.stack(blocks + [p])                                       # [S, B, T, d]
    with torch.autocast(device_type=p.device.type, enabled=False):
        Vf = V.float() if V.dtype != torch.float64 else V
        logits = (rmsnorm(Vf, wn, eps) * wp.reshape(-1).to(Vf.dtype)).sum(-1)
        a = torch.softmax(logits, dim=0)
        return (a[..., None] * Vf).sum(0).to(p.dtype)


class K3Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c["hidden"]
        self.embed_tokens = nn.Embedding(c["vocab"], d)
        self.layers = nn.ModuleList([Layer(c, l) for l in range(c["layers"])])
        self.norm = nn.Parameter(torch.ones(d))
        self.output_attn_res_norm = nn.Parameter(torch.ones(d))
        self.output_attn_res_proj = nn.Parameter(torch.zeros(1, d))
        self.lm_head = _lin(d, c["vocab"])

    def moes(self):
        return [l.block_sparse_moe for l in self.layers if l.l != 0]

    def set_qat(self, on):
        for m in self.moes():
            m.qat = on

    def forward(self, ids, recurrent=False, return_hidden=False):
        h = self.embed_tokens.weight[ids]
        blocks = []
        hidden = []
        for layer in self.layers:
            h, blocks = layer(h, blocks, recurrent=recurrent)
            if return_hidden:
                hidden.append(h)
        y = attn_res(blocks, h, self.output_attn_res_norm, self.output_attn_res_proj, self.c["eps"])
        final = rmsnorm(y, self.norm, self.c["eps"])
        logits = self.lm_head(final).float() if final.dtype != torch.float64 else self.lm_head(final)
        if return_hidden:
            return logits, hidden, final
        return logits


def init_weights(model, seed):
    """Deterministic init (CPU generator, then moved)."""
    g = torch.Generator().manual_seed(seed)
    c = model.c
    L = c["layers"]
    for name, p in sorted(model.named_parameters()):
        with torch.no_grad():
            if name == "embed_tokens.weight":
                t = torch.randn(p.shape, generator=g)
            elif name.endswith("res_proj") or name.endswith("A_log"):
                t = torch.zeros(p.shape)
            elif name.endswith("conv1d"):
                t = (torch.rand(p.shape, generator=g) * 2 - 1) * 0.5
            elif name.endswith("dt_bias"):
                t = -1.0 - 7.0 * torch.rand(p.shape, generator=g)        # decay exp(-5 sigmoid(z)) from ~0.4 to ~0.998
            elif p.dim() == 1:
                t = torch.ones(p.shape)
            else:
                std = 0.02
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight") or "experts_w2" in name \
                        or name.endswith("routed_expert_up_proj.weight"):
                    std = 0.02 / math.sqrt(2 * L)
                if "experts_w" in name:
                    std = 1.0 / math.sqrt(p.shape[-1])
                t = torch.randn(p.shape, generator=g) * std
            p.copy_(t.to(p.dtype))


def count_params(c):
    m = K3Model(c)
    tot = sum(p.numel() for p in m.parameters()) + sum(b.numel() for b in m.buffers())
    exp = sum(p.numel() for n, p in m.named_parameters() if "experts_w" in n)
    return tot, exp
