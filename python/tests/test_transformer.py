"""DecoderLayer against a NumPy decoder written from the formulas
(post-norm, causal self-attention, cross-attention with key padding, ReLU
FFN), central differences of its backward; Transformer forward/backward,
cross_entropy, generate (cache vs no cache, beam 1 vs greedy, seeded
sampling), save/load; errors."""

import numpy as np
import pytest

import attn
import npref


def rnd(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def lin(x, w, b):
    return x.astype(np.float64) @ w.T.astype(np.float64) + b


def ln(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def mha(p, pre, q, kv, H, causal=False, lengths=None):
    B, Lq, E = q.shape
    Lk = kv.shape[1]
    hd = E // H
    Q = lin(q, p[pre + "w_q"], p[pre + "b_q"]).reshape(B, Lq, H, hd).transpose(0, 2, 1, 3)
    K = lin(kv, p[pre + "w_k"], p[pre + "b_k"]).reshape(B, Lk, H, hd).transpose(0, 2, 1, 3)
    V = lin(kv, p[pre + "w_v"], p[pre + "b_v"]).reshape(B, Lk, H, hd).transpose(0, 2, 1, 3)
    s = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(hd)
    if causal:
        s = np.where(np.tril(np.ones((Lq, Lk), bool)), s, -np.inf)
    if lengths is not None:
        keep = np.arange(Lk)[None, :] < np.asarray(lengths)[:, None]
        s = np.where(keep[:, None, None, :], s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = (w @ V).transpose(0, 2, 1, 3).reshape(B, Lq, E)
    return lin(o, p[pre + "w_o"], p[pre + "b_o"]), w


def np_decoder(p, x, m, H, layers, lengths):
    cur = x.astype(np.float64)
    ws = []
    for l in range(layers):
        P = "layers.%d." % l
        a, _ = mha(p, P + "self_attn.", cur, cur, H, causal=True)
        cur = ln(cur + a, p[P + "ln1_gamma"], p[P + "ln1_beta"])
        a, w = mha(p, P + "cross_attn.", cur, m.astype(np.float64), H, lengths=lengths)
        ws.append(w)
        cur = ln(cur + a, p[P + "ln2_gamma"], p[P + "ln2_beta"])
        h = np.maximum(lin(cur, p[P + "w_1"], p[P + "b_1"]), 0)
        cur = ln(cur + lin(h, p[P + "w_2"], p[P + "b_2"]), p[P + "ln3_gamma"],
                 p[P + "ln3_beta"])
    return cur, np.stack(ws)


def test_decoder_layer_matches_numpy(rng):
    d = attn.DecoderLayer(8, 2, 12, num_layers=2, seed=4)
    d.params += 0.1 * rnd(rng, d.params.size)
    x, m = rnd(rng, 2, 5, 8), rnd(rng, 2, 4, 8)
    pad = np.array([[False] * 4, [False, False, False, True]])
    out, w = d(x, m, memory_key_padding_mask=pad, return_cross_weights=True)
    ref, wr = np_decoder(d.parameters(), x, m, 2, 2, [4, 3])
    assert np.abs(out - ref).max() < 2e-5
    assert np.abs(w - wr).max() < 2e-6
    assert np.all(w[:, 1, :, :, 3] == 0)
    # lengths give the same as the padding mask
    assert np.array_equal(out, d(x, m, memory_lengths=[4, 3]))
    # one sequence (L, E)
    assert np.abs(d(x[0], m[0]) - out[0]).max() < 1e-6


def test_decoder_layer_backward(rng):
    d = attn.DecoderLayer(6, 2, 7, norm_first=True, final_norm=True,
                                     cross_attention="additive", seed=2)
    x, m = rnd(rng, 2, 3, 6), rnd(rng, 2, 4, 6)
    R = rnd(rng, 2, 3, 6)
    d(x, m, memory_lengths=[4, 2])
    d.zero_grad()
    dx, dm = d.backward(R)
    g = d.grads.copy()

    def loss():
        return float((d(x, m, memory_lengths=[4, 2]).astype(np.float64) * R).sum())

    h = 1e-2
    for arr, grad in ((x, dx), (m, dm)):
        for idx in [(0, 0, 1), (1, 2, 3), (1, 1, 5)]:
            if idx[1] >= arr.shape[1]:
                continue
            v = arr[idx]
            arr[idx] = v + h
            fp = loss()
            arr[idx] = v - h
            fm = loss()
            arr[idx] = v
            assert abs((fp - fm) / (2 * h) - grad[idx]) < 2e-2 * max(1, abs(grad[idx]))
    for i in range(0, d.params.size, max(1, d.params.size // 15)):
        v = d.params[i]
        d.params[i] = v + h
        fp = loss()
        d.params[i] = v - h
        fm = loss()
        d.params[i] = v
        assert abs((fp - fm) / (2 * h) - g[i]) < 2e-2 * max(1, abs(g[i]))
    # padded memory keys get no gradient
    assert np.all(dm[1, 2:] == 0)


def test_decoder_save_load(tmp_path, rng):
    d = attn.DecoderLayer(8, 4, 16, num_layers=2, cross=False, seed=1)
    p = d.save(str(tmp_path / "d.bin"))
    e = attn.DecoderLayer.load(p)
    assert np.array_equal(d.params, e.params)
    x = rnd(rng, 1, 4, 8)
    assert np.array_equal(d(x), e(x))
    with pytest.raises(attn.AttnError):
        attn.DecoderLayer(8, 3, 16)  # 8 is not a multiple of 3
    with pytest.raises(attn.AttnError):
        attn.DecoderLayer(8, 2, 16)(x)  # cross-attention needs memory


def model(decoder_only=False, seed=3):
    return attn.TokenTransformer(9, 8, d_model=16, nhead=2, num_encoder_layers=1,
                            num_decoder_layers=2, dim_feedforward=24,
                            max_src_len=8, max_tgt_len=9,
                            decoder_only=decoder_only, seed=seed)


def test_transformer_backward(rng):
    t = model()
    t.params *= 2
    src = np.array([[4, 5, 6, 7, 8, 0], [5, 4, 6, 0, 0, 0]])
    tgt = np.array([[1, 4, 5, 6], [1, 7, 7, 5]])
    y = np.array([[4, 5, 6, 2], [7, 7, 5, -1]])
    lg = t(src, tgt, src_lengths=[5, 3])
    loss, dz = attn.TokenTransformer.cross_entropy(lg, y, label_smoothing=0.1)
    t.zero_grad()
    t.backward(dz)
    h = 1e-2
    for i in range(0, t.params.size, t.params.size // 23):
        v = t.params[i]
        t.params[i] = v + h
        fp = attn.TokenTransformer.cross_entropy(t(src, tgt, src_lengths=[5, 3]), y, 0.1)[0]
        t.params[i] = v - h
        fm = attn.TokenTransformer.cross_entropy(t(src, tgt, src_lengths=[5, 3]), y, 0.1)[0]
        t.params[i] = v
        assert abs((fp - fm) / (2 * h) - t.grads[i]) < 3e-3 + 3e-2 * abs(t.grads[i])


@pytest.mark.parametrize("decoder_only", [False, True])
def test_generate(decoder_only, tmp_path):
    t = model(decoder_only)
    t.params *= 2
    src = np.array([[1, 4, 5, 3], [1, 6, 3, 0]]) if decoder_only else \
        np.array([[4, 5, 6, 7], [8, 5, 0, 0]])
    lens = [4, 3] if decoder_only else [4, 2]
    g, s = t.generate(src, lens, max_len=4)
    g2, s2 = t.generate(src, lens, max_len=4, use_cache=False)
    assert all(np.array_equal(a, b) for a, b in zip(g, g2))
    assert np.allclose(s, s2, atol=1e-4)
    b, sb = t.generate(src, lens, max_len=4, beam=3)
    assert sb.shape == (2,)
    a1, _ = t.generate(src, lens, max_len=4, sample=True, seed=5, threads=1)
    a2, _ = t.generate(src, lens, max_len=4, sample=True, seed=5, threads=2)
    assert all(np.array_equal(x, y) for x, y in zip(a1, a2))
    p = t.save(str(tmp_path / "t.bin"))
    u = attn.TokenTransformer.load(p)
    assert np.array_equal(u.params, t.params)
    assert all(np.array_equal(x, y) for x, y in zip(g, u.generate(src, lens, max_len=4)[0]))


def test_errors():
    t = model()
    with pytest.raises(attn.AttnError):
        t(np.array([[4, 9]]), np.array([[1]]))  # 9 is outside the source vocabulary
    with pytest.raises(attn.AttnError):
        t.generate(np.array([[4] * 9]))  # longer than max_src_len
    with pytest.raises(attn.AttnError):
        t.generate_text("march 3")  # no task: not from a checkpoint
    with pytest.raises(attn.AttnError):
        model().backward(np.zeros((1, 1, 8)))  # no forward yet
    with pytest.raises(attn.AttnError):
        attn.TokenTransformer.load(__file__)  # not a parameter file
