/* attn_trainer's checkpoints (docs/checkpoint-format.md, magic ATTNCKPT):
 * its configuration words and what they must allow before the trainer is
 * allocated; the framing (header, lengths, CRC32, state, atomic write) is
 * ckpt.c's, shared with the generation trainer. */
#include "ckpt.h"

#include <stdio.h>
#include <string.h>

#define NFIELDS 28 /* configuration words, in the order below */

static const attn__ckpt_kind kind = {
    "ATTNCKPT", NFIELDS, "not an attn training checkpoint (bad magic)",
    "ATTNGENM",
    "a generation model checkpoint (attn train date, or a task with "
    "--model encdec|decoder), not an encoder tagger (attn train "
    "reverse/copy/sort/add)"};

/* The configuration as words in the file's order (ckpt.h). to_file 1:
 * cfg -> w, 0: w -> cfg. Returns the index of the first word that does
 * not fit its int field (reading), or -1. */
static int fields(attn_train_config *c, uint64_t *w, int to_file) {
    int k = 0, bad = -1;
    ATTN__CKPT_ENUM(c->task.kind, attn_task_kind);
    ATTN__CKPT_I64(c->task.vocab);
    ATTN__CKPT_I64(c->task.min_len);
    ATTN__CKPT_I64(c->task.max_len);
    k = attn__ckpt_encoder_words(&c->model.enc, w, k, to_file, &bad);
    k = attn__ckpt_adamw_words(&c->optim, w, k, to_file);
    ATTN__CKPT_I64(c->batch);
    ATTN__CKPT_I64(c->steps);
    ATTN__CKPT_U64(c->seed);
    ATTN__CKPT_DBL(c->dropout);
    ATTN_ASSERT(k == NFIELDS);
    return bad;
}

/* Names of the words, for messages. */
static const char *const field_name[NFIELDS] = {
    "task.kind",    "task.vocab",   "task.min_len",
    "task.max_len", "num_layers",   "d_model",
    "num_heads",    "num_kv_heads", "dim_feedforward",
    "attention",    "additive_dim", "activation",
    "norm_first",   "final_norm",   "layer_norm_eps",
    "lr",           "beta1",        "beta2",
    "eps",          "weight_decay", "warmup",
    "decay_steps",  "min_lr",       "clip_norm",
    "batch",        "steps",        "seed",
    "dropout"};

attn_status attn_trainer_save(const attn_trainer *t, const char *path) {
    if (!t || !path)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", t ? "path" : "trainer");
    uint64_t w[NFIELDS];
    attn_train_config c = t->cfg;
    fields(&c, w, 1);
    return attn__ckpt_save(&kind, w, &t->s, path);
}

/* Everything the trainer would allocate is checked before it is: the
 * words that do not fit their int fields, the configuration, the
 * parameter count it implies against the file's (whose length bounds
 * it), and the training buffers against ATTN__CKPT_MAX_WORK_BYTES. */
static attn_status precheck(const char *path, const attn__ckpt_image *img,
                            attn_train_config *c) {
    memset(c, 0, sizeof *c);
    uint64_t w[NFIELDS];
    memcpy(w, img->w, sizeof w);
    const int bad = fields(c, w, 0);
    if (bad >= 0)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: configuration word %d (%s) is "
                          "%lld, outside the range of an int",
                          path, bad, field_name[bad],
                          (long long)(int64_t)w[bad]);
    attn_train_config cc = *c;
    size_t ws = 0;
    if (attn_train_config_check(&cc) ||
        attn_model_workspace_size(&cc.model, cc.batch, cc.model.max_len, &ws))
        return attn__ckpt_invalid(path);
    attn_status st = attn__ckpt_count_check(path, img->count,
                                            attn_model_param_count(&cc.model));
    if (st) return st;
    /* logits and their gradient, tokens and targets, the workspace */
    const double work =
        4.0 * ((double)ws + 2.0 * (double)cc.batch * (double)cc.model.max_len *
                                (double)(cc.model.vocab_out + 1));
    if (work > (double)ATTN__CKPT_MAX_WORK_BYTES)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: batch %lld of length %lld over a "
                          "vocabulary of %lld needs %.0f bytes of training "
                          "buffers, more than the limit of %llu",
                          path, (long long)cc.batch,
                          (long long)cc.model.max_len,
                          (long long)cc.model.vocab_out, work,
                          (unsigned long long)ATTN__CKPT_MAX_WORK_BYTES);
    return ATTN_OK;
}

attn_status attn_trainer_load(const char *path, attn_trainer **out) {
    if (!path || !out)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", path ? "out" : "path");
    *out = NULL;
    attn__ckpt_image img;
    attn_status st = attn__ckpt_read(&kind, path, &img);
    if (st) return st;
    attn_trainer *t = NULL;
    attn_train_config c;
    if (!(st = precheck(path, &img, &c))) {
        if (attn_trainer_create(&c, &t))
            st = attn__ckpt_invalid(path);
        else
            st = attn__ckpt_restore(&kind, &img, path, &t->s);
    }
    attn__ckpt_image_free(&img);
    if (st) {
        attn_trainer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}
