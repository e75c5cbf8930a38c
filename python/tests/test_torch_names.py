"""attn's PyTorch-named modules (modules.py, composed in Python from
MultiHeadAttention, attn_linear_forward and attn_layernorm_forward)
against attn's own C layers with the same weights, where their meanings
meet: TransformerEncoderLayer = EncoderLayer (one layer), and
TransformerDecoderLayer with tgt_is_causal = DecoderLayer (always causal);
batch_first=False is the transpose of batch_first=True; dropout only in
training mode; the errors of what attn does not support."""

import numpy as np
import pytest

import attn


def rnd(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def give_values(m, rng):
    sd = m.state_dict()
    m.load_state_dict({k: rnd(rng, *v.shape) * 0.3 + (1 if "norm" in k and
                                                     k.endswith("weight") else 0)
                       for k, v in sd.items()})
    return m


def c_names(sd, attn_prefix, layer="layers.0."):
    """PyTorch's names of one layer -> attn's C parameter names."""
    out = {}
    for k, v in sd.items():
        mod, _, leaf = k.rpartition(".")
        if k.endswith("in_proj_weight") or k.endswith("in_proj_bias"):
            sub = attn_prefix[k.split(".")[0]]
            kind = "w" if k.endswith("weight") else "b"
            for i, n in enumerate("qkv"):
                out[layer + sub + "%s_%s" % (kind, n)] = np.split(v, 3)[i]
        elif ".out_proj." in k:
            sub = attn_prefix[k.split(".")[0]]
            out[layer + sub + ("w_o" if leaf == "weight" else "b_o")] = v
        elif mod.startswith("linear"):
            i = mod[-1]
            out[layer + ("w_" if leaf == "weight" else "b_") + i] = v
        elif mod.startswith("norm"):
            out[layer + "ln%s_%s" % (mod[-1], "gamma" if leaf == "weight"
                                     else "beta")] = v
    return out


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_is_attns_encoder(rng, norm_first, activation):
    E, H, F, B, L = 8, 2, 12, 3, 5
    t = give_values(attn.TransformerEncoderLayer(
        E, H, F, activation=activation, norm_first=norm_first, seed=1), rng).eval()
    c = attn.EncoderLayer(E, H, F, num_layers=1, norm_first=norm_first,
                          activation=activation, seed=None)
    p = c.parameters()
    for k, v in c_names(t.state_dict(), {"self_attn": "attn."}).items():
        p[k][...] = v
    x = rnd(rng, B, L, E)
    lens = [5, 3, 1]
    pad = np.arange(L)[None] >= np.array(lens)[:, None]
    want = c(x, key_lengths=lens)
    got = t(np.swapaxes(x, 0, 1), src_key_padding_mask=pad)
    np.testing.assert_allclose(np.swapaxes(got, 0, 1), want, atol=2e-5, rtol=0)
    t.batch_first = True
    np.testing.assert_allclose(t(x, src_key_padding_mask=pad), want, atol=2e-5,
                               rtol=0)
    # one sequence (L, E) with an unbatched padding mask (L,)
    np.testing.assert_allclose(t(x[1], src_key_padding_mask=pad[1]), want[1],
                               atol=2e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_causal_decoder_layer_is_attns_decoder(rng, norm_first):
    E, H, F, B, Lt, Ls = 8, 2, 12, 2, 4, 6
    t = give_values(attn.TransformerDecoderLayer(
        E, H, F, norm_first=norm_first, batch_first=True, seed=2), rng).eval()
    c = attn.DecoderLayer(E, H, F, norm_first=norm_first, seed=None)
    p = c.parameters()
    for k, v in c_names(t.state_dict(), {"self_attn": "self_attn.",
                                         "multihead_attn": "cross_attn."}).items():
        p[k][...] = v
    x, m = rnd(rng, B, Lt, E), rnd(rng, B, Ls, E)
    lens = [6, 2]
    pad = np.arange(Ls)[None] >= np.array(lens)[:, None]
    want = c(x, m, memory_lengths=lens)
    got = t(x, m, memory_key_padding_mask=pad, tgt_is_causal=True)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)
    causal = attn.Transformer.generate_square_subsequent_mask(Lt)
    np.testing.assert_allclose(t(x, m, tgt_mask=causal, memory_key_padding_mask=pad),
                               want, atol=2e-5, rtol=0)
    np.testing.assert_allclose(t(x, m, tgt_mask=causal != 0,
                                 memory_key_padding_mask=pad), want, atol=2e-5,
                               rtol=0)
    # not causal unless asked
    assert np.abs(t(x, m, memory_key_padding_mask=pad) - want).max() > 1e-3


def test_dropout_only_in_training_mode(rng):
    E, H = 8, 2
    m = attn.MultiHeadAttention(E, H, dropout=0.5, batch_first=True, seed=3)
    x = rnd(rng, 2, 5, E)
    assert m.training
    a, _ = m(x, x, x, seed=1)
    b, _ = m(x, x, x, seed=2)
    assert np.abs(a - b).max() > 1e-3
    m.eval()
    c, _ = m(x, x, x, seed=1)
    d, _ = m(x, x, x, seed=2)
    np.testing.assert_array_equal(c, d)
    t = attn.TransformerEncoderLayer(E, H, 16, seed=4)
    assert t.dropout == 0.1 and t.training
    y1, y2 = t(x), t(x)
    assert np.abs(y1 - y2).max() > 1e-4  # fresh dropout masks each call
    t.eval()
    np.testing.assert_array_equal(t(x), t(x))


def test_mha_layouts_and_weights(rng):
    E, H, B, L, S = 8, 2, 3, 4, 5
    m = attn.MultiHeadAttention(E, H, batch_first=True, seed=5)
    q, k = rnd(rng, B, L, E), rnd(rng, B, S, E)
    out, w = m(q, k, k)
    assert out.shape == (B, L, E) and w.shape == (B, L, S)
    out2, w2 = m(q, k, k, average_attn_weights=False)
    np.testing.assert_allclose(w2.mean(axis=1), w, atol=1e-6)
    _, none = m(q, k, k, need_weights=False)
    assert none is None
    m.batch_first = False
    kt = np.swapaxes(k, 0, 1)
    out3, w3 = m(np.swapaxes(q, 0, 1), kt, kt)
    np.testing.assert_allclose(np.swapaxes(out3, 0, 1), out, atol=1e-6)
    np.testing.assert_allclose(w3, w, atol=1e-6)  # weights stay (N, L, S)
    # backward in the (L, N, E) layout is the transpose of batch-first's
    m.zero_grad()
    g = rnd(rng, L, B, E)
    dq, dkv = m.backward(g)  # key given again as value: one gradient
    m.batch_first = True
    m.zero_grad()
    m(q, k, k)
    dq2, dkv2 = m.backward(np.swapaxes(g, 0, 1))
    np.testing.assert_allclose(np.swapaxes(dq, 0, 1), dq2, atol=1e-6)
    np.testing.assert_allclose(np.swapaxes(dkv, 0, 1), dkv2, atol=1e-6)


def test_what_attn_does_not_take_is_refused():
    with pytest.raises(attn.AttnError) as e:
        attn.MultiHeadAttention(8, 2, add_bias_kv=True)
    assert e.value.status == attn.ATTN_E_UNSUPPORTED and "add_bias_kv" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.MultiHeadAttention(8, 2, add_zero_attn=True)
    assert "add_zero_attn" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.TransformerEncoderLayer(8, 2, device="cuda")
    assert "device" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.TransformerEncoderLayer(8, 2, activation="tanh")
    assert "activation is 'tanh'" in str(e.value)
    m = attn.MultiHeadAttention(8, 2)
    x = np.zeros((3, 2, 8), np.float32)
    with pytest.raises(TypeError):
        m(x, x, x, return_weights=True)  # attn's old name: PyTorch's is need_weights
    with pytest.raises(attn.AttnError) as e:
        m(x, x, x, key_padding_mask=np.zeros((3, 3), bool))
    assert "key_padding_mask has shape (3, 3); (2, 3)" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        m(x, x, x, attn_mask=np.zeros((3, 3), np.int32))
    assert e.value.status == attn.ATTN_E_DTYPE
    t = attn.TransformerEncoderLayer(8, 2)
    with pytest.raises(attn.AttnError) as e:
        t.load_state_dict({"linear1.weight": np.zeros((2048, 8))})
    assert "missing" in str(e.value)
    sd = t.state_dict()
    sd["linear1.weight"] = np.zeros((8, 8))
    with pytest.raises(attn.AttnError) as e:
        t.load_state_dict(sd)
    assert "linear1.weight has shape (8, 8); (2048, 8)" in str(e.value)
