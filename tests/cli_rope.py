"""`attn sdpa` and `attn sdpa-backward` with --rope: against NumPy
(rotation written from the formulas, then plain attention; gradients taken
back through the rotation), for neox and interleaved pairs, a partial
dimension, linear and llama3 scaling, an offset and bottom-right queries;
usage errors.

usage: cli_rope.py PATH/TO/attn SOURCE_DIR
"""
import os
import sys
import tempfile

import numpy as np

from clitest import check, run, summary


def inv_freq(rd, theta, scaling):
    f = 1.0 / theta ** (np.arange(0, rd, 2) / rd)
    if scaling is None:
        return f
    kind, vals = scaling
    if kind == "linear":
        return f / vals[0]
    factor, lo, hi, old = vals
    wl = 2 * np.pi / f
    llama = np.where(wl > old / lo, f / factor, f)
    sm = (old / wl - lo) / (hi - lo)
    med = ~(wl < old / hi) & ~(wl > old / lo)
    return np.where(med, (1 - sm) * llama / factor + sm * llama, llama)


def rot(x, pos, style, rd, theta, scaling, sign=1.0):
    """x (H, L, D) rotated by pos (L,)."""
    rd = rd or x.shape[-1]
    a = sign * pos[None, :, None] * inv_freq(rd, theta, scaling)
    c, s = np.cos(a), np.sin(a)
    y = x.copy()
    if style == "neox":
        u, w = x[..., :rd // 2], x[..., rd // 2:rd]
        y[..., :rd // 2], y[..., rd // 2:rd] = u * c - w * s, u * s + w * c
    else:
        u, w = x[..., 0:rd:2], x[..., 1:rd:2]
        y[..., 0:rd:2], y[..., 1:rd:2] = u * c - w * s, u * s + w * c
    return y


def attention(q, k, v, do, off):
    """causal bottom-right attention, (H, L, D); output and dq, dk."""
    Lq, Lk = q.shape[1], k.shape[1]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    vis = np.arange(Lk)[None, :] <= np.arange(Lq)[:, None] + Lk - Lq
    s = np.where(vis, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = do @ v.transpose(0, 2, 1)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) / np.sqrt(q.shape[-1])
    return p @ v, ds @ k, ds.transpose(0, 2, 1) @ q


def main():
    rng = np.random.default_rng(3)
    H, Lq, Lk, D = 2, 3, 6, 8
    cases = [("neox", None, 10000.0, None, 0),
             ("interleaved", None, 10000.0, None, 0),
             ("neox", 4, 100.0, ("linear", (2.0,)), 5),
             ("interleaved", 6, 10000.0, ("llama3", (8.0, 1.0, 4.0, 32.0)), 11)]
    with tempfile.TemporaryDirectory() as d:
        for n, (style, rd, theta, scaling, off) in enumerate(cases):
            q = rng.standard_normal((H, Lq, D))
            k = rng.standard_normal((H, Lk, D))
            v = rng.standard_normal((H, Lk, D))
            do = rng.standard_normal((H, Lq, D))
            paths = {}
            for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
                paths[name] = os.path.join(d, name + ".npy")
                np.save(paths[name], x[None])
            opts = ["--causal", "bottom-right", "--rope", style,
                    "--rope-theta", str(theta), "--impl", "ref",
                    "--compute-dtype", "f64"]
            if rd:
                opts += ["--rope-dim", str(rd)]
            if scaling:
                opts += ["--rope-scaling",
                         scaling[0] + ":" + ",".join(str(x) for x in scaling[1])]
            if off:
                opts += ["--rope-offset", str(off)]
            qp = off + np.arange(Lq) + Lk - Lq
            kp = off + np.arange(Lk)
            qr = rot(q, qp, style, rd, theta, scaling)
            kr = rot(k, kp, style, rd, theta, scaling)
            o, dqr, dkr = attention(qr, kr, v, do, off)
            dq = rot(dqr, qp, style, rd, theta, scaling, -1.0)
            dk = rot(dkr, kp, style, rd, theta, scaling, -1.0)
            out = os.path.join(d, "o.npy")
            p = run(["sdpa", "--q", paths["q"], "--k", paths["k"], "--v",
                     paths["v"], "--out", out] + opts)
            if check(p.returncode == 0, "case %d sdpa: %s" % (n, p.stderr)):
                err = np.abs(np.load(out)[0] - o).max()
                check(err < 1e-12, "case %d forward: %g" % (n, err))
            p = run(["sdpa-backward", "--q", paths["q"], "--k", paths["k"],
                     "--v", paths["v"], "--dout", paths["do"], "--dq",
                     os.path.join(d, "dq.npy"), "--dk",
                     os.path.join(d, "dk.npy"), "--dv",
                     os.path.join(d, "dv.npy")] + opts)
            if check(p.returncode == 0, "case %d backward: %s" % (n, p.stderr)):
                e1 = np.abs(np.load(os.path.join(d, "dq.npy"))[0] - dq).max()
                e2 = np.abs(np.load(os.path.join(d, "dk.npy"))[0] - dk).max()
                check(e1 < 1e-12 and e2 < 1e-12,
                      "case %d backward: dq %g dk %g" % (n, e1, e2))
        base = ["sdpa", "--q", paths["q"], "--k", paths["k"], "--v",
                paths["v"], "--out", os.path.join(d, "o.npy")]
        for bad, msg in ((["--rope", "halves"], "neox or interleaved"),
                         (["--rope-theta", "2"], "need --rope"),
                         (["--rope", "neox", "--rope-dim", "3"], "even"),
                         (["--rope", "neox", "--rope-dim", "10"], "rotary_dim"),
                         (["--rope", "neox", "--rope-scaling", "yarn:2"],
                          "yarn:2"),
                         (["--rope", "neox", "--rope-offset", "-1"], "offset")):
            p = run(base + bad)
            check(p.returncode != 0 and msg in p.stderr,
                  "%s: %d %s" % (bad, p.returncode, p.stderr))
        p = run(["sdpa", "--help"])
        check("--rope-scaling" in p.stdout, "help names --rope-scaling")
    return summary("cli_rope")


if __name__ == "__main__":
    sys.exit(main())
