"""An independent check of `attn sdpa`: a NumPy implementation of scaled
dot-product attention, written from the formulas in float64, run against
the CLI on seeded random cases covering every mask kind, their
combinations, fully masked rows, grouped heads, Lq != Lk, Dk != Dv, odd
sizes and the f32/f16/bf16 input paths.

usage: cli_numpy_check.py PATH/TO/attn SOURCE_DIR

Tolerances (max absolute error on out, weights and lse):
  f32 inputs:        1e-5
  f64 (--impl ref):  1e-12 (lse is always written as f32: 1e-5)
  f16 / bf16 inputs: 1e-4, against the reference computed from the inputs
                     after rounding to f16 / bf16 (so only the kernel's own
                     arithmetic is measured, not the rounding of the inputs)
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
TOL = {"f32": 1e-5, "f16": 1e-4, "bf16": 1e-4, "f64": 1e-12}


# ---- reproductions of the library's generators (from src/kernels) --------

def mix64(x):
    """splitmix64 finalizer, as in src/kernels/mask.c."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def random_block_kept(seed, keep_p, h, bi, bj):
    if keep_p >= 1.0:
        return True
    if keep_p <= 0.0:
        return False
    x = mix64((seed ^ 0x5F3759DF) & M64)
    x = mix64(x ^ (h & M64))
    x = mix64(x ^ (bi & M64))
    x = mix64(x ^ (bj & M64))
    u = (x >> 11) * 2.0 ** -53
    return u < keep_p


def philox4x32(seed, ctr):
    """Philox4x32-10, as in src/kernels/dropout.c."""
    k0, k1 = seed & M32, (seed >> 32) & M32
    c0, c1, c2, c3 = ctr
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & M32,
                          (p0 >> 32) ^ c3 ^ k1, p0 & M32)
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def dropout_kept(seed, p, b, h, i, j):
    if not p > 0.0:
        return True
    t = math.ceil(p * 4294967296.0)
    thr = 0xFFFFFFFF if t >= 4294967295.0 else int(t)
    out = philox4x32(seed, ((j >> 2) & M32, i & M32, h & M32, b & M32))
    return out[j & 3] >= thr


# ---- the reference -------------------------------------------------------

def visible_mask(B, H, Lq, Lk, c):
    """Boolean (B, H, Lq, Lk): key j visible from query i of (b, h)."""
    vis = np.ones((B, H, Lq, Lk), dtype=bool)
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    for b in range(B):
        lq = int(c["qlen"][b]) if c.get("qlen") is not None else Lq
        lk = int(c["klen"][b]) if c.get("klen") is not None else Lk
        cen = i + (lk - lq if c.get("align") == "bottom-right" else 0)
        v = (i < lq) & (j < lk)
        if c.get("causal"):
            v &= j <= cen
        wl, wr = c.get("window", (-1, -1))
        if wl >= 0:
            v &= j >= cen - wl
        if wr >= 0:
            v &= j <= cen + wr
        vis[b] &= v[None]
    if c.get("keep") is not None:
        vis &= np.broadcast_to(c["keep"] != 0, vis.shape)
    if c.get("block"):
        bs, layout = c["block"]
        lay = layout if layout.ndim == 3 else layout[None]
        hh = np.arange(H) if lay.shape[0] == H else np.zeros(H, dtype=int)
        blk = lay[hh][:, i // bs, j // bs] != 0  # (H, Lq, Lk)
        vis &= blk[None]
    if c.get("random"):
        rb, p, seed = c["random"]
        nbq, nbk = -(-Lq // rb), -(-Lk // rb)
        kept = np.array([[[random_block_kept(seed, p, h, bi, bj)
                           for bj in range(nbk)] for bi in range(nbq)]
                         for h in range(H)])
        vis &= kept[:, i // rb, j // rb][None]
    return vis


def reference(q, k, v, c):
    """q (B,H,Lq,Dk), k (B,Hkv,Lk,Dk), v (B,Hkv,Lk,Dv), float64."""
    B, H, Lq, Dk = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = H // Hkv
    kk = np.repeat(k, g, axis=1)
    vv = np.repeat(v, g, axis=1)
    scale = c.get("scale") or 1.0 / math.sqrt(Dk)
    s = scale * np.einsum("bhid,bhjd->bhij", q, kk)
    if c.get("bias") is not None:
        s = s + np.broadcast_to(c["bias"], s.shape)
    vis = visible_mask(B, H, Lq, Lk, c) & (s > -np.inf)
    s = np.where(vis, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    alive = np.isfinite(mx)
    e = np.where(vis, np.exp(s - np.where(alive, mx, 0.0)), 0.0)
    tot = e.sum(axis=-1, keepdims=True)
    w = np.where(alive, e / np.where(alive, tot, 1.0), 0.0)
    lse = np.where(alive[..., 0], mx[..., 0] + np.log(np.where(alive, tot, 1.0))[..., 0],
                   -np.inf)
    p = c.get("dropout", 0.0)
    if p > 0:
        seed = c.get("seed", 0)
        keep = np.array([[[[dropout_kept(seed, p, b, h, i, j)
                            for j in range(Lk)] for i in range(Lq)]
                          for h in range(H)] for b in range(B)])
        w = np.where(keep, w / (1.0 - p), 0.0)
    o = np.einsum("bhij,bhjd->bhid", w, vv)
    return o, w, lse


# ---- rounding to the kernel's input dtypes --------------------------------

def round_bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def rounded(x, dtype):
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        return round_bf16(x).astype(np.float64)
    return x.astype(np.float64)


# ---- random cases ----------------------------------------------------------

FEATURES = [
    [], ["causal-tl"], ["causal-br"], ["window"], ["window", "causal-br"],
    ["window-br"], ["klen"], ["qlen", "klen"], ["keep"], ["masked"],
    ["torch-mha"], ["bias"], ["bias-inf"], ["block"], ["random"],
    ["causal-tl", "klen", "keep"], ["causal-br", "qlen", "bias"],
    ["block", "random", "window"], ["fully-masked"], ["dropout"],
    ["gqa", "causal-br", "keep"], ["gqa", "block", "bias"],
    ["causal-tl", "window", "klen", "qlen", "keep", "bias", "block", "random"],
]
DTYPES = ["f32", "f32", "f16-compute", "f32", "f16-file", "bf16", "f32"]
SIZES = [1, 3, 17, 129, 5, 8, 2]


def pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def make_case(n, rng):
    feats = FEATURES[n % len(FEATURES)]
    dt = DTYPES[n % len(DTYPES)]
    B = int(pick(rng, [1, 1, 2, 3]))
    Hkv = int(pick(rng, [1, 1, 2]))
    H = Hkv * (int(pick(rng, [2, 3])) if "gqa" in feats else 1)
    if "gqa" not in feats and rng.random() < 0.3:
        H = Hkv = int(pick(rng, [2, 3]))
    big = n % 9 == 4  # now and then a 129 on some axis, smaller elsewhere
    Lq = int(pick(rng, SIZES)) if not big else 129
    Lk = int(pick(rng, SIZES)) if not big or n % 2 else 129
    Dk = int(pick(rng, [1, 3, 8, 17]))
    Dv = int(pick(rng, [1, 2, 3, 17])) if rng.random() < 0.6 else Dk
    if big:
        B, H, Hkv = 1, Hkv, Hkv
    c = {"feats": feats, "dtype": dt, "shape": (B, H, Hkv, Lq, Lk, Dk, Dv)}
    if rng.random() < 0.4:
        c["scale"] = float(pick(rng, [1.0, 0.25, 2.0, 0.1]))
    for f in feats:
        if f == "causal-tl":
            c["causal"], c["align"] = True, "top-left"
        elif f == "causal-br":
            c["causal"], c["align"] = True, "bottom-right"
        elif f == "window":
            c["window"] = (int(rng.integers(-1, 4)), int(rng.integers(-1, 4)))
        elif f == "window-br":
            c["window"] = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
            c["align"] = "bottom-right"
        elif f == "klen":
            c["klen"] = rng.integers(0 if rng.random() < 0.3 else 1, Lk + 1, B)
        elif f == "qlen":
            c["qlen"] = rng.integers(0, Lq + 1, B)
        elif f in ("keep", "masked", "torch-mha"):
            shp = [pick(rng, [B, 1]), pick(rng, [H, 1]), pick(rng, [Lq, 1]),
                   pick(rng, [Lk, 1])]
            rank = int(pick(rng, [2, 3, 4]))
            if rank == 2:
                shp = [1, 1, Lq, Lk]
            elif rank == 3:
                shp = [B, 1, Lq, Lk]
            c["keep"] = (rng.random(shp) < 0.7).astype(np.uint8)
            c["keep_rank"] = rank
            c["convention"] = f
        elif f in ("bias", "bias-inf"):
            rank = int(pick(rng, [2, 3, 4]))
            shp = {2: [1, 1, Lq, Lk], 3: [B, 1, Lq, Lk],
                   4: [pick(rng, [B, 1]), pick(rng, [H, 1]), Lq,
                       pick(rng, [Lk, 1])]}[rank]
            bias = rng.normal(0.0, 1.0, shp).astype(np.float32)
            if f == "bias-inf":
                bias[rng.random(shp) < 0.3] = -np.inf
            c["bias"], c["bias_rank"] = bias, rank
        elif f == "block":
            bs = int(pick(rng, [1, 2, 3, 4, 16]))
            nbq, nbk = -(-Lq // bs), -(-Lk // bs)
            lh = int(pick(rng, [0, 1, H]))  # 0: rank-2 layout
            shp = (nbq, nbk) if lh == 0 else (lh, nbq, nbk)
            c["block"] = (bs, (rng.random(shp) < 0.7).astype(np.uint8))
        elif f == "random":
            c["random"] = (int(pick(rng, [1, 2, 5, 16])),
                           float(pick(rng, [0.5, 0.8, 0.3])),
                           int(rng.integers(0, 2 ** 63)))
        elif f == "fully-masked":
            # key length 0 for some entries, or a window outside the keys
            c["klen"] = np.array([0] + [int(rng.integers(0, Lk + 1))
                                        for _ in range(B - 1)])
            c["causal"], c["align"] = True, "bottom-right"
        elif f == "dropout":
            c["dropout"] = float(pick(rng, [0.1, 0.5]))
            c["seed"] = int(rng.integers(0, 2 ** 40))
    return c


def input_rank(B, H, rng):
    if B == 1 and H == 1:
        return int(pick(rng, [2, 3, 4]))
    if H == 1:
        return int(pick(rng, [3, 4]))
    return 4


def squeeze(x, rank):
    """(B, H, ...) array in the layout of an input of that rank."""
    if rank == 4:
        return x
    if rank == 3:
        return x[:, 0]
    return x[0, 0]


def write_case(c, d, rng, f64=False):
    """Writes the case's files; returns the CLI arguments. f64: inputs are
    float64 values (not f32-representable) in <f8 files, run in f64."""
    B, H, Hkv, Lq, Lk, Dk, Dv = c["shape"]
    real = np.float64 if f64 else np.float32
    q = rng.uniform(-1.5, 1.5, (B, H, Lq, Dk)).astype(real)
    k = rng.uniform(-1.5, 1.5, (B, Hkv, Lk, Dk)).astype(real)
    v = rng.uniform(-1.0, 1.0, (B, Hkv, Lk, Dv)).astype(real)
    rq = input_rank(B, H, rng)
    rk = rq if Hkv == H else 4
    dt = c["dtype"]
    file_dtype = np.float16 if dt == "f16-file" else np.float32
    if f64 or (dt == "f32" and rng.random() < 0.2):
        file_dtype = np.float64  # <f8 files are read as f32 unless f64
    c["file_dtype"] = file_dtype
    args = []
    for name, x, r in (("q", q, rq), ("k", k, rk), ("v", v, rk)):
        path = os.path.join(d, name + ".npy")
        np.save(path, squeeze(x, r).astype(file_dtype))
        args += ["--" + name, path]
    kind = "f64" if f64 else {"f16-compute": "f16", "f16-file": "f16"}.get(dt, dt)
    if f64:
        args += ["--compute-dtype", "f64"]
    elif dt == "f16-compute":
        args += ["--compute-dtype", "f16"]
    elif dt == "bf16":
        args += ["--compute-dtype", "bf16"]
    c["rank"] = rq
    c["kind"] = kind
    c["inputs"] = (rounded(q, kind), rounded(k, kind), rounded(v, kind))

    if "scale" in c:
        args += ["--scale", repr(c["scale"])]
    if c.get("causal"):
        args += ["--causal", c["align"]]
    elif c.get("align"):
        args += ["--align", c["align"]]
    if "window" in c:
        args += ["--window", "%d,%d" % c["window"]]
    for key, opt in (("klen", "--key-lengths"), ("qlen", "--query-lengths")):
        if c.get(key) is not None:
            path = os.path.join(d, key + ".npy")
            ftype = pick(rng, [np.int64, np.int32, np.float32])
            np.save(path, np.asarray(c[key]).astype(ftype))
            args += [opt, path]
    if c.get("keep") is not None:
        keep, conv = c["keep"], c["convention"]
        stored = {"keep": keep, "masked": 1 - keep,
                  "torch-mha": 1 - keep}[conv]
        ftype = {"keep": pick(rng, [np.bool_, np.uint8, np.int32, np.float32]),
                 "masked": pick(rng, [np.float32, np.int32, np.int64]),
                 "torch-mha": np.bool_}[conv]
        path = os.path.join(d, "mask.npy")
        np.save(path, squeeze(stored, c["keep_rank"]).astype(ftype))
        args += ["--mask", path]
        # a float mask without a convention is an additive bias (PyTorch)
        if conv != "keep" or ftype == np.float32 or rng.random() < 0.5:
            args += ["--mask-convention", conv]
    if c.get("bias") is not None:
        path = os.path.join(d, "bias.npy")
        ftype = pick(rng, [np.float32, np.float64])
        np.save(path, squeeze(c["bias"], c["bias_rank"]).astype(ftype))
        args += ["--bias", path]
    if c.get("block"):
        bs, layout = c["block"]
        path = os.path.join(d, "layout.npy")
        np.save(path, layout.astype(pick(rng, [np.bool_, np.uint8, np.int32])))
        args += ["--block-sparse", "%d,%s" % (bs, path)]
    if c.get("random"):
        args += ["--random-blocks", "%d,%r,%d" % c["random"]]
    if c.get("dropout"):
        args += ["--dropout", repr(c["dropout"]), "--seed", str(c["seed"])]
    return args


def run_case(attn, n, c, args, d, impl, results):
    outs = {name: os.path.join(d, name + "-out.npy")
            for name in ("out", "weights", "lse")}
    cmd = [attn, "sdpa"] + args + ["--impl", impl, "--out", outs["out"],
                                   "--weights", outs["weights"],
                                   "--lse", outs["lse"]]
    if impl == "auto" and n % 3 == 0:
        cmd += ["--threads", str(1 + n % 2)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    label = "case %d (%s, %s, %s, shape B,H,Hkv,Lq,Lk,Dk,Dv=%s, impl %s)" % (
        n, "+".join(c["feats"]) or "no mask", c["dtype"], "rank %d" % c["rank"],
        c["shape"], impl)
    if p.returncode != 0:
        results.append((False, label, "exit %d: %s" % (p.returncode,
                                                        p.stderr.strip())))
        return
    o, w, lse = reference(*c["inputs"], c)
    tol = TOL[c["kind"]]
    worst = 0.0
    msgs = []
    for name, want in (("out", o), ("weights", w), ("lse", lse)):
        got = np.load(outs[name])
        want = squeeze(want, c["rank"])
        # outputs come in the inputs' dtype (f16 files give f16 out and
        # weights; lse stays f32): their rounding adds half an f16 ulp
        f16_out = c.get("file_dtype") == np.float16 and name != "lse"
        want_dt = (np.float32 if name == "lse" else np.float16 if f16_out else
                   np.float64 if c["kind"] == "f64" or c["file_dtype"] == np.float64
                   else np.float32)
        if got.dtype != want_dt:
            msgs.append("%s is %s, wanted %s" % (name, got.dtype, np.dtype(want_dt)))
        if got.shape != want.shape:
            msgs.append("%s has shape %s, wanted %s" % (name, got.shape,
                                                        want.shape))
            continue
        got = got.astype(np.float64)
        inf_w, inf_g = np.isneginf(want), np.isneginf(got)
        if not np.array_equal(inf_w, inf_g):
            msgs.append("%s: -inf at different places" % name)
            continue
        if np.isnan(got).any():
            msgs.append("%s has NaN" % name)
            continue
        if name == "weights":
            masked = want == 0
            if np.any(got[masked] != 0):
                msgs.append("weights not exactly 0 where masked")
        fin = ~inf_w
        err = float(np.max(np.abs(got[fin] - want[fin]))) if fin.any() else 0.0
        # lse is always f32 (a float array), also on the f64 path
        t = TOL["f32"] if name == "lse" and c["kind"] == "f64" else tol
        if f16_out:
            t += 2.0 ** -11 * float(np.max(np.abs(want[fin]))) if fin.any() else 0
        if name != "lse" or c["kind"] != "f64":
            worst = max(worst, err)
        if err > t:
            msgs.append("%s max error %.3g > %.1g" % (name, err, t))
    results.append((not msgs, label, "; ".join(msgs), c["kind"], worst))


def main():
    attn = sys.argv[1]
    ncases = int(os.environ.get("ATTN_NUMPY_CASES", "66"))
    rng = np.random.default_rng(20240611)
    results = []
    seen = set()
    with tempfile.TemporaryDirectory() as d:
        for n in range(ncases):
            c = make_case(n, rng)
            args = write_case(c, d, rng)
            B, H, Hkv, Lq, Lk, Dk, Dv = c["shape"]
            seen.update(c["feats"])
            seen.update({"dtype " + c["dtype"], "rank %d" % c["rank"]})
            seen.update("size %d" % x for x in (Lq, Lk, Dk, Dv))
            if Lq != Lk:
                seen.add("Lq != Lk")
            if Dk != Dv:
                seen.add("Dk != Dv")
            if args.count("--scale") == 0:
                seen.add("default scale")
            for impl in ("ref", "auto"):
                run_case(attn, n, c, args, d, impl, results)
        # f64 end to end through the reference
        for n in range(ncases, ncases + 3):
            c = make_case(n, rng)
            c["dtype"] = "f64"
            args = write_case(c, d, rng, f64=True)
            run_case(attn, n, c, args, d, "ref", results)
    # the cases must cover what the check promises (guards future edits)
    want = {f for fs in FEATURES for f in fs}
    want |= {"dtype " + t for t in DTYPES} | {"rank 2", "rank 3", "rank 4"}
    want |= {"size 1", "size 3", "size 17", "size 129", "Lq != Lk",
             "Dk != Dv", "default scale"}
    if ncases >= len(FEATURES) * 2:
        for item in sorted(want - seen):
            results.append((False, "coverage", "no case with " + item))
    failed = [r for r in results if not r[0]]
    for r in failed:
        print("FAIL", r[1] + ":", r[2])
    by_kind = {}
    for r in results:
        if len(r) > 3:
            by_kind[r[3]] = max(by_kind.get(r[3], 0.0), r[4])
    for kind, err in sorted(by_kind.items()):
        print("max error %-4s: %.3g (tolerance %g)" % (kind, err, TOL[kind]))
    print("%d passed, %d failed" % (len(results) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
