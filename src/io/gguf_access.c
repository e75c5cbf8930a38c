/* The GGUF reader's look-ups (attn_gguf.h): metadata by key and array
 * element, tensors by name, and their conversion to f32 (the format's
 * block formulas; see gguf.c for why the values are the same bits as the
 * reference dequantizer's). Everything here reads what gguf.c checked. */
#include "gguf_internal.h"

#include <math.h>
#include <string.h>

/* ---- metadata access ------------------------------------------------- */

int attn_gguf_version(const attn_gguf *g) { return g ? g->version : 0; }

int64_t attn_gguf_meta_count(const attn_gguf *g) { return g ? g->nkv : 0; }

static void fill_value(const kv_entry *e, attn_gguf_value *v) {
    memset(v, 0, sizeof *v);
    v->key = e->key;
    v->type = e->type;
    v->i = e->i;
    v->u = e->u;
    v->f = e->f;
    v->str = e->str;
    v->len = e->len;
    v->elem_type = e->elem;
    v->count = e->count;
}

attn_status attn_gguf_meta_get(const attn_gguf *g, int64_t i,
                               attn_gguf_value *v) {
    if (!g || !v) return attn__fail(ATTN_E_INVALID, "g or v is NULL");
    if (i < 0 || i >= g->nkv)
        return attn__fail(ATTN_E_INVALID, "metadata entry %lld of %lld",
                          (long long)i, (long long)g->nkv);
    fill_value(&g->kv[i], v);
    return ATTN_OK;
}

attn_status attn_gguf_meta_find(const attn_gguf *g, const char *key,
                                attn_gguf_value *v) {
    if (!g || !key || !v)
        return attn__fail(ATTN_E_INVALID, "g, key or v is NULL");
    int64_t i =
        attn__gguf_find(g->kv, sizeof(kv_entry), g->kv_by_key, g->nkv, key);
    if (i < 0)
        return attn__fail(ATTN_E_INVALID, "%s: no metadata '%s'", g->label,
                          key);
    fill_value(&g->kv[i], v);
    return ATTN_OK;
}

static attn_status wrong_type(const attn_gguf *g, const char *key,
                              attn_gguf_type t, const char *want) {
    return attn__fail(ATTN_E_FORMAT, "%s: metadata '%s' is %s, not %s",
                      g->label, key, attn__gguf_value_name(t), want);
}

attn_status attn_gguf_get_string(const attn_gguf *g, const char *key,
                                 const char **str, size_t *len) {
    attn_gguf_value v;
    attn_status st = attn_gguf_meta_find(g, key, &v);
    if (st) return st;
    if (v.type != ATTN_GGUF_STRING)
        return wrong_type(g, key, v.type, "a string");
    *str = v.str;
    *len = v.len;
    return ATTN_OK;
}

static int is_int_type(attn_gguf_type t) {
    return t <= ATTN_GGUF_INT32 || t == ATTN_GGUF_BOOL ||
           t == ATTN_GGUF_UINT64 || t == ATTN_GGUF_INT64;
}

attn_status attn_gguf_get_int(const attn_gguf *g, const char *key, int64_t *x) {
    attn_gguf_value v;
    attn_status st = attn_gguf_meta_find(g, key, &v);
    if (st) return st;
    if (!is_int_type(v.type) ||
        (v.type == ATTN_GGUF_UINT64 && v.u > (uint64_t)INT64_MAX))
        return wrong_type(g, key, v.type, "an integer");
    *x = v.i;
    return ATTN_OK;
}

attn_status attn_gguf_get_float(const attn_gguf *g, const char *key,
                                double *x) {
    attn_gguf_value v;
    attn_status st = attn_gguf_meta_find(g, key, &v);
    if (st) return st;
    if (v.type != ATTN_GGUF_FLOAT32 && v.type != ATTN_GGUF_FLOAT64)
        return wrong_type(g, key, v.type, "a float");
    *x = v.f;
    return ATTN_OK;
}

/* The entry v describes (by its key), checked to be an array with element
 * i of a type accepted by ok. */
static attn_status array_elem(const attn_gguf *g, const attn_gguf_value *v,
                              uint64_t i, const kv_entry **e) {
    if (!g || !v || !v->key)
        return attn__fail(ATTN_E_INVALID, "g or v is NULL");
    int64_t k =
        attn__gguf_find(g->kv, sizeof(kv_entry), g->kv_by_key, g->nkv, v->key);
    if (k < 0 || g->kv[k].type != ATTN_GGUF_ARRAY)
        return attn__fail(ATTN_E_INVALID,
                          "%s: '%s' is not an array of this "
                          "file",
                          g->label, v->key);
    if (i >= g->kv[k].count)
        return attn__fail(ATTN_E_INVALID,
                          "%s: element %llu of '%s', which has "
                          "%llu",
                          g->label, (unsigned long long)i, v->key,
                          (unsigned long long)g->kv[k].count);
    *e = &g->kv[k];
    return ATTN_OK;
}

attn_status attn_gguf_array_string(const attn_gguf *g, const attn_gguf_value *v,
                                   uint64_t i, const char **str, size_t *len) {
    const kv_entry *e = NULL;
    attn_status st = array_elem(g, v, i, &e);
    if (st) return st;
    if (e->elem != ATTN_GGUF_STRING)
        return wrong_type(g, e->key, e->elem, "an array of strings");
    const unsigned char *b = g->base + e->soff[i];
    *len = (size_t)attn__le64(b);
    *str = (const char *)b + 8;
    return ATTN_OK;
}

attn_status attn_gguf_array_int(const attn_gguf *g, const attn_gguf_value *v,
                                uint64_t i, int64_t *x) {
    const kv_entry *e = NULL;
    attn_status st = array_elem(g, v, i, &e);
    if (st) return st;
    if (!is_int_type(e->elem))
        return wrong_type(g, e->key, e->elem, "an array of integers");
    size_t es = attn__gguf_scalar_size(e->elem);
    uint64_t u;
    double f;
    attn__gguf_load_scalar(g->base + e->at + es * (size_t)i, e->elem, x, &u,
                           &f);
    return ATTN_OK;
}

attn_status attn_gguf_array_float(const attn_gguf *g, const attn_gguf_value *v,
                                  uint64_t i, double *x) {
    const kv_entry *e = NULL;
    attn_status st = array_elem(g, v, i, &e);
    if (st) return st;
    if (e->elem != ATTN_GGUF_FLOAT32 && e->elem != ATTN_GGUF_FLOAT64)
        return wrong_type(g, e->key, e->elem, "an array of floats");
    *x = attn__gguf_load_float(
        g->base + e->at + attn__gguf_scalar_size(e->elem) * (size_t)i, e->elem);
    return ATTN_OK;
}

/* ---- tensor access and dequantization --------------------------------- */

int64_t attn_gguf_tensor_count(const attn_gguf *g) { return g ? g->nt : 0; }

static void fill_tensor(const attn_gguf *g, const tensor_entry *e,
                        attn_gguf_tensor *t) {
    memset(t, 0, sizeof *t);
    t->name = e->name;
    t->type = e->type;
    t->type_name = attn__ggml_type_of(e->type)->name;
    t->ndim = e->ndim;
    for (int d = 0; d < e->ndim; d++) t->shape[d] = e->shape[d];
    t->numel = e->numel;
    t->data = g->data + e->offset;
    t->nbytes = (size_t)e->nbytes;
}

attn_status attn_gguf_tensor_get(const attn_gguf *g, int64_t i,
                                 attn_gguf_tensor *t) {
    if (!g || !t) return attn__fail(ATTN_E_INVALID, "g or t is NULL");
    if (i < 0 || i >= g->nt)
        return attn__fail(ATTN_E_INVALID, "tensor %lld of %lld", (long long)i,
                          (long long)g->nt);
    fill_tensor(g, &g->t[i], t);
    return ATTN_OK;
}

attn_status attn_gguf_find_tensor(const attn_gguf *g, const char *name,
                                  attn_gguf_tensor *t) {
    if (!g || !name || !t)
        return attn__fail(ATTN_E_INVALID, "g, name or t is NULL");
    int64_t i =
        attn__gguf_find(g->t, sizeof(tensor_entry), g->t_by_name, g->nt, name);
    if (i < 0)
        return attn__fail(ATTN_E_INVALID, "%s: no tensor '%s'", g->label, name);
    fill_tensor(g, &g->t[i], t);
    return ATTN_OK;
}

static float f16_at(const unsigned char *b) {
    float f;
    uint16_t h = (uint16_t)(b[0] | b[1] << 8);
    attn__load_f32(&h, ATTN_F16, 1, &f);
    return f;
}

/* nblocks blocks (or values, for F32/F16/BF16) of type at src into dst. */
static void dequant(int type, const unsigned char *src, int64_t nblocks,
                    float *dst) {
    for (int64_t b = 0; b < nblocks; b++) {
        switch (type) {
        case ATTN_GGML_F32: {
            uint32_t u = attn__le32(src + 4 * b);
            memcpy(&dst[b], &u, 4);
            break;
        }
        case ATTN_GGML_F16: dst[b] = f16_at(src + 2 * b); break;
        case ATTN_GGML_BF16: {
            uint32_t u = (uint32_t)(src[2 * b] | src[2 * b + 1] << 8) << 16;
            memcpy(&dst[b], &u, 4);
            break;
        }
        case ATTN_GGML_Q8_0: {
            const unsigned char *p = src + 34 * b;
            const float d = f16_at(p);
            for (int j = 0; j < 32; j++)
                dst[32 * b + j] = (float)(int8_t)p[2 + j] * d;
            break;
        }
        case ATTN_GGML_Q4_0: {
            const unsigned char *p = src + 18 * b;
            const float d = f16_at(p);
            for (int j = 0; j < 16; j++) {
                dst[32 * b + j] = d * (float)((int)(p[2 + j] & 15) - 8);
                dst[32 * b + 16 + j] = d * (float)((int)(p[2 + j] >> 4) - 8);
            }
            break;
        }
        default: { /* Q4_1 */
            const unsigned char *p = src + 20 * b;
            const float d = f16_at(p), m = f16_at(p + 2);
            for (int j = 0; j < 16; j++) {
                float lo = d * (float)(p[4 + j] & 15);
                float hi = d * (float)(p[4 + j] >> 4);
                dst[32 * b + j] = lo + m;
                dst[32 * b + 16 + j] = hi + m;
            }
            break;
        }
        }
    }
}

static int readable(int type) {
    return type == ATTN_GGML_F32 || type == ATTN_GGML_F16 ||
           type == ATTN_GGML_BF16 || type == ATTN_GGML_Q8_0 ||
           type == ATTN_GGML_Q4_0 || type == ATTN_GGML_Q4_1;
}

static attn_status check_finite(const attn_gguf_tensor *t, const float *x,
                                int64_t n, int64_t first) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return attn__fail(ATTN_E_NONFINITE,
                              "tensor '%s' (%s): value %lld "
                              "is %s",
                              t->name, t->type_name, (long long)(first + i),
                              isnan(x[i]) ? "NaN" : "inf");
    return ATTN_OK;
}

attn_status attn_gguf_tensor_rows_f32(const attn_gguf_tensor *t, int64_t r0,
                                      int64_t nrows, float *dst) {
    if (!t || !t->data || (!dst && nrows > 0))
        return attn__fail(ATTN_E_INVALID, "t or dst is NULL");
    if (!readable(t->type))
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "tensor '%s' has type %s; attn "
                          "reads F32, F16, BF16, Q8_0, Q4_0 and Q4_1",
                          t->name, t->type_name ? t->type_name : "?");
    const int64_t cols = t->shape[t->ndim - 1], rows = t->numel / cols;
    if (r0 < 0 || nrows < 0 || r0 > rows || nrows > rows - r0)
        return attn__fail(ATTN_E_SHAPE, "tensor '%s': rows %lld..%lld of %lld",
                          t->name, (long long)r0, (long long)(r0 + nrows),
                          (long long)rows);
    const attn__ggml_type *ty = attn__ggml_type_of(t->type);
    const int64_t blk = ty->block, bytes = ty->bytes;
    const int64_t per_row = cols / blk;
    dequant(t->type, (const unsigned char *)t->data + r0 * per_row * bytes,
            nrows * per_row, dst);
    return check_finite(t, dst, nrows * cols, r0 * cols);
}

attn_status attn_gguf_tensor_to_f32(const attn_gguf_tensor *t, float *dst,
                                    int64_t n) {
    if (!t) return attn__fail(ATTN_E_INVALID, "t is NULL");
    if (n != t->numel)
        return attn__fail(ATTN_E_SHAPE, "tensor '%s' has %lld values, not %lld",
                          t->name, (long long)t->numel, (long long)n);
    return attn_gguf_tensor_rows_f32(t, 0, t->numel / t->shape[t->ndim - 1],
                                     dst);
}
