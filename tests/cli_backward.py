"""`attn sdpa-backward` against an independent NumPy backward in float64
(written from the formulas), on seeded cases with masks, grouped heads,
rank-2/3/4 files and a broadcast bias (dBias summed over its broadcast
axes); dropout checked through the forward's weights (dV = W^T dO with W
from `attn sdpa --weights` and the same seed); usage errors.

usage: cli_backward.py PATH/TO/attn SOURCE_DIR
"""
import os
import sys
import tempfile

import numpy as np

from clitest import check, run, summary


def to4(x):
    """rank convention of the CLI: (L, D) -> (1, 1, L, D), (B, L, D) -> (B, 1, L, D)"""
    if x.ndim == 2:
        return x[None, None]
    if x.ndim == 3:
        return x[:, None]
    return x


def numpy_backward(q, k, v, do, scale, causal, align, klen, bias):
    """float64 gradients of O = softmax(scale q k^T + bias, masked) v."""
    shapes = (q.shape, k.shape, v.shape)
    q, k, v, do = to4(q), to4(k), to4(v), to4(do)
    B, H, Lq, Dk = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = H // Hkv
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    b4 = to4(bias) if bias is not None else None
    dbias_full = np.zeros((B, H, Lq, Lk))
    for b in range(B):
        lk = Lk if klen is None else int(klen[b])
        for h in range(H):
            kk, vv = k[b, h // g], v[b, h // g]
            s = scale * q[b, h] @ kk.T
            if b4 is not None:
                s = s + b4[min(b, b4.shape[0] - 1), min(h, b4.shape[1] - 1)]
            vis = np.ones((Lq, Lk), bool)
            vis[:, lk:] = False
            if causal:
                off = lk - Lq if align == "bottom-right" else 0
                i = np.arange(Lq)[:, None]
                j = np.arange(Lk)[None, :]
                vis &= j <= i + off
            s = np.where(vis, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            full = np.isfinite(m[:, 0])
            p = np.zeros_like(s)
            e = np.exp(s[full] - m[full])
            p[full] = e / e.sum(axis=1, keepdims=True)
            dv[b, h // g] += p.T @ do[b, h]
            dp = do[b, h] @ vv.T
            ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
            dq[b, h] += scale * ds @ kk
            dk[b, h // g] += scale * ds.T @ q[b, h]
            dbias_full[b, h] = ds
    dbias = None
    if bias is not None:
        # sum over the axes the bias broadcasts, back to the bias's shape
        red = dbias_full
        for ax in range(4):
            if b4.shape[ax] == 1:
                red = red.sum(axis=ax, keepdims=True)
        dbias = red.reshape(bias.shape)
    return (dq.reshape(shapes[0]), dk.reshape(shapes[1]), dv.reshape(shapes[2]),
            dbias)


def save(d, name, x):
    path = os.path.join(d, name + ".npy")
    np.save(path, x)
    return path


def case(d, n, rng, shape_q, shape_k, dv_dim, causal=None, klen=None,
         bias_shape=None, impl="ref"):
    q = rng.standard_normal(shape_q)
    k = rng.standard_normal(shape_k)
    v = rng.standard_normal(shape_k[:-1] + (dv_dim,))
    do = rng.standard_normal(shape_q[:-1] + (dv_dim,))
    bias = rng.standard_normal(bias_shape) if bias_shape else None
    args = ["sdpa-backward", "--q", save(d, "q", q), "--k", save(d, "k", k),
            "--v", save(d, "v", v), "--dout", save(d, "do", do),
            "--dq", os.path.join(d, "dq.npy"), "--dk", os.path.join(d, "dk.npy"),
            "--dv", os.path.join(d, "dv.npy"), "--impl", impl]
    f64 = impl == "ref"
    if f64:
        args += ["--compute-dtype", "f64"]
    else:  # f32 inputs: compare with the f32-rounded values
        q, k, v = (x.astype(np.float32).astype(np.float64) for x in (q, k, v))
        do = do.astype(np.float32).astype(np.float64)
        if bias is not None:
            bias = bias.astype(np.float32).astype(np.float64)
        args += ["--threads", "2"]
    if causal:
        args += ["--causal", causal]
    if klen is not None:
        args += ["--key-lengths", save(d, "kl", np.array(klen, np.int64))]
    if bias is not None:
        b_file = bias if f64 else bias.astype(np.float32)
        args += ["--bias", save(d, "bias", b_file), "--dbias",
                 os.path.join(d, "db.npy")]
    p = run(args)
    check(p.returncode == 0, f"case {n}: exit {p.returncode}: {p.stderr}")
    if p.returncode:
        return
    want = numpy_backward(q, k, v, do, 1 / np.sqrt(q.shape[-1]), causal is not None,
                          causal, klen, bias)
    tol = 1e-10 if f64 else 2e-5
    for name, w in zip(["dq", "dk", "dv", "db"], want):
        if w is None:
            continue
        got = np.load(os.path.join(d, name + ".npy"))
        check(got.shape == w.shape, f"case {n}: {name} shape {got.shape} != {w.shape}")
        # gradients come in the inputs' dtype: these files are float64 (the
        # bias gradient follows the compute dtype)
        check(got.dtype == (np.float64 if f64 or name != "db" else np.float32),
              f"case {n}: {name} dtype {got.dtype}")
        if got.shape == w.shape:
            err = np.abs(got - w).max() / (1 + np.abs(w).max())
            check(err <= tol, f"case {n} ({impl}): {name} error {err:.3g} > {tol}")


def dropout_same_mask(d, rng):
    """dV from sdpa-backward equals W^T dO with the forward's dropped weights."""
    q = rng.standard_normal((2, 3, 13, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, 21, 8)).astype(np.float32)
    v = rng.standard_normal((2, 3, 21, 5)).astype(np.float32)
    do = rng.standard_normal((2, 3, 13, 5)).astype(np.float32)
    common = ["--q", save(d, "q", q), "--k", save(d, "k", k), "--v", save(d, "v", v),
              "--dropout", "0.3", "--seed", "1234", "--causal", "bottom-right"]
    for impl in ["ref", "auto"]:
        p = run(["sdpa"] + common + ["--out", os.path.join(d, "o.npy"), "--weights",
                                     os.path.join(d, "w.npy"), "--impl", impl])
        check(p.returncode == 0, "dropout forward: " + p.stderr)
        p = run(["sdpa-backward"] + common + [
            "--dout", save(d, "do", do), "--dq", os.path.join(d, "dq.npy"),
            "--dk", os.path.join(d, "dk.npy"), "--dv", os.path.join(d, "dv.npy"),
            "--impl", impl])
        check(p.returncode == 0, "dropout backward: " + p.stderr)
        if p.returncode:
            continue
        w = np.load(os.path.join(d, "w.npy")).astype(np.float64)
        want = np.einsum("bhij,bhid->bhjd", w, do.astype(np.float64))
        got = np.load(os.path.join(d, "dv.npy"))
        check((w == 0).any(), "dropout dropped nothing")
        err = np.abs(got - want).max()
        check(err < 1e-5, f"dropout ({impl}): dV differs from W^T dO by {err:.3g}")


def errors(d, rng):
    q = save(d, "q", rng.standard_normal((4, 8)).astype(np.float32))
    base = ["sdpa-backward", "--q", q, "--k", q, "--v", q,
            "--dq", os.path.join(d, "x1.npy"), "--dk", os.path.join(d, "x2.npy"),
            "--dv", os.path.join(d, "x3.npy")]
    p = run(base)
    check(p.returncode == 2 and "--dout" in p.stderr, "missing --dout: " + p.stderr)
    bad = save(d, "bad", rng.standard_normal((4, 7)).astype(np.float32))
    p = run(base + ["--dout", bad])
    check(p.returncode == 1 and "dout" in p.stderr, "dout of the wrong shape: " + p.stderr)
    p = run(base + ["--dout", q, "--dbias", os.path.join(d, "db.npy")])
    check(p.returncode == 2 and "--bias" in p.stderr, "--dbias without --bias: " + p.stderr)
    p = run(base + ["--dout", q, "--compute-dtype", "f64"])
    check(p.returncode == 2 and "add --impl ref" in p.stderr, "f64 without ref: " + p.stderr)
    p = run(["sdpa-backward", "--help"])
    check(p.returncode == 0 and "--dout" in p.stdout, "--help")
    p = run(base + ["--dout", q, "--bogus", "1"])
    check(p.returncode == 2, "unknown option")


def main():
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as d:
        n = 0
        for impl in ["ref", "auto"]:
            case(d, n, rng, (9, 16), (9, 16), 16, impl=impl); n += 1
            case(d, n, rng, (2, 7, 8), (2, 11, 8), 5, causal="top-left", impl=impl); n += 1
            case(d, n, rng, (2, 4, 7, 8), (2, 2, 11, 8), 6, causal="bottom-right",
                 klen=[11, 4], impl=impl); n += 1
            case(d, n, rng, (2, 4, 17, 8), (2, 2, 17, 8), 8, bias_shape=(17, 17),
                 impl=impl); n += 1
            case(d, n, rng, (2, 2, 5, 8), (2, 1, 9, 8), 8, causal="top-left",
                 bias_shape=(2, 2, 5, 9), impl=impl); n += 1
            case(d, n, rng, (3, 129, 16), (3, 64, 16), 16, klen=[64, 0, 33],
                 bias_shape=(3, 1, 64), impl=impl); n += 1
        dropout_same_mask(d, rng)
        errors(d, rng)
    return summary("cli_backward")


if __name__ == "__main__":
    sys.exit(main())
