"""softcap=, alibi_slopes=, sinks= and doc_ids= against an independent
NumPy implementation of the formulas (forward and the gradients of query,
key, value and sinks), for the float64 reference and the flash kernel; and
their argument errors."""

import numpy as np
import pytest

import attn


def np_alibi_slopes(H):
    # Press et al. (ICLR 2022), reference code's get_slopes
    def pow2(n):
        start = 2.0 ** (-(2.0 ** -(np.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if np.log2(H).is_integer():
        return np.array(pow2(H))
    n = 2 ** int(np.floor(np.log2(H)))
    return np.array(pow2(n) + pow2(2 * n)[0::2][:H - n])


def np_attention(q, k, v, g, *, scale=None, causal=False, softcap=None,
                 slopes=None, mode="causal", sinks=None, dq_ids=None,
                 dk_ids=None, bottom_right=False):
    """(out, lse, dq, dk, dv, dsinks) of loss = sum(g * out), in float64.
    q (B, H, Lq, D), k/v (B, Hkv, Lk, D)."""
    B, H, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    G = H // Hkv
    kk, vv = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)
    scale = 1 / np.sqrt(D) if scale is None else scale
    x = scale * np.einsum("bhid,bhjd->bhij", q, kk)
    t = None
    if softcap:
        t = np.tanh(x / softcap)
        x = softcap * t
    i = np.arange(Lq)[:, None] + (Lk - Lq if bottom_right else 0)
    j = np.arange(Lk)[None, :]
    vis = np.ones((B, H, Lq, Lk), bool)
    if causal:
        vis &= j <= i
    if dq_ids is not None:
        vis &= dq_ids[:, None, :, None] == dk_ids[:, None, None, :]
    if slopes is not None:
        dist = (i - j).astype(float)
        if mode == "symmetric":
            dist = np.abs(dist)
        x = x - slopes[None, :, None, None] * dist
    x = np.where(vis, x, -np.inf)
    sk = np.full(H, -np.inf) if sinks is None else np.asarray(sinks, float)
    m = np.maximum(x.max(axis=-1), sk[None, :, None])
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(x - m[..., None])
    es = np.exp(sk[None, :, None] - m)
    den = e.sum(-1) + es
    p = np.where(den[..., None] > 0, e / np.where(den > 0, den, 1)[..., None], 0)
    out = p @ vv
    with np.errstate(divide="ignore"):
        lse = np.where(den > 0, m + np.log(np.where(den > 0, den, 1)), -np.inf)
    dp = g @ vv.transpose(0, 1, 3, 2)
    dsum = (p * dp).sum(-1)
    ds = p * (dp - dsum[..., None])
    dsinks = -(np.where(den > 0, es / np.where(den > 0, den, 1), 0) * dsum).sum((0, 2))
    dx = ds * (1 - t ** 2) if softcap else ds
    dq = scale * dx @ kk
    dkf = scale * dx.transpose(0, 1, 3, 2) @ q
    dvf = p.transpose(0, 1, 3, 2) @ g
    dk = dkf.reshape(B, Hkv, G, Lk, D).sum(2)
    dv = dvf.reshape(B, Hkv, G, Lk, -1).sum(2)
    return out, lse, dq, dk, dv, dsinks


def docs(rng, B, L, n):
    cuts = np.sort(rng.choice(np.arange(1, L), size=min(n, L - 1), replace=False)) \
        if L > 1 else []
    ids = np.zeros(L, np.int64)
    for c in cuts:
        ids[c:] += 1
    return np.stack([ids + 3 * b for b in range(B)])


CASES = [
    dict(softcap=2.0),
    dict(alibi=True, causal=True),
    dict(alibi="given", mode="symmetric"),
    dict(sinks=True),
    dict(docs=True, causal=True),
    dict(softcap=1.5, alibi=True, sinks=True, docs=True, causal=True, gqa=True),
    dict(softcap=3.0, sinks=True, Lq=5, Lk=17, docs="pair", bottom_right=True,
         causal=True),
    dict(alibi=True, mode="symmetric", sinks=True, Lq=17, Lk=3, docs="pair"),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("impl", ["ref", "flash"])
def test_against_numpy(rng, case, impl):
    B, H = 2, 4
    Hkv = 2 if case.get("gqa") else H
    Lq, Lk, D = case.get("Lq", 13), case.get("Lk", 13), 8
    q = rng.standard_normal((B, H, Lq, D)) * 1.5
    k = rng.standard_normal((B, Hkv, Lk, D)) * 1.5
    v = rng.standard_normal((B, Hkv, Lk, D))
    g = rng.standard_normal((B, H, Lq, D))
    if impl == "flash":
        q, k, v, g = (a.astype(np.float32) for a in (q, k, v, g))
    kw, ref = {}, {}
    if case.get("softcap"):
        kw["softcap"] = ref["softcap"] = case["softcap"]
    if case.get("alibi"):
        slopes = rng.uniform(0.05, 0.6, H) if case["alibi"] == "given" \
            else np_alibi_slopes(H)
        kw["alibi_slopes"] = slopes if case["alibi"] == "given" else True
        kw["alibi_mode"] = ref["mode"] = case.get("mode", "causal")
        ref["slopes"] = slopes
    if case.get("sinks"):
        kw["sinks"] = ref["sinks"] = rng.standard_normal(H)
    if case.get("docs"):
        dq = docs(rng, B, Lq, 3)
        dk = docs(rng, B, Lk, 3) if case["docs"] == "pair" else dq
        kw["doc_ids"] = (dq, dk) if case["docs"] == "pair" else dq
        ref["dq_ids"], ref["dk_ids"] = dq, dk
    if case.get("causal"):
        kw["is_causal"] = ref["causal"] = True
    if case.get("bottom_right"):
        kw["causal_alignment"] = "bottom-right"
        ref["bottom_right"] = True
    want = np_attention(*(a.astype(np.float64) for a in (q, k, v, g)), **ref)
    out, lse = attn.scaled_dot_product_attention(
        q, k, v, enable_gqa=Hkv != H, return_lse=True, impl=impl, **kw)
    grads = attn.sdpa_backward(g, q, k, v, enable_gqa=Hkv != H, out=out,
                               lse=lse, impl=impl, **kw)
    tol = 1e-10 if impl == "ref" else 2e-4
    np.testing.assert_allclose(out, want[0], atol=tol, rtol=0)
    fin = np.isfinite(want[1])
    assert np.array_equal(fin, np.isfinite(lse))
    # lse is float32 from every kernel
    np.testing.assert_allclose(lse[fin], want[1][fin], atol=max(tol * 10, 1e-6), rtol=1e-6)
    for got, exp in zip(grads[:3], want[2:5]):
        np.testing.assert_allclose(got, exp, atol=tol * 10, rtol=tol * 10)
    if case.get("sinks"):
        assert len(grads) == 4
        np.testing.assert_allclose(grads[3], want[5], atol=tol * 30, rtol=tol * 10)
    else:
        assert len(grads) == 3


def test_alibi_slopes_standard():
    q = np.zeros((1, 12, 4, 2), np.float64)
    v = np.eye(4)[None, None].repeat(12, 1)
    k = np.zeros((1, 12, 4, 2))
    v = np.concatenate([v, v], -1)[..., :4]
    _, w = attn.scaled_dot_product_attention(q, k, v, alibi_slopes=True,
                                             alibi_mode="symmetric", impl="ref",
                                             return_weights=True)
    # zero scores: weights of row 0 are softmax(-slope * j)
    s = np_alibi_slopes(12)
    for h in range(12):
        e = np.exp(-s[h] * np.arange(4))
        np.testing.assert_allclose(w[0, h, 0], e / e.sum(), atol=1e-12)


@pytest.mark.parametrize("kw, msg", [
    (dict(softcap=-1.0), "softcap is -1.0"),
    (dict(softcap=0), "softcap is 0"),
    (dict(sinks=np.zeros(3)), "sinks has shape (3) but the attention has 2 heads"),
    (dict(alibi_slopes=np.ones(5)), "alibi_slopes has shape (5)"),
    (dict(alibi_slopes=True, alibi_mode="left"), "alibi_mode is 'left'"),
    (dict(doc_ids=np.array([0, 1, 1, 0])), "doc_ids decreases in entry 0: position 3"),
    (dict(doc_ids=np.zeros(3, np.int64)), "doc_ids has shape (3)"),
    (dict(doc_ids=np.zeros(4)), "doc_ids must hold integers"),
])
def test_errors(kw, msg):
    q = np.ones((1, 2, 4, 3), np.float32)
    with pytest.raises(attn.AttnError) as e:
        attn.scaled_dot_product_attention(q, q, q, **kw)
    assert msg in str(e.value)
