"""attn's trainable decoder and token model as Python objects:
DecoderLayer (a stack of decoder layers: causal self-attention,
cross-attention over a memory, feed-forward) and TokenTransformer (token
embeddings, encoder and decoder stacks and a head: an encoder-decoder, or
a decoder-only model) with forward, backward, save/load and generate.

They are attn's own (batch-first float32 activations, always-causal
self-attention, attn's defaults), so their names are not PyTorch's;
PyTorch's nn.TransformerDecoderLayer and nn.Transformer, with PyTorch's
arguments and meanings, are attn.TransformerDecoderLayer and
attn.Transformer (modules.py). TokenTransformer works on token ids (int)
and returns logits; its generate method decodes with libattn's key/value
cache.
"""

import ctypes
import os
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import ATTN_E_INVALID, ATTN_E_SHAPE, fail, shape_str
from ._masks import IMPLS
from .layers import (ATTENTION_TYPES, EncoderConfig, Layer,
                     ParamSlice, activation_array, count_arg, ptr_of,
                     set_norm_args, set_size_args)

_i64 = ctypes.c_int64
_pf = ctypes.POINTER(ctypes.c_float)
_vp = ctypes.c_void_p
_szp = ctypes.POINTER(ctypes.c_size_t)


class DecoderConfig(_lib.Struct):
    _fields_ = [("num_layers", _i64), ("d_model", _i64), ("num_heads", _i64),
                ("num_kv_heads", _i64), ("dim_feedforward", _i64),
                ("cross", ctypes.c_int), ("cross_attention", ctypes.c_int),
                ("additive_dim", _i64), ("activation", ctypes.c_int),
                ("norm_first", ctypes.c_int), ("final_norm", ctypes.c_int),
                ("layer_norm_eps", ctypes.c_double), ("norm", ctypes.c_int),
                ("attn_no_bias", ctypes.c_int), ("rope", _lib.Rope),
                ("sliding_window", _i64)]


class TransformerConfig(_lib.Struct):
    _fields_ = [("kind", ctypes.c_int), ("enc", EncoderConfig),
                ("dec", DecoderConfig), ("vocab_src", _i64),
                ("vocab_tgt", _i64), ("max_src", _i64), ("max_tgt", _i64),
                ("share_embeddings", ctypes.c_int), ("tie_output", ctypes.c_int)]


class GenerateOpts(_lib.Struct):
    _fields_ = [("max_len", _i64), ("beam", _i64), ("length_penalty", ctypes.c_double),
                ("sample", ctypes.c_int), ("temperature", ctypes.c_double),
                ("top_k", _i64), ("top_p", ctypes.c_double), ("seed", ctypes.c_uint64),
                ("threads", ctypes.c_int), ("recompute", ctypes.c_int),
                ("bos_id", ctypes.c_int32), ("eos_id", ctypes.c_int32),
                ("step_logits", _pf)]


class GenTask(_lib.Struct):
    _fields_ = [("kind", ctypes.c_int), ("min_len", _i64), ("max_len", _i64)]


_lib.MIRRORED.update({"attn_gen_task": GenTask,
                      "attn_decoder_config": DecoderConfig,
                      "attn_transformer_config": TransformerConfig,
                      "attn_generate_opts": GenerateOpts})

_D = ctypes.POINTER(DecoderConfig)
_T = ctypes.POINTER(TransformerConfig)
_OPTS = ctypes.POINTER(_lib.SdpaOpts)
_d = _lib.lib.declare
_d("attn_decoder_config_init", None, [_D])
_d("attn_decoder_param_count", _i64, [_D])
_d("attn_decoder_param_slices", ctypes.c_int,
   [_D, ctypes.c_char_p, _i64, ctypes.POINTER(ParamSlice), _i64, ctypes.POINTER(_i64)])
_d("attn_decoder_init", ctypes.c_int, [_D, _vp, ctypes.c_uint64])
_d("attn_decoder_save", ctypes.c_int, [ctypes.c_char_p, _D, _vp])
_d("attn_decoder_load", ctypes.c_int, [ctypes.c_char_p, _D, ctypes.POINTER(_pf)])
_d("attn_decoder_cross_heads", _i64, [_D])
_d("attn_decoder_workspace_size", ctypes.c_int, [_D, _i64, _i64, _i64, _szp])
_d("attn_decoder_forward", ctypes.c_int,
   [_D, _vp, _i64, _i64, _i64, _vp, _vp, _vp, _OPTS, _vp, _vp, _vp, _vp])
_d("attn_decoder_backward", ctypes.c_int,
   [_D, _vp, _i64, _i64, _i64, _vp, _vp, _vp, _OPTS, _vp, _vp, _vp, _vp, _vp])
_d("attn_transformer_config_init", None, [_T, ctypes.c_int])
_d("attn_transformer_param_count", _i64, [_T])
_d("attn_transformer_param_slices", ctypes.c_int,
   [_T, ctypes.POINTER(ParamSlice), _i64, ctypes.POINTER(_i64)])
_d("attn_transformer_init", ctypes.c_int, [_T, _vp, ctypes.c_uint64])
_d("attn_transformer_save", ctypes.c_int, [ctypes.c_char_p, _T, _vp])
_d("attn_transformer_load", ctypes.c_int, [ctypes.c_char_p, _T, ctypes.POINTER(_pf)])
_d("attn_transformer_workspace_size", ctypes.c_int, [_T, _i64, _i64, _i64, _szp])
_d("attn_transformer_forward", ctypes.c_int,
   [_T, _vp, _i64, _i64, _vp, _vp, _i64, _vp, _OPTS, _vp, _vp, _vp])
_d("attn_transformer_backward", ctypes.c_int,
   [_T, _vp, _i64, _i64, _vp, _vp, _i64, _vp, _OPTS, _vp, _vp, _vp])
_d("attn_cross_entropy_smoothed", ctypes.c_int,
   [_i64, _i64, _vp, _vp, ctypes.c_int32, ctypes.c_double,
    ctypes.POINTER(ctypes.c_double), _vp, _vp, _vp])
_d("attn_generate_opts_init", None, [ctypes.POINTER(GenerateOpts)])
_d("attn_generate", ctypes.c_int,
   [_T, _vp, _i64, _i64, _vp, _vp, ctypes.POINTER(GenerateOpts), _vp, _i64, _vp, _vp])
_d("attn_gen_trainer_load", ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_vp)])
_d("attn_gen_trainer_config", _vp, [_vp])
_d("attn_gen_trainer_params", _pf, [_vp])
_d("attn_gen_trainer_free", None, [_vp])
_G = ctypes.POINTER(GenTask)
_d("attn_gen_input", ctypes.c_int,
   [_G, ctypes.c_int, ctypes.c_char_p, _vp, _i64, ctypes.POINTER(_i64)])
_d("attn_gen_decode", ctypes.c_int,
   [_G, ctypes.c_int, _vp, _i64, ctypes.c_char_p, ctypes.c_size_t])
_lib.lib.check_layout()

# ids of the generation tasks' vocabularies (attn_transformer.h)
PAD, BOS, EOS, SEP = 0, 1, 2, 3


def _unbatch(out, w, single, return_cross_weights):
    """A forward's result: out, with return_cross_weights also the cross
    weights w (None where there are none), without the batch axis that a
    single sequence was given."""
    out = out[0] if single else out
    if return_cross_weights:
        return out, (None if w is None else (w[:, 0] if single else w))
    return out


def _lengths(lengths, B, L, name):
    if lengths is None:
        return None
    a = np.ascontiguousarray(lengths, dtype=np.int64).reshape(-1)
    if a.shape[0] != B:
        fail(ATTN_E_SHAPE, "%s has %d entries for a batch of %d", name, a.shape[0], B)
    return a


def _padding_to_lengths(mask, B, L):
    """A key padding mask (B, L), True = padding, as PyTorch's; only
    trailing padding can be expressed as lengths."""
    m = np.asarray(mask, dtype=bool)
    if m.shape != (B, L):
        fail(ATTN_E_SHAPE, "memory_key_padding_mask has shape %s; (%d, %d) is "
             "needed", shape_str(m.shape), B, L)
    lens = (~m).sum(axis=1).astype(np.int64)
    for b in range(B):
        if m[b, :lens[b]].any() or not m[b, lens[b]:].all():
            fail(ATTN_E_INVALID, "memory_key_padding_mask row %d pads keys that "
                 "are not all at the end; attn takes padding as lengths", b)
    return lens


def _layer_opts(dropout_p, seed, impl, threads):
    o = _lib.SdpaOpts()
    _lib.lib.attn_sdpa_opts_init(byref(o))
    p = float(dropout_p)
    if not 0.0 <= p < 1.0:
        fail(ATTN_E_INVALID, "dropout_p is %r; it must be in [0, 1)", dropout_p)
    o.dropout_p = p
    o.seed = int(seed)
    if impl not in IMPLS:
        fail(ATTN_E_INVALID, "impl is %r; one of 'auto', 'ref', 'flash', 'flash_bf16'", impl)
    o.impl = IMPLS[impl]
    o.threads = 0 if threads is None else count_arg("threads", threads)
    return o


def _decoder_config(cfg, d_model, nhead, dim_feedforward, activation,
                    layer_norm_eps, norm_first, num_layers, cross,
                    cross_attention, num_kv_heads, additive_dim, final_norm):
    _lib.lib.attn_decoder_config_init(byref(cfg))
    set_size_args(cfg, num_layers, d_model, "nhead", nhead, num_kv_heads,
                  dim_feedforward)
    cfg.cross = 1 if cross else 0
    if cross_attention not in ATTENTION_TYPES:
        fail(ATTN_E_INVALID, "cross_attention is %r; 'dot' or 'additive'",
             cross_attention)
    cfg.cross_attention = ATTENTION_TYPES[cross_attention]
    cfg.additive_dim = 0 if additive_dim is None else count_arg("additive_dim",
                                                             additive_dim)
    set_norm_args(cfg, activation, norm_first, final_norm, layer_norm_eps)


class DecoderLayer(Layer):
    """num_layers decoder layers of attn (post-norm by default), trainable
    (backward): causal self-attention (always: it is the decoder of
    generation), cross-attention
    over memory (dot or additive; none when cross=False, a decoder-only
    stack), feed-forward, residuals and LayerNorm. dropout is used by
    forward(..., train=True) at every dropout site."""

    kind = "decoder"
    config_type = DecoderConfig

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.0,
                 activation="relu", layer_norm_eps=1e-5, batch_first=True,
                 norm_first=False, *, num_layers=1, cross=True,
                 cross_attention="dot", num_kv_heads=None, additive_dim=None,
                 final_norm=False, seed=0):
        if not batch_first:
            fail(ATTN_E_INVALID, "attn layers are batch-first (batch_first=True)")
        self.dropout = float(dropout)
        cfg = DecoderConfig()
        _decoder_config(cfg, d_model, nhead, dim_feedforward, activation,
                        layer_norm_eps, norm_first, num_layers, cross,
                        cross_attention, num_kv_heads, additive_dim, final_norm)
        self._setup(cfg, seed)

    @property
    def cross_heads(self):
        return _lib.lib.attn_decoder_cross_heads(byref(self.config))

    def forward(self, tgt, memory=None, *, memory_key_padding_mask=None,
                memory_lengths=None, train=False, seed=0, impl="auto",
                threads=None, return_cross_weights=False):
        """tgt (B, Lt, E), memory (B, Ls, E) (None without cross). Padding
        of the memory: memory_key_padding_mask (B, Ls), True = pad, as
        PyTorch's, or memory_lengths (B,). Returns out (B, Lt, E), and the
        cross-attention weights (num_layers, B, Hc, Lt, Ls) when asked."""
        c = self.config
        a, single = activation_array(tgt, "tgt", c.d_model)
        B, Lt = a.shape[:2]
        if c.cross:
            if memory is None:
                fail(ATTN_E_INVALID, "this decoder has cross-attention: memory "
                     "is needed")
            m, _ = activation_array(memory[None] if single else memory, "memory",
                               c.d_model)
            if m.shape[0] != B:
                fail(ATTN_E_SHAPE, "memory has batch %d, tgt %d", m.shape[0], B)
            Ls = m.shape[1]
        else:
            m, Ls = None, 1
        if memory_key_padding_mask is not None:
            lens = _padding_to_lengths(np.asarray(memory_key_padding_mask).reshape(
                B, -1), B, Ls)
        else:
            lens = _lengths(memory_lengths, B, Ls, "memory_lengths")
        opts = _layer_opts(self.dropout if train else 0.0, seed, impl, threads)
        ws = self._workspace("attn_decoder_workspace_size", B, Lt, Ls)
        out = np.empty_like(a)
        Hc = self.cross_heads
        w = (np.empty((c.num_layers, B, Hc, Lt, Ls), dtype=np.float32)
             if return_cross_weights and c.cross else None)
        _lib.call("attn_decoder_forward", byref(c), self.params.ctypes.data, B,
                  Lt, Ls, a.ctypes.data, ptr_of(m), ptr_of(lens), byref(opts),
                  out.ctypes.data, None, ptr_of(w), ws.ctypes.data)
        self._saved = (a, m, lens, opts, ws, single, Ls)
        return _unbatch(out, w, single, return_cross_weights)

    __call__ = forward

    def backward(self, dout):
        """Adds the parameter gradients into .grads; returns (dtgt,
        dmemory) (dmemory None without cross-attention)."""
        self._need_forward()
        a, m, lens, opts, ws, single, Ls = self._saved
        B, Lt = a.shape[:2]
        g = self._dout(dout, a)
        dx = np.zeros_like(a)
        dm = None if m is None else np.zeros_like(m)
        _lib.call("attn_decoder_backward", byref(self.config),
                  self.params.ctypes.data, B, Lt, Ls, a.ctypes.data, ptr_of(m),
                  ptr_of(lens), byref(opts), g.ctypes.data, ws.ctypes.data,
                  self.grads.ctypes.data, dx.ctypes.data, ptr_of(dm))
        if single:
            return dx[0], (None if dm is None else dm[0])
        return dx, dm


def _ids(x, name, vocab):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        fail(ATTN_E_INVALID, "%s has dtype %s; integer token ids are needed",
             name, a.dtype)
    single = a.ndim == 1
    if single:
        a = a[None]
    if a.ndim != 2 or 0 in a.shape:
        fail(ATTN_E_SHAPE, "%s has shape %s; (B, L) or (L,) ids are needed",
             name, shape_str(np.shape(x)))
    if a.min() < 0 or a.max() >= vocab:
        fail(ATTN_E_INVALID, "%s holds ids outside 0..%d", name, vocab - 1)
    return np.ascontiguousarray(a, dtype=np.int32), single


class TokenTransformer:
    """attn's token model: an encoder-decoder (arguments named as
    nn.Transformer's, with attn's defaults: pre-norm, dim_feedforward 256;
    plus the vocabularies and lengths an embedding and a head need) or, with
    decoder_only=True, a causal decoder-only model over tgt_vocab.

    Parameters live in one float32 block (.params, .grads; parameters()
    names them). forward(src, tgt) gives logits (B, Lt, tgt_vocab);
    backward(dlogits) ADDS into .grads; generate(src) decodes with the
    key/value cache. save/load use libattn's parameter files; load also
    reads a checkpoint of `attn train date` (or --model encdec|decoder).
    """

    def __init__(self, src_vocab=None, tgt_vocab=None, d_model=64, nhead=4,
                 num_encoder_layers=2, num_decoder_layers=2,
                 dim_feedforward=256, dropout=0.0, activation="relu", *,
                 max_src_len=64, max_tgt_len=64, decoder_only=False,
                 norm_first=True, cross_attention="dot",
                 share_embeddings=False, tie_output=False, seed=0):
        c = TransformerConfig()
        kind = 1 if decoder_only else 0
        _lib.lib.attn_transformer_config_init(byref(c), kind)
        _decoder_config(c.dec, d_model, nhead, dim_feedforward, activation, 1e-5,
                        norm_first, num_decoder_layers, not decoder_only,
                        cross_attention, None, None, norm_first)
        e = c.enc
        e.num_layers = count_arg("num_encoder_layers", num_encoder_layers)
        e.d_model = c.dec.d_model
        e.num_heads = c.dec.num_heads
        e.dim_feedforward = c.dec.dim_feedforward
        e.activation = c.dec.activation
        e.norm_first = e.final_norm = 1 if norm_first else 0
        c.vocab_tgt = count_arg("tgt_vocab", tgt_vocab)
        c.max_tgt = count_arg("max_tgt_len", max_tgt_len)
        if not decoder_only:
            c.vocab_src = count_arg("src_vocab", src_vocab)
            c.max_src = count_arg("max_src_len", max_src_len)
        c.share_embeddings = 1 if share_embeddings else 0
        c.tie_output = 1 if tie_output else 0
        self.dropout = float(dropout)
        self._setup(c, seed)

    def _setup(self, c, seed):
        self.config = c
        n = _lib.lib.attn_transformer_param_count(byref(c))
        if n <= 0:
            _lib.call("attn_transformer_init", byref(c), None, 0)
        self.params = np.zeros(n, dtype=np.float32)
        self.grads = np.zeros(n, dtype=np.float32)
        need = _i64()
        _lib.call("attn_transformer_param_slices", byref(c), None, 0, byref(need))
        table = (ParamSlice * max(need.value, 1))()
        _lib.call("attn_transformer_param_slices", byref(c), table, need.value,
                  byref(need))
        self._slices = [(s.name.decode(), s.offset,
                         (s.shape[0],) if s.shape[1] == 1 else tuple(s.shape))
                        for s in table[:need.value]]
        self._saved = None
        self.task = None
        if seed is not None:
            _lib.call("attn_transformer_init", byref(c), self.params.ctypes.data,
                      int(seed))

    @property
    def decoder_only(self):
        return self.config.kind == 1

    def parameters(self):
        return {name: self.params[off:off + int(np.prod(shape))].reshape(shape)
                for name, off, shape in self._slices}

    def gradients(self):
        return {name: self.grads[off:off + int(np.prod(shape))].reshape(shape)
                for name, off, shape in self._slices}

    def zero_grad(self):
        self.grads[:] = 0
        return self

    def forward(self, src=None, tgt=None, *, src_key_padding_mask=None,
                src_lengths=None, train=False, seed=0, threads=None,
                return_cross_weights=False):
        """src (B, Ls) source ids (None for decoder-only), tgt (B, Lt) decoder
        inputs. Source padding: src_key_padding_mask (B, Ls), True = pad,
        or src_lengths (B,). Returns logits (B, Lt, tgt_vocab) and, when
        asked, the cross-attention (layers, B, heads, Lt, Ls)."""
        c = self.config
        t, single = _ids(tgt, "tgt", c.vocab_tgt)
        B, Lt = t.shape
        if self.decoder_only:
            s, Ls, lens = None, 1, None
        else:
            if src is None:
                fail(ATTN_E_INVALID, "an encoder-decoder needs src")
            s, _ = _ids(np.asarray(src)[None] if single else src, "src", c.vocab_src)
            if s.shape[0] != B:
                fail(ATTN_E_SHAPE, "src has batch %d, tgt %d", s.shape[0], B)
            Ls = s.shape[1]
            lens = (_padding_to_lengths(src_key_padding_mask, B, Ls)
                    if src_key_padding_mask is not None
                    else _lengths(src_lengths, B, Ls, "src_lengths"))
        opts = _layer_opts(self.dropout if train else 0.0, seed, "auto", threads)
        n = ctypes.c_size_t()
        _lib.call("attn_transformer_workspace_size", byref(c), B, Ls, Lt, byref(n))
        ws = np.empty(n.value, dtype=np.float32)
        logits = np.empty((B, Lt, c.vocab_tgt), dtype=np.float32)
        Hc = _lib.lib.attn_decoder_cross_heads(byref(c.dec))
        w = (np.empty((c.dec.num_layers, B, Hc, Lt, Ls), dtype=np.float32)
             if return_cross_weights and not self.decoder_only else None)
        _lib.call("attn_transformer_forward", byref(c), self.params.ctypes.data, B,
                  Ls, ptr_of(s), ptr_of(lens), Lt, t.ctypes.data, byref(opts),
                  logits.ctypes.data, ptr_of(w), ws.ctypes.data)
        self._saved = (s, lens, t, opts, ws, single, Ls)
        return _unbatch(logits, w, single, return_cross_weights)

    __call__ = forward

    def backward(self, dlogits):
        """Adds the gradients of all parameters into .grads."""
        if self._saved is None:
            fail(ATTN_E_INVALID, "backward needs a forward first")
        s, lens, t, opts, ws, single, Ls = self._saved
        B, Lt = t.shape
        g = np.ascontiguousarray(dlogits, dtype=np.float32).reshape(
            B, Lt, self.config.vocab_tgt)
        _lib.call("attn_transformer_backward", byref(self.config),
                  self.params.ctypes.data, B, Ls, ptr_of(s), ptr_of(lens), Lt,
                  t.ctypes.data, byref(opts), g.ctypes.data, ws.ctypes.data,
                  self.grads.ctypes.data)

    @staticmethod
    def cross_entropy(logits, targets, label_smoothing=0.0, ignore_index=-1):
        """Mean cross-entropy over targets != ignore_index and its gradient
        d loss / d logits (the C function: label smoothing as PyTorch's)."""
        z = np.ascontiguousarray(logits, dtype=np.float32)
        V = z.shape[-1]
        y = np.ascontiguousarray(targets, dtype=np.int32).reshape(-1)
        if y.shape[0] * V != z.size:
            fail(ATTN_E_SHAPE, "targets have %d entries for %d rows of logits",
                 y.shape[0], z.size // V)
        dz = np.empty_like(z)
        loss = ctypes.c_double()
        _lib.call("attn_cross_entropy_smoothed", y.shape[0], V, z.ctypes.data,
                  y.ctypes.data, int(ignore_index), float(label_smoothing),
                  byref(loss), dz.ctypes.data, None, None)
        return loss.value, dz

    def generate(self, src, src_lengths=None, *, max_len=0, beam=1,
                 length_penalty=0.0, sample=False, temperature=1.0, top_k=0,
                 top_p=1.0, seed=0, threads=None, use_cache=True,
                 bos_id=BOS, eos_id=EOS):
        """Decodes src (B, Ls) source ids (decoder-only: prompts, each ending
        where its length says) greedily, by sampling or by beam search.
        Returns (tokens list of B int32 arrays without EOS, scores (B,))."""
        c = self.config
        vocab = c.vocab_tgt if self.decoder_only else c.vocab_src
        s, single = _ids(src, "src", vocab)
        B, Ls = s.shape
        lens = _lengths(src_lengths, B, Ls, "src_lengths")
        o = GenerateOpts()
        _lib.lib.attn_generate_opts_init(byref(o))
        o.max_len = int(max_len)
        o.beam = count_arg("beam", beam)
        o.length_penalty = float(length_penalty)
        o.sample = 1 if sample else 0
        o.temperature = float(temperature)
        o.top_k = int(top_k)
        o.top_p = float(top_p)
        o.seed = int(seed)
        o.threads = 0 if threads is None else count_arg("threads", threads)
        o.recompute = 0 if use_cache else 1
        o.bos_id = int(bos_id)
        o.eos_id = int(eos_id)
        cap = c.max_tgt
        out = np.zeros((B, cap), dtype=np.int32)
        n = np.zeros(B, dtype=np.int64)
        sc = np.zeros(B, dtype=np.float64)
        _lib.call("attn_generate", byref(c), self.params.ctypes.data, B, Ls,
                  s.ctypes.data, ptr_of(lens), byref(o), out.ctypes.data, cap,
                  n.ctypes.data, sc.ctypes.data)
        toks = [out[b, :n[b]].copy() for b in range(B)]
        return (toks[0], sc[0]) if single else (toks, sc)

    def generate_text(self, texts, **kw):
        """For a model loaded from a generation checkpoint: the generated
        strings for source strings (the task's characters), with the
        keywords of generate."""
        if self.task is None:
            fail(ATTN_E_INVALID, "generate_text needs a model loaded from a "
                 "generation checkpoint (it knows the task's characters)")
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        kind = self.config.kind
        rows, lens = [], []
        for t in texts:
            ids = np.zeros(256, dtype=np.int32)
            n = _i64()
            _lib.call("attn_gen_input", byref(self._task), kind,
                      _lib.utf8(t, "texts"), ids.ctypes.data, 256, byref(n))
            rows.append(ids[:n.value])
            lens.append(n.value)
        L = max(lens)
        src = np.zeros((len(rows), L), dtype=np.int32)
        for b, r in enumerate(rows):
            src[b, :len(r)] = r
        toks, _ = self.generate(src, np.array(lens), **kw)
        side = 2 if self.decoder_only else 1
        out = []
        for t in toks:
            buf = ctypes.create_string_buffer(256)
            t = np.ascontiguousarray(t, dtype=np.int32)
            _lib.call("attn_gen_decode", byref(self._task), side,
                      t.ctypes.data if t.size else None, t.size, buf, 256)
            out.append(buf.value.decode())
        return out[0] if single else out

    def save(self, path):
        _lib.call("attn_transformer_save", os.fsencode(path), byref(self.config),
                  self.params.ctypes.data)
        return path

    @classmethod
    def load(cls, path):
        """A model saved by save(), or the model of a generation training
        checkpoint (attn train date ...; .task is then its task name)."""
        with open(path, "rb") as f:
            magic = f.read(8)
        self = cls.__new__(cls)
        if magic == b"ATTNGENM":
            tr = _vp()
            _lib.call("attn_gen_trainer_load", os.fsencode(path), byref(tr))
            try:
                # attn_gen_train_config starts with the task (an
                # attn_gen_task), then the model config (8-byte aligned)
                base = _lib.lib.attn_gen_trainer_config(tr)
                task_kind = ctypes.c_int.from_address(base).value
                self._task = GenTask()
                ctypes.memmove(byref(self._task), base, ctypes.sizeof(GenTask))
                off = _lib.lib.attn_sizeof(b"attn_gen_task")
                off = (off + 7) // 8 * 8
                cfg = TransformerConfig.from_address(base + off)
                c = TransformerConfig()
                ctypes.memmove(byref(c), byref(cfg), ctypes.sizeof(c))
                self.dropout = 0.0
                self._setup(c, None)
                ctypes.memmove(self.params.ctypes.data,
                               _lib.lib.attn_gen_trainer_params(tr),
                               self.params.nbytes)
                self.task = ("date", "reverse", "sort", "add")[task_kind]
            finally:
                _lib.lib.attn_gen_trainer_free(tr)
            return self
        c = TransformerConfig()
        block = _pf()
        _lib.call("attn_transformer_load", os.fsencode(path), byref(c), byref(block))
        try:
            self.dropout = 0.0
            self._setup(c, None)
            ctypes.memmove(self.params.ctypes.data, block, self.params.nbytes)
        finally:
            _lib.lib.attn_params_free(block)
        return self
