/* GGUF files (attn_gguf.h): llama.cpp's one-file models.
 *
 * The reader walks the file once with a cursor that never passes the end:
 * every count is checked against the bytes left before anything is
 * allocated for it (a metadata entry takes at least 13 bytes, a tensor
 * description 32, an array element 1 to 8), every string and array
 * against the end, every tensor's data against the data section, the
 * alignment and the other tensors. What it keeps: one record per entry and
 * per tensor, copies of the keys and names, and for arrays of strings the
 * offset of each element (8 bytes for an element that takes at least 8 in
 * the file), so memory stays in proportion to the file. Values point into
 * the mapping.
 *
 * Dequantization follows the format's block layouts: Q8_0 is an f16 scale
 * d and 32 int8 q (x = d q); Q4_0 an f16 d and 16 bytes of 4-bit q, the
 * low nibbles the block's first 16 values and the high nibbles the last 16
 * (x = d (q - 8)); Q4_1 adds an f16 minimum m (x = d q + m). Each product
 * and sum is rounded to f32, as the reference dequantizer computes them,
 * and this file is compiled without FMA contraction (baseline x86-64), so
 * the values are the same bits. */
#include "gguf_internal.h"
#include "binfile.h"
#include "json.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GGUF_MAX_NAME 64   /* the format's limit on tensor names     */
#define GGUF_MAX_KEY 65535 /* and on keys                            */
#define GGUF_DEFAULT_ALIGN 32

/* The format's tensor types: name, values per block, bytes per block. */
static const attn__ggml_type ggml_types[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},
    {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},
    {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136},
    {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},
    {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},
};

const attn__ggml_type *attn__ggml_type_of(int id) {
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (ggml_types[i].id == id) return &ggml_types[i];
    return NULL;
}

static const char *const value_names[] = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};

size_t attn__gguf_scalar_size(uint32_t t) {
    switch (t) {
    case ATTN_GGUF_UINT8:
    case ATTN_GGUF_INT8:
    case ATTN_GGUF_BOOL: return 1;
    case ATTN_GGUF_UINT16:
    case ATTN_GGUF_INT16: return 2;
    case ATTN_GGUF_UINT32:
    case ATTN_GGUF_INT32:
    case ATTN_GGUF_FLOAT32: return 4;
    case ATTN_GGUF_UINT64:
    case ATTN_GGUF_INT64:
    case ATTN_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

const char *attn__gguf_value_name(attn_gguf_type t) {
    return (unsigned)t < sizeof value_names / sizeof value_names[0]
               ? value_names[t]
               : "?";
}

/* ---- the cursor ------------------------------------------------------ */

typedef struct {
    const unsigned char *p;
    size_t size, at;
    const char *label;
} cursor;

static attn_status short_file(const cursor *c, const char *what) {
    return attn__fail(ATTN_E_FORMAT,
                      "%s: %s runs past the end of the file (at byte %zu of "
                      "%zu)",
                      c->label, what, c->at, c->size);
}

static attn_status take(cursor *c, size_t n, const char *what,
                        const unsigned char **out) {
    if (n > c->size - c->at) return short_file(c, what);
    *out = c->p + c->at;
    c->at += n;
    return ATTN_OK;
}

static attn_status get_u64(cursor *c, const char *what, uint64_t *x) {
    const unsigned char *b = NULL;
    attn_status st = take(c, 8, what, &b);
    if (!st) *x = attn__le64(b);
    return st;
}

static attn_status get_u32(cursor *c, const char *what, uint32_t *x) {
    const unsigned char *b = NULL;
    attn_status st = take(c, 4, what, &b);
    if (!st) *x = attn__le32(b);
    return st;
}

/* A string: u64 length, bytes. */
static attn_status get_str(cursor *c, const char *what, const char **s,
                           size_t *len) {
    uint64_t n;
    attn_status st = get_u64(c, what, &n);
    if (st) return st;
    if (n > c->size - c->at) return short_file(c, what);
    *s = (const char *)(c->p + c->at);
    *len = (size_t)n;
    c->at += (size_t)n;
    return ATTN_OK;
}

static char *dup_str(const char *s, size_t n) {
    char *d = attn__alloc(n + 1, 1, "a GGUF name");
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static const char *esc(const char *s, size_t n, char *buf, size_t cap) {
    return attn__escape_bytes(s, n, buf, cap);
}

/* ---- metadata -------------------------------------------------------- */

double attn__gguf_load_float(const unsigned char *b, uint32_t t) {
    if (t == ATTN_GGUF_FLOAT32) {
        uint32_t u = attn__le32(b);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint64_t u = attn__le64(b);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

void attn__gguf_load_scalar(const unsigned char *b, uint32_t t, int64_t *i,
                            uint64_t *u, double *f) {
    switch (t) {
    case ATTN_GGUF_UINT8:
    case ATTN_GGUF_BOOL: *i = b[0]; break;
    case ATTN_GGUF_INT8: *i = (int8_t)b[0]; break;
    case ATTN_GGUF_UINT16: *i = (uint16_t)(b[0] | b[1] << 8); break;
    case ATTN_GGUF_INT16: *i = (int16_t)(uint16_t)(b[0] | b[1] << 8); break;
    case ATTN_GGUF_UINT32: *i = attn__le32(b); break;
    case ATTN_GGUF_INT32: *i = (int32_t)attn__le32(b); break;
    case ATTN_GGUF_UINT64:
        *u = attn__le64(b);
        *i = *u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)*u;
        break;
    case ATTN_GGUF_INT64: *i = (int64_t)attn__le64(b); break;
    default: *f = attn__gguf_load_float(b, t); return;
    }
    if (t != ATTN_GGUF_UINT64) *u = (uint64_t)*i;
    *f = (double)*i;
}

static attn_status bad_kv(const cursor *c, const kv_entry *e,
                          const char *what) {
    char k[96];
    return attn__fail(ATTN_E_FORMAT, "%s: metadata '%s': %s", c->label,
                      esc(e->key, strlen(e->key), k, sizeof k), what);
}

/* One entry's value, after its key. *nsoff counts the string-array
 * elements seen (their offsets are stored in a second pass). */
static attn_status parse_value(cursor *c, kv_entry *e, uint64_t *nsoff,
                               uint64_t *soff) {
    uint32_t t;
    attn_status st = get_u32(c, "a metadata value type", &t);
    if (st) return st;
    if (t > ATTN_GGUF_FLOAT64) {
        char m[64];
        snprintf(m, sizeof m, "unknown value type %u", t);
        return bad_kv(c, e, m);
    }
    e->type = (attn_gguf_type)t;
    if (t == ATTN_GGUF_STRING)
        return get_str(c, "a metadata string", &e->str, &e->len);
    if (t != ATTN_GGUF_ARRAY) {
        const unsigned char *b = NULL;
        if ((st = take(c, attn__gguf_scalar_size(t), "a metadata value", &b)))
            return st;
        if (t == ATTN_GGUF_BOOL && b[0] > 1)
            return bad_kv(c, e, "a bool that is neither 0 nor 1");
        attn__gguf_load_scalar(b, t, &e->i, &e->u, &e->f);
        return ATTN_OK;
    }
    uint32_t et;
    uint64_t n;
    if ((st = get_u32(c, "an array's element type", &et)) ||
        (st = get_u64(c, "an array's length", &n)))
        return st;
    if (et == ATTN_GGUF_ARRAY)
        return bad_kv(c, e, "an array of arrays (not read)");
    if (et > ATTN_GGUF_FLOAT64) {
        char m[64];
        snprintf(m, sizeof m, "an array of unknown type %u", et);
        return bad_kv(c, e, m);
    }
    e->elem = (attn_gguf_type)et;
    e->count = n;
    e->at = c->at;
    const size_t left = c->size - c->at;
    if (et != ATTN_GGUF_STRING) {
        size_t es = attn__gguf_scalar_size(et);
        if (n > left / es) {
            char m[128];
            snprintf(m, sizeof m, "%llu elements of %zu bytes run past the end",
                     (unsigned long long)n, es);
            return bad_kv(c, e, m);
        }
        c->at += (size_t)n * es;
        return ATTN_OK;
    }
    if (n > left / 8) {
        char m[128];
        snprintf(m, sizeof m, "%llu strings cannot fit in the %zu bytes left",
                 (unsigned long long)n, left);
        return bad_kv(c, e, m);
    }
    if (soff) e->soff = soff + *nsoff;
    for (uint64_t k = 0; k < n; k++) {
        const char *s = NULL;
        size_t len = 0;
        if (soff) soff[*nsoff + k] = c->at;
        if ((st = get_str(c, "an array's string", &s, &len))) return st;
    }
    *nsoff += n;
    return ATTN_OK;
}

/* ---- sorting and look-up --------------------------------------------- */

static const char *name_at(const void *base, size_t stride, int64_t i) {
    return *(const char *const *)((const char *)base + stride * (size_t)i);
}

/* Indices 0..n-1 sorted by the name at base + stride * i: qsort over
 * (name, index) pairs, then the indices. */
typedef struct {
    const char *name;
    int64_t i;
} named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static attn_status sort_names(const void *base, size_t stride, int64_t n,
                              const char *label, const char *what,
                              int64_t **out) {
    *out = NULL;
    if (n == 0) return ATTN_OK;
    named *tmp = attn__alloc((size_t)n, sizeof(named), "GGUF names");
    int64_t *idx = attn__alloc((size_t)n, sizeof(int64_t), "GGUF names");
    if (!tmp || !idx) {
        attn__free(tmp);
        attn__free(idx);
        return ATTN_E_NOMEM;
    }
    for (int64_t i = 0; i < n; i++)
        tmp[i] = (named){name_at(base, stride, i), i};
    qsort(tmp, (size_t)n, sizeof(named), cmp_named);
    for (int64_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(tmp[i].name, tmp[i - 1].name) == 0) {
            char e[96];
            attn_status st = attn__fail(
                ATTN_E_FORMAT, "%s: %s '%s' is given twice", label, what,
                esc(tmp[i].name, strlen(tmp[i].name), e, sizeof e));
            attn__free(tmp);
            attn__free(idx);
            return st;
        }
        idx[i] = tmp[i].i;
    }
    attn__free(tmp);
    *out = idx;
    return ATTN_OK;
}

int64_t attn__gguf_find(const void *base, size_t stride, const int64_t *idx,
                        int64_t n, const char *name) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name_at(base, stride, idx[mid]), name);
        if (c == 0) return idx[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* ---- tensors --------------------------------------------------------- */

static attn_status bad_tensor(const attn_gguf *g, const char *name,
                              const char *what) {
    char e[96];
    return attn__fail(ATTN_E_FORMAT, "%s: tensor '%s': %s", g->label,
                      esc(name, strlen(name), e, sizeof e), what);
}

static attn_status parse_tensor(attn_gguf *g, cursor *c, tensor_entry *t) {
    const char *s = NULL;
    size_t len = 0;
    attn_status st = get_str(c, "a tensor name", &s, &len);
    if (st) return st;
    if (len == 0 || len > GGUF_MAX_NAME || memchr(s, 0, len)) {
        char e[96];
        return attn__fail(ATTN_E_FORMAT,
                          "%s: tensor name '%s' (%zu bytes): names have 1 to "
                          "%d bytes and no NUL",
                          c->label, esc(s, len < 64 ? len : 64, e, sizeof e),
                          len, GGUF_MAX_NAME);
    }
    if (!(t->name = dup_str(s, len))) return ATTN_E_NOMEM;
    uint32_t nd, type;
    if ((st = get_u32(c, "a tensor's dimension count", &nd))) return st;
    if (nd < 1 || nd > GGUF_MAX_DIMS) {
        char m[64];
        snprintf(m, sizeof m, "%u dimensions (1 to %d are read)", nd,
                 GGUF_MAX_DIMS);
        return bad_tensor(g, t->name, m);
    }
    t->ndim = (int)nd;
    int64_t numel = 1;
    uint64_t ne[GGUF_MAX_DIMS];
    for (uint32_t d = 0; d < nd; d++) {
        if ((st = get_u64(c, "a tensor's extent", &ne[d]))) return st;
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX ||
            !attn__mul_i64(numel, (int64_t)ne[d], &numel)) {
            char m[96];
            snprintf(m, sizeof m, "extent %u is %llu", d,
                     (unsigned long long)ne[d]);
            return bad_tensor(g, t->name, m);
        }
        t->shape[nd - 1 - d] = (int64_t)ne[d]; /* row-major */
    }
    t->numel = numel;
    if ((st = get_u32(c, "a tensor's type", &type)) ||
        (st = get_u64(c, "a tensor's offset", &t->offset)))
        return st;
    const attn__ggml_type *ty = attn__ggml_type_of((int)type);
    if (!ty) {
        char m[64];
        snprintf(m, sizeof m, "unknown type %u", type);
        return bad_tensor(g, t->name, m);
    }
    t->type = (int)type;
    const int blk = ty->block;
    if (ne[0] % (uint64_t)blk != 0) {
        char m[128];
        snprintf(m, sizeof m,
                 "its rows of %llu values are not whole %s blocks "
                 "of %d",
                 (unsigned long long)ne[0], ty->name, blk);
        return bad_tensor(g, t->name, m);
    }
    int64_t nb;
    if (!attn__mul_i64(numel / blk, ty->bytes, &nb))
        return bad_tensor(g, t->name, "its byte size overflows");
    t->nbytes = (uint64_t)nb;
    return ATTN_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const tensor_entry *x = *(const tensor_entry *const *)a,
                       *y = *(const tensor_entry *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Offsets on the alignment, data inside the data section, no overlap. */
static attn_status check_layout(attn_gguf *g, uint64_t align) {
    for (int64_t i = 0; i < g->nt; i++) {
        const tensor_entry *t = &g->t[i];
        char m[160];
        if (t->offset % align != 0) {
            snprintf(m, sizeof m,
                     "offset %llu is not a multiple of the "
                     "alignment %llu",
                     (unsigned long long)t->offset, (unsigned long long)align);
            return bad_tensor(g, t->name, m);
        }
        if (t->offset > g->data_size || t->nbytes > g->data_size - t->offset) {
            snprintf(m, sizeof m,
                     "%llu bytes at offset %llu run past the "
                     "data section (%llu bytes)",
                     (unsigned long long)t->nbytes,
                     (unsigned long long)t->offset,
                     (unsigned long long)g->data_size);
            return bad_tensor(g, t->name, m);
        }
    }
    if (g->nt < 2) return ATTN_OK;
    const tensor_entry **by = attn__alloc((size_t)g->nt, sizeof *by, "GGUF");
    if (!by) return ATTN_E_NOMEM;
    for (int64_t i = 0; i < g->nt; i++) by[i] = &g->t[i];
    qsort(by, (size_t)g->nt, sizeof *by, cmp_offset);
    attn_status st = ATTN_OK;
    for (int64_t i = 1; i < g->nt && !st; i++)
        if (by[i]->offset < by[i - 1]->offset + by[i - 1]->nbytes) {
            char m[160], e[96];
            snprintf(
                m, sizeof m, "overlaps tensor '%s'",
                esc(by[i - 1]->name, strlen(by[i - 1]->name), e, sizeof e));
            st = bad_tensor(g, by[i]->name, m);
        }
    attn__free(by);
    return st;
}

/* ---- open / close ---------------------------------------------------- */

static attn_status parse_header(attn_gguf *g, cursor *c, uint64_t *nt,
                                uint64_t *nkv) {
    const unsigned char *b = NULL;
    attn_status st = take(c, 4, "the magic", &b);
    if (st) return st;
    if (memcmp(b, "GGUF", 4) != 0)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: not a GGUF file (no 'GGUF' "
                          "magic)",
                          c->label);
    uint32_t v;
    if ((st = get_u32(c, "the version", &v))) return st;
    if (v != 2 && v != 3) {
        if (v > 0xffff && (v >> 24) >= 2 && (v >> 24) <= 3)
            return attn__fail(ATTN_E_UNSUPPORTED,
                              "%s: a big-endian GGUF file "
                              "(attn reads little-endian ones)",
                              c->label);
        return attn__fail(ATTN_E_FORMAT,
                          "%s: GGUF version %u (attn reads 2 "
                          "and 3)",
                          c->label, v);
    }
    g->version = (int)v;
    if ((st = get_u64(c, "the tensor count", nt)) ||
        (st = get_u64(c, "the metadata count", nkv)))
        return st;
    const size_t left = c->size - c->at;
    if (*nkv > left / 13 || *nt > left / 32 || *nkv * 13 + *nt * 32 > left)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: %llu metadata entries and %llu tensors cannot "
                          "fit in the %zu bytes that follow",
                          c->label, (unsigned long long)*nkv,
                          (unsigned long long)*nt, left);
    return ATTN_OK;
}

/* Metadata twice: a first pass counts the string-array elements, the
 * second stores their offsets in one pool. */
static attn_status parse_metadata(attn_gguf *g, cursor *c) {
    const size_t start = c->at;
    uint64_t nsoff = 0;
    attn_status st = ATTN_OK;
    for (int pass = 0; pass < 2 && !st; pass++) {
        c->at = start;
        uint64_t seen = 0;
        if (pass == 1 && nsoff > 0 &&
            !(g->soff_pool = attn__alloc((size_t)nsoff, sizeof(uint64_t),
                                         "GGUF string arrays")))
            return ATTN_E_NOMEM;
        for (int64_t i = 0; i < g->nkv && !st; i++) {
            kv_entry *e = &g->kv[i];
            const char *k = NULL;
            size_t len = 0;
            if ((st = get_str(c, "a metadata key", &k, &len))) break;
            if (pass == 0) {
                if (len == 0 || len > GGUF_MAX_KEY || memchr(k, 0, len)) {
                    char eb[96];
                    st = attn__fail(ATTN_E_FORMAT,
                                    "%s: metadata key '%s' (%zu bytes): keys "
                                    "have 1 to %d bytes and no NUL",
                                    c->label,
                                    esc(k, len < 64 ? len : 64, eb, sizeof eb),
                                    len, GGUF_MAX_KEY);
                    break;
                }
                if (!(e->key = dup_str(k, len))) {
                    st = ATTN_E_NOMEM;
                    break;
                }
            }
            st = parse_value(c, e, &seen, pass == 1 ? g->soff_pool : NULL);
        }
        if (pass == 0) nsoff = seen;
    }
    return st;
}

attn_status attn_gguf_parse(const void *buf, size_t size, const char *label,
                            attn_gguf **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!buf) return attn__fail(ATTN_E_INVALID, "buf is NULL");
    attn_gguf *g = attn__alloc(1, sizeof *g, "a GGUF file");
    if (!g) return ATTN_E_NOMEM;
    memset(g, 0, sizeof *g);
    g->label_copy =
        dup_str(label ? label : "GGUF", strlen(label ? label : "GGUF"));
    g->label = g->label_copy ? g->label_copy : "GGUF";
    g->base = buf;
    g->size = size;
    cursor c = {buf, size, 0, g->label};
    uint64_t nt = 0, nkv = 0;
    attn_status st = parse_header(g, &c, &nt, &nkv);
    if (!st && nkv &&
        !(g->kv = attn__alloc((size_t)nkv, sizeof(kv_entry), "GGUF metadata")))
        st = ATTN_E_NOMEM;
    if (!st && nt &&
        !(g->t = attn__alloc((size_t)nt, sizeof(tensor_entry), "GGUF tensors")))
        st = ATTN_E_NOMEM;
    if (!st) {
        if (g->kv) memset(g->kv, 0, sizeof(kv_entry) * (size_t)nkv);
        if (g->t) memset(g->t, 0, sizeof(tensor_entry) * (size_t)nt);
        g->nkv = (int64_t)nkv;
        g->nt = (int64_t)nt;
        st = parse_metadata(g, &c);
    }
    if (!st)
        st = sort_names(g->kv, sizeof(kv_entry), g->nkv, g->label,
                        "metadata key", &g->kv_by_key);
    uint64_t align = GGUF_DEFAULT_ALIGN;
    if (!st) {
        int64_t a = attn__gguf_find(g->kv, sizeof(kv_entry), g->kv_by_key,
                                    g->nkv, "general.alignment");
        if (a >= 0) {
            const kv_entry *e = &g->kv[a];
            if (e->type != ATTN_GGUF_UINT32 || e->i == 0 ||
                (e->i & (e->i - 1)) != 0)
                st = attn__fail(ATTN_E_FORMAT,
                                "%s: general.alignment must be "
                                "a UINT32 power of two",
                                g->label);
            else
                align = (uint64_t)e->i;
        }
    }
    for (int64_t i = 0; !st && i < g->nt; i++)
        st = parse_tensor(g, &c, &g->t[i]);
    if (!st)
        st = sort_names(g->t, sizeof(tensor_entry), g->nt, g->label, "tensor",
                        &g->t_by_name);
    if (!st) {
        uint64_t start = ((uint64_t)c.at + align - 1) / align * align;
        if (start > size) {
            st = g->nt ? attn__fail(ATTN_E_FORMAT,
                                    "%s: the data section "
                                    "starts past the end of the file",
                                    g->label)
                       : ATTN_OK;
            start = size;
        }
        g->data = (const unsigned char *)buf + start;
        g->data_size = size - start;
    }
    if (!st) st = check_layout(g, align);
    if (st) {
        attn_gguf_close(g);
        return st;
    }
    *out = g;
    return ATTN_OK;
}

attn_status attn_gguf_open(const char *path, attn_gguf **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_E_INVALID, "path is NULL");
    void *map;
    size_t size;
    attn_status st = attn__map_input(path, &map, &size);
    if (st) return st;
    static const unsigned char empty[1] = {0};
    st = attn_gguf_parse(map ? map : (const void *)empty, size, path, out);
    if (st) {
        if (map) munmap(map, size);
        return st;
    }
    (*out)->map = map;
    (*out)->map_size = size;
    return ATTN_OK;
}

void attn_gguf_close(attn_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; g->kv && i < g->nkv; i++) attn__free(g->kv[i].key);
    for (int64_t i = 0; g->t && i < g->nt; i++) attn__free(g->t[i].name);
    if (g->map) munmap(g->map, g->map_size);
    ATTN__FREE_ALL(g->kv, g->t, g->kv_by_key, g->t_by_name, g->soff_pool,
                   g->label_copy, g);
}
