"""Rotary position embeddings (include/attn.h: attn_rope_*).

    qr = attn.rope(q)                              # (B, H, L, D), neox halves
    kr = attn.rope(k, positions=np.arange(5, 5 + L))
    qr = attn.rope(q, theta=500000.0, scaling={"rope_type": "llama3",
                   "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192})

x is (L, D), (B, L, D) or (B, H, L, D); positions None (0 .. L-1), (L,)
or (B, L). style "neox" rotates feature i with i + R/2 (transformers'
Llama, Mistral, Qwen2), "interleaved" 2i with 2i + 1 (GPT-J, RoFormer);
rotary_dim R rotates the first R features (default all). scaling is
config.json's rope_scaling dict ("rope_type" or "type": "linear" or
"llama3") or None; "default" is no scaling.
"""

import ctypes

import numpy as np

from . import _lib
from ._lib import ATTN_E_INVALID, ATTN_E_SHAPE, ATTN_F32, ATTN_F64, fail

_STYLES = {"neox": 0, "interleaved": 1}

_P = ctypes.POINTER
_DECLS = {
    "attn_rope_init": (None, [_P(_lib.Rope)]),
    "attn_rope_forward": (ctypes.c_int, [
        _P(_lib.Rope), _P(_lib.Tensor), _P(ctypes.c_int64), ctypes.c_int64,
        _P(_lib.Tensor), ctypes.c_int]),
    "attn_rope_backward": (ctypes.c_int, [
        _P(_lib.Rope), _P(_lib.Tensor), _P(ctypes.c_int64), ctypes.c_int64,
        _P(_lib.Tensor), ctypes.c_int]),
    "attn_rope_inv_freq": (ctypes.c_int, [
        _P(_lib.Rope), ctypes.c_int64, _P(ctypes.c_double), ctypes.c_int64]),
}
for _name, (_res, _args) in _DECLS.items():
    _lib.lib.declare(_name, _res, _args)


def make_rope(theta=10000.0, style="neox", rotary_dim=None, scaling=None):
    """The C struct attn_rope for these arguments (checked by C on use)."""
    r = _lib.Rope()
    _lib.lib.attn_rope_init(ctypes.byref(r))
    if style not in _STYLES:
        fail(ATTN_E_INVALID, "style %r is neither 'neox' nor 'interleaved'",
             style)
    r.style = _STYLES[style]
    r.theta = float(theta)
    r.rotary_dim = 0 if rotary_dim is None else int(rotary_dim)
    if scaling is not None:
        if not isinstance(scaling, dict):
            fail(ATTN_E_INVALID, "scaling must be a dict like config.json's "
                 "rope_scaling, not %s", type(scaling).__name__)
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "linear":
            r.scaling = 1
            r.factor = float(scaling["factor"])
        elif kind == "llama3":
            r.scaling = 2
            r.factor = float(scaling["factor"])
            r.low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
            r.high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
            r.original_max_position = float(
                scaling.get("original_max_position_embeddings", 8192))
        elif kind not in (None, "default"):
            fail(ATTN_E_INVALID, "rope scaling %r is not supported (linear, "
                 "llama3 or default)", kind)
    return r


def _as4(x):
    if x.ndim == 2:
        return x[None, None]
    if x.ndim == 3:
        return x[:, None]
    if x.ndim == 4:
        return x
    fail(ATTN_E_SHAPE, "x has rank %d; rope takes (L, D), (B, L, D) or "
         "(B, H, L, D)", x.ndim)


def _positions(positions, B, L):
    if positions is None:
        return None, 0
    p = np.asarray(positions)
    if p.dtype.kind not in "iu":
        if p.size and not np.all(np.mod(p, 1) == 0):
            fail(ATTN_E_INVALID, "positions must be integers")
    p = _lib.c_array(p.astype(np.int64), np.int64)
    if p.shape not in ((L,), (B, L)):
        fail(ATTN_E_SHAPE, "positions has shape %s; it takes (%d,) or (%d, %d)",
             p.shape, L, B, L)
    return p, p.size


def _run(fn, x, positions, theta, style, rotary_dim, scaling, threads, add):
    x = np.asarray(x)
    dt = np.float64 if x.dtype == np.float64 else np.float32
    xc = _lib.c_array(x, dt)
    x4 = _as4(xc)
    B, L = x4.shape[0], x4.shape[2]
    p, n = _positions(positions, B, L)
    r = make_rope(theta, style, rotary_dim, scaling)
    out = np.zeros(x4.shape, dt) if add is None else add
    code = ATTN_F64 if dt == np.float64 else ATTN_F32
    xt = _lib.tensor(x4, code)
    ot = _lib.tensor(out, code)
    pp = None if p is None else p.ctypes.data_as(_P(ctypes.c_int64))
    _lib.call(fn, ctypes.byref(r), ctypes.byref(xt), pp, n, ctypes.byref(ot),
              int(threads))
    return out.reshape(x.shape)


def rope(x, positions=None, theta=10000.0, style="neox", rotary_dim=None,
         scaling=None, threads=0):
    """x rotated by its positions: float32 (float64 for float64 x), the
    shape of x. See the module's docstring for the arguments."""
    return _run("attn_rope_forward", x, positions, theta, style, rotary_dim,
                scaling, threads, None)


def rope_backward(grad, positions=None, theta=10000.0, style="neox",
                  rotary_dim=None, scaling=None, threads=0):
    """The gradient of rope at x given the gradient at its output (the
    transposed rotation)."""
    return _run("attn_rope_backward", grad, positions, theta, style,
                rotary_dim, scaling, threads, None)


def rope_inv_freq(head_dim, theta=10000.0, style="neox", rotary_dim=None,
                  scaling=None):
    """The rotary_dim / 2 angular frequencies (after scaling), float64."""
    r = make_rope(theta, style, rotary_dim, scaling)
    rd = int(rotary_dim or head_dim)
    out = np.zeros(max(rd // 2, 1), np.float64)
    _lib.call("attn_rope_inv_freq", ctypes.byref(r), int(head_dim),
              out.ctypes.data_as(_P(ctypes.c_double)), rd // 2)
    return out[:rd // 2]
