"""A KV cache for generation and attention of new queries over it
(include/attn_cache.h: attn_kv_cache_* and attn_sdpa_cached).

    cache = attn.KVCache(batch=2, kv_heads=8, capacity=4096, head_dim=64,
                         dtype="float16")
    cache.append(k, v)                 # (B, Hkv, T, D) each: the prompt
    out = attn.sdpa_cached(q, cache)   # q (B, H, T, D), causal bottom-right
    cache.append(k1, v1)               # then one token per step ...
    out1 = attn.sdpa_cached(q1, cache)

One KVCache holds one attention layer's K and V. dtype is the storage:
"float32", "float16", "bfloat16" or "q8" (8-bit blocks of 32 values with
one float32 scale each; see attn_cache.h for the layout and its error).
"""

import ctypes
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import (ATTN_BF16, ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_SHAPE,
                   ATTN_F16, ATTN_F32, ATTN_F64, ATTN_Q8, fail)
from ._lib import passable, shape_str
from ._masks import ALIGNS, IMPLS, MaskArgs, int_or_none, lengths_arg

_STORAGE = {"float32": ATTN_F32, "float16": ATTN_F16, "bfloat16": ATTN_BF16,
            "q8": ATTN_Q8}
_INPUT = {np.dtype(np.float32): ATTN_F32, np.dtype(np.float16): ATTN_F16,
          np.dtype(np.float64): ATTN_F64}


class KVCacheConfig(_lib.Struct):
    _fields_ = [
        ("batch", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("capacity", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("value_dim", ctypes.c_int64),
        ("dtype", ctypes.c_int),
    ]


_P = ctypes.POINTER
_T = _P(_lib.Tensor)
_I64P = _P(ctypes.c_int64)
_DECLS = {
    "attn_kv_cache_config_init": (None, [_P(KVCacheConfig)]),
    "attn_kv_cache_bytes": (ctypes.c_int, [_P(KVCacheConfig), _P(ctypes.c_size_t)]),
    "attn_kv_cache_create": (ctypes.c_int, [_P(KVCacheConfig), _P(ctypes.c_void_p)]),
    "attn_kv_cache_free": (None, [ctypes.c_void_p]),
    "attn_kv_cache_lengths": (ctypes.c_int, [ctypes.c_void_p, _I64P]),
    "attn_kv_cache_append": (ctypes.c_int, [ctypes.c_void_p, _T, _T, _I64P]),
    "attn_kv_cache_append_docs": (ctypes.c_int, [ctypes.c_void_p, _T, _T, _I64P,
                                                 _I64P]),
    "attn_kv_cache_doc_ids": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64,
                                             ctypes.c_int64, ctypes.c_int64,
                                             _I64P]),
    "attn_kv_cache_truncate": (ctypes.c_int, [ctypes.c_void_p, _I64P]),
    "attn_kv_cache_clear": (ctypes.c_int, [ctypes.c_void_p]),
    "attn_kv_cache_reorder": (ctypes.c_int, [ctypes.c_void_p, _I64P]),
    "attn_kv_cache_read": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64,
                                          ctypes.c_int64, _T, _T]),
    "attn_sdpa_cached": (ctypes.c_int, [_T, ctypes.c_void_p, _P(_lib.SdpaOpts),
                                        _T, ctypes.c_void_p]),
}
for _name, (_res, _args) in _DECLS.items():
    _lib.lib.declare(_name, _res, _args)
_want = _lib.lib.attn_sizeof(b"attn_kv_cache_config")
if _want and _want != ctypes.sizeof(KVCacheConfig):
    raise ImportError("sizeof(attn_kv_cache_config) is %d bytes in C but %d in "
                      "the binding" % (_want, ctypes.sizeof(KVCacheConfig)))


def _count(x, name):
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        fail(ATTN_E_INVALID, "%s is %r; an integer >= 1 is needed", name, x)
    return int(x)


def _int_array(x, name, B):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        fail(ATTN_E_DTYPE, "%s must hold integers, not %s", name, a.dtype)
    if a.ndim == 0:
        a = np.full(B, int(a))
    if a.shape != (B,):
        fail(ATTN_E_SHAPE, "%s has shape %s but the cache has %d entries (one "
             "per entry is needed)", name, shape_str(a.shape), B)
    a = np.ascontiguousarray(a, dtype=np.int64)
    return a, a.ctypes.data_as(_I64P)


class KVCache:
    """The K and V of one attention layer for `batch` sequences: shapes
    (batch, kv_heads, capacity, head_dim) and (..., value_dim), each entry
    with its own length (see `lengths`). Storage dtype "float32",
    "float16", "bfloat16" or "q8". Memory is held by the C library until
    close() (or garbage collection)."""

    def __init__(self, batch, kv_heads, capacity, head_dim, dtype="float32",
                 value_dim=None):
        if dtype not in _STORAGE:
            fail(ATTN_E_DTYPE, "dtype is %r; one of 'float32', 'float16', "
                 "'bfloat16', 'q8' is needed", dtype)
        cfg = KVCacheConfig()
        _lib.lib.attn_kv_cache_config_init(byref(cfg))
        cfg.batch = _count(batch, "batch")
        cfg.kv_heads = _count(kv_heads, "kv_heads")
        cfg.capacity = _count(capacity, "capacity")
        cfg.head_dim = _count(head_dim, "head_dim")
        cfg.value_dim = 0 if value_dim is None else _count(value_dim, "value_dim")
        cfg.dtype = _STORAGE[dtype]
        self._ptr = ctypes.c_void_p()
        _lib.call("attn_kv_cache_create", byref(cfg), byref(self._ptr))
        self.batch, self.kv_heads = cfg.batch, cfg.kv_heads
        self.capacity, self.head_dim = cfg.capacity, cfg.head_dim
        self.value_dim = cfg.value_dim or cfg.head_dim
        self.dtype = dtype
        size = ctypes.c_size_t()
        _lib.call("attn_kv_cache_bytes", byref(cfg), byref(size))
        self.nbytes = size.value

    def _handle(self):
        if not self._ptr:
            fail(ATTN_E_INVALID, "the cache is closed")
        return self._ptr

    def close(self):
        """Releases the storage now (further use raises AttnError)."""
        if getattr(self, "_ptr", None):
            _lib.lib.attn_kv_cache_free(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __del__(self):
        self.close()

    def __repr__(self):
        return ("KVCache(batch=%d, kv_heads=%d, capacity=%d, head_dim=%d, "
                "value_dim=%d, dtype=%r)" % (self.batch, self.kv_heads,
                                             self.capacity, self.head_dim,
                                             self.value_dim, self.dtype))

    @property
    def lengths(self):
        """Valid positions of each entry, int64 array (batch,)."""
        out = np.zeros(self.batch, dtype=np.int64)
        _lib.call("attn_kv_cache_lengths", self._handle(),
                  out.ctypes.data_as(_I64P))
        return out

    def _kv(self, x, name, dim):
        x = np.asarray(x)
        if x.dtype not in _INPUT:
            fail(ATTN_E_DTYPE, "%s has dtype %s; float32, float16 or float64 is "
                 "needed", name, x.dtype)
        if x.ndim != 4:
            fail(ATTN_E_SHAPE, "%s has shape %s; (batch, kv_heads, T, %d) is "
                 "needed", name, shape_str(x.shape), dim)
        if 0 in x.shape:
            fail(ATTN_E_SHAPE, "%s has an empty axis (shape %s)", name,
                 shape_str(x.shape))
        if not x.dtype.isnative:
            x = x.astype(x.dtype.newbyteorder("="))
        x, st = passable(x)
        return x, _lib.tensor(x, _INPUT[x.dtype], None, st)

    def append(self, key, value, counts=None, doc_ids=None):
        """Appends new positions: key (batch, kv_heads, T, head_dim), value
        (batch, kv_heads, T, value_dim), float32/float16/float64. counts
        (batch,) in [0, T] appends only the first counts[b] rows of entry b
        (ragged batches); None appends all T. doc_ids (batch, T) or (T,)
        integers: the document of each new position (packed documents,
        attn_kv_cache_append_docs), non-decreasing along an entry from its
        last cached id; without doc_ids the new positions continue each
        entry's last document. Raises AttnError (and changes nothing) on
        overflow of the capacity, bad shapes, non-finite values or
        decreasing ids."""
        h = self._handle()
        k, K = self._kv(key, "key", self.head_dim)
        v, V = self._kv(value, "value", self.value_dim)
        keep = None
        ptr = None
        if counts is not None:
            keep, ptr = _int_array(counts, "counts", self.batch)
        if doc_ids is None:
            _lib.call("attn_kv_cache_append", h, byref(K), byref(V), ptr,
                      tensors={"k": K, "v": V})
        else:
            T = k.shape[2]
            d = np.asarray(doc_ids)
            if d.dtype.kind not in "iu":
                fail(ATTN_E_DTYPE, "doc_ids must hold integers, not %s", d.dtype)
            if d.ndim == 1:
                d = np.broadcast_to(d, (self.batch,) + d.shape)
            if d.shape != (self.batch, T):
                fail(ATTN_E_SHAPE, "doc_ids has shape %s but (%d, %d) or (%d,) "
                     "is needed (one id per new position)",
                     shape_str(np.shape(doc_ids)), self.batch, T, T)
            d = np.ascontiguousarray(d, dtype=np.int64)
            _lib.call("attn_kv_cache_append_docs", h, byref(K), byref(V), ptr,
                      d.ctypes.data_as(_I64P), tensors={"k": K, "v": V})
            del d
        del k, v, keep

    def _span(self, entry, start, count, clamp=False):
        """count (None: to the entry's end) checked against the stored
        positions before anything is allocated for them."""
        if entry >= self.batch:
            fail(ATTN_E_SHAPE, "entry %d is outside [0, %d)", entry, self.batch)
        n = int(self.lengths[entry])
        if count is None:
            count = max(n - int(start), 0) if clamp else n - int(start)
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) \
                or count < 0:
            fail(ATTN_E_INVALID, "count is %r; an integer >= 0 is needed", count)
        if int(start) + int(count) > n:
            fail(ATTN_E_SHAPE, "positions %d .. %d of entry %d are asked for, but "
                 "it holds %d (capacity %d)", int(start), int(start) + int(count) - 1,
                 entry, n, self.capacity)
        return int(count)

    def doc_ids(self, entry, start=0, count=None):
        """Document ids of positions start .. start+count-1 of one entry
        (int64; count None: to the entry's end). Raises AttnError for a
        cache never given doc_ids."""
        h = self._handle()
        for name, x in (("entry", entry), ("start", start)):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0:
                fail(ATTN_E_INVALID, "%s is %r; an integer >= 0 is needed", name, x)
        count = self._span(entry, start, count, clamp=True)
        out = np.zeros(count, np.int64)
        _lib.call("attn_kv_cache_doc_ids", h, int(entry), int(start), int(count),
                  out.ctypes.data_as(_I64P))
        return out

    def truncate(self, lengths):
        """Rollback: entry b keeps its first lengths[b] positions (an int
        applies to every entry); lengths never grow an entry."""
        a, ptr = _int_array(lengths, "lengths", self.batch)
        _lib.call("attn_kv_cache_truncate", self._handle(), ptr)
        del a

    def clear(self):
        """Every length to 0."""
        _lib.call("attn_kv_cache_clear", self._handle())

    def reorder(self, index):
        """Beam search: the new entry b is the old entry index[b] (repeats
        and omissions allowed)."""
        a, ptr = _int_array(index, "index", self.batch)
        _lib.call("attn_kv_cache_reorder", self._handle(), ptr)
        del a

    def read(self, entry, start=0, count=None):
        """Stored positions start .. start+count-1 of one entry as float32
        (dequantized for q8): (k, v) of shapes (kv_heads, count, head_dim)
        and (kv_heads, count, value_dim). count None: to the entry's end."""
        h = self._handle()
        for name, x in (("entry", entry), ("start", start)):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0:
                fail(ATTN_E_INVALID, "%s is %r; an integer >= 0 is needed", name, x)
        count = self._span(entry, start, count)
        k = np.zeros((1, self.kv_heads, int(count), self.head_dim), np.float32)
        v = np.zeros((1, self.kv_heads, int(count), self.value_dim), np.float32)
        if count > 0:
            K, V = _lib.tensor(k, ATTN_F32), _lib.tensor(v, ATTN_F32)
            _lib.call("attn_kv_cache_read", h, int(entry), int(start), byref(K),
                      byref(V))
        return k[0], v[0]


def sdpa_cached(query, cache, is_causal=True, scale=None, *,
                causal_alignment="bottom-right", window=None,
                query_lengths=None, return_lse=False, impl="auto",
                threads=None, alibi_slopes=None, alibi_mode="causal",
                softcap=None, sinks=None, doc_ids=None):
    """Attention of new queries over a KVCache (attn_sdpa_cached).

    query (batch, heads, Lq, head_dim), float32/float16/float64 (float64 is
    computed as float32); heads a multiple of cache.kv_heads (grouped
    heads). The keys are the cached positions of each entry (its length);
    with the default is_causal=True and causal_alignment="bottom-right", new
    query t of an entry sees every cached position up to its own, the new
    queries being the last query_lengths[b] (default Lq) positions: append
    their key/value first. window=(left, right) limits that to a sliding
    window. impl "auto" (the split-key kernel), "ref" (the double
    reference over the stored values) or "flash_bf16" (over a bfloat16
    cache on a CPU with AVX512_BF16: the kernel on bf16 tile products, for
    prefill chunks; elsewhere "auto").

    The score modifiers are scaled_dot_product_attention's: softcap,
    alibi_slopes (True or one per head; alibi_mode "causal" or
    "symmetric", the distance from the query's aligned position), sinks
    (one logit per head; lse includes it). doc_ids (batch, Lq) or (Lq,):
    the document of each query; it sees only cached keys of its document,
    the ids given to cache.append(..., doc_ids=) (chunks of keys of other
    documents are skipped).

    Returns the output (batch, heads, Lq, value_dim) float32, and the
    log-sum-exp (batch, heads, Lq) with return_lse=True. A query that sees
    no key gives zeros (lse -inf, or its head's sink).
    """
    if not isinstance(cache, KVCache):
        fail(ATTN_E_INVALID, "cache is %s; an attn.KVCache is needed",
             type(cache).__name__)
    h = cache._handle()
    q = np.asarray(query)
    if q.dtype not in _INPUT:
        fail(ATTN_E_DTYPE, "query has dtype %s; float32, float16 or float64 is "
             "needed", q.dtype)
    if q.dtype == np.float64:
        q = q.astype(np.float32)
    if q.ndim != 4 or 0 in q.shape:
        fail(ATTN_E_SHAPE, "query has shape %s; (batch, heads, Lq, %d) is needed",
             shape_str(q.shape), cache.head_dim)
    if not q.dtype.isnative:
        q = q.astype(q.dtype.newbyteorder("="))
    q, sq = passable(q)
    Q = _lib.tensor(q, _INPUT[q.dtype], None, sq)
    B, H, Lq = q.shape[:3]
    if impl not in ("auto", "ref", "flash_bf16"):
        fail(ATTN_E_INVALID, "impl is %r; 'auto', 'ref' or 'flash_bf16' is "
             "needed", impl)
    opts = _lib.SdpaOpts()
    _lib.lib.attn_sdpa_opts_init(byref(opts))
    opts.impl = IMPLS[impl]
    if is_causal not in (True, False, 0, 1):
        fail(ATTN_E_INVALID, "is_causal is %r; True or False is needed", is_causal)
    opts.mask.causal = 1 if is_causal else 0
    if causal_alignment not in ALIGNS:
        fail(ATTN_E_INVALID, "causal_alignment is %r; 'bottom-right' (new "
             "queries at the end of the cache) or 'top-left' is needed",
             causal_alignment)
    opts.mask.align = ALIGNS[causal_alignment]
    if window is not None:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            fail(ATTN_E_INVALID, "window is %r; a pair (left, right) of counts "
                 "or None is needed", window)
        opts.mask.window_left = int_or_none(window[0], "window[0] (left)")
        opts.mask.window_right = int_or_none(window[1], "window[1] (right)")
    if scale is not None:
        s = _lib.as_float(scale)
        if not (s > 0 and np.isfinite(s)):
            fail(ATTN_E_INVALID, "scale is %r; it must be positive and finite",
                 scale)
        opts.scale = s
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) \
                or not 0 <= threads <= 1 << 16:
            fail(ATTN_E_INVALID, "threads is %r; a count >= 1 (or None) is "
                 "needed", threads)
        opts.threads = int(threads)
    keep = None
    if query_lengths is not None:
        keep, opts.mask.query_lengths = lengths_arg(query_lengths,
                                                    "query_lengths", B, Lq)
    mods = MaskArgs.modifiers_only()
    mods.score_mods(opts.mask, H, B, Lq, cache.capacity,
                    alibi_slopes=alibi_slopes, alibi_mode=alibi_mode,
                    softcap=softcap, sinks=sinks)
    if doc_ids is not None:
        d = mods.doc_array(doc_ids, "doc_ids", B, Lq)
        opts.mask.doc_q = d.ctypes.data_as(_I64P)
        opts.mask.n_doc_q = d.size
    out, O = _lib.out_tensor((B, H, Lq, cache.value_dim), np.float32, ATTN_F32)
    lse = np.empty((B, H, Lq), np.float32) if return_lse else None
    _lib.call("attn_sdpa_cached", byref(Q), h, byref(opts), byref(O),
              lse.ctypes.data if lse is not None else None,
              tensors={"q": Q, "out": O})
    del keep, mods
    return (out, lse) if return_lse else out
