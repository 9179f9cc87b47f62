#!/usr/bin/env python3
"""PyTorch reference-fixture generator for memwall's Llama model.

Hugging Face's modeling_llama, written out in plain torch (Debian has no transformers package):
LlamaRMSNorm in fp32 (x * rsqrt(mean(x^2) + eps), then weight * x), LlamaRotaryEmbedding
(inv_freq = 1 / theta^(arange(0, hs, 2) / hs) in float, angles t * inv_freq rounded to float,
cos/sin of cat(freqs, freqs)), apply_rotary_pos_emb with rotate_half, repeat_kv for grouped-query
attention (query head h reads kv head h // (H / KV)), causal softmax attention scaled by
1/sqrt(hs), o_proj, residual, post_attention_layernorm, MLP down(silu(gate(x)) * up(x)), final
norm, LM head (tied: the embedding; untied: lm_head.weight), mean cross-entropy.

Trains the model for 3 AdamW steps exactly as make_gpt2_fixture.py trains GPT-2 (2 accumulated
micro-batches per step, warm-up 1 then cosine lr, lr 1e-3, betas 0.9/0.95, eps 1e-5, weight
decay 0.1 on 2-D weights only, clipping at half the step-0 gradient norm) and writes config,
hyper-parameters, tokens, initial params, step-0 logits and gradients, per-step loss / grad-norm
/ lr, the params after the first step and after all steps. Parameter names are Hugging Face's
(model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., model.norm.weight,
lm_head.weight when untied), each (out, in) as in HF's state_dict.

Initialisation (the C test sets every parameter from the fixture): matrices N(0, 0.02) as HF
initialises them; RMSNorm gains 1 + 0.1 N(0, 1) rather than HF's ones, so that their gradients
and the gain's place in the formula are exercised (as the GPT-2 fixture perturbs LayerNorm's).

File format: .mwfx, as make_gpt2_fixture.py (its write_mwfx / check_mwfx are reused).
Records: config i32[12] (L,H,KV,C,F,V,ctx,B,T,accum,steps,tied);
         llama f32[2] (rope_theta, rms_norm_eps);
         hparams f32[8] (max_lr,min_lr_frac,warmup,beta1,beta2,eps,weight_decay,clip);
         tokens i32[steps,accum,B,T+1]; init/<name>...; logits f32[B,T,V];
         loss f32[steps]; gradnorm f32[steps]; lr f32[steps];
         grad/<name>... (step 0, pre-clip); step1/<name>... (after the first step);
         final/<name>... (after all steps).

Shapes: tiny  L=2 H=4 KV=2 (GQA, groups of 2) C=48 F=128 V=128 ctx=32 B=2 T=16, untied head,
              theta 10000;
        long  L=2 H=4 KV=1 (MQA) C=32 F=88 V=96 ctx=192 B=2 T=160, tied head, theta 500000:
              T crosses the 128-position attention tile and B*T = 320 rows the 256-row loss
              quantum.

Run (Debian's python with torch 1.13):
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \\
        tests/ref/make_llama_fixture.py --out tests/ref/llama_tiny.mwfx
    ... make_llama_fixture.py --shape long --out tests/ref/llama_long.mwfx
    ... make_llama_fixture.py --check tests/ref/llama_tiny.mwfx        # dump records

Checking a memwall export against this torch model (by hand, once; not part of `make test`):
    ... make_llama_fixture.py --check-export DIR [--logits FILE.mwfx]
reads DIR/config.json (Hugging Face LlamaConfig keys) and DIR/model.safetensors (parsed by hand:
u64 header length, JSON header, raw F32/F16/BF16 data), and checks that its tensor names and
shapes are exactly those of this model's state_dict for that config (lm_head.weight absent when
tie_word_embeddings, as save_pretrained writes it). With --logits, FILE holds "tokens" (B,T)
int32 and "logits" (B,T,V) f32 (for example memwall's logits for those tokens), or is a fixture
of this script (its step-0 tokens and logits: DIR then holds the fixture's init weights); the
logits of the exported weights must match to 1e-5 of the largest. Exit 0 when everything
matches, 1 otherwise. To try the check itself:
    ... make_llama_fixture.py --write-export /tmp/llx                   # tiny init weights, HF layout
    ... make_llama_fixture.py --check-export /tmp/llx --logits tests/ref/llama_tiny.mwfx
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt2_fixture import check_mwfx, write_mwfx  # noqa: E402  (the same .mwfx container)

L, H, KV, C, FF, V, CTX, B, T, TIED, THETA, NORM_EPS = 2, 4, 2, 48, 128, 128, 32, 2, 16, 0, 10000.0, 1e-5
ACCUM, STEPS = 2, 3
# the GPT-2 fixture's hyper-parameters (its comment says why lr 1e-3 and eps 1e-5)
MAX_LR, MIN_LR_FRAC, WARMUP = 1e-3, 0.1, 1
BETAS, EPS, WD = (0.9, 0.95), 1e-5, 0.1
SHAPES = {
    "tiny": dict(L=2, H=4, KV=2, C=48, FF=128, V=128, CTX=32, B=2, T=16, TIED=0, THETA=10000.0),
    "long": dict(L=2, H=4, KV=1, C=32, FF=88, V=96, CTX=192, B=2, T=160, TIED=1, THETA=500000.0),
}


def param_table():
    """(name, shape) in memwall's table order (COMMON contract), Hugging Face's names."""
    hs = C // H
    t = [("model.embed_tokens.weight", (V, C))]
    for l in range(L):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", (C,)),
              (p + "self_attn.q_proj.weight", (H * hs, C)), (p + "self_attn.k_proj.weight", (KV * hs, C)),
              (p + "self_attn.v_proj.weight", (KV * hs, C)), (p + "self_attn.o_proj.weight", (C, H * hs)),
              (p + "post_attention_layernorm.weight", (C,)),
              (p + "mlp.gate_proj.weight", (FF, C)), (p + "mlp.up_proj.weight", (FF, C)),
              (p + "mlp.down_proj.weight", (C, FF))]
    t.append(("model.norm.weight", (C,)))
    if not TIED:
        t.append(("lm_head.weight", (V, C)))
    return t


# ---- a module tree with Hugging Face's names, for its state_dict (the export check) ------------

class _Attn(nn.Module):
    def __init__(self):
        super().__init__()
        hs = C // H
        self.q_proj = nn.Linear(C, H * hs, bias=False)
        self.k_proj = nn.Linear(C, KV * hs, bias=False)
        self.v_proj = nn.Linear(C, KV * hs, bias=False)
        self.o_proj = nn.Linear(H * hs, C, bias=False)


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(C, FF, bias=False)
        self.up_proj = nn.Linear(C, FF, bias=False)
        self.down_proj = nn.Linear(FF, C, bias=False)


class _RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))


class _Layer(nn.Module):  # LlamaDecoderLayer's registration order
    def __init__(self):
        super().__init__()
        self.self_attn, self.mlp = _Attn(), _MLP()
        self.input_layernorm, self.post_attention_layernorm = _RMSNorm(), _RMSNorm()


class _Body(nn.Module):  # LlamaModel
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(_Layer() for _ in range(L))
        self.norm = _RMSNorm()


class LlamaForCausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = _Body()
        self.lm_head = nn.Linear(C, V, bias=False)
        if TIED:
            self.lm_head.weight = self.model.embed_tokens.weight

    def saved_state(self):
        """state_dict as save_pretrained writes it: the tied lm_head.weight is not stored."""
        sd = self.state_dict()
        if TIED:
            del sd["lm_head.weight"]
        return sd


# ---- the equations ---------------------------------------------------------------------------

def init_param(name, shape):
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return 1 + 0.1 * torch.randn(shape)
    return torch.randn(shape) * 0.02


def rms_norm(x, w):
    """LlamaRMSNorm: in fp32, then weight * x."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)
    return w * xf.to(x.dtype)


def rope_cos_sin(t):
    """LlamaRotaryEmbedding: (t, hs) cos and sin, angles rounded to float as HF computes them."""
    hs = C // H
    inv_freq = 1.0 / (THETA ** (torch.arange(0, hs, 2).float() / hs))
    freqs = torch.outer(torch.arange(t).float(), inv_freq.float())  # HF: a float matmul, K = 1
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, n_rep):
    """(b, KV, t, hs) -> (b, KV * n_rep, t, hs): query head h reads kv head h // n_rep."""
    b, kv, t, hs = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, n_rep, t, hs).reshape(b, kv * n_rep, t, hs)


def forward(P, idx):
    """idx (B,T) int64 -> logits (B,T,V)."""
    b, t = idx.shape
    hs = C // H
    cos, sin = rope_cos_sin(t)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    x = P["model.embed_tokens.weight"][idx]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"])
        q = F.linear(h, P[p + "self_attn.q_proj.weight"]).view(b, t, H, hs).transpose(1, 2)
        k = F.linear(h, P[p + "self_attn.k_proj.weight"]).view(b, t, KV, hs).transpose(1, 2)
        v = F.linear(h, P[p + "self_attn.v_proj.weight"]).view(b, t, KV, hs).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, H * hs)
        x = x + F.linear(y, P[p + "self_attn.o_proj.weight"])
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"])
        g = F.linear(h, P[p + "mlp.gate_proj.weight"])
        u = F.linear(h, P[p + "mlp.up_proj.weight"])
        x = x + F.linear(F.silu(g) * u, P[p + "mlp.down_proj.weight"])
    x = rms_norm(x, P["model.norm.weight"])
    head = P["model.embed_tokens.weight"] if TIED else P["lm_head.weight"]
    return F.linear(x, head).float()


def lr_at(s):
    min_lr = MAX_LR * MIN_LR_FRAC
    if s < WARMUP:
        return MAX_LR * (s + 1) / WARMUP
    p = (s - WARMUP) / (STEPS - WARMUP) if STEPS > WARMUP else 0.0
    return min_lr + 0.5 * (MAX_LR - min_lr) * (1 + math.cos(math.pi * p))


def accumulate(P, tokens, s):
    """Zero grads, run the accum micro-batches of step s; returns (mean loss, first logits)."""
    for p in P.values():
        p.grad = None
    losses, first = [], None
    for m in range(ACCUM):
        tok = tokens[s, m]
        logits = forward(P, tok[:, :T])
        loss = F.cross_entropy(logits.reshape(-1, V), tok[:, 1:].reshape(-1))
        (loss / ACCUM).backward()
        losses.append(loss.detach())
        first = logits.detach().clone() if first is None else first
    return torch.stack(losses).mean().item(), first


# ---- safetensors by hand, and the export check -----------------------------------------------

def read_safetensors(path):
    """name -> float32 tensor; F32, F16 and BF16 (widened to F32). Raises on a malformed file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    n = struct.unpack_from("<Q", data, 0)[0]
    if 8 + n > len(data):
        raise ValueError(f"{path}: header of {n} bytes runs past the end of the file")
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        shape, dt = list(v["shape"]), v["dtype"]
        count = int(np.prod(shape)) if shape else 1
        width = {"F32": 4, "F16": 2, "BF16": 2}.get(dt)
        if width is None:
            raise ValueError(f"{path}: {k} has dtype {dt} (F32, F16 or BF16 expected)")
        if not 0 <= b <= e <= len(body) or e - b != count * width:
            raise ValueError(f"{path}: {k}: data_offsets {b}..{e} do not hold {shape} {dt}")
        raw = body[b:e]
        if dt == "F32":
            a = np.frombuffer(raw, "<f4").copy()
        elif dt == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        else:
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        out[k] = torch.from_numpy(a.reshape(shape))
    return out


def write_safetensors(path, tensors):
    """F32, names sorted, compact JSON header padded with spaces to a multiple of 8."""
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for n in sorted(tensors):
        a = tensors[n].detach().numpy().astype("<f4")
        header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def hf_config():
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
            "intermediate_size": FF, "num_attention_heads": H, "num_hidden_layers": L,
            "num_key_value_heads": KV, "vocab_size": V, "max_position_embeddings": CTX,
            "rms_norm_eps": NORM_EPS, "rope_theta": THETA, "tie_word_embeddings": bool(TIED),
            "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32"}


def set_shape_from_hf(cfg):
    heads = cfg["num_attention_heads"]
    hs = cfg.get("head_dim", cfg["hidden_size"] // heads)
    if hs * heads != cfg["hidden_size"]:
        raise ValueError(f"head_dim {hs} x {heads} heads != hidden_size {cfg['hidden_size']}")
    globals().update(L=cfg["num_hidden_layers"], H=heads, KV=cfg.get("num_key_value_heads", heads),
                     C=cfg["hidden_size"], FF=cfg["intermediate_size"], V=cfg["vocab_size"],
                     CTX=cfg.get("max_position_embeddings", 2048),
                     TIED=int(bool(cfg.get("tie_word_embeddings", False))),
                     THETA=float(cfg.get("rope_theta", 10000.0)), NORM_EPS=float(cfg.get("rms_norm_eps", 1e-6)))


def read_mwfx(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"MWFX0001":
        raise ValueError(f"{path}: not an .mwfx file")
    (n,), off, out = struct.unpack_from("<I", data, 8), 12, {}
    for _ in range(n):
        (nl,) = struct.unpack_from("<I", data, off); off += 4
        name = data[off:off + nl].decode(); off += nl
        dt, nd = struct.unpack_from("<II", data, off); off += 8
        dims = struct.unpack_from(f"<{nd}I", data, off); off += 4 * nd
        arr = np.frombuffer(data, ["<f4", "<i4"][dt], int(np.prod(dims)), off).reshape(dims)
        off += arr.nbytes
        out[name] = arr
    return out


def check_export(d, logits_path):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type", "llama") != "llama":
        print(f"{d}/config.json: model_type {cfg.get('model_type')!r}, not 'llama'")
        return 1
    set_shape_from_hf(cfg)
    print(f"{d}: L={L} H={H} KV={KV} C={C} F={FF} V={V} ctx={CTX} tied={TIED} theta={THETA:g} "
          f"eps={NORM_EPS:g}")
    got = read_safetensors(os.path.join(d, "model.safetensors"))
    want = {n: tuple(t.shape) for n, t in LlamaForCausalLM().saved_state().items()}
    bad = 0
    for n in sorted(set(want) - set(got)):
        print(f"  missing: {n} {list(want[n])}"); bad += 1
    for n in sorted(set(got) - set(want)):
        print(f"  unexpected: {n} {list(got[n].shape)}"); bad += 1
    for n in sorted(set(got) & set(want)):
        if tuple(got[n].shape) != want[n]:
            print(f"  {n}: shape {list(got[n].shape)}, torch's state_dict has {list(want[n])}"); bad += 1
    print(f"names and shapes: {len(got)} tensors, {len(want)} in torch's state_dict: "
          f"{'identical' if not bad else f'{bad} difference(s)'}")
    if logits_path and not bad:
        r = read_mwfx(logits_path)
        tok = r["tokens"]
        if tok.ndim == 4:  # a fixture of this script: its step-0 micro-batch
            tok = tok[0, 0, :, :-1]
        ref = torch.from_numpy(r["logits"].copy())
        if tok.min() < 0 or tok.max() >= V:
            print(f"{logits_path}: token ids {tok.min()}..{tok.max()} outside the vocabulary of {V}")
            return 1
        with torch.no_grad():
            lg = forward(got, torch.from_numpy(tok.astype(np.int64)))
        if lg.shape != ref.shape:
            print(f"logits: shape {list(lg.shape)} vs {list(ref.shape)} in {logits_path}")
            return 1
        err = ((lg - ref).abs().max() / ref.abs().max()).item()
        print(f"logits of the exported weights vs {logits_path}: max rel err {err:.3g} (bound 1e-5)")
        bad += err > 1e-5 or not math.isfinite(err)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write fixture to this .mwfx path")
    ap.add_argument("--check", help="read back a .mwfx and list its records")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny",
                    help="long: T=160 and B*T=320, to cross the 128-position attention tile and "
                         "the 256-position loss quantum; MQA and a tied head")
    ap.add_argument("--check-export", metavar="DIR",
                    help="check DIR/config.json + DIR/model.safetensors against this torch model")
    ap.add_argument("--logits", metavar="FILE", help="with --check-export: logits to compare with")
    ap.add_argument("--write-export", metavar="DIR",
                    help="write the --shape fixture's initial weights as config.json + "
                         "model.safetensors (Hugging Face's layout), to try --check-export")
    args = ap.parse_args()
    globals().update(SHAPES[args.shape])
    if args.check:
        return check_mwfx(args.check)
    if args.check_export:
        torch.set_num_threads(1)
        return check_export(args.check_export, args.logits)
    if not args.out and not args.write_export:
        ap.error("need --out, --check, --check-export or --write-export")

    torch.manual_seed(1234)
    torch.set_num_threads(1)
    table = param_table()
    init = {n: init_param(n, s).float() for n, s in table}
    tokens = torch.randint(0, V, (STEPS, ACCUM, B, T + 1))
    model_names = set(LlamaForCausalLM().saved_state())
    assert model_names == {n for n, _ in table}, "table and HF module tree disagree"
    if args.write_export:
        os.makedirs(args.write_export, exist_ok=True)
        with open(os.path.join(args.write_export, "config.json"), "w") as f:
            json.dump(hf_config(), f, indent=2)
        write_safetensors(os.path.join(args.write_export, "model.safetensors"), init)
        print(f"wrote {args.write_export}/config.json and model.safetensors ({args.shape} init weights)")
        if not args.out:
            return 0

    # Dry pass: step-0 grad norm with initial params -> clip = half of it (so clipping is active).
    P = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    accumulate(P, tokens, 0)
    gn0 = torch.nn.utils.clip_grad_norm_(list(P.values()), float("inf")).item()
    clip = float(np.float32(0.5 * gn0))  # value used == value stored

    P = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    decay = [P[n] for n, _ in table if P[n].dim() == 2]
    no_decay = [P[n] for n, _ in table if P[n].dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=MAX_LR, betas=BETAS, eps=EPS, foreach=False)
    losses, gnorms, lrs = [], [], []
    for s in range(STEPS):
        lr = lr_at(s)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, logits = accumulate(P, tokens, s)
        if s == 0:
            logits0 = logits
            grads0 = {n: P[n].grad.detach().clone() for n, _ in table}
        gn = torch.nn.utils.clip_grad_norm_(list(P.values()), clip).item()
        opt.step()
        if s == 0:
            params1 = {n: P[n].detach().clone() for n, _ in table}
        losses.append(loss); gnorms.append(gn); lrs.append(lr)
        print(f"step {s}: lr={lr:.6g} loss={loss:.6f} gradnorm={gn:.6f}")
    print(f"clip={clip:.6f}")

    f32 = lambda t: np.asarray(t, dtype=np.float32)
    recs = [("config", np.array([L, H, KV, C, FF, V, CTX, B, T, ACCUM, STEPS, TIED], np.int32)),
            ("llama", f32([THETA, NORM_EPS])),
            ("hparams", f32([MAX_LR, MIN_LR_FRAC, WARMUP, *BETAS, EPS, WD, clip])),
            ("tokens", tokens.numpy().astype(np.int32))]
    recs += [(f"init/{n}", init[n].numpy()) for n, _ in table]
    recs += [("logits", logits0.numpy()), ("loss", f32(losses)),
             ("gradnorm", f32(gnorms)), ("lr", f32(lrs))]
    recs += [(f"grad/{n}", grads0[n].numpy()) for n, _ in table]
    recs += [(f"step1/{n}", params1[n].numpy()) for n, _ in table]
    recs += [(f"final/{n}", P[n].detach().numpy()) for n, _ in table]
    write_mwfx(args.out, recs)
    print(f"wrote {args.out} ({len(recs)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
