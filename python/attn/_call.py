"""One call of attn_sdpa_forward / attn_sdpa_backward: query, key and
value checked and passed to C as rank-4 views with their own strides (a
batch-first buffer transposed to (N, H, L, E) is not copied; a copy is
made only when the last axis is not contiguous, or the strides are
negative or misaligned), the options filled, the mask by MaskArgs."""

import ctypes
import secrets
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import (ATTN_BF16, ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_SHAPE,
                   ATTN_F16, ATTN_F32, ATTN_F64, fail, native, passable,
                   shape_str)
from ._masks import IMPLS, MaskArgs
from .rope import make_rope

_DTYPE_ARG = (None, "float32", "float16", "bfloat16", "float64")
_NAMES = {ATTN_F32: "float32", ATTN_F16: "float16", ATTN_BF16: "bfloat16",
          ATTN_F64: "float64"}


def _input(x, name, dtype, ref):
    """Checks the element type of query/key/value; returns (array, attn
    dtype). float64 stays float64 only for impl='ref' (the fast kernels are
    float32 inside); bfloat16 is uint16 bits with dtype='bfloat16'."""
    x = np.asarray(x)
    dt = x.dtype
    if dtype == "bfloat16":
        _lib.bf16_bits(dt, name)
        return native(x), ATTN_BF16
    code = _lib.float_code(dt)
    if code is not None:
        if dtype is not None and dtype != _NAMES[code]:
            fail(ATTN_E_DTYPE, "%s is %s but dtype=%r was given", name, dt, dtype)
        if code == ATTN_F64 and not ref:
            return x.astype(np.float32), ATTN_F32
        return native(x), code
    if dt == np.uint16:
        fail(ATTN_E_DTYPE, "%s is uint16: pass dtype='bfloat16' if it holds "
             "bfloat16 bits", name)
    fail(ATTN_E_DTYPE, "%s has dtype %s; float32, float16, float64 or bfloat16 "
         "(uint16 bits with dtype='bfloat16') is needed", name, dt)


def sum_to(x, shape):
    """x (broadcast from an array of shape) summed back to shape."""
    lead = x.ndim - len(shape)
    if lead > 0:
        x = x.sum(axis=tuple(range(lead)))
    axes = tuple(a for a, n in enumerate(shape) if n == 1 and x.shape[a] != 1)
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x.reshape(shape)


class SdpaCall:
    """Everything one forward or backward call hands to C, validated."""

    def __init__(self, query, key, value, attn_mask, dropout_p, is_causal,
                 scale, enable_gqa, causal_alignment, window, key_lengths,
                 query_lengths, seed, impl, threads, dtype, backward=False,
                 block_sparse=None, random_blocks=None, mods=None, user=None,
                 rope=None):
        if impl not in IMPLS:
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
        # one dtype for the three, as PyTorch's SDPA (and the CLI) require
        dts = [np.asarray(x).dtype for x in (query, key, value)]
        if len(set(dts)) > 1:
            fail(ATTN_E_DTYPE, "query, key and value must share a dtype, as "
                 "in PyTorch: they are %s, %s and %s", *dts)
        if not (cq == ck == cv):
            fail(ATTN_E_DTYPE, "query, key and value must share a dtype: they "
                 "are %s, %s and %s", _NAMES[cq], _NAMES[ck], _NAMES[cv])
        r = q.ndim
        if r not in (2, 3, 4):
            fail(ATTN_E_SHAPE, "query has rank %d (shape %s); rank 2 (L, E), 3 "
                 "(N, L, E) or 4 (N, H, L, E) is needed", r, shape_str(q.shape))
        if k.ndim != r or v.ndim != r:
            fail(ATTN_E_SHAPE, "query, key and value must have the same rank: "
                 "they have %d, %d and %d", r, k.ndim, v.ndim)
        for name, a in (("query", q), ("key", k), ("value", v)):
            if 0 in a.shape:
                fail(ATTN_E_SHAPE, "%s has an empty axis (shape %s)", name,
                     shape_str(a.shape))
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
                 "axes", shape_str(k.shape), shape_str(v.shape))
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
        q, sq = passable(q)
        k, sk = passable(k)
        v, sv = passable(v)
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
        p = opts.dropout_p = _lib.dropout_p(dropout_p, "dropout_p")
        if seed is None:
            if p > 0 and backward:
                fail(ATTN_E_INVALID, "dropout_p is %g: pass the seed the forward "
                     "used so the same weights are dropped", p)
            seed = secrets.randbits(64) if p > 0 else 0
        if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
            fail(ATTN_E_INVALID, "seed is %r; an integer in [0, 2**64) is needed", seed)
        self.seed = int(seed)
        opts.seed = self.seed
        opts.impl = IMPLS[impl]
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
        self._rope = _rope_args(rope, opts, self.B, Lq, Lk)

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
            # the library's rounding (attn_convert): NumPy's passes over
            # 64-bit copies took longer than the attention itself
            f = np.ascontiguousarray(x, dtype=np.float32)
            r = np.empty(f.shape, dtype=np.uint16)
            _lib.call("attn_convert", f.ctypes.data, _lib.ATTN_F32, r.ctypes.data,
                      _lib.ATTN_BF16, f.size)
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
                 name, shape_str(x.shape), shape_str(self.out_shape))
        if x.dtype != self.np_out or not x.dtype.isnative:
            x = x.astype(self.np_out)
        x, st = passable(x)
        return x, _lib.tensor(x, self.c_out, self.axes, st)


_ROPE_KEYS = ("style", "theta", "rotary_dim", "scaling", "q_positions",
              "k_positions")


def _rope_positions(p, B, L, name):
    p = np.asarray(p)
    if p.dtype.kind not in "iu" and not (
            p.dtype.kind == "f" and np.all(np.mod(p, 1) == 0)):
        fail(ATTN_E_INVALID, "rope %s must be integers", name)
    if p.shape not in ((L,), (B, L)):
        fail(ATTN_E_SHAPE, "rope %s has shape %s; (%d,) or (%d, %d) is "
             "needed", name, shape_str(p.shape), L, B, L)
    return np.ascontiguousarray(p, dtype=np.int64)


def _rope_args(rope, opts, B, Lq, Lk):
    """rope= (a style name, or a dict of attn.rope's arguments with
    q_positions and k_positions) into opts.rope and its positions; returns
    what must stay alive while opts is used."""
    if rope is None:
        return None
    if isinstance(rope, str):
        rope = {"style": rope}
    if not isinstance(rope, dict):
        fail(ATTN_E_INVALID, "rope is %r; a style ('neox', 'interleaved') or "
             "a dict of %s is needed", rope, ", ".join(_ROPE_KEYS))
    extra = sorted(set(rope) - set(_ROPE_KEYS))
    if extra:
        fail(ATTN_E_INVALID, "rope has unknown keys %s (known: %s)",
             ", ".join(map(repr, extra)), ", ".join(_ROPE_KEYS))
    r = make_rope(rope.get("theta", 10000.0), rope.get("style", "neox"),
                  rope.get("rotary_dim"), rope.get("scaling"))
    keep = [r]
    opts.rope = ctypes.addressof(r)
    for key, L, ptr, cnt in (("q_positions", Lq, "rope_q_positions",
                              "n_rope_q_positions"),
                             ("k_positions", Lk, "rope_k_positions",
                              "n_rope_k_positions")):
        if rope.get(key) is not None:
            p = _rope_positions(rope[key], B, L, key)
            keep.append(p)
            setattr(opts, ptr, p.ctypes.data)
            setattr(opts, cnt, p.size)
    return keep
