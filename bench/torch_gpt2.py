#!/usr/bin/python3
"""memwall's PyTorch peer: GPT-2 training steps in plain PyTorch on the CPU.

The model is the one memwall trains: token + position embeddings, pre-LayerNorm blocks with
causal multi-head attention (biases everywhere) and a 4x GELU(tanh) MLP, a final LayerNorm and
an LM head tied to the token embedding. A step is forward, mean cross-entropy, backward and
torch.optim.AdamW (betas 0.9/0.95, weight decay 0.1), on random tokens from a fixed seed.

Run it with Debian's /usr/bin/python3 (python3-torch, PyTorch 1.13) and OpenBLAS's OpenMP build:
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \\
    /usr/bin/python3 bench/torch_gpt2.py --preset gpt2 --batch 4 --seq 256 --steps 6 --json

Flags and JSON keys follow the shared peer (../shared/peers/torch_gpt2_bench.py), which
bench/run.sh also runs, where it exists, to check that the two agree: tokens_per_s, ms_median,
params, peak_rss_mib (ru_maxrss of the whole process, Python and torch included), model_gflops.
--checkpoint wraps every block in torch.utils.checkpoint; --mem-probe runs one step with AdamW's
state created first (the steady-state peak); --opt-only times AdamW.step() alone; --dtype bf16
runs forward under CPU autocast. An allocation that fails (e.g. under prlimit --as) prints
FAILED, a JSON line with "error" when --json is given, and exits 3.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

# OpenMP reads its thread count once, when torch loads it: set it from --threads before the import.
_threads = next((sys.argv[i + 1] for i, v in enumerate(sys.argv[:-1]) if v == "--threads"), "2")
os.environ["OMP_NUM_THREADS"] = _threads

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint as recompute  # noqa: E402

# memwall's presets: layers, heads, width, vocabulary, position rows
SHAPES = {
    "gpt2-tiny": (4, 4, 128, 256, 256),
    "gpt2": (12, 12, 768, 50257, 1024),
    "gpt2-medium": (24, 16, 1024, 50257, 1024),
    "gpt2-large": (36, 20, 1280, 50257, 1024),
    "gpt2-xl": (48, 25, 1600, 50257, 1024),
}


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x, bias):
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.c_attn(x).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd) + bias
        y = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.c_fc, self.c_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x, bias):
        x = x + self.attn(self.ln_1(x), bias)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers, heads, width, vocab, ctx, recompute_blocks):
        super().__init__()
        self.recompute_blocks = recompute_blocks
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(ctx, width)
        self.h = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        # GPT-2's initialisation: N(0, 0.02), output projections N(0, 0.02/sqrt(2L)), zero biases
        std_proj = 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, std_proj if name.endswith("c_proj.weight") else 0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        bias = torch.full((t, t), float("-inf")).triu(1)  # causal mask, added to the scores
        x = self.wte(idx) + self.wpe.weight[:t]
        for blk in self.h:
            x = recompute(blk, x, bias, use_reentrant=False) if self.recompute_blocks else blk(x, bias)
        logits = torch.matmul(self.ln_f(x), self.wte.weight.t())
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def status_mib():
    """Current RSS, peak RSS and peak virtual size in MiB, from /proc/self/status."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM", "VmPeak"):
                out[key] = int(val.split()[0]) / 1024
    return out


def args_of(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(SHAPES), default="gpt2-tiny")
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--ctx", type=int)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--mem-probe", action="store_true")
    p.add_argument("--opt-only", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    layers, heads, width, vocab, ctx = SHAPES[a.preset]
    a.layers = a.layers or layers
    a.heads = a.heads or heads
    a.dim = a.dim or width
    a.vocab = a.vocab or vocab
    a.ctx = a.ctx or max(ctx, a.seq)
    if a.dim % a.heads or a.seq > a.ctx or min(a.batch, a.seq, a.steps) < 1 or a.warmup < 0:
        p.error("inconsistent shape: dim must divide by heads, seq <= ctx, batch/seq/steps >= 1")
    if a.mem_probe:
        a.warmup, a.steps = 0, 1
    return a


def run(a, state):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rss_start = status_mib()["VmRSS"]
    model = GPT2(a.layers, a.heads, a.dim, a.vocab, a.ctx, a.checkpoint)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=torch.Generator().manual_seed(a.seed))
    inputs, targets = data[:, :-1], data[:, 1:]
    if a.opt_only or a.mem_probe:
        for p in params:
            p.grad = 1e-3 * torch.randn_like(p)
    if a.mem_probe:  # AdamW makes m and v in its first step: make them before the probed step
        opt.step()
        opt.zero_grad(set_to_none=True)

    def one_step():
        marks = [time.perf_counter()]
        loss = float("nan")
        if not a.opt_only:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
                out = model(inputs, targets)
            marks.append(time.perf_counter())
            out.backward()
            marks.append(time.perf_counter())
            loss = out.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        return loss, [1e3 * (y - x) for x, y in zip(marks, marks[1:])]

    tokens = a.batch * a.seq
    timed, splits = [], []
    for i in range(a.warmup + a.steps):
        state["step"] = i
        loss, parts = one_step()
        ms = sum(parts)
        if i >= a.warmup:
            timed.append(ms)
            splits.append(parts)
        what = "warm-up" if i < a.warmup else "timed"
        rate = "" if a.opt_only else "  %.1f tok/s  loss %.4f" % (tokens / ms * 1e3, loss)
        print("step %d (%s) %.1f ms%s  rss %.0f MiB" % (i, what, ms, rate, status_mib()["VmRSS"]), flush=True)

    med = statistics.median(timed)
    matmul_weights = a.layers * 12 * a.dim * a.dim + a.vocab * a.dim
    flop = tokens * (6 * matmul_weights + 12 * a.layers * a.dim * a.seq)
    st = status_mib()
    maps = open("/proc/self/maps").read().split("\n")
    blas = sorted({ln.split()[-1] for ln in maps if ln.split() and "blas" in ln.split()[-1]})
    res = dict(vars(a))
    res.update(
        mode="opt-only" if a.opt_only else "mem-probe" if a.mem_probe else "train",
        peer="bench/torch_gpt2.py", torch=torch.__version__, blas=blas,
        threads=torch.get_num_threads(), params=n_params,
        ms_median=med, ms_min=min(timed), ms_max=max(timed), ms_all=timed,
        ms_split_median=[statistics.median(s[j] for s in splits) for j in range(len(splits[0]))],
        tokens_per_s=None if a.opt_only else tokens / med * 1e3,
        params_per_s=n_params / med * 1e3 if a.opt_only else None,
        model_gflops=None if a.opt_only else flop / med / 1e6,
        rss_baseline_mib=rss_start, peak_vm_mib=st["VmPeak"],
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    print("%s L=%d H=%d C=%d V=%d B=%d T=%d %s%s: %.2fM params, torch %s, %d threads, BLAS %s"
          % (a.preset, a.layers, a.heads, a.dim, a.vocab, a.batch, a.seq, a.dtype,
             " checkpoint" if a.checkpoint else "", n_params / 1e6, torch.__version__, res["threads"],
             ",".join(blas) or "none"))
    print("median %.1f ms/step over %d timed steps; peak RSS %.0f MiB"
          % (med, len(timed), res["peak_rss_mib"]))
    if a.json:
        print(json.dumps(res))


def main():
    a = args_of(sys.argv[1:])
    state = {"step": "init"}
    try:
        run(a, state)
    except (RuntimeError, MemoryError) as e:  # e.g. an allocation refused under prlimit --as
        msg = (str(e).strip().splitlines() or [repr(e)])[-1][:300]
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("FAILED (step %s): %s\npeak RSS %.0f MiB" % (state["step"], msg, peak))
        if a.json:
            print(json.dumps(dict(vars(a), error=msg, peak_rss_mib=peak)))
        sys.exit(3)


if __name__ == "__main__":
    main()
