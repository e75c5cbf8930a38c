/* Training checkpoints (docs/checkpoint-format.md): the configuration,
 * the step, the data RNG, the parameters and both AdamW moments, closed
 * by the CRC32 of every byte before it. Written whole to a temporary file
 * in the target's folder, fsync'ed, renamed over the target and the
 * folder fsync'ed: a reader sees the old file or the new one. */
#include "train.h"
#include "../io/binfile.h"

#include <limits.h>
#include <string.h>

#define MAGIC "ATTNCKPT" /* 8 bytes, no NUL */
#define VERSION 1u
#define NFIELDS 28 /* configuration words, in the order below */
/* magic, version, nfields, fields, step, rng, n; then 3 n floats, CRC */
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

/* A word read into an int (or enum) field must be an int: a cast would
 * load garbage in the upper half (0x700000000) as a valid value. */
static int fits_int(uint64_t w) {
    const int64_t v = (int64_t)w;
    return v >= INT_MIN && v <= INT_MAX;
}

/* The configuration as words (integers as two's complement, doubles by
 * bit pattern), in the file's order. to_file 1: cfg -> w, 0: w -> cfg.
 * Returns the index of the first word that does not fit its int field
 * (reading), or -1. */
static int fields(attn_train_config *c, uint64_t *w, int to_file) {
    attn_encoder_config *e = &c->model.enc;
    attn_adamw_config *o = &c->optim;
    int k = 0, bad = -1;
#define I64(x)                                                                 \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (void)((x) = (int64_t)w[k])),                                   \
        k++
#define NOTE_BAD (bad < 0 && !fits_int(w[k]) ? (void)(bad = k) : (void)0)
#define ENUM(x, T)                                                             \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (NOTE_BAD, (void)((x) = (T)(int64_t)w[k]))),                    \
        k++
#define INT(x)                                                                 \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (NOTE_BAD, (void)((x) = (int)(int64_t)w[k]))),                  \
        k++
#define DBL(x)                                                                 \
    (to_file ? (void)(w[k] = dbits(x)) : (void)((x) = bitsd(w[k]))), k++
    ENUM(c->task.kind, attn_task_kind);
    I64(c->task.vocab);
    I64(c->task.min_len);
    I64(c->task.max_len);
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
#undef I64
#undef NOTE_BAD
#undef ENUM
#undef INT
#undef DBL
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

/* Beyond the parameters (whose size the file's length bounds), the
 * training buffers a checkpoint's batch, length and vocabulary ask for:
 * refused above this before anything is allocated. */
#define MAX_WORK_BYTES ((uint64_t)1 << 30)

attn_status attn_trainer_save(const attn_trainer *t, const char *path) {
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
    attn_train_config c = t->cfg;
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

attn_status attn_trainer_load(const char *path, attn_trainer **out) {
    if (!path || !out)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", path ? "out" : "path");
    *out = NULL;
    unsigned char *buf;
    size_t n;
    attn_status st =
        attn__read_file(path, HEAD_BYTES + 4, "a checkpoint", &buf, &n);
    if (st) return st;
    attn_trainer *t = NULL;
    if (memcmp(buf, MAGIC, 8) != 0) {
        st =
            attn__bad_file(path, "not an attn training checkpoint (bad magic)");
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
    const unsigned char *p = buf + 16;
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
    uint64_t w[NFIELDS];
    for (int i = 0; i < NFIELDS; i++, p += 8) w[i] = attn__get_u64(p);
    attn_train_config c;
    memset(&c, 0, sizeof c);
    const int bad = fields(&c, w, 0);
    if (bad >= 0) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: configuration word %d (%s) is "
                        "%lld, outside the range of an int",
                        path, bad, field_name[bad], (long long)(int64_t)w[bad]);
        goto done;
    }
    /* everything the trainer would allocate is checked first: the file's
     * own length bounds the parameters, MAX_WORK_BYTES the rest */
    attn_train_config cc = c;
    size_t ws = 0;
    if ((st = attn_train_config_check(&cc)) ||
        (st = attn_model_workspace_size(&cc.model, cc.batch, cc.model.max_len,
                                        &ws))) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", attn_last_error());
        st = attn__fail(ATTN_E_FORMAT, "%s: its configuration is invalid: %s",
                        path, detail);
        goto done;
    }
    const int64_t need = attn_model_param_count(&cc.model);
    if (need < 1 || (uint64_t)need != count) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: %llu parameters, but its "
                        "configuration needs %lld",
                        path, (unsigned long long)count, (long long)need);
        goto done;
    }
    /* logits and their gradient, tokens and targets, the workspace */
    const double work =
        4.0 * ((double)ws + 2.0 * (double)cc.batch * (double)cc.model.max_len *
                                (double)(cc.model.vocab_out + 1));
    if (work > (double)MAX_WORK_BYTES) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: batch %lld of length %lld over a "
                        "vocabulary of %lld needs %.0f bytes of training "
                        "buffers, more than the limit of %llu",
                        path, (long long)cc.batch, (long long)cc.model.max_len,
                        (long long)cc.model.vocab_out, work,
                        (unsigned long long)MAX_WORK_BYTES);
        goto done;
    }
    if ((st = attn_trainer_create(&c, &t))) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", attn_last_error());
        st = attn__fail(ATTN_E_FORMAT, "%s: its configuration is invalid: %s",
                        path, detail);
        goto done;
    }
    ATTN_ASSERT((uint64_t)t->n == count);
    const int64_t step = (int64_t)attn__get_u64(p);
    p += 8;
    if (step < 0) {
        st = attn__bad_file(path, "negative step");
        goto done;
    }
    t->step = step;
    for (int i = 0; i < 4; i++, p += 8) t->rng.s[i] = attn__get_u64(p);
    p += 8; /* count, read above */
    attn__get_f32s(p, t->params, t->n);
    attn__get_f32s(p + 4 * t->n, t->m, t->n);
    attn__get_f32s(p + 8 * t->n, t->v, t->n);
done:
    attn__free(buf);
    if (st) {
        attn_trainer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}
