/*
 * attn_cache.h: a KV cache for generation, and attention of new queries
 * over it (the decode / prefill kernel).
 *
 * At generation time each step brings one (or a few) new queries per
 * sequence that attend to every key cached so far. The cache holds the K
 * and V of one attention layer; the kernel reads them once per step.
 *
 * Worked example: one decode step of a layer with 32 query heads grouped
 * onto 8 KV heads (D = 128), for a batch of 4 sequences.
 *
 *     attn_kv_cache_config cc;
 *     attn_kv_cache_config_init(&cc);
 *     cc.batch = 4; cc.kv_heads = 8; cc.capacity = 4096; cc.head_dim = 128;
 *     cc.dtype = ATTN_F16;                       // or F32, BF16, Q8
 *     attn_kv_cache *cache;
 *     if (attn_kv_cache_create(&cc, &cache)) ...;   // attn_last_error()
 *     // prefill: k, v (4, 8, T, 128) f32 of the prompt, q (4, 32, T, 128)
 *     attn_kv_cache_append(cache, &k, &v, NULL);   // every entry gains T
 *     attn_sdpa_opts o;
 *     attn_sdpa_opts_init(&o);
 *     o.mask.causal = 1;
 *     o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;      // new query t sees the
 *     attn_sdpa_cached(&q, cache, &o, &out, NULL); // cache and itself
 *     // then per step: append the new token's k, v (4, 8, 1, 128) and
 *     // attend with q (4, 32, 1, 128) the same way
 *     attn_kv_cache_free(cache);
 *
 * Design choices (see docs/design-notes.md):
 *  - One cache object per attention layer (a model holds one per layer,
 *    and one per cross-attention memory). Each object owns its storage:
 *    attn_kv_cache_create allocates it (attn_kv_cache_bytes reports how
 *    much first), attn_kv_cache_free releases it. The opaque object lets
 *    reorder move entries by an index table instead of copying them.
 *  - Shapes: K is (B, Hkv, capacity, D), V is (B, Hkv, capacity, Dv);
 *    entry b holds lengths[b] valid positions (ragged batches).
 *  - Thread safety: attention calls may read one cache from many threads
 *    at once; append, truncate, reorder and clear must not run while any
 *    other call uses the same cache.
 *  - On any error the cache is unchanged: nothing is half-appended.
 *
 * Storage dtypes:
 *  - ATTN_F32, ATTN_F16, ATTN_BF16: the values rounded to the dtype (f16 and
 *    bf16 round to nearest even; f16 overflow becomes Inf, which is refused:
 *    see attn_kv_cache_append).
 *  - ATTN_Q8, 8-bit block quantization. Each row of D (or Dv) values is cut
 *    into blocks of ATTN_Q8_BLOCK = 32 consecutive values (the last block
 *    of a row may be shorter). A block keeps one f32 scale
 *    s = max|x| / 127 and 32 int8 values q = round(x / s) in [-127, 127]
 *    (ties away from zero; s = 0 and q = 0 for an all-zero block). The
 *    stored value is q * s (computed in f32). Layout in memory, per K and
 *    per V: the int8 values as a (B, Hkv, capacity, D) row-major array,
 *    and beside it the scales as a (B, Hkv, capacity, ceil(D / 32)) f32
 *    array; a row of D = 128 takes 128 + 16 bytes (0.5625x f16).
 *    Error: each stored value is within s / 2 = max|x| / 254 of the input
 *    (0.39% of its block's largest magnitude). Max relative error of
 *    attention over a q8 cache, against the f64 reference on the
 *    unquantized inputs: 6.2e-3 of the largest output magnitude (max
 *    |error| 2.5e-4) for uniform random q, k in [-1.5, 1.5), v in [-1, 1),
 *    D = 128, Lk = 4099, 4 new queries, causal; tests/test_kv_cache.c
 *    prints it on every run and fails above 2e-2. Against the reference on
 *    the dequantized (stored) values the kernel keeps the f32 tolerance of
 *    every other dtype.
 *
 * The kernel (attn_sdpa_cached): for each (batch entry, KV head) the H/Hkv
 * query heads of the group and all their new queries are computed
 * together, so each K/V tile is read from memory once. Keys are cut into
 * chunks of a fixed size (it depends on the shapes, never on the thread
 * count); each chunk gives a partial (O, max, sum) and the partials merge in
 * chunk order, so results are bitwise identical for any thread count. f16,
 * bf16 and q8 tiles are converted to f32 in registers (AVX-512 or AVX2 +
 * F16C + FMA where the CPU has them, else scalar; chosen at run time):
 * there is no f32 copy of the cache. Accumulation is f32.
 */
#ifndef ATTN_CACHE_H
#define ATTN_CACHE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values per quantization block of an ATTN_Q8 cache row. */
#define ATTN_Q8_BLOCK 32

/* Opaque: the storage, the lengths, the entry table. */
typedef struct attn_kv_cache attn_kv_cache;

typedef struct {
    int64_t batch;     /* B, entries (sequences, beams), >= 1             */
    int64_t kv_heads;  /* Hkv, >= 1                                       */
    int64_t capacity;  /* positions each entry can hold, >= 1             */
    int64_t head_dim;  /* D of keys, >= 1                                 */
    int64_t value_dim; /* Dv of values, >= 1; 0 means head_dim            */
    attn_dtype dtype;  /* storage: ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_Q8 */
} attn_kv_cache_config;

/* Zeroes the config and sets dtype to ATTN_F32 (batch, kv_heads,
 * capacity and head_dim must then be set). */
ATTN_API void attn_kv_cache_config_init(attn_kv_cache_config *cfg);

/* Validates cfg and gives the bytes of storage a cache of it allocates (K,
 * V, q8 scales). Errors: ATTN_E_INVALID (NULL, an extent < 1, a bad
 * value_dim), ATTN_E_DTYPE (a storage dtype not listed above),
 * ATTN_E_NOMEM (the size overflows). */
ATTN_API attn_status attn_kv_cache_bytes(const attn_kv_cache_config *cfg,
                                         size_t *bytes);

/* Allocates an empty cache (every length 0) into *out (set to NULL on
 * failure). Errors: those of attn_kv_cache_bytes, ATTN_E_NOMEM. */
ATTN_API attn_status attn_kv_cache_create(const attn_kv_cache_config *cfg,
                                          attn_kv_cache **out);

/* Releases a cache (NULL is ignored). */
ATTN_API void attn_kv_cache_free(attn_kv_cache *cache);

/* The cache's config (value_dim filled in). */
ATTN_API attn_status attn_kv_cache_config_get(const attn_kv_cache *cache,
                                              attn_kv_cache_config *cfg);

/* Copies the B current lengths into lengths[0 .. B). */
ATTN_API attn_status attn_kv_cache_lengths(const attn_kv_cache *cache,
                                           int64_t *lengths);

/*
 * Appends new positions: entry b gains the first counts[b] rows of k[b]
 * and v[b], written at positions lengths[b] .. lengths[b] + counts[b] - 1
 * (converted to the storage dtype, quantized for q8).
 *
 *   k (B, Hkv, T, D)   f32, f16, bf16 or f64, any strides (no broadcast)
 *   v (B, Hkv, T, Dv)  same dtype as k
 *   counts [B] in [0, T], or NULL: T for every entry (ragged batches give
 *          their own counts; rows past counts[b] are not read)
 * Errors (the cache is then unchanged): ATTN_E_INVALID (NULL cache, k or
 * v), ATTN_E_SHAPE (B, Hkv, D or Dv differ from the cache's; k and v with
 * different T; counts[b] < 0 or > T; lengths[b] + counts[b] beyond the
 * capacity: overflow, with the numbers), ATTN_E_DTYPE, ATTN_E_NONFINITE
 * (NaN or Inf in the appended rows, or a value the storage dtype turns
 * into Inf: f16 beyond 65504).
 */
ATTN_API attn_status attn_kv_cache_append(attn_kv_cache *cache,
                                          const attn_tensor *k,
                                          const attn_tensor *v,
                                          const int64_t *counts);

/*
 * Documents over a cache (packed prefill: several documents share one
 * entry and must not see each other). attn_kv_cache_append_docs appends
 * like attn_kv_cache_append and records the document id of every new
 * position; attention then takes the keys' ids from the cache and the
 * queries' from mask.doc_q (attn_sdpa_cached).
 *
 *   doc_ids [B * T] row-major (B, T), or see below: doc_ids[b * T + t] is
 *           the document of row t of entry b (rows past counts[b] are not
 *           read). Along an entry ids must not decrease, from its last
 *           cached position on (documents are packed in order).
 * The ids are kept per position (8 bytes each, allocated at the first call:
 * not in attn_kv_cache_bytes) and follow truncate, reorder and clear.
 * Positions cached before the first call are document 0; a later plain
 * attn_kv_cache_append continues each entry's last document (decode steps
 * after a packed prompt extend its last document), 0 for an empty entry.
 * Errors: those of attn_kv_cache_append; ATTN_E_INVALID (doc_ids NULL, ids
 * that decrease, naming the entry, position and ids); ATTN_E_NOMEM. On any
 * error the cache is unchanged.
 *
 * Example (entry 0 packs documents 0 and 1, entry 1 holds document 5):
 *     int64_t docs[2 * 3] = {0, 0, 1,  5, 5, 5};  // (B = 2, T = 3)
 *     attn_kv_cache_append_docs(cache, &k, &v, NULL, docs);
 *     o.mask.doc_q = docs;                         // the prompt's queries
 *     o.mask.n_doc_q = 2 * 3;                      // B x Lq
 *     attn_sdpa_cached(&q, cache, &o, &out, NULL);
 */
ATTN_API attn_status attn_kv_cache_append_docs(attn_kv_cache *cache,
                                               const attn_tensor *k,
                                               const attn_tensor *v,
                                               const int64_t *counts,
                                               const int64_t *doc_ids);

/* Copies the document ids of positions start .. start + n - 1 of entry b
 * into ids[0 .. n). Errors: ATTN_E_INVALID (NULL, or a cache that holds
 * no ids: never given any by attn_kv_cache_append_docs), ATTN_E_SHAPE
 * (b or the positions outside the entry). */
ATTN_API attn_status attn_kv_cache_doc_ids(const attn_kv_cache *cache,
                                           int64_t b, int64_t start, int64_t n,
                                           int64_t *ids);

/*
 * Rotary positions (attn.h's attn_rope) over a cache: from this call on,
 * keys are stored rotated at their absolute positions (the row appended at
 * position p of an entry turns by p), and attn_sdpa_cached rotates the
 * queries at theirs: mask.align's aligned position c (with BOTTOM_RIGHT,
 * i + lk - lq: a decode step continues at the cache's length), or
 * opts.rope_q_positions when given. Truncate, reorder and clear keep the
 * stored keys right (positions do not move); with documents, keys keep
 * their positions in the packed entry, which leaves the scores of a
 * document, which depend on position differences only, unchanged. The
 * cache must be empty (every length 0); rope NULL turns rotation off. The
 * rope is copied. Errors: ATTN_E_INVALID (NULL cache, a non-empty cache,
 * a bad rope for the head dim), ATTN_E_NOMEM.
 */
ATTN_API attn_status attn_kv_cache_set_rope(attn_kv_cache *cache,
                                            const attn_rope *rope);

/* The cache's rope into *rope and 1 into *has_rope, or attn_rope_init's
 * defaults and 0 when keys are not rotated. */
ATTN_API attn_status attn_kv_cache_get_rope(const attn_kv_cache *cache,
                                            attn_rope *rope, int *has_rope);

/* Rollback: entry b keeps its first lengths[b] positions (the rest is
 * forgotten). lengths [B], each in [0, current length of b]: truncate
 * never grows an entry (ATTN_E_SHAPE naming the entry and both lengths). */
ATTN_API attn_status attn_kv_cache_truncate(attn_kv_cache *cache,
                                            const int64_t *lengths);

/* Every length to 0 (the storage is kept for reuse). */
ATTN_API attn_status attn_kv_cache_clear(attn_kv_cache *cache);

/* Beam search: the new entry b is the old entry index[b] (positions and
 * length). index [B] in [0, B); an old entry may be chosen several times
 * (a beam with several children) or not at all. Entries are moved through
 * the object's entry table; only the second and later copies of an entry
 * copy data (their used length). Errors: ATTN_E_INVALID (NULL index),
 * ATTN_E_SHAPE (an index outside [0, B), naming it). */
ATTN_API attn_status attn_kv_cache_reorder(attn_kv_cache *cache,
                                           const int64_t *index);

/* Reads back positions start .. start + n - 1 of entry b, as stored
 * (dequantized for q8). k (1, Hkv, n, D) and v (1, Hkv, n, Dv) are
 * f32, f64, f16 or bf16 views, overwritten; either may be NULL.
 * start + n <= lengths[b]. Errors: ATTN_E_INVALID, ATTN_E_SHAPE,
 * ATTN_E_DTYPE. */
ATTN_API attn_status attn_kv_cache_read(const attn_kv_cache *cache, int64_t b,
                                        int64_t start, attn_tensor *k,
                                        attn_tensor *v);

/*
 * Attention of new queries over the cache:
 * out = softmax(scale * q K^T, masked) V with K, V the cached positions.
 *
 *   q   (B, H, Lq, D)  f32, f16 or bf16, any strides; H a multiple of the
 *                      cache's Hkv (grouped heads; H = Hkv is plain
 *                      multi-head). Lq from 1 (a decode step) to a few
 *                      hundred (a prefill chunk).
 *   out (B, H, Lq, Dv) f32, any strides (no broadcast), overwritten
 *   lse [B * H * Lq] contiguous, or NULL: each row's log-sum-exp
 *   opts: scale (0: 1/sqrt(D)), threads, impl (AUTO or FLASH: this
 *         kernel; REF: the double-accumulation reference over the stored,
 *         dequantized values, the oracle of the tests; FLASH_BF16 over a
 *         bf16 cache on a CPU with AVX512_BF16: the same kernel on bf16
 *         tile products for prefill chunks, where the query heads of a KV
 *         head times Lq make >= 8 rows (q and the weights rounded to
 *         bf16 for the products, f32 sums and softmax, no f32 copy of the
 *         keys; about bf16's accuracy: within 5e-3 of the largest output
 *         in tests/test_kv_prefill_bf16.c), elsewhere FLASH), and the mask parts
 *         a cache uses: causal, align, window_left / window_right and
 *         query_lengths. The key lengths are the cache's lengths: with
 *         effective lengths lq = query_lengths[b] (or Lq) and lk =
 *         lengths[b], query i sits at key position i + lk - lq under
 *         ATTN_ALIGN_BOTTOM_RIGHT (the new queries are the last lq
 *         positions: append their K/V first, then attend), at i under
 *         TOP_LEFT; attn.h's attn_mask gives the exact rule. The score
 *         modifiers softcap, alibi (slopes) and sinks apply as in
 *         attn_sdpa_forward (ALiBi's distance from that position), and
 *         so do the user functions mask_mod and score_mod, asked with
 *         key j = the cache position and i the query row (not a block
 *         mask: the cache grows between calls).
 *         Documents: mask.doc_q [B * Lq] (n_doc_q = B x Lq) gives each
 *         query's document; query i of entry b sees only cached keys of
 *         its document, as stored by attn_kv_cache_append_docs (mask.doc_k
 *         must be NULL: the keys' ids are the cache's). Chunks of keys of
 *         other documents are skipped.
 *         Rotary positions: the cache's (attn_kv_cache_set_rope) rotate
 *         q; opts.rope must be NULL (ATTN_E_INVALID otherwise).
 * A row with no visible key (a padded query, an empty entry) gives 0 and
 * lse -inf.
 * Errors: ATTN_E_INVALID (NULL pointers, bad options), ATTN_E_SHAPE (q or
 * out shapes against the cache), ATTN_E_DTYPE, ATTN_E_NONFINITE (NaN/Inf
 * in q), ATTN_E_UNSUPPORTED (dropout, mask.key_lengths, keep, bias,
 * block-sparse, random blocks, mask.doc_k or a block mask: not served
 * over a cache), ATTN_E_INVALID also for mask.doc_q over a cache that
 * holds no document ids, a user function's status as attn_score_mod_fn
 * says, ATTN_E_NOMEM.
 */
ATTN_API attn_status attn_sdpa_cached(const attn_tensor *q,
                                      const attn_kv_cache *cache,
                                      const attn_sdpa_opts *opts,
                                      attn_tensor *out, float *lse);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_CACHE_H */
