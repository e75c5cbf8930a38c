"""An independent NumPy implementation of the three layers (additive
attention, multi-head attention, the encoder stack) run against the CLI:
random inputs, parameters drawn by --init-seed and saved with
--save-params, read back here from the documented file format
(docs/params-format.md), the formulas evaluated in float64, and the CLI's
output compared within 1e-5. A second CLI run loading the saved file must
give the same bits.

usage: cli_layers_numpy.py ATTN_CLI SOURCE_DIR
"""
import math
import os
import struct
import sys
import tempfile
import zlib
import atexit
import shutil

import numpy as np

import clitest
from clitest import check, summary

TMP = tempfile.mkdtemp(prefix="attn_layers_np_")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def path(name):
    return os.path.join(TMP, name)


def run(args):
    p = clitest.run(args)
    if p.returncode != 0:
        raise RuntimeError("attn %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr))


def read_params(fn):
    b = open(fn, "rb").read()
    assert b[:8] == b"ATTNPRM\0", "magic"
    assert zlib.crc32(b[:-4]) == struct.unpack("<I", b[-4:])[0], "crc"
    assert struct.unpack_from("<I", b, 8)[0] == 1, "version"
    n_cfg = struct.unpack_from("<I", b, 28)[0]
    pos = 32 + 8 * n_cfg
    n_sl = struct.unpack_from("<Q", b, pos)[0]
    pos += 8
    sl = []
    for _ in range(n_sl):
        name = b[pos:pos + 48].split(b"\0")[0].decode()
        off, r, c = struct.unpack_from("<qqq", b, pos + 48)
        pos += 76
        sl.append((name, off, r, c))
    count = struct.unpack_from("<Q", b, pos)[0]
    pos += 8
    block = np.frombuffer(b, "<f4", count, pos).astype(np.float64)
    return {n: block[o:o + r * c].reshape(r, c) for n, o, r, c in sl}


def softmax_masked(s, vis):
    """Row softmax over visible entries; rows with none give 0."""
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(vis, np.exp(s - m), 0.0)
    z = e.sum(axis=-1, keepdims=True)
    return np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)


def visible(B, Lq, Lk, causal=None, key_lengths=None, keep=None):
    """(B, Lq, Lk) boolean visibility."""
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    vis = np.ones((B, Lq, Lk), bool)
    for b in range(B):
        lk = Lk if key_lengths is None else key_lengths[b]
        v = j < lk
        if causal == "top-left":
            v = v & (j <= i)
        elif causal == "bottom-right":
            v = v & (j <= i + lk - Lq)
        vis[b] = v
    if keep is not None:
        vis &= keep.astype(bool)
    return vis


def lin(x, w, b=None):
    y = x @ w.T
    return y + b.reshape(-1) if b is not None else y


def np_mha(P, q, k, v, H, Hkv, vis, bias=None):
    B, Lq, E = q.shape
    Lk = k.shape[1]
    hd = E // H
    Q = lin(q, P["w_q"], P.get("b_q")).reshape(B, Lq, H, hd).transpose(0, 2, 1, 3)
    K = lin(k, P["w_k"], P.get("b_k")).reshape(B, Lk, Hkv, hd).transpose(0, 2, 1, 3)
    V = lin(v, P["w_v"], P.get("b_v")).reshape(B, Lk, Hkv, hd).transpose(0, 2, 1, 3)
    K = np.repeat(K, H // Hkv, axis=1)
    V = np.repeat(V, H // Hkv, axis=1)
    s = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(hd)
    if bias is not None:
        s = s + bias
    w = softmax_masked(s, np.broadcast_to(vis[:, None], s.shape))
    C = (w @ V).transpose(0, 2, 1, 3).reshape(B, Lq, E)
    return lin(C, P["w_o"], P.get("b_o")), w


def np_additive(P, q, k, v, vis, ctx_keys=False):
    qp = lin(q, P["w_q"], P.get("b_q"))
    kp = lin(k, P["w_k"], P.get("b_k"))
    u = np.tanh(qp[:, :, None, :] + kp[:, None, :, :])  # (B, Lq, Lk, A)
    s = u @ P["v"].reshape(-1)
    w = softmax_masked(s, vis)
    return w @ (kp if ctx_keys else v), w


def layernorm(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    var = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(var + eps) * g.reshape(-1) + b.reshape(-1)


erf = np.vectorize(math.erf)


def np_encoder(P, x, cfg, vis):
    N, H, Hkv, att, act, nf, fin = cfg
    eps = 1e-5
    for l in range(N):
        p = "layers.%d." % l
        a_p = {n[len(p) + 5:]: v for n, v in P.items() if n.startswith(p + "attn.")}
        ain = layernorm(x, P[p + "ln1_gamma"], P[p + "ln1_beta"], eps) if nf else x
        if att == "dot":
            a, _ = np_mha(a_p, ain, ain, ain, H, Hkv, vis)
        else:
            c, _ = np_additive(a_p, ain, ain, ain, vis)
            a = lin(c, a_p["w_o"], a_p["b_o"])
        r1 = x + a
        f_in = layernorm(r1, P[p + "ln2_gamma" if nf else p + "ln1_gamma"],
                         P[p + "ln2_beta" if nf else p + "ln1_beta"], eps)
        h = lin(f_in, P[p + "w_1"], P[p + "b_1"])
        h = 0.5 * h * (1 + erf(h / math.sqrt(2))) if act == "gelu" else np.maximum(h, 0)
        f = lin(h, P[p + "w_2"], P[p + "b_2"])
        x = r1 + f if nf else layernorm(f_in + f, P[p + "ln2_gamma"], P[p + "ln2_beta"], eps)
    if fin:
        x = layernorm(x, P["norm_gamma"], P["norm_beta"], eps)
    return x


def compare(name, got, want, tol=1e-5):
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    check(got.shape == want.shape and err <= tol * scale,
          "%s: shape %s vs %s, max error %.3g" % (name, got.shape, want.shape, err))


def save(name, a):
    np.save(path(name), a)
    return path(name)


def layer_case(kind, name, args, inputs, ref, extra_outputs=()):
    """Runs the CLI with --init-seed/--save-params, then again with
    --params; compares with ref(params) -> dict of outputs."""
    files = [a for pair in inputs.items() for a in ("--" + pair[0], save(name + pair[0] + ".npy", pair[1]))]
    outs = ["--out", path(name + "_out.npy")]
    for e in extra_outputs:
        outs += ["--" + e, path(name + "_" + e + ".npy")]
    pf = path(name + ".bin")
    run([kind] + files + outs + args + ["--save-params", pf])
    P = read_params(pf)
    want = ref(P)
    for key, w in want.items():
        compare("%s %s %s" % (kind, name, key), np.load(path(name + "_" + key + ".npy")).astype(np.float64), w)
    first = np.load(path(name + "_out.npy"))
    strip = []
    skip = False
    for a in args:  # the layer-size options are not needed with --params
        if skip:
            skip = False
            continue
        if a == "--init-seed":
            skip = True
            continue
        strip.append(a)
    run([kind] + files + ["--out", path(name + "_again.npy"), "--params", pf] + strip)
    check(np.array_equal(np.load(path(name + "_again.npy")), first),
          "%s %s: reloading the saved parameters changed the output" % (kind, name))


rng = np.random.default_rng(20241129)


def r(*shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


# ---- multi-head attention ----
x = r(2, 7, 12)
layer_case("mha", "self", ["--init-seed", "3", "--heads", "3"], {"query": x},
           lambda P: dict(zip(("out", "weights"), np_mha(P, x.astype(float), x.astype(float), x.astype(float), 3, 3,
                                                          visible(2, 7, 7)))), ("weights",))
q, k, v = r(2, 5, 8), r(2, 9, 6), r(2, 9, 10)
kl = np.array([9, 4], np.int64)
save("kl_mha.npy", kl)
layer_case("mha", "cross_gqa", ["--init-seed", "4", "--heads", "4", "--kv-heads", "2", "--key-lengths", path("kl_mha.npy")],
           {"query": q, "key": k, "value": v},
           lambda P: {"out": np_mha(P, q.astype(float), k.astype(float), v.astype(float), 4, 2,
                                    visible(2, 5, 9, key_lengths=kl))[0]})
x2 = r(6, 8)
layer_case("mha", "rank2_causal_avg", ["--init-seed", "5", "--heads", "2", "--causal", "top-left", "--average-weights"],
           {"query": x2},
           lambda P: (lambda o, w: {"out": o[0], "weights": w[0].mean(0)})(
               *np_mha(P, x2[None].astype(float), x2[None].astype(float), x2[None].astype(float), 2, 2,
                       visible(1, 6, 6, causal="top-left"))), ("weights",))
keep = (rng.uniform(size=(2, 4, 4)) > 0.3).astype(np.uint8)
bias = r(2, 4, 4)
save("keep_mha.npy", keep)
save("bias_mha.npy", bias)
x3 = r(2, 4, 6)
layer_case("mha", "keep_bias_nobias", ["--init-seed", "6", "--heads", "2", "--no-bias", "--mask", path("keep_mha.npy"),
                                       "--bias", path("bias_mha.npy")], {"query": x3},
           lambda P: {"out": np_mha(P, x3.astype(float), x3.astype(float), x3.astype(float), 2, 2,
                                    visible(2, 4, 4, keep=keep), bias[:, None].astype(float))[0]})

# ---- additive attention ----
q, k, v = r(2, 5, 7), r(2, 6, 4), r(2, 6, 3)
kl = np.array([6, 2], np.int64)
save("kl_add.npy", kl)
layer_case("additive", "values", ["--init-seed", "7", "--attn-dim", "5", "--key-lengths", path("kl_add.npy")],
           {"query": q, "key": k, "value": v},
           lambda P: dict(zip(("out", "weights"), np_additive(P, q.astype(float), k.astype(float), v.astype(float),
                                                              visible(2, 5, 6, key_lengths=kl)))), ("weights",))
layer_case("additive", "keys_br", ["--init-seed", "8", "--attn-dim", "4", "--context-keys", "--no-bias",
                                   "--causal", "bottom-right"], {"query": q, "key": k},
           lambda P: {"out": np_additive(P, q.astype(float), k.astype(float), None,
                                         visible(2, 5, 6, causal="bottom-right"), ctx_keys=True)[0]})
x4 = r(9, 5)
layer_case("additive", "self_rank2", ["--init-seed", "9", "--attn-dim", "16"], {"query": x4},
           lambda P: {"out": np_additive(P, x4[None].astype(float), x4[None].astype(float), x4[None].astype(float),
                                         visible(1, 9, 9))[0][0]})

# ---- encoder ----
x5 = r(2, 6, 8)
kl = np.array([6, 3], np.int64)
save("kl_enc.npy", kl)
layer_case("encoder", "dot_post", ["--init-seed", "10", "--layers", "2", "--heads", "2", "--ff", "16",
                                   "--key-lengths", path("kl_enc.npy")], {"x": x5},
           lambda P: {"out": np_encoder(P, x5.astype(float), (2, 2, 2, "dot", "relu", 0, 0),
                                        visible(2, 6, 6, key_lengths=kl))})
layer_case("encoder", "additive_pre", ["--init-seed", "11", "--layers", "2", "--ff", "12", "--attention", "additive",
                                       "--activation", "gelu", "--norm-first", "--final-norm"], {"x": x5},
           lambda P: {"out": np_encoder(P, x5.astype(float), (2, 1, 1, "additive", "gelu", 1, 1), visible(2, 6, 6))})
x6 = r(5, 8)
pe = np.zeros((5, 8))
for p_ in range(5):
    for c_ in range(8):
        ang = p_ / 10000 ** ((c_ - c_ % 2) / 8)
        pe[p_, c_] = math.cos(ang) if c_ % 2 else math.sin(ang)
layer_case("encoder", "gqa_causal_pos", ["--init-seed", "12", "--heads", "4", "--kv-heads", "1", "--ff", "8",
                                         "--causal", "top-left", "--positions"], {"x": x6},
           lambda P: {"out": np_encoder(P, (x6.astype(float) + pe)[None], (1, 4, 1, "dot", "relu", 0, 0),
                                        visible(1, 5, 5, causal="top-left"))[0]})

# ---- failures through the CLI: exit status and the library's message ----
def expect_fail(args, code, words):
    p = clitest.run(args)
    check(p.returncode == code and all(w in p.stderr for w in words),
          "attn %s: exit %d (wanted %d), stderr %r" % (" ".join(args), p.returncode, code, p.stderr))


good = path("self.bin")
bad = path("flipped.bin")
b = bytearray(open(good, "rb").read())
b[len(b) // 2] ^= 0x10
open(bad, "wb").write(bytes(b))
xq = path("selfquery.npy")
expect_fail(["mha", "--query", xq, "--out", path("f.npy"), "--params", bad], 1, ["malformed", "CRC"])
expect_fail(["additive", "--query", xq, "--out", path("f.npy"), "--params", good], 1, ["malformed", "mha"])
expect_fail(["mha", "--query", xq, "--out", path("f.npy")], 2, ["--init-seed"])
expect_fail(["mha", "--query", xq, "--out", path("f.npy"), "--init-seed", "1", "--heads", "5"], 1, ["invalid"])
expect_fail(["encoder", "--x", xq, "--out", path("f.npy"), "--params", path("missing.bin")], 1, ["I/O"])
expect_fail(["encoder", "--x", xq, "--out", path("f.npy"), "--init-seed", "1", "--heads", "2",
             "--key-lengths", path("kl_mha.npy")], 1, [])

sys.exit(summary("cli_layers_numpy"))
