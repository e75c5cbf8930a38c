"""scaled_dot_product_attention and its gradients over attn_sdpa_forward /
attn_sdpa_backward, with torch.nn.functional.scaled_dot_product_attention's
argument names and meanings; block_mask and the document helpers.

Arrays of rank 2 (L, E), 3 (N, L, E) or 4 (N, H, L, E) are passed to C as
rank-4 views with their own strides (_call.py); the mask keywords are
filled in by _masks.py.
"""

import ctypes
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import ATTN_E_DTYPE, ATTN_E_INVALID, ATTN_E_SHAPE, fail, shape_str
from ._call import SdpaCall, sum_to
from ._masks import user_functions
from .cache import sdpa_cached


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
             "and the end, (n + 1,), is needed", shape_str(a.shape))
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
                                 mask_mod=None, rope=None):
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
      rope              rotary positions on query and key before the
                        scores (attn_sdpa_opts.rope): a style ("neox",
                        "interleaved") or a dict of attn.rope's arguments
                        (style, theta, rotary_dim, scaling) with
                        q_positions and k_positions ((L,) or (B, L); None:
                        keys at j, query i at its aligned position, i or
                        i + Lk - Lq with causal_alignment="bottom-right");
                        sdpa_backward takes dq and dk back through it
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
        extra = [n for n, v in (("key", key), ("value", value),
                                ("attn_mask", attn_mask), ("key_lengths", key_lengths),
                                ("seed", seed), ("dtype", dtype),
                                ("block_sparse", block_sparse),
                                ("random_blocks", random_blocks),
                                ("cu_seqlens", cu_seqlens),
                                ("score_mod", score_mod),
                                ("mask_mod", mask_mod),
                                ("rope (the cache's own applies)", rope))
                 if v is not None]
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
    c = SdpaCall(query, key, value, attn_mask, dropout_p, is_causal, scale,
              enable_gqa, causal_alignment, window, key_lengths, query_lengths,
              seed, impl, threads, dtype, block_sparse=block_sparse,
              random_blocks=random_blocks,
              mods=dict(alibi_slopes=alibi_slopes, alibi_mode=alibi_mode,
                        softcap=softcap, sinks=sinks, doc_ids=doc_ids),
              user=dict(score_mod=score_mod, mask_mod=mask_mod), rope=rope)
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
                  score_mod=None, mask_mod=None, rope=None):
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
    c = SdpaCall(query, key, value, attn_mask, dropout_p, is_causal, scale,
              enable_gqa, causal_alignment, window, key_lengths, query_lengths,
              seed, impl, threads, dtype, backward=True,
              block_sparse=block_sparse, random_blocks=random_blocks,
              mods=dict(alibi_slopes=alibi_slopes, alibi_mode=alibi_mode,
                        softcap=softcap, sinks=sinks, doc_ids=doc_ids),
              user=dict(score_mod=score_mod, mask_mod=mask_mod), rope=rope)
    g, G = c.output_like(grad_out, "grad_out")
    if out is None or lse is None:
        out, _, lse = c.forward(False, True)
    o, O = c.output_like(out, "out")
    lse = np.asarray(lse)
    if lse.shape != c.lse_shape:
        fail(ATTN_E_SHAPE, "lse has shape %s but %s is needed (the forward's "
             "return_lse)", shape_str(lse.shape), shape_str(c.lse_shape))
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
            db = sum_to(db.reshape(c.masks.user_bias_shape), c.mask_shape)
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
    keep, _ = user_functions(None, mask_mod, C, C)
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

