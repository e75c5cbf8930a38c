/* The KV cache object (attn_cache.h): storage, append with per-entry
 * counts, truncate, reorder through the slot table, read-back. Every
 * mutating call checks everything first and writes afterwards, so a
 * refused call leaves the cache as it was. */
#include "kv_cache.h"
#include "../kernels/rope.h"
#include "mask.h"

#include <math.h>
#include <string.h>

void attn_kv_cache_config_init(attn_kv_cache_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->dtype = ATTN_F32;
}

static int storage_dtype(attn_dtype d) {
    return d == ATTN_F32 || d == ATTN_F16 || d == ATTN_BF16 || d == ATTN_Q8;
}

/* Bytes of one stored row of n values, and its q8 block count. */
static size_t row_bytes(attn_dtype d, int64_t n, int64_t *blocks) {
    *blocks = d == ATTN_Q8 ? (n + ATTN_Q8_BLOCK - 1) / ATTN_Q8_BLOCK : 0;
    return d == ATTN_Q8 ? (size_t)n : (size_t)n * attn_dtype_size(d);
}

/* Checks cfg; fills the sizes of each part (values of K, V; scales of K, V). */
static attn_status plan(const attn_kv_cache_config *cfg, size_t part[4]) {
    part[0] = part[1] = part[2] = part[3] = 0;
    if (!cfg) return attn__fail(ATTN_E_INVALID, "cache config is NULL");
    const struct {
        const char *name;
        int64_t v;
    } ext[] = {{"batch", cfg->batch},
               {"kv_heads", cfg->kv_heads},
               {"capacity", cfg->capacity},
               {"head_dim", cfg->head_dim}};
    for (int i = 0; i < 4; i++)
        if (ext[i].v < 1)
            return attn__fail(ATTN_E_INVALID,
                              "cache config: %s is %lld; it "
                              "must be at least 1",
                              ext[i].name, (long long)ext[i].v);
    if (cfg->value_dim < 0)
        return attn__fail(ATTN_E_INVALID,
                          "cache config: value_dim is %lld; "
                          "it must be >= 1 (or 0 for head_dim)",
                          (long long)cfg->value_dim);
    if (!storage_dtype(cfg->dtype))
        return attn__fail(ATTN_E_DTYPE,
                          "cache config: dtype %s (%d) cannot "
                          "store a cache; use f32, f16, bf16 or q8",
                          attn_dtype_name(cfg->dtype), (int)cfg->dtype);
    int64_t dv = cfg->value_dim ? cfg->value_dim : cfg->head_dim, nbk, nbv;
    size_t rk = row_bytes(cfg->dtype, cfg->head_dim, &nbk);
    size_t rv = row_bytes(cfg->dtype, dv, &nbv);
    int64_t rows;
    size_t r;
    if (!attn__mul_i64(cfg->batch, cfg->kv_heads, &rows) ||
        !attn__mul_i64(rows, cfg->capacity, &rows) ||
        !attn__mul_size((size_t)rows, rk, &part[0]) ||
        !attn__mul_size((size_t)rows, rv, &part[1]) ||
        !attn__mul_size((size_t)rows, (size_t)nbk * sizeof(float), &part[2]) ||
        !attn__mul_size((size_t)rows, (size_t)nbv * sizeof(float), &part[3]) ||
        (r = part[0] + part[1]) < part[0] || r + part[2] < r ||
        r + part[2] + part[3] < r + part[2] ||
        (size_t)INT64_MAX < r + part[2] + part[3])
        return attn__fail(ATTN_E_NOMEM,
                          "cache config: %lld x %lld x %lld "
                          "positions of %lld + %lld values overflow the "
                          "address space",
                          (long long)cfg->batch, (long long)cfg->kv_heads,
                          (long long)cfg->capacity, (long long)cfg->head_dim,
                          (long long)dv);
    return ATTN_OK;
}

attn_status attn_kv_cache_bytes(const attn_kv_cache_config *cfg,
                                size_t *bytes) {
    size_t part[4];
    attn_status st = plan(cfg, part);
    if (st) return st;
    if (!bytes) return attn__fail(ATTN_E_INVALID, "bytes is NULL");
    *bytes = part[0] + part[1] + part[2] + part[3];
    return ATTN_OK;
}

void attn_kv_cache_free(attn_kv_cache *c) {
    if (!c) return;
    ATTN__FREE_ALL(c->k, c->v, c->ks, c->vs, c->len, c->slot, c->doc,
                   c->rope_freq, c);
}

attn_status attn_kv_cache_create(const attn_kv_cache_config *cfg,
                                 attn_kv_cache **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    size_t part[4];
    attn_status st = plan(cfg, part);
    if (st) return st;
    attn_kv_cache *c = attn__alloc(1, sizeof *c, "KV cache");
    if (!c) return ATTN_E_NOMEM;
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    if (!c->cfg.value_dim) c->cfg.value_dim = cfg->head_dim;
    c->row_k = row_bytes(cfg->dtype, cfg->head_dim, &c->nb_k);
    c->row_v = row_bytes(cfg->dtype, c->cfg.value_dim, &c->nb_v);
    const size_t B = (size_t)cfg->batch;
    c->len = attn__alloc(B, sizeof(int64_t), "KV cache lengths");
    c->slot = c->len ? attn__alloc(B, sizeof(int64_t), "KV cache slots") : NULL;
    c->k = c->slot ? attn__alloc(part[0], 1, "KV cache keys") : NULL;
    c->v = c->k ? attn__alloc(part[1], 1, "KV cache values") : NULL;
    int ok = c->v != NULL;
    if (ok && cfg->dtype == ATTN_Q8) {
        c->ks = attn__alloc(part[2], 1, "KV cache key scales");
        c->vs = c->ks ? attn__alloc(part[3], 1, "KV cache value scales") : NULL;
        ok = c->vs != NULL;
    }
    if (!ok) {
        attn_kv_cache_free(c);
        return ATTN_E_NOMEM;
    }
    for (size_t b = 0; b < B; b++) {
        c->len[b] = 0;
        c->slot[b] = (int64_t)b;
    }
    *out = c;
    return ATTN_OK;
}

attn_status attn_kv_cache_config_get(const attn_kv_cache *c,
                                     attn_kv_cache_config *cfg) {
    if (!c || !cfg)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", c ? "cfg" : "cache");
    *cfg = c->cfg;
    return ATTN_OK;
}

attn_status attn_kv_cache_lengths(const attn_kv_cache *c, int64_t *lengths) {
    if (!c || !lengths)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          c ? "lengths" : "cache");
    memcpy(lengths, c->len, (size_t)c->cfg.batch * sizeof(int64_t));
    return ATTN_OK;
}

/* ---- stored rows --------------------------------------------------------- */

void attn__kv_row_to_f32(attn_dtype dtype, const void *row, const float *scales,
                         int64_t n, float *dst) {
    if (dtype != ATTN_Q8) {
        attn__load_f32(row, dtype, n, dst);
        return;
    }
    const int8_t *q = row;
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)q[i] * scales[i / ATTN_Q8_BLOCK];
}

/* One row of n f32 values into the storage dtype. The caller has checked
 * that every value is finite there (store_check). */
static void store_row(attn_dtype dtype, const float *x, int64_t n, void *row,
                      float *scales) {
    switch (dtype) {
    case ATTN_F32: memcpy(row, x, (size_t)n * sizeof(float)); return;
    case ATTN_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)row)[i] = attn_f32_to_f16(x[i]);
        return;
    case ATTN_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)row)[i] = attn_f32_to_bf16(x[i]);
        return;
    default: break;
    }
    /* q8: s = max|x| / 127 per block, q = round(x / s) (ties away from 0) */
    int8_t *q = row;
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_Q8_BLOCK) {
        int64_t e = b0 + ATTN_Q8_BLOCK < n ? b0 + ATTN_Q8_BLOCK : n;
        float amax = 0.0f;
        for (int64_t i = b0; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        float s = amax / 127.0f;
        scales[b0 / ATTN_Q8_BLOCK] = s;
        for (int64_t i = b0; i < e; i++) {
            float r = s > 0.0f ? roundf(x[i] / s) : 0.0f;
            q[i] = (int8_t)(r > 127.0f ? 127 : (r < -127.0f ? -127 : r));
        }
    }
}

/* Index of the first value of x[0..n) that is not finite in dtype (the
 * input or its rounding to f16/bf16), or -1. */
static int64_t store_check(attn_dtype dtype, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return i;
        if (dtype == ATTN_F16 && (attn_f32_to_f16(x[i]) & 0x7c00u) == 0x7c00u)
            return i;
        if (dtype == ATTN_BF16 &&
            isinf(attn_bf16_to_f32(attn_f32_to_bf16(x[i]))))
            return i;
    }
    return -1;
}

/* Row (b, h, t) of an input view as f32. */
static void load_row(const attn_tensor *t, int64_t b, int64_t h, int64_t l,
                     float *dst) {
    const int64_t n = t->shape[3];
    if (t->stride[3] == 1) {
        attn__load_f32(attn__elem_ptr(t, attn__off(t, b, h, l, 0)), t->dtype, n,
                       dst);
        return;
    }
    for (int64_t d = 0; d < n; d++)
        dst[d] = (float)attn_tensor_get(t, b, h, l, d);
}

static attn_status check_input(const attn_kv_cache *c, const attn_tensor *t,
                               const char *name, int64_t dim) {
    attn_status st = attn_tensor_check(t, name);
    if (st) return st;
    if (!attn__is_float_dtype(t->dtype))
        return attn__fail(ATTN_E_DTYPE,
                          "%s has dtype %s; f32, f16, bf16 or "
                          "f64 is needed",
                          name, attn_dtype_name(t->dtype));
    for (int a = 0; a < 4; a++)
        if (t->stride[a] == 0 && t->shape[a] > 1)
            return attn__fail(ATTN_E_SHAPE,
                              "%s may not broadcast (stride 0 "
                              "on axis %d)",
                              name, a);
    if (t->shape[0] != c->cfg.batch || t->shape[1] != c->cfg.kv_heads ||
        t->shape[3] != dim)
        return attn__fail(ATTN_E_SHAPE,
                          "%s has shape (%lld, %lld, %lld, "
                          "%lld) but the cache holds (%lld, %lld, T, %lld)",
                          name, (long long)t->shape[0], (long long)t->shape[1],
                          (long long)t->shape[2], (long long)t->shape[3],
                          (long long)c->cfg.batch, (long long)c->cfg.kv_heads,
                          (long long)dim);
    return ATTN_OK;
}

/* Checks (write = 0) or stores (write = 1) the appended rows of one of K
 * and V. buf holds one row. */
static attn_status append_pass(attn_kv_cache *c, const attn_tensor *t,
                               const char *name, const int64_t *counts,
                               int write, float *buf) {
    const int64_t B = c->cfg.batch, Hkv = c->cfg.kv_heads, n = t->shape[3];
    const int is_k = name[0] == 'k';
    for (int64_t b = 0; b < B; b++) {
        const int64_t cnt = counts ? counts[b] : t->shape[2];
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t l = 0; l < cnt; l++) {
                load_row(t, b, h, l, buf);
                if (is_k && c->rope_freq) /* keys stored rotated */
                    attn__rope_row_f32(&c->rope, c->rope_freq, n, c->len[b] + l,
                                       buf);
                if (!write) {
                    int64_t bad = store_check(c->cfg.dtype, buf, n);
                    if (bad >= 0)
                        return attn__fail(ATTN_E_NONFINITE,
                                          "%s[%lld, %lld, %lld, %lld] = %g is "
                                          "not finite in the %s cache",
                                          name, (long long)b, (long long)h,
                                          (long long)l, (long long)bad,
                                          (double)buf[bad],
                                          attn_dtype_name(c->cfg.dtype));
                    continue;
                }
                int64_t pos = c->len[b] + l;
                void *row = (void *)(is_k ? attn__kv_krow(c, b, h, pos)
                                          : attn__kv_vrow(c, b, h, pos));
                float *sc = (float *)(is_k ? attn__kv_kscale(c, b, h, pos)
                                           : attn__kv_vscale(c, b, h, pos));
                store_row(c->cfg.dtype, buf, n, row, sc);
            }
    }
    return ATTN_OK;
}

/* The appended ids of every entry do not decrease, from the entry's last
 * stored id on. */
static attn_status check_docs(const attn_kv_cache *c, const int64_t *docs,
                              const int64_t *counts, int64_t T) {
    for (int64_t b = 0; b < c->cfg.batch; b++) {
        const int64_t cnt = counts ? counts[b] : T, *d = docs + b * T;
        const int64_t n = c->len[b];
        /* positions cached before the first ids are document 0 */
        const int64_t last =
            n > 0 && c->doc ? attn__kv_doc_row(c, b)[n - 1] : 0;
        if (cnt > 0 && n > 0 && d[0] < last)
            return attn__fail(ATTN_E_INVALID,
                              "doc_ids[%lld, 0] = %lld is below the id %lld "
                              "of entry %lld's last cached position %lld (ids "
                              "must not decrease along an entry: documents "
                              "are packed in order)",
                              (long long)b, (long long)d[0], (long long)last,
                              (long long)b, (long long)(n - 1));
        for (int64_t t = 1; t < cnt; t++)
            if (d[t] < d[t - 1])
                return attn__fail(ATTN_E_INVALID,
                                  "doc_ids decreases in entry %lld: position "
                                  "%lld has id %lld after %lld (ids must not "
                                  "decrease: documents are packed in order)",
                                  (long long)b, (long long)t, (long long)d[t],
                                  (long long)d[t - 1]);
    }
    return ATTN_OK;
}

/* Writes the ids of the appended rows (docs NULL: each entry's last id, 0
 * for an empty entry: the current document goes on). */
static void store_docs(attn_kv_cache *c, const int64_t *docs,
                       const int64_t *counts, int64_t T) {
    for (int64_t b = 0; b < c->cfg.batch; b++) {
        const int64_t cnt = counts ? counts[b] : T, n = c->len[b];
        int64_t *row = c->doc + (size_t)(c->slot[b] * c->cfg.capacity);
        const int64_t last = n > 0 ? row[n - 1] : 0;
        for (int64_t t = 0; t < cnt; t++)
            row[n + t] = docs ? docs[b * T + t] : last;
    }
}

static attn_status append(attn_kv_cache *c, const attn_tensor *k,
                          const attn_tensor *v, const int64_t *counts,
                          const int64_t *docs);

attn_status attn_kv_cache_append(attn_kv_cache *c, const attn_tensor *k,
                                 const attn_tensor *v, const int64_t *counts) {
    return append(c, k, v, counts, NULL);
}

attn_status attn_kv_cache_append_docs(attn_kv_cache *c, const attn_tensor *k,
                                      const attn_tensor *v,
                                      const int64_t *counts,
                                      const int64_t *doc_ids) {
    if (c && !doc_ids)
        return attn__fail(ATTN_E_INVALID, "doc_ids is NULL (use "
                                          "attn_kv_cache_append without ids)");
    return append(c, k, v, counts, doc_ids);
}

static attn_status append(attn_kv_cache *c, const attn_tensor *k,
                          const attn_tensor *v, const int64_t *counts,
                          const int64_t *docs) {
    if (!c) return attn__fail(ATTN_E_INVALID, "cache is NULL");
    attn_status st;
    if ((st = check_input(c, k, "k", c->cfg.head_dim)) ||
        (st = check_input(c, v, "v", c->cfg.value_dim)))
        return st;
    if (k->dtype != v->dtype)
        return attn__fail(ATTN_E_DTYPE,
                          "k is %s but v is %s: they must share "
                          "a dtype",
                          attn_dtype_name(k->dtype), attn_dtype_name(v->dtype));
    const int64_t T = k->shape[2];
    if (v->shape[2] != T)
        return attn__fail(ATTN_E_SHAPE,
                          "k has %lld new positions but v has "
                          "%lld",
                          (long long)T, (long long)v->shape[2]);
    for (int64_t b = 0; b < c->cfg.batch; b++) {
        int64_t cnt = counts ? counts[b] : T;
        if (cnt < 0 || cnt > T)
            return attn__fail(ATTN_E_SHAPE,
                              "counts[%lld] = %lld is outside "
                              "[0, %lld] (the positions k and v hold)",
                              (long long)b, (long long)cnt, (long long)T);
        if (cnt > c->cfg.capacity - c->len[b])
            return attn__fail(ATTN_E_SHAPE,
                              "cache overflow: entry %lld holds "
                              "%lld of %lld positions and cannot take %lld "
                              "more",
                              (long long)b, (long long)c->len[b],
                              (long long)c->cfg.capacity, (long long)cnt);
    }
    if (docs && (st = check_docs(c, docs, counts, T))) return st;
    int64_t dmax =
        c->cfg.head_dim > c->cfg.value_dim ? c->cfg.head_dim : c->cfg.value_dim;
    float *buf = attn__alloc((size_t)dmax, sizeof(float), "append row");
    if (!buf) return ATTN_E_NOMEM;
    if (docs && !c->doc) {
        /* the first ids: every position cached so far is document 0 */
        c->doc = attn__alloc((size_t)(c->cfg.batch * c->cfg.capacity),
                             sizeof(int64_t), "KV cache document ids");
        if (!c->doc) {
            attn__free(buf);
            return ATTN_E_NOMEM;
        }
        memset(c->doc, 0,
               (size_t)(c->cfg.batch * c->cfg.capacity) * sizeof(int64_t));
    }
    if (!(st = append_pass(c, k, "k", counts, 0, buf)) &&
        !(st = append_pass(c, v, "v", counts, 0, buf))) {
        append_pass(c, k, "k", counts, 1, buf);
        append_pass(c, v, "v", counts, 1, buf);
        if (c->doc) store_docs(c, docs, counts, T);
        for (int64_t b = 0; b < c->cfg.batch; b++)
            c->len[b] += counts ? counts[b] : T;
    }
    attn__free(buf);
    return st;
}

attn_status attn_kv_cache_set_rope(attn_kv_cache *c, const attn_rope *rope) {
    if (!c) return attn__fail(ATTN_E_INVALID, "cache is NULL");
    for (int64_t b = 0; b < c->cfg.batch; b++)
        if (c->len[b] != 0)
            return attn__fail(ATTN_E_INVALID,
                              "set_rope: entry %lld already holds %lld "
                              "positions (set the rope on an empty cache)",
                              (long long)b, (long long)c->len[b]);
    if (!rope) {
        attn__free(c->rope_freq);
        c->rope_freq = NULL;
        return ATTN_OK;
    }
    attn_status st = attn_rope_check(rope, c->cfg.head_dim);
    if (st) return st;
    int64_t n = attn__rope_dim(rope, c->cfg.head_dim) / 2;
    double *f = attn__alloc((size_t)(n > 0 ? n : 1), sizeof(double),
                            "KV cache rope frequencies");
    if (!f) return ATTN_E_NOMEM;
    attn__rope_freqs(rope, c->cfg.head_dim, f);
    attn__free(c->rope_freq);
    c->rope_freq = f;
    c->rope = *rope;
    return ATTN_OK;
}

attn_status attn_kv_cache_get_rope(const attn_kv_cache *c, attn_rope *rope,
                                   int *has_rope) {
    if (!c || !rope || !has_rope)
        return attn__fail(ATTN_E_INVALID, "cache, rope or has_rope is NULL");
    *has_rope = c->rope_freq != NULL;
    if (*has_rope)
        *rope = c->rope;
    else
        attn_rope_init(rope);
    return ATTN_OK;
}

attn_status attn_kv_cache_truncate(attn_kv_cache *c, const int64_t *lengths) {
    if (!c || !lengths)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          c ? "lengths" : "cache");
    for (int64_t b = 0; b < c->cfg.batch; b++)
        if (lengths[b] < 0 || lengths[b] > c->len[b])
            return attn__fail(ATTN_E_SHAPE,
                              "truncate: lengths[%lld] = %lld is "
                              "outside [0, %lld] (entry %lld's length; "
                              "truncate cannot grow an entry)",
                              (long long)b, (long long)lengths[b],
                              (long long)c->len[b], (long long)b);
    memcpy(c->len, lengths, (size_t)c->cfg.batch * sizeof(int64_t));
    return ATTN_OK;
}

attn_status attn_kv_cache_clear(attn_kv_cache *c) {
    if (!c) return attn__fail(ATTN_E_INVALID, "cache is NULL");
    memset(c->len, 0, (size_t)c->cfg.batch * sizeof(int64_t));
    return ATTN_OK;
}

/* Copies the first n positions of every head of slot from into slot to. */
static void copy_slot(attn_kv_cache *c, int64_t from, int64_t to, int64_t n) {
    const int64_t Hkv = c->cfg.kv_heads, cap = c->cfg.capacity;
    for (int64_t h = 0; h < Hkv; h++) {
        size_t rf = (size_t)((from * Hkv + h) * cap),
               rt = (size_t)((to * Hkv + h) * cap);
        memcpy(c->k + rt * c->row_k, c->k + rf * c->row_k,
               (size_t)n * c->row_k);
        memcpy(c->v + rt * c->row_v, c->v + rf * c->row_v,
               (size_t)n * c->row_v);
        if (c->ks) {
            memcpy(c->ks + rt * (size_t)c->nb_k, c->ks + rf * (size_t)c->nb_k,
                   (size_t)n * (size_t)c->nb_k * sizeof(float));
            memcpy(c->vs + rt * (size_t)c->nb_v, c->vs + rf * (size_t)c->nb_v,
                   (size_t)n * (size_t)c->nb_v * sizeof(float));
        }
    }
    if (c->doc)
        memcpy(c->doc + (size_t)(to * cap), c->doc + (size_t)(from * cap),
               (size_t)n * sizeof(int64_t));
}

attn_status attn_kv_cache_reorder(attn_kv_cache *c, const int64_t *index) {
    if (!c || !index)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", c ? "index" : "cache");
    const int64_t B = c->cfg.batch;
    for (int64_t b = 0; b < B; b++)
        if (index[b] < 0 || index[b] >= B)
            return attn__fail(ATTN_E_SHAPE,
                              "reorder: index[%lld] = %lld is "
                              "outside [0, %lld)",
                              (long long)b, (long long)index[b], (long long)B);
    /* used[e]: entry e already handed its slot to a new entry; free slots
     * are those of entries nobody chose (as many as the repeated picks) */
    int64_t *tmp =
        attn__alloc((size_t)(4 * B), sizeof(int64_t), "reorder table");
    if (!tmp) return ATTN_E_NOMEM;
    int64_t *used = tmp, *nslot = tmp + B, *nlen = tmp + 2 * B,
            *freel = tmp + 3 * B;
    memset(used, 0, (size_t)B * sizeof(int64_t));
    for (int64_t b = 0; b < B; b++) used[index[b]]++;
    int64_t nfree = 0;
    for (int64_t e = 0; e < B; e++)
        if (!used[e]) freel[nfree++] = c->slot[e];
    memset(used, 0, (size_t)B * sizeof(int64_t));
    for (int64_t b = 0; b < B; b++) {
        int64_t e = index[b];
        nlen[b] = c->len[e];
        if (!used[e]) {
            used[e] = 1;
            nslot[b] = c->slot[e];
        } else { /* a second child of e: a copy into a slot nobody reads */
            ATTN_ASSERT(nfree > 0);
            nslot[b] = freel[--nfree];
            copy_slot(c, c->slot[e], nslot[b], c->len[e]);
        }
    }
    memcpy(c->slot, nslot, (size_t)B * sizeof(int64_t));
    memcpy(c->len, nlen, (size_t)B * sizeof(int64_t));
    attn__free(tmp);
    return ATTN_OK;
}

/* ---- read-back ------------------------------------------------------------ */

static attn_status check_read(const attn_kv_cache *c, const attn_tensor *t,
                              const char *name, int64_t dim) {
    attn_status st = attn_tensor_check(t, name);
    if (st) return st;
    if (!attn__is_float_dtype(t->dtype))
        return attn__fail(ATTN_E_DTYPE,
                          "%s has dtype %s; f32, f64, f16 or "
                          "bf16 is needed",
                          name, attn_dtype_name(t->dtype));
    if (t->shape[0] != 1 || t->shape[1] != c->cfg.kv_heads ||
        t->shape[3] != dim)
        return attn__fail(ATTN_E_SHAPE,
                          "%s has shape (%lld, %lld, %lld, %lld) "
                          "but (1, %lld, n, %lld) is needed",
                          name, (long long)t->shape[0], (long long)t->shape[1],
                          (long long)t->shape[2], (long long)t->shape[3],
                          (long long)c->cfg.kv_heads, (long long)dim);
    for (int a = 1; a < 4; a++)
        if (t->stride[a] == 0 && t->shape[a] > 1)
            return attn__fail(ATTN_E_SHAPE,
                              "%s has stride 0 on axis %d: an "
                              "output cannot broadcast",
                              name, a);
    return ATTN_OK;
}

static void store_elem(attn_tensor *t, int64_t off, float x) {
    switch (t->dtype) {
    case ATTN_F32: ((float *)t->data)[off] = x; return;
    case ATTN_F64: ((double *)t->data)[off] = x; return;
    case ATTN_F16: ((uint16_t *)t->data)[off] = attn_f32_to_f16(x); return;
    default: ((uint16_t *)t->data)[off] = attn_f32_to_bf16(x); return;
    }
}

attn_status attn_kv_cache_read(const attn_kv_cache *c, int64_t b, int64_t start,
                               attn_tensor *k, attn_tensor *v) {
    if (!c) return attn__fail(ATTN_E_INVALID, "cache is NULL");
    if (b < 0 || b >= c->cfg.batch)
        return attn__fail(ATTN_E_SHAPE, "read: entry %lld is outside [0, %lld)",
                          (long long)b, (long long)c->cfg.batch);
    attn_status st;
    if ((k && (st = check_read(c, k, "k", c->cfg.head_dim))) ||
        (v && (st = check_read(c, v, "v", c->cfg.value_dim))))
        return st;
    for (int w = 0; w < 2; w++) {
        attn_tensor *t = w ? v : k;
        if (!t) continue;
        int64_t n = t->shape[2];
        if (start < 0 || start > c->len[b] || n > c->len[b] - start)
            return attn__fail(ATTN_E_SHAPE,
                              "read: positions %lld .. %lld of "
                              "entry %lld are outside its length %lld",
                              (long long)start, (long long)(start + n - 1),
                              (long long)b, (long long)c->len[b]);
    }
    int64_t dmax =
        c->cfg.head_dim > c->cfg.value_dim ? c->cfg.head_dim : c->cfg.value_dim;
    float *buf = attn__alloc((size_t)dmax, sizeof(float), "read row");
    if (!buf) return ATTN_E_NOMEM;
    for (int w = 0; w < 2; w++) {
        attn_tensor *t = w ? v : k;
        if (!t) continue;
        for (int64_t h = 0; h < c->cfg.kv_heads; h++)
            for (int64_t l = 0; l < t->shape[2]; l++) {
                int64_t pos = start + l;
                attn__kv_row_to_f32(c->cfg.dtype,
                                    w ? attn__kv_vrow(c, b, h, pos)
                                      : attn__kv_krow(c, b, h, pos),
                                    w ? attn__kv_vscale(c, b, h, pos)
                                      : attn__kv_kscale(c, b, h, pos),
                                    t->shape[3], buf);
                for (int64_t d = 0; d < t->shape[3]; d++)
                    store_elem(t, attn__off(t, 0, h, l, d), buf[d]);
            }
    }
    attn__free(buf);
    return ATTN_OK;
}

attn_status attn_kv_cache_doc_ids(const attn_kv_cache *c, int64_t b,
                                  int64_t start, int64_t n, int64_t *ids) {
    if (!c || !ids)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", c ? "ids" : "cache");
    if (b < 0 || b >= c->cfg.batch)
        return attn__fail(ATTN_E_SHAPE,
                          "doc ids: entry %lld is outside [0, %lld)",
                          (long long)b, (long long)c->cfg.batch);
    if (start < 0 || n < 0 || start > c->len[b] || n > c->len[b] - start)
        return attn__fail(ATTN_E_SHAPE,
                          "doc ids: positions %lld .. %lld of entry %lld are "
                          "outside its length %lld",
                          (long long)start, (long long)(start + n - 1),
                          (long long)b, (long long)c->len[b]);
    if (!c->doc)
        return attn__fail(ATTN_E_INVALID,
                          "doc ids: the cache holds no document ids (append "
                          "with attn_kv_cache_append_docs)");
    memcpy(ids, attn__kv_doc_row(c, b) + start, (size_t)n * sizeof(int64_t));
    return ATTN_OK;
}
