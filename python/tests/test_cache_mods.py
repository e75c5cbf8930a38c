"""attn.sdpa_cached with the score modifiers the decode kernel serves
(softcap=, alibi_slopes= / alibi_mode=, sinks=) and documents over the
cache (KVCache.append(..., doc_ids=), doc_ids= of the queries) against
the NumPy formulas of test_score_mods.np_attention on the stored keys:
ragged lengths, several documents per entry, a chunked prefill, odd
sizes, q8 storage; and the errors."""

import numpy as np
import pytest

import attn
from test_score_mods import np_alibi_slopes, np_attention


def per_entry(q, cache, qids=None, **kw):
    """np_attention entry by entry over cache.read() (ragged lengths);
    the queries are the last Lq positions (bottom-right)."""
    B, H, Lq, _ = q.shape
    out = np.zeros((B, H, Lq, cache.value_dim))
    lse = np.zeros((B, H, Lq))
    for b in range(B):
        k, v = cache.read(b)
        dk = None
        if qids is not None:
            dk = cache.doc_ids(b)[None] if k.shape[1] else np.zeros((1, 0), np.int64)
        o, l, *_ = np_attention(q[b:b + 1].astype(np.float64), k[None].astype(np.float64),
                                v[None].astype(np.float64), np.zeros((1, H, Lq, cache.value_dim)),
                                causal=True, bottom_right=True,
                                dq_ids=None if qids is None else qids[b:b + 1],
                                dk_ids=dk, **kw)
        out[b], lse[b] = o[0], l[0]
    return out, lse


def ragged_docs(rng, lengths, every):
    """Ids for each entry's new rows: a cut about every `every` rows."""
    T = max(lengths)
    ids = np.zeros((len(lengths), T), np.int64)
    for b, n in enumerate(lengths):
        cut = np.cumsum(rng.random(T) < 1.0 / every)
        ids[b] = 4 * b + cut
    return ids


@pytest.mark.parametrize("dtype", ["float32", "q8"])
@pytest.mark.parametrize("impl", ["auto", "ref"])
def test_prefill_decode_with_modifiers(rng, dtype, impl):
    B, Hkv, H, D, Dv, cap = 3, 1, 3, 7, 5, 300
    cache = attn.KVCache(batch=B, kv_heads=Hkv, capacity=cap, head_dim=D,
                         value_dim=Dv, dtype=dtype)
    slopes = np.array([0.3, 0.07, 0.5])
    sinks = rng.standard_normal(H)
    mods = [dict(), dict(softcap=1.3), dict(alibi_slopes=slopes, alibi_mode="symmetric"),
            dict(alibi_slopes=True), dict(sinks=sinks),
            dict(softcap=2.0, alibi_slopes=slopes, sinks=sinks)]
    tol = 2e-5 if impl == "auto" else 1e-6
    # a packed prompt in two ragged chunks, then a decode step
    for T, counts in ((130, [130, 17, 1]), (129, [129, 0, 40]), (1, [1, 1, 1])):
        k = rng.standard_normal((B, Hkv, T, D)).astype(np.float32)
        v = rng.standard_normal((B, Hkv, T, Dv)).astype(np.float32)
        before = cache.lengths
        if T > 1:
            ids = ragged_docs(rng, counts, 37)
            last = [cache.doc_ids(b)[-1] if before[b] else 0 for b in range(B)]
            ids = ids + np.array(last)[:, None]
            cache.append(k, v, counts=counts, doc_ids=ids)
        else:
            cache.append(k, v, counts=counts)  # continues each document
        lens = cache.lengths
        assert list(lens - before) == counts
        # queries: the new rows of every entry (Lq = min count, the rest
        # covered by the whole-entry oracle); ids those of their positions
        Lq = max(min(counts), 1)
        q = (2 * rng.standard_normal((B, H, Lq, D))).astype(np.float32)
        qids = np.stack([cache.doc_ids(b)[-Lq:] if lens[b] >= Lq else
                         np.zeros(Lq, np.int64) for b in range(B)])
        for kw in mods:
            out, lse = attn.sdpa_cached(q, cache, doc_ids=qids, impl=impl,
                                        return_lse=True, **kw)
            npkw = dict(kw)
            if npkw.get("alibi_slopes") is True:
                npkw["alibi_slopes"] = np_alibi_slopes(H)
            if "alibi_slopes" in npkw:
                npkw["slopes"] = npkw.pop("alibi_slopes")
                npkw["mode"] = npkw.pop("alibi_mode", "causal")
            want, wl = per_entry(q, cache, qids, **npkw)
            assert np.abs(out - want).max() < tol, (T, kw)
            fin = np.isfinite(wl)
            assert np.array_equal(fin, np.isfinite(lse))
            assert np.abs(lse[fin] - wl[fin]).max() < 1e-4, (T, kw)
            # the same call through scaled_dot_product_attention(cache=)
            o2 = attn.scaled_dot_product_attention(q, cache=cache, is_causal=True,
                                                   doc_ids=qids, impl=impl, **kw)
            assert np.array_equal(o2, out)
    cache.close()


def test_document_without_keys_and_sink(rng):
    cache = attn.KVCache(batch=1, kv_heads=1, capacity=9, head_dim=4)
    k = rng.standard_normal((1, 1, 9, 4)).astype(np.float32)
    cache.append(k, k, doc_ids=[0, 0, 0, 2, 2, 2, 2, 4, 4])
    q = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    ids = np.array([0, 1, 2, 3, 4])
    out, lse = attn.sdpa_cached(q, cache, is_causal=False, doc_ids=ids,
                                return_lse=True)
    assert np.all(out[0, :, [1, 3]] == 0) and np.all(np.isneginf(lse[0, :, [1, 3]]))
    assert np.all(np.isfinite(lse[0, :, [0, 2, 4]]))
    out, lse = attn.sdpa_cached(q, cache, is_causal=False, doc_ids=ids,
                                sinks=[0.5, -1.0], return_lse=True)
    assert np.allclose(lse[0, :, 1], [0.5, -1.0]) and np.all(out[0, :, 1] == 0)
    # against the flash kernel with doc_q / doc_k on the same keys
    want = attn.scaled_dot_product_attention(
        q, k, k, doc_ids=(ids, np.array([0, 0, 0, 2, 2, 2, 2, 4, 4])),
        sinks=[0.5, -1.0], enable_gqa=True)
    assert np.abs(out - want).max() < 1e-5


def test_doc_ids_follow_the_cache(rng):
    cache = attn.KVCache(batch=2, kv_heads=1, capacity=8, head_dim=4)
    k = rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
    with pytest.raises(attn.AttnError, match="holds no document ids"):
        cache.doc_ids(0)
    cache.append(k, k)  # before any ids: document 0
    cache.append(k, k, doc_ids=[[0, 1, 1], [3, 3, 5]])
    assert list(cache.doc_ids(1)) == [0, 0, 0, 3, 3, 5]
    cache.reorder([1, 1])
    assert list(cache.doc_ids(0)) == list(cache.doc_ids(1)) == [0, 0, 0, 3, 3, 5]
    cache.truncate([4, 5])
    assert list(cache.doc_ids(0)) == [0, 0, 0, 3]
    cache.append(k[:, :, :1], k[:, :, :1])  # continues the last document
    assert cache.doc_ids(0)[-1] == 3 and cache.doc_ids(1)[-1] == 3


@pytest.mark.parametrize("call, msg", [
    (lambda c, q, k: c.append(k, k, doc_ids=[[2, 1, 3], [0, 0, 0]]),
     "doc_ids decreases in entry 0"),
    (lambda c, q, k: c.append(k, k, doc_ids=[[0, 0], [0, 0]]), "doc_ids has shape"),
    (lambda c, q, k: c.append(k, k, doc_ids=[[0.5] * 3] * 2), "must hold integers"),
    (lambda c, q, k: attn.sdpa_cached(q, c, doc_ids=[0, 1]), "holds no document ids"),
    (lambda c, q, k: attn.sdpa_cached(q, c, sinks=[1.0]), "sinks has shape"),
    (lambda c, q, k: attn.sdpa_cached(q, c, softcap=-1), "softcap is -1"),
    (lambda c, q, k: attn.sdpa_cached(q, c, alibi_slopes=[1, 2, 3]),
     "alibi_slopes has shape"),
    (lambda c, q, k: attn.sdpa_cached(q, c, doc_ids=[1, 0]), "doc_ids decreases"),
])
def test_errors(rng, call, msg):
    cache = attn.KVCache(batch=2, kv_heads=1, capacity=8, head_dim=4)
    k = rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
    cache.append(k, k)
    q = rng.standard_normal((2, 2, 2, 4)).astype(np.float32)
    with pytest.raises(attn.AttnError, match=msg):
        call(cache, q, k)
    assert list(cache.lengths) == [3, 3]  # unchanged
