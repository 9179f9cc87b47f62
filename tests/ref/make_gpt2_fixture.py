#!/usr/bin/env python3
"""PyTorch reference-fixture generator for memwall's GPT-2 trainer.

Builds a tiny GPT-2 (L=2, H=4, C=48, V=97, ctx=24), trains it for 3 AdamW steps
(B=3, T=11, 2 accumulated micro-batches per step, cosine lr, grad-norm clipping)
in float32 and writes everything a C implementation needs to check itself
against: config, hyper-parameters, tokens, initial params, step-0 logits and
gradients, per-step loss / grad-norm / lr, and the final params.

File format (.mwfx, little-endian):
    8 bytes  magic "MWFX0001"
    u32      number of records
    per record:
        u32 name_len, name bytes (no NUL)
        u32 dtype (0 = float32, 1 = int32)
        u32 ndim, ndim x u32 dims
        prod(dims) x 4-byte elements, C order
Records: config i32[9] (L,H,C,V,ctx,B,T,accum,steps);
         hparams f32[8] (max_lr,min_lr_frac,warmup,beta1,beta2,eps,weight_decay,clip);
         tokens i32[steps,accum,B,T+1]; init/<name>...; logits f32[B,T,V];
         loss f32[steps]; gradnorm f32[steps]; lr f32[steps];
         grad/<name>... (step 0, pre-clip); step1/<name>... (after the first step);
         final/<name>... (after all steps).

Run (Debian's python with torch 1.13):
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \\
        tests/ref/make_gpt2_fixture.py --out tests/ref/gpt2_tiny.mwfx
    ... make_gpt2_fixture.py --shape long --out tests/ref/gpt2_long.mwfx
    ... make_gpt2_fixture.py --check tests/ref/gpt2_tiny.mwfx   # dump records
"""
import argparse
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

L, H, C, V, CTX, B, T, ACCUM, STEPS = 2, 4, 48, 97, 24, 3, 11, 2, 3
# lr 1e-3 and eps 1e-5 keep the 3-step comparison well conditioned: Adam divides each gradient by
# its own magnitude, so fp32 rounding in the gradients (~5e-7 of a tensor's largest entry) becomes
# a per-element error of the update. At lr 1e-2, eps 1e-8 the same C code run on 1 and on 2 threads
# differs by 2e-4 after 3 steps; here by 3e-6. The optimizer step itself is checked from exact
# inputs (step1/ records) to 1e-6.
MAX_LR, MIN_LR_FRAC, WARMUP = 1e-3, 0.1, 1
BETAS, EPS, WD = (0.9, 0.95), 1e-5, 0.1
MAGIC = b"MWFX0001"


def param_table():
    """(name, shape) in table order."""
    t = [("wte.weight", (V, C)), ("wpe.weight", (CTX, C))]
    for l in range(L):
        p = f"h.{l}."
        t += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
              (p + "attn.c_attn.weight", (3 * C, C)), (p + "attn.c_attn.bias", (3 * C,)),
              (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
              (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
              (p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_fc.bias", (4 * C,)),
              (p + "mlp.c_proj.weight", (C, 4 * C)), (p + "mlp.c_proj.bias", (C,))]
    return t + [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]


def init_param(name, shape):
    if "ln_" in name:  # LayerNorm affine params
        return 1 + 0.1 * torch.randn(shape) if name.endswith("weight") else 0.02 * torch.randn(shape)
    std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
    return torch.randn(shape) * std  # 2-D weights, wte/wpe and (non-zero) biases


def forward(P, idx):
    """idx (B,T) int64 -> logits (B,T,V)."""
    b, t = idx.shape
    hs = C // H
    x = P["wte.weight"][idx] + P["wpe.weight"][torch.arange(t)]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for l in range(L):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
        qkv = F.linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
        q, k, v = (z.view(b, t, H, hs).transpose(1, 2) for z in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, C)
        x = x + F.linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
        h = F.gelu(F.linear(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    return x @ P["wte.weight"].t()


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


def write_mwfx(path, records):
    assert len(records) <= 256  # tests/fixture.h's limits: records, name length, dimensions
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<I", len(records)))
        for name, arr in records:
            arr = np.ascontiguousarray(arr)
            dt = {np.dtype(np.float32): 0, np.dtype(np.int32): 1}[arr.dtype]
            nb = name.encode()
            assert len(nb) < 96 and arr.ndim <= 4
            f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<II", dt, arr.ndim))
            f.write(struct.pack(f"<{arr.ndim}I", *arr.shape))
            f.write(arr.astype(arr.dtype.newbyteorder("<")).tobytes())


def check_mwfx(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == MAGIC, "bad magic"
    (n,), off = struct.unpack_from("<I", data, 8), 12
    for _ in range(n):
        (nl,) = struct.unpack_from("<I", data, off); off += 4
        name = data[off:off + nl].decode(); off += nl
        dt, nd = struct.unpack_from("<II", data, off); off += 8
        dims = struct.unpack_from(f"<{nd}I", data, off); off += 4 * nd
        arr = np.frombuffer(data, ["<f4", "<i4"][dt], int(np.prod(dims)), off).reshape(dims)
        off += arr.nbytes
        extra = f"  {arr.tolist()}" if arr.size <= 9 else f"  absmax={np.abs(arr).max():.6g}"
        print(f"{name:32s} {['f32', 'i32'][dt]} {list(dims)}{extra}")
    assert off == len(data), f"trailing bytes: {len(data) - off}"
    print(f"{n} records, {len(data)} bytes, OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write fixture to this .mwfx path")
    ap.add_argument("--check", help="read back a .mwfx and list its records")
    ap.add_argument("--shape", choices=["tiny", "long"], default="tiny",
                    help="long: T=150 and B*T=300, to cross the 128-position attention tile and "
                         "the 256-position loss quantum")
    args = ap.parse_args()
    if args.shape == "long":
        globals().update(L=3, H=2, C=32, V=131, CTX=160, B=2, T=150)
    if args.check:
        return check_mwfx(args.check)
    if not args.out:
        ap.error("need --out or --check")

    torch.manual_seed(1234)
    torch.set_num_threads(1)
    table = param_table()
    init = {n: init_param(n, s).float() for n, s in table}
    tokens = torch.randint(0, V, (STEPS, ACCUM, B, T + 1))

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
    recs = [("config", np.array([L, H, C, V, CTX, B, T, ACCUM, STEPS], np.int32)),
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


if __name__ == "__main__":
    main()
