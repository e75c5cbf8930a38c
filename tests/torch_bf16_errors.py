#!/usr/bin/env python3
"""PyTorch's bf16 SDPA error on the cases of tests/bf16_cases.h, written to
tests/data/torch_bf16_sdpa_errors.txt: the fixture test_flash_bf16 holds
attn's bf16 forward to (at most 2x these errors), and test_flash_bwd_bf16
its bf16 backward (lines NAME.dq, NAME.dk, NAME.dv: the gradients' errors,
dout drawn after v from the same stream). CI does not run this: it
needs a PyTorch venv, e.g.

    python3 -m venv /tmp/torch && /tmp/torch/bin/pip install torch numpy
    /tmp/torch/bin/python tests/torch_bf16_errors.py

Inputs are those of the C test: the same xorshift64* stream (check.h's
test_rand), scaled, rounded to bf16 (nearest even); the error is the max
|out - reference| with the reference in float64 on the same bf16 values
(for the backward, of each gradient).
"""
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
M64 = (1 << 64) - 1


def cases():
    """The case table of bf16_cases.h, parsed (one source of truth)."""
    text = open(os.path.join(HERE, "bf16_cases.h")).read()
    kinds = {"BF16_NONE": 0, "BF16_CAUSAL": 1, "BF16_PAD": 2}
    pat = re.compile(r'\{"(\w+)",\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*'
                     r'(\d+),\s*(\d+),\s*(BF16_\w+),\s*([\d.]+),\s*(\d+)\}')
    out = []
    for m in pat.finditer(text):
        g = m.groups()
        out.append(dict(name=g[0], B=int(g[1]), H=int(g[2]), Hkv=int(g[3]),
                        Lq=int(g[4]), Lk=int(g[5]), D=int(g[6]),
                        mask=kinds[g[7]], amp=float(g[8]), seed=int(g[9])))
    return out


class Rand:
    """check.h's test_rand: xorshift64*, uniform in [-1, 1)."""

    def __init__(self, seed):
        self.s = seed & M64

    def take(self, n):
        out = np.empty(n, dtype=np.float64)
        x = self.s
        for i in range(n):
            x ^= x >> 12
            x ^= (x << 25) & M64
            x ^= x >> 27
            out[i] = float(((x * 2685821657736338717) & M64) >> 11) * \
                2.0 ** -52 - 1.0
        self.s = x
        return out


def to_bf16(x):
    """float64 -> float32 -> bf16 (nearest even), returned as float32."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return (u.astype(np.uint32) << 16).view(np.float32)


def main():
    lines = ["# PyTorch %s bf16 SDPA: max |out - float64 reference| on the "
             "cases of tests/bf16_cases.h, and of its gradients (NAME.dq, "
             ".dk, .dv; made by tests/torch_bf16_errors.py)"
             % torch.__version__]
    torch.set_num_threads(2)
    for c in cases():
        r = Rand(c["seed"])
        B, H, Hkv, Lq, Lk, D = (c[k] for k in ("B", "H", "Hkv", "Lq", "Lk",
                                               "D"))
        q = to_bf16(r.take(B * H * Lq * D) * c["amp"]).reshape(B, H, Lq, D)
        k = to_bf16(r.take(B * Hkv * Lk * D) * c["amp"]).reshape(B, Hkv, Lk,
                                                                  D)
        v = to_bf16(r.take(B * Hkv * Lk * D)).reshape(B, Hkv, Lk, D)
        mask = None
        if c["mask"] == 2:
            keep = np.zeros((B, 1, 1, Lk), dtype=bool)
            for b in range(B):
                keep[b, 0, 0, :max(Lk - 7 * b - 3, 0)] = True
            mask = torch.from_numpy(keep)
        causal = c["mask"] == 1
        kw = dict(attn_mask=mask, is_causal=causal, enable_gqa=Hkv != H)
        ref = F.scaled_dot_product_attention(
            torch.from_numpy(q).double(), torch.from_numpy(k).double(),
            torch.from_numpy(v).double(), **kw)
        out = F.scaled_dot_product_attention(
            torch.from_numpy(q).bfloat16(), torch.from_numpy(k).bfloat16(),
            torch.from_numpy(v).bfloat16(), **kw)
        err = (out.double() - ref).abs().max().item()
        lines.append("%s %.6g" % (c["name"], err))
        print(lines[-1], flush=True)
        g = to_bf16(r.take(B * H * Lq * D)).reshape(B, H, Lq, D)
        grads = {}
        for kind in ("double", "bfloat16"):
            xs = [getattr(torch.from_numpy(x), kind)().requires_grad_()
                  for x in (q, k, v)]
            o = F.scaled_dot_product_attention(*xs, **kw)
            o.backward(getattr(torch.from_numpy(g), kind)())
            grads[kind] = [x.grad.double() for x in xs]
        for nm, a, b in zip(("dq", "dk", "dv"), grads["bfloat16"],
                            grads["double"]):
            lines.append("%s.%s %.6g" % (c["name"], nm,
                                         (a - b).abs().max().item()))
            print(lines[-1], flush=True)
    path = os.path.join(HERE, "data", "torch_bf16_sdpa_errors.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    sys.exit(main())
