/* Running a Llama-family model: token embeddings, the one decoder stack
 * (attn_decoder_forward with RMSNorm, SwiGLU, grouped heads, rotary
 * positions, a window), the output head; and generation from its logits
 * (greedy or seeded sampling, as attn_generate chooses ids). */
#include "llama.h"
#include "../layers/layers.h"
#include "../transformer/transformer.h"

#include <stdlib.h>
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

/* The decoder's output h (B, L, E) for ids (checked). */
static attn_status hidden(const attn_llama *m, int64_t B, int64_t L,
                          const int32_t *ids, int threads, float *h,
                          float *weights) {
    const int64_t E = m->cfg.hidden_size, n = B * L;
    size_t nws;
    attn_status st = attn_decoder_workspace_size(&m->dec, B, L, 1, &nws);
    if (st) return st;
    float *x = attn__alloc((size_t)(n * E), sizeof(float), "embeddings");
    float *ws = x ? attn__alloc(nws, sizeof(float), "decoder workspace") : NULL;
    if (!ws) {
        attn__free(x);
        return ATTN_E_NOMEM;
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(x + i * E, m->embed + (int64_t)ids[i] * E,
               (size_t)E * sizeof(float));
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
    if (!m || !ids)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", !m ? "m" : "ids");
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

/* The matrices a decoding step reads from the GGUF file's blocks: every
 * 2-D weight in a block format the matrix-vector products read (Q8_0,
 * Q4_0, Q4_1), in the decoder state's table order; NULL (f32 throughout)
 * for a model from safetensors, or when the environment variable
 * ATTN_LLAMA_F32 is set to 1 (the f32 weights dequantized at load, to
 * compare the two). *head: the output head's blocks, or NULL. */
static int use_blocks(const attn_llama *m) {
    const char *e = getenv("ATTN_LLAMA_F32");
    return m->quant && !(e && strcmp(e, "1") == 0);
}

static attn__qmat qmat_of(const attn__llama_qweight *w) {
    attn__qmat q = {w->type, w->rows, w->cols, NULL};
    if (w->data && attn__q_row_bytes(w->type, w->cols) == w->row_bytes &&
        w->row_bytes)
        q.data = w->data;
    return q;
}

static attn__qmat *block_table(const attn_llama *m, attn__qmat *head) {
    head->data = NULL;
    if (!use_blocks(m)) return NULL;
    const int64_t n = m->cfg.num_layers * ATTN__DEC_NQ;
    attn__qmat *t = attn__alloc((size_t)n, sizeof *t, "block table");
    if (!t) return NULL; /* f32 then: slower, the same values */
    for (int64_t i = 0; i < n; i++) t[i] = qmat_of(&m->quant->layers[i]);
    const attn__llama_qweight *h =
        m->quant->head.rows ? &m->quant->head : &m->quant->embed;
    *head = qmat_of(h);
    return t;
}

/* The logits z (V) of the output h (E): from the head's blocks if any. */
static attn_status logits_of(const attn_llama *m, const attn__qmat *head,
                             const float *h, int threads, float *z) {
    if (head->data && head->rows == m->cfg.vocab_size &&
        head->cols == m->cfg.hidden_size)
        return attn__gemv_q(1, head, h, z, threads) ? ATTN_E_NOMEM : ATTN_OK;
    return attn_linear_forward(1, m->cfg.hidden_size, m->cfg.vocab_size, h,
                               m->head, NULL, z);
}

void attn_llama_gen_opts_init(attn_llama_gen_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 32;
    o->temperature = 1.0;
    o->top_p = 1.0;
    o->eos_token_id = -2;
}

attn_status attn_llama_generate(const attn_llama *m, const int32_t *prompt,
                                int64_t n, const attn_llama_gen_opts *opts,
                                int32_t *out, int64_t cap, int64_t *n_out,
                                attn_llama_token_fn fn, void *user) {
    if (!opts || !out || !n_out)
        return attn__fail(ATTN_E_INVALID, "opts, out or n_out is NULL");
    *n_out = 0;
    attn_status st = check_call(m, 1, n, prompt);
    if (st) return st;
    const attn_llama_gen_opts *o = opts;
    if (o->max_new_tokens < 1 || cap < o->max_new_tokens ||
        !(o->temperature > 0) || !(o->temperature < 1e300) || o->top_k < 0 ||
        !(o->top_p > 0 && o->top_p <= 1) ||
        (o->do_sample != 0 && o->do_sample != 1))
        return attn__fail(ATTN_E_INVALID,
                          "generation options: max_new_tokens %lld >= 1 and "
                          "<= cap %lld, temperature %g > 0, top_k %lld >= 0, "
                          "top_p %g in (0, 1], do_sample %d 0 or 1",
                          (long long)o->max_new_tokens, (long long)cap,
                          o->temperature, (long long)o->top_k, o->top_p,
                          o->do_sample);
    const int64_t total = n + o->max_new_tokens;
    if (total > m->cfg.max_position)
        return attn__fail(ATTN_E_SHAPE,
                          "the prompt (%lld) and %lld new tokens exceed "
                          "max_position_embeddings = %lld",
                          (long long)n, (long long)o->max_new_tokens,
                          (long long)m->cfg.max_position);
    const int64_t eos =
        o->eos_token_id == -2 ? m->cfg.eos_token_id : o->eos_token_id;
    const int64_t V = m->cfg.vocab_size, E = m->cfg.hidden_size;
    /* the decoder in its generation mode: one position per step through
     * a KV cache per layer (keys stored rotated at their positions) */
    attn__dec_state *ds = NULL;
    st = attn__dec_state_create(&m->dec, m->params, 1, total, NULL, 1, NULL,
                                o->threads, &ds);
    if (st) return st;
    attn__qmat qhead;
    attn__qmat *qtab = block_table(m, &qhead);
    attn__dec_state_set_quant(ds, qtab);
    float *x = attn__alloc((size_t)(n * E), sizeof(float), "embeddings");
    float *z = x ? attn__alloc((size_t)V, sizeof(float), "logits") : NULL;
    void *work =
        z ? attn__alloc((size_t)V, attn__gen_pick_work(), "sampling") : NULL;
    if (!work) {
        attn__dec_state_free(ds);
        attn__free(qtab);
        attn__free(x);
        attn__free(z);
        return ATTN_E_NOMEM;
    }
    attn_generate_opts go;
    attn_generate_opts_init(&go);
    go.sample = o->do_sample;
    go.temperature = o->temperature;
    go.top_k = o->top_k;
    go.top_p = o->top_p;
    attn_rng rng;
    attn_rng_seed(&rng, o->seed);
    /* the prompt in one pass, then one position per step */
    for (int64_t t = 0; t < n; t++)
        memcpy(x + t * E, m->embed + (int64_t)prompt[t] * E,
               (size_t)E * sizeof(float));
    const float *h;
    st = attn__dec_prefill(ds, x, n, 0, &h);
    for (int64_t t = n; !st && t < total; t++) {
        int32_t next;
        if (t > n) {
            memcpy(x, m->embed + (int64_t)out[*n_out - 1] * E,
                   (size_t)E * sizeof(float));
            if ((st = attn__dec_step(ds, x, &h))) break;
        }
        if ((st = logits_of(m, &qhead, h, o->threads, z))) break;
        double logp;
        next = attn__gen_pick(z, V, &go, &rng, work, &logp);
        out[(*n_out)++] = next;
        if ((fn && fn(user, next)) || next == eos) break;
    }
    attn__dec_state_free(ds);
    attn__free(qtab);
    attn__free(x);
    attn__free(z);
    attn__free(work);
    return st;
}
