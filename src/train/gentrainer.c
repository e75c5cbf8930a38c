/* The trainer of the generation models: a fresh teacher-forced batch of
 * the task, forward, label-smoothed loss, backward, clipping and AdamW,
 * every buffer allocated once; and its checkpoints (the layout of
 * docs/checkpoint-format.md with magic ATTNGENM and the generation
 * configuration words). */
#include "train.h"
#include "attn_transformer.h"
#include "../io/binfile.h"

#include <math.h>
#include <string.h>

struct attn_gen_trainer {
    attn_gen_train_config cfg;
    attn_param_slice *slices;
    int64_t nslices, n, step, Ls, Lt, V;
    float *params, *grads, *m, *v;
    attn_rng rng;
    int32_t *src, *tgt, *y;
    int64_t *len;
    float *logits, *dlogits, *ws;
};

void attn_gen_train_config_init(attn_gen_train_config *c, attn_gen_kind task,
                                attn_model_kind kind) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    attn_gen_task_init(&c->task, task);
    attn_transformer_config_init(&c->model, kind);
    attn_adamw_config_init(&c->optim);
    /* chosen by experiment on the 2-core machine (README "Generation") */
    c->optim.lr = 2e-3;
    c->optim.warmup = 100;
    c->batch = 64;
    c->steps = 1000;
    c->seed = 1;
    c->optim.decay_steps = c->steps;
    c->optim.min_lr = c->optim.lr * 0.05;
}

attn_status attn_gen_train_config_check(attn_gen_train_config *c) {
    if (!c) return attn__fail(ATTN_E_INVALID, "train config is NULL");
    attn_status st = attn_gen_model_fit(&c->task, &c->model);
    if (st) return st;
    if ((st = attn_transformer_check(&c->model))) return st;
    if ((st = attn_adamw_check(&c->optim))) return st;
    if (c->batch < 1 || c->batch > (1 << 20) || c->steps < 0)
        return attn__fail(ATTN_E_INVALID,
                          "batch %lld must be in [1, 2^20] and"
                          " steps %lld >= 0",
                          (long long)c->batch, (long long)c->steps);
    if (!(c->dropout >= 0 && c->dropout < 1) ||
        !(c->label_smoothing >= 0 && c->label_smoothing < 1))
        return attn__fail(ATTN_E_INVALID,
                          "dropout %g and label smoothing %g "
                          "must be in [0, 1)",
                          c->dropout, c->label_smoothing);
    if (c->threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", c->threads);
    return ATTN_OK;
}

void attn_gen_trainer_free(attn_gen_trainer *t) {
    if (!t) return;
    attn__free(t->slices);
    attn__free(t->params);
    attn__free(t->src);
    attn__free(t->len);
    attn__free(t->logits);
    attn__free(t->ws);
    attn__free(t);
}

attn_status attn_gen_trainer_create(const attn_gen_train_config *cfg,
                                    attn_gen_trainer **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!cfg) return attn__fail(ATTN_E_INVALID, "cfg is NULL");
    attn_gen_train_config c = *cfg;
    attn_status st = attn_gen_train_config_check(&c);
    if (st) return st;
    attn_gen_trainer *t = attn__alloc(1, sizeof *t, "trainer");
    if (!t) return ATTN_E_NOMEM;
    memset(t, 0, sizeof *t);
    t->cfg = c;
    attn_gen_batch_dims(&c.task, c.model.kind, &t->Ls, &t->Lt);
    t->V = c.model.vocab_tgt;
    t->n = attn_transformer_param_count(&c.model);
    size_t ws = 0, four;
    const size_t bs = attn__size3(c.batch, t->Ls, 1),
                 bt = attn__size3(c.batch, t->Lt, 1);
    const size_t btv = attn__size3(c.batch, t->Lt, t->V);
    if ((st = attn_transformer_param_slices(&c.model, NULL, 0, &t->nslices)))
        goto fail;
    if (!(t->slices = attn__alloc((size_t)t->nslices, sizeof *t->slices,
                                  "slice table"))) {
        st = ATTN_E_NOMEM;
        goto fail;
    }
    attn_transformer_param_slices(&c.model, t->slices, t->nslices, &t->nslices);
    if ((st = attn_transformer_workspace_size(
             &c.model, c.batch, c.model.kind == ATTN_MODEL_ENCDEC ? t->Ls : 1,
             t->Lt, &ws)))
        goto fail;
    if (!bs || !bt || !btv || !attn__mul_size((size_t)t->n, 4, &four)) {
        st = attn__fail(ATTN_E_NOMEM, "trainer buffer sizes overflow");
        goto fail;
    }
    if (!(t->params = attn__alloc(four, sizeof(float), "parameters")) ||
        !(t->src = attn__alloc(bs + 2 * bt, sizeof(int32_t), "batch ids")) ||
        !(t->len = attn__alloc((size_t)c.batch, sizeof(int64_t), "lengths")) ||
        !(t->logits = attn__alloc(2 * btv, sizeof(float), "logits")) ||
        !(t->ws = attn__alloc(ws, sizeof(float), "model workspace"))) {
        st = ATTN_E_NOMEM;
        goto fail;
    }
    memset(t->params, 0, four * sizeof(float));
    t->grads = t->params + t->n;
    t->m = t->grads + t->n;
    t->v = t->m + t->n;
    t->tgt = t->src + bs;
    t->y = t->tgt + bt;
    t->dlogits = t->logits + btv;
    if ((st = attn_params_init(t->slices, t->nslices, t->params, c.seed)))
        goto fail;
    attn_rng_seed(&t->rng, attn__train_seed(c.seed, ATTN__STREAM_DATA, 0));
    *out = t;
    return ATTN_OK;
fail:
    attn_gen_trainer_free(t);
    return st;
}

static attn_status stopped(attn_status st, int64_t step, const char *what) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", attn_last_error());
    return attn__fail(st, "training stopped at step %lld: %s: %s",
                      (long long)step + 1, what, detail);
}

attn_status attn_gen_trainer_step(attn_gen_trainer *t,
                                  attn_train_stats *stats) {
    if (!t) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    const attn_gen_train_config *c = &t->cfg;
    const int64_t B = c->batch, Lt = t->Lt, V = t->V;
    const int ed = c->model.kind == ATTN_MODEL_ENCDEC;
    attn_status st = attn_gen_batch(&c->task, c->model.kind, &t->rng, B, t->src,
                                    t->len, t->tgt, t->y, NULL, 0);
    if (st) return st;
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = c->threads;
    o.dropout_p = c->dropout;
    o.seed = attn__train_seed(c->seed, ATTN__STREAM_DROPOUT, (uint64_t)t->step);
    const int64_t Ls = ed ? t->Ls : 1;
    st = attn_transformer_forward(&c->model, t->params, B, Ls,
                                  ed ? t->src : NULL, ed ? t->len : NULL, Lt,
                                  t->tgt, &o, t->logits, NULL, t->ws);
    if (st) return stopped(st, t->step, "forward");
    double loss;
    int64_t counted = 0, right = 0;
    st = attn_cross_entropy_smoothed(B * Lt, V, t->logits, t->y,
                                     ATTN_IGNORE_INDEX, c->label_smoothing,
                                     &loss, t->dlogits, &counted, &right);
    if (st) return stopped(st, t->step, "loss");
    if (!isfinite(loss))
        return attn__fail(ATTN_E_NONFINITE,
                          "training stopped at step %lld: "
                          "the loss is %g",
                          (long long)t->step + 1, loss);
    memset(t->grads, 0, (size_t)t->n * sizeof(float));
    st = attn_transformer_backward(&c->model, t->params, B, Ls,
                                   ed ? t->src : NULL, ed ? t->len : NULL, Lt,
                                   t->tgt, &o, t->dlogits, t->ws, t->grads);
    if (st) return stopped(st, t->step, "backward");
    double norm;
    st = attn_clip_grad_norm(t->grads, t->n, c->optim.clip_norm, &norm);
    if (st) return stopped(st, t->step, "gradients");
    st = attn_adamw_step(&c->optim, t->step, t->slices, t->nslices, t->n,
                         t->params, t->grads, t->m, t->v);
    if (st) return st;
    if (stats) {
        int64_t tok = 0, tok_right = 0, seq_right = 0;
        attn__batch_accuracy(t->logits, t->y, B, Lt, V, &tok, &tok_right,
                             &seq_right);
        stats->step = t->step + 1;
        stats->loss = loss;
        stats->token_acc = tok ? (double)tok_right / (double)tok : 1.0;
        stats->seq_acc = (double)seq_right / (double)B;
        stats->grad_norm = norm;
        stats->lr = attn_adamw_lr(&c->optim, t->step);
        stats->tokens = tok;
    }
    t->step++;
    return ATTN_OK;
}

int64_t attn_gen_trainer_steps_done(const attn_gen_trainer *t) {
    return t ? t->step : 0;
}
const attn_gen_train_config *
attn_gen_trainer_config(const attn_gen_trainer *t) {
    return t ? &t->cfg : NULL;
}
const float *attn_gen_trainer_params(const attn_gen_trainer *t) {
    return t ? t->params : NULL;
}

attn_status attn_gen_trainer_set_threads(attn_gen_trainer *t, int threads) {
    if (!t) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    if (threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", threads);
    t->cfg.threads = threads;
    return ATTN_OK;
}

attn_status attn_gen_trainer_set_steps(attn_gen_trainer *t, int64_t steps) {
    if (!t) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    if (steps < 0)
        return attn__fail(ATTN_E_INVALID, "steps is %lld (< 0)",
                          (long long)steps);
    t->cfg.steps = steps;
    t->cfg.optim.decay_steps = steps;
    return ATTN_OK;
}

/* ---- checkpoints ------------------------------------------------------ */

#define MAGIC "ATTNGENM"
#define VERSION 1u
#define NFIELDS 43
#define HEAD_BYTES (8 + 4 + 4 + 8 * NFIELDS + 8 + 32 + 8)

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}
static double bitsd(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* The configuration as words in the file's order; to_file 1: c -> w. */
static void fields(attn_gen_train_config *c, uint64_t *w, int to_file) {
    attn_encoder_config *e = &c->model.enc;
    attn_decoder_config *d = &c->model.dec;
    attn_adamw_config *o = &c->optim;
    int k = 0;
#define I64(x)                                                                 \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (void)((x) = (int64_t)w[k])),                                   \
        k++
#define ENUM(x, T)                                                             \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (void)((x) = (T)(int64_t)w[k])),                                \
        k++
#define INT(x)                                                                 \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (void)((x) = (int)(int64_t)w[k])),                              \
        k++
#define DBL(x)                                                                 \
    (to_file ? (void)(w[k] = dbits(x)) : (void)((x) = bitsd(w[k]))), k++
    ENUM(c->task.kind, attn_gen_kind);
    I64(c->task.min_len);
    I64(c->task.max_len);
    ENUM(c->model.kind, attn_model_kind);
    I64(e->num_layers);
    I64(e->d_model);
    I64(e->num_heads);
    I64(e->num_kv_heads);
    I64(e->dim_feedforward);
    ENUM(e->attention, attn_attention_type);
    I64(e->additive_dim);
    ENUM(e->activation, attn_activation);
    INT(e->norm_first);
    INT(e->final_norm);
    DBL(e->layer_norm_eps);
    I64(d->num_layers);
    I64(d->d_model);
    I64(d->num_heads);
    I64(d->num_kv_heads);
    I64(d->dim_feedforward);
    INT(d->cross);
    ENUM(d->cross_attention, attn_attention_type);
    I64(d->additive_dim);
    ENUM(d->activation, attn_activation);
    INT(d->norm_first);
    INT(d->final_norm);
    DBL(d->layer_norm_eps);
    INT(c->model.share_embeddings);
    INT(c->model.tie_output);
    DBL(o->lr);
    DBL(o->beta1);
    DBL(o->beta2);
    DBL(o->eps);
    DBL(o->weight_decay);
    I64(o->warmup);
    I64(o->decay_steps);
    DBL(o->min_lr);
    DBL(o->clip_norm);
    I64(c->batch);
    I64(c->steps);
    (to_file ? (void)(w[k] = c->seed) : (void)(c->seed = w[k])), k++;
    DBL(c->dropout);
    DBL(c->label_smoothing);
#undef I64
#undef ENUM
#undef INT
#undef DBL
    ATTN_ASSERT(k == NFIELDS);
}

attn_status attn_gen_trainer_save(const attn_gen_trainer *t, const char *path) {
    if (!t || !path)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", t ? "path" : "trainer");
    size_t data, size;
    if (!attn__mul_size((size_t)t->n, 12, &data) ||
        (size = HEAD_BYTES + data + 4) < data)
        return attn__fail(ATTN_E_NOMEM, "checkpoint size overflows");
    unsigned char *buf = attn__alloc(size, 1, "checkpoint image");
    if (!buf) return ATTN_E_NOMEM;
    unsigned char *p = buf;
    memcpy(p, MAGIC, 8);
    attn__put_u32(p + 8, VERSION);
    attn__put_u32(p + 12, NFIELDS);
    p += 16;
    uint64_t w[NFIELDS];
    attn_gen_train_config c = t->cfg;
    fields(&c, w, 1);
    for (int i = 0; i < NFIELDS; i++, p += 8) attn__put_u64(p, w[i]);
    attn__put_u64(p, (uint64_t)t->step);
    p += 8;
    for (int i = 0; i < 4; i++, p += 8) attn__put_u64(p, t->rng.s[i]);
    attn__put_u64(p, (uint64_t)t->n);
    p += 8;
    attn__put_f32s(p, t->params, t->n);
    attn__put_f32s(p + 4 * t->n, t->m, t->n);
    attn__put_f32s(p + 8 * t->n, t->v, t->n);
    p += 12 * t->n;
    attn__put_u32(p, attn__crc32(buf, size - 4));
    attn_status st = attn__write_atomic(path, buf, size);
    attn__free(buf);
    return st;
}

/* Beyond the parameters (whose size the file's length bounds), the
 * training buffers a checkpoint's batch, lengths and vocabulary ask for:
 * refused above this before anything is allocated, as for attn_trainer. */
#define GEN_MAX_WORK_BYTES ((uint64_t)1 << 30)

/* Everything the trainer would allocate is checked before it is: words
 * that do not survive the trip into their C fields (an int or enum word
 * with garbage in its upper half), the parameter count the configuration
 * implies against the file's, and the training buffers' size. */
static attn_status gen_load_precheck(const char *path,
                                     const attn_gen_train_config *c,
                                     const uint64_t *w, uint64_t count) {
    uint64_t back[NFIELDS];
    attn_gen_train_config cc = *c;
    fields(&cc, back, 1);
    for (int i = 0; i < NFIELDS; i++)
        if (back[i] != w[i])
            return attn__fail(ATTN_E_FORMAT,
                              "%s: configuration word %d is 0x%llx, outside "
                              "the range of its field",
                              path, i, (unsigned long long)w[i]);
    attn_status st = attn_gen_train_config_check(&cc);
    int64_t Ls = 0, Lt = 0;
    size_t ws = 0;
    if (!st) st = attn_gen_batch_dims(&cc.task, cc.model.kind, &Ls, &Lt);
    if (!st)
        st = attn_transformer_workspace_size(
            &cc.model, cc.batch, cc.model.kind == ATTN_MODEL_ENCDEC ? Ls : 1,
            Lt, &ws);
    if (st) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", attn_last_error());
        return attn__fail(ATTN_E_FORMAT, "%s: its configuration is invalid: %s",
                          path, detail);
    }
    const int64_t need = attn_transformer_param_count(&cc.model);
    if (need < 1 || (uint64_t)need != count)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: %llu parameters, but its configuration needs "
                          "%lld",
                          path, (unsigned long long)count, (long long)need);
    /* workspace, batch ids, logits and their gradient */
    const double b = (double)cc.batch;
    const double work =
        4.0 * ((double)ws + b * ((double)Ls + 2.0 * (double)Lt) +
               2.0 * b * (double)Lt * (double)cc.model.vocab_tgt);
    if (work > (double)GEN_MAX_WORK_BYTES)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: batch %lld needs %.0f bytes of training "
                          "buffers, more than the limit of %llu",
                          path, (long long)cc.batch, work,
                          (unsigned long long)GEN_MAX_WORK_BYTES);
    return ATTN_OK;
}

attn_status attn_gen_trainer_load(const char *path, attn_gen_trainer **out) {
    if (!path || !out)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", path ? "out" : "path");
    *out = NULL;
    unsigned char *buf;
    size_t n;
    attn_status st = attn__read_file(path, 16, "a checkpoint", &buf, &n);
    if (st) return st;
    attn_gen_trainer *t = NULL;
    if (memcmp(buf, MAGIC, 8) != 0) {
        st = memcmp(buf, "ATTNCKPT", 8) == 0
                 ? attn__bad_file(path,
                                  "an encoder tagger checkpoint (attn "
                                  "train reverse/copy/sort/add), not a "
                                  "generation model (attn train date, or a "
                                  "task with --model encdec|decoder)")
                 : attn__bad_file(path, "not an attn generation model "
                                        "checkpoint (bad magic)");
        goto done;
    }
    const uint32_t ver = attn__get_u32(buf + 8), nf = attn__get_u32(buf + 12);
    if (ver != VERSION || nf != NFIELDS) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: checkpoint version %u with %u "
                        "fields; this library reads version %u with %u",
                        path, ver, nf, VERSION, NFIELDS);
        goto done;
    }
    if (n < HEAD_BYTES + 4) {
        st = attn__bad_file(path, "too short to be a checkpoint (truncated?)");
        goto done;
    }
    const uint64_t count = attn__get_u64(buf + HEAD_BYTES - 8);
    if (count > (n - HEAD_BYTES - 4) / 12 || HEAD_BYTES + 12 * count + 4 != n) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: %zu bytes, but a checkpoint of "
                        "%llu parameters has %llu (truncated or padded)",
                        path, n, (unsigned long long)count,
                        (unsigned long long)(HEAD_BYTES + 12 * count + 4));
        goto done;
    }
    if (attn__get_u32(buf + n - 4) != attn__crc32(buf, n - 4)) {
        st = attn__bad_file(path, "CRC32 mismatch: the file is corrupted");
        goto done;
    }
    const unsigned char *p = buf + 16;
    uint64_t w[NFIELDS];
    for (int i = 0; i < NFIELDS; i++, p += 8) w[i] = attn__get_u64(p);
    attn_gen_train_config c;
    memset(&c, 0, sizeof c);
    fields(&c, w, 0);
    if ((st = gen_load_precheck(path, &c, w, count))) goto done;
    if ((st = attn_gen_trainer_create(&c, &t))) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", attn_last_error());
        st = attn__fail(ATTN_E_FORMAT, "%s: its configuration is invalid: %s",
                        path, detail);
        goto done;
    }
    if ((uint64_t)t->n != count) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: %llu parameters, but its "
                        "configuration needs %lld",
                        path, (unsigned long long)count, (long long)t->n);
        goto done;
    }
    const int64_t step = (int64_t)attn__get_u64(p);
    p += 8;
    if (step < 0) {
        st = attn__bad_file(path, "negative step");
        goto done;
    }
    t->step = step;
    for (int i = 0; i < 4; i++, p += 8) t->rng.s[i] = attn__get_u64(p);
    p += 8;
    attn__get_f32s(p, t->params, t->n);
    attn__get_f32s(p + 4 * t->n, t->m, t->n);
    attn__get_f32s(p + 8 * t->n, t->v, t->n);
done:
    attn__free(buf);
    if (st) {
        attn_gen_trainer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}
