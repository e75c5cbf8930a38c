/* Internal pieces of the transformer floor (src/transformer): the
 * decoder's parameter table, the generation models' parameter layout, and
 * the decoding state of generation (generate.c) that the search loops
 * (search.c) drive. Not installed. */
#ifndef ATTN_TRANSFORMER_INTERNAL_H
#define ATTN_TRANSFORMER_INTERNAL_H

#include "../train/train.h"
#include "attn_cache.h"
#include "attn_transformer.h"

/* The decoder's slice table (layers.h: attn__slices_fn). */
attn_status attn__decoder_slices(const void *cfg, attn_param_slice *sl,
                                 int64_t cap, int64_t *n);

/* Offsets of the parts of a generation model's parameter block
 * (src == tgt when shared, head_w == tgt when tied); total 0 on overflow. */
typedef struct {
    int64_t src, tgt, enc, dec, head_w, head_b, total;
} attn__tlayout;
attn__tlayout attn__transformer_layout(const attn_transformer_config *cfg);
/* Allocates the generation model's slice table (free with attn__free). */
attn_status attn__transformer_slices_alloc(const attn_transformer_config *cfg,
                                           attn_param_slice **slices,
                                           int64_t *n);
/* x (n rows of E) = table[ids] * sqrt(E) + pe[positions[r]] (pe (P, E)),
 * positions NULL: r % L. */
void attn__embed_rows(const float *table, const int32_t *ids, int64_t n,
                      int64_t L, int64_t E, const float *pe,
                      const int64_t *positions, float *x);

/* Attention over the history of one self-attention layer: an attn_kv_cache
 * (attn_cache.h) of R rows (sequences or beams), all holding len
 * positions, appended, attended and reordered through three functions of
 * generate.c. */
typedef struct {
    attn_kv_cache *cache;
    int64_t R, Hkv, hd, len;
} attn__hist;

typedef struct {
    const attn_transformer_config *c;
    const float *params;
    attn__tlayout m;
    int64_t R, E, H, Hkv, hd, KV, F, V, Ls, cap, M;
    int threads, recompute;
    attn__hist *self; /* [M]                                        */
    float *ck, *cv;   /* cross keys / values (M, R, Ls, KV), dot     */
    float *mem;       /* (R, Ls, E) the memory of each row           */
    int64_t *klen;    /* [R] memory lengths                          */
    float *add_ws;    /* additive cross-attention, (R, 1, Ls)        */
    float *x, *y, *q, *kk, *vv, *ctx, *a, *h, *pe, *logits;
    int32_t *toks; /* (R, cap) tokens fed so far (recompute)      */
    int64_t t;     /* steps done                                  */
    float *xt, *ht, *dws;
    int32_t *scratch; /* (R, cap) token reorder                    */
} attn__gen;

/* Builds the state for R = B * K rows (row b * K + k reads source b),
 * runs the encoder once (ENCDEC) and computes the cross keys and values.
 * cap: the most steps. */
attn_status attn__gen_create(const attn_transformer_config *c,
                             const float *params, int64_t B, int64_t K,
                             int64_t Ls, const int32_t *src,
                             const int64_t *src_lengths, int64_t cap,
                             int threads, int recompute, attn__gen **out);
void attn__gen_free(attn__gen *g);
/* One step: tok [R] at position g->t of every row -> g->logits (R, V). */
attn_status attn__gen_step(attn__gen *g, const int32_t *tok);
/* Beam search: row r becomes old row parent[r] (caches and history). */
attn_status attn__gen_reorder(attn__gen *g, const int64_t *parent);

/* attn_generate; force_beam 1 runs beam search even for width 1 (the
 * tests compare it with greedy). */
attn_status attn__generate(const attn_transformer_config *cfg,
                           const float *params, int64_t B, int64_t Ls,
                           const int32_t *src, const int64_t *src_lengths,
                           const attn_generate_opts *opts, int32_t *out,
                           int64_t out_cap, int64_t *out_lengths,
                           double *scores, int force_beam);

/* One id from a row of V logits as attn_generate chooses it (argmax, or a
 * draw under o's temperature, top_k and top_p from rng); *logp its
 * log-probability. work: V entries of attn__gen_pick_work() bytes. */
size_t attn__gen_pick_work(void);
int32_t attn__gen_pick(const float *z, int64_t V, const attn_generate_opts *o,
                       attn_rng *rng, void *work, double *logp);

#endif
