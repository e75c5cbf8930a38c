"""scaled_dot_product_attention(..., rope=...) and sdpa_backward with rope=
(attn_sdpa_opts.rope): equal to attn.rope applied to query and key by hand
before the call, for both styles, theta, a partial rotary dimension, a
scaling, explicit positions (per batch entry too), the bottom-right
alignment's default positions (queries at the end of the keys), grouped
heads; the gradients through the rotation; bad arguments refused."""
import numpy as np
import pytest

import attn


def _qkv(rng, B=2, H=4, Hkv=2, Lq=5, Lk=7, D=16):
    q = rng.standard_normal((B, H, Lq, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Lk, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Lk, D)).astype(np.float32)
    return q, k, v


CASES = [
    dict(style="neox"),
    dict(style="interleaved", theta=500.0),
    dict(style="neox", rotary_dim=8),
    dict(style="interleaved", rotary_dim=4, theta=100000.0),
    dict(style="neox", scaling={"rope_type": "linear", "factor": 2.0}),
    dict(style="neox", theta=500000.0,
         scaling={"rope_type": "llama3", "factor": 8.0,
                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8}),
]


def _rot(x, pos, r):
    kw = {k: r[k] for k in ("style", "theta", "rotary_dim", "scaling")
          if k in r}
    return attn.rope(x, positions=pos, **kw)


@pytest.mark.parametrize("r", CASES)
def test_rope_equals_rotating_by_hand(rng, r):
    q, k, v = _qkv(rng)
    Lq, Lk = q.shape[2], k.shape[2]
    qpos = np.array([[3, 9, 1, 0, 12], [2, 2, 5, 7, 11]])
    kpos = np.arange(4, 4 + Lk)
    for rope, qp, kp, align in (
            (dict(r, q_positions=qpos, k_positions=kpos), qpos, kpos,
             "top-left"),
            # default positions: keys at j, queries at i + Lk - Lq
            (r, np.arange(Lk - Lq, Lk), np.arange(Lk), "bottom-right"),
            (r, np.arange(Lq), np.arange(Lk), "top-left")):
        got = attn.scaled_dot_product_attention(
            q, k, v, is_causal=True, causal_alignment=align, enable_gqa=True,
            rope=rope, impl="ref")
        qr = _rot(q.astype(np.float64), qp, r)
        kr = _rot(k.astype(np.float64), kp, r)
        want = attn.scaled_dot_product_attention(
            qr, kr, v.astype(np.float64), is_causal=True,
            causal_alignment=align, enable_gqa=True, impl="ref")
        assert np.abs(got - want).max() < 1e-5
        fast = attn.scaled_dot_product_attention(
            q, k, v, is_causal=True, causal_alignment=align, enable_gqa=True,
            rope=rope)
        assert np.abs(fast - want).max() < 1e-4


@pytest.mark.parametrize("r", CASES[:3])
def test_rope_backward(rng, r):
    q, k, v = _qkv(rng)
    g = rng.standard_normal((2, 4, 5, 16)).astype(np.float32)
    dq, dk, dv = attn.sdpa_backward(g, q, k, v, is_causal=True,
                                    causal_alignment="bottom-right",
                                    enable_gqa=True, rope=r)
    # by hand: rotate, differentiate, rotate the gradients back
    Lq, Lk = 5, 7
    qp, kp = np.arange(Lk - Lq, Lk), np.arange(Lk)
    qr, kr = _rot(q, qp, r), _rot(k, kp, r)
    hq, hk, hv = attn.sdpa_backward(g, qr, kr, v, is_causal=True,
                                    causal_alignment="bottom-right",
                                    enable_gqa=True)
    kw = {x: r[x] for x in ("style", "theta", "rotary_dim") if x in r}
    assert np.abs(dq - attn.rope_backward(hq, positions=qp, **kw)).max() < 1e-4
    assert np.abs(dk - attn.rope_backward(hk, positions=kp, **kw)).max() < 1e-4
    assert np.abs(dv - hv).max() < 1e-5


def test_rope_refusals(rng):
    q, k, v = _qkv(rng)
    sdpa = attn.scaled_dot_product_attention
    for bad in ("halves", 3, {"stlye": "neox"}, {"rotary_dim": 5},
                {"theta": -1.0}, {"q_positions": np.arange(3)},
                {"k_positions": np.full(7, 0.5)},
                {"scaling": {"rope_type": "yarn", "factor": 2.0}}):
        with pytest.raises(attn.AttnError):
            sdpa(q, k, v, enable_gqa=True, rope=bad)
    cache = attn.KVCache(batch=2, kv_heads=2, capacity=8, head_dim=16)
    with pytest.raises(attn.AttnError, match="rope"):
        sdpa(q, cache=cache, rope="neox")
