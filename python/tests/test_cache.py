"""attn.KVCache and attn.sdpa_cached against a NumPy oracle on the stored
values: dtypes, grouped heads, ragged lengths, windows, chunked prefill,
truncate / reorder, and the errors."""

import numpy as np
import pytest

import attn
from conftest import SANITIZED

DTYPES = ("float32", "float16", "bfloat16", "q8")


def oracle(q, cache, causal=True, window=None, query_lengths=None):
    """float64 attention over cache.read() (the stored values)."""
    B, H, Lq, _ = q.shape
    G = H // cache.kv_heads
    out = np.zeros((B, H, Lq, cache.value_dim))
    lens = cache.lengths
    for b in range(B):
        k, v = cache.read(b)
        lk = int(lens[b])
        lq = Lq if query_lengths is None else int(query_lengths[b])
        for h in range(H):
            for i in range(lq):
                c = i + lk - lq
                j = np.arange(lk)
                vis = np.ones(lk, bool)
                if causal:
                    vis &= j <= c
                if window is not None:
                    if window[0] is not None:
                        vis &= j >= c - window[0]
                    if window[1] is not None:
                        vis &= j <= c + window[1]
                if not vis.any():
                    continue
                s = (k[h // G].astype(np.float64) @ q[b, h, i]) / np.sqrt(q.shape[-1])
                s = np.where(vis, s, -np.inf)
                p = np.exp(s - s.max())
                out[b, h, i] = (p / p.sum()) @ v[h // G]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H,Hkv", [(4, 4), (6, 2)])
def test_against_oracle(rng, dtype, H, Hkv):
    B, L, D = 3, 70 if SANITIZED else 300, 16
    c = attn.KVCache(B, Hkv, L + 4, D, dtype=dtype, value_dim=8)
    k = rng.standard_normal((B, Hkv, L, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, L, 8)).astype(np.float32)
    counts = [L, L // 2, 0]
    c.append(k, v, counts=counts)
    assert c.lengths.tolist() == counts
    q = rng.standard_normal((B, H, 5, D)).astype(np.float32)
    for window in (None, (20, 0)):
        ql = [5, 2, 5]
        out, lse = attn.sdpa_cached(q, c, window=window, query_lengths=ql,
                                    return_lse=True)
        want = oracle(q.astype(np.float64), c, window=window, query_lengths=ql)
        assert np.max(np.abs(out - want)) < 1e-5
        assert np.all(out[2] == 0) and np.all(np.isneginf(lse[2]))
        ref = attn.sdpa_cached(q, c, window=window, query_lengths=ql, impl="ref")
        assert np.max(np.abs(out - ref)) < 1e-5
        one = attn.sdpa_cached(q, c, window=window, query_lengths=ql, threads=1)
        assert np.array_equal(one, out)  # bitwise on any thread count


def test_stored_values(rng):
    x = rng.standard_normal((1, 2, 3, 40)).astype(np.float32)
    for dtype, tol in (("float32", 0), ("float16", 1e-3), ("bfloat16", 8e-3)):
        c = attn.KVCache(1, 2, 3, 40, dtype=dtype)
        c.append(x, x)
        k, v = c.read(0)
        assert np.max(np.abs(k - x[0]) / np.maximum(np.abs(x[0]), 1e-3)) <= tol
    c = attn.KVCache(1, 2, 3, 40, dtype="q8")
    c.append(x, x)
    k, _ = c.read(0)
    # q8: within max|x| / 254 of its block of 32 (the last block holds 8)
    for blk in (slice(0, 32), slice(32, 40)):
        amax = np.max(np.abs(x[0][..., blk]), axis=-1, keepdims=True)
        assert np.all(np.abs(k[..., blk] - x[0][..., blk]) <= amax / 254 * 1.0001)


def test_chunked_prefill_equals_one_pass(rng):
    B, Hkv, H, L, D = 2, 2, 4, 90, 8
    k = rng.standard_normal((B, Hkv, L, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, L, D)).astype(np.float32)
    q = rng.standard_normal((B, H, L, D)).astype(np.float32)
    full = attn.scaled_dot_product_attention(q, np.repeat(k, 2, axis=1),
                                             np.repeat(v, 2, axis=1),
                                             is_causal=True, impl="ref")
    c = attn.KVCache(B, Hkv, L, D)
    outs = []
    for t0 in range(0, L, 32):
        c.append(k[:, :, t0:t0 + 32], v[:, :, t0:t0 + 32])
        outs.append(attn.scaled_dot_product_attention(q[:, :, t0:t0 + 32],
                                                      cache=c, is_causal=True))
    assert np.max(np.abs(np.concatenate(outs, axis=2) - full)) < 1e-5


def test_truncate_and_reorder(rng):
    B, D = 3, 8
    k = rng.standard_normal((B, 1, 10, D)).astype(np.float32)
    c = attn.KVCache(B, 1, 12, D, dtype="bfloat16")
    c.append(k, k)
    before = [c.read(b)[0].copy() for b in range(B)]
    c.truncate([10, 4, 0])
    assert c.lengths.tolist() == [10, 4, 0]
    assert np.array_equal(c.read(1)[0], before[1][:, :4])
    c.reorder([1, 1, 0])
    assert c.lengths.tolist() == [4, 4, 10]
    assert np.array_equal(c.read(0)[0], before[1][:, :4])
    assert np.array_equal(c.read(1)[0], before[1][:, :4])
    assert np.array_equal(c.read(2)[0], before[0])
    c.append(k[:, :, :2], k[:, :, :2])  # entries 0 and 1 must not alias
    k0, k1 = c.read(0)[0], c.read(1)[0]
    assert np.array_equal(k0[:, :4], before[1][:, :4])
    assert np.array_equal(k1[:, :4], before[1][:, :4])
    assert np.array_equal(k0[:, 4:], before[0][:, :2])
    assert np.array_equal(k1[:, 4:], before[1][:, :2])
    c.truncate(3)
    assert c.lengths.tolist() == [3, 3, 3]
    c.clear()
    assert c.lengths.tolist() == [0, 0, 0]


def raises(status, words, fn, *a, **kw):
    with pytest.raises(attn.AttnError) as e:
        fn(*a, **kw)
    assert e.value.status == status, str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_errors(rng):
    c = attn.KVCache(2, 2, 4, 8, dtype="q8")
    k = np.zeros((2, 2, 3, 8), np.float32)
    c.append(k, k)
    raises(attn.ATTN_E_SHAPE, ["overflow", "holds 3 of 4"], c.append, k, k)
    assert c.lengths.tolist() == [3, 3]
    raises(attn.ATTN_E_SHAPE, ["counts[1] = -1"], c.append, k, k, counts=[0, -1])
    raises(attn.ATTN_E_SHAPE, ["(2, 2, T, 8)"], c.append,
           np.zeros((2, 3, 1, 8), np.float32), np.zeros((2, 3, 1, 8), np.float32))
    raises(attn.ATTN_E_DTYPE, ["int32"], c.append, k.astype(np.int32), k)
    bad = k[:, :, :1].copy()
    bad[1, 0, 0, 3] = np.nan
    raises(attn.ATTN_E_NONFINITE, ["k[1, 0, 0, 3]"], c.append, bad, bad)
    raises(attn.ATTN_E_SHAPE, ["index[0] = 2"], c.reorder, [2, 0])
    raises(attn.ATTN_E_SHAPE, ["index[1] = -1"], c.reorder, [0, -1])
    raises(attn.ATTN_E_SHAPE, ["cannot grow"], c.truncate, [4, 0])
    raises(attn.ATTN_E_DTYPE, ["'int8'"], attn.KVCache, 1, 1, 1, 1, dtype="int8")
    raises(attn.ATTN_E_INVALID, ["capacity is 0"], attn.KVCache, 1, 1, 0, 1)
    q = np.zeros((2, 3, 1, 8), np.float32)
    raises(attn.ATTN_E_SHAPE, ["3 heads"], attn.sdpa_cached, q, c)
    raises(attn.ATTN_E_SHAPE, ["4 features"], attn.sdpa_cached,
           np.zeros((2, 2, 1, 4), np.float32), c)
    raises(attn.ATTN_E_INVALID, ["key cannot be given"],
           attn.scaled_dot_product_attention, q, q, cache=c)
    raises(attn.ATTN_E_INVALID, ["an attn.KVCache"], attn.sdpa_cached, q, "x")
    c.close()
    raises(attn.ATTN_E_INVALID, ["closed"], attn.sdpa_cached,
           np.zeros((2, 2, 1, 8), np.float32), c)
