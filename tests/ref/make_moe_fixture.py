#!/usr/bin/env python3
"""PyTorch reference-fixture generator for memwall's deepseek family (mixture of experts and
multi-head latent attention), written from the papers' definitions in plain torch, each token's
experts one by one (no kernel of memwall's is mirrored: no packed rows, no fused matrices):

- Mixture of experts (DeepSeekMoE, Dai et al. 2024; DeepSeek-V2/V3 reports; Mixtral, Jiang et al.
  2024; Hugging Face's DeepseekV2MoE / DeepseekV3MoE / MixtralSparseMoeBlock): router logits
  h @ gate^T; scores softmax over the experts (gate 0) or sigmoid (gate 1: V3, whose bias
  e_score_correction_bias is added for the choice only); each token's top-k experts by that
  choice (ties to the lower index); weights the chosen scores, divided by their sum when
  norm_topk (HF adds 1e-20 to the sum: nothing in fp32 here), times routed_scaling_factor; the
  output h' = x + shared(h) + sum_k w_k expert_k(h), each expert down(silu(gate(h)) * up(h)), the
  shared experts one such MLP of n_shared x moe_ffn. The first first_dense blocks have Llama's
  dense MLP instead.
- The capacity (memwall's rule, docs/moe.md; GShard's and Switch's idea): with capacity factor
  cf > 0 an expert takes at most cap = ceil(cf * N * k / E) of the micro-batch's N = B*T tokens;
  assignments are taken in token order (batch row, then position), a token's best first, and one
  to an expert already holding cap is dropped (adds nothing; its weight's gradient is 0).
- Multi-head latent attention (DeepSeek-V2, Hugging Face's DeepseekV2Attention without rope
  scaling): q = q_b(RMSNorm(q_a(h))) (or q_proj(h) when q_lora_rank is 0), split per head into
  q_nope (qk_nope_head_dim) and q_pe (qk_rope_head_dim); kv_a_proj_with_mqa(h) split into the
  latent c (kv_lora_rank) and k_pe (one rope_dim key shared by the heads); kv_b(RMSNorm(c)) per
  head into k_nope and v (v_head_dim); q_pe and k_pe rotated as HF does (de-interleave: view
  (d/2, 2), transpose, then rotate_half with inv_freq = 1/theta^(arange(0, d, 2)/d)); query
  [q_nope, q_pe], key [k_nope, k_pe]; causal softmax scaled by 1/sqrt(nope + rope); o_proj.
- Grouped-query attention otherwise: make_llama_fixture.py's (Llama's) equations.

Trains 3 AdamW steps exactly as make_llama_fixture.py (2 accumulated micro-batches, warm-up 1 then
cosine lr 1e-3, betas 0.9/0.95, eps 1e-5, weight decay 0.1 on 2-D weights only, clipping at half
the step-0 gradient norm). Initialisation: matrices N(0, 0.02), the routers N(0, 0.3) (so that
the scores are well apart and a float rounding cannot change a choice), RMSNorm gains 1 + 0.1
N(0, 1), V3's bias N(0, 0.1) (no gradient: it only chooses).

Records: config i32[24] (L,H,KV,C,F,V,ctx,B,T,accum,steps,tied, E,k,S,moe_ffn,first_dense,gate,
         norm_topk, q_lora_rank,kv_lora_rank,rope,nope,v); moe f32[4] (rope_theta, rms_norm_eps,
         capacity_factor, routed_scale); hparams, tokens, init/, logits, loss, gradnorm, lr, grad/,
         step1/, final/ as make_llama_fixture.py; dropped i32[1] (assignments dropped at step 0's
         first micro-batch, so that the test knows the capacity did something).

Shapes: moe  GQA (4 heads, 2 kv), first block dense, 4 experts top-2, a shared expert, softmax,
             renormalised, capacity factor 1.0 (drops assignments);
        mla  latent attention with a q bottleneck, first block dense, 4 experts top-2, no shared,
             sigmoid with bias (V3), scale 2.5, no cap;
        mla0 latent attention without the q bottleneck (V2-Lite), 4 experts top-3, 2 shared,
             softmax not renormalised (V2-Lite), capacity factor 0.75.

Checking memwall's export against this torch model (by hand, once; not part of `make test`):
    build/tests/test_moe_ref --export /tmp/x/ tests/ref/mla_tiny.mwfx
    ... make_moe_fixture.py --check-export /tmp/x --logits tests/ref/mla_tiny.mwfx
reads config.json (DeepseekV2/V3 or Mixtral keys), checks the tensors' names and shapes against
this script's table, and the logits of the fixture's step-0 micro-batch to 1e-5.

Run (Debian's python with torch):
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \\
        tests/ref/make_moe_fixture.py --shape moe --out tests/ref/moe_tiny.mwfx
    ... --shape mla --out tests/ref/mla_tiny.mwfx ; ... --shape mla0 --out tests/ref/mla0_tiny.mwfx
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt2_fixture import check_mwfx, write_mwfx  # noqa: E402  (the same .mwfx container)

ACCUM, STEPS = 2, 3
MAX_LR, MIN_LR_FRAC, WARMUP = 1e-3, 0.1, 1
BETAS, EPS, WD = (0.9, 0.95), 1e-5, 0.1
BASE = dict(L=2, H=4, KV=2, C=32, FF=64, V=64, CTX=32, B=2, T=16, TIED=0, THETA=10000.0, NORM_EPS=1e-6,
            E=4, K=2, S=0, FM=16, FD=1, GATE=0, NORM=1, SCALE=1.0, CF=0.0, QR=0, KVR=0, RD=0, ND=0, VD=0)
SHAPES = {
    "moe": dict(BASE, S=1, CF=1.0, NORM_EPS=1e-5),
    "mla": dict(BASE, KV=4, GATE=1, SCALE=2.5, QR=16, KVR=12, RD=8, ND=8, VD=12),
    "mla0": dict(BASE, KV=4, K=3, S=2, NORM=0, CF=0.75, KVR=12, RD=8, ND=8, VD=12),
    # Mixtral's shape (no fixture committed: for --check-export of a Mixtral export by hand)
    "mixtral": dict(BASE, FD=0, FF=16),
}


def is_moe(l):
    return E > 0 and l >= FD


def mixtral():
    """Mixtral's shape: Hugging Face's MixtralSparseMoeBlock names (block_sparse_moe, w1/w3/w2)"""
    return E > 0 and not KVR and not S and not FD and GATE == 0 and NORM and SCALE == 1.0


def moe_prefix():
    return "block_sparse_moe." if mixtral() else "mlp."


def expert_names(e):
    """gate, up, down of routed expert e"""
    if mixtral():
        return [f"experts.{e}.w1.weight", f"experts.{e}.w3.weight", f"experts.{e}.w2.weight"]
    return [f"experts.{e}.gate_proj.weight", f"experts.{e}.up_proj.weight", f"experts.{e}.down_proj.weight"]


def param_table():
    """(name, shape) in memwall's table order, Hugging Face's names."""
    t = [("model.embed_tokens.weight", (V, C))]
    hs, qk = C // H, ND + RD
    for l in range(L):
        p = f"model.layers.{l}."
        t.append((p + "input_layernorm.weight", (C,)))
        if KVR:
            a = p + "self_attn."
            if QR:
                t += [(a + "q_a_proj.weight", (QR, C)), (a + "q_a_layernorm.weight", (QR,)),
                      (a + "q_b_proj.weight", (H * qk, QR))]
            else:
                t.append((a + "q_proj.weight", (H * qk, C)))
            t += [(a + "kv_a_proj_with_mqa.weight", (KVR + RD, C)), (a + "kv_a_layernorm.weight", (KVR,)),
                  (a + "kv_b_proj.weight", (H * (ND + VD), KVR)), (a + "o_proj.weight", (C, H * VD))]
        else:
            t += [(p + "self_attn.q_proj.weight", (H * hs, C)), (p + "self_attn.k_proj.weight", (KV * hs, C)),
                  (p + "self_attn.v_proj.weight", (KV * hs, C)), (p + "self_attn.o_proj.weight", (C, H * hs))]
        t.append((p + "post_attention_layernorm.weight", (C,)))
        if not is_moe(l):
            t += [(p + "mlp.gate_proj.weight", (FF, C)), (p + "mlp.up_proj.weight", (FF, C)),
                  (p + "mlp.down_proj.weight", (C, FF))]
            continue
        m = p + moe_prefix()
        t.append((m + "gate.weight", (E, C)))
        if GATE == 1:
            t.append((m + "gate.e_score_correction_bias", (E,)))
        for e in range(E):
            g, u, dn = expert_names(e)
            t += [(m + g, (FM, C)), (m + u, (FM, C)), (m + dn, (C, FM))]
        if S:
            t += [(p + "mlp.shared_experts.gate_proj.weight", (S * FM, C)),
                  (p + "mlp.shared_experts.up_proj.weight", (S * FM, C)),
                  (p + "mlp.shared_experts.down_proj.weight", (C, S * FM))]
    t.append(("model.norm.weight", (C,)))
    if not TIED:
        t.append(("lm_head.weight", (V, C)))
    return t


def init_param(name, shape):
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return 1 + 0.1 * torch.randn(shape)
    if name.endswith("e_score_correction_bias"):
        return 0.1 * torch.randn(shape)
    if name.endswith("mlp.gate.weight"):
        return torch.randn(shape) * 0.3
    return torch.randn(shape) * 0.02


def rms_norm(x, w):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def cos_sin(t, d):
    inv_freq = 1.0 / (THETA ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.outer(torch.arange(t).float(), inv_freq.float())
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rope_deinterleaved(x, cos, sin):
    """DeepseekV2's apply_rotary_pos_emb on one tensor (..., t, d)."""
    *lead, t, d = x.shape
    x = x.reshape(*lead, t, d // 2, 2).transpose(-1, -2).reshape(*lead, t, d)
    return x * cos + rotate_half(x) * sin


def mlp(h, P, p, names=("gate_proj.weight", "up_proj.weight", "down_proj.weight")):
    g, u, d = (p + n for n in names)
    return F.linear(F.silu(F.linear(h, P[g])) * F.linear(h, P[u]), P[d])


def moe(h, P, p, stats):
    """h (N, C) -> (N, C): the routed experts, token by token, under the capacity."""
    n = h.shape[0]
    logits = F.linear(h, P[p + "gate.weight"])
    scores = logits.softmax(-1) if GATE == 0 else logits.sigmoid()
    choice = scores.detach() + (P[p + "gate.e_score_correction_bias"].detach() if GATE == 1 else 0)
    out = torch.zeros_like(h)
    cap = n if CF <= 0 else min(n, max(1, math.ceil(CF * n * K / E)))
    held = [0] * E
    for i in range(n):
        order = sorted(range(E), key=lambda e: (-choice[i, e].item(), e))[:K]  # best first, ties low
        w = scores[i, order]
        if NORM:
            w = w / (w.sum() + 1e-20)
        w = w * SCALE
        for j, e in enumerate(order):
            if held[e] >= cap:
                stats["dropped"] += 1
                continue
            held[e] += 1
            out[i] = out[i] + w[j] * mlp(h[i:i + 1], P, p, expert_names(e))[0]
    return out


def attention(h, P, p, b, t):
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    if not KVR:  # Llama's grouped-query attention
        hs = C // H
        q = F.linear(h, P[p + "q_proj.weight"]).view(b, t, H, hs).transpose(1, 2)
        k = F.linear(h, P[p + "k_proj.weight"]).view(b, t, KV, hs).transpose(1, 2)
        v = F.linear(h, P[p + "v_proj.weight"]).view(b, t, KV, hs).transpose(1, 2)
        cos, sin = cos_sin(t, hs)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = H // KV
        k = k[:, :, None].expand(b, KV, rep, t, hs).reshape(b, H, t, hs)
        v = v[:, :, None].expand(b, KV, rep, t, hs).reshape(b, H, t, hs)
        scale = 1.0 / math.sqrt(hs)
    else:  # DeepseekV2Attention
        qk = ND + RD
        if QR:
            q = F.linear(rms_norm(F.linear(h, P[p + "q_a_proj.weight"]), P[p + "q_a_layernorm.weight"]),
                         P[p + "q_b_proj.weight"])
        else:
            q = F.linear(h, P[p + "q_proj.weight"])
        q = q.view(b, t, H, qk).transpose(1, 2)
        q_nope, q_pe = q[..., :ND], q[..., ND:]
        ckv = F.linear(h, P[p + "kv_a_proj_with_mqa.weight"])
        c, k_pe = ckv[..., :KVR], ckv[..., KVR:].view(b, t, 1, RD).transpose(1, 2)
        kv = F.linear(rms_norm(c, P[p + "kv_a_layernorm.weight"]), P[p + "kv_b_proj.weight"])
        kv = kv.view(b, t, H, ND + VD).transpose(1, 2)
        k_nope, v = kv[..., :ND], kv[..., ND:]
        cos, sin = cos_sin(t, RD)
        q_pe, k_pe = rope_deinterleaved(q_pe, cos, sin), rope_deinterleaved(k_pe, cos, sin)
        q = torch.cat([q_nope, q_pe], -1)
        k = torch.cat([k_nope, k_pe.expand(b, H, t, RD)], -1)
        scale = 1.0 / math.sqrt(qk)
    att = (q @ k.transpose(-2, -1)) * scale
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(b, t, -1)
    return F.linear(y, P[p + "o_proj.weight"])


def forward(P, idx, stats):
    b, t = idx.shape
    x = P["model.embed_tokens.weight"][idx]
    for l in range(L):
        p = f"model.layers.{l}."
        x = x + attention(rms_norm(x, P[p + "input_layernorm.weight"]), P, p + "self_attn.", b, t)
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"])
        if not is_moe(l):
            x = x + mlp(h, P, p + "mlp.")
            continue
        hf = h.reshape(b * t, C)
        y = moe(hf, P, p + moe_prefix(), stats)
        if S:
            y = y + mlp(hf, P, p + "mlp.shared_experts.")
        x = x + y.view(b, t, C)
    x = rms_norm(x, P["model.norm.weight"])
    head = P["model.embed_tokens.weight"] if TIED else P["lm_head.weight"]
    return F.linear(x, head).float()


def lr_at(s):
    min_lr = MAX_LR * MIN_LR_FRAC
    if s < WARMUP:
        return MAX_LR * (s + 1) / WARMUP
    p = (s - WARMUP) / (STEPS - WARMUP) if STEPS > WARMUP else 0.0
    return min_lr + 0.5 * (MAX_LR - min_lr) * (1 + math.cos(math.pi * p))


def accumulate(P, tokens, s, stats):
    for p in P.values():
        p.grad = None
    losses, first = [], None
    for m in range(ACCUM):
        tok = tokens[s, m]
        logits = forward(P, tok[:, :T], stats)
        loss = F.cross_entropy(logits.reshape(-1, V), tok[:, 1:].reshape(-1))
        (loss / ACCUM).backward()
        losses.append(loss.detach())
        first = logits.detach().clone() if first is None else first
    return torch.stack(losses).mean().item(), first


def set_shape_from_hf(cfg):
    """DeepseekV2/V3 or Mixtral config.json keys -> this script's shape globals."""
    mt = cfg.get("model_type")
    g = dict(L=cfg["num_hidden_layers"], H=cfg["num_attention_heads"], C=cfg["hidden_size"], V=cfg["vocab_size"],
             CTX=cfg.get("max_position_embeddings", 2048), TIED=int(bool(cfg.get("tie_word_embeddings", False))),
             THETA=float(cfg.get("rope_theta", 10000.0)), NORM_EPS=float(cfg.get("rms_norm_eps", 1e-6)), CF=0.0)
    if mt == "mixtral":
        g.update(KV=cfg["num_key_value_heads"], FF=cfg["intermediate_size"], E=cfg["num_local_experts"],
                 K=cfg["num_experts_per_tok"], S=0, FM=cfg["intermediate_size"], FD=0, GATE=0, NORM=1, SCALE=1.0,
                 QR=0, KVR=0, RD=0, ND=0, VD=0)
    elif mt in ("deepseek_v2", "deepseek_v3"):
        if cfg.get("rope_scaling") is not None or cfg.get("topk_group", 1) != 1 or cfg.get("n_group", 1) != 1:
            raise ValueError("rope_scaling, n_group and topk_group other than none, 1, 1 are not this script's")
        e = cfg.get("n_routed_experts") or 0
        g.update(KV=cfg["num_attention_heads"], FF=cfg["intermediate_size"], E=e, K=cfg["num_experts_per_tok"] if e else 0,
                 S=cfg.get("n_shared_experts") or 0, FM=cfg["moe_intermediate_size"], FD=cfg["first_k_dense_replace"],
                 GATE=1 if cfg.get("scoring_func") == "sigmoid" else 0, NORM=int(bool(cfg["norm_topk_prob"])),
                 SCALE=float(cfg["routed_scaling_factor"]), QR=cfg.get("q_lora_rank") or 0, KVR=cfg["kv_lora_rank"],
                 RD=cfg["qk_rope_head_dim"], ND=cfg["qk_nope_head_dim"], VD=cfg["v_head_dim"])
    else:
        raise ValueError(f"model_type {mt!r}: mixtral, deepseek_v2 or deepseek_v3 expected")
    globals().update(g)


def check_export(d, fixture):
    """DIR/config.json and DIR/model.safetensors (memwall's export of FIXTURE's initial weights):
    names and shapes those of this script's table for that config, and the logits of the
    fixture's step-0 micro-batch those the fixture records, to 1e-5 of the largest."""
    from make_llama_fixture import read_mwfx, read_safetensors  # noqa: E402
    import json
    with open(os.path.join(d, "config.json")) as f:
        set_shape_from_hf(json.load(f))
    got = read_safetensors(os.path.join(d, "model.safetensors"))
    want = dict(param_table())
    bad = 0
    for n in sorted(set(want) ^ set(got)):
        print(f"  {'missing' if n in want else 'unexpected'}: {n}"); bad += 1
    for n in sorted(set(got) & set(want)):
        if tuple(got[n].shape) != tuple(want[n]):
            print(f"  {n}: shape {list(got[n].shape)}, the table's {list(want[n])}"); bad += 1
    print(f"names and shapes: {len(got)} tensors, {len(want)} in the table: {'identical' if not bad else bad}")
    if bad:
        return 1
    r = read_mwfx(fixture)
    globals()["CF"] = float(r["moe"][2])  # a config.json has no capacity: the fixture's trained drops
    if CF:
        print(f"capacity factor {CF:g} from {fixture} (Hugging Face's models drop nothing)")
    tok = torch.from_numpy(r["tokens"][0, 0, :, :-1].astype(np.int64))
    ref = torch.from_numpy(r["logits"].copy())
    with torch.no_grad():
        lg = forward(got, tok, {"dropped": 0})
    err = ((lg - ref).abs().max() / ref.abs().max()).item()
    print(f"logits of the exported weights vs {fixture}: max rel err {err:.3g} (bound 1e-5)")
    return 0 if err <= 1e-5 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write fixture to this .mwfx path")
    ap.add_argument("--check", help="read back a .mwfx and list its records")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="moe")
    ap.add_argument("--check-export", metavar="DIR", help="check memwall's export of a fixture's initial weights")
    ap.add_argument("--logits", metavar="FIXTURE", help="with --check-export: the fixture exported")
    args = ap.parse_args()
    if args.check_export:
        torch.set_num_threads(1)
        return check_export(args.check_export, args.logits)
    globals().update(SHAPES[args.shape])
    if args.check:
        return check_mwfx(args.check)
    if not args.out:
        ap.error("need --out or --check")
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    table = param_table()
    init = {n: init_param(n, s).float() for n, s in table}
    tokens = torch.randint(0, V, (STEPS, ACCUM, B, T + 1))

    P = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    st = {"dropped": 0}
    forward(P, tokens[0, 0][:, :T], st)
    dropped0 = st["dropped"]
    accumulate(P, tokens, 0, st)
    gn0 = torch.nn.utils.clip_grad_norm_(list(P.values()), float("inf")).item()
    clip = float(np.float32(0.5 * gn0))

    P = {n: t.clone().requires_grad_(not n.endswith("e_score_correction_bias")) for n, t in init.items()}
    train = [P[n] for n, _ in table if P[n].requires_grad]
    decay = [P[n] for n, _ in table if P[n].dim() == 2]
    no_decay = [P[n] for n, _ in table if P[n].dim() != 2 and P[n].requires_grad]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=MAX_LR, betas=BETAS, eps=EPS, foreach=False)
    losses, gnorms, lrs = [], [], []
    for s in range(STEPS):
        lr = lr_at(s)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, logits = accumulate(P, tokens, s, st)
        if s == 0:
            logits0 = logits
            grads0 = {n: (P[n].grad.detach().clone() if P[n].grad is not None else torch.zeros_like(P[n]))
                      for n, _ in table}
        gn = torch.nn.utils.clip_grad_norm_(train, clip).item()
        opt.step()
        if s == 0:
            params1 = {n: P[n].detach().clone() for n, _ in table}
        losses.append(loss); gnorms.append(gn); lrs.append(lr)
        print(f"step {s}: lr={lr:.6g} loss={loss:.6f} gradnorm={gn:.6f}")
    print(f"clip={clip:.6f} dropped at step 0's first micro-batch: {dropped0}")

    f32 = lambda t: np.asarray(t, dtype=np.float32)
    recs = [("config", np.array([L, H, KV, C, FF, V, CTX, B, T, ACCUM, STEPS, TIED, E, K, S, FM, FD, GATE, NORM,
                                 QR, KVR, RD, ND, VD], np.int32)),
            ("moe", f32([THETA, NORM_EPS, CF, SCALE])),
            ("hparams", f32([MAX_LR, MIN_LR_FRAC, WARMUP, *BETAS, EPS, WD, clip])),
            ("tokens", tokens.numpy().astype(np.int32)),
            ("dropped", np.array([dropped0], np.int32))]
    recs += [(f"init/{n}", init[n].numpy()) for n, _ in table]
    recs += [("logits", logits0.numpy()), ("loss", f32(losses)), ("gradnorm", f32(gnorms)), ("lr", f32(lrs))]
    recs += [(f"grad/{n}", grads0[n].numpy()) for n, _ in table]
    recs += [(f"step1/{n}", params1[n].numpy()) for n, _ in table]
    recs += [(f"final/{n}", P[n].detach().numpy()) for n, _ in table]
    write_mwfx(args.out, recs)
    print(f"wrote {args.out} ({len(recs)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
