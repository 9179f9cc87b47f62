#!/usr/bin/env python3
"""PyTorch reference-fixture generator for memwall's optimizers (docs/optimizers.md).

Runs adamw, adamw8bit, adam4bit, adafactor (without and with momentum), came and sgd for 6 steps
on one fixed flat parameter buffer (5 tensors with padding between them), operation by operation
as docs/optimizers.md specifies them: every operation in float32 with a single rounding (no fused
multiply-add: no addcmul/addcdiv/lerp/rsqrt/alpha=), scalars converted to float32 once, the sums
the doc marks double summed in float64 in order. The quantised optimizers' codes and scales are
therefore what a C implementation computes, bit for bit.

Records (.mwfx, the format of make_gpt2_fixture.py; n = 6432, K = 6 steps):
    layout          i32 [5, 5]   per tensor: offset, numel, rows, cols (0: 1-D), decay (0/1)
    p0              f32 [n]      initial parameters (padding 0)
    g               f32 [K, n]   raw gradients per step (padding 0, ~5% exact zeros)
    coef            f32 [K]      clipping coefficient per step; the optimizer sees g*coef (fp32)
    map.signed8 map.unsigned8 map.signed4 map.linear4   f32 [256]/[16] (scripts/gen_qmaps.py)
    NAME.p          f32 [K, n]   parameters after each step, NAME in
                                 adamw adamw8bit adam4bit adafactor adafactor_m came sgd
    NAME.mq NAME.vq i32 [K, n]   (adamw8bit, adam4bit) codes after each step, one per element
    NAME.ms         f32 [K, nb]  first-moment block scales, per tensor (2048-blocks: 6, 128-blocks: 54)
    NAME.vs         f32 [K, nvs] second-moment scales: adamw8bit its per-tensor block maxima; adam4bit per
                                 tensor in order, 2-D: row maxima then column maxima, 1-D: the
                                 maxima of its 128-element blocks (286 in all)
The learning rate of step k (t = k + 1) is the Python double 0.002 * (k + 1). The rms sum of
adafactor/came is the double sum of (double)u*u (exact squares), as src/optim/optim.c takes it.

Blocks are per tensor, as bitsandbytes quantises each tensor's state separately: a tensor's
blocks of 2048 (128) start at its first element and its last block is short; padding is in no
block. ms and vs list the tensors' blocks tensor after tensor.

Run (Debian's python with torch 1.13):
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \\
        tests/ref/make_optim_fixture.py --out tests/ref/optim.mwfx
    ... make_optim_fixture.py --check tests/ref/optim.mwfx   # dump records
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from gen_qmaps import maps  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt2_fixture import check_mwfx, write_mwfx  # noqa: E402  (the .mwfx format)

F32, F64 = torch.float32, torch.float64

# (offset, rows, cols, decay); cols = 0: 1-D of `rows` elements
TENSORS = [(0, 37, 53, 1), (1968, 53, 0, 0), (2032, 40, 64, 1), (4592, 24, 64, 1), (6128, 300, 0, 0)]
N = 6432
K = 6
B8, B4 = 2048, 128          # adamw8bit blocks, adam4bit first-moment (and 1-D second-moment) blocks
PIECE = 65536               # adafactor/came rms: double sums in pieces of this many elements


def lr_at(k):
    return 0.002 * (k + 1)


def f32(x):
    """A Python double as a float32 0-dim tensor: C's (float)x."""
    return torch.tensor(x, dtype=F32)


def numel(rows, cols):
    return rows * cols if cols else rows


def views(flat):
    """(tensor view, 2-D or not, decay) per tensor of a flat float buffer."""
    out = []
    for off, rows, cols, dec in TENSORS:
        x = flat[off:off + numel(rows, cols)]
        out.append((x.view(rows, cols) if cols else x, cols > 0, dec))
    return out


def padding_mask():
    pad = torch.ones(N, dtype=torch.bool)
    for off, rows, cols, _ in TENSORS:
        pad[off:off + numel(rows, cols)] = False
    return pad


# ---------------------------------------------------------------- sums and quantisation


def seq_sum_rows(x):
    """Per row i of the 2-D fp32 x, the double sum of its elements in order (j = 0, 1, ..)."""
    s = torch.zeros(x.shape[0], dtype=F64)
    for j in range(x.shape[1]):
        s = s + x[:, j].to(F64)
    return s


def seq_sum_cols(x):
    """Per column j, the double sum of its rows in order (i = 0, 1, ..)."""
    s = torch.zeros(x.shape[1], dtype=F64)
    for i in range(x.shape[0]):
        s = s + x[i, :].to(F64)
    return s


def seq_sum(x):
    """Double sum of a 1-D vector in order (Python floats are IEEE doubles; no fsum)."""
    s = 0.0
    for v in x.to(F64).tolist():
        s += v
    return s


def sum_squares(u):
    """The rms sum S: the double sum of (double)u*u (a float's square is exact in double), in
    pieces of PIECE elements from the tensor's first, each summed in order, pieces added in order."""
    u = u.reshape(-1).to(F64)
    total = 0.0
    for a in range(0, u.numel(), PIECE):
        x = u[a:a + PIECE]
        total += seq_sum(x * x)
    return total


def quantize(x, s, qmap):
    """y = s > 0 ? x / s : 0 (fp32), then the index minimising fabsf(map[k] - y), lowest on ties.
    x, s: fp32 tensors of the same shape (s already broadcast per element)."""
    x, s = x.reshape(-1), s.reshape(-1)
    pos = s > 0
    y = torch.zeros_like(x)
    y[pos] = x[pos] / s[pos]
    dist = (qmap[None, :] - y[:, None]).abs()
    return torch.argmin(dist, dim=1).to(torch.int32)      # first minimum on ties


def dequantize(q, s, qmap):
    return qmap[q.long()] * s


def block_absmax(x, bs):
    """Maximum of fabsf(x) per block of bs consecutive elements (last block short)."""
    nb = (x.numel() + bs - 1) // bs
    pad = torch.zeros(nb * bs, dtype=F32)
    pad[:x.numel()] = x.abs()
    return pad.view(nb, bs).max(dim=1).values


def expand_blocks(s, bs, n):
    return s.repeat_interleave(bs)[:n]


def tensor_blocks(x, bs):
    """Block maxima of fabsf(x) per tensor: each tensor's blocks of bs from its first element,
    tensor after tensor (padding in no block)."""
    return torch.cat([block_absmax(x[off:off + numel(r, c)], bs) for off, r, c, _ in TENSORS])


def tensor_expand(s, bs):
    """The per-element scale (padding 0) of per-tensor block scales s."""
    out = torch.zeros(N, dtype=F32)
    j = 0
    for off, r, c, _ in TENSORS:
        ne = numel(r, c)
        nb = (ne + bs - 1) // bs
        out[off:off + ne] = expand_blocks(s[j:j + nb], bs, ne)
        j += nb
    return out


def tensor_nblocks(bs):
    return sum((numel(r, c) + bs - 1) // bs for _, r, c, _ in TENSORS)


# ---------------------------------------------------------------- the optimizers


class AdamScalars:
    """docs/optimizers.md, adamw: scalars of step t, converted to fp32 once."""

    def __init__(self, hp, lr, t):
        b1, b2 = hp["beta1"], hp["beta2"]
        self.b1, self.a1 = f32(b1), f32(1 - b1)
        self.b2, self.a2 = f32(b2), f32(1 - b2)
        self.decay = f32(1 - lr * hp["weight_decay"])
        self.step = f32(lr / (1 - math.pow(b1, t)))
        self.bc2 = f32(math.sqrt(1 - math.pow(b2, t)))
        self.eps = f32(hp["eps"])


def adam_moments(m, v, g, c):
    m = m * c.b1 + c.a1 * g
    v = v * c.b2 + (c.a2 * g) * g
    return m, v


def adam_param(p, m, v, c, decay_mask):
    """p = p*decay (decay tensors), p = p - step*(m/(sqrtf(v)/bc2 + eps)); p, m, v flat."""
    p = torch.where(decay_mask, p * c.decay, p)
    return p - c.step * (m / (torch.sqrt(v) / c.bc2 + c.eps))


class Adam:
    """adamw, adamw8bit, adam4bit on the flat buffer (padding is never written)."""

    def __init__(self, kind, hp):
        self.kind, self.hp = kind, hp
        self.tmask = ~padding_mask()
        self.dmask = torch.zeros(N, dtype=torch.bool)
        for off, rows, cols, dec in TENSORS:
            self.dmask[off:off + numel(rows, cols)] = bool(dec)
        Q = {k[len("mw_qmap_"):]: v for k, v in maps().items()}
        if kind == "adamw":
            self.m, self.v = torch.zeros(N, dtype=F32), torch.zeros(N, dtype=F32)
            return
        if kind == "adamw8bit":
            self.mmap, self.vmap, self.mb = Q["signed8"], Q["unsigned8"], B8
            self.vs = torch.zeros(tensor_nblocks(B8), dtype=F32)
        else:
            self.mmap, self.vmap, self.mb = Q["signed4"], Q["linear4"], B4
            nvs = 0
            for _, rows, cols, _ in TENSORS:
                nvs += rows + cols if cols else (rows + B4 - 1) // B4
            self.vs = torch.zeros(nvs, dtype=F32)
        self.ms = torch.zeros(tensor_nblocks(self.mb), dtype=F32)
        # zero state: every code is that of 0.0 (linear4 has no zero: code 0, see quantize)
        self.mq = quantize(torch.zeros(N, dtype=F32), torch.zeros(N, dtype=F32), self.mmap)
        self.vq = quantize(torch.zeros(N, dtype=F32), torch.zeros(N, dtype=F32), self.vmap)

    def v_elem_scale(self, vs):
        """The per-element scale of v (padding: 0) from the stored scales."""
        if self.kind == "adamw8bit":
            return tensor_expand(vs, B8)
        s = torch.zeros(N, dtype=F32)
        j = 0
        for off, rows, cols, _ in TENSORS:
            ne = numel(rows, cols)
            if cols:
                r, c = vs[j:j + rows], vs[j + rows:j + rows + cols]
                s[off:off + ne] = torch.minimum(r[:, None], c[None, :]).reshape(-1)  # fminf
                j += rows + cols
            else:
                nb = (rows + B4 - 1) // B4
                s[off:off + ne] = expand_blocks(vs[j:j + nb], B4, rows)
                j += nb
        return s

    def v_scales(self, v):
        """New scales of v: block maxima (8-bit), row/column/1-D-block maxima (4-bit)."""
        if self.kind == "adamw8bit":
            return tensor_blocks(v, B8)                      # v >= 0: max of v
        out = []
        for x, two_d, _ in views(v):
            if two_d:
                out += [x.max(dim=1).values, x.max(dim=0).values]
            else:
                out.append(block_absmax(x, B4))
        return torch.cat(out)

    def step(self, p, g, lr, t):
        c = AdamScalars(self.hp, lr, t)
        if self.kind == "adamw":
            m, v = adam_moments(self.m, self.v, g, c)
            self.m, self.v = m, v
        else:
            # pass 1: dequantize with the old scales, update, new scales
            m0 = dequantize(self.mq, tensor_expand(self.ms, self.mb), self.mmap)
            v0 = dequantize(self.vq, self.v_elem_scale(self.vs), self.vmap)
            m, v = adam_moments(m0, v0, g, c)
            assert bool((m[~self.tmask] == 0).all() and (v[~self.tmask] == 0).all())  # padding
            self.ms, self.vs = tensor_blocks(m, self.mb), self.v_scales(v)
            # pass 2: the same new m, v quantised with the new scales; p from the unquantised
            mq = quantize(m, tensor_expand(self.ms, self.mb), self.mmap)
            vq = quantize(v, self.v_elem_scale(self.vs), self.vmap)
            vq[~self.tmask] = 0                              # padding: code 0, never read
            self.mq, self.vq = mq, vq
            self.m_new, self.v_new = m, v                    # for the sanity check only
        pn = adam_param(p, m, v, c, self.dmask)
        return torch.where(self.tmask, pn, p)


def rms_clip(u, clip):
    """u / fmaxf(1, rms/clip) with rms = (float)sqrt(S/numel), S = sum_squares(u)."""
    rms = f32(math.sqrt(sum_squares(u) / u.numel()))
    d = torch.maximum(f32(1.0), rms / clip)
    return u / d


def factored_scale(R, C):
    """s_ij = rf_i*cf_j: rmean = (float)(sum_i R_i (double, in order)/rows),
    rf_i = 1/sqrtf(R_i/rmean), cf_j = 1/sqrtf(C_j)."""
    one = f32(1.0)
    rmean = f32(seq_sum(R) / R.numel())
    rf = one / torch.sqrt(R / rmean)
    cf = one / torch.sqrt(C)
    return rf[:, None] * cf[None, :]


def row_mean(x):
    return (seq_sum_rows(x) / x.shape[1]).to(F32)           # (float)(rowsum_i/cols)


def col_mean(x):
    return (seq_sum_cols(x) / x.shape[0]).to(F32)           # (float)(colsum_j/rows)


class Factored:
    """adafactor (with or without momentum) and came, per tensor."""

    def __init__(self, kind, hp):
        self.kind, self.hp = kind, hp
        self.state = []
        for off, rows, cols, _ in TENSORS:
            z = lambda *s: torch.zeros(*s, dtype=F32)  # noqa: E731
            st = {"R": z(rows), "C": z(cols)} if cols else {"V": z(rows)}
            if kind == "came" and cols:
                st.update(RR=z(rows), RC=z(cols))
            if kind == "came" or hp["beta1"] > 0:
                st["m"] = z(rows, cols) if cols else z(rows)
            self.state.append(st)

    def step(self, p, g, lr, t):
        hp, one = self.hp, f32(1.0)
        if self.kind == "came":
            b2, a2 = f32(hp["beta2"]), f32(1 - hp["beta2"])
            b3, a3 = f32(hp["beta3"]), f32(1 - hp["beta3"])
            eps2 = f32(hp["eps2"])
        else:
            beta2t = 1 - math.pow(t, hp["decay_rate"])
            b2, a2 = f32(beta2t), f32(1 - beta2t)
        b1, a1 = f32(hp["beta1"]), f32(1 - hp["beta1"])
        eps1, clip, lrf = f32(hp["eps1"]), f32(hp["clip_threshold"]), f32(lr)
        decay = f32(1 - lr * hp["weight_decay"])
        p = p.clone()
        for (pt, two_d, dec), (gt, _, _), st in zip(views(p), views(g), self.state):
            u2 = gt * gt + eps1
            if two_d:
                st["R"] = st["R"] * b2 + a2 * row_mean(u2)
                st["C"] = st["C"] * b2 + a2 * col_mean(u2)
                u = factored_scale(st["R"], st["C"]) * gt
            else:
                st["V"] = st["V"] * b2 + a2 * u2
                u = (one / torch.sqrt(st["V"])) * gt
            u = rms_clip(u, clip)
            if self.kind == "came":
                m = st["m"] * b1 + a1 * u
                st["m"] = m
                r = u - m
                res = r * r + eps2
                if two_d:
                    st["RR"] = st["RR"] * b3 + a3 * row_mean(res)
                    st["RC"] = st["RC"] * b3 + a3 * col_mean(res)
                    upd = factored_scale(st["RR"], st["RC"]) * m
                else:
                    upd = m
                if dec and hp["weight_decay"] > 0:
                    pt.copy_(pt * decay)
                pt.copy_(pt - upd * lrf)
            else:
                u = u * lrf
                if "m" in st:
                    st["m"] = st["m"] * b1 + a1 * u
                    u = st["m"]
                if dec and hp["weight_decay"] > 0:
                    pt.copy_(pt * decay)
                pt.copy_(pt - u)
        return p


class SGD:
    """torch.optim.SGD (dampening 0, not Nesterov), coupled weight decay on decay tensors."""

    def __init__(self, hp):
        self.hp = hp
        self.buf = [torch.zeros(numel(r, c), dtype=F32) for _, r, c, _ in TENSORS]

    def step(self, p, g, lr, t):
        mu, wd, lrf = f32(self.hp["momentum"]), f32(self.hp["weight_decay"]), f32(lr)
        p = p.clone()
        for i, (off, rows, cols, dec) in enumerate(TENSORS):
            ne = numel(rows, cols)
            pt, d = p[off:off + ne], g[off:off + ne]
            if dec and self.hp["weight_decay"] > 0:
                d = d + wd * pt
            if self.hp["momentum"] > 0:
                self.buf[i] = self.buf[i] * mu + d
                d = self.buf[i]
            pt.copy_(pt - lrf * d)
        return p


ADAM_HP = dict(beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
ADAFACTOR_HP = dict(beta1=0.0, decay_rate=-0.8, eps1=1e-30, clip_threshold=1.0, weight_decay=0.1)
CASES = [
    ("adamw", lambda: Adam("adamw", ADAM_HP)),
    ("adamw8bit", lambda: Adam("adamw8bit", ADAM_HP)),
    ("adam4bit", lambda: Adam("adam4bit", ADAM_HP)),
    ("adafactor", lambda: Factored("adafactor", ADAFACTOR_HP)),
    ("adafactor_m", lambda: Factored("adafactor", dict(ADAFACTOR_HP, beta1=0.9))),
    ("came", lambda: Factored("came", dict(beta1=0.9, beta2=0.999, beta3=0.9999, eps1=1e-30,
                                           eps2=1e-16, clip_threshold=1.0, weight_decay=0.1))),
    ("sgd", lambda: SGD(dict(momentum=0.9, weight_decay=0.1))),
]


# ---------------------------------------------------------------- inputs, checks, file


def make_inputs():
    torch.manual_seed(1234)
    p0 = torch.zeros(N, dtype=F32)
    for off, rows, cols, _ in TENSORS:
        ne = numel(rows, cols)
        p0[off:off + ne] = torch.randn(ne) * f32(0.5)
    g = torch.zeros(K, N, dtype=F32)
    for k in range(K):
        for i, (off, rows, cols, _) in enumerate(TENSORS):
            ne = numel(rows, cols)
            x = torch.randn(ne) * f32(10.0 ** (i - 2))
            x[torch.rand(ne) < 0.05] = 0.0
            g[k, off:off + ne] = x
    coef = torch.tensor([1.0 if k % 2 == 0 else 0.75 for k in range(K)], dtype=F32)
    return p0, g, coef


def check_8bit_moments(opt, m_ref, v_ref):
    """adamw8bit after step 1: dequantized m, v against adamw's unquantized moments (equal to
    adamw8bit's own unquantized ones at step 1, since both start from zero)."""
    assert torch.equal(opt.m_new, m_ref) and torch.equal(opt.v_new, v_ref)
    for q, s, qmap, x in ((opt.mq, opt.ms, opt.mmap, m_ref), (opt.vq, opt.vs, opt.vmap, v_ref)):
        se = tensor_expand(s, B8)
        dq = dequantize(q, se, qmap)
        err = (dq - x).abs()
        err[se == 0] = 0  # padding
        # the dynamic map's relative gap is ~1/64 at the top of its range, ~1/8 one decade down:
        # absolute error within 1% of the block scale everywhere, relative error within 2% where
        # |x| > 0.4*scale and within 30% where |x| > 1e-3*scale
        assert bool((err <= 0.01 * se).all()), float((err / se).max())
        for lo, rel in ((0.4, 0.02), (1e-3, 0.30)):
            sel = x.abs() > lo * se
            assert bool((err[sel] <= rel * x.abs()[sel]).all()), (lo, float((err[sel] / x.abs()[sel]).max()))
        # and the code is the nearest one: no map entry is closer to x/s
        y = torch.where(se > 0, x / se, torch.zeros_like(x))
        best = (qmap[None, :] - y[:, None]).abs().min(dim=1).values
        assert torch.equal((qmap[q.long()] - y).abs(), best)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write fixture to this .mwfx path")
    ap.add_argument("--check", help="read back a .mwfx and list its records")
    args = ap.parse_args()
    if args.check:
        return check_mwfx(args.check)
    if not args.out:
        ap.error("need --out or --check")
    torch.set_num_threads(1)

    p0, g, coef = make_inputs()
    pad = padding_mask()
    layout = [[off, numel(r, c), r, c, d] for off, r, c, d in TENSORS]
    Q = maps()
    records = [("layout", np.array(layout, dtype=np.int32)), ("p0", p0.numpy()),
               ("g", g.numpy()), ("coef", coef.numpy())]
    records += [("map." + k[len("mw_qmap_"):], v.numpy()) for k, v in Q.items()]

    adamw_p, adamw_step1 = None, None
    for name, make in CASES:
        opt = make()
        p = p0.clone()
        P, MQ, VQ, MS, VS = [], [], [], [], []
        for k in range(K):
            p = opt.step(p, g[k] * coef[k], lr_at(k), k + 1)
            P.append(p.clone())
            if name == "adamw" and k == 0:
                adamw_step1 = (opt.m.clone(), opt.v.clone())
            if name == "adamw8bit" and k == 0:
                check_8bit_moments(opt, *adamw_step1)
            if name in ("adamw8bit", "adam4bit"):
                MQ.append(opt.mq.clone()); VQ.append(opt.vq.clone())
                MS.append(opt.ms.clone()); VS.append(opt.vs.clone())
        P = torch.stack(P)
        assert bool(torch.isfinite(P).all()), name
        assert bool((P[:, pad] == 0).all()), name + ": padding moved"
        assert bool((P[:, ~pad] != p0[~pad]).any(dim=1).all()), name + ": parameters did not move"
        adamw_p = P if name == "adamw" else adamw_p
        print(f"{name:12s} max|p-p0| {float((P - p0).abs().max()):.6g}  "
              f"max|p-p_adamw| {float((P - adamw_p).abs().max()):.6g}")
        records.append((name + ".p", P.numpy()))
        if MQ:
            records += [(name + ".mq", torch.stack(MQ).numpy()), (name + ".vq", torch.stack(VQ).numpy()),
                        (name + ".ms", torch.stack(MS).numpy()), (name + ".vs", torch.stack(VS).numpy())]
    write_mwfx(args.out, records)
    print(f"wrote {args.out}: {len(records)} records")


if __name__ == "__main__":
    main()
