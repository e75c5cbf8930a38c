"""attn's classes named after PyTorch's against PyTorch itself: outputs of
torch.nn.MultiheadAttention, TransformerEncoderLayer,
TransformerDecoderLayer and Transformer (eval mode) with their weights
copied into attn through load_state_dict, on the same inputs and masks in
PyTorch's convention (fixtures/torch_modules.npz, written by
make_torch_fixtures.py with torch; this test needs no torch); and every
default of their arguments against PyTorch's (fixtures/torch_defaults.json)."""

import inspect
import json
import os

import numpy as np
import pytest

import attn

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = np.load(os.path.join(HERE, "fixtures", "torch_modules.npz"))
with open(os.path.join(HERE, "fixtures", "torch_defaults.json")) as f:
    DEFAULTS = json.load(f)
TOL = 2e-5


def case(name):
    def part(kind):
        p = "%s/%s/" % (name, kind)
        return {k[len(p):]: DATA[k] for k in DATA.files if k.startswith(p)}
    return (json.loads(str(DATA[name + "/meta"])), part("sd"), part("in"),
            part("out"))


def cases(prefix):
    return sorted({k.split("/")[0] for k in DATA.files
                   if k.startswith(prefix) and "/" in k})


@pytest.mark.parametrize("name", cases("mha_"))
def test_multihead_attention_matches_pytorch(name):
    meta, sd, inputs, out = case(name)
    m = attn.MultiHeadAttention(meta["E"], meta["H"], **meta["kw"])
    m.load_state_dict(sd).eval()
    assert set(m.state_dict()) == set(sd)
    got, w = m(**inputs, **meta["call"])
    np.testing.assert_allclose(got, out["out"], atol=TOL, rtol=0)
    if "weights" in out:
        np.testing.assert_allclose(w, out["weights"], atol=TOL, rtol=0)
    else:
        assert w is None


@pytest.mark.parametrize("name", cases("enc_") + cases("dec_") + cases("transformer"))
def test_transformer_modules_match_pytorch(name):
    meta, sd, inputs, out = case(name)
    m = getattr(attn, meta["cls"])(*meta["args"], **meta["kw"])
    assert set(m.state_dict()) == set(sd)
    m.load_state_dict(sd).eval()
    got = m(**inputs, **meta["call"])
    assert got.shape == out["out"].shape
    np.testing.assert_allclose(got, out["out"], atol=TOL, rtol=0)


def test_a_decoder_layer_is_causal_only_when_asked():
    meta, sd, inputs, out = case("dec_not_causal")
    m = attn.TransformerDecoderLayer(*meta["args"], **meta["kw"])
    m.load_state_dict(sd).eval()
    causal = m(**inputs, tgt_is_causal=True)
    # PyTorch's output without a mask differs from the causal one, which
    # attn gives only when asked
    assert np.abs(causal - out["out"]).max() > 1e-3
    np.testing.assert_allclose(m(**inputs), out["out"], atol=TOL, rtol=0)


def test_masks_in_pytorchs_convention_change_the_output():
    # the same bool mask read as attn's sdpa convention (True = attend)
    # would give another output: the fixture's match is not an accident
    meta, sd, inputs, out = case("mha_self_bool")
    m = attn.MultiHeadAttention(meta["E"], meta["H"], **meta["kw"])
    m.load_state_dict(sd).eval()
    flipped = dict(inputs, attn_mask=~inputs["attn_mask"])
    flipped["attn_mask"][:, 0] = False
    got, _ = m(**flipped)
    assert np.abs(got - out["out"]).max() > 1e-3


def test_square_subsequent_mask():
    np.testing.assert_array_equal(attn.Transformer.generate_square_subsequent_mask(5),
                                  DATA["square_subsequent_mask_5"])


@pytest.mark.parametrize("cls", ["MultiheadAttention", "TransformerEncoderLayer",
                                 "TransformerDecoderLayer", "TransformerEncoder",
                                 "TransformerDecoder", "Transformer"])
def test_defaults_are_pytorchs(cls):
    ours = getattr(attn, cls)
    for fn in ("__init__", "forward"):
        sig = inspect.signature(getattr(ours, fn)).parameters
        for name, want in DEFAULTS[cls][fn].items():
            assert name in sig, "%s.%s lacks PyTorch's %s" % (cls, fn, name)
            got = sig[name].default
            assert got == want or (want is None and got is None), \
                "%s.%s(%s=%r): PyTorch's default is %r" % (cls, fn, name, got, want)
