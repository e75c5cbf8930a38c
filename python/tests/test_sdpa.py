"""scaled_dot_product_attention against the NumPy oracle (npref) on random
cases: every argument, ranks 2-4, float16/bfloat16/float64, GQA, fully
masked rows, thread counts."""

import numpy as np
import pytest

import attn
import npref
from conftest import SANITIZED, make, out_values, rounding, tol_for

SIZES = (1, 3, 17) if SANITIZED else (1, 3, 17, 33)


def check_close(got, want, tol, what):
    tol = tol + rounding(got, want)  # float16 / bfloat16 results
    got = out_values(got)
    assert got.shape == want.shape, what
    assert not np.isnan(got).any(), what + " has NaN"
    inf_g, inf_w = np.isneginf(got), np.isneginf(want)
    assert np.array_equal(inf_g, inf_w), what + ": -inf at different places"
    err = np.max(np.abs(np.where(inf_w, 0, got) - np.where(inf_w, 0, want)),
                 initial=0.0)
    assert err <= tol, "%s: max error %g > %g" % (what, err, tol)


def case_inputs(rng, c, ev):
    """q, k, v of a random case c (value width ev): the arrays, their float64
    values, the dtype argument and the shape of the scores."""
    lead = {4: (c["B"], c["H"]), 3: (c["B"],), 2: ()}[c["rank"]]
    lead_kv = {4: (c["B"], c["Hkv"]), 3: (c["B"],), 2: ()}[c["rank"]]
    q, q64, dt = make(rng, lead + (c["Lq"], c["E"]), c["dtype"])
    k, k64, _ = make(rng, lead_kv + (c["Lk"], c["E"]), c["dtype"])
    v, v64, _ = make(rng, lead_kv + (c["Lk"], ev), c["dtype"])
    return (q, k, v), (q64, k64, v64), dt, lead + (c["Lq"], c["Lk"])


def lse_tol(want_l):
    """The tolerance of a log-sum-exp: relative to its largest finite value."""
    return 2e-5 * max(1, np.max(np.abs(want_l[np.isfinite(want_l)]), initial=1))


def random_case(seed):
    r = np.random.default_rng(1000 + seed)
    c = dict(rank=int(r.choice([2, 3, 4])),
             dtype=str(r.choice(["float32", "float16", "bfloat16"])),
             impl=str(r.choice(["auto", "ref", "flash"])))
    c["B"] = int(r.choice([1, 2, 3])) if c["rank"] >= 3 else 1
    c["H"] = int(r.choice([1, 2, 4])) if c["rank"] == 4 else 1
    c["Hkv"] = c["H"]
    if c["rank"] == 4 and c["H"] > 1 and r.random() < 0.4:
        c["Hkv"] = c["H"] // 2
    c["Lq"], c["Lk"] = (int(r.choice(SIZES)) for _ in range(2))
    c["E"], c["Ev"] = int(r.choice([1, 4, 8, 16])), int(r.choice([1, 3, 8]))
    c["mask"] = str(r.choice(["none", "bool", "float"]))
    c["is_causal"] = bool(r.random() < 0.4)
    c["align"] = str(r.choice(["top-left", "bottom-right"]))
    c["window"] = None if r.random() < 0.6 else (
        int(r.integers(0, 4)) if r.random() < 0.8 else None,
        int(r.integers(0, 4)) if r.random() < 0.5 else None)
    c["key_lengths"] = (r.integers(0, c["Lk"] + 1, c["B"]).tolist()
                        if c["rank"] >= 3 and r.random() < 0.3 else None)
    c["query_lengths"] = (r.integers(0, c["Lq"] + 1, c["B"]).tolist()
                          if c["rank"] >= 3 and r.random() < 0.2 else None)
    c["scale"] = None if r.random() < 0.6 else float(r.uniform(0.05, 2.0))
    c["dropout_p"] = 0.0 if r.random() < 0.7 else float(r.choice([0.1, 0.5]))
    c["seed"] = int(r.integers(0, 2**63))
    return c


def mask_for(rng, kind, score_shape):
    """A mask broadcastable to score_shape: each axis full or 1, leading
    axes sometimes dropped (PyTorch's broadcasting)."""
    shape = tuple(n if rng.random() < 0.6 else 1 for n in score_shape)
    drop = int(rng.integers(0, len(shape) - 1))
    shape = shape[drop:]
    if kind == "bool":
        return rng.random(shape) < 0.75
    m = rng.standard_normal(shape).astype(np.float32)
    m[rng.random(shape) < 0.15] = -np.inf
    return m


@pytest.mark.parametrize("seed", range(40 if SANITIZED else 80))
def test_random_case(seed):
    c = random_case(seed)
    rng = np.random.default_rng(seed)
    r = c["rank"]
    (q, k, v), (q64, k64, v64), dt, score_shape = case_inputs(rng, c, c["Ev"])
    m = None if c["mask"] == "none" else mask_for(rng, c["mask"], score_shape)
    kw = dict(is_causal=c["is_causal"], window=c["window"],
              key_lengths=c["key_lengths"], query_lengths=c["query_lengths"],
              seed=c["seed"])
    out, w, lse = attn.scaled_dot_product_attention(
        q, k, v, attn_mask=m, dropout_p=c["dropout_p"], scale=c["scale"],
        enable_gqa=c["H"] != c["Hkv"], causal_alignment=c["align"],
        return_weights=True, return_lse=True, impl=c["impl"], dtype=dt, **kw)
    m4 = None if m is None else npref.to4(
        np.broadcast_to(m, score_shape), r)
    want_o, want_w, want_l, _ = npref.sdpa(
        npref.to4(q64, r), npref.to4(k64, r), npref.to4(v64, r), mask=m4,
        dropout_p=c["dropout_p"], scale=c["scale"], align=c["align"], **kw)
    # results in the inputs' dtype, as PyTorch; lse float32
    assert out.dtype == q.dtype and w.dtype == q.dtype
    assert lse.dtype == np.float32
    tol = tol_for(v64) / (1 - c["dropout_p"])
    check_close(out, want_o.reshape(out.shape), tol, "out %r" % c)
    check_close(w, want_w.reshape(w.shape), 1e-5 / (1 - c["dropout_p"]), "weights")
    check_close(lse, want_l.reshape(lse.shape), lse_tol(want_l), "lse")


@pytest.mark.parametrize("rank", [2, 3, 4])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_ranks_and_dtypes(rng, rank, dtype):
    lead = {2: (), 3: (3,), 4: (2, 3)}[rank]
    q, q64, dt = make(rng, lead + (17, 8), dtype)
    k, k64, _ = make(rng, lead + (5, 8), dtype)
    v, v64, _ = make(rng, lead + (5, 3), dtype)
    out = attn.scaled_dot_product_attention(q, k, v, is_causal=True, dtype=dt)
    assert out.shape == lead + (17, 3) and out.dtype == q.dtype
    want = npref.sdpa(npref.to4(q64, rank), npref.to4(k64, rank),
                      npref.to4(v64, rank), is_causal=True)[0]
    check_close(out, want.reshape(out.shape), tol_for(v64), "out")


def test_float64(rng):
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    want = npref.sdpa(q[:, None], k[:, None], v[:, None], is_causal=True)[0][:, 0]
    # the reference keeps float64 end to end
    o = attn.scaled_dot_product_attention(q, k, v, is_causal=True, impl="ref")
    assert o.dtype == np.float64
    np.testing.assert_allclose(o, want, rtol=0, atol=1e-13)
    # the fast path computes in float32 and returns float64, as given
    o = attn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert o.dtype == np.float64
    check_close(o, want, tol_for(v), "f64 via f32")


@pytest.mark.parametrize("rank", [3, 4])
def test_gqa(rng, rank):
    lead_q, lead_kv = ((6,), (2,)) if rank == 3 else ((2, 6), (2, 3))
    q, q64, _ = make(rng, lead_q + (5, 4))
    k, k64, _ = make(rng, lead_kv + (7, 4))
    v, v64, _ = make(rng, lead_kv + (7, 3))
    out = attn.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    heads3 = rank == 3  # PyTorch groups rank-3 inputs on axis 0
    want = npref.sdpa(npref.to4(q64, rank, heads3), npref.to4(k64, rank, heads3),
                      npref.to4(v64, rank, heads3))[0]
    check_close(out, want.reshape(out.shape), tol_for(v64), "gqa")
    # the same as repeating each key/value head for its group of query heads
    axis = rank - 3
    rep = attn.scaled_dot_product_attention(
        q, np.repeat(k, 3 if rank == 3 else 2, axis=axis),
        np.repeat(v, 3 if rank == 3 else 2, axis=axis))
    check_close(out, rep.astype(np.float64), 1e-6, "gqa vs repeat")


@pytest.mark.parametrize("how", ["key_lengths", "bool", "float", "query_lengths",
                                 "causal"])
def test_fully_masked_rows_give_zeros(rng, how):
    q, _, _ = make(rng, (2, 2, 5, 4))
    k, _, _ = make(rng, (2, 2, 6, 4))
    v, _, _ = make(rng, (2, 2, 6, 3))
    kw = {}
    if how == "key_lengths":
        kw["key_lengths"] = [0, 6]
        dead = (slice(0, 1), slice(None), slice(None))
    elif how == "query_lengths":
        kw["query_lengths"] = [5, 2]
        dead = (1, slice(None), slice(2, None))
    elif how == "bool":
        m = np.ones((5, 6), dtype=bool)
        m[3] = False
        kw["attn_mask"] = m
        dead = (slice(None), slice(None), 3)
    elif how == "float":
        m = np.zeros((2, 1, 5, 6), dtype=np.float32)
        m[1, 0, 0] = -np.inf
        kw["attn_mask"] = m
        dead = (1, slice(None), 0)
    else:  # bottom-right with Lq > Lk: the first rows see no key
        q = np.concatenate([q, q], axis=2)  # Lq = 10 > Lk = 6
        kw.update(is_causal=True, causal_alignment="bottom-right")
        dead = (slice(None), slice(None), slice(0, 4))
    for impl in ("auto", "ref", "flash"):
        out, w, lse = attn.scaled_dot_product_attention(
            q, k, v, return_weights=True, return_lse=True, impl=impl, **kw)
        assert not np.isnan(out).any() and not np.isnan(w).any()
        assert (out[dead] == 0).all() and (w[dead] == 0).all()
        assert np.isneginf(lse[dead]).all()
        assert np.isfinite(lse[~np.isneginf(lse)]).all()


def test_threads_give_identical_bits(rng):
    q, _, _ = make(rng, (1, 2, 129, 16))
    k, _, _ = make(rng, (1, 2, 65, 16))
    v, _, _ = make(rng, (1, 2, 65, 16))
    outs = [attn.scaled_dot_product_attention(q, k, v, is_causal=True, threads=t,
                                              dropout_p=0.2, seed=7)
            for t in (1, 2, 3)]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_seed_reproduces_dropout(rng):
    q, _, _ = make(rng, (1, 1, 8, 4))
    k, _, _ = make(rng, (1, 1, 9, 4))
    v, _, _ = make(rng, (1, 1, 9, 4))
    a = attn.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=3)
    b = attn.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=3)
    c = attn.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # without a seed each call draws one
    d = attn.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    e = attn.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not np.array_equal(d, e)


def test_dropout_rate(rng):
    q, _, _ = make(rng, (2, 2, 64, 8))
    k, _, _ = make(rng, (2, 2, 64, 8))
    _, w = attn.scaled_dot_product_attention(q, k, k, dropout_p=0.3, seed=11,
                                             return_weights=True)
    dropped = np.mean(w == 0)
    assert abs(dropped - 0.3) < 0.03
    # kept weights are scaled by 1 / (1 - p): rows sum to 1 on average
    assert abs(w.sum(-1).mean() - 1.0) < 0.05


def test_window_and_alignment(rng):
    q, q64, _ = make(rng, (1, 1, 7, 4))
    k, k64, _ = make(rng, (1, 1, 12, 4))
    for align in ("top-left", "bottom-right"):
        for window in ((2, 0), (None, 1), (0, None), (1, 3)):
            _, w = attn.scaled_dot_product_attention(
                q, k, k, causal_alignment=align, window=window,
                return_weights=True)
            vis = npref.visible(1, 1, 7, 12, align=align, window=window)
            assert np.array_equal(w > 0, vis), (align, window)
