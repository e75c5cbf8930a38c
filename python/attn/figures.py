"""More pictures over the C viz library: the interactive HTML viewer,
several maps side by side with one colour scale, the difference of two
weight arrays, and the 2-D geometry of a dot product."""

import ctypes
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import ATTN_E_INVALID, ATTN_E_SHAPE, fail, shape_str
from ._masks import MaskArgs
from .viz import Panel, Weights, c_text, heatmap_opts, labels, out_path


class HtmlOpts(_lib.Struct):
    _fields_ = [
        ("title", ctypes.c_char_p),
        ("q_tokens", ctypes.POINTER(ctypes.c_char_p)),
        ("k_tokens", ctypes.POINTER(ctypes.c_char_p)),
        ("first_axis", ctypes.c_char_p),
    ]


_lib.MIRRORED.update({"attn_html_opts": HtmlOpts})
_T = ctypes.POINTER(_lib.Tensor)
for _name, _res, _args in (
        ("attn_html_write", ctypes.c_int, [ctypes.c_char_p, _T, ctypes.POINTER(HtmlOpts)]),
        ("attn_figure_write", ctypes.c_int,
         [ctypes.c_char_p, ctypes.POINTER(Panel), ctypes.c_int, ctypes.c_int,
          ctypes.c_void_p]),
        ("attn_diff_write", ctypes.c_int, [ctypes.c_char_p, _T, _T, ctypes.c_void_p]),
        ("attn_geometry_write", ctypes.c_int,
         [ctypes.c_char_p, ctypes.POINTER(ctypes.c_double),
          ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_char_p])):
    _lib.lib.declare(_name, _res, _args)
_lib.lib.check_layout()


@_lib.nomem
def html(weights, path, tokens=None, key_tokens=None, title=None, dtype=None,
         batch=0, *, x_tokens=None, y_tokens=None, axes=None):
    """Writes one self-contained HTML file (inline CSS and JavaScript, no
    network) to explore weights (Lq, Lk), (batch, Lq, Lk), (batch, head,
    Lq, Lk) or (layer, batch, head, Lq, Lk) (axes= names the leading axes
    otherwise, e.g. ("layer", "head")): query tokens left, key tokens right,
    a line per pair as opaque as its weight, hover to isolate a token,
    selectors of the first axis and the head, and the heatmap. tokens label the queries (and the keys when Lq == Lk);
    key_tokens label the keys of cross-attention. Up to 1024 tokens per
    side. x_tokens (keys) and y_tokens (queries) name the axes as in
    heatmap; they take the place of key_tokens and tokens. Weights (layer,
    batch, head, Lq, Lk) of EncoderLayer show batch entry `batch`. Returns
    path."""
    if y_tokens is not None:
        tokens = y_tokens
    if x_tokens is not None:
        key_tokens = x_tokens
    w = np.asarray(weights)
    if w.ndim == 5:
        if axes is not None and tuple(axes) != ("layer", "batch", "head"):
            fail(ATTN_E_INVALID, "axes of rank-5 weights is ('layer', 'batch', 'head')")
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) \
                or not 0 <= batch < w.shape[1]:
            fail(ATTN_E_SHAPE, "batch = %r is outside [0, %d)", batch, w.shape[1])
        weights = w[:, batch]
        axes = ("layer", "head")
    W = Weights(weights, dtype, axes=axes)
    p = out_path(path)
    o = HtmlOpts()
    o.title = c_text(title, "title")
    # the first picker is the view's first axis, by its name
    first = [n for k, n in enumerate(W.names) if W.axes[0] == k]
    o.first_axis = (first[0] if first else "batch").encode()
    o.q_tokens, keep_q = labels(tokens, W.Lq, "tokens")
    o.k_tokens, keep_k = labels(key_tokens, W.Lk, "key_tokens")
    _lib.call("attn_html_write", p, byref(W.T), byref(o), tensors={"w": W.T})
    del keep_q, keep_k
    return path


@_lib.nomem
def figure(maps, path, titles=None, ncols=None, title=None, x_tokens=None,
           y_tokens=None, annotate=None, *, attn_mask=None, is_causal=False,
           causal_alignment="top-left", window=None, block_sparse=None,
           random_blocks=None, cmap="viridis", vmin=None, vmax=None,
           x_title=None, y_title=None, colorbar=True, max_cells=None,
           cell_px=None, dtype=None):
    """Draws several (Lq, Lk) maps side by side with ONE colour scale and
    one colour bar (scaled vs unscaled, heads of two models, ...). maps is a
    sequence of 2-D weight arrays; titles one title per panel; ncols the
    panels per row (default: all in one row). Tokens need maps of one
    shape. The mask arguments apply to every panel (hidden cells grey).
    Returns path."""
    if isinstance(maps, np.ndarray) and maps.ndim == 2:
        maps = [maps]
    try:
        maps = list(maps)
    except TypeError:
        fail(ATTN_E_INVALID, "maps is %r; a sequence of (Lq, Lk) arrays is needed",
             type(maps).__name__)
    if not 1 <= len(maps) <= 4096:
        fail(ATTN_E_INVALID, "maps has %d arrays; 1 to 4096 are needed", len(maps))
    Ws = [Weights(m, dtype, "maps[%d]" % i) for i, m in enumerate(maps)]
    for i, W in enumerate(Ws):
        if W.w.ndim != 2:
            fail(ATTN_E_SHAPE, "maps[%d] has shape %s; each map is (Lq, Lk) "
                 "(pick one with w[n, h])", i, shape_str(W.w.shape))
    if titles is not None:
        titles = [t if isinstance(t, str) else str(t) for t in titles]
        if len(titles) != len(maps):
            fail(ATTN_E_SHAPE, "%d titles for %d maps", len(titles), len(maps))
    if ncols is None:
        ncols = len(maps)
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols < 1:
        fail(ATTN_E_INVALID, "ncols is %r; an integer >= 1 is needed", ncols)
    p = out_path(path)
    Lq, Lk = Ws[0].Lq, Ws[0].Lk
    o, keep = heatmap_opts(Lq, Lk, title, x_tokens, y_tokens, annotate, cmap,
                            vmin, vmax, x_title, y_title, colorbar, max_cells,
                            cell_px)
    mask = _lib.Mask()
    _lib.lib.attn_mask_init(byref(mask))
    margs = MaskArgs(mask, (Lq, Lk), (None, None, 0, 1), 1, attn_mask, is_causal,
                     causal_alignment, window, allow_bias=False,
                     block_sparse=block_sparse, random_blocks=random_blocks)
    o.mask = ctypes.pointer(mask)
    panels = (Panel * len(Ws))()
    enc = [None if titles is None else _lib.utf8(t, "titles") for t in
           (titles or [None] * len(Ws))]
    for P, W, t in zip(panels, Ws, enc):
        P.w = ctypes.pointer(W.T)
        P.title = t
    tensors = dict(margs.tensors, **{"w%d" % i: W.T for i, W in enumerate(Ws)})
    _lib.call("attn_figure_write", p, panels, len(Ws), int(ncols), byref(o),
              tensors=tensors)
    del keep, enc
    return path


@_lib.nomem
def diff_heatmap(a, b, path, title=None, x_tokens=None, y_tokens=None,
                 annotate=None, *, vmin=None, vmax=None, x_title=None,
                 y_title=None, colorbar=True, max_cells=None, cell_px=None,
                 dtype=None):
    """Draws a - b (two weight arrays of one shape; every map in a grid)
    in a diverging colour map, white at 0, the scale symmetric around 0
    unless vmin/vmax are given. Returns path."""
    A = Weights(a, dtype, "a")
    B = Weights(b, dtype, "b")
    if A.w.shape != B.w.shape:
        fail(ATTN_E_SHAPE, "a has shape %s but b has %s", shape_str(A.w.shape),
             shape_str(B.w.shape))
    p = out_path(path)
    o, keep = heatmap_opts(A.Lq, A.Lk, title, x_tokens, y_tokens, annotate,
                            "diverging", vmin, vmax, x_title, y_title, colorbar,
                            max_cells, cell_px)
    _lib.call("attn_diff_write", p, byref(A.T), byref(B.T), byref(o),
              tensors={"a": A.T, "b": B.T})
    del keep
    return path


@_lib.nomem
def geometry(a, b, path, a_name=None, b_name=None):
    """Draws two 2-D vectors as arrows from the origin, with their dot
    product and cosine in the title (the geometry behind q . k). Returns
    path."""
    vecs = []
    for name, v in (("a", a), ("b", b)):
        x = np.asarray(v)
        if x.dtype.kind not in "iuf" or x.shape != (2,):
            fail(ATTN_E_SHAPE, "%s has shape %s and dtype %s; two numbers are "
                 "needed", name, shape_str(x.shape), x.dtype)
        vecs.append((ctypes.c_double * 2)(*x.astype(np.float64).tolist()))
    p = out_path(path)
    _lib.call("attn_geometry_write", p, vecs[0], vecs[1], c_text(a_name, "a_name"),
              c_text(b_name, "b_name"))
    return path
