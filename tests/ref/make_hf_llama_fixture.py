#!/usr/bin/python3
"""Hugging Face Llama fixtures for memwall's import/export tests (issue 13).

A tiny Llama (L2 H4 KV2 C48 F128 V97, max_position_embeddings 32, rope_theta 50000, rms_norm_eps
1e-6, untied LM head) with random weights, written as Hugging Face stores a sharded checkpoint:
  tests/ref/hf_llama/config.json                          LlamaConfig's keys;
  tests/ref/hf_llama/model.safetensors.index.json         {"metadata": {"total_size"}, "weight_map"};
  tests/ref/hf_llama/model-00001-of-00002.safetensors     the embedding and layer 0,
  tests/ref/hf_llama/model-00002-of-00002.safetensors     layer 1, the final norm and lm_head;
      the tensors mix F32, BF16 and F16 (see DTYPE), header keys in model order;
  tests/ref/hf_llama_canonical.safetensors  the same weights as float32, written the way memwall's
      export must write them (names sorted, compact JSON, {"format":"pt"}, header padded to 8
      bytes): torch's own bf16/fp16 -> fp32 conversion, which the loader must match bit for bit;
  tests/ref/hf_llama_logits.mwfx  tokens (2, 9) and the logits (2, 9, 97) of those weights under
      Hugging Face modeling_llama's equations (written out below: Debian has no transformers).
Names and (out, in) layouts are HF's state_dict's, which are memwall's (docs/checkpoint.md).

Run:  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 tests/ref/make_hf_llama_fixture.py
Check an export:  ... make_hf_llama_fixture.py --check-export DIR  (DIR/config.json and
      DIR/model.safetensors as memwall export wrote them: the names and shapes must be exactly
      this script's model's state_dict for that config, and the logits those of the fixture)
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_gpt2_fixture as g  # noqa: E402  (write_mwfx)

CFG = {"L": 2, "H": 4, "KV": 2, "C": 48, "F": 128, "V": 97, "ctx": 32, "theta": 50000.0, "eps": 1e-6,
       "tied": False}
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
ST_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def param_table(c):
    """(name, shape) in memwall's (and HF's state_dict's) order."""
    hs = c["C"] // c["H"]
    t = [("model.embed_tokens.weight", (c["V"], c["C"]))]
    for l in range(c["L"]):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", (c["C"],)),
              (p + "self_attn.q_proj.weight", (c["H"] * hs, c["C"])),
              (p + "self_attn.k_proj.weight", (c["KV"] * hs, c["C"])),
              (p + "self_attn.v_proj.weight", (c["KV"] * hs, c["C"])),
              (p + "self_attn.o_proj.weight", (c["C"], c["H"] * hs)),
              (p + "post_attention_layernorm.weight", (c["C"],)),
              (p + "mlp.gate_proj.weight", (c["F"], c["C"])),
              (p + "mlp.up_proj.weight", (c["F"], c["C"])),
              (p + "mlp.down_proj.weight", (c["C"], c["F"]))]
    t.append(("model.norm.weight", (c["C"],)))
    if not c["tied"]:
        t.append(("lm_head.weight", (c["V"], c["C"])))
    return t


def dtype_of(name):
    """The fixture's mix: the loader must convert each exactly."""
    if name in ("model.embed_tokens.weight", "model.norm.weight") or (
            name.startswith("model.layers.0.self_attn.")):
        return torch.bfloat16
    if name.startswith("model.layers.0.mlp.") or name == "model.layers.1.self_attn.k_proj.weight":
        return torch.float16
    return torch.float32


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(P, c, idx):
    """LlamaForCausalLM's forward (modeling_llama), float32, no cache."""
    B, T = idx.shape
    H, KV, C = c["H"], c["KV"], c["C"]
    hs = C // H
    inv_freq = 1.0 / (c["theta"] ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    pos = torch.arange(T, dtype=torch.int64)
    freqs = (inv_freq[:, None].float() @ pos[None, :].float()).transpose(0, 1)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = P["model.embed_tokens.weight"][idx]
    for l in range(c["L"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], c["eps"])
        q = (h @ P[p + "self_attn.q_proj.weight"].t()).view(B, T, H, hs).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].t()).view(B, T, KV, hs).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].t()).view(B, T, KV, hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)  # repeat_kv: q head h reads kv head h // (H/KV)
        v = v.repeat_interleave(H // KV, dim=1)
        a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hs) + mask, dim=-1, dtype=torch.float32)
        y = (a @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ P[p + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], c["eps"])
        gate = torch.nn.functional.silu(h @ P[p + "mlp.gate_proj.weight"].t())
        x = x + (gate * (h @ P[p + "mlp.up_proj.weight"].t())) @ P[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, P["model.norm.weight"], c["eps"])
    head = P["model.embed_tokens.weight"] if c["tied"] else P["lm_head.weight"]
    return x @ head.t()


def tensor_bytes(t):
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()
    return t.contiguous().numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, sort, metadata):
    names = sorted(tensors) if sort else list(tensors)
    header, off, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for n in names:
        b = tensor_bytes(tensors[n])
        header[n] = {"dtype": ST_DTYPE[tensors[n].dtype], "shape": list(tensors[n].shape),
                     "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return off


def read_safetensors_f32(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            sys.exit(f"{path}: {k} is {v['dtype']}, an export is F32")
        b, e = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy().reshape(v["shape"]))
    return out


def config_json(c):
    return {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": None, "eos_token_id": None, "hidden_act": "silu", "hidden_size": c["C"],
            "initializer_range": 0.02, "intermediate_size": c["F"], "max_position_embeddings": c["ctx"],
            "mlp_bias": False, "model_type": "llama", "num_attention_heads": c["H"],
            "num_hidden_layers": c["L"], "num_key_value_heads": c["KV"], "pretraining_tp": 1,
            "rms_norm_eps": c["eps"], "rope_scaling": None, "rope_theta": c["theta"],
            "tie_word_embeddings": c["tied"], "torch_dtype": "bfloat16", "use_cache": True,
            "vocab_size": c["V"]}


def tokens():
    torch.manual_seed(7)
    return torch.randint(0, CFG["V"], (2, 9))


def check_export(d):
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "rope_scaling": None, "torch_dtype": "float32"}
    bad = {k: (cj.get(k), v) for k, v in want.items() if cj.get(k) != v}
    if bad:
        sys.exit(f"{d}/config.json differs: {bad!r}")
    c = {"L": cj["num_hidden_layers"], "H": cj["num_attention_heads"], "KV": cj["num_key_value_heads"],
         "C": cj["hidden_size"], "F": cj["intermediate_size"], "V": cj["vocab_size"],
         "ctx": cj["max_position_embeddings"], "theta": cj["rope_theta"], "eps": cj["rms_norm_eps"],
         "tied": cj["tie_word_embeddings"]}
    if cj.get("head_dim", c["C"] // c["H"]) != c["C"] // c["H"]:
        sys.exit(f"head_dim {cj['head_dim']} != hidden_size / num_attention_heads")
    P = read_safetensors_f32(os.path.join(d, "model.safetensors"))
    table = dict(param_table(c))
    got = {n: tuple(t.shape) for n, t in P.items()}
    if got != table:
        sys.exit(f"names/shapes differ from the torch model's state_dict: missing "
                 f"{sorted(set(table) - set(got))}, extra {sorted(set(got) - set(table))}, misshapen "
                 f"{[n for n in table if n in got and got[n] != table[n]]}")
    print(f"{d}: {len(P)} tensors, names and shapes == LlamaForCausalLM's state_dict for L{c['L']} "
          f"H{c['H']} KV{c['KV']} C{c['C']} F{c['F']} V{c['V']} tied={c['tied']}")
    if c == CFG:  # the fixture's model: its logits too
        ref = read_safetensors_f32(os.path.join(HERE, "hf_llama_canonical.safetensors"))
        with torch.no_grad():
            a, b = forward(P, c, tokens()), forward(ref, CFG, tokens())
        print(f"logits vs the fixture's weights: max abs diff {(a - b).abs().max().item():.3g}")
        if not torch.equal(a, b):
            sys.exit(1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-export":
        check_export(sys.argv[2])
        return
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    stored = {}
    for name, shape in param_table(CFG):
        if len(shape) == 1:  # RMSNorm weights: around 1, not all 1, so a skipped norm shows
            w = 1.0 + 0.1 * torch.randn(shape)
        else:
            w = 0.02 * torch.randn(shape)
        stored[name] = w.to(dtype_of(name))
    P = {n: t.float() for n, t in stored.items()}  # torch's conversion: what the loader must match
    d = os.path.join(HERE, "hf_llama")
    os.makedirs(d, exist_ok=True)
    shard1 = {n: t for n, t in stored.items() if n.startswith("model.embed") or n.startswith("model.layers.0.")}
    shard2 = {n: t for n, t in stored.items() if n not in shard1}
    total = write_safetensors(os.path.join(d, SHARD1), shard1, sort=False, metadata={"format": "pt"})
    total += write_safetensors(os.path.join(d, SHARD2), shard2, sort=False, metadata={"format": "pt"})
    index = {"metadata": {"total_size": total},
             "weight_map": {n: SHARD1 if n in shard1 else SHARD2 for n in sorted(stored)}}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(CFG), f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(HERE, "hf_llama_canonical.safetensors"), P, sort=True,
                      metadata={"format": "pt"})
    idx = tokens()
    with torch.no_grad():
        logits = forward(P, CFG, idx)
    g.write_mwfx(os.path.join(HERE, "hf_llama_logits.mwfx"),
                 [("tokens", idx.numpy().astype(np.int32)), ("logits", logits.numpy())])
    n16 = sum(t.numel() for t in stored.values() if t.dtype == torch.float16)
    sub = sum(int(((t.float().abs() < 6.103515625e-05) & (t != 0)).sum()) for t in stored.values()
              if t.dtype == torch.float16)
    print(f"wrote hf_llama/ (2 shards, {total} bytes of tensors; {n16} F16 values, {sub} of them subnormal), "
          "hf_llama_canonical.safetensors, hf_llama_logits.mwfx")


if __name__ == "__main__":
    main()
