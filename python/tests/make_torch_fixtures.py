#!/usr/bin/env python3
"""Writes the PyTorch golden outputs that test_torch_modules.py compares
attn's PyTorch-named classes against (CI runs the test without torch):

    /path/to/venv-with-torch/bin/python python/tests/make_torch_fixtures.py

fixtures/torch_modules.npz: for each case, PyTorch's module's state_dict
("CASE/sd/NAME"), its inputs ("CASE/in/NAME", masks in PyTorch's
convention), and its outputs ("CASE/out/NAME"), all in eval mode (dropout
off) with the fast path off (the reference math). fixtures/torch_defaults.json:
the default of every argument of the classes' __init__ and forward, so
the test can check attn's defaults against PyTorch's.
"""

import inspect
import json
import os

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
torch.manual_seed(20261202)
torch.backends.mha.set_fastpath_enabled(False)
rng = np.random.default_rng(20261202)
data = {}


def t(a):
    return torch.from_numpy(np.asarray(a))


def x(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def hidden(shape, p=0.3):
    """A bool mask, True = not allowed, with key 0 always allowed."""
    m = rng.random(shape) < p
    m[..., 0] = False
    return m


def padding(B, S):
    """Key padding (B, S), True = pad: entry b keeps its first S - b keys,
    and a hole in the middle for the last entry."""
    m = np.zeros((B, S), bool)
    for b in range(B):
        m[b, S - b:] = True
    m[-1, 1] = True
    return m


def causal_bool(n):
    return np.triu(np.ones((n, n), bool), 1)


def record(case, module, inputs, outputs):
    inputs = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
    module_sd = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    for k, v in module_sd.items():
        data["%s/sd/%s" % (case, k)] = v
    for k, v in inputs.items():
        if v is not None:
            data["%s/in/%s" % (case, k)] = np.asarray(v)
    for k, v in outputs.items():
        if v is not None:
            data["%s/out/%s" % (case, k)] = v.detach().numpy().copy()


def randomize(module):
    # PyTorch initializes biases to 0 and LayerNorms to 1/0: give them values
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))


def mha(case, E, H, args, kw, call):
    m = nn.MultiheadAttention(E, H, **kw)
    randomize(m)
    m.eval()
    with torch.no_grad():
        tensors = {k: (t(v) if isinstance(v, np.ndarray) else v)
                   for k, v in args.items()}
        out, w = m(**tensors, **call)
    record(case, m, {k: v for k, v in args.items() if isinstance(v, np.ndarray)},
           {"out": out, "weights": w})
    data["%s/meta" % case] = np.array(json.dumps(dict(E=E, H=H, kw=kw, call=call)))


B, L, S, E, H = 2, 5, 6, 8, 2
q = x(B, L, E)
mha("mha_self_bool", E, H,
    dict(query=q, key=q, value=q, attn_mask=hidden((L, L)),
         key_padding_mask=padding(B, L)),
    dict(batch_first=True), dict())
mha("mha_cross_float", E, H,
    dict(query=x(L, B, E), key=x(S, B, 6), value=x(S, B, 4),
         attn_mask=x(L, S), key_padding_mask=np.where(padding(B, S), -np.inf,
                                                      0).astype(np.float32)),
    dict(kdim=6, vdim=4), dict(average_attn_weights=False))
mha("mha_3d_mask_causal", E, H,
    dict(query=x(L, B, E), key=x(L, B, E), value=x(L, B, E),
         attn_mask=np.broadcast_to(causal_bool(L), (B * H, L, L)).copy()),
    dict(bias=False), dict(is_causal=True, average_attn_weights=False))
u = x(L, E)
mha("mha_unbatched", E, H,
    dict(query=u, key=u, value=u, key_padding_mask=padding(2, L)[1]),
    dict(), dict())
mha("mha_no_weights", E, H,
    dict(query=x(B, L, E), key=x(B, S, E), value=x(B, S, E)),
    dict(batch_first=True), dict(need_weights=False))


def layer(case, cls, args, kw, call, inputs):
    module = getattr(nn, cls)(*args, **kw)
    randomize(module)
    module.eval()
    with torch.no_grad():
        out = module(**{k: (t(v) if isinstance(v, np.ndarray) else v)
                        for k, v in inputs.items()}, **call)
    record(case, module, inputs, {"out": out})
    data["%s/meta" % case] = np.array(json.dumps(dict(cls=cls, args=args, kw=kw,
                                                      call=call)))


F = 16
layer("enc_post_gelu", "TransformerEncoderLayer", [E, H, F], {"activation": "gelu"},
      {}, dict(src=x(L, B, E), src_mask=np.where(causal_bool(L), -np.inf,
                                                 0).astype(np.float32),
               src_key_padding_mask=padding(B, L)))
layer("enc_pre_bf", "TransformerEncoderLayer", [E, H, F],
      {"batch_first": True, "norm_first": True}, {},
      dict(src=x(B, L, E), src_mask=hidden((L, L))))
layer("enc_plain", "TransformerEncoderLayer", [E, H, F], {}, {},
      dict(src=x(L, B, E)))
layer("dec_post_masks", "TransformerDecoderLayer", [E, H, F], {}, {},
      dict(tgt=x(L, B, E), memory=x(S, B, E), tgt_mask=causal_bool(L),
           memory_mask=hidden((L, S)), tgt_key_padding_mask=padding(B, L),
           memory_key_padding_mask=padding(B, S)))
# no mask: PyTorch's decoder layer is not causal unless asked
layer("dec_not_causal", "TransformerDecoderLayer", [E, H, F], {}, {},
      dict(tgt=x(L, B, E), memory=x(S, B, E)))
layer("dec_pre_bf_gelu", "TransformerDecoderLayer", [E, H, F],
      {"activation": "gelu", "batch_first": True, "norm_first": True},
      {"tgt_is_causal": True},
      dict(tgt=x(B, L, E), memory=x(B, S, E),
           tgt_mask=nn.Transformer.generate_square_subsequent_mask(L).numpy(),
           memory_mask=x(L, S)))
T = 4
layer("transformer", "Transformer", [E, H, 2, 2, F], {}, {},
      dict(src=x(S, B, E), tgt=x(T, B, E),
           tgt_mask=nn.Transformer.generate_square_subsequent_mask(T).numpy(),
           src_key_padding_mask=padding(B, S),
           memory_key_padding_mask=padding(B, S)))
layer("transformer_bf_unbatched", "Transformer", [E, H, 1, 1, F],
      {"batch_first": True, "norm_first": True}, {"tgt_is_causal": True},
      dict(src=x(S, E), tgt=x(T, E),
           tgt_mask=nn.Transformer.generate_square_subsequent_mask(T).numpy()))
data["square_subsequent_mask_5"] = \
    nn.Transformer.generate_square_subsequent_mask(5).numpy()


def defaults(cls):
    out = {}
    for fn in ("__init__", "forward"):
        sig = inspect.signature(getattr(cls, fn))
        out[fn] = {n: (p.default if p.default is None or isinstance(
            p.default, (bool, int, float, str)) else
            getattr(p.default, "__name__", repr(p.default)))
            for n, p in sig.parameters.items()
            if p.default is not inspect.Parameter.empty}
    return out


os.makedirs(OUT, exist_ok=True)
np.savez_compressed(os.path.join(OUT, "torch_modules.npz"), **data)
with open(os.path.join(OUT, "torch_defaults.json"), "w") as f:
    json.dump({"torch": torch.__version__, **{c.__name__: defaults(c) for c in (
        nn.MultiheadAttention, nn.TransformerEncoderLayer,
        nn.TransformerDecoderLayer, nn.TransformerEncoder,
        nn.TransformerDecoder, nn.Transformer)}}, f, indent=1, sort_keys=True)
    f.write("\n")
print("wrote %d arrays with torch %s" % (len(data), torch.__version__))
