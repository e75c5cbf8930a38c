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
#include "attn_gguf.h"
#include "binfile.h"
#include "json.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64   /* the format's limit on tensor names     */
#define GGUF_MAX_KEY 65535 /* and on keys                            */
#define GGUF_DEFAULT_ALIGN 32

typedef struct {
    char *key;
    attn_gguf_type type;
    int64_t i;
    uint64_t u;
    double f;
    const char *str;
    size_t len;
    attn_gguf_type elem;
    uint64_t count;
    size_t at;      /* file offset of the array's first element   */
    uint64_t *soff; /* string arrays: each element's offset       */
} kv_entry;

typedef struct {
    char *name;
    int type;
    int ndim;
    int64_t shape[GGUF_MAX_DIMS];
    int64_t numel;
    uint64_t offset, nbytes;
} tensor_entry;

struct attn_gguf {
    int version;
    const unsigned char *base;
    size_t size;
    const char *label;
    char *label_copy;
    kv_entry *kv;
    int64_t nkv;
    int64_t *kv_by_key;
    tensor_entry *t;
    int64_t nt;
    int64_t *t_by_name;
    const unsigned char *data;
    uint64_t data_size;
    uint64_t *soff_pool;
    void *map;
    size_t map_size;
};

/* The format's tensor types: name, values per block, bytes per block. */
static const struct {
    int id;
    const char *name;
    int block;
    int bytes;
} ggml_types[] = {
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

static int type_index(int id) {
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (ggml_types[i].id == id) return (int)i;
    return -1;
}

static const char *const value_names[] = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};

static size_t scalar_size(uint32_t t) {
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

static uint64_t le64(const unsigned char *b) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | b[i];
    return x;
}

static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
           (uint32_t)b[3] << 24;
}

static attn_status get_u64(cursor *c, const char *what, uint64_t *x) {
    const unsigned char *b = NULL;
    attn_status st = take(c, 8, what, &b);
    if (!st) *x = le64(b);
    return st;
}

static attn_status get_u32(cursor *c, const char *what, uint32_t *x) {
    const unsigned char *b = NULL;
    attn_status st = take(c, 4, what, &b);
    if (!st) *x = le32(b);
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

static double load_float(const unsigned char *b, uint32_t t) {
    if (t == ATTN_GGUF_FLOAT32) {
        uint32_t u = le32(b);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint64_t u = le64(b);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* A scalar of type t at b into e (i, u or f). */
static attn_status load_scalar(const unsigned char *b, uint32_t t, int64_t *i,
                               uint64_t *u, double *f) {
    switch (t) {
    case ATTN_GGUF_UINT8:
    case ATTN_GGUF_BOOL: *i = b[0]; break;
    case ATTN_GGUF_INT8: *i = (int8_t)b[0]; break;
    case ATTN_GGUF_UINT16: *i = (uint16_t)(b[0] | b[1] << 8); break;
    case ATTN_GGUF_INT16: *i = (int16_t)(uint16_t)(b[0] | b[1] << 8); break;
    case ATTN_GGUF_UINT32: *i = le32(b); break;
    case ATTN_GGUF_INT32: *i = (int32_t)le32(b); break;
    case ATTN_GGUF_UINT64:
        *u = le64(b);
        *i = *u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)*u;
        break;
    case ATTN_GGUF_INT64: *i = (int64_t)le64(b); break;
    default: *f = load_float(b, t); return ATTN_OK;
    }
    if (t != ATTN_GGUF_UINT64) *u = (uint64_t)*i;
    *f = (double)*i;
    return ATTN_OK;
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
        if ((st = take(c, scalar_size(t), "a metadata value", &b))) return st;
        if (t == ATTN_GGUF_BOOL && b[0] > 1)
            return bad_kv(c, e, "a bool that is neither 0 nor 1");
        return load_scalar(b, t, &e->i, &e->u, &e->f);
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
        size_t es = scalar_size(et);
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

static int64_t find_name(const void *base, size_t stride, const int64_t *idx,
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
    int ti = type_index((int)type);
    if (ti < 0) {
        char m[64];
        snprintf(m, sizeof m, "unknown type %u", type);
        return bad_tensor(g, t->name, m);
    }
    t->type = (int)type;
    const int blk = ggml_types[ti].block;
    if (ne[0] % (uint64_t)blk != 0) {
        char m[128];
        snprintf(m, sizeof m,
                 "its rows of %llu values are not whole %s blocks "
                 "of %d",
                 (unsigned long long)ne[0], ggml_types[ti].name, blk);
        return bad_tensor(g, t->name, m);
    }
    int64_t nb;
    if (!attn__mul_i64(numel / blk, ggml_types[ti].bytes, &nb))
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
        int64_t a = find_name(g->kv, sizeof(kv_entry), g->kv_by_key, g->nkv,
                              "general.alignment");
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
    attn__free(g->kv);
    attn__free(g->t);
    attn__free(g->kv_by_key);
    attn__free(g->t_by_name);
    attn__free(g->soff_pool);
    attn__free(g->label_copy);
    if (g->map) munmap(g->map, g->map_size);
    attn__free(g);
}

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
    int64_t i = find_name(g->kv, sizeof(kv_entry), g->kv_by_key, g->nkv, key);
    if (i < 0)
        return attn__fail(ATTN_E_INVALID, "%s: no metadata '%s'", g->label,
                          key);
    fill_value(&g->kv[i], v);
    return ATTN_OK;
}

static attn_status wrong_type(const attn_gguf *g, const char *key,
                              attn_gguf_type t, const char *want) {
    return attn__fail(ATTN_E_FORMAT, "%s: metadata '%s' is %s, not %s",
                      g->label, key, value_names[t], want);
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
        find_name(g->kv, sizeof(kv_entry), g->kv_by_key, g->nkv, v->key);
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
    const kv_entry *e;
    attn_status st = array_elem(g, v, i, &e);
    if (st) return st;
    if (e->elem != ATTN_GGUF_STRING)
        return wrong_type(g, e->key, e->elem, "an array of strings");
    const unsigned char *b = g->base + e->soff[i];
    *len = (size_t)le64(b);
    *str = (const char *)b + 8;
    return ATTN_OK;
}

attn_status attn_gguf_array_int(const attn_gguf *g, const attn_gguf_value *v,
                                uint64_t i, int64_t *x) {
    const kv_entry *e;
    attn_status st = array_elem(g, v, i, &e);
    if (st) return st;
    if (!is_int_type(e->elem))
        return wrong_type(g, e->key, e->elem, "an array of integers");
    size_t es = scalar_size(e->elem);
    uint64_t u;
    double f;
    return load_scalar(g->base + e->at + es * (size_t)i, e->elem, x, &u, &f);
}

attn_status attn_gguf_array_float(const attn_gguf *g, const attn_gguf_value *v,
                                  uint64_t i, double *x) {
    const kv_entry *e;
    attn_status st = array_elem(g, v, i, &e);
    if (st) return st;
    if (e->elem != ATTN_GGUF_FLOAT32 && e->elem != ATTN_GGUF_FLOAT64)
        return wrong_type(g, e->key, e->elem, "an array of floats");
    *x =
        load_float(g->base + e->at + scalar_size(e->elem) * (size_t)i, e->elem);
    return ATTN_OK;
}

/* ---- tensor access and dequantization --------------------------------- */

int64_t attn_gguf_tensor_count(const attn_gguf *g) { return g ? g->nt : 0; }

static void fill_tensor(const attn_gguf *g, const tensor_entry *e,
                        attn_gguf_tensor *t) {
    memset(t, 0, sizeof *t);
    t->name = e->name;
    t->type = e->type;
    t->type_name = ggml_types[type_index(e->type)].name;
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
        find_name(g->t, sizeof(tensor_entry), g->t_by_name, g->nt, name);
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
            uint32_t u = le32(src + 4 * b);
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
    const int ti = type_index(t->type);
    const int64_t blk = ggml_types[ti].block, bytes = ggml_types[ti].bytes;
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
