#!/usr/bin/env python3
"""Checks the optimizer fixture's Adafactor and CAME (make_optim_fixture.py's operation-by-operation
specification, which src/optim/optim.c matches bit for bit) against the official implementations:
fairseq's `Adafactor` (fairseq/optim/adafactor.py, with scale_parameter=False, relative_step=False:
an external learning rate, as memwall's) and the CAME authors' `CAME` (came_pytorch/CAME.py of
github.com/yangluo7/CAME). Neither is copied here: give the paths of the two files, fetched
separately. Each runs the fixture's 6 steps (its gradients times its clipping coefficients, its
learning rates, weight decay on the 2-D tensors only) and prints the largest difference from the
fixture's parameters as a fraction of the largest update of the tensor; float32 rounding in
another order (rsqrt, float means) gives about 1e-4 at most, a different algorithm O(1). Exits
non-zero above --tol.

    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 \\
        tests/ref/check_optim_official.py --came CAME.py --adafactor adafactor.py
"""
import argparse
import math
import os
import struct
import sys

import numpy as np
import torch


def read_mwfx(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,), off, out = struct.unpack_from("<I", data, 8), 12, {}
    for _ in range(n):
        (nl,) = struct.unpack_from("<I", data, off)
        off += 4
        name = data[off:off + nl].decode()
        off += nl
        dt, nd = struct.unpack_from("<II", data, off)
        off += 8
        dims = struct.unpack_from(f"<{nd}I", data, off)
        off += 4 * nd
        arr = np.frombuffer(data, ["<f4", "<i4"][dt], int(np.prod(dims)), off).reshape(dims)
        off += arr.nbytes
        out[name] = arr
    return out


def load_class(path, name):
    """The class `name` of the file at path, from its `class` line on (fairseq's file imports fairseq
    first, which is not needed for the class itself)."""
    src = open(path).read()
    start = src.index(f"class {name}(")
    ns = {"math": math, "torch": torch}
    exec(compile(src[start:], path, "exec"), ns)
    return ns[name]


def run(fx, make_opt, ref_name):
    lay, p0, G, coef = fx["layout"], torch.tensor(fx["p0"]), torch.tensor(fx["g"]), torch.tensor(fx["coef"])
    params, groups = [], []
    for off, ne, rows, cols, dec in lay:
        x = p0[off:off + ne].clone()
        x = (x.view(int(rows), int(cols)) if cols else x).requires_grad_(True)
        params.append((x, int(off), int(ne)))
        groups.append({"params": [x], "weight_decay": 0.1 if dec else 0.0})
    opt = make_opt(groups)
    worst = 0.0
    for k in range(G.shape[0]):
        for grp in opt.param_groups:
            grp["lr"] = 0.002 * (k + 1)  # make_optim_fixture.py's lr_at
        for x, off, ne in params:
            x.grad = (G[k, off:off + ne] * coef[k]).view_as(x).clone()
        with torch.no_grad():
            opt.step()
        ref = fx[ref_name + ".p"][k]
        for x, off, ne in params:
            b = ref[off:off + ne]
            upd = np.abs(b - fx["p0"][off:off + ne]).max()
            worst = max(worst, float(np.abs(x.detach().reshape(-1).numpy() - b).max() / upd))
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--came", required=True, help="came_pytorch/CAME.py of github.com/yangluo7/CAME")
    ap.add_argument("--adafactor", required=True, help="fairseq/optim/adafactor.py of github.com/facebookresearch/fairseq")
    ap.add_argument("--fixture", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim.mwfx"))
    ap.add_argument("--tol", type=float, default=1e-3)
    args = ap.parse_args()
    fx = read_mwfx(args.fixture)
    CAME, Adafactor = load_class(args.came, "CAME"), load_class(args.adafactor, "Adafactor")
    af = dict(relative_step=False, scale_parameter=False, warmup_init=False)
    # the fixture's hyperparameters (make_optim_fixture.py's CASES); lr is set per step
    cases = [
        ("adafactor", lambda g: Adafactor(g, lr=1.0, beta1=None, **af)),
        ("adafactor_m", lambda g: Adafactor(g, lr=1.0, beta1=0.9, **af)),
        ("came", lambda g: CAME(g, lr=1.0, betas=(0.9, 0.999, 0.9999), eps=(1e-30, 1e-16), clip_threshold=1.0)),
    ]
    bad = 0
    for name, make in cases:
        w = run(fx, make, name)
        ok = w <= args.tol
        bad += not ok
        print(f"{name:12s} official vs fixture: max |diff| / max |update| = {w:.3g} {'ok' if ok else 'FAIL'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
