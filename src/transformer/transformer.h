/* Internal pieces of the transformer floor (src/transformer): the
 * decoder's parameter table, the generation models' parameter layout, and
 * the decoding state of generation (generate.c) that the search loops
 * (search.c) drive. Not installed. */
#ifndef ATTN_TRANSFORMER_INTERNAL_H
#define ATTN_TRANSFORMER_INTERNAL_H

#include "../kernels/gemv.h"
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

/* The decoder as generation runs it (decoder_step.c): a state built once
 * for R rows (sequences or beams) of at most cap positions, over the
 * memory mem (R, Ls, E) with lengths klen [R] (NULL: Ls; mem NULL: no
 * cross-attention), and a step that runs one new position per row. */
typedef struct attn__dec_state attn__dec_state;
attn_status attn__dec_state_create(const attn_decoder_config *c,
                                   const float *params, int64_t R, int64_t cap,
                                   const float *mem, int64_t Ls,
                                   const int64_t *klen, int threads,
                                   attn__dec_state **out);
void attn__dec_state_free(attn__dec_state *s);
/* x (R, E): the new position's input of every row; *out (R, E, inside the
 * state, valid until the next step): the stack's output, final-normed. */
attn_status attn__dec_step(attn__dec_state *s, const float *x,
                           const float **out);
/* A prompt of L positions in one pass (R must be 1), in pieces of piece
 * positions (0: 512): x (L, E); *out: the last position's output (as
 * attn__dec_step's). */
attn_status attn__dec_prefill(attn__dec_state *s, const float *x, int64_t L,
                              int64_t piece, const float **out);
/* The same in one piece, keeping every position's output: *rows (L, E,
 * inside the state). R must be 1, the cross-attention (if any) dot. */
attn_status attn__dec_prefill_rows(attn__dec_state *s, const float *x,
                                   int64_t L, const float **rows);
/* The matrices a state may take in a block format, per layer. */
enum {
    ATTN__DEC_Q_Q,
    ATTN__DEC_Q_K,
    ATTN__DEC_Q_V,
    ATTN__DEC_Q_O,
    ATTN__DEC_Q_GATE,
    ATTN__DEC_Q_UP,
    ATTN__DEC_Q_DOWN,
    ATTN__DEC_NQ
};
/* Steps then read qw[l * ATTN__DEC_NQ + j] (data NULL: that matrix's f32
 * weights) instead of the f32 weights of matrix j of layer l; qw (held by
 * the caller, alive as long as the state) must hold the same values as
 * the f32 weights, up to their rounding to the block format. NULL: f32
 * only. */
void attn__dec_state_set_quant(attn__dec_state *s, const attn__qmat *qw);
/* Beam search: row r takes old row parent[r]'s history. */
attn_status attn__dec_reorder(attn__dec_state *s, const int64_t *parent);

/* Generation over a model (generate.c): the encoder's memory computed
 * once, the decoding state, the tokens fed so far, the logits of the last
 * step. With recompute set a step runs the decoder's forward over the
 * whole prefix instead (the reference of the tests and the baseline of
 * the benchmark). */
typedef struct {
    const attn_transformer_config *c;
    const float *params;
    attn__tlayout m;
    int64_t R, E, V, Ls, cap;
    int threads, recompute;
    attn__dec_state *dec; /* NULL with recompute                      */
    float *mem;           /* (R, Ls, E) the memory of each row         */
    int64_t *klen;        /* [R] memory lengths                        */
    float *x, *y, *pe, *logits;
    int32_t *toks;        /* (R, cap) tokens fed so far                  */
    int64_t t;            /* steps done                                  */
    float *xt, *ht, *dws; /* recompute: prefix, output, workspace       */
    int32_t *scratch;     /* (R, cap) token reorder                     */
} attn__gen;

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
