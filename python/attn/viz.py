"""Pictures and diagnostics of attention weights (the C viz library):
heatmap, stats, text_heatmap, compare.

Weights are (Lq, Lk), (batch, Lq, Lk), (batch, head, Lq, Lk) or (layer,
batch, head, Lq, Lk) arrays, as the attn command-line tool names them by
rank; axes= names the leading axes of others, e.g. axes=("head",) for
PyTorch's unbatched (head, Lq, Lk), axes=("layer", "head") for a stack of
layers. They are float32, float64, float16 or bfloat16 (uint16 bits with
dtype="bfloat16"), with any strides. The mask arguments mean what they mean
in scaled_dot_product_attention (a bool attn_mask, True = attend): masked
cells are drawn grey and weight on them is reported as a leak.
"""

import ctypes
import os
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import (ATTN_BF16, ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_SHAPE, fail,
                   shape_str)
from ._masks import MaskArgs


class HeatmapOpts(_lib.Struct):
    _fields_ = [
        ("title", ctypes.c_char_p),
        ("x_title", ctypes.c_char_p),
        ("y_title", ctypes.c_char_p),
        ("x_labels", ctypes.POINTER(ctypes.c_char_p)),
        ("y_labels", ctypes.POINTER(ctypes.c_char_p)),
        ("cmap", ctypes.c_int),
        ("vmin", ctypes.c_double),
        ("vmax", ctypes.c_double),
        ("annotate", ctypes.c_int),
        ("max_cells", ctypes.c_int),
        ("cell_px", ctypes.c_int),
        ("colorbar", ctypes.c_int),
        ("x_extent", ctypes.c_int64),
        ("y_extent", ctypes.c_int64),
        ("mask", ctypes.POINTER(_lib.Mask)),
        ("colorbar_label", ctypes.c_char_p),
    ]


class Stats(_lib.Struct):
    _fields_ = [
        ("rows", ctypes.c_int64),
        ("rows_empty", ctypes.c_int64),
        ("row_sum_dev_max", ctypes.c_double),
        ("row_sum_dev_mean", ctypes.c_double),
        ("entropy_rows", ctypes.c_int64),
        ("entropy_min", ctypes.c_double),
        ("entropy_mean", ctypes.c_double),
        ("entropy_max", ctypes.c_double),
        ("max_weight", ctypes.c_double),
        ("leak_total", ctypes.c_double),
        ("leak_max", ctypes.c_double),
        ("leak_count", ctypes.c_int64),
        ("nan_count", ctypes.c_int64),
        ("inf_count", ctypes.c_int64),
        ("verdict", ctypes.c_uint),
    ]


class TermOpts(_lib.Struct):
    _fields_ = [
        ("color", ctypes.c_int),
        ("half_blocks", ctypes.c_int),
        ("width", ctypes.c_int),
        ("title", ctypes.c_char_p),
        ("x_labels", ctypes.POINTER(ctypes.c_char_p)),
        ("y_labels", ctypes.POINTER(ctypes.c_char_p)),
        ("vmin", ctypes.c_double),
        ("vmax", ctypes.c_double),
        ("mask", ctypes.POINTER(_lib.Mask)),
    ]


# one map of a figure (attn_figure_write): viz draws grids, figures.py the rest
class Panel(_lib.Struct):
    _fields_ = [
        ("w", ctypes.POINTER(_lib.Tensor)),
        ("b", ctypes.c_int64),
        ("h", ctypes.c_int64),
        ("title", ctypes.c_char_p),
        ("mask", ctypes.POINTER(_lib.Mask)),
    ]


class CompareResult(_lib.Struct):
    _fields_ = [
        ("max_abs", ctypes.c_double),
        ("mean_abs", ctypes.c_double),
        ("mean_kl", ctypes.c_double),
        ("max_kl", ctypes.c_double),
        ("rows", ctypes.c_int64),
        ("nonfinite", ctypes.c_int64),
    ]


_lib.MIRRORED.update({"attn_heatmap_opts": HeatmapOpts, "attn_stats": Stats,
                      "attn_term_opts": TermOpts, "attn_panel": Panel,
                      "attn_compare_result": CompareResult})
_T = ctypes.POINTER(_lib.Tensor)
for _name, _res, _args in (
        ("attn_heatmap_opts_init", None, [ctypes.POINTER(HeatmapOpts)]),
        ("attn_heatmap_write", ctypes.c_int,
         [ctypes.c_char_p, _T, ctypes.c_int64, ctypes.c_int64,
          ctypes.POINTER(HeatmapOpts)]),
        ("attn_heatmap_grid_write", ctypes.c_int,
         [ctypes.c_char_p, _T, ctypes.POINTER(HeatmapOpts)]),
        ("attn_stats_compute", ctypes.c_int,
         [_T, ctypes.POINTER(_lib.Mask), ctypes.POINTER(Stats), ctypes.POINTER(Stats)]),
        ("attn_stats_verdict", ctypes.c_int,
         [ctypes.POINTER(Stats), ctypes.c_char_p, ctypes.c_size_t,
          ctypes.POINTER(ctypes.c_size_t)]),
        ("attn_term_opts_init", None, [ctypes.POINTER(TermOpts)]),
        ("attn_term_render", ctypes.c_int,
         [_T, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(TermOpts),
          ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
        ("attn_compare_weights", ctypes.c_int,
         [_T, _T, ctypes.POINTER(CompareResult)])):
    _lib.lib.declare(_name, _res, _args)
_lib.lib.check_layout()

VERDICT_FLAGS = {1: "too_uniform", 2: "too_concentrated", 4: "mask_leak",
                 8: "not_normalized", 16: "nonfinite"}
_CMAPS = {"viridis": 0, "diverging": 1}
_TERM_COLORS = {"plain": 0, "256": 1, "truecolor": 2}


class Weights:
    """A weights array as a (N, H, Lq, Lk) view, with its mask."""

    def __init__(self, weights, dtype, name="weights", mask_kw=None, axes=None):
        w = np.asarray(weights)
        dt = w.dtype
        if dtype == "bfloat16":
            _lib.bf16_bits(dt, name)
            code = ATTN_BF16
        elif dtype is not None:
            fail(ATTN_E_INVALID, "dtype is %r; only 'bfloat16' (or None) is "
                 "accepted here", dtype)
        elif _lib.float_code(dt) is not None:
            code = _lib.float_code(dt)
        else:
            fail(ATTN_E_DTYPE, "%s has dtype %s; float32, float64, float16 or "
                 "bfloat16 (uint16 bits with dtype='bfloat16') is needed", name, dt)
        if not dt.isnative:
            w = w.astype(dt.newbyteorder("="))
        if w.ndim not in (2, 3, 4, 5):
            fail(ATTN_E_SHAPE, "%s has rank %d (shape %s); (Lq, Lk), (batch, Lq, "
                 "Lk), (batch, head, Lq, Lk) or (layer, batch, head, Lq, Lk) is "
                 "needed", name, w.ndim, shape_str(w.shape))
        if 0 in w.shape:
            fail(ATTN_E_SHAPE, "%s has an empty axis (shape %s)", name,
                 shape_str(w.shape))
        self.rank = w.ndim
        self.names = _axis_names(axes, w.ndim)
        self.layers = self.batch = None
        if w.ndim == 5:
            # (layer, batch, head, Lq, Lk) of EncoderLayer(return_weights=True):
            # the first two axes folded into one, map n = layer * batch + b
            self.layers, self.batch = w.shape[:2]
            w = w.reshape((w.shape[0] * w.shape[1],) + w.shape[2:])
        st = _lib.element_strides(w)
        if st is None:
            w = _lib.c_array(w)
            st = _lib.element_strides(w)
        # the view (N, H, Lq, Lk): a head axis is H, any other axis N
        self.axes = {2: (None, None, 0, 1),
                     3: (None, 0, 1, 2) if self.names == ("head",) else (0, None, 1, 2),
                     4: (1, 0, 2, 3) if self.names[:1] == ("head",) else (0, 1, 2, 3)}[w.ndim]
        self.w = w
        self.T = _lib.tensor(w, code, self.axes, st)
        self.N, self.H, self.Lq, self.Lk = tuple(self.T.shape)
        self.mask = None
        if mask_kw is not None:
            self.mask = _lib.Mask()
            _lib.lib.attn_mask_init(byref(self.mask))
            self.masks = MaskArgs(self.mask, w.shape, self.axes, self.N,
                                  allow_bias=False, **mask_kw)

    def title(self, n, h):
        """The name of map (n, h) of the view by the axes: "batch 1, head 2"."""
        if self.rank == 5:
            l, b = n // self.batch, n % self.batch
            return ("layer %d, head %d" % (l, h) if self.batch == 1 else
                    "layer %d, batch %d, head %d" % (l, b, h))
        view = {0: n, 1: h}
        at = [a for a in self.axes[:2]]
        parts = []
        for k, name in enumerate(self.names):
            # leading axis k of the array is view axis at.index(k)
            parts.append("%s %d" % (name, view[at.index(k)]))
        return ", ".join(parts)

    def index(self, index):
        """(n, h) of one map from index: None for a single map, an int
        along the one leading axis of rank 3, (n, h) for rank 4, (l, b, h)
        for rank 5."""
        r = self.rank
        if index is None:
            return 0, 0
        if r == 5:
            if not isinstance(index, (tuple, list)) or len(index) != 3:
                fail(ATTN_E_INVALID, "index is %r; (layer, batch, head) is "
                     "needed for weights of rank 5", index)
            l, b, h = index
            for v, lim, what in ((l, self.layers, "layer"), (b, self.batch, "batch")):
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) \
                        or not 0 <= v < lim:
                    fail(ATTN_E_SHAPE, "index %s = %r is outside [0, %d)", what, v, lim)
            index = (int(l) * self.batch + int(b), h)
            r = 4
        if r == 2:
            fail(ATTN_E_INVALID, "index is %r but the weights are one map", index)
        if r == 3:
            n, h = (0, index) if self.axes[0] is None else (index, 0)
        else:
            if not isinstance(index, (tuple, list)) or len(index) != 2:
                fail(ATTN_E_INVALID, "index is %r; (n, h) is needed for weights "
                     "of shape %s", index, shape_str(self.w.shape))
            n, h = index
        for v, lim, what in ((n, self.N, "n"), (h, self.H, "h")):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) \
                    or not 0 <= v < lim:
                fail(ATTN_E_SHAPE, "index %s = %r is outside [0, %d)", what, v, lim)
        return int(n), int(h)


_AXIS_NAMES = {3: ("batch",), 4: ("batch", "head"), 5: ("layer", "batch", "head")}


def _axis_names(axes, rank):
    """The names of the leading axes: axes, checked, or the rank's."""
    if axes is None:
        return _AXIS_NAMES.get(rank, ())
    if isinstance(axes, str):
        axes = tuple(a.strip() for a in axes.split(","))
    axes = tuple(axes)
    if len(axes) != rank - 2 or len(set(axes)) != len(axes) or \
            any(a not in ("layer", "batch", "head") for a in axes):
        fail(ATTN_E_INVALID, "axes is %r; %d distinct names among 'layer', "
             "'batch' and 'head' are needed for weights of rank %d", axes,
             max(rank - 2, 0), rank)
    if rank == 5 and axes != ("layer", "batch", "head"):
        fail(ATTN_E_INVALID, "axes of rank-5 weights is ('layer', 'batch', 'head')")
    return axes


def labels(tokens, n, name):
    if tokens is None:
        return None, None
    toks = [t if isinstance(t, str) else str(t) for t in tokens]
    if len(toks) != n:
        fail(ATTN_E_SHAPE, "%s has %d tokens but the weights have %d %s", name,
             len(toks), n, "columns (keys)" if name in ("x_tokens", "key_tokens")
             else "rows (queries)")
    enc = [_lib.utf8(t, "%s[%d]" % (name, i)) for i, t in enumerate(toks)]
    arr = (ctypes.c_char_p * n)(*enc)
    return ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p)), (arr, enc)


def c_text(x, name):
    if x is None:
        return None
    if not isinstance(x, str):
        fail(ATTN_E_INVALID, "%s is %r; a string is needed", name, x)
    return _lib.utf8(x, name)


def _scale(vmin, vmax):
    if (vmin is None) != (vmax is None):
        fail(ATTN_E_INVALID, "give both vmin and vmax, or neither (automatic)")
    if vmin is None:
        return 0.0, 0.0
    vmin, vmax = float(vmin), float(vmax)
    if not (np.isfinite(vmin) and np.isfinite(vmax) and vmin < vmax):
        fail(ATTN_E_INVALID, "vmin %r and vmax %r: finite with vmin < vmax are "
             "needed", vmin, vmax)
    return vmin, vmax


def out_path(path):
    try:
        return _lib.fspath(path)
    except TypeError:
        fail(ATTN_E_INVALID, "path is %r; a file name is needed", path)


def heatmap_opts(Lq, Lk, title=None, x_tokens=None, y_tokens=None,
                  annotate=None, cmap="viridis", vmin=None, vmax=None,
                  x_title=None, y_title=None, colorbar=True, max_cells=None,
                  cell_px=None, x_extent=None, y_extent=None):
    """attn_heatmap_opts from heatmap's arguments, and the objects its
    label pointers need alive."""
    o = HeatmapOpts()
    _lib.lib.attn_heatmap_opts_init(byref(o))
    o.title, o.x_title, o.y_title = (c_text(title, "title"), c_text(x_title, "x_title"),
                                     c_text(y_title, "y_title"))
    o.x_labels, keep_x = labels(x_tokens, Lk, "x_tokens")
    o.y_labels, keep_y = labels(y_tokens, Lq, "y_tokens")
    if cmap not in _CMAPS:
        fail(ATTN_E_INVALID, "cmap is %r; 'viridis' or 'diverging' is needed", cmap)
    o.cmap = _CMAPS[cmap]
    o.vmin, o.vmax = _scale(vmin, vmax)
    if annotate not in (None, True, False):
        fail(ATTN_E_INVALID, "annotate is %r; None (automatic), True or False", annotate)
    o.annotate = -1 if annotate is None else int(bool(annotate))
    for name, v in (("max_cells", max_cells), ("cell_px", cell_px),
                    ("x_extent", x_extent), ("y_extent", y_extent)):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                fail(ATTN_E_INVALID, "%s is %r; an integer is needed", name, v)
            setattr(o, name, int(v))
    o.colorbar = 1 if colorbar else 0
    return o, (keep_x, keep_y)


@_lib.nomem
def heatmap(weights, path, x_tokens=None, y_tokens=None, title=None,
            annotate=None, *, index=None, attn_mask=None, is_causal=False,
            causal_alignment="top-left", window=None, key_lengths=None,
            query_lengths=None, cmap="viridis", vmin=None, vmax=None,
            x_title=None, y_title=None, colorbar=True, max_cells=None,
            cell_px=None, dtype=None, block_sparse=None, random_blocks=None,
            x_extent=None, y_extent=None, axes=None):
    """Draws attention weights to path (.png, .svg or .pdf by extension).

    weights (Lq, Lk) draws one map; (batch, Lq, Lk), (batch, head, Lq, Lk)
    or (layer, batch, head, Lq, Lk) draws every map in a grid with one
    colour scale, each titled by its axes (axes= names them otherwise, e.g.
    ("head",) or ("layer", "head")), or only map index (an int for rank 3,
    (n, h) for rank 4, (l, b, h) for rank 5) when given. x_tokens label the keys (columns), y_tokens the
    queries (rows). annotate: None = automatic (values in cells of maps up
    to 12 x 12), True, False. Cells hidden by the mask arguments are grey.
    x_extent, y_extent: the positions the columns and rows stand for when
    the map is already averaged (block_average), for the ticks.
    Returns path.
    """
    W = Weights(weights, dtype, mask_kw=dict(
        attn_mask=attn_mask, is_causal=is_causal,
        causal_alignment=causal_alignment, window=window,
        key_lengths=key_lengths, query_lengths=query_lengths,
        block_sparse=block_sparse, random_blocks=random_blocks), axes=axes)
    p = out_path(path)
    o, keep = heatmap_opts(W.Lq, W.Lk, title, x_tokens, y_tokens, annotate,
                            cmap, vmin, vmax, x_title, y_title, colorbar,
                            max_cells, cell_px, x_extent, y_extent)
    o.mask = ctypes.pointer(W.mask)
    tensors = dict(W.masks.tensors, w=W.T)
    if index is None and W.rank > 2 and W.names != ("batch", "head"):
        # every map, titled by its own axes (the library's grid says
        # "batch n, head h")
        n = W.N * W.H
        if n > 4096:
            fail(ATTN_E_SHAPE, "weights hold %d maps; a grid holds at most 4096", n)
        panels = (Panel * n)()
        titles = []
        for i in range(n):
            titles.append(W.title(i // W.H, i % W.H).encode())
            panels[i].w = ctypes.pointer(W.T)
            panels[i].b, panels[i].h, panels[i].title = i // W.H, i % W.H, titles[-1]
        ncols = (W.H + 1) // 2 if W.N == 1 and W.H > 4 else W.H
        _lib.call("attn_figure_write", p, panels, n, ncols, byref(o), tensors=tensors)
        del titles
    elif index is None and W.rank > 2:
        _lib.call("attn_heatmap_grid_write", p, byref(W.T), byref(o), tensors=tensors)
    else:
        n, h = W.index(index)
        _lib.call("attn_heatmap_write", p, byref(W.T), n, h, byref(o), tensors=tensors)
    del keep
    return path


def _stats_dict(s):
    d = {name: getattr(s, name) for name, _ in Stats._fields_}
    d["flags"] = [v for k, v in sorted(VERDICT_FLAGS.items()) if s.verdict & k]
    n = ctypes.c_size_t()
    _lib.call("attn_stats_verdict", byref(s), None, 0, byref(n))
    buf = ctypes.create_string_buffer(n.value + 1)
    _lib.call("attn_stats_verdict", byref(s), buf, len(buf), None)
    d["advice"] = buf.value.decode("utf-8", "replace")
    return d


@_lib.nomem
def stats(weights, attn_mask=None, is_causal=False, *, causal_alignment="top-left",
          window=None, key_lengths=None, query_lengths=None, per_head=False,
          dtype=None, block_sparse=None, random_blocks=None, axes=None):
    """Diagnostics of attention weights: row sums, normalized entropy (0 =
    one-hot, 1 = uniform), weight leaked onto masked keys, NaN/Inf counts,
    the verdict flags and the advice in words.

    Returns a dict with the fields of attn_stats ("rows", "entropy_mean",
    "leak_total", ..., "verdict"), "flags" (names of the verdict flags) and
    "advice"; with per_head=True also "per_head": one such dict per map,
    nested like the weights' leading axes, and "axes": their names
    (("batch", "head") for rank 4; axes= names them otherwise).
    """
    W = Weights(weights, dtype, mask_kw=dict(
        attn_mask=attn_mask, is_causal=is_causal,
        causal_alignment=causal_alignment, window=window,
        key_lengths=key_lengths, query_lengths=query_lengths,
        block_sparse=block_sparse, random_blocks=random_blocks), axes=axes)
    overall = Stats()
    heads = (Stats * (W.N * W.H))() if per_head else None
    _lib.call("attn_stats_compute", byref(W.T), byref(W.mask), heads,
              byref(overall), tensors=dict(W.masks.tensors, w=W.T))
    d = _stats_dict(overall)
    d["axes"] = W.names
    if per_head:
        each = [_stats_dict(s) for s in heads]
        r = W.rank
        d["per_head"] = (each if r == 2 else each if r == 3 else
                         [each[n * W.H:(n + 1) * W.H] for n in range(W.N)])
        if r == 5:
            d["per_head"] = [d["per_head"][l * W.batch:(l + 1) * W.batch]
                             for l in range(W.layers)]
        if r == 4 and W.axes[0] == 1:  # (head, X, ..): nested as given
            d["per_head"] = [list(x) for x in zip(*d["per_head"])]
    return d


@_lib.nomem
def text_heatmap(weights, index=None, x_tokens=None, y_tokens=None, title=None,
                 *, color="plain", width=80, half_blocks=None, attn_mask=None,
                 is_causal=False, vmin=None, vmax=None, dtype=None,
                 block_sparse=None, random_blocks=None):
    """One map as text for a terminal: shades (color="plain") or colour
    escapes ("256", "truecolor"). Returns the string."""
    W = Weights(weights, dtype, mask_kw=dict(
        attn_mask=attn_mask, is_causal=is_causal, block_sparse=block_sparse,
        random_blocks=random_blocks))
    n, h = W.index(index)
    o = TermOpts()
    _lib.lib.attn_term_opts_init(byref(o))
    if color not in _TERM_COLORS:
        fail(ATTN_E_INVALID, "color is %r; 'plain', '256' or 'truecolor'", color)
    o.color = _TERM_COLORS[color]
    if half_blocks is not None:
        o.half_blocks = 1 if half_blocks else 0
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)):
        fail(ATTN_E_INVALID, "width is %r; an integer is needed", width)
    o.width = int(width)
    o.title = c_text(title, "title")
    o.x_labels, keep_x = labels(x_tokens, W.Lk, "x_tokens")
    o.y_labels, keep_y = labels(y_tokens, W.Lq, "y_tokens")
    o.vmin, o.vmax = _scale(vmin, vmax)
    o.mask = ctypes.pointer(W.mask)
    size = ctypes.c_size_t()
    tensors = dict(W.masks.tensors, w=W.T)
    _lib.call("attn_term_render", byref(W.T), n, h, byref(o), None, 0, byref(size),
              tensors=tensors)
    buf = ctypes.create_string_buffer(size.value + 1)
    _lib.call("attn_term_render", byref(W.T), n, h, byref(o), buf, len(buf),
              byref(size), tensors=tensors)
    del keep_x, keep_y
    return buf.value.decode("utf-8")


@_lib.nomem
def compare(a, b, dtype=None):
    """Differences of two weight arrays of one shape: max and mean |a - b|,
    and KL(a || b) per row (mean and max; a is the teacher). Returns a
    dict."""
    A = Weights(a, dtype, "a")
    B = Weights(b, dtype, "b")
    if A.w.shape != B.w.shape:
        fail(ATTN_E_SHAPE, "a has shape %s but b has %s", shape_str(A.w.shape),
             shape_str(B.w.shape))
    r = CompareResult()
    _lib.call("attn_compare_weights", byref(A.T), byref(B.T), byref(r),
              tensors={"a": A.T, "b": B.T})
    return {name: getattr(r, name) for name, _ in CompareResult._fields_}
