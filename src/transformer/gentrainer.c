/* The trainer of the generation models: a fresh teacher-forced batch of
 * the task, forward, label-smoothed loss, backward, clipping and AdamW,
 * every buffer allocated once; and its checkpoints (the layout of
 * docs/checkpoint-format.md with magic ATTNGENM and the generation
 * configuration words). */
#include "../train/ckpt.h"
#include "transformer.h"

#include <math.h>
#include <string.h>

struct attn_gen_trainer {
    attn_gen_train_config cfg;
    attn__train_state s;
    int64_t Ls, Lt, V;
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
    /* chosen by experiment on the 2-core machine (docs/generation.md) */
    c->optim.lr = 2e-3;
    c->optim.warmup = 100;
    c->batch = 64;
    c->steps = 1000;
    if (task == ATTN_GEN_ADD && kind == ATTN_MODEL_DECODER) {
        /* writing the sum's high digit first, a decoder must foresee every
         * carry: at 1000 steps it gets a third of the sums right, at 4000
         * about 97% (which ones depends on the BLAS kernels' rounding), at
         * 6000 99% */
        c->optim.lr = 3e-3;
        c->steps = 6000;
    }
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
    if ((st = attn__train_sizes_check(c->batch, c->steps))) return st;
    if (!(c->dropout >= 0 && c->dropout < 1) ||
        !(c->label_smoothing >= 0 && c->label_smoothing < 1))
        return attn__fail(ATTN_E_INVALID,
                          "dropout %g and label smoothing %g "
                          "must be in [0, 1)",
                          c->dropout, c->label_smoothing);
    return attn__train_run_check(c->threads, c->dtype);
}

void attn_gen_trainer_free(attn_gen_trainer *t) {
    if (!t) return;
    attn__train_state_free(&t->s);
    ATTN__FREE_ALL(t->src, t->len, t->logits, t->ws, t);
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
    size_t ws = 0;
    const size_t bs = attn__size3(c.batch, t->Ls, 1),
                 bt = attn__size3(c.batch, t->Lt, 1);
    const size_t btv = attn__size3(c.batch, t->Lt, t->V);
    if ((st = attn__transformer_slices_alloc(&c.model, &t->s.slices,
                                             &t->s.nslices)) ||
        (st = attn_transformer_workspace_size(
             &c.model, c.batch, c.model.kind == ATTN_MODEL_ENCDEC ? t->Ls : 1,
             t->Lt, &ws)))
        goto fail;
    if (!bs || !bt || !btv) {
        st = attn__fail(ATTN_E_NOMEM, "trainer buffer sizes overflow");
        goto fail;
    }
    if ((st = attn__train_state_init(
             &t->s, attn_transformer_param_count(&c.model), c.seed)))
        goto fail;
    if (!(t->src = attn__alloc(bs + 2 * bt, sizeof(int32_t), "batch ids")) ||
        !(t->len = attn__alloc((size_t)c.batch, sizeof(int64_t), "lengths")) ||
        !(t->logits = attn__alloc(2 * btv, sizeof(float), "logits")) ||
        !(t->ws = attn__alloc(ws, sizeof(float), "model workspace"))) {
        st = ATTN_E_NOMEM;
        goto fail;
    }
    t->tgt = t->src + bs;
    t->y = t->tgt + bt;
    t->dlogits = t->logits + btv;
    *out = t;
    return ATTN_OK;
fail:
    attn_gen_trainer_free(t);
    return st;
}

attn_status attn_gen_trainer_step(attn_gen_trainer *t,
                                  attn_train_stats *stats) {
    if (!t) return attn__fail(ATTN_E_INVALID, "trainer is NULL");
    const attn_gen_train_config *c = &t->cfg;
    const int64_t B = c->batch, Lt = t->Lt, V = t->V;
    const int ed = c->model.kind == ATTN_MODEL_ENCDEC;
    attn_status st = attn_gen_batch(&c->task, c->model.kind, &t->s.rng, B,
                                    t->src, t->len, t->tgt, t->y, NULL, 0);
    if (st) return st;
    attn_layer_opts o;
    attn__train_step_opts(&t->s, c->threads, c->dtype, c->dropout, c->seed, &o);
    const int64_t Ls = ed ? t->Ls : 1;
    st = attn_transformer_forward(&c->model, t->s.params, B, Ls,
                                  ed ? t->src : NULL, ed ? t->len : NULL, Lt,
                                  t->tgt, &o, t->logits, NULL, t->ws);
    if (st) return attn__train_stopped(st, t->s.step, "forward");
    double loss;
    int64_t counted = 0, right = 0;
    st = attn_cross_entropy_smoothed(B * Lt, V, t->logits, t->y,
                                     ATTN_IGNORE_INDEX, c->label_smoothing,
                                     &loss, t->dlogits, &counted, &right);
    if ((st = attn__train_loss_done(&t->s, st, loss))) return st;
    st = attn_transformer_backward(&c->model, t->s.params, B, Ls,
                                   ed ? t->src : NULL, ed ? t->len : NULL, Lt,
                                   t->tgt, &o, t->dlogits, t->ws, t->s.grads);
    if (st) return attn__train_stopped(st, t->s.step, "backward");
    return attn__train_state_update(&t->s, &c->optim, loss, t->logits, t->y, B,
                                    Lt, V, stats);
}

int64_t attn_gen_trainer_steps_done(const attn_gen_trainer *t) {
    return t ? t->s.step : 0;
}
const attn_gen_train_config *
attn_gen_trainer_config(const attn_gen_trainer *t) {
    return t ? &t->cfg : NULL;
}
const float *attn_gen_trainer_params(const attn_gen_trainer *t) {
    return t ? t->s.params : NULL;
}

attn_status attn_gen_trainer_set_dtype(attn_gen_trainer *t, attn_dtype dtype) {
    return attn__train_set_dtype(t ? &t->cfg.dtype : NULL, dtype);
}

attn_status attn_gen_trainer_set_threads(attn_gen_trainer *t, int threads) {
    return attn__train_set_threads(t ? &t->cfg.threads : NULL, threads);
}

attn_status attn_gen_trainer_set_steps(attn_gen_trainer *t, int64_t steps) {
    return attn__train_set_steps(t ? &t->cfg.steps : NULL,
                                 t ? &t->cfg.optim : NULL, steps);
}

/* ---- checkpoints (ATTNGENM; the framing is ckpt.c's) ----------------- */

#define NFIELDS 43

static const attn__ckpt_kind kind = {
    "ATTNGENM", NFIELDS, "not an attn generation model checkpoint (bad magic)",
    "ATTNCKPT",
    "an encoder tagger checkpoint (attn train reverse/copy/sort/add), not a "
    "generation model (attn train date, or a task with --model "
    "encdec|decoder)"};

/* The configuration as words in the file's order (ckpt.h); to_file 1:
 * c -> w. Words that do not survive the trip are found by the precheck's
 * round trip, so the index of the first bad int word is not kept. */
static void fields(attn_gen_train_config *c, uint64_t *w, int to_file) {
    attn_decoder_config *d = &c->model.dec;
    int k = 0, bad = -1;
    ATTN__CKPT_ENUM(c->task.kind, attn_gen_kind);
    ATTN__CKPT_I64(c->task.min_len);
    ATTN__CKPT_I64(c->task.max_len);
    ATTN__CKPT_ENUM(c->model.kind, attn_model_kind);
    k = attn__ckpt_encoder_words(&c->model.enc, w, k, to_file, &bad);
    ATTN__CKPT_I64(d->num_layers);
    ATTN__CKPT_I64(d->d_model);
    ATTN__CKPT_I64(d->num_heads);
    ATTN__CKPT_I64(d->num_kv_heads);
    ATTN__CKPT_I64(d->dim_feedforward);
    ATTN__CKPT_INT(d->cross);
    ATTN__CKPT_ENUM(d->cross_attention, attn_attention_type);
    ATTN__CKPT_I64(d->additive_dim);
    ATTN__CKPT_ENUM(d->activation, attn_activation);
    ATTN__CKPT_INT(d->norm_first);
    ATTN__CKPT_INT(d->final_norm);
    ATTN__CKPT_DBL(d->layer_norm_eps);
    ATTN__CKPT_INT(c->model.share_embeddings);
    ATTN__CKPT_INT(c->model.tie_output);
    k = attn__ckpt_adamw_words(&c->optim, w, k, to_file);
    ATTN__CKPT_I64(c->batch);
    ATTN__CKPT_I64(c->steps);
    ATTN__CKPT_U64(c->seed);
    ATTN__CKPT_DBL(c->dropout);
    ATTN__CKPT_DBL(c->label_smoothing);
    (void)bad;
    ATTN_ASSERT(k == NFIELDS);
}

attn_status attn_gen_trainer_save(const attn_gen_trainer *t, const char *path) {
    if (!t || !path)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", t ? "path" : "trainer");
    uint64_t w[NFIELDS];
    attn_gen_train_config c = t->cfg;
    fields(&c, w, 1);
    return attn__ckpt_save(&kind, w, &t->s, path);
}

/* Everything the trainer would allocate is checked before it is: words
 * that do not survive the trip into their C fields (an int or enum word
 * with garbage in its upper half), the parameter count the configuration
 * implies against the file's, and the training buffers' size. */
static attn_status precheck(const char *path, const attn__ckpt_image *img,
                            attn_gen_train_config *c) {
    memset(c, 0, sizeof *c);
    uint64_t w[NFIELDS], back[NFIELDS];
    memcpy(w, img->w, sizeof w);
    fields(c, w, 0);
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
    if (st) return attn__ckpt_invalid(path);
    if ((st = attn__ckpt_count_check(path, img->count,
                                     attn_transformer_param_count(&cc.model))))
        return st;
    /* workspace, batch ids, logits and their gradient */
    const double b = (double)cc.batch;
    const double work =
        4.0 * ((double)ws + b * ((double)Ls + 2.0 * (double)Lt) +
               2.0 * b * (double)Lt * (double)cc.model.vocab_tgt);
    if (work > (double)ATTN__CKPT_MAX_WORK_BYTES)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: batch %lld needs %.0f bytes of training "
                          "buffers, more than the limit of %llu",
                          path, (long long)cc.batch, work,
                          (unsigned long long)ATTN__CKPT_MAX_WORK_BYTES);
    return ATTN_OK;
}

attn_status attn_gen_trainer_load(const char *path, attn_gen_trainer **out) {
    if (!path || !out)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", path ? "out" : "path");
    *out = NULL;
    attn__ckpt_image img;
    attn_status st = attn__ckpt_read(&kind, path, &img);
    if (st) return st;
    attn_gen_trainer *t = NULL;
    attn_gen_train_config c;
    if (!(st = precheck(path, &img, &c))) {
        if (attn_gen_trainer_create(&c, &t))
            st = attn__ckpt_invalid(path);
        else if (!(st = attn__ckpt_count_check(path, img.count, t->s.n)))
            st = attn__ckpt_restore(&kind, &img, path, &t->s);
    }
    attn__ckpt_image_free(&img);
    if (st) {
        attn_gen_trainer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}
