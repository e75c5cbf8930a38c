"""AdditiveAttention, MultiHeadAttention, EncoderLayer and additive_attention
against NumPy implementations written from the formulas (forward), NumPy
gradients (multi-head) and central differences (additive, encoder); save and
load; errors."""

import math

import numpy as np
import pytest

import attn
import npref

TOL = 2e-5


def rnd(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def lin(x, w, b=None):
    y = x.astype(np.float64) @ w.T.astype(np.float64)
    return y if b is None else y + b


def np_mha(p, q, k, v, H, Hkv, **kw):
    """Multi-head attention in float64; returns out and the pieces."""
    B, Lq, E = q.shape
    hd = E // H
    Q = lin(q, p["w_q"], p.get("b_q")).reshape(B, Lq, H, hd).transpose(0, 2, 1, 3)
    K = lin(k, p["w_k"], p.get("b_k")).reshape(B, -1, Hkv, hd).transpose(0, 2, 1, 3)
    V = lin(v, p["w_v"], p.get("b_v")).reshape(B, -1, Hkv, hd).transpose(0, 2, 1, 3)
    O, W, _, _ = npref.sdpa(Q, K, V, **kw)
    merged = O.transpose(0, 2, 1, 3).reshape(B, Lq, E)
    return lin(merged, p["w_o"], p.get("b_o")), W, (Q, K, V, merged)


def np_mha_grads(p, q, k, v, g, H, Hkv, **kw):
    out, W, (Q, K, V, merged) = np_mha(p, q, k, v, H, Hkv, **kw)
    B, Lq, E = q.shape
    hd = E // H
    g = g.astype(np.float64)
    grads = {"w_o": g.reshape(-1, E).T @ merged.reshape(-1, E), "b_o": g.sum((0, 1))}
    dmerged = g @ p["w_o"].astype(np.float64)
    dO = dmerged.reshape(B, Lq, H, hd).transpose(0, 2, 1, 3)
    dQ, dK, dV, _ = npref.sdpa_grads(Q, K, V, dO, **kw)
    dx = {}
    for name, x, d, heads in (("q", q, dQ, H), ("k", k, dK, Hkv), ("v", v, dV, Hkv)):
        d2 = d.transpose(0, 2, 1, 3).reshape(B, -1, heads * hd)
        grads["w_" + name] = d2.reshape(-1, heads * hd).T @ x.reshape(-1, x.shape[-1])
        grads["b_" + name] = d2.sum((0, 1))
        dx[name] = d2 @ p["w_" + name].astype(np.float64)
    return out, grads, dx


@pytest.mark.parametrize("Hkv", [4, 2, 1])
@pytest.mark.parametrize("impl", ["auto", "ref"])
def test_mha_cross_attention(rng, Hkv, impl):
    E, H, B, Lq, Lk = 16, 4, 2, 5, 7
    m = attn.MultiHeadAttention(E, H, num_kv_heads=Hkv, kdim=6, vdim=3, seed=3,
                               batch_first=True)
    p = m.parameters()
    for b in ("b_q", "b_k", "b_v", "b_o"):   # biases start at 0: give them values
        p[b][:] = rnd(rng, *p[b].shape)
    q, k, v = rnd(rng, B, Lq, E), rnd(rng, B, Lk, 6), rnd(rng, B, Lk, 3)
    mask = rng.random((B, 1, 1, Lk)) < 0.8
    mask[:, ..., 0] = True
    kw = dict(is_causal=True, causal_alignment="bottom-right")
    # PyTorch's key_padding_mask: True = not allowed
    out, w = m(q, k, v, key_padding_mask=~mask[:, 0, 0], impl=impl,
               average_attn_weights=False, **kw)
    want, W, _ = np_mha(p, q, k, v, H, Hkv, mask=mask, align="bottom-right",
                        is_causal=True)
    np.testing.assert_allclose(out, want, atol=TOL * 10, rtol=0)
    np.testing.assert_allclose(w, W, atol=TOL, rtol=0)
    g = rnd(rng, B, Lq, E)
    dq, dk, dv = m.backward(g)
    _, grads, dx = np_mha_grads(p, q, k, v, g, H, Hkv, mask=mask,
                                align="bottom-right", is_causal=True)
    for name, val in m.gradients().items():
        np.testing.assert_allclose(val, grads[name], atol=1e-4, rtol=1e-4,
                                   err_msg=name)
    for a, b in ((dq, dx["q"]), (dk, dx["k"]), (dv, dx["v"])):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)
    # backward adds: a second call doubles the gradients
    before = m.grads.copy()
    m.backward(g)
    np.testing.assert_allclose(m.grads, 2 * before, rtol=1e-6, atol=1e-6)
    m.zero_grad()
    assert not m.grads.any()


def test_mha_self_attention_and_weights(rng):
    m = attn.MultiHeadAttention(8, 2, seed=5, batch_first=True)
    x = rnd(rng, 3, 6, 8)
    out, w = m(x, key_lengths=[6, 2, 4])
    want, W, _ = np_mha(m.parameters(), x, x, x, 2, 2, key_lengths=[6, 2, 4])
    np.testing.assert_allclose(out, want, atol=1e-4, rtol=0)
    np.testing.assert_allclose(w, W.mean(axis=1), atol=TOL, rtol=0)
    g = rnd(rng, 3, 6, 8)
    d = m.backward(g)
    # one input, one gradient: summing three copies would triple-count it
    assert isinstance(d, np.ndarray) and d.shape == x.shape
    _, _, dx = np_mha_grads(m.parameters(), x, x, x, g, 2, 2, key_lengths=[6, 2, 4])
    np.testing.assert_allclose(d, dx["q"] + dx["k"] + dx["v"], atol=1e-4, rtol=1e-4)
    # key given, value omitted: value is the key, one gradient for both
    m.zero_grad()
    m(x, x[:, :4])
    dq, dkv = m.backward(g)
    _, _, dx = np_mha_grads(m.parameters(), x, x[:, :4], x[:, :4], g, 2, 2)
    np.testing.assert_allclose(dq, dx["q"], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(dkv, dx["k"] + dx["v"], atol=1e-4, rtol=1e-4)
    # one sequence (L, E)
    one, _ = m(x[1], key_lengths=[2])
    np.testing.assert_allclose(one, out[1], atol=1e-6, rtol=0)


def np_additive(p, q, k, v, bias=True, from_keys=False, mask=None):
    Pq = lin(q, p["w_q"], p["b_q"] if bias else None)
    Pk = lin(k, p["w_k"], p["b_k"] if bias else None)
    S = np.tanh(Pq[:, :, None, :] + Pk[:, None, :, :]) @ p["v"].astype(np.float64).ravel()
    if mask is not None:
        S = np.where(mask, S, -np.inf)
    W = np.exp(S - S.max(-1, keepdims=True))
    W /= W.sum(-1, keepdims=True)
    return W @ (Pk if from_keys else v.astype(np.float64)), W


@pytest.mark.parametrize("from_keys", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_additive(rng, from_keys, bias):
    B, Lq, Lk, Dq, Dk, Dv, A = 2, 4, 6, 5, 3, 2, 7
    layer = attn.AdditiveAttention(Dq, Dk, A, value_dim=None if from_keys else Dv,
                                   bias=bias, context_from_keys=from_keys, seed=2)
    p = layer.parameters()
    if bias:
        p["b_q"][:] = rnd(rng, A)
        p["b_k"][:] = rnd(rng, A)
    q, k = rnd(rng, B, Lq, Dq), rnd(rng, B, Lk, Dk)
    v = None if from_keys else rnd(rng, B, Lk, Dv)
    mask = np.tril(np.ones((Lq, Lk), bool))
    out, w = layer(q, k, v, attn_mask=mask, return_weights=True)
    want, W = np_additive(p, q, k, v, bias, from_keys, mask)
    assert out.shape == (B, Lq, A if from_keys else Dv) == (B, Lq, layer.out_dim)
    np.testing.assert_allclose(out, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(w, W[:, :, :], atol=1e-6, rtol=0)
    # the functional form with the same parameters
    f = attn.additive_attention(q, k, v, w_q=p["w_q"], w_k=p["w_k"], v=p["v"],
                                b_q=p.get("b_q"), b_k=p.get("b_k"), attn_mask=mask)
    np.testing.assert_array_equal(f, out)
    # gradients against central differences of the float64 NumPy version
    g = rnd(rng, *out.shape)
    dq, dk, dv = layer.backward(g)
    loss = lambda pp, qq, kk: (np_additive(pp, qq, kk, v, bias, from_keys,  # noqa
                                           mask)[0] * g).sum()
    h = 1e-5
    p64 = {n: a.astype(np.float64) for n, a in p.items()}
    for name, arr in list(p64.items()) + [("q", q.astype(np.float64)),
                                          ("k", k.astype(np.float64))]:
        got = layer.gradients()[name] if name in p64 else (dq if name == "q" else dk)
        for idx in list(np.ndindex(arr.shape))[::3]:
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += h
            minus[idx] -= h
            args = lambda a: ((dict(p64, **{name: a}), q, k) if name in p64  # noqa
                              else (p64, a, k) if name == "q" else (p64, q, a))
            num = (loss(*args(plus)) - loss(*args(minus))) / (2 * h)
            assert abs(got[idx] - num) < 1e-4 * max(1, abs(num)), (name, idx)
    if not from_keys:
        np.testing.assert_allclose(dv, np.swapaxes(W, 1, 2) @ g, atol=1e-5, rtol=0)


def np_layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_encoder(enc, x, activation="relu", is_causal=False):
    c = enc.config
    p = enc.parameters()
    y = x.astype(np.float64)
    act = {"relu": lambda t: np.maximum(t, 0),
           "gelu": lambda t: 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2)))}
    for i in range(c.num_layers):
        pre = "layers.%d." % i
        mp = {n[len(pre) + 5:]: a for n, a in p.items() if n.startswith(pre + "attn.")}

        def sa(z):
            return np_mha(mp, z, z, z, c.num_heads, c.num_kv_heads or c.num_heads,
                          is_causal=is_causal)[0]

        def ffn(z):
            return lin(act[activation](lin(z, p[pre + "w_1"], p[pre + "b_1"])),
                       p[pre + "w_2"], p[pre + "b_2"])

        ln1 = lambda z: np_layernorm(z, p[pre + "ln1_gamma"], p[pre + "ln1_beta"],  # noqa
                                     c.layer_norm_eps)
        ln2 = lambda z: np_layernorm(z, p[pre + "ln2_gamma"], p[pre + "ln2_beta"],  # noqa
                                     c.layer_norm_eps)
        if c.norm_first:
            y = y + sa(ln1(y))
            y = y + ffn(ln2(y))
        else:
            y = ln1(y + sa(y))
            y = ln2(y + ffn(y))
    if c.final_norm:
        y = np_layernorm(y, p["norm_gamma"], p["norm_beta"], c.layer_norm_eps)
    return y


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_encoder_forward(rng, norm_first, activation):
    enc = attn.EncoderLayer(8, 2, 12, num_layers=2, norm_first=norm_first,
                            final_norm=norm_first, activation=activation, seed=4)
    p = enc.parameters()
    for name, a in p.items():  # break the symmetric init of biases and norms
        if a.ndim == 1:
            a[:] += 0.1 * rnd(rng, *a.shape)
    x = rnd(rng, 2, 5, 8)
    out, w = enc(x, is_causal=True, return_weights=True)
    np.testing.assert_allclose(out, np_encoder(enc, x, activation, is_causal=True),
                               atol=1e-4, rtol=0)
    assert w.shape == (2, 2, 2, 5, 5)
    assert np.allclose(w.sum(-1), 1, atol=1e-5) and (np.triu(w[0, 0, 0], 1) == 0).all()


def test_encoder_backward(rng):
    enc = attn.EncoderLayer(8, 2, 12, num_layers=1, seed=6)
    x = rnd(rng, 2, 4, 8)
    g = rnd(rng, 2, 4, 8)
    enc(x, impl="ref")
    dx = enc.backward(g)
    x64 = x.astype(np.float64)

    def loss_x(xx):
        return (np_encoder(enc, xx) * g).sum()

    h = 1e-4
    for idx in list(np.ndindex(x.shape))[::5]:
        plus, minus = x64.copy(), x64.copy()
        plus[idx] += h
        minus[idx] -= h
        num = (loss_x(plus) - loss_x(minus)) / (2 * h)
        assert abs(dx[idx] - num) < 2e-3 * max(1, abs(num)), idx
    grads = enc.gradients()
    params = enc.parameters()
    for name in ("layers.0.w_1", "layers.0.ln1_gamma", "layers.0.attn.w_q"):
        arr = params[name]
        for idx in list(np.ndindex(arr.shape))[::7]:
            old = float(arr[idx])
            arr[idx] = old + h
            lp = loss_x(x64)
            arr[idx] = old - h
            lm = loss_x(x64)
            arr[idx] = old
            num = (lp - lm) / (2 * h)
            assert abs(grads[name][idx] - num) < 2e-3 * max(1, abs(num)), (name, idx)


def test_additive_encoder(rng):
    enc = attn.EncoderLayer(8, 1, 8, attention="additive", additive_dim=4, seed=1)
    x = rnd(rng, 1, 3, 8)
    out, w = enc(x, return_weights=True)
    assert out.shape == (1, 3, 8) and w.shape == (1, 1, 1, 3, 3)
    assert enc.backward(np.ones_like(x)).shape == x.shape


@pytest.mark.parametrize("cls,args", [
    (attn.AdditiveAttention, (4, 3, 5)),
    (attn.MultiHeadAttention, (8, 2)),
    (attn.EncoderLayer, (8, 2, 16)),
])
def test_save_load(rng, tmp_path, cls, args):
    layer = cls(*args, seed=9)
    layer.params[:] = rnd(rng, layer.params.size)  # no zero biases to hide in
    path = tmp_path / "layer.attn"
    layer.save(path)
    back = cls.load(path)
    np.testing.assert_array_equal(back.params, layer.params)
    assert bytes(back.config) == bytes(layer.config)
    # corrupted, wrong kind, missing
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    bad = tmp_path / "bad.attn"
    bad.write_bytes(bytes(data))
    with pytest.raises(attn.AttnError) as e:
        cls.load(bad)
    assert e.value.status == attn.ATTN_E_FORMAT
    other = attn.MultiHeadAttention if cls is not attn.MultiHeadAttention \
        else attn.EncoderLayer
    with pytest.raises(attn.AttnError) as e:
        other.load(path)
    assert e.value.status == attn.ATTN_E_FORMAT
    with pytest.raises(attn.AttnError) as e:
        cls.load(tmp_path / "missing.attn")
    assert e.value.status == attn.ATTN_E_IO


def test_parameter_views_write_through():
    m = attn.MultiHeadAttention(4, 2, seed=None)
    assert not m.params.any()
    m.parameters()["b_o"][:] = 1.5
    x = np.zeros((1, 3, 4), np.float32)
    np.testing.assert_allclose(m(x)[0], 1.5)
    m.init(1)
    a = m.params.copy()
    m.init(1)
    np.testing.assert_array_equal(a, m.params)


def test_layer_errors(rng):
    E = attn
    with pytest.raises(attn.AttnError) as e:
        attn.MultiHeadAttention(10, 3)
    assert e.value.status == E.ATTN_E_INVALID and "not a multiple" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.MultiHeadAttention(0, 1)
    assert "embed_dim is 0" in str(e.value)
    m = attn.MultiHeadAttention(8, 2, batch_first=True)
    with pytest.raises(attn.AttnError) as e:
        m.backward(np.zeros((1, 2, 8), np.float32))
    assert "forward first" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        m(rnd(rng, 2, 3, 7))
    assert e.value.status == E.ATTN_E_SHAPE and "7 features" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        m(rnd(rng, 2, 3, 8), rnd(rng, 3, 4, 8))
    assert "disagree" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        m(rnd(rng, 2, 3, 8), attn_mask=np.ones((4, 4), bool))
    assert "attn_mask has shape (4, 4); (3, 3) or (4, 3, 3)" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        m(np.full((1, 2, 8), np.nan, np.float32))
    assert e.value.status == E.ATTN_E_NONFINITE
    with pytest.raises(TypeError):
        m(rnd(rng, 1, 2, 8), causal=True)
    with pytest.raises(attn.AttnError) as e:
        attn.EncoderLayer(8, 2, 16, activation="tanh")
    assert "activation is 'tanh'" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.additive_attention(rnd(rng, 1, 2, 3), rnd(rng, 1, 2, 3), None,
                                w_q=rnd(rng, 4, 3), w_k=rnd(rng, 5, 3), v=rnd(rng, 4))
    assert "hidden size" in str(e.value)


def test_mha_flash_bf16_layer(rng):
    """impl="flash_bf16": the layer's linear maps and attention on bf16
    products (where the CPU has AVX512_BF16, else f32): within bf16's error
    of the f32 layer, forward and backward, with the weights not asked for."""
    m = attn.MultiHeadAttention(16, 4, seed=7, batch_first=True)
    x = rnd(rng, 2, 9, 16)
    g = rnd(rng, 2, 9, 16)
    out32, _ = m(x, need_weights=False, impl="flash")
    d32 = m.backward(g)
    out16, _ = m(x, need_weights=False, impl="flash_bf16")
    d16 = m.backward(g)
    scale = np.abs(out32).max()
    np.testing.assert_allclose(out16, out32, atol=3e-2 * scale, rtol=0)
    np.testing.assert_allclose(d16, d32, atol=5e-2 * np.abs(d32).max(), rtol=0)
    with pytest.raises(attn.AttnError, match="flash_bf16"):
        m(x, impl="bf16")
