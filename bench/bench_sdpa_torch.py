#!/usr/bin/env python3
"""attn's attention against PyTorch's scaled_dot_product_attention, side by
side in one process (PyTorch is not a dependency of attn):

  python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch numpy
  ATTN_LIBRARY=build/libattn.so /tmp/tv/bin/python bench/bench_sdpa_torch.py \\
      [--threads 2] [--reps 3] [--lengths 1024,4096] [--dims 64,128] \\
      [--dtypes f32,bf16] [--attn-cli build/attn] [--heads 8]

For B = 1, H = 8 (--heads) and each L, D, full and causal: four implementations on the
same inputs, attn f32 (impl "flash"), attn bf16 (bf16 inputs, impl
"flash_bf16": bf16 tile products where the CPU has AVX512_BF16), PyTorch f32
and PyTorch bf16. Every output is first checked against a float64 softmax
of 64 query rows (the first and last 32; bf16 ones against the float64
result on the same bf16-rounded inputs); then each precision's two are
timed in turn, interleaved, best of --reps (f32 first, then bf16: with
all four interleaved, PyTorch's f32 calls halved attn's bf16 figures on
an AMX machine, the two OpenMP runtimes' workers competing). GFLOP/s = 4 B H L^2 D / time, halved for
causal. Prints the ratios attn / PyTorch in each precision and attn bf16 /
attn f32. --dtypes f32 runs the two f32 implementations only. With
--attn-cli (the attn command) the run first measures the f32 FMA peak of
the threads (`attn bench` prints it) and adds each f32 figure's fraction
of it.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import attn  # noqa: E402


def to_bf16_bits(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def reference_rows(q, k, v, causal, rows):
    """float64 attention of the given query rows."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64[:, :, rows] @ np.swapaxes(k64, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        j = np.arange(k.shape[2])
        s = np.where(j[None, None, None, :] <= np.asarray(rows)[None, None, :, None],
                     s, -np.inf)
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return p @ v64


def timed(fn, runs):
    """One timed call of fn appended to runs (interleaving is the caller's)."""
    t0 = time.perf_counter()
    fn()
    runs.append(time.perf_counter() - t0)


def fma_peak(cli, threads):
    """The f32 FMA peak of `threads` cores as `attn bench` measures it."""
    out = subprocess.run(
        [cli, "bench", "--threads", str(threads), "--cases", "256:64",
         "--ref-max", "0", "--backward-max", "0"],
        capture_output=True, text=True, check=True).stdout
    m = re.search(r"f32 FMA peak of \d+ cores?: ([0-9.]+) GFLOP/s", out)
    return float(m.group(1)) if m else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lengths", default="1024,4096")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--attn-cli", default="")
    ap.add_argument("--heads", type=int, default=8)
    a = ap.parse_args()
    dtypes = a.dtypes.split(",")
    if not dtypes or any(d not in ("f32", "bf16") for d in dtypes):
        ap.error("--dtypes takes f32, bf16 or both")
    torch.set_num_threads(a.threads)
    peak = fma_peak(a.attn_cli, a.threads) if a.attn_cli else 0.0
    B, H = 1, a.heads
    print("attn %s vs PyTorch %s SDPA, B=%d H=%d, %d threads, best of %d "
          "interleaved per precision (ATTN_ISA=%s; `attn version` names the path)" % (
              attn.version(), torch.__version__, B, H, a.threads, a.reps,
              os.environ.get("ATTN_ISA", "unset")))
    if a.attn_cli:
        print("f32 FMA peak of %d threads (attn bench, this run): %.1f GFLOP/s"
              % (a.threads, peak))
    print("| L | D | mask | attn f32 | torch f32 | attn bf16 | torch bf16 | "
          "attn/torch f32 | attn/torch bf16 | attn bf16/f32 | attn f32 of "
          "peak | torch f32 of peak | max err "
          "(attn f32, torch f32, attn bf16, torch bf16) |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
          "---: | ---: | ---: | --- |")
    rng = np.random.default_rng(7)
    bad = 0
    for L in (int(x) for x in a.lengths.split(",")):
        for D in (int(x) for x in a.dims.split(",")):
            q, k, v = (rng.standard_normal((B, H, L, D)).astype(np.float32)
                       for _ in range(3))
            qb, kb, vb = (to_bf16_bits(x) for x in (q, k, v))
            tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
            tqb, tkb, tvb = (torch.from_numpy(bf16_bits_to_f32(x)).bfloat16()
                             for x in (qb, kb, vb))
            rows = list(range(32)) + list(range(L - 32, L))
            for causal in (False, True):
                impls = {
                    "attn f32": lambda: attn.scaled_dot_product_attention(
                        q, k, v, is_causal=causal, impl="flash",
                        threads=a.threads),
                    "torch f32": lambda: F.scaled_dot_product_attention(
                        tq, tk, tv, is_causal=causal),
                    "attn bf16": lambda: attn.scaled_dot_product_attention(
                        qb, kb, vb, is_causal=causal, impl="flash_bf16",
                        threads=a.threads, dtype="bfloat16"),
                    "torch bf16": lambda: F.scaled_dot_product_attention(
                        tqb, tkb, tvb, is_causal=causal),
                }
                impls = {n: f for n, f in impls.items()
                         if n.split()[1] in dtypes}
                ref32 = reference_rows(q, k, v, causal, rows)
                ref16 = reference_rows(*(bf16_bits_to_f32(x)
                                         for x in (qb, kb, vb)), causal, rows)
                errs = {}
                for name, fn in impls.items():
                    out = fn()
                    if torch.is_tensor(out):
                        out = out.float().numpy()
                    elif out.dtype == np.uint16:  # attn's bf16 bits
                        out = bf16_bits_to_f32(out)
                    ref = ref16 if "bf16" in name else ref32
                    errs[name] = float(np.abs(out[:, :, rows] - ref).max())
                    tol = 3e-2 if "bf16" in name else 1e-4
                    if not errs[name] <= tol:
                        print("%s L=%d D=%d causal=%s: error %.3g > %g" % (
                            name, L, D, causal, errs[name], tol))
                        bad = 1
                runs = {n: [] for n in impls}
                for dt in ("f32", "bf16"):
                    pair = [(n, f) for n, f in impls.items()
                            if n.split()[1] == dt]
                    for _ in range(a.reps):
                        for name, fn in pair:
                            timed(fn, runs[name])
                fl = 4.0 * B * H * L * L * D * (0.5 if causal else 1.0)
                g = {n: fl / min(t) * 1e-9 for n, t in runs.items()}
                nan = float("nan")
                for n in ("attn f32", "torch f32", "attn bf16", "torch bf16"):
                    g.setdefault(n, nan)
                    errs.setdefault(n, nan)
                print("| %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %.2fx | "
                      "%.2fx | %.2fx | %.2f | %.2f | %.1e, %.1e, %.1e, %.1e |"
                      % (L, D, "causal" if causal else "full",
                         g["attn f32"], g["torch f32"], g["attn bf16"],
                         g["torch bf16"], g["attn f32"] / g["torch f32"],
                         g["attn bf16"] / g["torch bf16"],
                         g["attn bf16"] / g["attn f32"],
                         g["attn f32"] / peak if peak else nan,
                         g["torch f32"] / peak if peak else nan,
                         errs["attn f32"], errs["torch f32"],
                         errs["attn bf16"], errs["torch bf16"]), flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
