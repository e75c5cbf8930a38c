/* Generation over a model: the encoder's memory computed once, the
 * decoding state of the decoder (decoder_step.c) built once over it, and a
 * step that embeds one token per row, runs the decoder one position and
 * the head; with recompute set a step instead runs the decoder's forward
 * over the whole prefix (the reference and the baseline of the
 * benchmark). The loops over steps and the search are search.c's. */
#include "transformer.h"

#include <string.h>

/* ---- state ------------------------------------------------------------ */

void attn__gen_free(attn__gen *g) {
    if (!g) return;
    attn__dec_state_free(g->dec);
    ATTN__FREE_ALL(g->mem, g->klen, g->x, g->toks, g->xt, g->dws, g->scratch,
                   g);
}

/* The encoder over the B sources, its memory copied to the K rows of
 * each source. */
static attn_status encode(attn__gen *g, int64_t B, int64_t K,
                          const int32_t *src, const int64_t *src_lengths) {
    const attn_transformer_config *c = g->c;
    const int64_t E = g->E, Ls = g->Ls;
    size_t wsn;
    attn_status st = attn_encoder_workspace_size(&c->enc, B, Ls, &wsn);
    if (st) return st;
    const size_t be = attn__size3(B, Ls, E);
    float *x = attn__alloc(2 * be + attn__size3(Ls, E, 1) + wsn, sizeof(float),
                           "encoder buffers");
    if (!x) return ATTN_E_NOMEM;
    float *mem = x + be, *pe = mem + be, *ws = pe + Ls * E;
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = g->threads;
    o.mask.key_lengths = src_lengths;
    if (!(st = attn_positional_encoding(Ls, E, pe))) {
        attn__embed_rows(g->params + g->m.src, src, B * Ls, Ls, E, pe, NULL, x);
        st = attn_encoder_forward(&c->enc, g->params + g->m.enc, B, Ls, x, &o,
                                  mem, NULL, ws);
    }
    if (!st)
        for (int64_t r = 0; r < g->R; r++) {
            memcpy(g->mem + r * Ls * E, mem + (r / K) * Ls * E,
                   sizeof(float) * (size_t)(Ls * E));
            g->klen[r] = src_lengths ? src_lengths[r / K] : Ls;
        }
    attn__free(x);
    return st;
}

attn_status attn__gen_create(const attn_transformer_config *c,
                             const float *params, int64_t B, int64_t K,
                             int64_t Ls, const int32_t *src,
                             const int64_t *src_lengths, int64_t cap,
                             int threads, int recompute, attn__gen **out) {
    *out = NULL;
    attn__gen *g = attn__alloc(1, sizeof *g, "generation state");
    if (!g) return ATTN_E_NOMEM;
    memset(g, 0, sizeof *g);
    const attn_decoder_config *d = &c->dec;
    const int ed = c->kind == ATTN_MODEL_ENCDEC;
    g->c = c;
    g->params = params;
    g->m = attn__transformer_layout(c);
    g->R = B * K;
    g->E = d->d_model;
    g->V = c->vocab_tgt;
    g->Ls = ed ? Ls : 1;
    g->cap = cap;
    g->threads = threads;
    g->recompute = recompute;
    const int64_t R = g->R, E = g->E;
    attn_status st = ATTN_E_NOMEM;
    const size_t re = attn__size3(R, E, 1);
    const size_t rv = attn__size3(R, g->V, 1), pe = attn__size3(cap, E, 1);
    if (!re || !rv || !pe) goto fail;
    if (!(g->x = attn__alloc(2 * re + rv + pe, sizeof(float), "step buffers")))
        goto fail;
    g->y = g->x + re;
    g->logits = g->y + re;
    g->pe = g->logits + rv;
    if ((st = attn_positional_encoding(cap, E, g->pe))) goto fail;
    st = ATTN_E_NOMEM;
    if (!(g->toks =
              attn__alloc(attn__size3(R, cap, 1), sizeof(int32_t), "tokens")) ||
        !(g->scratch = attn__alloc(attn__size3(R, cap, 1), sizeof(int32_t),
                                   "reorder scratch")))
        goto fail;
    if (ed) {
        if (!(g->mem = attn__alloc(attn__size3(R, g->Ls, E), sizeof(float),
                                   "memory")) ||
            !(g->klen =
                  attn__alloc((size_t)R, sizeof(int64_t), "memory lengths")))
            goto fail;
        if ((st = encode(g, B, K, src, src_lengths))) goto fail;
        st = ATTN_E_NOMEM;
    }
    if (recompute) {
        size_t wsn;
        if ((st = attn_decoder_workspace_size(d, R, cap, g->Ls, &wsn)))
            goto fail;
        st = ATTN_E_NOMEM;
        const size_t rce = attn__size3(R, cap, E);
        if (!(g->xt = attn__alloc(2 * rce, sizeof(float), "prefix")) ||
            !(g->dws = attn__alloc(wsn, sizeof(float), "decoder workspace")))
            goto fail;
        g->ht = g->xt + rce;
    } else if ((st =
                    attn__dec_state_create(d, params + g->m.dec, R, cap, g->mem,
                                           g->Ls, g->klen, threads, &g->dec)))
        goto fail;
    *out = g;
    return ATTN_OK;
fail:
    attn__gen_free(g);
    return st;
}

/* ---- one step --------------------------------------------------------- */

/* The decoder's forward over the whole prefix; the last position's output
 * into g->x (already final-normed). */
static attn_status recompute_step(attn__gen *g) {
    const int64_t R = g->R, E = g->E, L = g->t + 1;
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < L; j++)
            attn__embed_rows(g->params + g->m.tgt, g->toks + r * g->cap + j, 1,
                             1, E, g->pe, &j, g->xt + (r * L + j) * E);
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = g->threads;
    attn_status st = attn_decoder_forward(&g->c->dec, g->params + g->m.dec, R,
                                          L, g->Ls, g->xt, g->mem, g->klen, &o,
                                          g->ht, NULL, NULL, g->dws);
    if (st) return st;
    for (int64_t r = 0; r < R; r++)
        memcpy(g->y + r * E, g->ht + (r * L + L - 1) * E,
               sizeof(float) * (size_t)E);
    return ATTN_OK;
}

attn_status attn__gen_step(attn__gen *g, const int32_t *tok) {
    const int64_t R = g->R, E = g->E;
    if (g->t >= g->cap)
        return attn__fail(ATTN_E_SHAPE, "generation ran past %lld steps",
                          (long long)g->cap);
    for (int64_t r = 0; r < R; r++) {
        if (tok[r] < 0 || tok[r] >= g->V)
            return attn__fail(ATTN_E_INVALID,
                              "token %d of row %lld is not an "
                              "id of the model (0..%lld)",
                              tok[r], (long long)r, (long long)g->V - 1);
        g->toks[r * g->cap + g->t] = tok[r];
    }
    attn_status st;
    const float *hout;
    if (g->recompute) {
        if ((st = recompute_step(g))) return st;
        hout = g->y;
    } else {
        int64_t pos = g->t;
        for (int64_t r = 0; r < R; r++)
            attn__embed_rows(g->params + g->m.tgt, tok + r, 1, 1, E, g->pe,
                             &pos, g->x + r * E);
        if ((st = attn__dec_step(g->dec, g->x, &hout))) return st;
    }
    g->t++;
    return attn_linear_forward(R, E, g->V, hout, g->params + g->m.head_w,
                               g->params + g->m.head_b, g->logits);
}

attn_status attn__gen_reorder(attn__gen *g, const int64_t *parent) {
    for (int64_t r = 0; r < g->R; r++)
        if (parent[r] < 0 || parent[r] >= g->R)
            return attn__fail(ATTN_E_INVALID, "parent[%lld] is %lld",
                              (long long)r, (long long)parent[r]);
    int32_t *tmp = g->scratch;
    const size_t row = (size_t)g->t;
    for (int64_t r = 0; r < g->R; r++)
        memcpy(tmp + r * row, g->toks + parent[r] * g->cap,
               sizeof(int32_t) * row);
    for (int64_t r = 0; r < g->R; r++)
        memcpy(g->toks + r * g->cap, tmp + r * row, sizeof(int32_t) * row);
    return g->recompute ? ATTN_OK : attn__dec_reorder(g->dec, parent);
}
