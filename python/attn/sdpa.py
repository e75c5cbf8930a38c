"""scaled_dot_product_attention and its gradients over attn_sdpa_forward /
attn_sdpa_backward, with torch.nn.functional.scaled_dot_product_attention's
argument names and meanings.

Arrays of rank 2 (L, E), 3 (N, L, E) or 4 (N, H, L, E) are passed to C as
rank-4 views with their own strides: a batch-first buffer transposed to
(N, H, L, E) is not copied. A copy is made only when the last axis is not
contiguous (or the strides are negative or misaligned).
"""

import ctypes
import secrets
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import (ATTN_BF16, ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_NONFINITE,
                   ATTN_E_SHAPE, ATTN_F16, ATTN_F32, ATTN_F64, ATTN_U8, fail)

_IMPLS = {"auto": 0, "ref": 1, "flash": 2, "flash_bf16": 3}
_ALIGNS = {"top-left": 0, "bottom-right": 1}
_DTYPE_ARG = (None, "float32", "float16", "bfloat16", "float64")
_NAMES = {ATTN_F32: "float32", ATTN_F16: "float16", ATTN_BF16: "bfloat16",
          ATTN_F64: "float64"}


def _shape_str(shape):
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"


def _native(arr):
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def _passable(arr, is_mask=False):
    """arr itself if C can read it through its strides, else a C-contiguous
    copy; returns (array, element strides). Masks may broadcast (stride 0)
    and need no contiguous last axis; q, k, v and gradients may not."""
    st = _lib.element_strides(arr)
    if st is not None:
        if is_mask:
            return arr, st
        bcast = 0 in st and any(s == 0 and n > 1 for n, s in zip(arr.shape, st))
        if not bcast and not (arr.shape[-1] > 1 and st[-1] != 1):
            return arr, st
    arr = _lib.c_array(arr)
    return arr, _lib.element_strides(arr)


def _input(x, name, dtype, ref):
    """Checks the element type of query/key/value; returns (array, attn
    dtype). float64 stays float64 only for impl='ref' (the fast kernels are
    float32 inside); bfloat16 is uint16 bits with dtype='bfloat16'."""
    x = np.asarray(x)
    dt = x.dtype
    if dtype == "bfloat16":
        if dt != np.uint16:
            fail(ATTN_E_DTYPE, "dtype='bfloat16' expects uint16 arrays holding "
                 "bfloat16 bits, but %s is %s", name, dt)
        return _native(x), ATTN_BF16
    if dt.kind == "f" and dt.itemsize in (2, 4, 8):
        code = {2: ATTN_F16, 4: ATTN_F32, 8: ATTN_F64}[dt.itemsize]
        if dtype is not None and dtype != _NAMES[code]:
            fail(ATTN_E_DTYPE, "%s is %s but dtype=%r was given", name, dt, dtype)
        if code == ATTN_F64 and not ref:
            return x.astype(np.float32), ATTN_F32
        return _native(x), code
    if dt == np.uint16:
        fail(ATTN_E_DTYPE, "%s is uint16: pass dtype='bfloat16' if it holds "
             "bfloat16 bits", name)
    fail(ATTN_E_DTYPE, "%s has dtype %s; float32, float16, float64 or bfloat16 "
         "(uint16 bits with dtype='bfloat16') is needed", name, dt)


def _lengths(x, name, B, limit):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        fail(ATTN_E_DTYPE, "%s must hold integers, not %s", name, a.dtype)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1 or a.shape[0] != B:
        fail(ATTN_E_SHAPE, "%s has shape %s but the batch has %d entries "
             "(one length per batch entry is needed)", name, _shape_str(a.shape), B)
    for b, n in enumerate(a.tolist()):
        if n < 0 or n > limit:
            fail(ATTN_E_SHAPE, "%s[%d] = %d is outside [0, %d]", name, b, n, limit)
    a = _lib.c_array(a, dtype=np.int64)
    return a, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


# The widest window C accepts (attn_mask_check); checked here on the Python
# integer, before ctypes could cut it to 64 bits.
_MAX_WINDOW = 1 << 61


def _int_or_none(x, name):
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
    try:
        pf = float(p)
    except (TypeError, ValueError):
        pf = float("nan")
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


def _user_functions(score_mod, mask_mod, C_shape, score_shape):
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
                 _shape_str(r.shape), _shape_str(C_shape))
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
                     _shape_str(r.shape), _shape_str(C_shape))
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


def _sum_to(x, shape):
    """x (broadcast from an array of shape) summed back to shape."""
    lead = x.ndim - len(shape)
    if lead > 0:
        x = x.sum(axis=tuple(range(lead)))
    axes = tuple(a for a, n in enumerate(shape) if n == 1 and x.shape[a] != 1)
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x.reshape(shape)


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
        if causal_alignment not in _ALIGNS:
            fail(ATTN_E_INVALID, "causal_alignment is %r; 'top-left' (PyTorch) or "
                 "'bottom-right' (FlashAttention, KV caches) is needed",
                 causal_alignment)
        m.align = _ALIGNS[causal_alignment]
        if window is not None:
            if not isinstance(window, (tuple, list)) or len(window) != 2:
                fail(ATTN_E_INVALID, "window is %r; a pair (left, right) of counts "
                     "or None is needed", window)
            m.window_left = _int_or_none(window[0], "window[0] (left)")
            m.window_right = _int_or_none(window[1], "window[1] (right)")
        self.keepalive = []
        if key_lengths is not None:
            a, ptr = _lengths(key_lengths, "key_lengths", B, Lk)
            self.keepalive.append(a)
            m.key_lengths = ptr
        if query_lengths is not None:
            a, ptr = _lengths(query_lengths, "query_lengths", B, Lq)
            self.keepalive.append(a)
            m.query_lengths = ptr
        self.bias = None
        self.bias_shape4 = None
        self.mask_shape = None
        self.tensors = {}
        user_keep = user_bias = None
        if mask_mod is not None or score_mod is not None:
            user_keep, user_bias = _user_functions(score_mod, mask_mod,
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
            self._score_mods(m, H, B, Lq, Lk, **mods)

    def _score_mods(self, m, H, B, Lq, Lk, alibi_slopes=None, alibi_mode="causal",
                    softcap=None, sinks=None, doc_ids=None):
        """softcap, ALiBi, sinks and document ids (attn_mask's fields; the
        formulas are documented at scaled_dot_product_attention)."""
        if softcap is not None:
            try:
                cap = float(softcap)
            except (TypeError, ValueError):
                cap = float("nan")
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
            a = self._docs(dq, "doc_ids" if not pair else "doc_ids[0]", B, Lq)
            m.doc_q = a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            m.n_doc_q = a.size
            if dk is not None:
                a = self._docs(dk, "doc_ids[1]", B, Lk)
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
                 "(one value per head is needed)", name, _shape_str(np.shape(x)), H)
        if not np.all(np.isfinite(a)):
            fail(ATTN_E_INVALID, "%s holds NaN or inf", name)
        self.keepalive.append(a)
        return a

    def _docs(self, x, name, B, L):
        a = np.asarray(x)
        if a.dtype.kind not in "iu":
            fail(ATTN_E_DTYPE, "%s must hold integers, not %s", name, a.dtype)
        if a.ndim == 1:
            a = np.broadcast_to(a, (B,) + a.shape)
        if a.shape != (B, L):
            fail(ATTN_E_SHAPE, "%s has shape %s but (%d, %d) or (%d,) is needed "
                 "(one id per position of each batch entry)", name,
                 _shape_str(np.shape(x)), B, L, L)
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
                 "%d over %d queries and %d keys (%d heads) needs %s", _shape_str(
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
                a, code = _native(a), ATTN_F32
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
                     "attention scores of shape %s", _shape_str(mask_shape),
                     _shape_str(shape))
            a = a.reshape(a.shape[a.ndim - r:])
        a = a.reshape((1,) * (r - a.ndim) + a.shape)
        for n, want in zip(a.shape, shape):
            if n != 1 and n != want:
                fail(ATTN_E_SHAPE, "attn_mask of shape %s cannot broadcast to the "
                     "attention scores of shape %s (query length %d, key length "
                     "%d)", _shape_str(mask_shape), _shape_str(shape),
                     shape[-2], shape[-1])
        a, st = _passable(a, is_mask=True)
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



class _Call:
    """Everything one forward or backward call hands to C, validated."""

    def __init__(self, query, key, value, attn_mask, dropout_p, is_causal,
                 scale, enable_gqa, causal_alignment, window, key_lengths,
                 query_lengths, seed, impl, threads, dtype, backward=False,
                 block_sparse=None, random_blocks=None, mods=None, user=None):
        if impl not in _IMPLS:
            fail(ATTN_E_INVALID, "impl is %r; one of 'auto', 'ref', 'flash' is "
                 "needed", impl)
        if dtype not in _DTYPE_ARG:
            fail(ATTN_E_INVALID, "dtype is %r; one of 'float32', 'float16', "
                 "'bfloat16', 'float64' (or None) is needed", dtype)
        ref = impl == "ref"
        # results come back in the inputs' dtype, as in PyTorch (computed in
        # float32 inside, or float64 by the reference)
        self.in_dtype = np.asarray(query).dtype
        self.in_bf16 = dtype == "bfloat16"
        q, cq = _input(query, "query", dtype, ref)
        k, ck = _input(key, "key", dtype, ref)
        v, cv = _input(value, "value", dtype, ref)
        if not (cq == ck == cv):
            fail(ATTN_E_DTYPE, "query, key and value must share a dtype: they "
                 "are %s, %s and %s", _NAMES[cq], _NAMES[ck], _NAMES[cv])
        r = q.ndim
        if r not in (2, 3, 4):
            fail(ATTN_E_SHAPE, "query has rank %d (shape %s); rank 2 (L, E), 3 "
                 "(N, L, E) or 4 (N, H, L, E) is needed", r, _shape_str(q.shape))
        if k.ndim != r or v.ndim != r:
            fail(ATTN_E_SHAPE, "query, key and value must have the same rank: "
                 "they have %d, %d and %d", r, k.ndim, v.ndim)
        for name, a in (("query", q), ("key", k), ("value", v)):
            if 0 in a.shape:
                fail(ATTN_E_SHAPE, "%s has an empty axis (shape %s)", name,
                     _shape_str(a.shape))
        Lq, E = q.shape[-2:]
        Lk, Ek = k.shape[-2:]
        if Ek != E:
            fail(ATTN_E_SHAPE, "key has %d features (last axis) but query has %d",
                 Ek, E)
        if v.shape[-2] != Lk:
            fail(ATTN_E_SHAPE, "value has %d positions but key has %d",
                 v.shape[-2], Lk)
        if v.shape[:-2] != k.shape[:-2]:
            fail(ATTN_E_SHAPE, "key %s and value %s differ before the last two "
                 "axes", _shape_str(k.shape), _shape_str(v.shape))
        if r == 4 and q.shape[0] != k.shape[0]:
            fail(ATTN_E_SHAPE, "batch sizes differ: query has %d, key has %d",
                 q.shape[0], k.shape[0])
        gqa_rank3 = False
        if r >= 3 and q.shape[-3] != k.shape[-3]:
            Hq, Hk = q.shape[-3], k.shape[-3]
            if not enable_gqa:
                what = "heads" if r == 4 else "entries on axis 0"
                fail(ATTN_E_SHAPE, "query has %d %s but key has %d; pass "
                     "enable_gqa=True for grouped-query attention", Hq, what, Hk)
            if Hq % Hk:
                fail(ATTN_E_SHAPE, "query has %d heads, not a multiple of the %d "
                     "heads of key and value", Hq, Hk)
            gqa_rank3 = r == 3
        # C axes (B, H, L, D) <- axes of the arrays (None: size 1 inserted).
        # Rank 3 is (N, L, E), except that PyTorch groups heads on axis -3,
        # so a rank-3 grouped call reads axis 0 as heads.
        self.axes = {4: (0, 1, 2, 3), 3: ((None, 0, 1, 2) if gqa_rank3 else
                                          (0, None, 1, 2)), 2: (None, None, 0, 1)}[r]
        q, sq = _passable(q)
        k, sk = _passable(k)
        v, sv = _passable(v)
        self.q, self.k, self.v = q, k, v
        self.Q = _lib.tensor(q, cq, self.axes, sq)
        self.K = _lib.tensor(k, ck, self.axes, sk)
        self.V = _lib.tensor(v, cv, self.axes, sv)
        self.B, self.H = self.Q.shape[0], self.Q.shape[1]
        self.Lq, self.Lk, self.Dv = Lq, Lk, v.shape[-1]
        self.f64 = cq == ATTN_F64
        self.np_out = np.float64 if self.f64 else np.float32
        self.c_out = ATTN_F64 if self.f64 else ATTN_F32
        self.out_shape = q.shape[:-1] + (self.Dv,)
        self.lse_shape = q.shape[:-1]
        self.score_shape = q.shape[:-1] + (Lk,)

        opts = _lib.SdpaOpts()
        _lib.lib.attn_sdpa_opts_init(byref(opts))
        if scale is not None:
            try:
                s = float(scale)
            except (TypeError, ValueError):
                fail(ATTN_E_INVALID, "scale is %r; a positive number is needed", scale)
            if not (s > 0 and np.isfinite(s)):
                fail(ATTN_E_INVALID, "scale is %r; it must be positive and finite "
                     "(None gives 1/sqrt(E) = %g)", scale, 1 / np.sqrt(E))
            opts.scale = s
        try:
            p = float(dropout_p)
        except (TypeError, ValueError):
            p = float("nan")
        if not (0.0 <= p < 1.0):
            fail(ATTN_E_INVALID, "dropout_p is %r; it must be in [0, 1)", dropout_p)
        opts.dropout_p = p
        if seed is None:
            if p > 0 and backward:
                fail(ATTN_E_INVALID, "dropout_p is %g: pass the seed the forward "
                     "used so the same weights are dropped", p)
            seed = secrets.randbits(64) if p > 0 else 0
        if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
            fail(ATTN_E_INVALID, "seed is %r; an integer in [0, 2**64) is needed", seed)
        self.seed = int(seed)
        opts.seed = self.seed
        opts.impl = _IMPLS[impl]
        if threads is None:
            threads = 0
        if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) \
                or not 0 <= threads <= 1 << 16:
            fail(ATTN_E_INVALID, "threads is %r; a count >= 1 (or None for the "
                 "default) is needed", threads)
        opts.threads = int(threads)

        self.masks = MaskArgs(opts.mask, self.score_shape, self.axes, self.B,
                              attn_mask, is_causal, causal_alignment, window,
                              key_lengths, query_lengths, backward=backward,
                              block_sparse=block_sparse,
                              random_blocks=random_blocks, mods=mods,
                              C_shape=(self.B, self.H, Lq, Lk), **(user or {}))
        self.bias = self.masks.bias
        self.mask_shape = self.masks.mask_shape
        self.mask_tensors = self.masks.tensors
        self.opts = opts

    def forward(self, want_weights, want_lse):
        B, H = self.B, self.H
        out, O = _lib.out_tensor((B, H, self.Lq, self.Dv), self.np_out, self.c_out)
        w = W = lse = None
        if want_weights:
            w, W = _lib.out_tensor((B, H, self.Lq, self.Lk), self.np_out, self.c_out)
        if want_lse:
            lse = np.empty((B, H, self.Lq), dtype=np.float32)
        tensors = dict(self.mask_tensors, q=self.Q, k=self.K, v=self.V, out=O)
        if W is not None:
            tensors["weights"] = W
        _lib.call("attn_sdpa_forward", byref(self.Q), byref(self.K),
                  byref(self.V), byref(self.opts), byref(O),
                  byref(W) if W is not None else None,
                  lse.ctypes.data if lse is not None else None, tensors=tensors)
        return (out.reshape(self.out_shape),
                None if w is None else w.reshape(self.score_shape),
                None if lse is None else lse.reshape(self.lse_shape))

    def like_input(self, x):
        """x (float32 or float64) in the inputs' dtype: float16, bfloat16
        bits (rounded to nearest even), float32 or float64."""
        if x is None:
            return None
        if self.in_bf16:
            u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
            u = u.astype(np.uint64)
            nan = (u & 0x7fffffff) > 0x7f800000
            r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # quiet NaN
            return r
        if x.dtype != self.in_dtype:
            return x.astype(self.in_dtype)
        return x

    def output_like(self, x, name):
        """grad_out / out of backward: floats of the output's shape, passed
        as f32 (f64 for the float64 reference) views."""
        x = np.asarray(x)
        if x.dtype.kind != "f":
            fail(ATTN_E_DTYPE, "%s has dtype %s; a float array is needed", name, x.dtype)
        if x.shape != self.out_shape:
            fail(ATTN_E_SHAPE, "%s has shape %s but the output's shape is %s",
                 name, _shape_str(x.shape), _shape_str(self.out_shape))
        if x.dtype != self.np_out or not x.dtype.isnative:
            x = x.astype(self.np_out)
        x, st = _passable(x)
        return x, _lib.tensor(x, self.c_out, self.axes, st)


def doc_ids_from_cu_seqlens(cu_seqlens, length=None):
    """Document ids (L,) int64 from cumulative sequence starts
    (FlashAttention's varlen cu_seqlens, attn_doc_ids_from_cu_seqlens):
    cu_seqlens [0, n1, n1+n2, ..., L], non-decreasing; positions
    cu[d] .. cu[d+1]-1 hold document d. length: the sequence's L, checked
    against the last start (None: that start). Raises AttnError for a first
    start that is not 0, decreasing starts, a last start != length, or
    fewer than two starts."""
    a = np.asarray(cu_seqlens)
    if a.dtype.kind not in "iu":
        fail(ATTN_E_DTYPE, "cu_seqlens must hold integers, not %s", a.dtype)
    if a.ndim != 1:
        fail(ATTN_E_SHAPE, "cu_seqlens has shape %s; one start per document "
             "and the end, (n + 1,), is needed", _shape_str(a.shape))
    a = np.ascontiguousarray(a, dtype=np.int64)
    L = int(a[-1]) if length is None and a.size else int(length or 0)
    ids = np.zeros(max(L, 1), np.int64)
    ptr = ctypes.POINTER(ctypes.c_int64)
    _lib.call("attn_doc_ids_from_cu_seqlens", a.ctypes.data_as(ptr),
              a.size - 1, L, ids.ctypes.data_as(ptr))
    return ids[:L]


def _cu_docs(cu_seqlens, doc_ids, query, key):
    """doc_ids from cu_seqlens= (a sequence of starts, or a pair of them
    for queries and keys)."""
    if cu_seqlens is None:
        return doc_ids
    if doc_ids is not None:
        fail(ATTN_E_INVALID, "doc_ids and cu_seqlens both give the documents: "
             "pass one of them")
    Lq, Lk = np.shape(query)[-2], np.shape(key)[-2]
    pair = isinstance(cu_seqlens, (tuple, list)) and len(cu_seqlens) == 2 and \
        not np.isscalar(cu_seqlens[0])
    if pair:
        return (doc_ids_from_cu_seqlens(cu_seqlens[0], Lq),
                doc_ids_from_cu_seqlens(cu_seqlens[1], Lk))
    ids = doc_ids_from_cu_seqlens(cu_seqlens, Lq)
    if Lq != Lk:
        fail(ATTN_E_INVALID, "cu_seqlens for %d queries and %d keys: pass a pair "
             "(query starts, key starts)", Lq, Lk)
    return ids


@_lib.nomem
def scaled_dot_product_attention(query, key=None, value=None, attn_mask=None,
                                 dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, causal_alignment=None,
                                 window=None, key_lengths=None,
                                 query_lengths=None, seed=None,
                                 return_weights=False, return_lse=False,
                                 impl="auto", threads=None, dtype=None,
                                 block_sparse=None, random_blocks=None,
                                 cache=None, alibi_slopes=None,
                                 alibi_mode="causal", softcap=None, sinks=None,
                                 doc_ids=None, cu_seqlens=None, score_mod=None,
                                 mask_mod=None):
    """softmax(scale * query @ key^T + mask) @ value, as PyTorch's
    torch.nn.functional.scaled_dot_product_attention, on NumPy arrays.

    query (..., Lq, E), key (..., Lk, E), value (..., Lk, Ev) of rank 2, 3
    or 4 ((L, E), (N, L, E), (N, H, L, E)); float32, float16, bfloat16
    (uint16 bits with dtype="bfloat16"), or float64
    (computed in float32 unless impl="ref", which keeps float64).

    PyTorch's arguments mean what they mean there:
      attn_mask   bool (True = attend) or float (added to the scaled
                  scores; -inf masks), broadcast to (..., Lq, Lk)
      dropout_p   probability of dropping a weight (kept ones scaled by
                  1 / (1 - p)); the mask comes from seed
      is_causal   query i sees keys j <= i (top-left, as PyTorch)
      scale       None: 1 / sqrt(E)
      enable_gqa  query heads in groups over fewer key/value heads
    is_causal and attn_mask may be combined (they AND). A query row that
    sees no key gives zeros (PyTorch gives NaN).

    attn's extras (keyword only):
      causal_alignment  "top-left" or "bottom-right" (Lq != Lk, KV cache)
      window            (left, right) local window around the diagonal;
                        None on a side is unbounded
      key_lengths, query_lengths  one length per batch entry (padding)
      block_sparse      (block_size, layout): a bool/uint8 layout of shape
                        (ceil(Lq/bs), ceil(Lk/bs)), or (H, ...) per head;
                        query i sees key j only if layout[.., i//bs, j//bs]
      random_blocks     (block, keep_p, seed): each block (h, i//block,
                        j//block) kept with probability keep_p, drawn from
                        seed (attn_random_block_kept; same for every batch
                        entry)
      softcap           C > 0: scores become C * tanh(s / C) after scaling,
                        before the mask and bias (Gemma 2)
      alibi_slopes      True (the standard slopes 2^(-8 (h+1) / H)) or one
                        slope per head: adds -slope * (i - j)
                        (alibi_mode="causal", the paper's and BLOOM's) or
                        -slope * |i - j| ("symmetric", MPT's); i is the
                        aligned query position (causal_alignment)
      sinks             one logit per head (H,) that joins each softmax's
                        denominator with no value (gpt-oss, StreamingLLM);
                        lse includes it; sdpa_backward returns its gradient
      doc_ids           document id per position, non-decreasing: (B, L) or
                        (L,) for every entry, or a pair (query ids, key ids);
                        a query sees only keys of its own document (packed
                        sequences), and tiles across documents are skipped
      mask_mod          FlexAttention's mask_mod(b, h, q_idx, kv_idx) -> bool
                        (True = attend), called once on broadcast index
                        grids (b (B,1,1,1), h (1,H,1,1), q_idx (1,1,Lq,1),
                        kv_idx (1,1,1,Lk); NumPy integer arrays) and turned
                        into a keep mask (ANDed with the others); the
                        kernels skip the tiles it hides wholly
      score_mod         FlexAttention's score_mod(score, b, h, q_idx,
                        kv_idx) -> new score, on the same grids and a
                        (B,H,Lq,Lk) float64 score; it must be additive in
                        the score (score + f(b, h, q_idx, kv_idx): ALiBi,
                        relative biases; -inf masks) and becomes a bias,
                        added after soft-capping. It is called twice, the
                        second time on other scores, to check that; a
                        score_mod that is not additive (a soft-cap) is
                        refused: use softcap= or the C API. Cost of both:
                        B*H*Lq*Lk entries evaluated per call and held (8
                        bytes each for score_mod, 1 for mask_mod)
      cu_seqlens        the documents as cumulative starts instead
                        (FlashAttention varlen): [0, n1, n1+n2, ..., L] for
                        every batch entry, or a pair (query starts, key
                        starts) when Lq != Lk (doc_ids_from_cu_seqlens)
      seed              dropout seed (pass it again to sdpa_backward)
      return_weights    also return the weights (..., Lq, Lk), after dropout
      return_lse        also return the log-sum-exp of each row (..., Lq)
      impl              "auto", "ref" (exact, double) or "flash"
      threads           OpenMP threads (None: OpenMP's default)
      cache             an attn.KVCache instead of key and value: attention
                        of the new queries over the cached positions (see
                        attn.sdpa_cached; causal_alignment defaults to
                        "bottom-right" there, and only is_causal, scale,
                        window, query_lengths, return_lse, impl, threads
                        and the score modifiers apply, doc_ids being the
                        queries' ids; its output is float32)

    Returns the output (..., Lq, Ev) in the inputs' dtype (as PyTorch:
    float16 in, float16 out; bfloat16 bits in, bfloat16 bits out; the
    kernels compute in float32, or float64 for the float64 reference), and
    the weights in the same dtype: out, (out, weights), (out, lse) or (out,
    weights, lse); lse is float32 (float64 for the reference).
    Raises AttnError (a ValueError) on bad input.
    """
    if cache is not None:
        from .cache import sdpa_cached
        extra = [n for n, v in (("key", key), ("value", value),
                                ("attn_mask", attn_mask), ("key_lengths", key_lengths),
                                ("seed", seed), ("dtype", dtype),
                                ("block_sparse", block_sparse),
                                ("random_blocks", random_blocks),
                                ("cu_seqlens", cu_seqlens),
                                ("score_mod", score_mod),
                                ("mask_mod", mask_mod)) if v is not None]
        extra += [n for n, v in (("dropout_p", dropout_p), ("enable_gqa", enable_gqa),
                                 ("return_weights", return_weights)) if v]
        if extra:
            fail(ATTN_E_INVALID, "with cache= the keys and values come from the "
                 "cache: %s cannot be given", ", ".join(extra))
        return sdpa_cached(query, cache, is_causal=is_causal, scale=scale,
                           causal_alignment=causal_alignment or "bottom-right",
                           window=window, query_lengths=query_lengths,
                           return_lse=return_lse, impl=impl, threads=threads,
                           alibi_slopes=alibi_slopes, alibi_mode=alibi_mode,
                           softcap=softcap, sinks=sinks, doc_ids=doc_ids)
    if key is None or value is None:
        fail(ATTN_E_INVALID, "key and value are needed (or cache=)")
    if causal_alignment is None:
        causal_alignment = "top-left"
    doc_ids = _cu_docs(cu_seqlens, doc_ids, query, key)
    c = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale,
              enable_gqa, causal_alignment, window, key_lengths, query_lengths,
              seed, impl, threads, dtype, block_sparse=block_sparse,
              random_blocks=random_blocks,
              mods=dict(alibi_slopes=alibi_slopes, alibi_mode=alibi_mode,
                        softcap=softcap, sinks=sinks, doc_ids=doc_ids),
              user=dict(score_mod=score_mod, mask_mod=mask_mod))
    out, w, lse = c.forward(return_weights, return_lse)
    out, w = c.like_input(out), c.like_input(w)
    if not (return_weights or return_lse):
        return out
    return (out,) + ((w,) if return_weights else ()) + ((lse,) if return_lse else ())


@_lib.nomem
def sdpa_backward(grad_out, query, key, value, attn_mask=None, dropout_p=0.0,
                  is_causal=False, scale=None, enable_gqa=False, *, out=None,
                  lse=None, causal_alignment="top-left", window=None,
                  key_lengths=None, query_lengths=None, seed=None, impl="auto",
                  threads=None, dtype=None, block_sparse=None,
                  random_blocks=None, alibi_slopes=None, alibi_mode="causal",
                  softcap=None, sinks=None, doc_ids=None, cu_seqlens=None,
                  score_mod=None, mask_mod=None):
    """Gradients of scaled_dot_product_attention with respect to query, key,
    value (and a float attn_mask).

    grad_out has the output's shape. The other arguments are the forward's,
    with the same seed when dropout_p > 0. out and lse are what the forward
    returned (with return_lse=True); when either is missing the forward is
    run again here to get them.

    Returns (dq, dk, dv), shaped like query, key, value, plus dbias shaped
    like attn_mask when attn_mask is a float array (its broadcast axes
    summed). dq, dk, dv are in the inputs' dtype (as PyTorch), dbias
    float32 (float64 for the float64 reference). With sinks, their gradient
    (H,) float64 comes last. score_mod and mask_mod are evaluated again
    (as in the forward); score_mod's bias gets no gradient of its own (with
    a float attn_mask, dbias is that of attn_mask).
    """
    doc_ids = _cu_docs(cu_seqlens, doc_ids, query, key)
    c = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale,
              enable_gqa, causal_alignment, window, key_lengths, query_lengths,
              seed, impl, threads, dtype, backward=True,
              block_sparse=block_sparse, random_blocks=random_blocks,
              mods=dict(alibi_slopes=alibi_slopes, alibi_mode=alibi_mode,
                        softcap=softcap, sinks=sinks, doc_ids=doc_ids),
              user=dict(score_mod=score_mod, mask_mod=mask_mod))
    g, G = c.output_like(grad_out, "grad_out")
    if out is None or lse is None:
        out, _, lse = c.forward(False, True)
    o, O = c.output_like(out, "out")
    lse = np.asarray(lse)
    if lse.shape != c.lse_shape:
        fail(ATTN_E_SHAPE, "lse has shape %s but %s is needed (the forward's "
             "return_lse)", _shape_str(lse.shape), _shape_str(c.lse_shape))
    if lse.dtype.kind != "f":
        fail(ATTN_E_DTYPE, "lse has dtype %s; a float array is needed", lse.dtype)
    lse = _lib.c_array(lse, dtype=np.float32)
    B, H, Lq, Lk = c.B, c.H, c.Lq, c.Lk
    Hkv, Dk = c.K.shape[1], c.Q.shape[3]
    dq, DQ = _lib.out_tensor((B, H, Lq, Dk), c.np_out, c.c_out, zero=True)
    dk, DK = _lib.out_tensor((B, Hkv, Lk, Dk), c.np_out, c.c_out, zero=True)
    dv, DV = _lib.out_tensor((B, Hkv, Lk, c.Dv), c.np_out, c.c_out, zero=True)
    db = DB = None
    if c.bias is not None:
        db, DB = _lib.out_tensor(c.masks.bias_shape4, c.np_out, c.c_out, zero=True)
    tensors = dict(c.mask_tensors, q=c.Q, k=c.K, v=c.V, out=O, dout=G,
                   dq=DQ, dk=DK, dv=DV)
    if DB is not None:
        tensors["dbias"] = DB
    dsinks = None
    if c.masks.sinks is not None:
        dsinks = np.zeros(c.masks.sinks.shape, dtype=np.float64)
        c.opts.mask.sinks_grad = dsinks.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
    _lib.call("attn_sdpa_backward", byref(c.Q), byref(c.K), byref(c.V),
              byref(O), lse.ctypes.data, byref(G), byref(c.opts), byref(DQ),
              byref(DK), byref(DV), byref(DB) if DB is not None else None,
              tensors=tensors)
    grads = tuple(c.like_input(g) for g in (dq.reshape(c.q.shape),
                                             dk.reshape(c.k.shape),
                                             dv.reshape(c.v.shape)))
    if db is not None and not c.masks.user_bias_only:
        if c.masks.user_bias_shape is not None:
            # attn_mask + score_mod's bias: back to attn_mask's shape
            db = _sum_to(db.reshape(c.masks.user_bias_shape), c.mask_shape)
        grads += (db.reshape(c.mask_shape),)
    if dsinks is not None:
        grads += (dsinks,)
    return grads


# classes of block_mask's blocks (attn_block_mask's ATTN_BLOCK_*)
BLOCK_EMPTY, BLOCK_FULL, BLOCK_PARTIAL = 0, 1, 2


@_lib.nomem
def block_mask(mask_mod, B, H, Lq, Lk, block_q=128, block_k=128):
    """The classes of mask_mod(b, h, q_idx, kv_idx) over blocks of block_q
    queries x block_k keys, as attn_block_mask_build computes them in C:
    a uint8 array (B, H, ceil(Lq / block_q), ceil(Lk / block_k)) of
    BLOCK_EMPTY (0: hides every pair), BLOCK_FULL (1: keeps every pair) or
    BLOCK_PARTIAL (2). mask_mod is called once, on the broadcast index
    grids (as for scaled_dot_product_attention's mask_mod=); the cost is
    B*H*Lq*Lk booleans. It tells how sparse a mask is; the kernels find
    the same (and skip EMPTY tiles) from the keep mask mask_mod= becomes."""
    for name, x in (("B", B), ("H", H), ("Lq", Lq), ("Lk", Lk),
                    ("block_q", block_q), ("block_k", block_k)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
            fail(ATTN_E_INVALID, "%s is %r; an integer >= 1 is needed", name, x)
    C = (int(B), int(H), int(Lq), int(Lk))
    keep, _ = _user_functions(None, mask_mod, C, C)
    nq, nk = -(-C[2] // block_q), -(-C[3] // block_k)
    pad = np.zeros((C[0], C[1], nq * block_q, nk * block_k), dtype=np.int8)
    valid = np.zeros_like(pad, dtype=bool)
    pad[:, :, :C[2], :C[3]] = keep
    valid[:, :, :C[2], :C[3]] = True
    blocks = (C[0], C[1], nq, block_q, nk, block_k)
    kept = (pad.reshape(blocks) == 1).any(axis=(3, 5))
    hidden = (valid & (pad == 0)).reshape(blocks).any(axis=(3, 5))
    return np.where(~kept, BLOCK_EMPTY,
                    np.where(hidden, BLOCK_PARTIAL, BLOCK_FULL)).astype(np.uint8)
