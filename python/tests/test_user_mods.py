"""score_mod= and mask_mod= (FlexAttention-style Python callables) against
an independent NumPy implementation (npref with the bias and keep mask
written out here, not through the callables), forward and backward, for the
float64 reference and the flash kernel; the block classes of block_mask;
and the errors (a score_mod that is not additive, NaN, bad returns)."""

import numpy as np
import pytest

import attn
import npref

SHAPES = [(1, 1), (3, 3), (17, 5), (5, 17), (33, 33)]


def qkv(rng, B, H, Hkv, Lq, Lk, D=4, f64=True):
    dt = np.float64 if f64 else np.float32
    q = rng.normal(size=(B, H, Lq, D)).astype(dt)
    k = rng.normal(size=(B, Hkv, Lk, D)).astype(dt)
    v = rng.normal(size=(B, Hkv, Lk, D)).astype(dt)
    g = rng.normal(size=(B, H, Lq, D)).astype(dt)
    return q, k, v, g


def tol(impl):
    return 1e-10 if impl == "ref" else 2e-5


@pytest.mark.parametrize("impl", ["ref", "flash"])
@pytest.mark.parametrize("Lq,Lk", SHAPES)
def test_alibi_score_mod(rng, impl, Lq, Lk):
    B, H = 2, 4
    q, k, v, g = qkv(rng, B, H, 2, Lq, Lk, f64=impl == "ref")
    slopes = np.array([0.5, 0.25, 0.125, 0.0625])

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * np.abs(q_idx - kv_idx)

    # the bias written out, independently of the callable
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    bias = -slopes[None, :, None, None] * np.abs(i - j)[None, None]
    want, _, want_lse, _ = npref.sdpa(q, k, v, mask=bias, is_causal=True)
    out, lse = attn.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True, score_mod=alibi, impl=impl,
        return_lse=True)
    assert np.abs(out - want).max() <= tol(impl) * np.sqrt(Lk)
    fin = np.isfinite(want_lse)
    assert np.array_equal(fin, np.isfinite(lse))
    assert np.abs(lse[fin] - want_lse[fin]).max() <= 1e-4
    # the built-in gives the same
    built = attn.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True, alibi_slopes=slopes,
        alibi_mode="symmetric", impl=impl)
    assert np.abs(out - built).max() <= tol(impl) * np.sqrt(Lk)
    dq, dk, dv, _ = npref.sdpa_grads(q, k, v, g, mask=bias, is_causal=True)
    got = attn.sdpa_backward(g, q, k, v, is_causal=True, enable_gqa=True,
                             score_mod=alibi, impl=impl)
    assert len(got) == 3  # no attn_mask: no dbias
    for a, b in zip(got, (dq, dk, dv)):
        assert np.abs(a - b).max() <= 5 * tol(impl) * np.sqrt(Lk) * (1 + np.abs(b).max())


@pytest.mark.parametrize("impl", ["ref", "flash"])
@pytest.mark.parametrize("Lq,Lk", SHAPES)
def test_mask_mod(rng, impl, Lq, Lk):
    B, H = 2, 2
    q, k, v, g = qkv(rng, B, H, H, Lq, Lk, f64=impl == "ref")

    def prefix_lm(b, h, q_idx, kv_idx):  # a prefix of 2 + b keys, then causal
        return (kv_idx <= q_idx) | (kv_idx < 2 + b) & (h == 0)

    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    keep = np.zeros((B, H, Lq, Lk), bool)
    for b in range(B):
        keep[b, :] = j <= i
        keep[b, 0] |= j < 2 + b
    want, _, want_lse, _ = npref.sdpa(q, k, v, mask=keep)
    out, lse = attn.scaled_dot_product_attention(
        q, k, v, mask_mod=prefix_lm, impl=impl, return_lse=True)
    assert np.abs(out - want).max() <= tol(impl) * np.sqrt(Lk)
    assert np.array_equal(np.isinf(lse), np.isinf(want_lse))
    dq, dk, dv, _ = npref.sdpa_grads(q, k, v, g, mask=keep)
    got = attn.sdpa_backward(g, q, k, v, mask_mod=prefix_lm, impl=impl)
    for a, b in zip(got, (dq, dk, dv)):
        assert np.abs(a - b).max() <= 5 * tol(impl) * np.sqrt(Lk) * (1 + np.abs(b).max())


@pytest.mark.parametrize("impl", ["ref", "flash"])
def test_with_attn_mask(rng, impl):
    """A bool attn_mask ANDs with mask_mod; a float one adds to score_mod's
    bias, and dbias comes back in attn_mask's shape."""
    B, H, Lq, Lk = 2, 3, 9, 11
    q, k, v, g = qkv(rng, B, H, H, Lq, Lk, f64=impl == "ref")
    pad = np.ones((B, 1, 1, Lk), bool)
    pad[1, ..., 7:] = False

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + 1

    keep = pad & (np.arange(Lk)[None, :] <= np.arange(Lq)[:, None] + 1)
    want, _, _, _ = npref.sdpa(q, k, v, mask=keep)
    out = attn.scaled_dot_product_attention(q, k, v, attn_mask=pad,
                                            mask_mod=causal, impl=impl)
    assert np.abs(out - want).max() <= tol(impl) * 4
    fm = rng.normal(size=(1, H, 1, Lk))

    def rel(score, b, h, q_idx, kv_idx):
        return score + 0.1 * (kv_idx - q_idx) * (h + 1)

    bias = fm + 0.1 * (np.arange(Lk)[None, :] - np.arange(Lq)[:, None]) * \
        (np.arange(H) + 1)[None, :, None, None]
    dq, dk, dv, dS = npref.sdpa_grads(q, k, v, g, mask=bias)
    got = attn.sdpa_backward(g, q, k, v, attn_mask=fm, score_mod=rel, impl=impl)
    assert got[3].shape == fm.shape
    for a, b in zip(got, (dq, dk, dv, dS.sum(axis=(0, 2), keepdims=True))):
        assert np.abs(a - b).max() <= 5 * tol(impl) * 4 * (1 + np.abs(b).max())


def test_hide_all(rng):
    q, k, v, g = qkv(rng, 1, 2, 2, 5, 4)
    for impl in ("ref", "flash"):
        out, lse = attn.scaled_dot_product_attention(
            q, k, v, mask_mod=lambda b, h, qi, ki: np.zeros((), bool),
            impl=impl, return_lse=True)
        assert not np.isnan(out).any() and np.all(out == 0)
        assert np.all(lse == -np.inf)
        grads = attn.sdpa_backward(g, q, k, v, impl=impl,
                                   mask_mod=lambda b, h, qi, ki: qi < 0)
        assert all(np.all(x == 0) for x in grads)


def test_block_mask():
    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx

    c = attn.block_mask(causal, 1, 2, 37, 20, block_q=8, block_k=5)
    assert c.shape == (1, 2, 5, 4) and c.dtype == np.uint8
    i, j = np.arange(37)[:, None], np.arange(20)[None, :]
    keep = j <= i
    for bi in range(5):
        for bj in range(4):
            blk = keep[bi * 8:(bi + 1) * 8, bj * 5:(bj + 1) * 5]
            want = (attn.BLOCK_EMPTY if not blk.any() else
                    attn.BLOCK_FULL if blk.all() else attn.BLOCK_PARTIAL)
            assert c[0, 1, bi, bj] == want
    with pytest.raises(attn.AttnError):
        attn.block_mask(causal, 1, 1, 0, 4)


def test_errors(rng):
    q, k, v, g = qkv(rng, 1, 2, 2, 4, 6)
    with pytest.raises(attn.AttnError, match="not additive.*softcap="):
        attn.scaled_dot_product_attention(
            q, k, v, score_mod=lambda s, b, h, qi, ki: 2 * np.tanh(s / 2))
    with pytest.raises(attn.AttnError, match="not additive"):
        attn.sdpa_backward(g, q, k, v, score_mod=lambda s, b, h, qi, ki: s * 2)
    with pytest.raises(attn.AttnError, match="NaN"):
        attn.scaled_dot_product_attention(
            q, k, v, score_mod=lambda s, b, h, qi, ki: s + np.where(
                (qi == 1) & (ki == 2), np.nan, 0.0))
    with pytest.raises(attn.AttnError, match="callable"):
        attn.scaled_dot_product_attention(q, k, v, mask_mod=3)
    with pytest.raises(attn.AttnError, match="does not broadcast"):
        attn.scaled_dot_product_attention(
            q, k, v, mask_mod=lambda b, h, qi, ki: np.ones((3, 3), bool))
    with pytest.raises(attn.AttnError, match="bool"):
        attn.scaled_dot_product_attention(
            q, k, v, mask_mod=lambda b, h, qi, ki: qi * 0.5)
    # -inf from score_mod masks
    out = attn.scaled_dot_product_attention(
        q, k, v, score_mod=lambda s, b, h, qi, ki: s + np.where(
            ki > qi, -np.inf, 0.0))
    want = attn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert np.abs(out - want).max() <= 1e-6
    cache = attn.KVCache(batch=1, kv_heads=2, capacity=8, head_dim=4)
    with pytest.raises(attn.AttnError, match="mask_mod"):
        attn.scaled_dot_product_attention(
            q, cache=cache, mask_mod=lambda b, h, qi, ki: qi >= 0)
