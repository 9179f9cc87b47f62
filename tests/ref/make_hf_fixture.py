#!/usr/bin/python3
"""Hugging Face GPT-2 safetensors fixtures for memwall's import/export tests.

Writes, for the tiny GPT-2 of make_gpt2_fixture.py (L2 H4 C48 V97 ctx24) with its random weights:
  tests/ref/hf_tiny/model.safetensors  as Hugging Face stores GPT-2: Conv1D weights (in, out),
      names under "transformer.", the causal-mask buffers h.N.attn.bias and a tied lm_head.weight
      (which a loader must skip), header keys unsorted;
  tests/ref/hf_tiny/config.json        n_head and friends;
  tests/ref/hf_tiny_canonical.safetensors  the same weights written the way memwall's export
      must write them (no prefix, no extras, names sorted, compact JSON, {"format":"pt"},
      header padded with spaces to 8 bytes): memwall's export must equal it byte for byte;
  tests/ref/hf_tiny_logits.mwfx        tokens (2, 9) and PyTorch's logits (2, 9, 97).
safetensors is written by hand (Debian 12 has no python3-safetensors); the format is 8-byte
little-endian header length, JSON header, data.

Run:  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp /usr/bin/python3 tests/ref/make_hf_fixture.py
Check an export:  ... make_hf_fixture.py --check-export FILE   (loads FILE with torch and compares
      its logits with the fixture's)
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt2_fixture as g  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def conv1d(name, shape):
    return len(shape) == 2 and name.startswith("h.")


def hf_tensors(P):
    """memwall layout -> Hugging Face layout (Conv1D weights transposed)."""
    return {n: (t.t().contiguous() if conv1d(n, t.shape) else t) for n, t in P.items()}


def write_safetensors(path, tensors, sort=True, metadata=None):
    names = sorted(tensors) if sort else list(tensors)
    header, off, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for n in names:
        a = tensors[n].detach().numpy().astype("<f4")
        header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy().reshape(v["shape"]))
    return out


def from_hf(T):
    """Hugging Face names/layout -> memwall's, dropping the extras."""
    P = {}
    for n, t in T.items():
        n = n[len("transformer."):] if n.startswith("transformer.") else n
        if n.endswith("attn.bias") and t.dim() == 4 or n in ("lm_head.weight", "attn.masked_bias"):
            continue
        P[n] = t.t().contiguous() if conv1d(n, t.shape) else t
    return P


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-export":
        P = from_hf(read_safetensors(sys.argv[2]))
        torch.manual_seed(7)
        idx = torch.randint(0, g.V, (2, 9))
        logits = g.forward(P, idx)
        base = g.forward(from_hf(read_safetensors(os.path.join(HERE, "hf_tiny", "model.safetensors"))), idx)
        err = ((logits - base).abs().max() / base.abs().max()).item()
        print(f"{sys.argv[2]}: logits vs the fixture weights, max rel err {err:.3g}")
        sys.exit(0 if err < 1e-6 else 1)
    torch.manual_seed(4321)
    torch.set_num_threads(1)
    P = {n: g.init_param(n, s).float() for n, s in g.param_table()}
    H = hf_tensors(P)
    os.makedirs(os.path.join(HERE, "hf_tiny"), exist_ok=True)
    # as Hugging Face has it: prefixed names, masks, tied head, keys in model order
    hf = {}
    for n, _ in g.param_table():
        hf["transformer." + n] = H[n]
        if n.endswith("ln_1.bias"):
            l = n.split(".")[1]
            hf[f"transformer.h.{l}.attn.bias"] = torch.tril(torch.ones(g.CTX, g.CTX)).view(1, 1, g.CTX, g.CTX)
    hf["lm_head.weight"] = H["wte.weight"].clone()
    write_safetensors(os.path.join(HERE, "hf_tiny", "model.safetensors"), hf, sort=False,
                      metadata={"format": "pt"})
    with open(os.path.join(HERE, "hf_tiny", "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_layer": g.L, "n_head": g.H, "n_embd": g.C,
                   "vocab_size": g.V, "n_positions": g.CTX, "layer_norm_epsilon": 1e-5,
                   "activation_function": "gelu_new", "tie_word_embeddings": True}, f, indent=2)
    write_safetensors(os.path.join(HERE, "hf_tiny_canonical.safetensors"), H, sort=True,
                      metadata={"format": "pt"})
    torch.manual_seed(7)
    idx = torch.randint(0, g.V, (2, 9))
    with torch.no_grad():
        logits = g.forward(P, idx)
    g.write_mwfx(os.path.join(HERE, "hf_tiny_logits.mwfx"),
                 [("tokens", idx.numpy().astype(np.int32)), ("logits", logits.numpy())])
    print("wrote hf_tiny/model.safetensors, hf_tiny/config.json, hf_tiny_canonical.safetensors, "
          "hf_tiny_logits.mwfx")


if __name__ == "__main__":
    main()
