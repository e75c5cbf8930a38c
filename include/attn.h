/*
 * attn.h: attention mechanisms of the Transformer, in C11: the core.
 *
 * libattn's public API is one header per floor; each includes the floors
 * it stands on, and this one stands on nothing:
 *   attn.h         status, dtypes, tensor views, masks, scaled dot-product
 *                  attention (reference and flash), dropout, .npy files
 *   attn_layers.h  additive and multi-head attention, the encoder, linear,
 *                  LayerNorm, positions, parameter blocks and files
 *   attn_viz.h     pictures and diagnostics of attention weights
 *   attn_train.h   toy tasks, the model, AdamW, the trainer, checkpoints
 *   attn_cache.h   the KV cache and attention over it (attn_sdpa_cached)
 *   attn_pretrained.h  safetensors, WordPiece, BERT-family models
 *   attn_tokenizer.h   byte-level BPE (tokenizer.json, GGUF metadata)
 *   attn_gguf.h    GGUF files: metadata and (quantized) tensors
 *   attn_transformer.h the decoder, models and generation
 * Include the floors you use. Everything public is prefixed attn_
 * (functions, types) or ATTN_ (macros, enum values) and marked ATTN_API.
 *
 * Contents of this header:
 *   Status             attn_status, attn_strerror, attn_last_error
 *   Element types      attn_dtype, f16/bf16 conversion; tensor views
 *                      attn_tensor_4d, attn_tensor_bthd, attn_tensor_check
 *   Masks              attn_mask (causal, window, lengths, keep, bias,
 *                      block layouts, random blocks, score modifiers,
 *                      user score_mod / mask_mod, attn_block_mask),
 *                      attn_mask_visible,
 *                      builders for the tutorials' conventions
 *   Rotary positions   attn_rope, attn_rope_forward, attn_rope_backward
 *   Scaled dot-product attention
 *                      attn_sdpa_opts, attn_sdpa_forward,
 *                      attn_sdpa_backward, attn_sdpa_weight_tiles, dropout
 *   .npy files         attn_npy_read, attn_npy_write, attn_npy_convert
 *
 * Example: causal self-attention over one sequence (L = 4, D = 8).
 *
 *     float q[4 * 8], k[4 * 8], v[4 * 8], o[4 * 8];
 *     for (int i = 0; i < 4 * 8; i++) {
 *         q[i] = 0.1f * (float)(i % 7);
 *         k[i] = 0.2f * (float)(i % 5);
 *         v[i] = (float)i;
 *     }
 *     attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, 4, 8);
 *     attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, 4, 8);
 *     attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, 4, 8);
 *     attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, 4, 8);
 *     attn_sdpa_opts opts;
 *     attn_sdpa_opts_init(&opts);          // scale 1/sqrt(D), no mask
 *     opts.mask.causal = 1;                // query i sees keys 0..i
 *     attn_status st = attn_sdpa_forward(&Q, &K, &V, &opts, &O, NULL, NULL);
 *     if (st != ATTN_OK) {
 *         fprintf(stderr, "%s\n", attn_last_error());
 *         return 1;
 *     }
 *     printf("row 0 sees only key 0: o[0] = %g\n", o[0]);   // v[0] = 0
 *
 * Conventions (see docs/design-notes.md):
 *  - Every function that can fail returns attn_status; on failure
 *    attn_last_error() holds a thread-local message naming the argument and
 *    the numbers. The others cannot fail: initializers (*_init) and frees
 *    return void, queries and accessors return their value (documented at
 *    each). The library never prints, aborts or exits on a caller's mistake.
 *  - Tensors are views: the caller owns the memory. Shapes are (B, H, L, D)
 *    with strides in elements; a stride of 0 broadcasts.
 *  - Functions that compute gradients ADD into the gradient buffers; zero
 *    them first for a fresh gradient.
 *  - Examples in these headers are compiled and run by the tests
 *    (tests/header_examples.py): a comment line that begins "Example:" is
 *    followed by the body of a main(), indented by four spaces.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ATTN_API marks the public functions: the only symbols libattn.so exports
 * (the library is built with -fvisibility=hidden). Every public header of
 * attn (attn.h and the per-floor attn_*.h) includes this one for it. */
#ifndef ATTN_API
#if defined(__GNUC__) || defined(__clang__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif
#endif

/* ATTN_VERSION_MAJOR, _MINOR, _PATCH and ATTN_VERSION_STRING, made by the
 * build from the file VERSION; attn_version() returns the string. */
#include "attn_version.h"

/* ===================================================================== */
/* Status                                                                */
/* ===================================================================== */

/* One value per class of failure. Values are appended, never renumbered. */
typedef enum {
    ATTN_OK = 0,
    ATTN_E_INVALID = 1,     /* invalid argument: null pointer, bad option  */
    ATTN_E_SHAPE = 2,       /* shapes do not agree or are out of range     */
    ATTN_E_DTYPE = 3,       /* element type not accepted here              */
    ATTN_E_UNSUPPORTED = 4, /* valid request this build cannot serve       */
    ATTN_E_NOMEM = 5,       /* an allocation failed or a size overflowed   */
    ATTN_E_IO = 6,          /* a file could not be opened/read/written     */
    ATTN_E_FORMAT = 7,      /* a file's contents are malformed             */
    ATTN_E_NONFINITE = 8    /* NaN or Inf in an input that forbids them    */
} attn_status;

#define ATTN_STATUS_COUNT 9

/* Short name of a status class ("invalid argument", ...). Never NULL. */
ATTN_API const char *attn_strerror(attn_status status);

/* Detail message of the last failure on this thread ("" if none). The
 * pointer stays valid until the next failing call on the same thread. */
ATTN_API const char *attn_last_error(void);

/* Clears the thread's detail message. */
ATTN_API void attn_clear_error(void);

/* Library version as "MAJOR.MINOR.PATCH". */
ATTN_API const char *attn_version(void);

/* Size in bytes of a public struct named by its type name ("attn_tensor",
 * "attn_mask", "attn_sdpa_opts", ...); 0 for NULL or an unknown name.
 * Bindings that mirror the structs (python/attn with ctypes) compare it with
 * their own layout at load time, so a header change cannot go unnoticed. */
ATTN_API size_t attn_sizeof(const char *type_name);

/* ===================================================================== */
/* Element types and tensor views                                        */
/* ===================================================================== */

typedef enum {
    ATTN_F32 = 0,
    ATTN_F16 = 1,  /* IEEE binary16, stored as uint16_t            */
    ATTN_BF16 = 2, /* bfloat16 (upper half of an f32), uint16_t    */
    ATTN_F64 = 3,  /* reference paths and gradient checks          */
    ATTN_U8 = 4,   /* boolean masks: nonzero = true                */
    ATTN_I32 = 5,
    ATTN_I64 = 6,
    ATTN_Q8 = 7 /* KV cache storage only: 8-bit blocks with a scale
                      (attn_cache.h); no tensor view has this dtype     */
} attn_dtype;

#define ATTN_DTYPE_COUNT 8

/* Bytes per element (0 for an unknown dtype, and for ATTN_Q8, a block
 * format: tensor checks refuse views of it). */
ATTN_API size_t attn_dtype_size(attn_dtype dtype);
/* "f32", "f16", "bf16", "f64", "u8", "i32", "i64", "q8" ("?" if unknown). */
ATTN_API const char *attn_dtype_name(attn_dtype dtype);

/* Scalar conversions. f32 -> f16/bf16 round to nearest even; NaN stays NaN
 * and overflow becomes Inf. */
ATTN_API float attn_f16_to_f32(uint16_t h);
ATTN_API uint16_t attn_f32_to_f16(float f);
ATTN_API float attn_bf16_to_f32(uint16_t h);
ATTN_API uint16_t attn_f32_to_bf16(float f);

/* Converts n elements between any two of f32, f16, bf16, f64. */
ATTN_API attn_status attn_convert(const void *src, attn_dtype src_dtype,
                                  void *dst, attn_dtype dst_dtype, size_t n);

/* A view of a rank-4 array. shape is (B, H, L, D) for attention inputs.
 * stride[i] is the distance in elements between neighbours along axis i;
 * 0 broadcasts along that axis (only where a function says it may). */
typedef struct {
    void *data;
    attn_dtype dtype;
    int64_t shape[4];
    int64_t stride[4];
} attn_tensor;

/* A contiguous (row-major) view of shape (d0, d1, d2, d3). These
 * constructors cannot fail: a shape with an extent < 1 or too large to
 * address gives a view that attn_tensor_check (and every function taking
 * it) refuses. */
ATTN_API attn_tensor attn_tensor_4d(void *data, attn_dtype dtype, int64_t d0,
                                    int64_t d1, int64_t d2, int64_t d3);

/* A view of a batch-first (B, L, H, D) contiguous buffer, presented as
 * (B, H, L, D) through its strides: no copy. */
ATTN_API attn_tensor attn_tensor_bthd(void *data, attn_dtype dtype, int64_t b,
                                      int64_t l, int64_t h, int64_t d);

/* Checks a view: data not NULL, shape entries >= 1, strides >= 0, and that
 * the largest element offset and byte size fit in int64/size_t. name is used
 * in the message ("q", "k", ...). */
ATTN_API attn_status attn_tensor_check(const attn_tensor *t, const char *name);

/* Number of elements (product of shape); 0 on overflow or bad shape. */
ATTN_API int64_t attn_tensor_numel(const attn_tensor *t);

/* Reads element (i0,i1,i2,i3) as double, whatever its dtype. No checks. */
ATTN_API double attn_tensor_get(const attn_tensor *t, int64_t i0, int64_t i1,
                                int64_t i2, int64_t i3);

/* ===================================================================== */
/* Masks                                                                 */
/* ===================================================================== */

/* Where the causal diagonal (and the centre of a local window) lies when
 * Lq != Lk. With effective lengths lq, lk of a batch entry, query i sits at
 * key position i (TOP_LEFT, PyTorch is_causal) or i + lk - lq (BOTTOM_RIGHT,
 * FlashAttention and KV caches). */
typedef enum {
    ATTN_ALIGN_TOP_LEFT = 0,
    ATTN_ALIGN_BOTTOM_RIGHT = 1
} attn_align;

/* ---- user functions of the mask (attn_mask.score_mod / mask_mod) ------
 *
 * A score function changes the scores of one row segment in place: query
 * row i of head h of batch entry b, keys j0 .. j0+n-1 (1 <= n; the kernels
 * cut rows at tile and block boundaries, so the same row may come in
 * several calls of any lengths). Positions are those of the whole sequence
 * the mask was checked against, whatever tiles the kernel cuts it into
 * (over a KV cache, j is the cache position). On entry score[t] is the score of key j0 + t after every built-in
 * step (scale q.k, soft-cap, bias, ALiBi; see attn_mask); masked keys hold
 * -inf, and what the function writes there is ignored. The function writes
 * the new score of each visible entry: -inf masks it; NaN or +inf (or a
 * finite score beyond f32 in the f32 kernels, or a non-finite dscore) is
 * an error (ATTN_E_NONFINITE naming score_mod and (b, h, i, j)). dscore is
 * NULL in forward passes; in backward passes it is an array of n entries
 * that must receive d(new score)/d(old score) per entry (the gradient of
 * q, k and the bias flows through it). A new score must depend on (b, h,
 * i, j) and the old score only, not on n or j0.
 *
 * A mask function decides visibility of the same kind of segment: keep[t]
 * holds 1 on entry; clearing it hides key j0 + t. It combines by AND with
 * every other part of the mask: it is asked only within the keys that
 * padding, causal, window and documents leave to the row (it may be asked
 * about keys a keep tensor or layout hides; the answer is then moot), and
 * never inside blocks a block mask classifies EMPTY or FULL.
 *
 * Both return 0 on success; a nonzero value r stops the call, which
 * returns r when it is an attn_status (1 .. ATTN_E_NONFINITE) and
 * ATTN_E_INVALID otherwise, with a message naming the function, r and
 * (b, h, i, j0). When several calls fail at once, which one is reported
 * is not fixed; the outputs are then unspecified. The kernels call them
 * concurrently from their OpenMP threads, with the same ctx: they must be
 * reentrant (read-only ctx, or atomics). Positions of a segment are
 * exact integers; the scores are doubles (the flash kernels convert their
 * f32 scores, in segments of at most 64 keys). */
typedef int (*attn_score_mod_fn)(void *ctx, int64_t b, int64_t h, int64_t i,
                                 int64_t j0, int64_t n, double *score,
                                 double *dscore);
typedef int (*attn_mask_mod_fn)(void *ctx, int64_t b, int64_t h, int64_t i,
                                int64_t j0, int64_t n, uint8_t *keep);

/* Classes of the blocks of an attn_block_mask. */
enum { ATTN_BLOCK_EMPTY = 0, ATTN_BLOCK_FULL = 1, ATTN_BLOCK_PARTIAL = 2 };

/* What a mask function does over blocks of block_q queries x block_k keys
 * (FlexAttention's BlockMask): cls[((b * H + h) * nq + bi) * nk + bj] is
 * ATTN_BLOCK_EMPTY when it hides every pair of the block, FULL when it
 * keeps every one, PARTIAL otherwise. B and H are the attention's or 1
 * (the function does not depend on b, resp. h; built with b = 0, h = 0).
 * Built by attn_block_mask_build into caller-owned cls; the caller keeps
 * it while masks point to it and may reuse it for every call with the same
 * function (that is the point: build once, then the kernels skip EMPTY
 * tiles and ask the function nothing on FULL ones). */
typedef struct {
    int64_t B, H, Lq, Lk;      /* the shapes it was built for            */
    int64_t block_q, block_k;  /* block sizes (>= 1)                     */
    int64_t nq, nk;            /* ceil(Lq / block_q), ceil(Lk / block_k) */
    uint8_t *cls;              /* [B * H * nq * nk], caller-owned        */
    attn_mask_mod_fn mask_mod; /* the function and context it describes */
    void *mask_ctx;
} attn_block_mask;

/* Entries of cls for these shapes in *n (B * H * nq * nk). ATTN_E_INVALID
 * for a NULL n or a size < 1, ATTN_E_NOMEM when the count overflows. */
ATTN_API attn_status attn_block_mask_size(int64_t B, int64_t H, int64_t Lq,
                                          int64_t Lk, int64_t block_q,
                                          int64_t block_k, int64_t *n);

/* Fills *bm (overwritten) with the classes of fn over (B, H, Lq, Lk) in
 * blocks of block_q x block_k, into cls[n_cls] (n_cls at least
 * attn_block_mask_size's count). Cost: fn is asked once for every
 * (b, h, i, j), in row segments of at most block_k keys: B H Lq Lk
 * evaluations, single-threaded (the kernels then ask it only inside
 * PARTIAL blocks). A nonzero return of fn is returned as described above.
 * Errors: ATTN_E_INVALID (NULL bm, fn or cls, sizes < 1), ATTN_E_SHAPE
 * (n_cls too small), ATTN_E_NOMEM. */
ATTN_API attn_status attn_block_mask_build(attn_block_mask *bm,
                                           attn_mask_mod_fn fn, void *ctx,
                                           int64_t B, int64_t H, int64_t Lq,
                                           int64_t Lk, int64_t block_q,
                                           int64_t block_k, uint8_t *cls,
                                           int64_t n_cls);

/* One mask descriptor, understood by every kernel. All parts combine by AND
 * (a key is visible only if every part keeps it); bias is added to the
 * scaled scores of visible keys. Masked keys are excluded exactly. A query
 * row with no visible key gives output 0, weights 0 and lse -inf.
 *
 * For query i, key j of batch entry b with effective lengths lq, lk (the
 * query/key lengths if given, else Lq, Lk), let c = i (TOP_LEFT) or
 * c = i + lk - lq (BOTTOM_RIGHT). Key j is visible when all hold:
 *   - i < lq and j < lk                            (padding)
 *   - causal: j <= c
 *   - window_left >= 0: j >= c - window_left
 *   - window_right >= 0: j <= c + window_right
 *   - keep tensor: keep[b, h, i, j] != 0 (axes of size 1 broadcast)
 *   - block sparse: layout[h', i / block, j / block] != 0
 *   - random blocks: block (h, i / rb, j / rb) drawn as kept
 */
typedef struct {
    int causal;           /* 0 or 1                                          */
    attn_align align;     /* alignment of causal and window                 */
    int64_t window_left;  /* < 0: unbounded (default -1); at most 2^61      */
    int64_t window_right; /* < 0: unbounded (default -1); at most 2^61      */

    const int64_t *key_lengths; /* [B] valid keys per batch entry, or NULL   */
    const int64_t
        *query_lengths; /* [B] valid queries per entry, or NULL      */

    /* Boolean keep-mask of shape (B, H, Lq, Lk) where any axis may instead
     * have size 1 (or stride 0) to broadcast, e.g. a key-padding mask
     * (B, 1, 1, Lk); dtype u8, i32 or f32, nonzero = attend. NULL: none. */
    const attn_tensor *keep;

    /* Additive float bias (f32 or f64), same shape rules as keep. Added to
     * scale * q.k. -inf entries mask exactly; NaN and +inf are refused.
     * NULL: none. */
    const attn_tensor *bias;

    /* Block-sparse layout: block_size > 0 enables it. layout is u8 of shape
     * (layout_heads, ceil(Lq / block_size), ceil(Lk / block_size)),
     * row-major; layout_heads is 1 (shared by all heads) or H. */
    int64_t block_size;
    const uint8_t *layout;
    int64_t layout_heads;

    /* Seeded random blocks: random_block > 0 enables it. Block
     * (h, i / random_block, j / random_block) is kept with probability
     * random_keep_p, drawn from a counter-based hash of (random_seed, h,
     * block row, block column): the same pattern for every batch entry, in
     * every kernel, on any thread count. */
    int64_t random_block;
    double random_keep_p;
    uint64_t random_seed;

    /* ---- score modifiers and documents (appended; zero = off) ----------
     * The score of a visible pair is, in this order:
     *   x = scale * q.k
     *   x = softcap * tanh(x / softcap)            (softcap > 0; Gemma 2)
     *   x = x + bias + alibi(h, i, j)
     * and the softmax of row i of head h runs over its visible keys plus,
     * with sinks, one extra logit sinks[h] that has no value:
     *   w_j = exp(x_j) / (exp(sinks[h]) + sum_l exp(x_l)),
     * so lse includes the sink, and a row that sees no key gives output 0
     * with lse = sinks[h] (-inf without sinks). ALiBi (Press et al., "Train
     * Short, Test Long", ICLR 2022) with c = i (TOP_LEFT) or i + lk - lq
     * (BOTTOM_RIGHT), the aligned query position of the mask:
     *   ATTN_ALIBI_CAUSAL:    alibi = -slope[h] * (c - j)    (the paper, BLOOM)
     *   ATTN_ALIBI_SYMMETRIC: alibi = -slope[h] * |c - j|    (MPT, bidirectional)
     * With a causal mask the two agree. slopes NULL: attn_alibi_slopes(H).
     * Documents: query i of entry b sees key j only when
     * doc_q[b * Lq + i] == doc_k[b * Lk + j]; ids are non-decreasing along
     * each entry (packed sequences), so tiles across documents are skipped.
     * Each array is given with its element count, checked against the
     * shapes (n_alibi_slopes = n_sinks = H, n_doc_q = B * Lq,
     * n_doc_k = B * Lk). Backward adds dL/dsinks into sinks_grad when it is
     * not NULL. dbias (backward) is the gradient at the biased score:
     * it does not carry the cap's slope (1 - tanh^2), which dQ and dK do.
     * Attention over a KV cache takes all of these, the keys' document ids
     * being stored in the cache (attn_cache.h); the ring (attn_dist.h)
     * takes them with arrays of the full sequence; additive attention
     * refuses all but documents (ATTN_E_UNSUPPORTED). */
    double softcap;             /* > 0: cap; 0: off; < 0 or NaN refused   */
    int alibi;                  /* attn_alibi: 0 off, CAUSAL, SYMMETRIC   */
    const double *alibi_slopes; /* [H] or NULL (geometric from H)         */
    int64_t n_alibi_slopes;
    const double *sinks; /* [H] per-head sink logit, or NULL       */
    int64_t n_sinks;
    double *sinks_grad;   /* [n_sinks] added into by backward, or NULL */
    const int64_t *doc_q; /* [B * Lq] document of each query, or NULL */
    int64_t n_doc_q;
    const int64_t *doc_k; /* [B * Lk], or NULL: doc_q (Lq == Lk)    */
    int64_t n_doc_k;

    /* ---- user functions (appended; NULL = off) --------------------------
     * score_mod runs after the built-in steps above (x = score_mod(x));
     * mask_mod hides pairs (AND with the other parts); see
     * attn_score_mod_fn for the contract. block_mask, when not NULL, must
     * have been built from mask_mod with mask_ctx (checked) for (B or 1,
     * H or 1, Lq, Lk): the flash kernels then skip tiles whose blocks are
     * all EMPTY and ask mask_mod nothing inside FULL blocks. Without it
     * they ask mask_mod for every row of every tile the other parts leave
     * visible (no tile is skipped through mask_mod; nothing is built
     * behind the caller's back). The reference always asks mask_mod for
     * every pair and ignores the block mask, so a stale block mask shows
     * up as a difference from it. Served by the reference, the flash
     * forward, weights (attn_sdpa_weight_tiles too) and backward, and
     * attn_sdpa_cached (mask_mod without a block mask) and the ring
     * (attn_dist.h: positions of the full sequence, a block mask built
     * over it); additive attention refuses them (ATTN_E_UNSUPPORTED). */
    attn_score_mod_fn score_mod;
    void *score_ctx;
    attn_mask_mod_fn mask_mod;
    void *mask_ctx;
    const attn_block_mask *block_mask;
} attn_mask;

/* ALiBi variants of attn_mask.alibi. */
enum { ATTN_ALIBI_NONE = 0, ATTN_ALIBI_CAUSAL = 1, ATTN_ALIBI_SYMMETRIC = 2 };

/* The standard ALiBi slopes for H heads into slopes[H]: with n the largest
 * power of two <= H, slope k = 2^(-8 (k + 1) / n) for k < n, then
 * 2^(-4 (2 (k - n) + 1) / n) (every other slope of 2n heads), as in the
 * paper's reference code. ATTN_E_INVALID for H < 1 or NULL slopes. */
ATTN_API attn_status attn_alibi_slopes(int64_t H, double *slopes);

/* Document ids from cumulative sequence starts, FlashAttention's varlen
 * cu_seqlens: documents d = 0 .. n - 1 occupy positions cu[d] ..
 * cu[d + 1] - 1 of a packed sequence of L, so ids[j] = d there (an empty
 * document, cu[d] == cu[d + 1], takes no position). cu has n + 1 entries
 * with cu[0] = 0, cu[d] <= cu[d + 1] and cu[n] = L; ids [L] is overwritten,
 * ready for attn_mask's doc_q / doc_k (repeat it per batch entry, or pass
 * B = 1 with the whole batch packed into L). Errors: ATTN_E_INVALID (NULL
 * pointers, n < 1, cu[0] != 0, cu decreasing, naming the index and the
 * values), ATTN_E_SHAPE (cu[n] != L).
 *
 * Example: three documents of lengths 2, 3 and 1 packed into L = 6.
 *     const int64_t cu[4] = {0, 2, 5, 6};
 *     int64_t ids[6];
 *     if (attn_doc_ids_from_cu_seqlens(cu, 3, 6, ids)) return 1;
 *     printf("%lld %lld\n", (long long)ids[1], (long long)ids[2]);  // 0 1
 */
ATTN_API attn_status attn_doc_ids_from_cu_seqlens(const int64_t *cu, int64_t n,
                                                  int64_t L, int64_t *ids);

/* No masking: every key visible, windows unbounded. */
ATTN_API void attn_mask_init(attn_mask *mask);

/* Checks a mask against the attention shapes (B, H, Lq, Lk). */
ATTN_API attn_status attn_mask_check(const attn_mask *mask, int64_t B,
                                     int64_t H, int64_t Lq, int64_t Lk);

/* 1 if key j is visible from query i of (b, h) under mask, else 0 (the
 * bias is not looked at). Bounds are not checked: call attn_mask_check.
 * A mask_mod is asked about the one pair (n = 1); if it fails the pair
 * counts as hidden (the kernels report such failures). */
ATTN_API int attn_mask_visible(const attn_mask *mask, int64_t b, int64_t h,
                               int64_t i, int64_t j, int64_t Lq, int64_t Lk);

/* Whether the random-block pattern keeps block (h, bi, bj). */
ATTN_API int attn_random_block_kept(uint64_t seed, double keep_p, int64_t h,
                                    int64_t bi, int64_t bj);

/* --- Builders for the tutorials' conventions (all write u8, 1 = attend) */

/* Padding from token ids: keep[b, j] = (ids[b, j] != pad_id), for ids of
 * shape (B, L) row-major. The result is (B, L) u8: view it as a keep tensor
 * of shape (B, 1, Lq, L) with strides (L, 0, 0, 1). */
ATTN_API attn_status attn_mask_padding_from_ids(const int64_t *ids, int64_t B,
                                                int64_t L, int64_t pad_id,
                                                uint8_t *keep);

/* Look-ahead mask (Lq, Lk) u8 with top-left alignment: keep[i, j] = j <= i. */
ATTN_API attn_status attn_mask_lookahead(int64_t Lq, int64_t Lk, uint8_t *keep);

/* Keras/TF convention (1 = masked, added as -1e9 there) to keep: n elements
 * of src (dtype u8, i32, i64, f32 or f64; others are ATTN_E_DTYPE),
 * keep = (src == 0). */
ATTN_API attn_status attn_mask_from_keras(const void *src, attn_dtype dtype,
                                          size_t n, uint8_t *keep);

/* PyTorch nn.MultiheadAttention convention (True = blocked) to keep, with
 * the dtypes of attn_mask_from_keras. */
ATTN_API attn_status attn_mask_from_torch_mha(const void *src, attn_dtype dtype,
                                              size_t n, uint8_t *keep);

/* ===================================================================== */
/* Rotary position embeddings (RoPE)                                     */
/* ===================================================================== */

/* How the rotated features are paired (Su et al., "RoFormer", 2021):
 *   ATTN_ROPE_NEOX: feature i with i + rd/2 (the two halves of the rotary
 *     part; GPT-NeoX, transformers' Llama, Mistral, Qwen2 "rotate_half");
 *   ATTN_ROPE_INTERLEAVED: feature 2i with 2i + 1 (GPT-J, the paper).
 * Pair i turns by the angle pos * inv_freq[i], i < rd/2, where rd is the
 * rotary dimension; features from rd on pass through unchanged (partial
 * rotary, as GPT-NeoX's rotary_pct). */
typedef enum { ATTN_ROPE_NEOX = 0, ATTN_ROPE_INTERLEAVED = 1 } attn_rope_style;

/* Frequency scalings, as config.json's rope_scaling names them
 * ("rope_type": "linear" or "llama3"). With base frequencies
 * f_i = theta^(-2i / rd):
 *   LINEAR: f_i / factor (positions divided by factor);
 *   LLAMA3: with wavelength w = 2 pi / f_i, lo = original_max_position /
 *     low_freq_factor and hi = original_max_position / high_freq_factor:
 *     w < hi keeps f_i, w > lo gives f_i / factor, and in between
 *     s = (original_max_position / w - low_freq_factor) /
 *         (high_freq_factor - low_freq_factor),
 *     f = (1 - s) f_i / factor + s f_i (transformers' _compute_llama3_
 *     parameters). */
typedef enum {
    ATTN_ROPE_SCALING_NONE = 0,
    ATTN_ROPE_SCALING_LINEAR = 1,
    ATTN_ROPE_SCALING_LLAMA3 = 2
} attn_rope_scaling;

typedef struct {
    int style;                    /* attn_rope_style                       */
    int64_t rotary_dim;           /* even, <= head dim; 0: the head dim    */
    double theta;                 /* base, > 1 (default 10000)             */
    int scaling;                  /* attn_rope_scaling                     */
    double factor;                /* LINEAR, LLAMA3: >= 1                  */
    double low_freq_factor;       /* LLAMA3: > 0                           */
    double high_freq_factor;      /* LLAMA3: > low_freq_factor             */
    double original_max_position; /* LLAMA3: the original context, > 0   */
} attn_rope;

/* Defaults: NEOX, the whole head, theta 10000, no scaling (factor 1,
 * llama3's factors 1 and 4 and 8192 positions, as Llama 3.1 writes
 * them). */
ATTN_API void attn_rope_init(attn_rope *rope);

/* Checks rope for heads of head_dim features: ATTN_E_INVALID naming the
 * field (an odd or too large rotary_dim, theta <= 1, an unknown style or
 * scaling, factors out of range, NaN). */
ATTN_API attn_status attn_rope_check(const attn_rope *rope, int64_t head_dim);

/* The n = rd / 2 angular frequencies into inv_freq[n] (after scaling).
 * ATTN_E_SHAPE when n is not rd / 2. */
ATTN_API attn_status attn_rope_inv_freq(const attn_rope *rope, int64_t head_dim,
                                        double *inv_freq, int64_t n);

/* Rotates x (B, H, L, D) into y (B, H, L, D), overwritten:
 * y = R(pos) x, pos the position of row l of entry b:
 *   positions NULL: l;  n_positions == L: positions[l] (every entry);
 *   n_positions == B * L: positions[b * L + l].
 * Positions lie in [0, 2^40]. Angles and rotations are computed in double.
 * x is f32, f16, bf16 or f64; y is f32 or f64, any strides (no
 * broadcast); y may be x itself (the same data and strides, f32 or f64),
 * any other overlap is not allowed. Results do not depend on the thread
 * count (threads 0: OpenMP's default).
 * Errors: ATTN_E_INVALID (NULL, a bad rope, a position out of range,
 * naming it), ATTN_E_SHAPE, ATTN_E_DTYPE, ATTN_E_NONFINITE (NaN/Inf in x).
 *
 * Example: position 1 turns the pair (x0, x1) of a 2-feature head by 1 rad.
 *     float x[2 * 2] = {1, 0, 1, 0};           // rows at positions 0, 1
 *     attn_tensor X = attn_tensor_4d(x, ATTN_F32, 1, 1, 2, 2);
 *     attn_rope r;
 *     attn_rope_init(&r);
 *     if (attn_rope_forward(&r, &X, NULL, 0, &X, 1)) return 1;
 *     printf("%.4f %.4f\n", x[2], x[3]);       // cos 1, sin 1: 0.5403 0.8415
 */
ATTN_API attn_status attn_rope_forward(const attn_rope *rope,
                                       const attn_tensor *x,
                                       const int64_t *positions,
                                       int64_t n_positions, attn_tensor *y,
                                       int threads);

/* The gradient of attn_rope_forward: dx += R(pos)^T dy (ADDED INTO).
 * dy is f32 or f64; dx f32 or f64, not overlapping dy. Positions and
 * errors as attn_rope_forward. */
ATTN_API attn_status attn_rope_backward(const attn_rope *rope,
                                        const attn_tensor *dy,
                                        const int64_t *positions,
                                        int64_t n_positions, attn_tensor *dx,
                                        int threads);

/* ===================================================================== */
/* Scaled dot-product attention                                          */
/* ===================================================================== */

typedef enum {
    ATTN_IMPL_AUTO = 0,  /* the fastest correct kernel (flash)          */
    ATTN_IMPL_REF = 1,   /* the exact reference, double accumulation    */
    ATTN_IMPL_FLASH = 2, /* the tiled, multithreaded online-softmax one */
    /* FLASH with bf16 tile products for bf16 q, k, v on CPUs with
     * AVX512_BF16, on AMX's tiles where present (f32 accumulation,
     * softmax in f32, the weights rounded to bf16 for P V, as
     * FlashAttention does in half precision): about bf16's accuracy. The
     * backward too (dout, P and dS rounded to bf16 for their products;
     * gradients accumulated in f32). Elsewhere, for other dtypes and when
     * weights are asked for: FLASH. */
    ATTN_IMPL_FLASH_BF16 = 3
} attn_impl;

typedef struct {
    double scale; /* multiplier of q.k; 0 means 1/sqrt(Dk)            */
    attn_mask mask;
    double dropout_p; /* probability of dropping a weight, in [0, 1)     */
    uint64_t seed;    /* dropout seed                                    */
    attn_impl impl;
    int threads; /* 0: OpenMP's default                             */

    /* ---- rotary positions (appended; NULL = off) ------------------------
     * With rope set, q and k are rotated (attn_rope_forward) before the
     * scores, and the backward takes dq and dk back through the rotation.
     * Positions as attn_rope_forward takes them ([Lq] or [B * Lq], [Lk] or
     * [B * Lk]); NULL: the keys sit at j and query i of entry b at the
     * mask's aligned position c (i, or i + lk - lq under
     * ATTN_ALIGN_BOTTOM_RIGHT, see attn_mask), so a causal bottom-right
     * call over the last Lq of Lk positions needs no positions. Over a KV
     * cache the cache's own rope applies (attn_kv_cache_set_rope) and
     * rope must be NULL. The rotated q and k are f32 copies (f64 for f64
     * inputs) made before the kernel runs. */
    const attn_rope *rope;
    const int64_t *rope_q_positions;
    int64_t n_rope_q_positions;
    const int64_t *rope_k_positions;
    int64_t n_rope_k_positions;
} attn_sdpa_opts;

/* Defaults: scale 1/sqrt(Dk), no mask, no dropout, AUTO, default threads. */
ATTN_API void attn_sdpa_opts_init(attn_sdpa_opts *opts);

/*
 * O = softmax(scale * Q K^T + bias, masked) V, with optional dropout on the
 * weights (kept weights scaled by 1 / (1 - p)).
 *
 *   q   (B, H,   Lq, Dk)   f32, f16, bf16 (f64 with IMPL_REF)
 *   k   (B, Hkv, Lk, Dk)   same dtype as q; H % Hkv == 0 (grouped heads)
 *   v   (B, Hkv, Lk, Dv)   same dtype as q
 *   out (B, H,   Lq, Dv)   f32 (f64 with IMPL_REF), overwritten
 *   weights (B, H, Lq, Lk) f32/f64 or NULL: the weights after dropout,
 *                          overwritten; forces materialization
 *   lse [B * H * Lq] contiguous or NULL: log-sum-exp of each row's scaled,
 *                    biased, masked scores (-inf for a fully masked row);
 *                    backward needs it.
 * Errors: ATTN_E_INVALID (null pointers, bad options), ATTN_E_SHAPE,
 * ATTN_E_DTYPE, ATTN_E_NONFINITE (NaN/Inf in q, k or v, or scaled scores
 * that could overflow: scale * Dk * max|q| * max|k| above half the f32
 * range, the f64 range for f64 inputs), ATTN_E_NOMEM,
 * ATTN_E_UNSUPPORTED (f64 tensors without IMPL_REF; Dk or Dv beyond what
 * the flash kernel's BLAS calls take).
 */
ATTN_API attn_status attn_sdpa_forward(const attn_tensor *q,
                                       const attn_tensor *k,
                                       const attn_tensor *v,
                                       const attn_sdpa_opts *opts,
                                       attn_tensor *out, attn_tensor *weights,
                                       float *lse);

/* Gradients of attn_sdpa_forward. out and lse are those forward produced
 * with the same q, k, v and opts (the same dropout seed gives the same
 * mask). dq (B,H,Lq,Dk), dk (B,Hkv,Lk,Dk), dv (B,Hkv,Lk,Dv) are f32 (f64
 * with IMPL_REF) and ADDED INTO. dbias, if not NULL, has the bias's shape
 * with its own strides; entries broadcast by the bias (stride 0) receive
 * the sum over the broadcast axes; added into.
 *
 *   out, dout (B, H, Lq, Dv)  f32 (f64 with IMPL_REF), read only
 *   lse [B * H * Lq]          from forward; may be NULL with IMPL_REF only
 *
 * With grouped heads dk and dv sum over the heads of each group. A fully
 * masked query row contributes nothing (zero, finite gradients). IMPL_REF
 * recomputes the weights in double from q, k, v and the mask and reads
 * neither out nor lse, so a double gradient check sees no f32 rounding.
 * The gradient buffers must not overlap the inputs.
 * Errors: as attn_sdpa_forward, and ATTN_E_INVALID for a missing lse or a
 * dbias without mask.bias, ATTN_E_NONFINITE for NaN/Inf in dout. */
ATTN_API attn_status attn_sdpa_backward(
    const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
    const attn_tensor *out, const float *lse, const attn_tensor *dout,
    const attn_sdpa_opts *opts, attn_tensor *dq, attn_tensor *dk,
    attn_tensor *dv, attn_tensor *dbias);

/* Receives one tile of normalized attention weights (before dropout): rows
 * q0 .. q0+nq-1, columns k0 .. k0+nk-1 of head (b, h); w[r * ldw + c].
 * Masked entries are 0. Return nonzero to stop early (the call then
 * returns ATTN_OK). Tiles of one (b, h) arrive in row-major tile order; the
 * callback is called from one thread at a time. */
typedef int (*attn_weight_tile_fn)(void *user, int64_t b, int64_t h, int64_t q0,
                                   int64_t nq, int64_t k0, int64_t nk,
                                   const float *w, int64_t ldw);

/* Streams the weights of attention through fn without the Lq x Lk matrix,
 * using lse saved by attn_sdpa_forward with the same q, k, opts. Every
 * entry is delivered exactly once (tiles the mask hides arrive as zeros).
 * The weights are exp(s - lse): they carry lse's f32 rounding, a relative
 * error of about |lse| x 6e-8 (the weights output of attn_sdpa_forward
 * does not). q and k are f32, f16 or bf16 (f64 is ATTN_E_DTYPE); opts.impl
 * and the dropout options are not used. Errors: those of
 * attn_sdpa_forward; ATTN_E_INVALID for a NULL lse or fn. */
ATTN_API attn_status attn_sdpa_weight_tiles(const attn_tensor *q,
                                            const attn_tensor *k,
                                            const float *lse,
                                            const attn_sdpa_opts *opts,
                                            attn_weight_tile_fn fn, void *user);

/* Dropout keep decision for weight (b, h, i, j): Philox4x32-10 keyed by
 * seed. 1 = kept. Exposed so tests and users can reproduce the mask. */
ATTN_API int attn_dropout_kept(uint64_t seed, double p, int64_t b, int64_t h,
                               int64_t i, int64_t j);

/* ===================================================================== */
/* .npy files                                                            */
/* ===================================================================== */

#define ATTN_NPY_MAX_DIMS 8

/* An array read from or written to a .npy file. data is owned by the
 * struct when read (free with attn_npy_free). */
typedef struct {
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_NPY_MAX_DIMS];
    void *data;
} attn_npy;

/* Reads a version 1.0/2.0/3.0 .npy file, C order, little-endian. Accepted:
 * <f4 (f32), <f2 (f16), <f8 (f64, kept as f64), <i4 (i32), <i8 (i64), |u1
 * and |b1 (u8; also spelt <u1, <b1). Anything else (big-endian '>f4',
 * Fortran order, other dtypes, more than ATTN_NPY_MAX_DIMS dimensions, a
 * malformed header dict, a dimension with a leading zero such as 0002,
 * which NumPy refuses too) or a file whose header disagrees with its size in
 * either direction (truncated data, trailing bytes) is ATTN_E_FORMAT; a file
 * that cannot be opened or read is ATTN_E_IO. Nothing larger than the file
 * is ever allocated. Zero-size arrays (a 0 in the shape) are accepted (data
 * is then a valid pointer to no elements); attention calls refuse them.
 * On failure *arr is zeroed. */
ATTN_API attn_status attn_npy_read(const char *path, attn_npy *arr);

/* Writes arr as a version 1.0 .npy file (2.0 if the header needs it), data
 * aligned to 64 bytes as NumPy does. dtype f32, f16, f64, i32, i64 or u8
 * (written as |u1); bf16 has no NumPy dtype and is ATTN_E_DTYPE. Written
 * to a temporary file in path's folder, fsync'ed and renamed over path: a
 * failed write (ATTN_E_IO, e.g. a full disk) leaves an existing file as it
 * was. A character device or FIFO at path is written in place (never
 * removed); a folder or other non-regular file is refused (ATTN_E_IO). */
ATTN_API attn_status attn_npy_write(const char *path, const attn_npy *arr);

/* Frees data read by attn_npy_read and zeroes the struct. NULL is fine. */
ATTN_API void attn_npy_free(attn_npy *arr);

/* Converts arr in place to dtype, replacing its data:
 *  - to f32/f64/f16/bf16: from any dtype (values rounded as needed);
 *  - to u8: a boolean, nonzero (and NaN) -> 1, zero -> 0;
 *  - to i32/i64: each value must be an exact integer within the target's
 *    range (floats like 3.0 are fine, 2.5 is ATTN_E_INVALID).
 * arr must own its data (from attn_npy_read or an earlier convert): the
 * old buffer is freed as attn_npy_free would. */
ATTN_API attn_status attn_npy_convert(attn_npy *arr, attn_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
