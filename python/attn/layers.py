"""The C layers as Python objects: AdditiveAttention, MultiHeadAttention,
EncoderLayer (a stack of encoder layers), and additive_attention as a
function.

Each object owns its parameters as ONE float32 block (``.params``) with a
gradient block of the same layout (``.grads``); ``.parameters()`` and
``.gradients()`` give named NumPy views into them (matrices are
(out_features, in_features), as nn.Linear). ``forward`` keeps what
``backward`` needs; ``backward(dout)`` ADDS into ``.grads`` (``zero_grad()``
clears them) and returns the gradients of the inputs. ``save(path)`` and
``Class.load(path)`` use libattn's parameter files (docs/params-format.md).

Activations are batch-first float32: (B, L, features), or (L, features)
for one sequence. The mask arguments mean what they mean in
scaled_dot_product_attention, over the scores (B, H, Lq, Lk) -- except in
MultiHeadAttention, which follows torch.nn.MultiheadAttention (its name):
(L, N, E) unless batch_first=True, masks True = not allowed, (out,
weights) returned.
"""

import ctypes
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import (ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_SHAPE,
                   ATTN_E_UNSUPPORTED, fail, shape_str)
from ._masks import IMPLS, MaskArgs, torch_mha_mask

_i64 = ctypes.c_int64
_pf = ctypes.POINTER(ctypes.c_float)


class ParamSlice(_lib.Struct):
    _fields_ = [("name", ctypes.c_char * 48), ("offset", _i64),
                ("shape", _i64 * 2), ("init", ctypes.c_int)]


class AdditiveConfig(_lib.Struct):
    _fields_ = [("query_dim", _i64), ("key_dim", _i64), ("value_dim", _i64),
                ("attn_dim", _i64), ("bias", ctypes.c_int),
                ("context_from_keys", ctypes.c_int)]


class MhaConfig(_lib.Struct):
    _fields_ = [("d_model", _i64), ("num_heads", _i64), ("num_kv_heads", _i64),
                ("kdim", _i64), ("vdim", _i64), ("bias", ctypes.c_int)]


class EncoderConfig(_lib.Struct):
    _fields_ = [("num_layers", _i64), ("d_model", _i64), ("num_heads", _i64),
                ("num_kv_heads", _i64), ("dim_feedforward", _i64),
                ("attention", ctypes.c_int), ("additive_dim", _i64),
                ("activation", ctypes.c_int), ("norm_first", ctypes.c_int),
                ("final_norm", ctypes.c_int), ("layer_norm_eps", ctypes.c_double)]


_lib.MIRRORED.update({"attn_param_slice": ParamSlice,
                      "attn_additive_config": AdditiveConfig,
                      "attn_mha_config": MhaConfig,
                      "attn_encoder_config": EncoderConfig})

_OPTS = ctypes.POINTER(_lib.SdpaOpts)
_szp = ctypes.POINTER(ctypes.c_size_t)
_vp = ctypes.c_void_p


def _declare_kind(kind, cfg):
    C = ctypes.POINTER(cfg)
    d = _lib.lib.declare
    d("attn_%s_param_count" % kind, _i64, [C])
    d("attn_%s_param_slices" % kind, ctypes.c_int,
      [C, ctypes.c_char_p, _i64, ctypes.POINTER(ParamSlice), _i64,
       ctypes.POINTER(_i64)])
    d("attn_%s_init" % kind, ctypes.c_int, [C, _vp, ctypes.c_uint64])
    d("attn_%s_save" % kind, ctypes.c_int, [ctypes.c_char_p, C, _vp])
    d("attn_%s_load" % kind, ctypes.c_int,
      [ctypes.c_char_p, C, ctypes.POINTER(_pf)])


for _k, _c in (("additive", AdditiveConfig), ("mha", MhaConfig),
               ("encoder", EncoderConfig)):
    _declare_kind(_k, _c)
_d = _lib.lib.declare
_d("attn_params_free", None, [_vp])
_d("attn_additive_out_dim", _i64, [ctypes.POINTER(AdditiveConfig)])
_d("attn_additive_workspace_size", ctypes.c_int,
   [ctypes.POINTER(AdditiveConfig), _i64, _i64, _i64, _szp])
_d("attn_additive_forward", ctypes.c_int,
   [ctypes.POINTER(AdditiveConfig), _vp, _i64, _i64, _i64, _vp, _vp, _vp, _OPTS,
    _vp, _vp, _vp])
_d("attn_additive_backward", ctypes.c_int,
   [ctypes.POINTER(AdditiveConfig), _vp, _i64, _i64, _i64, _vp, _vp, _vp, _OPTS,
    _vp, _vp, _vp, _vp, _vp, _vp])
_d("attn_mha_workspace_size", ctypes.c_int,
   [ctypes.POINTER(MhaConfig), _i64, _i64, _i64, _szp])
_d("attn_mha_forward", ctypes.c_int,
   [ctypes.POINTER(MhaConfig), _vp, _i64, _i64, _i64, _vp, _vp, _vp, _OPTS,
    _vp, _vp, ctypes.c_int, _vp])
_d("attn_mha_backward", ctypes.c_int,
   [ctypes.POINTER(MhaConfig), _vp, _i64, _i64, _i64, _vp, _vp, _vp, _OPTS,
    _vp, _vp, _vp, _vp, _vp, _vp])
_d("attn_encoder_config_init", None, [ctypes.POINTER(EncoderConfig)])
_d("attn_encoder_workspace_size", ctypes.c_int,
   [ctypes.POINTER(EncoderConfig), _i64, _i64, _szp])
_d("attn_encoder_weight_heads", _i64, [ctypes.POINTER(EncoderConfig)])
_d("attn_encoder_forward", ctypes.c_int,
   [ctypes.POINTER(EncoderConfig), _vp, _i64, _i64, _vp, _OPTS, _vp, _vp, _vp])
_d("attn_encoder_backward", ctypes.c_int,
   [ctypes.POINTER(EncoderConfig), _vp, _i64, _i64, _vp, _OPTS, _vp, _vp, _vp,
    _vp])
_lib.lib.check_layout()


def ptr_of(a):
    return None if a is None else a.ctypes.data


def count_arg(name, v, minimum=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        fail(ATTN_E_INVALID, "%s is %r; an integer >= %d is needed", name, v, minimum)
    return int(v)


def activation_array(x, name, features):
    """x as a contiguous float32 (B, L, features) array and whether it was
    one sequence (L, features)."""
    a = np.asarray(x)
    if a.dtype.kind != "f":
        fail(ATTN_E_DTYPE, "%s has dtype %s; a float array is needed", name, a.dtype)
    single = a.ndim == 2
    if single:
        a = a[None]
    if a.ndim != 3:
        fail(ATTN_E_SHAPE, "%s has shape %s; (B, L, %d) or (L, %d) is needed",
             name, shape_str(np.shape(x)), features, features)
    if a.shape[2] != features:
        fail(ATTN_E_SHAPE, "%s has %d features (last axis) but the layer takes %d",
             name, a.shape[2], features)
    if 0 in a.shape:
        fail(ATTN_E_SHAPE, "%s has an empty axis (shape %s)", name,
             shape_str(np.shape(x)))
    return _lib.c_array(a, dtype=np.float32), single


def _opts(B, H, Lq, Lk, attn_mask, is_causal, causal_alignment, window,
          key_lengths, query_lengths, dropout_p, seed, scale, impl, threads):
    """attn_layer_opts (= attn_sdpa_opts) for scores (B, H, Lq, Lk)."""
    o = _lib.SdpaOpts()
    _lib.lib.attn_sdpa_opts_init(byref(o))
    keep = MaskArgs(o.mask, (B, H, Lq, Lk), (0, 1, 2, 3), B, attn_mask, is_causal,
                    causal_alignment, window, key_lengths, query_lengths)
    o.dropout_p = _lib.dropout_p(dropout_p, "dropout_p")
    if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
        fail(ATTN_E_INVALID, "seed is %r; an integer in [0, 2**64) is needed", seed)
    o.seed = int(seed)
    if scale is not None:
        s = float(scale)
        if not (s > 0 and np.isfinite(s)):
            fail(ATTN_E_INVALID, "scale is %r; it must be positive and finite", scale)
        o.scale = s
    if impl not in IMPLS:
        fail(ATTN_E_INVALID, "impl is %r; one of 'auto', 'ref', 'flash', 'flash_bf16'", impl)
    o.impl = IMPLS[impl]
    o.threads = 0 if threads is None else count_arg("threads", threads)
    return o, keep


@_lib.nomem_class
class Layer:
    """Parameter block, named views, workspace, save and load."""

    kind = None
    config_type = None

    def _setup(self, cfg, seed):
        self.config = cfg
        n = getattr(_lib.lib, "attn_%s_param_count" % self.kind)
        if n is None:
            fail(_lib.ATTN_E_UNSUPPORTED, "this libattn build has no %s layer "
                 "(%s)", self.kind, _lib.lib.path)
        count = n(byref(cfg))
        if count <= 0:
            # an invalid config: the init call reports why
            _lib.call("attn_%s_init" % self.kind, byref(cfg), None, 0)
        self.params = np.zeros(count, dtype=np.float32)
        self.grads = np.zeros(count, dtype=np.float32)
        self._slices = self._slice_table()
        self._saved = None
        if seed is not None:
            self.init(seed)

    def _slice_table(self):
        fn = "attn_%s_param_slices" % self.kind
        need = _i64()
        _lib.call(fn, byref(self.config), b"", 0, None, 0, byref(need))
        table = (ParamSlice * max(need.value, 1))()
        _lib.call(fn, byref(self.config), b"", 0, table, need.value, byref(need))
        out = []
        for s in table[:need.value]:
            shape = (s.shape[0],) if s.shape[1] == 1 else (s.shape[0], s.shape[1])
            out.append((s.name.decode(), s.offset, shape))
        return out

    def _views(self, block):
        return {name: block[off:off + int(np.prod(shape))].reshape(shape)
                for name, off, shape in self._slices}

    def parameters(self):
        """Named views into .params: {"w_q": (out, in) array, ...}."""
        return self._views(self.params)

    def gradients(self):
        """Named views into .grads, as parameters()."""
        return self._views(self.grads)

    def init(self, seed):
        """Xavier-uniform matrices, zero biases, unit LayerNorm gains, drawn
        from seed (the same on any thread count)."""
        _lib.call("attn_%s_init" % self.kind, byref(self.config),
                  self.params.ctypes.data, int(seed))
        return self

    def zero_grad(self):
        self.grads[:] = 0
        return self

    def save(self, path):
        """Writes the parameters with the config (atomic, CRC-checked)."""
        _lib.call("attn_%s_save" % self.kind, _lib.fspath(path),
                  byref(self.config), self.params.ctypes.data)
        return path

    @classmethod
    def load(cls, path):
        """A layer with the config and parameters of a file that save wrote."""
        cfg = cls.config_type()
        block = _pf()
        _lib.call("attn_%s_load" % cls.kind, _lib.fspath(path), byref(cfg),
                  byref(block))
        try:
            self = cls.__new__(cls)
            self._setup(cfg, None)
            ctypes.memmove(self.params.ctypes.data, block, self.params.nbytes)
        finally:
            _lib.lib.attn_params_free(block)
        return self

    def _workspace(self, fn, *dims):
        n = ctypes.c_size_t()
        _lib.call(fn, byref(self.config), *dims, byref(n))
        return np.empty(n.value, dtype=np.float32)

    def _need_forward(self):
        if self._saved is None:
            fail(ATTN_E_INVALID, "backward needs a forward first (it reads what "
                 "forward saved)")

    def _dout(self, dout, a):
        """dout as float32 activations of the output a's shape."""
        g, _ = activation_array(dout, "dout", self.config.d_model)
        if g.shape != a.shape:
            fail(ATTN_E_SHAPE, "dout has shape %s but the output has %s",
                 shape_str(g.shape), shape_str(a.shape))
        return g


def _mask_kw(kw):
    """The mask/option keywords a layer's forward accepts, with defaults."""
    allowed = dict(attn_mask=None, is_causal=False, causal_alignment="top-left",
                   window=None, key_lengths=None, query_lengths=None,
                   dropout_p=0.0, seed=0, scale=None, impl="auto", threads=None)
    for k in kw:
        if k not in allowed:
            raise TypeError("unexpected keyword argument %r" % k)
    allowed.update(kw)
    return allowed


@_lib.nomem_class
class AdditiveAttention(Layer):
    """Additive (Bahdanau) attention: score(i, j) = v . tanh(W_q q_i + b_q +
    W_k k_j + b_k); context = weights @ values (or @ projected keys with
    context_from_keys)."""

    kind = "additive"
    config_type = AdditiveConfig

    def __init__(self, query_dim, key_dim, attn_dim, value_dim=None, bias=True,
                 context_from_keys=False, seed=0):
        cfg = AdditiveConfig()
        cfg.query_dim = count_arg("query_dim", query_dim)
        cfg.key_dim = count_arg("key_dim", key_dim)
        cfg.attn_dim = count_arg("attn_dim", attn_dim)
        cfg.value_dim = 0 if value_dim is None else count_arg("value_dim", value_dim)
        if value_dim is None and not context_from_keys:
            cfg.value_dim = cfg.key_dim
        cfg.bias = 1 if bias else 0
        cfg.context_from_keys = 1 if context_from_keys else 0
        self._setup(cfg, seed)

    @property
    def out_dim(self):
        return _lib.lib.attn_additive_out_dim(byref(self.config))

    def forward(self, query, key, value=None, *, return_weights=False, **kw):
        """query (B, Lq, Dq), key (B, Lk, Dk), value (B, Lk, Dv) (omitted
        with context_from_keys). Returns the context (B, Lq, out_dim), and
        the weights (B, Lq, Lk) when asked."""
        c = self.config
        q, single = activation_array(query, "query", c.query_dim)
        k, _ = activation_array(key, "key", c.key_dim)
        if c.context_from_keys:
            if value is not None:
                fail(ATTN_E_INVALID, "value is given but context_from_keys is set")
            v = None
        else:
            if value is None:
                fail(ATTN_E_INVALID, "value is needed (context_from_keys is not set)")
            v, _ = activation_array(value, "value", c.value_dim)
            if v.shape[:2] != k.shape[:2]:
                fail(ATTN_E_SHAPE, "value %s and key %s differ in batch or length",
                     shape_str(v.shape), shape_str(k.shape))
        if q.shape[0] != k.shape[0]:
            fail(ATTN_E_SHAPE, "batch sizes differ: query has %d, key has %d",
                 q.shape[0], k.shape[0])
        B, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
        kw = _mask_kw(kw)
        opts, keep = _opts(B, 1, Lq, Lk, **kw)
        ws = self._workspace("attn_additive_workspace_size", B, Lq, Lk)
        out = np.empty((B, Lq, self.out_dim), dtype=np.float32)
        w = np.empty((B, Lq, Lk), dtype=np.float32) if return_weights else None
        _lib.call("attn_additive_forward", byref(c), self.params.ctypes.data, B,
                  Lq, Lk, q.ctypes.data, k.ctypes.data, ptr_of(v), byref(opts),
                  out.ctypes.data, ptr_of(w), ws.ctypes.data)
        self._saved = (q, k, v, opts, keep, ws, single)
        out = out[0] if single else out
        if return_weights:
            return out, (w[0] if single else w)
        return out

    __call__ = forward

    def backward(self, dout):
        """Adds the parameter gradients into .grads; returns (dquery, dkey,
        dvalue) (dvalue None with context_from_keys)."""
        self._need_forward()
        q, k, v, opts, keep, ws, single = self._saved
        B, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
        g, _ = activation_array(dout, "dout", self.out_dim)
        if g.shape[:2] != (B, Lq):
            fail(ATTN_E_SHAPE, "dout has shape %s but the output has (%d, %d, %d)",
                 shape_str(g.shape), B, Lq, self.out_dim)
        dq, dk = np.zeros_like(q), np.zeros_like(k)
        dv = None if v is None else np.zeros_like(v)
        _lib.call("attn_additive_backward", byref(self.config),
                  self.params.ctypes.data, B, Lq, Lk, q.ctypes.data, k.ctypes.data,
                  ptr_of(v), byref(opts), g.ctypes.data, ws.ctypes.data,
                  self.grads.ctypes.data, dq.ctypes.data, dk.ctypes.data, ptr_of(dv))
        if single:
            return dq[0], dk[0], None if dv is None else dv[0]
        return dq, dk, dv


@_lib.nomem
def additive_attention(query, key, value=None, *, w_q, w_k, v, b_q=None, b_k=None,
                       return_weights=False, **kw):
    """Additive attention as a function of its parameter arrays: w_q (A, Dq),
    w_k (A, Dk), v (A,) or (1, A), b_q and b_k (A,) or None (no bias). value None
    takes the context from the projected keys (the tutorial's variant).
    Other keywords as AdditiveAttention.forward."""
    w_q, w_k, vv = (np.asarray(a, dtype=np.float32) for a in (w_q, w_k, v))
    if vv.ndim == 2 and vv.shape[0] == 1:  # v as a (1, A) matrix, as stored
        vv = vv[0]
    if w_q.ndim != 2 or w_k.ndim != 2 or vv.ndim != 1:
        fail(ATTN_E_SHAPE, "w_q (A, Dq), w_k (A, Dk) and v (A,) are needed; got "
             "%s, %s and %s", shape_str(w_q.shape), shape_str(w_k.shape),
             shape_str(vv.shape))
    A = w_q.shape[0]
    if w_k.shape[0] != A or vv.shape[0] != A:
        fail(ATTN_E_SHAPE, "w_q, w_k and v disagree on the hidden size: %d, %d, %d",
             A, w_k.shape[0], vv.shape[0])
    if (b_q is None) != (b_k is None):
        fail(ATTN_E_INVALID, "give both b_q and b_k, or neither")
    Dv = np.shape(value)[-1] if value is not None else None
    layer = AdditiveAttention(w_q.shape[1], w_k.shape[1], A, value_dim=Dv,
                              bias=b_q is not None,
                              context_from_keys=value is None, seed=None)
    p = layer.parameters()
    p["w_q"][:] = w_q
    p["w_k"][:] = w_k
    p["v"][:] = vv
    if b_q is not None:
        for name, b in (("b_q", b_q), ("b_k", b_k)):
            b = np.asarray(b, dtype=np.float32)
            if b.shape != (A,):
                fail(ATTN_E_SHAPE, "%s has shape %s; (%d,) is needed", name,
                     shape_str(b.shape), A)
            p[name][:] = b
    return layer.forward(query, key, value, return_weights=return_weights, **kw)


def _layout(x, name, batch_first):
    """x in the layout the layer was made for: batch-first (N, L, E) or
    PyTorch's default (L, N, E); (L, E) is one sequence either way. Returns
    the batch-first view (a copy only where C needs one later)."""
    a = np.asarray(x)
    if not batch_first and a.ndim == 3:
        return np.swapaxes(a, 0, 1)
    return a


# the extras of MultiHeadAttention.forward (attn's, beyond PyTorch's)
_MHA_EXTRAS = dict(causal_alignment="top-left", window=None, key_lengths=None,
                   query_lengths=None, seed=0, scale=None, impl="auto",
                   threads=None)


@_lib.nomem_class
class MultiHeadAttention(Layer):
    """torch.nn.MultiheadAttention on libattn, with its arguments, their
    meanings and defaults: inputs (L, N, E) by default, (N, L, E) with
    batch_first=True, (L, E) for one sequence; a bool attn_mask or
    key_padding_mask marks with True what may NOT be attended (a float one
    is added to the scores); forward returns (output, weights), the
    weights averaged over heads unless average_attn_weights=False, None
    with need_weights=False. dropout applies to the weights in training
    mode (the default of a module, as PyTorch's; eval() turns it off).
    MultiheadAttention is the same class under PyTorch's spelling.

    attn's extras (keyword only): num_kv_heads < num_heads groups the key
    and value heads (grouped-query attention); seed draws the parameters
    (Xavier, zero biases; None leaves them zero) and is the dropout seed
    of forward; backward(dout) gives the gradients (see backward).
    add_bias_kv and add_zero_attn are refused (ATTN_E_UNSUPPORTED).
    Parameters: .parameters() with attn's names (w_q, w_k, w_v, w_o, b_q,
    ...), state_dict()/load_state_dict() with PyTorch's (in_proj_weight,
    out_proj.weight, ...)."""

    kind = "mha"
    config_type = MhaConfig
    # what a layer loaded from a file starts with (as a new one)
    dropout = 0.0
    batch_first = False
    training = True

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True,
                 add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None,
                 batch_first=False, device=None, dtype=None, *,
                 num_kv_heads=None, seed=0):
        if add_bias_kv or add_zero_attn:
            fail(ATTN_E_UNSUPPORTED, "add_bias_kv and add_zero_attn are not "
                 "supported by attn's multi-head attention (both must be False)")
        _lib.check_cpu_f32(device, dtype, "layers")
        self.dropout = _lib.dropout_p(dropout, "dropout")
        self.batch_first = bool(batch_first)
        self.training = True
        cfg = MhaConfig()
        cfg.d_model = count_arg("embed_dim", embed_dim)
        cfg.num_heads = count_arg("num_heads", num_heads)
        cfg.num_kv_heads = 0 if num_kv_heads is None else count_arg("num_kv_heads",
                                                                    num_kv_heads)
        cfg.kdim = 0 if kdim is None else count_arg("kdim", kdim)
        cfg.vdim = 0 if vdim is None else count_arg("vdim", vdim)
        cfg.bias = 1 if bias else 0
        self._setup(cfg, seed)

    @property
    def embed_dim(self):
        return self.config.d_model

    @property
    def num_heads(self):
        return self.config.num_heads

    def train(self, mode=True):
        """Training mode (dropout on), as a PyTorch module; returns self."""
        self.training = bool(mode)
        return self

    def eval(self):
        """Evaluation mode (dropout off); returns self."""
        return self.train(False)

    def forward(self, query, key=None, value=None, key_padding_mask=None,
                need_weights=True, attn_mask=None, average_attn_weights=True,
                is_causal=False, **kw):
        """query (L, N, E) ((N, L, E) with batch_first; (L, E) unbatched),
        key (S, N, kdim), value (S, N, vdim); key and value omitted:
        self-attention on query (attn's extra). Masks as PyTorch's:
        attn_mask (L, S) or (N * num_heads, L, S), key_padding_mask (N, S),
        bool True = not allowed, float = added; is_causal applies the
        causal mask (PyTorch also wants it given as attn_mask; given, both
        apply). Returns (out, weights): out shaped like query with
        embed_dim features, weights (N, L, S) averaged over heads or
        (N, num_heads, L, S), unbatched without N; weights None when
        need_weights=False. A row that may attend to nothing gives zeros
        (PyTorch gives NaN). attn's extras: causal_alignment, window,
        key_lengths, query_lengths (one per batch entry), scale, impl,
        threads, seed (of dropout)."""
        for k in kw:
            if k not in _MHA_EXTRAS:
                raise TypeError("forward() got an unexpected keyword argument %r"
                                % k)
        extra = dict(_MHA_EXTRAS, **kw)
        c = self.config
        E, H = c.d_model, c.num_heads
        bf = self.batch_first
        q, single = activation_array(_layout(query, "query", bf), "query", E)
        kdim, vdim = c.kdim or E, c.vdim or E
        # one array given as several inputs (x, x, x as PyTorch's
        # self-attention) is one input: one gradient
        if key is None or (key is query and (value is None or value is key)):
            if key is None and value is not None:
                fail(ATTN_E_INVALID, "value is given without key")
            k = v = q
        else:
            k, _ = activation_array(_layout(key, "key", bf), "key", kdim)
            if value is None or value is key:
                if vdim != kdim:
                    fail(ATTN_E_INVALID, "value is needed: vdim %d differs from "
                         "kdim %d", vdim, kdim)
                v = k
            else:
                v, _ = activation_array(_layout(value, "value", bf), "value", vdim)
        if not (q.shape[0] == k.shape[0] == v.shape[0]) or k.shape[1] != v.shape[1]:
            fail(ATTN_E_SHAPE, "query %s, key %s and value %s disagree on batch or "
                 "length", shape_str(q.shape), shape_str(k.shape),
                 shape_str(v.shape))
        B, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
        mask = torch_mha_mask(attn_mask, key_padding_mask, B, H, Lq, Lk,
                              not single)
        p = self.dropout if self.training else 0.0
        opts, keep = _opts(B, H, Lq, Lk, mask, is_causal,
                           extra["causal_alignment"], extra["window"],
                           extra["key_lengths"], extra["query_lengths"], p,
                           extra["seed"], extra["scale"], extra["impl"],
                           extra["threads"])
        ws = self._workspace("attn_mha_workspace_size", B, Lq, Lk)
        out = np.empty((B, Lq, E), dtype=np.float32)
        avg = bool(average_attn_weights)
        w = None
        if need_weights:
            w = np.empty((B, Lq, Lk) if avg else (B, H, Lq, Lk), dtype=np.float32)
        _lib.call("attn_mha_forward", byref(c), self.params.ctypes.data, B, Lq, Lk,
                  q.ctypes.data, k.ctypes.data, v.ctypes.data, byref(opts),
                  out.ctypes.data, ptr_of(w), 1 if avg else 0, ws.ctypes.data)
        self._saved = (q, k, v, opts, keep, ws, single)
        if single:
            out, w = out[0], (None if w is None else w[0])
        elif not bf:
            out = np.ascontiguousarray(np.swapaxes(out, 0, 1))
        return out, w

    __call__ = forward

    def backward(self, dout):
        """Adds the parameter gradients into .grads; returns one gradient
        per input given to forward (in the inputs' layout), so that none is
        counted twice: self-attention (key and value omitted, or the query
        array itself given as key and value) returns dx, the gradient of
        the single input (its query, key and value parts summed); key given
        without value (or the key array given again as value) returns
        (dquery, dkey); three arrays give (dquery, dkey, dvalue)."""
        self._need_forward()
        q, k, v, opts, keep, ws, single = self._saved
        B, Lq, Lk = q.shape[0], q.shape[1], k.shape[1]
        bf = self.batch_first
        g, _ = activation_array(_layout(dout, "dout", bf), "dout",
                                self.config.d_model)
        if g.shape[:2] != (B, Lq):
            fail(ATTN_E_SHAPE, "dout has shape %s but the output has %s",
                 shape_str(np.shape(dout)), shape_str(
                     (Lq, self.config.d_model) if single else
                     (B, Lq, self.config.d_model) if bf else
                     (Lq, B, self.config.d_model)))
        # aliased inputs share one gradient buffer (the C adds each part)
        dq = np.zeros_like(q)
        dk = dq if k is q else np.zeros_like(k)
        dv = dq if v is q else (dk if v is k else np.zeros_like(v))
        _lib.call("attn_mha_backward", byref(self.config), self.params.ctypes.data,
                  B, Lq, Lk, q.ctypes.data, k.ctypes.data, v.ctypes.data,
                  byref(opts), g.ctypes.data, ws.ctypes.data,
                  self.grads.ctypes.data, dq.ctypes.data, dk.ctypes.data,
                  dv.ctypes.data)
        if single:
            dq, dk, dv = dq[0], dk[0], dv[0]
        elif not bf:
            dq, dk, dv = (np.ascontiguousarray(np.swapaxes(a, 0, 1))
                          for a in (dq, dk, dv))
        if k is q:
            return dq
        if v is k:
            return dq, dk
        return dq, dk, dv

    @classmethod
    def load(cls, path, batch_first=False, dropout=0.0):
        """A layer with the config and parameters of a file that save
        wrote (the layout and dropout are not stored: give them here)."""
        self = super().load(path)
        self.batch_first = bool(batch_first)
        self.dropout = _lib.dropout_p(dropout, "dropout")
        return self

    def torch_names(self):
        """PyTorch's parameter names -> attn's parameters they hold (several
        stacked along axis 0 for in_proj_*)."""
        c = self.config
        E = c.d_model
        packed = (c.kdim in (0, E) and c.vdim in (0, E) and
                  c.num_kv_heads in (0, c.num_heads))
        names = ({"in_proj_weight": ("w_q", "w_k", "w_v")} if packed else
                 {"q_proj_weight": ("w_q",), "k_proj_weight": ("w_k",),
                  "v_proj_weight": ("w_v",)})
        if c.bias:
            names["in_proj_bias"] = ("b_q", "b_k", "b_v")
        names["out_proj.weight"] = ("w_o",)
        if c.bias:
            names["out_proj.bias"] = ("b_o",)
        return names

    def state_dict(self):
        """The parameters under torch.nn.MultiheadAttention's names (copies,
        float32): in_proj_weight (3E, E) or q/k/v_proj_weight when kdim,
        vdim or num_kv_heads differ, in_proj_bias, out_proj.weight,
        out_proj.bias."""
        p = self.parameters()
        return {name: np.concatenate([p[a] for a in parts]) if len(parts) > 1
                else p[parts[0]].copy()
                for name, parts in self.torch_names().items()}

    def load_state_dict(self, state):
        """Copies parameters in from a dict with state_dict()'s names (NumPy
        arrays or anything np.asarray reads: a PyTorch state_dict's CPU
        tensors); every name is needed and no other is taken."""
        _load_named(self.parameters(), self.torch_names(), state, "")
        return self


MultiheadAttention = MultiHeadAttention


def _load_named(views, names, state, prefix):
    """Copies state[prefix + name] into the views its names list, split in
    equal parts along axis 0 when one name holds several (in_proj_*)."""
    want = {prefix + n for n in names}
    extra = sorted(set(state) - want) if prefix == "" else []
    missing = sorted(want - set(state))
    if missing or extra:
        fail(ATTN_E_INVALID, "load_state_dict: %s%s", "missing %s" % missing
             if missing else "", (" unexpected %s" % extra) if extra else "")
    for n, parts in names.items():
        a = np.asarray(state[prefix + n], dtype=np.float32)
        size = sum(views[p].shape[0] for p in parts)
        rest = views[parts[0]].shape[1:]
        if a.shape != (size,) + rest:
            fail(ATTN_E_SHAPE, "load_state_dict: %s has shape %s; %s is needed",
                 prefix + n, shape_str(a.shape), shape_str((size,) + rest))
        off = 0
        for p in parts:
            views[p][...] = a[off:off + views[p].shape[0]]
            off += views[p].shape[0]


ATTENTION_TYPES = {"dot": 0, "additive": 1}
ACTIVATIONS = {"relu": 0, "gelu": 1}


def set_size_args(cfg, num_layers, d_model, heads_name, num_heads,
                  num_kv_heads, dim_feedforward):
    """The sizes of the encoder and decoder configurations, checked (the
    heads under the caller's name for them) and set on cfg."""
    cfg.num_layers = count_arg("num_layers", num_layers)
    cfg.d_model = count_arg("d_model", d_model)
    cfg.num_heads = count_arg(heads_name, num_heads)
    cfg.num_kv_heads = 0 if num_kv_heads is None else count_arg("num_kv_heads",
                                                             num_kv_heads)
    cfg.dim_feedforward = count_arg("dim_feedforward", dim_feedforward)


def set_norm_args(cfg, activation, norm_first, final_norm, layer_norm_eps):
    """The activation and LayerNorm arguments of the encoder and decoder
    configurations, checked and set on cfg."""
    if activation not in ACTIVATIONS:
        fail(ATTN_E_INVALID, "activation is %r; 'relu' or 'gelu'", activation)
    cfg.activation = ACTIVATIONS[activation]
    cfg.norm_first = 1 if norm_first else 0
    cfg.final_norm = 1 if final_norm else 0
    eps = float(layer_norm_eps)
    if not (eps > 0 and np.isfinite(eps)):
        fail(ATTN_E_INVALID, "layer_norm_eps is %r; it must be positive",
             layer_norm_eps)
    cfg.layer_norm_eps = eps


@_lib.nomem_class
class EncoderLayer(Layer):
    """A Transformer encoder of num_layers layers (post-norm by default, as
    nn.TransformerEncoderLayer; norm_first for pre-norm), with dot-product
    or additive self-attention."""

    kind = "encoder"
    config_type = EncoderConfig

    def __init__(self, d_model, num_heads, dim_feedforward, num_layers=1, *,
                 num_kv_heads=None, attention="dot", additive_dim=None,
                 activation="relu", norm_first=False, final_norm=False,
                 layer_norm_eps=1e-5, seed=0):
        cfg = EncoderConfig()
        _lib.lib.attn_encoder_config_init(byref(cfg))
        set_size_args(cfg, num_layers, d_model, "num_heads", num_heads,
                      num_kv_heads, dim_feedforward)
        if attention not in ATTENTION_TYPES:
            fail(ATTN_E_INVALID, "attention is %r; 'dot' or 'additive'", attention)
        cfg.attention = ATTENTION_TYPES[attention]
        cfg.additive_dim = 0 if additive_dim is None else count_arg("additive_dim",
                                                                 additive_dim)
        set_norm_args(cfg, activation, norm_first, final_norm, layer_norm_eps)
        self._setup(cfg, seed)

    @property
    def weight_heads(self):
        return _lib.lib.attn_encoder_weight_heads(byref(self.config))

    def forward(self, x, *, return_weights=False, **kw):
        """x (B, L, E) (add positions first if wanted). Returns out
        (B, L, E), and every layer's weights (num_layers, B, Hw, L, L) when
        asked (Hw = num_heads, or 1 for additive attention)."""
        c = self.config
        a, single = activation_array(x, "x", c.d_model)
        B, L = a.shape[:2]
        Hw = self.weight_heads
        kw = _mask_kw(kw)
        opts, keep = _opts(B, Hw, L, L, **kw)
        ws = self._workspace("attn_encoder_workspace_size", B, L)
        out = np.empty_like(a)
        w = (np.empty((c.num_layers, B, Hw, L, L), dtype=np.float32)
             if return_weights else None)
        _lib.call("attn_encoder_forward", byref(c), self.params.ctypes.data, B, L,
                  a.ctypes.data, byref(opts), out.ctypes.data, ptr_of(w),
                  ws.ctypes.data)
        self._saved = (a, opts, keep, ws, single)
        out = out[0] if single else out
        if return_weights:
            return out, (w[:, 0] if single else w)
        return out

    __call__ = forward

    def backward(self, dout):
        """Adds the parameter gradients into .grads; returns dx."""
        self._need_forward()
        a, opts, keep, ws, single = self._saved
        B, L = a.shape[:2]
        g = self._dout(dout, a)
        dx = np.zeros_like(a)
        _lib.call("attn_encoder_backward", byref(self.config),
                  self.params.ctypes.data, B, L, a.ctypes.data, byref(opts),
                  g.ctypes.data, ws.ctypes.data, self.grads.ctypes.data,
                  dx.ctypes.data)
        return dx[0] if single else dx
