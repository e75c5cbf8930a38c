"""sdpa_backward against the softmax gradient formulas in NumPy (npref) and
against central differences of the float64 reference."""

import numpy as np
import pytest

import attn
import npref
from conftest import SANITIZED, make, out_values, rounding, tol_for


def reduce_to(x, shape):
    """Sums x over the axes where shape (right-aligned) has size 1."""
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(a for a, n in enumerate(shape) if n == 1 and x.shape[a] != 1)
    return x.sum(axis=axes, keepdims=True).reshape(shape)


def grad_tol(*arrays):
    return 5 * tol_for(*arrays)


CASES = [
    dict(),
    dict(is_causal=True),
    dict(is_causal=True, causal_alignment="bottom-right", Lq=3),
    dict(mask="bool"),
    dict(mask="float"),
    dict(mask="float", mask_shape=(1, 1, "Lq", "Lk")),
    dict(mask="float", mask_shape=("Lk",)),
    dict(mask="float", mask_shape=("B", 1, 1, "Lk")),
    dict(gqa=True),
    dict(gqa=True, mask="float", is_causal=True),
    dict(key_lengths=[0, 4], query_lengths=[5, 2]),
    dict(window=(1, 2)),
    dict(dropout_p=0.3, seed=5),
    dict(dropout_p=0.5, seed=9, mask="float", gqa=True),
    dict(scale=0.3),
]


@pytest.mark.parametrize("impl", ["auto", "ref", "flash"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_formulas(rng, impl, case):
    c = dict(CASES[case])
    B, H, Lq, Lk, E, Ev = 2, 4, c.pop("Lq", 5), 7, 8, 3
    Hkv = 2 if c.pop("gqa", False) else H
    q, q64, _ = make(rng, (B, H, Lq, E))
    k, k64, _ = make(rng, (B, Hkv, Lk, E))
    v, v64, _ = make(rng, (B, Hkv, Lk, Ev))
    g, g64, _ = make(rng, (B, H, Lq, Ev))
    kind = c.pop("mask", None)
    dims = dict(B=B, H=H, Lq=Lq, Lk=Lk)
    shape = tuple(dims.get(n, n) for n in c.pop("mask_shape", ("B", "H", "Lq", "Lk")))
    m = None
    if kind == "bool":
        m = rng.random(shape) < 0.7
    elif kind == "float":
        m = rng.standard_normal(shape).astype(np.float32)
        m[rng.random(shape) < 0.1] = -np.inf
    ref_kw = dict(is_causal=c.get("is_causal", False),
                  align=c.get("causal_alignment", "top-left"),
                  window=c.get("window"), key_lengths=c.get("key_lengths"),
                  query_lengths=c.get("query_lengths"),
                  dropout_p=c.get("dropout_p", 0.0), seed=c.get("seed", 0),
                  scale=c.get("scale"))
    dq, dk, dv, dS = npref.sdpa_grads(q64, k64, v64, g64, mask=m, **ref_kw)
    got = attn.sdpa_backward(g, q, k, v, attn_mask=m, enable_gqa=Hkv != H,
                             impl=impl, **c)
    assert len(got) == (4 if kind == "float" else 3)
    tol = grad_tol(q64, k64, v64, g64)
    for name, a, b in zip(("dq", "dk", "dv"), got, (dq, dk, dv)):
        assert a.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=tol, rtol=0, err_msg=name)
    if kind == "float":
        assert got[3].shape == m.shape
        np.testing.assert_allclose(got[3], reduce_to(dS, m.shape), atol=tol,
                                   rtol=0, err_msg="dbias")


def test_out_and_lse_from_forward(rng):
    q, _, _ = make(rng, (2, 2, 6, 4))
    k, _, _ = make(rng, (2, 2, 9, 4))
    v, _, _ = make(rng, (2, 2, 9, 5))
    g, _, _ = make(rng, (2, 2, 6, 5))
    kw = dict(is_causal=True, dropout_p=0.25, seed=123)
    out, lse = attn.scaled_dot_product_attention(q, k, v, return_lse=True, **kw)
    a = attn.sdpa_backward(g, q, k, v, out=out, lse=lse, **kw)
    b = attn.sdpa_backward(g, q, k, v, **kw)  # recomputes out and lse
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("rank", [2, 3])
def test_low_ranks(rng, rank):
    lead = () if rank == 2 else (3,)
    q, q64, _ = make(rng, lead + (4, 6))
    k, k64, _ = make(rng, lead + (5, 6))
    v, v64, _ = make(rng, lead + (5, 2))
    g, g64, _ = make(rng, lead + (4, 2))
    m = np.triu(np.full((4, 5), -1.5, np.float32), 1)
    dq, dk, dv, db = attn.sdpa_backward(g, q, k, v, attn_mask=m)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert db.shape == m.shape
    want = npref.sdpa_grads(npref.to4(q64, rank), npref.to4(k64, rank),
                            npref.to4(v64, rank), npref.to4(g64, rank), mask=m)
    tol = grad_tol(q64, k64, v64, g64)
    for a, b in zip((dq, dk, dv), want[:3]):
        np.testing.assert_allclose(a, b.reshape(a.shape), atol=tol, rtol=0)
    np.testing.assert_allclose(db, reduce_to(want[3], m.shape), atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs(rng, dtype):
    q, q64, dt = make(rng, (1, 2, 5, 8), dtype)
    k, k64, _ = make(rng, (1, 2, 6, 8), dtype)
    v, v64, _ = make(rng, (1, 2, 6, 4), dtype)
    g, g64, _ = make(rng, (1, 2, 5, 4))
    got = attn.sdpa_backward(g, q, k, v, is_causal=True, dtype=dt)
    want = npref.sdpa_grads(q64, k64, v64, g64, is_causal=True)
    for a, b in zip(got, want[:3]):
        assert a.dtype == q.dtype  # as PyTorch: gradients in the inputs' dtype
        np.testing.assert_allclose(out_values(a), b, rtol=0,
                                   atol=grad_tol(q64, k64, v64) + rounding(a, b))


def test_broadcast_view_mask_gets_one_gradient_per_element(rng):
    # np.broadcast_to gives stride 0: each element of the view is its own
    # input, as for a PyTorch expand(), so its gradient is not summed
    q, q64, _ = make(rng, (2, 2, 3, 4))
    k, k64, _ = make(rng, (2, 2, 5, 4))
    g, g64, _ = make(rng, (2, 2, 3, 4))
    m1 = rng.standard_normal((1, 1, 3, 5)).astype(np.float32)
    m = np.broadcast_to(m1, (2, 2, 3, 5))
    db = attn.sdpa_backward(g, q, k, k, attn_mask=m)[3]
    dS = npref.sdpa_grads(q64, k64, k64, g64, mask=m)[3]
    assert db.shape == m.shape
    np.testing.assert_allclose(db, dS, atol=grad_tol(q64, k64, g64), rtol=0)


def test_central_differences():
    # float64 through the reference: gradients of L = sum(out * g)
    rng = np.random.default_rng(42)
    q, k = rng.standard_normal((1, 2, 3, 4)), rng.standard_normal((1, 1, 4, 4))
    v, g = rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 2, 3, 2))
    m = rng.standard_normal((3, 4))
    m[0, 3] = -np.inf
    kw = dict(attn_mask=m, is_causal=True, causal_alignment="bottom-right",
              enable_gqa=True, impl="ref", dropout_p=0.4, seed=77)

    def loss(q, k, v, m):
        kw2 = dict(kw, attn_mask=m)
        return float((attn.scaled_dot_product_attention(q, k, v, **kw2) * g).sum())

    grads = attn.sdpa_backward(g, q, k, v, **kw)
    assert all(x.dtype == np.float64 for x in grads)
    h = 1e-6
    checked = 0
    for which, x in enumerate((q, k, v, m)):
        for idx in np.ndindex(x.shape):
            if not np.isfinite(x[idx]):
                continue
            args = [q, k, v, m]
            plus, minus = x.copy(), x.copy()
            plus[idx] += h
            minus[idx] -= h
            args[which] = plus
            lp = loss(*args)
            args[which] = minus
            lm = loss(*args)
            num = (lp - lm) / (2 * h)
            assert abs(grads[which][idx] - num) < 1e-7, (which, idx)
            checked += 1
    assert checked == q.size + k.size + v.size + m.size - 1
    if not SANITIZED:
        assert np.abs(grads[3]).max() > 0
