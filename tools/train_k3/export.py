"""Kimi K3 release layout: config.json, sharded safetensors + index, MXFP4 compressed-tensors experts.

Follows ../shared/golden/k3_reference.py (k3_config, random_k3_checkpoint, st_write) and kimi_k3_tiny exactly:
names `language_model.model.*` (+ `language_model.lm_head.weight`), conv1d/dt_bias/A_log/o_norm/
e_score_correction_bias F32 (A_log zero-padded to [head_dim]), experts.{e}.w{1,2,3}.weight_packed U8 [out, in/2]
(low nibble = even column) + weight_scale U8 [out, in/32] (E8M0, bias 127), everything else BF16. Tensor data in
safetensors order (dtype alignment, then name), so every expert's six tensors are contiguous and each MoE layer's
experts form one run inside one shard. Shards are named like the release: model-NNNNN-of-NNNNNN.safetensors.
"""
import json
import os
import struct

import numpy as np
import torch

from model import mxfp4_quantize, mxfp4_dequant

PRESET = dict(
    name="sluice-k3-mini", vocab=4096, hidden=256, layers=8, mla=[3, 7], block=2,
    kda_heads=4, kda_dim=64, gate_lower_bound=-5.0, mla_heads=4, q_lora=128, kv_lora=64, nope=64, rope=32, vdim=64,
    dense_inter=768, experts=64, top_k=4, latent=128, moe_inter=128, shared=2, eps=1e-5,
    bos=4092, eos=4094, pad=4095, endoftext=4092,
)

_ST = {"U8": (torch.uint8, np.uint8, 1), "I8": (torch.int8, np.int8, 2), "BF16": (torch.bfloat16, np.int16, 6),
       "F16": (torch.float16, np.float16, 5), "I32": (torch.int32, np.int32, 7), "F32": (torch.float32, np.float32, 9),
       "F64": (torch.float64, np.float64, 10), "I64": (torch.int64, np.int64, 11)}
_T2S = {v[0]: k for k, v in _ST.items()}


def st_write(path, tensors, metadata=None):
    order = sorted(tensors, key=lambda k: (-_ST[_T2S[tensors[k].dtype]][2], k))
    header = {} if metadata is None else {"__metadata__": metadata}
    chunks, off = [], 0
    for k in order:
        t = tensors[k].detach().cpu().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[k] = {"dtype": _T2S[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for c in chunks:
            f.write(c)
    return off


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tdt, ndt, _ = _ST[info["dtype"]]
        a, b = info["data_offsets"]
        t = torch.from_numpy(np.frombuffer(blob[a:b], dtype=ndt).copy())
        if info["dtype"] == "BF16":
            t = t.view(torch.bfloat16)
        out[name] = t.reshape(info["shape"])
    return out


def k3_config(p):
    L = p["layers"]
    qcfg = {
        "config_groups": {"group_0": {
            "format": "mxfp4-pack-quantized", "input_activations": None, "output_activations": None,
            "targets": ["Linear"],
            "weights": {"actorder": None, "block_structure": None, "dynamic": False, "group_size": 32,
                        "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "scale_dtype": "torch.uint8",
                        "strategy": "group", "symmetric": True, "type": "float"}}},
        "format": "mxfp4-pack-quantized",
        "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                   "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"],
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }
    text = {
        "model_type": "kimi_linear",
        "vocab_size": p["vocab"], "hidden_size": p["hidden"], "num_hidden_layers": L,
        "max_position_embeddings": 1048576, "rms_norm_eps": p["eps"],
        "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
        "intermediate_size": p["dense_inter"], "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "num_experts": p["experts"], "num_experts_per_token": p["top_k"], "num_shared_experts": p["shared"],
        "moe_intermediate_size": p["moe_inter"], "routed_expert_hidden_size": p["latent"],
        "latent_moe_use_norm": True, "moe_router_activation_func": "sigmoid", "topk_method": "noaux_tc",
        "use_grouped_topk": True, "num_expert_group": 1, "topk_group": 1,
        "moe_renormalize": True, "routed_scaling_factor": 1.0,
        "num_attention_heads": p["mla_heads"], "num_key_value_heads": p["mla_heads"],
        "q_lora_rank": p["q_lora"], "kv_lora_rank": p["kv_lora"],
        "qk_nope_head_dim": p["nope"], "qk_rope_head_dim": p["rope"], "v_head_dim": p["vdim"],
        "mla_use_nope": True, "mla_use_output_gate": True,
        "attn_res_block_size": p["block"], "num_nextn_predict_layers": 0, "use_cache": True,
        "tie_word_embeddings": False,
        "bos_token_id": p["bos"], "eos_token_id": p["eos"], "pad_token_id": p["pad"],
        "linear_attn_config": {
            "num_heads": p["kda_heads"], "head_dim": p["kda_dim"], "short_conv_kernel_size": 4,
            "use_full_rank_gate": True, "gate_lower_bound": p["gate_lower_bound"],
            "kda_layers": [i + 1 for i in range(L) if i not in p["mla"]],
            "full_attn_layers": [i + 1 for i in p["mla"]],
        },
        "quantization_config": qcfg,
    }
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "dtype": "bfloat16",
        "bos_token_id": p["bos"], "eos_token_id": p["eos"], "pad_token_id": p["pad"],
        "media_placeholder_token_id": p["pad"],
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": {"patch_size": 14, "vt_hidden_size": 1152},
    }


F32_SUFFIXES = ("conv1d.weight", "dt_bias", "A_log", "o_norm.weight", "e_score_correction_bias")
BARE = ("dt_bias", "A_log", "e_score_correction_bias")


def release_name(k):
    """model state-dict key -> release tensor name (experts excluded)."""
    if not k.endswith(".weight") and not k.endswith(BARE):
        k = k + ".weight"
    if k == "lm_head.weight":
        return "language_model.lm_head.weight"
    return "language_model.model." + k


def to_release(model):
    """-> dict release name -> tensor in its stored dtype (experts MXFP4, exactly the QAT forward values)."""
    c = model.c
    out = {}
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    for k, v in sd.items():
        if ".experts_w" in k:
            layer = k.split(".block_sparse_moe.")[0]
            wn = k.split(".experts_")[1]                        # w1 / w2 / w3
            codes, e = mxfp4_quantize(v.to(torch.float64))
            assert int(e.max()) <= 127 and int(e.min()) >= -127
            packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
            scale = (e + 127).to(torch.uint8)
            for ei in range(c["experts"]):
                base = f"language_model.model.{layer}.block_sparse_moe.experts.{ei}.{wn}"
                out[base + ".weight_packed"] = packed[ei].contiguous()
                out[base + ".weight_scale"] = scale[ei].contiguous()
            continue
        name = release_name(k)
        if k.endswith("A_log"):
            pad = torch.zeros(c["kda_dim"], dtype=torch.float32)
            pad[: v.numel()] = v.float()
            out[name] = pad
        elif name.endswith(F32_SUFFIXES):
            out[name] = v.float().contiguous()
        else:
            out[name] = v.to(torch.bfloat16).contiguous()
    return out


def shard_of(name, n_layers):
    """Two shards: globals needed first + the first half of the layers, then the rest + lm_head."""
    if ".layers." in name:
        l = int(name.split(".layers.")[1].split(".")[0])
        return 0 if l < n_layers // 2 else 1
    return 0 if "embed_tokens" in name else 1


def write_release(d, tensors, cfg, n_shards=2):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    L = cfg["text_config"]["num_hidden_layers"]
    parts = [{} for _ in range(n_shards)]
    for k, v in tensors.items():
        parts[shard_of(k, L)][k] = v
    weight_map, total = {}, 0
    for i, part in enumerate(parts):
        fn = f"model-{i + 1:05d}-of-{n_shards:06d}.safetensors"
        total += st_write(os.path.join(d, fn), part, metadata={"format": "pt"})
        for k in part:
            weight_map[k] = fn
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    return total


def read_release(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for fn in files:
        out.update(st_read(os.path.join(d, fn)))
    return out


def load_release_into(model, tensors):
    """Exact stored values (bf16 / f32 / decoded MXFP4) into the model's parameters (model keeps its dtype)."""
    c = model.c
    sd = model.state_dict()
    new = {}
    for k, v in sd.items():
        if ".experts_w" in k:
            layer = k.split(".block_sparse_moe.")[0]
            wn = k.split(".experts_")[1]
            ws = []
            for ei in range(c["experts"]):
                base = f"language_model.model.{layer}.block_sparse_moe.experts.{ei}.{wn}"
                p = tensors[base + ".weight_packed"].to(torch.int64)
                codes = torch.stack([p & 0xF, p >> 4], -1).reshape(p.shape[0], 2 * p.shape[1])
                ws.append(mxfp4_dequant(codes, tensors[base + ".weight_scale"].to(torch.int64) - 127))
            new[k] = torch.stack(ws).to(v.dtype)
            continue
        t = tensors[release_name(k)]
        if k.endswith("A_log"):
            assert torch.all(t[v.numel():] == 0)
            t = t[: v.numel()]
        new[k] = t.to(torch.float64).to(v.dtype).reshape(v.shape)
    model.load_state_dict(new)
