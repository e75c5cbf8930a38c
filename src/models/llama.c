/* Running a Llama-family model: token embeddings, the one decoder stack
 * (attn_decoder_forward with RMSNorm, SwiGLU, grouped heads, rotary
 * positions, a window), the output head. Generation is llama_session.c's. */
#include "llama.h"
#include "../layers/layers.h"
#include "../transformer/transformer.h"

#include <string.h>

static attn_status check_ids(const attn_llama *m, const int32_t *ids,
                             int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
            return attn__fail(ATTN_E_INVALID,
                              "ids[%lld] = %d is outside [0, vocab_size = "
                              "%lld)",
                              (long long)i, (int)ids[i],
                              (long long)m->cfg.vocab_size);
    return ATTN_OK;
}

/* One row without attention weights: the prompt's pass of generation
 * (attn__dec_prefill_rows) over all positions. It keeps nothing for a
 * backward, where attn_decoder_forward keeps every layer's intermediates:
 * about 650 MB of fresh pages for SmolLM2's 30 layers and 512 positions. */
static attn_status hidden_one(const attn_llama *m, int64_t L, const float *x,
                              int threads, float *h) {
    attn__dec_state *ds = NULL;
    const float *rows;
    const int blas = threads == 1 ? attn__blas_single_begin() : 1;
    attn_status st = attn__dec_state_create(&m->dec, m->params, 1, L, NULL, 1,
                                            NULL, threads, &ds);
    if (!st) st = attn__dec_prefill_rows(ds, x, L, &rows);
    if (!st) memcpy(h, rows, (size_t)(L * m->cfg.hidden_size) * sizeof(float));
    attn__dec_state_free(ds);
    attn__blas_single_end(blas);
    return st;
}

/* The decoder's output h (B, L, E) for ids (checked). */
static attn_status hidden(const attn_llama *m, int64_t B, int64_t L,
                          const int32_t *ids, int threads, float *h,
                          float *weights) {
    const int64_t E = m->cfg.hidden_size, n = B * L;
    size_t nws = 0;
    attn_status st = ATTN_OK;
    if ((B > 1 || weights) &&
        (st = attn_decoder_workspace_size(&m->dec, B, L, 1, &nws)))
        return st;
    float *x = attn__alloc((size_t)(n * E), sizeof(float), "embeddings");
    if (!x) return ATTN_E_NOMEM;
    for (int64_t i = 0; i < n; i++)
        memcpy(x + i * E, m->embed + (int64_t)ids[i] * E,
               (size_t)E * sizeof(float));
    if (B == 1 && !weights) {
        st = hidden_one(m, L, x, threads, h);
        attn__free(x);
        return st;
    }
    float *ws = attn__alloc(nws, sizeof(float), "decoder workspace");
    if (!ws) {
        attn__free(x);
        return ATTN_E_NOMEM;
    }
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = threads;
    st = attn_decoder_forward(&m->dec, m->params, B, L, 1, x, NULL, NULL, &o, h,
                              weights, NULL, ws);
    attn__free(ws);
    attn__free(x);
    return st;
}

static attn_status check_call(const attn_llama *m, int64_t B, int64_t L,
                              const int32_t *ids) {
    ATTN__NONNULL("m, ids", m, ids);
    if (B < 1 || L < 1 || L > m->cfg.max_position || B > (1 << 20))
        return attn__fail(ATTN_E_SHAPE,
                          "B = %lld and L = %lld must be >= 1, L at most "
                          "max_position_embeddings = %lld",
                          (long long)B, (long long)L,
                          (long long)m->cfg.max_position);
    return check_ids(m, ids, B * L);
}

attn_status attn_llama_forward(const attn_llama *m, int64_t B, int64_t L,
                               const int32_t *ids, int threads, float *logits,
                               float *weights) {
    attn_status st = check_call(m, B, L, ids);
    if (st) return st;
    if (!logits) return attn__fail(ATTN_E_INVALID, "logits is NULL");
    const int64_t E = m->cfg.hidden_size, n = B * L;
    float *h = attn__alloc((size_t)(n * E), sizeof(float), "hidden states");
    if (!h) return ATTN_E_NOMEM;
    st = hidden(m, B, L, ids, threads, h, weights);
    if (!st)
        st = attn_linear_forward(n, E, m->cfg.vocab_size, h, m->head, NULL,
                                 logits);
    attn__free(h);
    return st;
}

void attn_llama_gen_opts_init(attn_llama_gen_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 32;
    o->temperature = 1.0;
    o->top_p = 1.0;
    o->eos_token_id = -2;
}
