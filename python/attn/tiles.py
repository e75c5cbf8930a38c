"""Attention weights streamed tile by tile (attn_sdpa_weight_tiles) without
the Lq x Lk matrix, and block averages of them (attn_blockavg_*) for
heatmaps of long sequences."""

import ctypes
from ctypes import byref

import numpy as np

from . import _lib
from ._call import SdpaCall
from ._lib import ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_SHAPE, fail, shape_str

# attn_weight_tile_fn; w as a plain address (no pointer object per tile)
TILE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_int64)
_T = ctypes.POINTER(_lib.Tensor)
_ACC = ctypes.c_void_p
for _name, _res, _args in (
        ("attn_sdpa_weight_tiles", ctypes.c_int,
         [_T, _T, ctypes.c_void_p, ctypes.POINTER(_lib.SdpaOpts), TILE_FN,
          ctypes.c_void_p]),
        ("attn_blockavg_create", ctypes.c_int,
         [ctypes.c_int64] * 5 + [ctypes.POINTER(_ACC)]),
        ("attn_blockavg_free", None, [_ACC]),
        ("attn_blockavg_tile", ctypes.c_int,
         [_ACC] + [ctypes.c_int64] * 6 + [ctypes.c_void_p, ctypes.c_int64]),
        ("attn_blockavg_size", ctypes.c_int, [_ACC] + [ctypes.POINTER(ctypes.c_int64)] * 4),
        ("attn_blockavg_result", ctypes.c_int, [_ACC, ctypes.c_void_p, ctypes.c_void_p]),
        ("attn_blockavg_visible", ctypes.c_int,
         [_ACC, ctypes.POINTER(_lib.Mask), ctypes.c_int64, ctypes.c_int64,
          ctypes.c_void_p])):
    _lib.lib.declare(_name, _res, _args)


def _prepare(query, key, attn_mask, is_causal, scale, enable_gqa, kw):
    """The validated call: key stands in for value (only q, k and the mask
    matter)."""
    c = SdpaCall(query, key, key, attn_mask, 0.0, is_causal, scale, enable_gqa,
              kw.pop("causal_alignment"), kw.pop("window"), kw.pop("key_lengths"),
              kw.pop("query_lengths"), None, "auto", None, kw.pop("dtype"),
              block_sparse=kw.pop("block_sparse"),
              random_blocks=kw.pop("random_blocks"))
    return c


def _lse(c, lse):
    """lse as contiguous float32 after checks; None: from a forward."""
    if lse is None:
        lse = c.forward(False, True)[2]
    lse = np.asarray(lse)
    if lse.dtype.kind != "f":
        fail(ATTN_E_DTYPE, "lse has dtype %s; a float array is needed", lse.dtype)
    if lse.shape != c.lse_shape:
        fail(ATTN_E_SHAPE, "lse has shape %s but %s is needed (the forward's "
             "return_lse)", shape_str(lse.shape), shape_str(c.lse_shape))
    return _lib.c_array(lse, dtype=np.float32)


def _stream(c, lse, on_tile):
    """Runs attn_sdpa_weight_tiles with on_tile(b, h, q0, nq, k0, nk, w,
    ldw) -> stop; an exception in on_tile stops the stream and is raised
    here once C has returned."""
    errors = []

    def trampoline(user, b, h, q0, nq, k0, nk, w, ldw):
        if errors:
            return 1
        try:
            return 1 if on_tile(b, h, q0, nq, k0, nk, w, ldw) else 0
        except BaseException as e:  # noqa: B902 - re-raised below, never lost
            errors.append(e)
            return 1

    fn = TILE_FN(trampoline)  # referenced until the call returns
    try:
        _lib.call("attn_sdpa_weight_tiles", byref(c.Q), byref(c.K),
                  lse.ctypes.data, byref(c.opts), fn, None,
                  tensors=dict(c.mask_tensors, q=c.Q, k=c.K))
    finally:
        del fn
    if errors:
        raise errors[0]


def _lead_index(c, b, h):
    """The index of map (b, h) of C into the leading axes of the scores."""
    idx = [0] * (len(c.score_shape) - 2)
    if c.axes[0] is not None:
        idx[c.axes[0]] = b
    if c.axes[1] is not None:
        idx[c.axes[1]] = h
    return tuple(idx)


@_lib.nomem
def weight_tiles(query, key, lse, callback, attn_mask=None, is_causal=False,
                 scale=None, enable_gqa=False, *, causal_alignment="top-left",
                 window=None, key_lengths=None, query_lengths=None,
                 block_sparse=None, random_blocks=None, dtype=None):
    """Streams the normalized attention weights (before dropout) through
    callback(index, q0, k0, tile) without holding the (Lq, Lk) matrix.

    query, key and the mask arguments are those of
    scaled_dot_product_attention; lse is what it returned with
    return_lse=True (None: computed here by a forward). tile is a float32
    (nq, nk) array equal to weights[index + (slice(q0, q0 + nq), slice(k0,
    k0 + nk))], index being the leading indices of the map ((n, h), (n,)
    or ()). It is valid only during the call (copy it to keep it). Every
    weight arrives exactly once; masked ones are 0. callback is called from
    one thread at a time; returning True stops the stream, and an exception
    stops it and is raised here. Returns the number of tiles delivered.
    """
    if not callable(callback):
        fail(ATTN_E_INVALID, "callback is %r; a callable(index, q0, k0, tile) "
             "is needed", callback)
    c = _prepare(query, key, attn_mask, is_causal, scale, enable_gqa,
                      dict(causal_alignment=causal_alignment, window=window,
                           key_lengths=key_lengths, query_lengths=query_lengths,
                           block_sparse=block_sparse, random_blocks=random_blocks,
                           dtype=dtype))
    lse = _lse(c, lse)
    count = [0]

    def on_tile(b, h, q0, nq, k0, nk, w, ldw):
        buf = (ctypes.c_float * ((nq - 1) * ldw + nk)).from_address(w)
        tile = np.lib.stride_tricks.as_strided(
            np.frombuffer(buf, dtype=np.float32), (nq, nk), (4 * ldw, 4),
            writeable=False)
        count[0] += 1
        return callback(_lead_index(c, b, h), q0, k0, tile)

    _stream(c, lse, on_tile)
    return count[0]


@_lib.nomem
def block_average(query, key, lse=None, attn_mask=None, is_causal=False,
                  scale=None, enable_gqa=False, *, max_cells=512, index=None,
                  return_visible=False, causal_alignment="top-left",
                  window=None, key_lengths=None, query_lengths=None,
                  block_sparse=None, random_blocks=None, dtype=None):
    """Block averages of the attention weights, for heatmaps of long
    sequences: each axis is cut into blocks of ceil(L / max_cells)
    positions and every block holds the mean of its weights (masked ones
    count as 0), computed from streamed tiles without the (Lq, Lk) matrix.

    Arguments as weight_tiles. index picks one map ((n, h) for rank-4
    inputs, an int for rank 3, None for all maps). Returns a float32 array
    (..., R, C) (just (R, C) for one map), and with return_visible=True
    also a bool array of the same shape: False where the mask hides every
    pair of the block (pass it as heatmap's attn_mask to draw them grey,
    with x_extent=Lk, y_extent=Lq for position ticks).
    """
    if isinstance(max_cells, bool) or not isinstance(max_cells, (int, np.integer)) \
            or max_cells < 1:
        fail(ATTN_E_INVALID, "max_cells is %r; an integer >= 1 is needed", max_cells)
    c = _prepare(query, key, attn_mask, is_causal, scale, enable_gqa,
                      dict(causal_alignment=causal_alignment, window=window,
                           key_lengths=key_lengths, query_lengths=query_lengths,
                           block_sparse=block_sparse, random_blocks=random_blocks,
                           dtype=dtype))
    lead = c.score_shape[:-2]
    maps = [(b, h) for b in range(c.B) for h in range(c.H)]
    if index is not None:
        want = index if isinstance(index, tuple) else (index,)
        if len(want) != len(lead) or any(
                isinstance(i, bool) or not isinstance(i, (int, np.integer))
                or not 0 <= i < n for i, n in zip(want, lead)):
            fail(ATTN_E_SHAPE, "index is %r; %s of the leading axes %s is needed",
                 index, "an index" if lead else "None (one map)", shape_str(lead))
        maps = [m for m in maps if _lead_index(c, *m) == tuple(int(i) for i in want)]
    lse = _lse(c, lse)
    accs = {}
    try:
        for bh in maps:
            acc = _ACC()
            _lib.call("attn_blockavg_create", c.Lq, c.Lk, bh[0], bh[1],
                      int(max_cells), byref(acc))
            accs[bh] = acc
        last = maps[-1]
        tile_fn = _lib.lib.attn_blockavg_tile

        def on_tile(b, h, q0, nq, k0, nk, w, ldw):
            acc = accs.get((b, h))
            if acc is not None:
                tile_fn(acc, b, h, q0, nq, k0, nk, w, ldw)
            return (b, h) > last  # tiles come in (b, h) order

        _stream(c, lse, on_tile)
        n = [ctypes.c_int64() for _ in range(4)]
        _lib.call("attn_blockavg_size", accs[last], *[byref(x) for x in n])
        R, C = n[0].value, n[1].value
        shape = (R, C) if index is not None else lead + (R, C)
        avg = np.zeros(shape, dtype=np.float32)
        vis = np.ones(shape, dtype=bool) if return_visible else None
        for bh, acc in accs.items():
            at = _lead_index(c, *bh) if index is None else ()
            out = np.empty((R, C), dtype=np.float32)
            _lib.call("attn_blockavg_result", acc, out.ctypes.data, None)
            avg[at] = out
            if return_visible:
                v = np.empty((R, C), dtype=np.uint8)
                _lib.call("attn_blockavg_visible", acc, byref(c.opts.mask),
                          c.B, c.H, v.ctypes.data, tensors=c.mask_tensors)
                vis[at] = v != 0
    finally:
        for acc in accs.values():
            _lib.lib.attn_blockavg_free(acc)
    return (avg, vis) if return_visible else avg
