/* Generation with a Llama-family model: a session keeps the decoder's KV
 * cache (attn__dec_state, one position per step) across calls, and
 * attn_llama_generate is one session used once. The token chosen last is
 * held back (pending) until a later call needs its step: a generation
 * that ends does not pay for a step whose output nobody reads. */
#include "llama.h"
#include "../layers/layers.h"
#include "../transformer/transformer.h"

#include <string.h>

struct attn_llama_session {
    const attn_llama *m;
    int64_t cap; /* max_len                                          */
    int threads;
    attn__dec_state *ds;
    int64_t stepped; /* positions in the cache                         */
    int32_t pending; /* chosen, not yet stepped; -1: none              */
    float *x;        /* (E) the step's input                           */
    float *h;        /* (E) the output of the last step                */
    float *z;        /* (V) logits                                     */
    void *work;      /* sampling's workspace                           */
};

void attn_llama_session_free(attn_llama_session *s) {
    if (!s) return;
    attn__dec_state_free(s->ds);
    attn__free(s->x);
    attn__free(s->work);
    attn__free(s);
}

static attn_status new_state(const attn_llama_session *s,
                             attn__dec_state **ds) {
    return attn__dec_state_create(&s->m->dec, s->m->params, 1, s->cap, NULL, 1,
                                  NULL, s->threads, ds);
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
    return attn_linear_forward(1, s->m->cfg.hidden_size, s->m->cfg.vocab_size,
                               s->h, s->m->head, NULL, z);
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
    attn_status st = step_pending(s);
    for (int64_t i = 0; !st && i < n; i++) st = step(s, ids[i]);
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
