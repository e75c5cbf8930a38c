"""cu_seqlens= (FlashAttention varlen starts) in attn.sdpa and
attn.sdpa_backward, and attn.doc_ids_from_cu_seqlens: the ids against
np.repeat, attention against NumPy (test_score_mods.np_attention with the
ids) and against each document run alone, gradients, Lq != Lk with a pair
of starts; the errors."""

import numpy as np
import pytest

import attn
from test_score_mods import np_attention


def test_ids():
    cu = [0, 2, 2, 7, 8]
    want = np.repeat(np.arange(4), np.diff(cu))
    assert np.array_equal(attn.doc_ids_from_cu_seqlens(cu), want)
    assert np.array_equal(attn.doc_ids_from_cu_seqlens(np.array(cu, np.int32), 8), want)
    assert attn.doc_ids_from_cu_seqlens([0, 5]).tolist() == [0] * 5


@pytest.mark.parametrize("impl", ["ref", "flash"])
def test_against_numpy_and_one_by_one(rng, impl):
    B, H, D = 2, 3, 6
    cu = np.array([0, 1, 18, 18, 29, 37])
    L = int(cu[-1])
    q, k, v, g = (rng.standard_normal((B, H, L, D)) for _ in range(4))
    sinks = rng.standard_normal(H)
    ids = np.repeat(np.arange(len(cu) - 1), np.diff(cu))
    idb = np.stack([ids] * B)
    out, lse = attn.scaled_dot_product_attention(q, k, v, is_causal=True, cu_seqlens=cu,
                                                 sinks=sinks, softcap=2.5, impl=impl,
                                                 return_lse=True)
    want = np_attention(q, k, v, g, causal=True, softcap=2.5, sinks=sinks,
                        dq_ids=idb, dk_ids=idb)
    tol = 1e-9 if impl == "ref" else 2e-5
    assert np.abs(out - want[0]).max() < tol and np.abs(lse - want[1]).max() < 1e-4
    grads = attn.sdpa_backward(g, q, k, v, is_causal=True, cu_seqlens=cu, sinks=sinks,
                               softcap=2.5, impl=impl)
    for got, w in zip(grads, want[2:]):
        assert np.abs(got - w).max() < (1e-8 if impl == "ref" else 1e-4) * (1 + np.abs(w).max())
    # each document alone (no sinks: varlen attention is that)
    out = attn.scaled_dot_product_attention(q, k, v, is_causal=True, cu_seqlens=cu,
                                            impl=impl)
    for a, e in zip(cu[:-1], cu[1:]):
        if e > a:
            alone = attn.scaled_dot_product_attention(q[:, :, a:e], k[:, :, a:e],
                                                      v[:, :, a:e], is_causal=True,
                                                      impl=impl)
            assert np.abs(out[:, :, a:e] - alone).max() < tol


def test_pair_for_cross_attention(rng):
    q = rng.standard_normal((1, 2, 11, 4))
    k = rng.standard_normal((1, 2, 7, 4))
    cq, ck = [0, 3, 5, 11], [0, 2, 4, 7]
    out = attn.scaled_dot_product_attention(q, k, k, cu_seqlens=(cq, ck))
    want = attn.scaled_dot_product_attention(
        q, k, k, doc_ids=(attn.doc_ids_from_cu_seqlens(cq),
                          attn.doc_ids_from_cu_seqlens(ck)))
    assert np.array_equal(out, want)


@pytest.mark.parametrize("cu, kw, msg", [
    ([1, 5, 8], {}, r"cu_seqlens\[0\] is 1; the first document starts at 0"),
    ([0, 5, 3, 8], {}, r"cu_seqlens decreases: cu\[2\] = 3 after cu\[1\] = 5"),
    ([0, 3, 7], {}, r"ends at cu\[2\] = 7 but the sequence has 8 positions"),
    ([0], {}, "at least one document"),
    ([[0, 8]], {}, "cu_seqlens has shape"),
    ([0.0, 8.0], {}, "must hold integers"),
    ([0, 8], {"doc_ids": np.zeros(8, np.int64)}, "pass one of them"),
])
def test_errors(rng, cu, kw, msg):
    q = rng.standard_normal((1, 1, 8, 4))
    with pytest.raises(attn.AttnError, match=msg):
        attn.scaled_dot_product_attention(q, q, q, cu_seqlens=cu, **kw)
    with pytest.raises(attn.AttnError, match=msg):
        attn.sdpa_backward(q, q, q, q, cu_seqlens=cu, **kw)


def test_lq_ne_lk_needs_a_pair(rng):
    q, k = rng.standard_normal((1, 1, 8, 4)), rng.standard_normal((1, 1, 5, 4))
    with pytest.raises(attn.AttnError, match="pass a pair"):
        attn.scaled_dot_product_attention(q, k, k, cu_seqlens=[0, 8])
