"""The mask and score-modifier keywords of the binding, in one place:
PyTorch-style arguments (attn_mask, is_causal) and attn's extras filled
into a C attn_mask (include/attn.h) by MaskArgs. KEYWORDS says which
attn_mask fields each keyword fills; every function that takes mask
keywords (scaled_dot_product_attention, sdpa_backward, sdpa_cached, the
layers, stats and the pictures) goes through MaskArgs."""

import ctypes

import numpy as np

from . import _lib
from ._lib import (ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_NONFINITE, ATTN_E_SHAPE,
                   ATTN_F32, ATTN_F64, ATTN_U8, fail, native, passable,
                   shape_str)

# keyword -> the attn_mask fields it fills (the counts n_* go with their
# arrays; sinks_grad is filled by sdpa_backward, not by a keyword)
KEYWORDS = {
    "attn_mask": ("keep", "bias"),
    "is_causal": ("causal",),
    "causal_alignment": ("align",),
    "window": ("window_left", "window_right"),
    "key_lengths": ("key_lengths",),
    "query_lengths": ("query_lengths",),
    "block_sparse": ("block_size", "layout", "layout_heads"),
    "random_blocks": ("random_block", "random_keep_p", "random_seed"),
    "softcap": ("softcap",),
    "alibi_slopes": ("alibi", "alibi_slopes", "n_alibi_slopes"),
    "alibi_mode": ("alibi",),
    "sinks": ("sinks", "n_sinks"),
    "doc_ids": ("doc_q", "n_doc_q", "doc_k", "n_doc_k"),
    "score_mod": ("bias",),
    "mask_mod": ("keep",),
}
# the mask's fields no keyword fills: the user functions and block mask of
# the C API (the binding turns mask_mod/score_mod into keep/bias arrays)
# and the gradient output of the sinks
NOT_KEYWORDS = ("score_mod", "score_ctx", "mask_mod", "mask_ctx", "block_mask",
                "sinks_grad")

IMPLS = {"auto": 0, "ref": 1, "flash": 2, "flash_bf16": 3}
ALIGNS = {"top-left": 0, "bottom-right": 1}


def lengths_arg(x, name, B, limit):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        fail(ATTN_E_DTYPE, "%s must hold integers, not %s", name, a.dtype)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1 or a.shape[0] != B:
        fail(ATTN_E_SHAPE, "%s has shape %s but the batch has %d entries "
             "(one length per batch entry is needed)", name, shape_str(a.shape), B)
    for b, n in enumerate(a.tolist()):
        if n < 0 or n > limit:
            fail(ATTN_E_SHAPE, "%s[%d] = %d is outside [0, %d]", name, b, n, limit)
    a = _lib.c_array(a, dtype=np.int64)
    return a, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


# The widest window C accepts (attn_mask_check); checked here on the Python
# integer, before ctypes could cut it to 64 bits.
_MAX_WINDOW = 1 << 61


def int_or_none(x, name):
    if x is None:
        return -1
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0:
        fail(ATTN_E_INVALID, "%s is %r; a count >= 0 or None (unbounded) is "
             "needed", name, x)
    if int(x) > _MAX_WINDOW:
        fail(ATTN_E_INVALID, "%s is %d; it must be at most 2**61 = %d (or None "
             "for unbounded)", name, int(x), _MAX_WINDOW)
    return int(x)


def _random_blocks(arg, m):
    """random_blocks=(block, keep_p, seed): block (h, i // block, j //
    block) kept with probability keep_p, drawn from seed (the same for every
    batch entry)."""
    if not isinstance(arg, (tuple, list)) or len(arg) != 3:
        fail(ATTN_E_INVALID, "random_blocks is %r; a triple (block, keep_p, "
             "seed) is needed", arg)
    block, p, seed = arg
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) \
            or not 1 <= int(block) < 2**63:
        fail(ATTN_E_INVALID, "random_blocks block is %r; an integer in [1, "
             "2**63) is needed", block)
    pf = _lib.as_float(p)
    if not 0.0 <= pf <= 1.0:
        fail(ATTN_E_INVALID, "random_blocks keep_p is %r; it must be in [0, 1]", p)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= int(seed) < 2**64:
        fail(ATTN_E_INVALID, "random_blocks seed is %r; an integer in [0, 2**64) "
             "is needed", seed)
    m.random_block = int(block)
    m.random_keep_p = pf
    m.random_seed = int(seed)


# Scores of the additivity check of score_mod (any fixed values that are
# not all equal do; drawn once, reproducibly).
def _probe_scores(shape):
    return np.random.default_rng(20261201).normal(0.0, 3.0, size=shape)


def user_functions(score_mod, mask_mod, C_shape, score_shape):
    """FlexAttention-style callables evaluated in NumPy over the index
    grids of the scores (C's (B, H, Lq, Lk)): mask_mod(b, h, q_idx, kv_idx)
    into a bool keep array, score_mod(score, b, h, q_idx, kv_idx) into an
    additive bias (it must be additive in score). Both come back shaped
    like the scores of the arrays (score_shape)."""
    B, H, Lq, Lk = C_shape
    b = np.arange(B).reshape(B, 1, 1, 1)
    h = np.arange(H).reshape(1, H, 1, 1)
    qi = np.arange(Lq).reshape(1, 1, Lq, 1)
    ki = np.arange(Lk).reshape(1, 1, 1, Lk)
    keep = bias = None
    if mask_mod is not None:
        if not callable(mask_mod):
            fail(ATTN_E_INVALID, "mask_mod is %r; a callable mask_mod(b, h, "
                 "q_idx, kv_idx) -> bool array is needed", mask_mod)
        r = np.asarray(mask_mod(b, h, qi, ki))
        if r.dtype != np.bool_ and r.dtype.kind not in "iu":
            fail(ATTN_E_DTYPE, "mask_mod returned dtype %s; bool (True = attend) "
                 "is needed", r.dtype)
        try:
            r = np.broadcast_to(r, C_shape)
        except ValueError:
            fail(ATTN_E_SHAPE, "mask_mod returned shape %s, which does not "
                 "broadcast to the scores (B, H, Lq, Lk) = %s",
                 shape_str(r.shape), shape_str(C_shape))
        keep = np.ascontiguousarray(r.astype(bool)).reshape(score_shape)
    if score_mod is not None:
        if not callable(score_mod):
            fail(ATTN_E_INVALID, "score_mod is %r; a callable score_mod(score, "
                 "b, h, q_idx, kv_idx) -> array is needed", score_mod)
        outs = []
        for s in (np.zeros(C_shape), _probe_scores(C_shape)):
            r = np.asarray(score_mod(s, b, h, qi, ki))
            if r.dtype.kind not in "fiu":
                fail(ATTN_E_DTYPE, "score_mod returned dtype %s; numbers are "
                     "needed", r.dtype)
            try:
                r = np.broadcast_to(r, C_shape).astype(np.float64)
            except ValueError:
                fail(ATTN_E_SHAPE, "score_mod returned shape %s, which does not "
                     "broadcast to the scores (B, H, Lq, Lk) = %s",
                     shape_str(r.shape), shape_str(C_shape))
            outs.append(r - s)
        b0, b1 = outs
        bad = np.isnan(b0) | (b0 == np.inf)
        if bad.any():
            at = tuple(int(x) for x in np.argwhere(bad)[0])
            fail(ATTN_E_NONFINITE, "score_mod gave %s at (b, h, q_idx, kv_idx) "
                 "= %s (only -inf may be given, to mask)",
                 "NaN" if np.isnan(b0[at]) else "+inf", at)
        same = (b0 == b1) | np.isclose(b0, b1, rtol=1e-9, atol=1e-9)
        if not same.all():
            at = tuple(int(x) for x in np.argwhere(~same)[0])
            fail(ATTN_E_INVALID, "score_mod is not additive in the score: "
                 "score_mod(s) - s changes with s (at (b, h, q_idx, kv_idx) = "
                 "%s: %g at s = 0, %g at s = %g). The binding turns score_mod "
                 "into a bias; use softcap= for soft-capping, or the C API "
                 "(attn_mask.score_mod, with its derivative) for other "
                 "functions", at, b0[at], b1[at], _probe_scores(C_shape)[at])
        bias = np.ascontiguousarray(b0).reshape(score_shape)
    return keep, bias


class MaskArgs:
    """Fills an attn_mask from PyTorch-style arguments against the scores
    (..., Lq, Lk) of score_shape, whose axes map to C's (B, H, Lq, Lk) by
    axes. A bool attn_mask becomes the keep tensor, a float one the bias
    (when allow_bias). Keeps the arrays C reads alive."""

    def __init__(self, m, score_shape, axes, B, attn_mask=None, is_causal=False,
                 causal_alignment="top-left", window=None, key_lengths=None,
                 query_lengths=None, backward=False, allow_bias=True,
                 block_sparse=None, random_blocks=None, mods=None,
                 score_mod=None, mask_mod=None, C_shape=None):
        Lq, Lk = score_shape[-2:]
        self.score_shape, self.axes = score_shape, axes
        self.user_bias_only = False
        self.user_bias_shape = None
        if is_causal not in (True, False, 0, 1):
            fail(ATTN_E_INVALID, "is_causal is %r; True or False is needed", is_causal)
        m.causal = 1 if is_causal else 0
        if causal_alignment not in ALIGNS:
            fail(ATTN_E_INVALID, "causal_alignment is %r; 'top-left' (PyTorch) or "
                 "'bottom-right' (FlashAttention, KV caches) is needed",
                 causal_alignment)
        m.align = ALIGNS[causal_alignment]
        if window is not None:
            if not isinstance(window, (tuple, list)) or len(window) != 2:
                fail(ATTN_E_INVALID, "window is %r; a pair (left, right) of counts "
                     "or None is needed", window)
            m.window_left = int_or_none(window[0], "window[0] (left)")
            m.window_right = int_or_none(window[1], "window[1] (right)")
        self.keepalive = []
        if key_lengths is not None:
            a, ptr = lengths_arg(key_lengths, "key_lengths", B, Lk)
            self.keepalive.append(a)
            m.key_lengths = ptr
        if query_lengths is not None:
            a, ptr = lengths_arg(query_lengths, "query_lengths", B, Lq)
            self.keepalive.append(a)
            m.query_lengths = ptr
        self.bias = None
        self.bias_shape4 = None
        self.mask_shape = None
        self.tensors = {}
        user_keep = user_bias = None
        if mask_mod is not None or score_mod is not None:
            user_keep, user_bias = user_functions(score_mod, mask_mod,
                                                   C_shape, score_shape)
        if user_keep is not None and attn_mask is not None and \
                np.asarray(attn_mask).dtype == np.bool_:
            # both say which keys are visible: AND them into one keep
            attn_mask = np.asarray(attn_mask) & user_keep
            user_keep = None
        if attn_mask is not None:
            self._mask(attn_mask, m, backward, allow_bias)
        if user_keep is not None:
            self._mask(user_keep, m, backward, allow_bias, shape_of=False)
        if user_bias is not None:
            if self.bias is not None:
                # a float attn_mask and score_mod's bias add; the gradient
                # is summed back to attn_mask's shape by sdpa_backward
                user_bias = user_bias + np.asarray(attn_mask, dtype=np.float64)
            else:
                self.user_bias_only = True
            self._mask(user_bias, m, backward, allow_bias, shape_of=False)
        H = 1 if axes[1] is None else score_shape[axes[1]]
        if block_sparse is not None:
            self._block_sparse(block_sparse, m, H, Lq, Lk)
        if random_blocks is not None:
            _random_blocks(random_blocks, m)
        self.sinks = None
        if mods:
            self.score_mods(m, H, B, Lq, Lk, **mods)

    @classmethod
    def modifiers_only(cls):
        """An empty MaskArgs whose score_mods and doc_array fill a mask
        alone (attention over a KV cache takes no other keyword)."""
        self = cls.__new__(cls)
        self.keepalive = []
        self.sinks = None
        return self

    def score_mods(self, m, H, B, Lq, Lk, alibi_slopes=None, alibi_mode="causal",
                    softcap=None, sinks=None, doc_ids=None):
        """softcap, ALiBi, sinks and document ids (attn_mask's fields; the
        formulas are documented at scaled_dot_product_attention)."""
        if softcap is not None:
            cap = _lib.as_float(softcap)
            if not (cap > 0 and np.isfinite(cap)):
                fail(ATTN_E_INVALID, "softcap is %r; a positive, finite cap is "
                     "needed (None: no soft-capping)", softcap)
            m.softcap = cap
        if alibi_slopes is not None and alibi_slopes is not False:
            modes = {"causal": 1, "symmetric": 2}
            if alibi_mode not in modes:
                fail(ATTN_E_INVALID, "alibi_mode is %r; 'causal' (-slope * (i - j)) "
                     "or 'symmetric' (-slope * |i - j|) is needed", alibi_mode)
            m.alibi = modes[alibi_mode]
            if alibi_slopes is not True:
                a = self._per_head(alibi_slopes, "alibi_slopes", H)
                m.alibi_slopes = a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
                m.n_alibi_slopes = H
        if sinks is not None:
            a = self._per_head(sinks, "sinks", H)
            m.sinks = a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
            m.n_sinks = H
            self.sinks = a
        if doc_ids is not None:
            pair = isinstance(doc_ids, (tuple, list)) and len(doc_ids) == 2 and \
                not np.isscalar(doc_ids[0])
            dq, dk = doc_ids if pair else (doc_ids, None)
            a = self.doc_array(dq, "doc_ids" if not pair else "doc_ids[0]", B, Lq)
            m.doc_q = a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            m.n_doc_q = a.size
            if dk is not None:
                a = self.doc_array(dk, "doc_ids[1]", B, Lk)
                m.doc_k = a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
                m.n_doc_k = a.size
            elif Lq != Lk:
                fail(ATTN_E_INVALID, "doc_ids for %d queries and %d keys: pass a "
                     "pair (query ids, key ids)", Lq, Lk)

    def _per_head(self, x, name, H):
        a = np.asarray(x, dtype=np.float64) if np.asarray(x).dtype.kind in "fiu" \
            else None
        if a is None:
            fail(ATTN_E_DTYPE, "%s must hold numbers, not %s", name, np.asarray(x).dtype)
        a = np.ascontiguousarray(a.reshape(-1) if a.ndim <= 1 else a)
        if a.ndim != 1 or a.shape[0] != H:
            fail(ATTN_E_SHAPE, "%s has shape %s but the attention has %d heads "
                 "(one value per head is needed)", name, shape_str(np.shape(x)), H)
        if not np.all(np.isfinite(a)):
            fail(ATTN_E_INVALID, "%s holds NaN or inf", name)
        self.keepalive.append(a)
        return a

    def doc_array(self, x, name, B, L):
        a = np.asarray(x)
        if a.dtype.kind not in "iu":
            fail(ATTN_E_DTYPE, "%s must hold integers, not %s", name, a.dtype)
        if a.ndim == 1:
            a = np.broadcast_to(a, (B,) + a.shape)
        if a.shape != (B, L):
            fail(ATTN_E_SHAPE, "%s has shape %s but (%d, %d) or (%d,) is needed "
                 "(one id per position of each batch entry)", name,
                 shape_str(np.shape(x)), B, L, L)
        a = np.ascontiguousarray(a, dtype=np.int64)
        if L > 1 and np.any(np.diff(a, axis=1) < 0):
            b, i = np.argwhere(np.diff(a, axis=1) < 0)[0]
            fail(ATTN_E_INVALID, "%s decreases in entry %d: position %d has id %d "
                 "after %d (ids must not decrease)", name, b, i + 1, a[b, i + 1],
                 a[b, i])
        self.keepalive.append(a)
        return a

    def _block_sparse(self, arg, m, H, Lq, Lk):
        """block_sparse=(block_size, layout): layout[(h,) i // bs, j // bs]
        keeps a block. Its shape is checked here exactly, since C reads
        layout_heads x ceil(Lq / bs) x ceil(Lk / bs) bytes without knowing
        the array's size."""
        if not isinstance(arg, (tuple, list)) or len(arg) != 2:
            fail(ATTN_E_INVALID, "block_sparse is %r; a pair (block_size, layout) "
                 "is needed", arg)
        bs, layout = arg
        if isinstance(bs, bool) or not isinstance(bs, (int, np.integer)) \
                or not 1 <= int(bs) < 2**63:
            fail(ATTN_E_INVALID, "block_sparse block_size is %r; an integer in "
                 "[1, 2**63) is needed", bs)
        bs = int(bs)
        a = np.asarray(layout)
        if a.dtype == np.bool_:
            a = a.view(np.uint8)
        elif a.dtype != np.uint8:
            fail(ATTN_E_DTYPE, "block_sparse layout has dtype %s; bool or uint8 "
                 "(nonzero = keep the block) is needed", a.dtype)
        nbq, nbk = -(-Lq // bs), -(-Lk // bs)
        if a.ndim == 2 or (a.ndim == 3 and a.shape[0] == 1):
            heads = 1
        elif a.ndim == 3:
            heads = H
        else:
            heads = None
        want = "(%d, %d) or (%d, %d, %d)" % (nbq, nbk, H, nbq, nbk)
        if heads is None or a.shape[-2:] != (nbq, nbk) or \
                (a.ndim == 3 and a.shape[0] not in (1, H)):
            fail(ATTN_E_SHAPE, "block_sparse layout has shape %s but block_size "
                 "%d over %d queries and %d keys (%d heads) needs %s", shape_str(
                     a.shape), bs, Lq, Lk, H, want)
        a = _lib.c_array(a)
        self.keepalive.append(a)
        m.block_size = bs
        m.layout = a.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        m.layout_heads = heads
        self.layout = a

    def _mask(self, attn_mask, m, backward, allow_bias, shape_of=True):
        """bool masks become the keep tensor, float masks the bias; both are
        broadcast by PyTorch's rules against the scores (..., Lq, Lk).
        shape_of: attn_mask is the caller's (its shape is the gradient's)."""
        a = np.asarray(attn_mask)
        if shape_of:
            self.mask_shape = a.shape
        mask_shape = a.shape
        dt = a.dtype
        if dt == np.bool_:
            a, code, is_bias = a.view(np.uint8), ATTN_U8, False
        elif dt.kind == "f" and allow_bias:
            is_bias = True
            if dt.itemsize == 2:
                a, code = a.astype(np.float32), ATTN_F32
            elif dt.itemsize == 4:
                a, code = native(a), ATTN_F32
            else:
                a, code = np.asarray(a, dtype=np.float64), ATTN_F64
        else:
            fail(ATTN_E_DTYPE, "attn_mask has dtype %s; bool (True = attend)%s is "
                 "needed; a Keras-style mask (1 = masked) becomes bool with "
                 "mask == 0", dt, " or float (added to the scores)" if allow_bias
                 else "")
        if not shape_of and is_bias:
            self.user_bias_shape = a.shape
        shape = self.score_shape
        r = len(shape)
        if a.ndim > r:
            if any(n != 1 for n in a.shape[:a.ndim - r]):
                fail(ATTN_E_SHAPE, "attn_mask of shape %s cannot broadcast to the "
                     "attention scores of shape %s", shape_str(mask_shape),
                     shape_str(shape))
            a = a.reshape(a.shape[a.ndim - r:])
        a = a.reshape((1,) * (r - a.ndim) + a.shape)
        for n, want in zip(a.shape, shape):
            if n != 1 and n != want:
                fail(ATTN_E_SHAPE, "attn_mask of shape %s cannot broadcast to the "
                     "attention scores of shape %s (query length %d, key length "
                     "%d)", shape_str(mask_shape), shape_str(shape),
                     shape[-2], shape[-1])
        a, st = passable(a, is_mask=True)
        if is_bias and backward and any(s == 0 and n > 1 for n, s in zip(a.shape, st)):
            # a broadcast view (np.broadcast_to) has one gradient per element
            # of its shape, not one per stored element: give C real storage
            a = _lib.c_array(a)
            st = _lib.element_strides(a)
        t = _lib.tensor(a, code, self.axes, st)
        self.keepalive.append(a)
        self.tensors["bias" if is_bias else "keep"] = t
        if is_bias:
            self.bias = t
            self.bias_shape4 = tuple(t.shape)
            m.bias = ctypes.pointer(t)
        else:
            m.keep = ctypes.pointer(t)


def _torch_part(x, name, shapes, want):
    """One of nn.MultiheadAttention's masks as (hidden, bias): a bool mask
    (True = NOT allowed to attend) or a float one (added to the scores),
    reshaped from one of shapes (a dict from shape to the 4-d shape over
    (B, H, Lq, Lk) it means)."""
    a = np.asarray(x)
    if a.shape not in shapes:
        fail(ATTN_E_SHAPE, "%s has shape %s; %s is needed", name, shape_str(a.shape),
             want)
    a = a.reshape(shapes[a.shape])
    if a.dtype == np.bool_:
        return a, None
    if a.dtype.kind == "f":
        return None, a.astype(np.float64 if a.dtype.itemsize == 8 else np.float32)
    fail(ATTN_E_DTYPE, "%s has dtype %s; bool (True = not allowed to attend, "
         "as PyTorch's) or float (added to the scores) is needed", name, a.dtype)


def torch_mha_mask(attn_mask, key_padding_mask, B, H, Lq, Lk, batched):
    """torch.nn.MultiheadAttention's attn_mask ((Lq, Lk), or (B * H, Lq, Lk)
    batched, (H, Lq, Lk) unbatched) and key_padding_mask ((B, Lk), or (Lk,)
    unbatched), where a bool True means NOT allowed and a float is added,
    as one mask over the scores (B, H, Lq, Lk) in attn's convention (the
    attn_mask of scaled_dot_product_attention: bool True = attend, float
    added); None when both are None. Bool and float masks mix as PyTorch
    mixes them: the bool becomes -inf where True."""
    parts = []
    if attn_mask is not None:
        lead = (B * H,) if batched else (H,)
        parts.append(_torch_part(
            attn_mask, "attn_mask",
            {(Lq, Lk): (1, 1, Lq, Lk), lead + (Lq, Lk): (B, H, Lq, Lk)},
            "(%d, %d) or (%d, %d, %d) (%s)" % (
                Lq, Lk, lead[0], Lq, Lk,
                "batch * num_heads, L, S" if batched else "num_heads, L, S")))
    if key_padding_mask is not None:
        parts.append(_torch_part(
            key_padding_mask, "key_padding_mask",
            {((B, Lk) if batched else (Lk,)): (B, 1, 1, Lk)},
            "(%d, %d) (batch, S)" % (B, Lk) if batched else "(%d,) (S)" % Lk))
    if not parts:
        return None
    if all(bias is None for _, bias in parts):
        hidden = parts[0][0] if len(parts) == 1 else parts[0][0] | parts[1][0]
        return ~hidden
    total = 0.0
    for hidden, bias in parts:
        total = total + (bias if bias is not None else
                         np.where(hidden, -np.inf, 0.0).astype(np.float32))
    return total
