"""PyTorch's argument semantics pinned by cases computed by hand, so they hold
without PyTorch installed. With all scores equal (query = 0) the weights are
uniform over the visible keys, so each output is a plain mean of values."""

import math

import numpy as np
import pytest

import attn

IMPLS = ["auto", "ref", "flash"]
sdpa = attn.scaled_dot_product_attention


def zeros_q(Lq, E=1):
    return np.zeros((Lq, E), dtype=np.float32)


def col(*x):
    return np.array(x, dtype=np.float32)[:, None]


@pytest.mark.parametrize("impl", IMPLS)
def test_bool_mask_true_attends(impl):
    q, k, v = zeros_q(2), col(5, -5), col(1, 3)
    m = np.array([[True, False], [True, True]])
    out = sdpa(q, k, v, attn_mask=m, impl=impl)
    np.testing.assert_allclose(out[:, 0], [1.0, 2.0], atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_float_mask_is_added(impl):
    q, k, v = zeros_q(2), col(5, -5), col(1, 3)
    # log 3 on key 1 of row 0: weights (1/4, 3/4), output 2.5
    m = np.array([[0.0, math.log(3.0)], [0.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(sdpa(q, k, v, attn_mask=m, impl=impl)[:, 0],
                               [2.5, 2.0], atol=1e-6)
    # the same 0/1 pattern as a float is added, not used as a keep-mask
    m = np.array([[1.0, 0.0], [1.0, 1.0]], dtype=np.float32)
    e = math.e
    np.testing.assert_allclose(sdpa(q, k, v, attn_mask=m, impl=impl)[:, 0],
                               [(e * 1 + 1 * 3) / (e + 1), 2.0], atol=1e-6)
    # -inf masks exactly
    m = np.array([[0.0, -np.inf], [0.0, 0.0]], dtype=np.float64)
    np.testing.assert_allclose(sdpa(q, k, v, attn_mask=m, impl=impl)[:, 0],
                               [1.0, 2.0], atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_is_causal_lq_shorter_than_lk(impl):
    q, k, v = zeros_q(2), col(0, 0, 0), col(1, 3, 5)
    # top-left (PyTorch): row i sees keys 0..i
    np.testing.assert_allclose(sdpa(q, k, v, is_causal=True, impl=impl)[:, 0],
                               [1.0, 2.0], atol=1e-6)
    # bottom-right: the last query sees every key
    out = sdpa(q, k, v, is_causal=True, causal_alignment="bottom-right", impl=impl)
    np.testing.assert_allclose(out[:, 0], [2.0, 3.0], atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_is_causal_lq_longer_than_lk(impl):
    q, k, v = zeros_q(3), col(0, 0), col(1, 3)
    np.testing.assert_allclose(sdpa(q, k, v, is_causal=True, impl=impl)[:, 0],
                               [1.0, 2.0, 2.0], atol=1e-6)
    out = sdpa(q, k, v, is_causal=True, causal_alignment="bottom-right", impl=impl)
    # row 0 sees no key: 0, not NaN (PyTorch's math path gives NaN)
    np.testing.assert_allclose(out[:, 0], [0.0, 1.0, 2.0], atol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
def test_scale(impl):
    # E = 4: q.k1 = 2, q.k0 = 0; v = (0, 1) so the output is sigmoid(s * 2)
    q = np.array([[1, 0, 0, 0]], dtype=np.float32)
    k = np.array([[0, 0, 0, 0], [2, 0, 0, 0]], dtype=np.float32)
    v = col(0, 1)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    # default 1 / sqrt(E) = 1/2
    assert sdpa(q, k, v, impl=impl)[0, 0] == pytest.approx(sig(1.0), abs=1e-6)
    assert sdpa(q, k, v, scale=2.0, impl=impl)[0, 0] == pytest.approx(sig(4.0), abs=1e-6)
    assert sdpa(q, k, v, scale=1, impl=impl)[0, 0] == pytest.approx(sig(2.0), abs=1e-6)


def test_enable_gqa_groups_consecutive_heads():
    # 4 query heads over 2 key/value heads: heads 0, 1 read kv head 0 and
    # heads 2, 3 read kv head 1 (PyTorch's repeat_interleave)
    q = np.zeros((1, 4, 1, 2), dtype=np.float32)
    k = np.zeros((1, 2, 3, 2), dtype=np.float32)
    v = np.zeros((1, 2, 3, 1), dtype=np.float32)
    v[0, 0] = 1.0
    v[0, 1] = 5.0
    out = sdpa(q, k, v, enable_gqa=True)
    np.testing.assert_allclose(out[0, :, 0, 0], [1, 1, 5, 5])


def test_mask_broadcasting_follows_numpy_rules():
    q = np.zeros((2, 3, 2, 1), dtype=np.float32)  # B=2, H=3, Lq=2
    k = np.zeros((2, 3, 3, 1), dtype=np.float32)
    v = np.broadcast_to(col(1, 3, 5), (2, 3, 3, 1)).copy()
    # (Lk,) masks every row the same way
    out = sdpa(q, k, v, attn_mask=np.array([True, True, False]))
    np.testing.assert_allclose(out, 2.0, atol=1e-6)
    # (B, 1, 1, Lk): a key-padding mask per batch entry
    m = np.array([[True, False, False], [True, True, True]])[:, None, None, :]
    out = sdpa(q, k, v, attn_mask=m)
    np.testing.assert_allclose(out[0], 1.0, atol=1e-6)
    np.testing.assert_allclose(out[1], 3.0, atol=1e-6)


def test_is_causal_combines_with_mask():
    # PyTorch refuses both at once; attn ANDs them
    q, k, v = zeros_q(3), col(0, 0, 0), col(1, 3, 5)
    m = np.array([False, True, True])
    out = sdpa(q, k, v, attn_mask=m, is_causal=True)
    np.testing.assert_allclose(out[:, 0], [0.0, 3.0, 4.0], atol=1e-6)


def test_key_lengths_and_window():
    q, k = np.zeros((2, 3, 1), np.float32), np.zeros((2, 4, 1), np.float32)
    v = np.broadcast_to(col(1, 3, 5, 7), (2, 4, 1)).copy()
    out = sdpa(q, k, v, key_lengths=[1, 3])
    np.testing.assert_allclose(out[0, :, 0], [1, 1, 1], atol=1e-6)
    np.testing.assert_allclose(out[1, :, 0], [3, 3, 3], atol=1e-6)
    # window (1, 0): query i sees keys i-1 and i
    out = sdpa(q, k, v, window=(1, 0))
    np.testing.assert_allclose(out[0, :, 0], [1, 2, 4], atol=1e-6)


def test_return_values():
    q, k, v = zeros_q(2), col(0, 0, 0), col(1, 3, 5)
    out = sdpa(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == (2, 1)
    out, w = sdpa(q, k, v, return_weights=True)
    np.testing.assert_allclose(w, 1 / 3, atol=1e-7)
    out, lse = sdpa(q, k, v, return_lse=True)
    np.testing.assert_allclose(lse, math.log(3.0), atol=1e-6)
    out, w, lse = sdpa(q, k, v, return_weights=True, return_lse=True)
    assert w.shape == (2, 3) and lse.shape == (2,)
