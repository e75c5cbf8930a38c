"""PyTorch's Transformer modules by their names, arguments, meanings and
defaults: TransformerEncoderLayer, TransformerDecoderLayer,
TransformerEncoder, TransformerDecoder and Transformer (torch.nn's, as of
PyTorch 2.x), on NumPy arrays, for inference.

They are built from libattn's pieces: the attention is attn's
MultiHeadAttention (nn.MultiheadAttention's meanings), the linear maps and
LayerNorms are attn_linear_forward and attn_layernorm_forward; the
residuals, dropout and activation are here. So every mask PyTorch takes
works as in PyTorch: src_mask / tgt_mask / memory_mask ((L, S) or
(N * nhead, L, S)) and the key padding masks ((N, S)), bool True = NOT
allowed, float = added; *_is_causal applies the causal mask. As in
PyTorch, inputs are (L, N, E) unless batch_first=True ((N, L, E)); (L, E)
is one sequence. A new module is in training mode (dropout on, with
dropout=0.1 by default, as PyTorch's): call eval() for inference.

Where attn differs: parameters are drawn by attn (Xavier-uniform matrices,
zero biases, seed=) rather than by PyTorch's initializers: copy PyTorch's
weights in with load_state_dict(torch_module.state_dict()) (the same
names) for the same outputs; dropout draws its own masks; a query that may
attend to nothing gives zeros (PyTorch: NaN). These modules have no
backward: attn's trainable layers are EncoderLayer, DecoderLayer and
TokenTransformer (batch-first, with backward).
"""

import copy
import ctypes
import math

import numpy as np

from . import _lib
from ._lib import ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_SHAPE, fail, shape_str
from .layers import MultiHeadAttention

_pf = ctypes.POINTER(ctypes.c_float)
_i64 = ctypes.c_int64
_lib.lib.declare("attn_linear_forward", ctypes.c_int,
                 [_i64, _i64, _i64, _pf, _pf, _pf, _pf])
_lib.lib.declare("attn_layernorm_forward", ctypes.c_int,
                 [_i64, _i64, _pf, _pf, _pf, ctypes.c_double, _pf, _pf, _pf])

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _fp(a):
    return None if a is None else a.ctypes.data_as(_pf)


def _relu(x):
    return np.maximum(x, 0, dtype=np.float32)


def _gelu(x):
    """The exact GELU, x * Phi(x) (PyTorch's F.gelu default)."""
    return (x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))).astype(np.float32)


_ACTIVATIONS = {"relu": _relu, "gelu": _gelu}


def _count(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        fail(ATTN_E_INVALID, "%s is %r; an integer >= 1 is needed", name, v)
    return int(v)


def _activation(a):
    if callable(a):
        return a
    if a not in _ACTIVATIONS:
        fail(ATTN_E_INVALID, "activation is %r; 'relu', 'gelu' or a callable on "
             "NumPy arrays is needed", a)
    return _ACTIVATIONS[a]


class _Module:
    """train()/eval(), and state_dict()/load_state_dict() under PyTorch's
    names: a module's own arrays (_own) and its children's, prefixed."""

    training = True

    def _own(self):
        return {}

    def _children(self):
        return []

    def _named(self, prefix=""):
        out = {prefix + k: v for k, v in self._own().items()}
        for name, child in self._children():
            if isinstance(child, MultiHeadAttention):
                p = child.parameters()
                for k, parts in child.torch_names().items():
                    out[prefix + name + "." + k] = (p, parts)
            elif child is not None:
                out.update(child._named(prefix + name + "."))
        return out

    def train(self, mode=True):
        """Training mode (dropout on) for this module and its children, as
        PyTorch's; returns self."""
        self.training = bool(mode)
        for _, child in self._children():
            if child is not None:
                child.train(mode)
        return self

    def eval(self):
        """Evaluation mode (dropout off); returns self."""
        return self.train(False)

    def state_dict(self):
        """The parameters under PyTorch's names, as float32 copies."""
        out = {}
        for k, v in self._named().items():
            if isinstance(v, tuple):
                p, parts = v
                v = np.concatenate([p[a] for a in parts])
            out[k] = np.array(v, dtype=np.float32)
        return out

    def load_state_dict(self, state):
        """Copies the parameters in from a dict with state_dict()'s names
        (NumPy arrays or a PyTorch module's state_dict() of CPU tensors).
        Every name is needed and no other is taken; shapes are checked."""
        named = self._named()
        missing = sorted(set(named) - set(state))
        extra = sorted(set(state) - set(named))
        if missing or extra:
            fail(ATTN_E_INVALID, "load_state_dict: %s%s",
                 "missing %s" % missing if missing else "",
                 (" unexpected %s" % extra) if extra else "")
        for k, dst in named.items():
            a = np.asarray(state[k], dtype=np.float32)
            if isinstance(dst, tuple):
                p, parts = dst
                size = sum(p[n].shape[0] for n in parts)
                want = (size,) + p[parts[0]].shape[1:]
            else:
                want = dst.shape
            if a.shape != want:
                fail(ATTN_E_SHAPE, "load_state_dict: %s has shape %s; %s is "
                     "needed", k, shape_str(a.shape), shape_str(want))
            if isinstance(dst, tuple):
                off = 0
                for n in parts:
                    p[n][...] = a[off:off + p[n].shape[0]]
                    off += p[n].shape[0]
            else:
                dst[...] = a
        return self

    def _drop(self, x, p):
        """Dropout as PyTorch's (zero with probability p, scale the rest by
        1 / (1 - p)) in training mode; x itself otherwise."""
        if not self.training or p == 0.0:
            return x
        keep = self._rng.random(x.shape) >= p
        return (x * keep / (1.0 - p)).astype(np.float32)

    def _seed(self):
        """A dropout seed for the attention of one forward."""
        return int(self._rng.integers(0, 2**63))

    def __call__(self, *args, **kw):
        return self.forward(*args, **kw)


class _WeightBias(_Module):
    """A module whose own parameters are weight and an optional bias."""

    def _own(self):
        d = {"weight": self.weight}
        if self.bias is not None:
            d["bias"] = self.bias
        return d


class _Linear(_WeightBias):
    def __init__(self, n_in, n_out, bias, rng):
        bound = math.sqrt(6.0 / (n_in + n_out))  # Xavier-uniform
        self.weight = rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32)
        self.bias = np.zeros(n_out, np.float32) if bias else None

    def forward(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        n_out, n_in = self.weight.shape
        n = x.size // n_in
        y = np.empty(x.shape[:-1] + (n_out,), np.float32)
        _lib.call("attn_linear_forward", n, n_in, n_out, _fp(x), _fp(self.weight),
                  _fp(self.bias), _fp(y))
        return y


class _LayerNorm(_WeightBias):
    def __init__(self, d, eps, bias):
        e = _lib.as_float(eps)
        if not (e > 0 and np.isfinite(e)):
            fail(ATTN_E_INVALID, "layer_norm_eps is %r; it must be positive", eps)
        self.eps = e
        self.weight = np.ones(d, np.float32)
        self.bias = np.zeros(d, np.float32) if bias else None

    def forward(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        d = self.weight.shape[0]
        n = x.size // d
        beta = self.bias if self.bias is not None else np.zeros(d, np.float32)
        y = np.empty_like(x)
        stats = np.empty((2, n), np.float32)
        _lib.call("attn_layernorm_forward", n, d, _fp(x), _fp(self.weight),
                  _fp(beta), self.eps, _fp(y), _fp(stats[0]), _fp(stats[1]))
        return y


def _to_batch_first(x, name, d_model, batch_first):
    """(N, L, E) float32 of x given (L, N, E) (batch_first=False), (N, L, E)
    or (L, E); and whether x was one sequence."""
    a = np.asarray(x)
    if a.dtype.kind != "f":
        fail(ATTN_E_DTYPE, "%s has dtype %s; a float array is needed", name, a.dtype)
    if a.ndim not in (2, 3) or a.shape[-1] != d_model or 0 in a.shape:
        fail(ATTN_E_SHAPE, "%s has shape %s; %s with E = %d is needed", name,
             shape_str(a.shape), "(N, L, E) or (L, E)" if batch_first else
             "(L, N, E) or (L, E)", d_model)
    if a.ndim == 2:
        return np.asarray(a[None], dtype=np.float32), True
    if not batch_first:
        a = np.swapaxes(a, 0, 1)
    return np.ascontiguousarray(a, dtype=np.float32), False


def _from_batch_first(y, single, batch_first):
    if single:
        return y[0]
    return y if batch_first else np.ascontiguousarray(np.swapaxes(y, 0, 1))


def _mha_mask_args(mask, kpm, single):
    """PyTorch's layer masks keep their meaning for MultiHeadAttention; one
    sequence (L, E) takes an unbatched key_padding_mask (S,)."""
    if single and kpm is not None:
        kpm = np.asarray(kpm)
        if kpm.ndim == 2 and kpm.shape[0] == 1:
            kpm = kpm[0]
    return mask, kpm


def _decoder_inputs(tgt, memory, d_model, batch_first):
    """tgt and memory batch first, and whether they were one sequence each
    (unbatched): the two must agree."""
    x, single = _to_batch_first(tgt, "tgt", d_model, batch_first)
    m, msingle = _to_batch_first(memory, "memory", d_model, batch_first)
    if single != msingle or m.shape[0] != x.shape[0]:
        fail(ATTN_E_SHAPE, "tgt %s and memory %s disagree on the batch",
             shape_str(np.shape(tgt)), shape_str(np.shape(memory)))
    return x, m, single


class _FeedForwardLayer(_Module):
    """The constructor of the encoder and decoder layers (one signature, as
    PyTorch's): the attention blocks named in _ATTENTION (their seeds drawn
    in that order), linear1, linear2 and _NORMS LayerNorms norm1, norm2..."""
    _ATTENTION = ("self_attn",)
    _NORMS = 2

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation="relu", layer_norm_eps=1e-5, batch_first=False,
                 norm_first=False, bias=True, device=None, dtype=None, *,
                 seed=0):
        _lib.check_cpu_f32(device, dtype, "modules")
        self.d_model = _count("d_model", d_model)
        F = _count("dim_feedforward", dim_feedforward)
        self.dropout = _lib.dropout_p(dropout, "dropout")
        self.activation = _activation(activation)
        self.batch_first = bool(batch_first)
        self.norm_first = bool(norm_first)
        self._rng = np.random.default_rng(seed)
        for name in self._ATTENTION:
            setattr(self, name, MultiHeadAttention(
                d_model, nhead, dropout=self.dropout, bias=bias,
                batch_first=True, seed=int(self._rng.integers(0, 2**63))))
        self.linear1 = _Linear(d_model, F, bias, self._rng)
        self.linear2 = _Linear(F, d_model, bias, self._rng)
        for i in range(self._NORMS):
            setattr(self, "norm%d" % (i + 1),
                    _LayerNorm(d_model, layer_norm_eps, bias))
        self.training = True


class TransformerEncoderLayer(_FeedForwardLayer):
    """torch.nn.TransformerEncoderLayer: self-attention and feed-forward,
    each with a residual and LayerNorm (after: norm_first=False, the
    default; before: norm_first=True). attn's extra: seed (keyword) draws
    the parameters and the dropout."""

    def _children(self):
        return [("self_attn", self.self_attn), ("linear1", self.linear1),
                ("linear2", self.linear2), ("norm1", self.norm1),
                ("norm2", self.norm2)]

    def forward(self, src, src_mask=None, src_key_padding_mask=None,
                is_causal=False):
        """src (L, N, E) ((N, L, E) with batch_first; (L, E) unbatched);
        src_mask (L, L) or (N * nhead, L, L), src_key_padding_mask (N, L):
        bool True = not allowed, float added. Returns the output shaped
        like src."""
        x, single = _to_batch_first(src, "src", self.d_model, self.batch_first)
        y = self._body(x, src_mask, src_key_padding_mask, is_causal, single)
        return _from_batch_first(y, single, self.batch_first)

    def _body(self, x, mask, kpm, is_causal, single):
        mask, kpm = _mha_mask_args(mask, kpm, single)

        def sa(h):
            h = h[0] if single else h
            out, _ = self.self_attn(h, h, h, key_padding_mask=kpm,
                                    need_weights=False, attn_mask=mask,
                                    is_causal=bool(is_causal), seed=self._seed())
            return self._drop(out[None] if single else out, self.dropout)

        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + self._ff(self.norm2(x))
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + self._ff(x))
        return x.astype(np.float32)

    def _ff(self, x):
        h = self._drop(np.asarray(self.activation(self.linear1(x)), np.float32),
                       self.dropout)
        return self._drop(self.linear2(h), self.dropout)


class TransformerDecoderLayer(_FeedForwardLayer):
    """torch.nn.TransformerDecoderLayer: self-attention over tgt (causal
    only when asked: tgt_mask / tgt_is_causal), cross-attention over
    memory, feed-forward, each with a residual and LayerNorm (after by
    default; before with norm_first=True). attn's extra: seed (keyword)."""

    _ATTENTION = ("self_attn", "multihead_attn")
    _NORMS = 3

    def _children(self):
        return [("self_attn", self.self_attn),
                ("multihead_attn", self.multihead_attn),
                ("linear1", self.linear1), ("linear2", self.linear2),
                ("norm1", self.norm1), ("norm2", self.norm2),
                ("norm3", self.norm3)]

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=False, memory_is_causal=False):
        """tgt (T, N, E), memory (S, N, E) ((N, T, E), (N, S, E) with
        batch_first; (T, E), (S, E) unbatched). tgt_mask (T, T) or
        (N * nhead, T, T), memory_mask (T, S) or (N * nhead, T, S), key
        padding masks (N, T) and (N, S): bool True = not allowed, float
        added; tgt_is_causal / memory_is_causal apply the causal mask.
        Returns the output shaped like tgt."""
        x, m, single = _decoder_inputs(tgt, memory, self.d_model,
                                       self.batch_first)
        y = self._body(x, m, tgt_mask, memory_mask, tgt_key_padding_mask,
                       memory_key_padding_mask, tgt_is_causal, memory_is_causal,
                       single)
        return _from_batch_first(y, single, self.batch_first)

    def _attend(self, mha, h, mem, mask, kpm, causal, single):
        mask, kpm = _mha_mask_args(mask, kpm, single)
        if single:
            h, mem = h[0], mem[0]
        out, _ = mha(h, mem, mem, key_padding_mask=kpm, need_weights=False,
                     attn_mask=mask, is_causal=bool(causal), seed=self._seed())
        return self._drop(out[None] if single else out, self.dropout)

    def _body(self, x, m, tgt_mask, memory_mask, tkpm, mkpm, tcausal, mcausal,
              single):
        def sa(h):
            return self._attend(self.self_attn, h, h, tgt_mask, tkpm, tcausal,
                                single)

        def ca(h):
            return self._attend(self.multihead_attn, h, m, memory_mask, mkpm,
                                mcausal, single)
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            x = x + self._ff(self.norm3(x))
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + ca(x))
            x = self.norm3(x + self._ff(x))
        return x.astype(np.float32)

    _ff = TransformerEncoderLayer._ff


def _stack(layer, num_layers, kind):
    if not isinstance(layer, kind):
        fail(ATTN_E_INVALID, "the layer is %s; an attn.%s is needed",
             type(layer).__name__, kind.__name__)
    n = _count("num_layers", num_layers)
    # independent copies, as PyTorch's (same initial values; the dropout
    # streams differ)
    out = []
    for i in range(n):
        c = copy.deepcopy(layer)
        c._rng = np.random.default_rng([i, int(layer._rng.integers(0, 2**63))])
        out.append(c)
    return out


class _LayerStack(_Module):
    """num_layers copies of a layer (of class kind) and an optional final
    norm: what the encoder and the decoder share."""

    def __init__(self, layer, num_layers, norm, kind):
        self.layers = _stack(layer, num_layers, kind)
        self.norm = norm
        self.batch_first = layer.batch_first
        self.d_model = layer.d_model
        self.training = layer.training

    def _children(self):
        return [("layers.%d" % i, l) for i, l in enumerate(self.layers)] + \
            [("norm", self.norm)]


class TransformerEncoder(_LayerStack):
    """torch.nn.TransformerEncoder: num_layers copies of encoder_layer and
    an optional final norm (a LayerNorm made by attn.Transformer, or None).
    enable_nested_tensor and mask_check are accepted and change nothing
    (attn does not pack; padded positions are computed, not zeroed)."""

    def __init__(self, encoder_layer, num_layers, norm=None,
                 enable_nested_tensor=True, mask_check=True):
        _LayerStack.__init__(self, encoder_layer, num_layers, norm,
                             TransformerEncoderLayer)

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """As TransformerEncoderLayer.forward through every layer, then the
        norm."""
        x, single = _to_batch_first(src, "src", self.d_model, self.batch_first)
        for layer in self.layers:
            x = layer._body(x, mask, src_key_padding_mask, bool(is_causal), single)
        if self.norm is not None:
            x = self.norm(x)
        return _from_batch_first(x, single, self.batch_first)


class TransformerDecoder(_LayerStack):
    """torch.nn.TransformerDecoder: num_layers copies of decoder_layer and
    an optional final norm."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        _LayerStack.__init__(self, decoder_layer, num_layers, norm,
                             TransformerDecoderLayer)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=None, memory_is_causal=False):
        """As TransformerDecoderLayer.forward through every layer, then the
        norm."""
        x, m, single = _decoder_inputs(tgt, memory, self.d_model,
                                       self.batch_first)
        for layer in self.layers:
            x = layer._body(x, m, tgt_mask, memory_mask, tgt_key_padding_mask,
                            memory_key_padding_mask, bool(tgt_is_causal),
                            memory_is_causal, single)
        if self.norm is not None:
            x = self.norm(x)
        return _from_batch_first(x, single, self.batch_first)


class Transformer(_Module):
    """torch.nn.Transformer: an encoder of num_encoder_layers and a decoder
    of num_decoder_layers (each ending in a LayerNorm) over embeddings;
    forward(src, tgt) returns the decoder's output (no embedding, no
    head, as PyTorch's). attn's token model with embeddings, a head,
    training and generation is attn.TokenTransformer. attn's extra: seed
    (keyword)."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6,
                 num_decoder_layers=6, dim_feedforward=2048, dropout=0.1,
                 activation="relu", custom_encoder=None, custom_decoder=None,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, device=None, dtype=None, *, seed=0):
        _lib.check_cpu_f32(device, dtype, "modules")
        rng = np.random.default_rng(seed)
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout,
                  activation=activation, layer_norm_eps=layer_norm_eps,
                  batch_first=batch_first, norm_first=norm_first, bias=bias)

        def stack(custom, layer, stack_type, num_layers):
            if custom is not None:
                return custom
            one = layer(d_model, nhead, seed=int(rng.integers(0, 2**63)), **kw)
            return stack_type(one, num_layers,
                              _LayerNorm(d_model, layer_norm_eps, bias))
        # the encoder's seed is drawn first, as the two stacks are built
        self.encoder = stack(custom_encoder, TransformerEncoderLayer,
                             TransformerEncoder, num_encoder_layers)
        self.decoder = stack(custom_decoder, TransformerDecoderLayer,
                             TransformerDecoder, num_decoder_layers)
        self.d_model = _count("d_model", d_model)
        self.nhead = nhead
        self.batch_first = bool(batch_first)
        self.training = True
        self._reset_parameters(rng)

    def _children(self):
        return [("encoder", self.encoder), ("decoder", self.decoder)]

    def _reset_parameters(self, rng):
        """Xavier-uniform over every matrix, as PyTorch's Transformer does
        after building its layers (so that the copies differ)."""
        sd = self.state_dict()
        for k, a in sd.items():
            if a.ndim > 1:
                bound = math.sqrt(6.0 / (a.shape[0] + a.shape[1]))
                sd[k] = rng.uniform(-bound, bound, a.shape).astype(np.float32)
        self.load_state_dict(sd)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None,
                tgt_is_causal=None, memory_is_causal=False):
        """src (S, N, E), tgt (T, N, E) ((N, S, E), (N, T, E) with
        batch_first; unbatched (S, E), (T, E)); the masks as the layers'.
        Returns (T, N, E) (or as tgt)."""
        memory = self.encoder(src, mask=src_mask,
                              src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask,
                            memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The float causal mask (sz, sz) of PyTorch: -inf above the
        diagonal, 0 elsewhere."""
        n = _count("sz", sz)
        return np.triu(np.full((n, n), -np.inf, np.float32), 1)
