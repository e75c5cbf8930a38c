/* Training checkpoints (docs/checkpoint-format.md): the configuration,
 * the step, the data RNG, the parameters and both AdamW moments, closed
 * by the CRC32 of the parameter files. Written whole to a temporary file
 * in the target's folder, fsync'ed, renamed over the target and the
 * folder fsync'ed: a reader sees the old file or the new one. */
#include "train.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "ATTNCKPT"   /* 8 bytes, no NUL */
#define VERSION 1u
#define NFIELDS 28         /* configuration words, in the order below */
/* magic, version, nfields, fields, step, rng, n; then 3 n floats, CRC */
#define HEAD_BYTES (8 + 4 + 4 + 8 * NFIELDS + 8 + 32 + 8)

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
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

/* The configuration as words (integers as two's complement, doubles by
 * bit pattern), in the file's order. to_file 1: cfg -> w, 0: w -> cfg. */
static void fields(attn_train_config *c, uint64_t *w, int to_file) {
    attn_encoder_config *e = &c->model.enc;
    attn_adamw_config *o = &c->optim;
    int k = 0;
#define I64(x) (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x)) \
                        : (void)((x) = (int64_t)w[k])), k++
#define ENUM(x, T) (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x)) \
                            : (void)((x) = (T)(int64_t)w[k])), k++
#define INT(x) (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x)) \
                        : (void)((x) = (int)(int64_t)w[k])), k++
#define DBL(x) (to_file ? (void)(w[k] = dbits(x)) : (void)((x) = bitsd(w[k]))), k++
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
#undef ENUM
#undef INT
#undef DBL
    ATTN_ASSERT(k == NFIELDS);
}

static void put_floats(unsigned char *p, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++, p += 4) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        put_u32(p, u);
    }
}
static void get_floats(const unsigned char *p, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++, p += 4) {
        uint32_t u = get_u32(p);
        memcpy(&x[i], &u, 4);
    }
}

/* Writes size bytes of buf to path through a temporary file. */
static attn_status write_atomic(const char *path, const unsigned char *buf,
                                size_t size) {
    const size_t plen = strlen(path);
    char *tmp = attn__alloc(plen + 16, 1, "temporary name");
    if (!tmp) return ATTN_E_NOMEM;
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    attn_status st = ATTN_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = attn__fail(ATTN_E_IO, "cannot create a temporary file next to "
                        "%s: %s", path, strerror(errno));
        attn__free(tmp);
        return st;
    }
    (void)fchmod(fd, 0644); /* mkstemp gives 0600; a model is not secret */
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, buf + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (done < size || fsync(fd) != 0)
        st = attn__fail(ATTN_E_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !st)
        st = attn__fail(ATTN_E_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = attn__fail(ATTN_E_IO, "cannot rename %s to %s: %s", tmp, path,
                        strerror(errno));
    if (st) {
        unlink(tmp);
    } else {
        /* make the rename itself durable: fsync the folder */
        char *slash = strrchr(tmp, '/');
        if (slash) slash[1] = '\0';
        int dfd = open(slash ? tmp : ".", O_RDONLY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    attn__free(tmp);
    return st;
}

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
    put_u32(p + 8, VERSION);
    put_u32(p + 12, NFIELDS);
    p += 16;
    uint64_t w[NFIELDS];
    attn_train_config c = t->cfg;
    fields(&c, w, 1);
    for (int i = 0; i < NFIELDS; i++, p += 8) put_u64(p, w[i]);
    put_u64(p, (uint64_t)t->step);
    p += 8;
    for (int i = 0; i < 4; i++, p += 8) put_u64(p, t->rng.s[i]);
    put_u64(p, (uint64_t)t->n);
    p += 8;
    put_floats(p, t->params, t->n);
    put_floats(p + 4 * t->n, t->m, t->n);
    put_floats(p + 8 * t->n, t->v, t->n);
    p += 12 * t->n;
    put_u32(p, attn__crc32(buf, size - 4));
    attn_status st = write_atomic(path, buf, size);
    attn__free(buf);
    return st;
}

static attn_status bad(const char *path, const char *what) {
    return attn__fail(ATTN_E_FORMAT, "%s: %s", path, what);
}

attn_status attn_trainer_load(const char *path, attn_trainer **out) {
    if (!path || !out)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", path ? "out" : "path");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return attn__fail(ATTN_E_IO, "cannot open %s: %s", path, strerror(errno));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return attn__fail(ATTN_E_IO, "cannot size %s", path);
    }
    if ((size_t)size < HEAD_BYTES + 4) {
        fclose(f);
        return bad(path, "too short to be a checkpoint (truncated?)");
    }
    unsigned char *buf = attn__alloc((size_t)size, 1, "checkpoint image");
    if (!buf) {
        fclose(f);
        return ATTN_E_NOMEM;
    }
    const size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    attn_status st = ATTN_OK;
    attn_trainer *t = NULL;
    const size_t n = (size_t)size;
    if (got != n) {
        st = attn__fail(ATTN_E_IO, "cannot read %s", path);
        goto done;
    }
    if (memcmp(buf, MAGIC, 8) != 0) {
        st = bad(path, "not an attn training checkpoint (bad magic)");
        goto done;
    }
    if (get_u32(buf + 8) != VERSION || get_u32(buf + 12) != NFIELDS) {
        st = attn__fail(ATTN_E_FORMAT, "%s: checkpoint version %u with %u "
                        "fields; this library reads version %u with %u",
                        path, get_u32(buf + 8), get_u32(buf + 12), VERSION,
                        NFIELDS);
        goto done;
    }
    const unsigned char *p = buf + 16;
    const uint64_t count = get_u64(buf + HEAD_BYTES - 8);
    if (count > (n - HEAD_BYTES - 4) / 12 ||
        HEAD_BYTES + 12 * count + 4 != n) {
        st = attn__fail(ATTN_E_FORMAT, "%s: %zu bytes, but a checkpoint of "
                        "%llu parameters has %llu (truncated or padded)", path,
                        n, (unsigned long long)count,
                        (unsigned long long)(HEAD_BYTES + 12 * count + 4));
        goto done;
    }
    if (get_u32(buf + n - 4) != attn__crc32(buf, n - 4)) {
        st = bad(path, "CRC32 mismatch: the file is corrupted");
        goto done;
    }
    uint64_t w[NFIELDS];
    for (int i = 0; i < NFIELDS; i++, p += 8) w[i] = get_u64(p);
    attn_train_config c;
    memset(&c, 0, sizeof c);
    fields(&c, w, 0);
    if ((st = attn_trainer_create(&c, &t))) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", attn_last_error());
        st = attn__fail(ATTN_E_FORMAT, "%s: its configuration is invalid: %s",
                        path, detail);
        goto done;
    }
    if ((uint64_t)t->n != count) {
        st = attn__fail(ATTN_E_FORMAT, "%s: %llu parameters, but its "
                        "configuration needs %lld", path,
                        (unsigned long long)count, (long long)t->n);
        goto done;
    }
    const int64_t step = (int64_t)get_u64(p);
    p += 8;
    if (step < 0) {
        st = bad(path, "negative step");
        goto done;
    }
    t->step = step;
    for (int i = 0; i < 4; i++, p += 8) t->rng.s[i] = get_u64(p);
    p += 8; /* count, read above */
    get_floats(p, t->params, t->n);
    get_floats(p + 4 * t->n, t->m, t->n);
    get_floats(p + 8 * t->n, t->v, t->n);
done:
    attn__free(buf);
    if (st) {
        attn_trainer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}
