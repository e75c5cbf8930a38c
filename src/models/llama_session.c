/* Generation with a Llama-family model: a session keeps the decoder's KV
 * cache (attn__dec_state: a prompt in one pass, then one position per
 * step, the linear maps read from the GGUF blocks where there are) across
 * calls, and
 * attn_llama_generate is one session used once. The token chosen last is
 * held back (pending) until a later call needs its step: a generation
 * that ends does not pay for a step whose output nobody reads. */
#include "llama.h"
#include "../layers/layers.h"
#include "../transformer/transformer.h"

#include <stdlib.h>
#include <string.h>

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
    attn__qmat q = {w->type, w->rows, w->cols, NULL, w->packed};
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
        return attn__gemv_q_many(1, 1, head, h, &z, threads) ? ATTN_E_NOMEM
                                                             : ATTN_OK;
    return attn_linear_forward(1, m->cfg.hidden_size, m->cfg.vocab_size, h,
                               m->head, NULL, z);
}

struct attn_llama_session {
    const attn_llama *m;
    int64_t cap; /* max_len                                          */
    int threads;
    attn__dec_state *ds;
    int64_t stepped;  /* positions in the cache                         */
    int32_t pending;  /* chosen, not yet stepped; -1: none              */
    float *x;         /* (E) the step's input                           */
    float *h;         /* (E) the output of the last step                */
    float *z;         /* (V) logits                                     */
    void *work;       /* sampling's workspace                           */
    attn__qmat *qtab; /* the decoding steps' block weights, or NULL     */
    attn__qmat qhead; /* the output head's blocks (data NULL: f32)      */
};

void attn_llama_session_free(attn_llama_session *s) {
    if (!s) return;
    attn__dec_state_free(s->ds);
    attn__free(s->x);
    attn__free(s->work);
    attn__free(s->qtab);
    attn__free(s);
}

static attn_status new_state(const attn_llama_session *s,
                             attn__dec_state **ds) {
    attn_status st = attn__dec_state_create(&s->m->dec, s->m->params, 1, s->cap,
                                            NULL, 1, NULL, s->threads, ds);
    if (!st) attn__dec_state_set_quant(*ds, s->qtab);
    return st;
}

attn_status attn_llama_session_create(const attn_llama *m, int64_t max_len,
                                      int threads, attn_llama_session **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!m) return attn__fail(ATTN_E_INVALID, "m is NULL");
    if (max_len < 1 || max_len > m->cfg.max_position)
        return attn__fail(ATTN_E_SHAPE,
                          "max_len = %lld must be in [1, "
                          "max_position_embeddings = %lld]",
                          (long long)max_len, (long long)m->cfg.max_position);
    const int64_t E = m->cfg.hidden_size, V = m->cfg.vocab_size;
    attn_llama_session *s = attn__alloc(1, sizeof *s, "session");
    if (!s) return ATTN_E_NOMEM;
    memset(s, 0, sizeof *s);
    s->m = m;
    s->cap = max_len;
    s->threads = threads;
    s->pending = -1;
    s->qtab = block_table(m, &s->qhead);
    attn_status st = new_state(s, &s->ds);
    if (!st &&
        (!(s->x = attn__alloc((size_t)(2 * E + V), sizeof(float), "steps")) ||
         !(s->work =
               attn__alloc((size_t)V, attn__gen_pick_work(), "sampling"))))
        st = ATTN_E_NOMEM;
    if (st) {
        attn_llama_session_free(s);
        return st;
    }
    s->h = s->x + E;
    s->z = s->h + E;
    *out = s;
    return ATTN_OK;
}

int64_t attn_llama_session_length(const attn_llama_session *s) {
    return s ? s->stepped + (s->pending >= 0) : 0;
}

int64_t attn_llama_session_capacity(const attn_llama_session *s) {
    return s ? s->cap : 0;
}

attn_status attn_llama_session_reset(attn_llama_session *s) {
    if (!s) return attn__fail(ATTN_E_INVALID, "s is NULL");
    if (s->stepped == 0) { /* nothing in the cache */
        s->pending = -1;
        return ATTN_OK;
    }
    attn__dec_state *ds = NULL;
    attn_status st = new_state(s, &ds);
    if (st) return st;
    attn__dec_state_free(s->ds);
    s->ds = ds;
    s->stepped = 0;
    s->pending = -1;
    return ATTN_OK;
}

/* One position through the decoder: s->h becomes its output. */
static attn_status step(attn_llama_session *s, int32_t id) {
    const int64_t E = s->m->cfg.hidden_size;
    memcpy(s->x, s->m->embed + (int64_t)id * E, (size_t)E * sizeof(float));
    const float *h;
    attn_status st = attn__dec_step(s->ds, s->x, &h);
    if (st) return st;
    memcpy(s->h, h, (size_t)E * sizeof(float));
    s->stepped++;
    return ATTN_OK;
}

static attn_status step_pending(attn_llama_session *s) {
    if (s->pending < 0) return ATTN_OK;
    attn_status st = step(s, s->pending);
    if (!st) s->pending = -1;
    return st;
}

/* The next-token logits after the last step into z. */
static attn_status head(const attn_llama_session *s, float *z) {
    return logits_of(s->m, &s->qhead, s->h, s->threads, z);
}

/* The pending token (if any) and ids[0 .. n) through the decoder in one
 * pass (attn__dec_prefill: products over all positions); s->h becomes
 * the last one's output. */
static attn_status prefill(attn_llama_session *s, const int32_t *ids,
                           int64_t n) {
    const int64_t E = s->m->cfg.hidden_size, p = s->pending >= 0, L = p + n;
    float *x = attn__alloc((size_t)(L * E), sizeof(float), "prompt embeddings");
    if (!x) return ATTN_E_NOMEM;
    for (int64_t t = 0; t < L; t++) {
        const int32_t id = t < p ? s->pending : ids[t - p];
        memcpy(x + t * E, s->m->embed + (int64_t)id * E,
               (size_t)E * sizeof(float));
    }
    const float *h;
    attn_status st = attn__dec_prefill(s->ds, x, L, 0, &h);
    if (!st) {
        memcpy(s->h, h, (size_t)E * sizeof(float));
        s->stepped += L;
        s->pending = -1;
    }
    attn__free(x);
    return st;
}

attn_status attn_llama_session_feed(attn_llama_session *s, const int32_t *ids,
                                    int64_t n, float *logits) {
    if (!s || !ids) return attn__fail(ATTN_E_INVALID, "s or ids is NULL");
    const int64_t len = attn_llama_session_length(s);
    if (n < 1 || n > s->cap - len)
        return attn__fail(ATTN_E_SHAPE,
                          "%lld tokens after the %lld of the conversation "
                          "exceed its max_len = %lld (n must be >= 1)",
                          (long long)n, (long long)len, (long long)s->cap);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->m->cfg.vocab_size)
            return attn__fail(ATTN_E_INVALID,
                              "ids[%lld] = %d is outside [0, vocab_size = "
                              "%lld)",
                              (long long)i, (int)ids[i],
                              (long long)s->m->cfg.vocab_size);
    attn_status st = n == 1 ? step_pending(s) : prefill(s, ids, n);
    if (!st && n == 1) st = step(s, ids[0]);
    if (!st && logits) st = head(s, logits);
    return st;
}

static attn_status check_opts(const attn_llama_gen_opts *o, int64_t cap) {
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
    return ATTN_OK;
}

attn_status attn_llama_session_generate(attn_llama_session *s,
                                        const attn_llama_gen_opts *opts,
                                        int32_t *out, int64_t cap,
                                        int64_t *n_out, attn_llama_token_fn fn,
                                        void *user) {
    if (!s || !opts || !out || !n_out)
        return attn__fail(ATTN_E_INVALID, "s, opts, out or n_out is NULL");
    *n_out = 0;
    const attn_llama_gen_opts *o = opts;
    attn_status st = check_opts(o, cap);
    if (st) return st;
    const int64_t len = attn_llama_session_length(s);
    if (len < 1)
        return attn__fail(ATTN_E_INVALID,
                          "the conversation is empty: feed a prompt first");
    if (o->max_new_tokens > s->cap - len)
        return attn__fail(ATTN_E_SHAPE,
                          "the conversation (%lld tokens) and %lld new tokens "
                          "exceed its max_len = %lld",
                          (long long)len, (long long)o->max_new_tokens,
                          (long long)s->cap);
    const int64_t eos =
        o->eos_token_id == -2 ? s->m->cfg.eos_token_id : o->eos_token_id;
    attn_generate_opts go;
    attn_generate_opts_init(&go);
    go.sample = o->do_sample;
    go.temperature = o->temperature;
    go.top_k = o->top_k;
    go.top_p = o->top_p;
    attn_rng rng;
    attn_rng_seed(&rng, o->seed);
    if ((st = step_pending(s))) return st;
    for (int64_t t = 0; t < o->max_new_tokens; t++) {
        if (t > 0 && (st = step_pending(s))) break;
        if ((st = head(s, s->z))) break;
        double logp;
        const int32_t next = attn__gen_pick(s->z, s->m->cfg.vocab_size, &go,
                                            &rng, s->work, &logp);
        out[(*n_out)++] = next;
        s->pending = next;
        if ((fn && fn(user, next)) || next == eos) break;
    }
    return st;
}

attn_status attn_llama_generate(const attn_llama *m, const int32_t *prompt,
                                int64_t n, const attn_llama_gen_opts *opts,
                                int32_t *out, int64_t cap, int64_t *n_out,
                                attn_llama_token_fn fn, void *user) {
    if (!m || !prompt || !opts || !out || !n_out)
        return attn__fail(ATTN_E_INVALID,
                          "m, prompt, opts, out or n_out is NULL");
    *n_out = 0;
    attn_status st = check_opts(opts, cap);
    if (st) return st;
    if (n < 1 || n > m->cfg.max_position - opts->max_new_tokens)
        return attn__fail(ATTN_E_SHAPE,
                          "the prompt (%lld tokens, >= 1) and %lld new tokens "
                          "exceed max_position_embeddings = %lld",
                          (long long)n, (long long)opts->max_new_tokens,
                          (long long)m->cfg.max_position);
    attn_llama_session *s = NULL;
    if ((st = attn_llama_session_create(m, n + opts->max_new_tokens,
                                        opts->threads, &s)))
        return st;
    if (!(st = attn_llama_session_feed(s, prompt, n, NULL)))
        st = attn_llama_session_generate(s, opts, out, cap, n_out, fn, user);
    attn_llama_session_free(s);
    return st;
}
