/* The trainer: one step is a fresh batch, forward, loss, backward,
 * clipping and AdamW, with every buffer allocated once at creation. Also
 * the evaluation on fresh data. */
#include "train.h"
#include "../kernels/cpu.h"

#include <math.h>
#include <string.h>

uint64_t attn__train_seed(uint64_t seed, uint64_t stream, uint64_t index) {
    /* splitmix64 finalizer over a mix of the three words: independent
     * streams for different (stream, index) pairs of one seed */
    uint64_t z = seed ^ (stream * 0xD1B54A32D192ED03ull) ^
                 (index * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
    return attn__splitmix64_final(z);
}

void attn_train_config_init(attn_train_config *c, attn_task_kind kind) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    attn_task_init(&c->task, kind);
    attn_encoder_config_init(&c->model.enc);
    attn_encoder_config *e = &c->model.enc;
    /* chosen by experiment on the 2-core machine (README "Training") */
    e->num_layers = 2;
    e->d_model = 64;
    e->num_heads = 4;
    e->dim_feedforward = 128;
    e->attention = ATTN_ATTENTION_DOT;
    e->norm_first = 1;
    e->final_norm = 1;
    attn_adamw_config_init(&c->optim);
    c->optim.lr = 3e-3;
    c->optim.warmup = 100;
    c->batch = 64;
    c->steps = 600;
    c->seed = 1;
    c->dropout = 0;
    c->threads = 0;
    if (kind == ATTN_TASK_ADD) c->steps = 2000;
    c->optim.decay_steps = c->steps;
    c->optim.min_lr = c->optim.lr * 0.05;
}

attn_status attn_train_config_check(attn_train_config *c) {
    if (!c) return attn__fail(ATTN_E_INVALID, "train config is NULL");
    attn_status st = attn_task_check(&c->task);
    if (st) return st;
    c->model.vocab_in = attn_task_vocab_in(&c->task);
    c->model.vocab_out = attn_task_vocab_out(&c->task);
    c->model.max_len = attn_task_seq_len(&c->task);
    if ((st = attn_model_check(&c->model))) return st;
    if ((st = attn_adamw_check(&c->optim))) return st;
    if ((st = attn__train_sizes_check(c->batch, c->steps))) return st;
    if (!(c->dropout >= 0 && c->dropout < 1))
        return attn__fail(ATTN_E_INVALID, "dropout is %g; it must be in [0, 1)",
                          c->dropout);
    return attn__train_run_check(c->threads, c->dtype);
}

attn_status attn__train_sizes_check(int64_t batch, int64_t steps) {
    if (batch < 1 || batch > (1 << 20) || steps < 0)
        return attn__fail(ATTN_E_INVALID,
                          "batch %lld must be in [1, 2^20] and"
                          " steps %lld >= 0",
                          (long long)batch, (long long)steps);
    return ATTN_OK;
}

attn_status attn__train_run_check(int threads, attn_dtype dtype) {
    if (threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", threads);
    return attn__train_dtype_check(dtype);
}

attn_status attn__train_state_init(attn__train_state *s, int64_t n,
                                   uint64_t seed) {
    s->n = n;
    size_t four;
    if (!attn__mul_size((size_t)n, 4, &four))
        return attn__fail(ATTN_E_NOMEM, "trainer buffer sizes overflow");
    /* params, grads, m, v in one allocation */
    if (!(s->params = attn__alloc(four, sizeof(float), "parameters")))
        return ATTN_E_NOMEM;
    memset(s->params, 0, four * sizeof(float));
    s->grads = s->params + n;
    s->m = s->grads + n;
    s->v = s->m + n;
    attn_status st = attn_params_init(s->slices, s->nslices, s->params, seed);
    if (st) return st;
    attn_rng_seed(&s->rng, attn__train_seed(seed, ATTN__STREAM_DATA, 0));
    return ATTN_OK;
}

void attn__train_state_free(attn__train_state *s) {
    attn__free(s->slices);
    attn__free(s->params);
    s->slices = NULL;
    s->params = NULL;
}

void attn_trainer_free(attn_trainer *t) {
    if (!t) return;
    attn__train_state_free(&t->s);
    ATTN__FREE_ALL(t->tokens, t->lengths, t->logits, t->ws, t);
}

attn_status attn_trainer_create(const attn_train_config *cfg,
                                attn_trainer **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!cfg) return attn__fail(ATTN_E_INVALID, "cfg is NULL");
    attn_train_config c = *cfg;
    attn_status st = attn_train_config_check(&c);
    if (st) return st;
    attn_trainer *t = attn__alloc(1, sizeof *t, "trainer");
    if (!t) return ATTN_E_NOMEM;
    memset(t, 0, sizeof *t);
    t->cfg = c;
    t->L = c.model.max_len;
    t->V = c.model.vocab_out;
    size_t ws = 0, bl = attn__size3(c.batch, t->L, 1);
    size_t blv = attn__size3(c.batch, t->L, t->V);
    if ((st =
             attn__model_slices_alloc(&c.model, &t->s.slices, &t->s.nslices)) ||
        (st = attn_model_workspace_size(&c.model, c.batch, t->L, &ws)))
        goto fail;
    if (!bl || !blv) {
        st = attn__fail(ATTN_E_NOMEM, "trainer buffer sizes overflow");
        goto fail;
    }
    if ((st = attn__train_state_init(&t->s, attn_model_param_count(&c.model),
                                     c.seed)))
        goto fail;
    /* tokens and targets in one allocation */
    if (!(t->tokens = attn__alloc(2 * bl, sizeof(int32_t), "batch tokens")) ||
        !(t->lengths =
              attn__alloc((size_t)c.batch, sizeof(int64_t), "batch lengths")) ||
        !(t->logits = attn__alloc(2 * blv, sizeof(float), "logits")) ||
        !(t->ws = attn__alloc(ws, sizeof(float), "model workspace"))) {
        st = ATTN_E_NOMEM;
        goto fail;
    }
    t->targets = t->tokens + bl;
    t->dlogits = t->logits + blv;
    *out = t;
    return ATTN_OK;
fail:
    attn_trainer_free(t);
    return st;
}

void attn__batch_accuracy(const float *logits, const int32_t *targets,
                          int64_t B, int64_t L, int64_t V, int64_t *tokens,
                          int64_t *tokens_right, int64_t *seqs_right) {
    for (int64_t b = 0; b < B; b++) {
        int all = 1;
        for (int64_t i = 0; i < L; i++) {
            const int32_t y = targets[b * L + i];
            if (y == ATTN_IGNORE_INDEX) continue;
            const float *z = logits + (b * L + i) * V;
            int64_t arg = 0;
            for (int64_t c = 1; c < V; c++)
                if (z[c] > z[arg]) arg = c;
            (*tokens)++;
            if (arg == y)
                (*tokens_right)++;
            else
                all = 0;
        }
        *seqs_right += all;
    }
}

attn_status attn__train_stopped(attn_status st, int64_t step,
                                const char *what) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", attn_last_error());
    return attn__fail(st, "training stopped at step %lld: %s: %s",
                      (long long)step + 1, what, detail);
}

attn_status attn__train_state_update(attn__train_state *s,
                                     const attn_adamw_config *o, double loss,
                                     const float *logits,
                                     const int32_t *targets, int64_t B,
                                     int64_t L, int64_t V,
                                     attn_train_stats *stats) {
    double norm;
    attn_status st = attn_clip_grad_norm(s->grads, s->n, o->clip_norm, &norm);
    if (st) return attn__train_stopped(st, s->step, "gradients");
    st = attn_adamw_step(o, s->step, s->slices, s->nslices, s->n, s->params,
                         s->grads, s->m, s->v);
    if (st) return st;
    if (stats) {
        int64_t tok = 0, tok_right = 0, seq_right = 0;
        attn__batch_accuracy(logits, targets, B, L, V, &tok, &tok_right,
                             &seq_right);
        stats->step = s->step + 1;
        stats->loss = loss;
        stats->token_acc = tok ? (double)tok_right / (double)tok : 1.0;
        stats->seq_acc = (double)seq_right / (double)B;
        stats->grad_norm = norm;
        stats->lr = attn_adamw_lr(o, s->step);
        stats->tokens = tok;
    }
    s->step++;
    return ATTN_OK;
}

void attn__train_step_opts(const attn__train_state *s, int threads,
                           attn_dtype dtype, double dropout, uint64_t seed,
                           attn_layer_opts *o) {
    attn_sdpa_opts_init(o);
    o->threads = threads;
    if (dtype == ATTN_BF16) o->impl = ATTN_IMPL_FLASH_BF16;
    o->dropout_p = dropout;
    o->seed = attn__train_seed(seed, ATTN__STREAM_DROPOUT, (uint64_t)s->step);
}

attn_status attn__train_loss_done(attn__train_state *s, attn_status st,
                                  double loss) {
    if (st) return attn__train_stopped(st, s->step, "loss");
    if (!isfinite(loss))
        return attn__fail(ATTN_E_NONFINITE,
                          "training stopped at step %lld: "
                          "the loss is %g",
                          (long long)s->step + 1, loss);
    memset(s->grads, 0, (size_t)s->n * sizeof(float));
    return ATTN_OK;
}

attn_status attn_trainer_step(attn_trainer *t, attn_train_stats *stats) {
    if (!t) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    const attn_train_config *c = &t->cfg;
    const int64_t B = c->batch, L = t->L, V = t->V;
    attn_status st = attn_task_batch(&c->task, &t->s.rng, B, t->tokens,
                                     t->targets, t->lengths);
    if (st) return st;
    attn_layer_opts o;
    attn__train_step_opts(&t->s, c->threads, c->dtype, c->dropout, c->seed, &o);
    st = attn_model_forward(&c->model, t->s.params, B, L, t->tokens, t->lengths,
                            &o, t->logits, NULL, t->ws);
    if (st) return attn__train_stopped(st, t->s.step, "forward");
    double loss;
    int64_t counted = 0, right = 0;
    st = attn_cross_entropy(B * L, V, t->logits, t->targets, ATTN_IGNORE_INDEX,
                            &loss, t->dlogits, &counted, &right);
    if ((st = attn__train_loss_done(&t->s, st, loss))) return st;
    st = attn_model_backward(&c->model, t->s.params, B, L, t->tokens,
                             t->lengths, &o, t->dlogits, t->ws, t->s.grads);
    if (st) return attn__train_stopped(st, t->s.step, "backward");
    return attn__train_state_update(&t->s, &c->optim, loss, t->logits,
                                    t->targets, B, L, V, stats);
}

int64_t attn_trainer_steps_done(const attn_trainer *t) {
    return t ? t->s.step : 0;
}

const attn_train_config *attn_trainer_config(const attn_trainer *t) {
    return t ? &t->cfg : NULL;
}

const float *attn_trainer_params(const attn_trainer *t) {
    return t ? t->s.params : NULL;
}

attn_status attn__train_set_threads(int *field, int threads) {
    if (!field) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    if (threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", threads);
    *field = threads;
    return ATTN_OK;
}

attn_status attn_trainer_set_threads(attn_trainer *t, int threads) {
    return attn__train_set_threads(t ? &t->cfg.threads : NULL, threads);
}

attn_status attn__train_dtype_check(attn_dtype dtype) {
    if (dtype == ATTN_F32 || dtype == ATTN_BF16) return ATTN_OK;
    return attn__fail(ATTN_E_DTYPE,
                      "training runs its products in f32 or bf16, not %s",
                      attn_dtype_name(dtype));
}

attn_status attn__train_set_dtype(attn_dtype *field, attn_dtype dtype) {
    if (!field) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    const attn_status st = attn__train_dtype_check(dtype);
    if (st) return st;
    *field = dtype;
    return ATTN_OK;
}

attn_status attn_trainer_set_dtype(attn_trainer *t, attn_dtype dtype) {
    return attn__train_set_dtype(t ? &t->cfg.dtype : NULL, dtype);
}

attn_dtype attn_trainer_dtype(const attn_trainer *t) {
    return t && t->cfg.dtype == ATTN_BF16 &&
                   attn__isa_get() >= ATTN__ISA_AVX512_BF16
               ? ATTN_BF16
               : ATTN_F32;
}

attn_status attn__train_set_steps(int64_t *field, attn_adamw_config *optim,
                                  int64_t steps) {
    if (!field) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    if (steps < 0)
        return attn__fail(ATTN_E_INVALID, "steps is %lld (< 0)",
                          (long long)steps);
    *field = steps;
    optim->decay_steps = steps; /* the cosine ends with the run */
    return ATTN_OK;
}

attn_status attn_trainer_set_steps(attn_trainer *t, int64_t steps) {
    return attn__train_set_steps(t ? &t->cfg.steps : NULL,
                                 t ? &t->cfg.optim : NULL, steps);
}

attn_status attn_model_evaluate(const attn_model_config *cfg,
                                const float *params, const attn_task *task,
                                int64_t count, uint64_t seed, int threads,
                                attn_eval_result *res) {
    attn_status st = attn_model_check(cfg);
    if (st) return st;
    if ((st = attn_task_check(task))) return st;
    if (!params || !res)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          params ? "res" : "params");
    if (count < 1 || threads < 0)
        return attn__fail(ATTN_E_INVALID,
                          "count %lld must be >= 1 and threads"
                          " %d >= 0",
                          (long long)count, threads);
    const int64_t L = attn_task_seq_len(task), V = cfg->vocab_out;
    if (attn_task_vocab_in(task) > cfg->vocab_in ||
        attn_task_vocab_out(task) != V || L > cfg->max_len)
        return attn__fail(ATTN_E_INVALID,
                          "task %s (vocab %lld, length %lld) "
                          "does not fit the model (inputs %lld, classes %lld, "
                          "max length %lld)",
                          attn_task_name(task->kind), (long long)task->vocab,
                          (long long)L, (long long)cfg->vocab_in, (long long)V,
                          (long long)cfg->max_len);
    const int64_t chunk = count < 250 ? count : 250;
    size_t ws = 0;
    if ((st = attn_model_workspace_size(cfg, chunk, L, &ws))) return st;
    const size_t bl = attn__size3(chunk, L, 1), blv = attn__size3(chunk, L, V);
    int32_t *tok = attn__alloc(2 * bl, sizeof(int32_t), "eval tokens");
    int64_t *len = attn__alloc((size_t)chunk, sizeof(int64_t), "eval lengths");
    float *logits = attn__alloc(blv, sizeof(float), "eval logits");
    float *w = attn__alloc(ws, sizeof(float), "eval workspace");
    if (!tok || !len || !logits || !w) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    int32_t *tgt = tok + bl;
    attn_rng rng;
    attn_rng_seed(&rng, attn__train_seed(seed, ATTN__STREAM_EVAL, 0));
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = threads;
    memset(res, 0, sizeof *res);
    double loss_sum = 0;
    for (int64_t done = 0; done < count; done += chunk) {
        const int64_t B = count - done < chunk ? count - done : chunk;
        if ((st = attn_task_batch(task, &rng, B, tok, tgt, len))) break;
        if ((st = attn_model_forward(cfg, params, B, L, tok, len, &o, logits,
                                     NULL, w)))
            break;
        double loss;
        int64_t counted = 0;
        if ((st = attn_cross_entropy(B * L, V, logits, tgt, ATTN_IGNORE_INDEX,
                                     &loss, NULL, &counted, NULL)))
            break;
        loss_sum += loss * (double)counted;
        attn__batch_accuracy(logits, tgt, B, L, V, &res->tokens,
                             &res->tokens_correct, &res->sequences_correct);
        res->sequences += B;
    }
    if (!st) {
        res->token_acc = res->tokens
                             ? (double)res->tokens_correct / (double)res->tokens
                             : 1.0;
        res->seq_acc = (double)res->sequences_correct / (double)res->sequences;
        res->loss = res->tokens ? loss_sum / (double)res->tokens : 0.0;
    }
done:
    attn__free(tok);
    attn__free(len);
    attn__free(logits);
    attn__free(w);
    return st;
}
