#!/usr/bin/env python3
"""attn.scaled_dot_product_attention against a NumPy implementation, and the
cost of the binding itself on a tiny call.

    make build && ATTN_LIBRARY=build/libattn.so /usr/bin/python3 bench/bench_python.py

(or with the package installed by `pip install ./python`). Options:
--L, --D, --H, --B, --repeat, --causal, --impl.
"""

import argparse
import ctypes
import os
import sys
import time

import numpy as np

try:
    import attn
except ImportError:  # a source checkout: use python/ and build/libattn.so
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "python"))
    import attn
from attn import _lib


def numpy_sdpa(q, k, v, causal):
    """The textbook float32 NumPy version: scores, softmax, weighted sum."""
    s = (q @ np.swapaxes(k, -1, -2)) * np.float32(1 / np.sqrt(q.shape[-1]))
    if causal:
        s[..., np.triu(np.ones(s.shape[-2:], dtype=bool), 1)] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s @ v


def best(fn, repeat):
    """Best wall time of repeat runs (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def tiny_overhead(n=20000):
    """Per-call time of the Python function and of a bare ctypes call of
    attn_sdpa_forward with prepared views, on (1, 1, 4, 8)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
    out = np.empty_like(q)
    T = [_lib.tensor(a, _lib.ATTN_F32) for a in (q, q, q, out)]
    opts = _lib.SdpaOpts()
    _lib.lib.attn_sdpa_opts_init(ctypes.byref(opts))
    fwd = _lib.lib.attn_sdpa_forward
    refs = [ctypes.byref(t) for t in T]
    ob = ctypes.byref(opts)

    def bare():
        fwd(refs[0], refs[1], refs[2], ob, refs[3], None, None)

    def full():
        attn.scaled_dot_product_attention(q, q, q)

    def loop(fn):
        fn()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t) / n

    return min(loop(full) for _ in range(3)), min(loop(bare) for _ in range(3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--L", type=int, default=2048)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--impl", default="auto", choices=["auto", "flash", "ref"])
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((a.B, a.H, a.L, a.D)).astype(np.float32)
               for _ in range(3))
    flops = 4.0 * a.B * a.H * a.L * a.L * a.D * (0.5 if a.causal else 1.0)
    print("library %s (%s), numpy %s, OMP_NUM_THREADS=%s" % (
        attn.version(), attn.library_path(), np.__version__,
        os.environ.get("OMP_NUM_THREADS", "default")))
    print("B=%d H=%d L=%d D=%d f32%s" % (a.B, a.H, a.L, a.D,
                                        " causal" if a.causal else ""))
    o_attn = attn.scaled_dot_product_attention(q, k, v, is_causal=a.causal,
                                               impl=a.impl)
    o_np = numpy_sdpa(q, k, v, a.causal)
    err = float(np.abs(o_attn - o_np).max())
    t_attn = best(lambda: attn.scaled_dot_product_attention(
        q, k, v, is_causal=a.causal, impl=a.impl), a.repeat)
    t_np = best(lambda: numpy_sdpa(q, k, v, a.causal), a.repeat)
    print("%-44s %9.1f ms %7.1f GFLOP/s" % (
        "attn.scaled_dot_product_attention (%s)" % a.impl, t_attn * 1e3,
        flops / t_attn / 1e9))
    print("%-44s %9.1f ms %7.1f GFLOP/s" % ("numpy (matmul, softmax, matmul)",
                                            t_np * 1e3, flops / t_np / 1e9))
    print("speed-up over numpy: %.2fx; max |difference| %.2e" % (t_np / t_attn, err))
    full, bare = tiny_overhead()
    print("tiny call (1, 1, 4, 8): attn.scaled_dot_product_attention %.1f us, "
          "bare ctypes attn_sdpa_forward %.1f us, binding overhead %.1f us" % (
              full * 1e6, bare * 1e6, (full - bare) * 1e6))


if __name__ == "__main__":
    main()
