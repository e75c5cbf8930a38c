/* safetensors files: the weights format of Hugging Face models.
 *
 * Format: u64 LE header length N, N bytes of JSON (an object: tensor name
 * -> {dtype, shape, data_offsets}, plus "__metadata__"), then the data.
 * As the .npy reader, this trusts nothing: the header length is checked
 * against the file before the JSON is read, every offset and byte count
 * against the data and the shape (products overflow-checked), and the
 * tensors must tile the data exactly, as the reference implementation
 * demands (sorted by offset, each begins where the last ended, the last
 * ends at the end of the file): overlaps and holes are refused. The file
 * is memory-mapped read-only; tensors point into the mapping. */
#include "binfile.h"
#include "json.h"
#include "attn_pretrained.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation's cap on the header. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct {
    char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;
} st_entry;

struct attn_safetensors {
    st_entry *t;      /* sorted by offset                              */
    int64_t *by_name; /* indices of t sorted by name                   */
    int64_t n;
    char *names; /* the names' storage                            */
    const unsigned char *data; /* start of the data section              */
    void *map; /* the mapping (open), or NULL (parse)            */
    size_t map_size;
};

static const struct {
    const char *name;
    int known; /* 1: attn has the dtype; 0: valid but unsupported */
    attn_dtype dtype;
    size_t size;
} st_dtypes[] = {
    {"F32", 1, ATTN_F32, 4},    {"F16", 1, ATTN_F16, 2},
    {"BF16", 1, ATTN_BF16, 2},  {"F64", 1, ATTN_F64, 8},
    {"I64", 1, ATTN_I64, 8},    {"I32", 1, ATTN_I32, 4},
    {"U8", 1, ATTN_U8, 1},      {"BOOL", 1, ATTN_U8, 1},
    {"I8", 0, ATTN_U8, 1},      {"I16", 0, ATTN_U8, 2},
    {"U16", 0, ATTN_U8, 2},     {"U32", 0, ATTN_U8, 4},
    {"U64", 0, ATTN_U8, 8},     {"F8_E4M3", 0, ATTN_U8, 1},
    {"F8_E5M2", 0, ATTN_U8, 1},
};

static char *esc(const char *s, char *buf, size_t cap) {
    return attn__escape_bytes(s, strlen(s), buf, cap);
}

static attn_status bad(const char *label, const char *name, const char *what) {
    char e[96];
    return attn__fail(ATTN_E_FORMAT, "%s: tensor '%s': %s", label,
                      esc(name, e, sizeof e), what);
}

/* One tensor's entry {dtype, shape, data_offsets}. */
static attn_status parse_entry(const attn__json *j, const attn__json_node *v,
                               const char *label, uint64_t data_size,
                               st_entry *e) {
    const char *name = v->key;
    char msg[160], eb[64];
    if (v->kind != ATTN__JSON_OBJ) return bad(label, name, "is not an object");
    const attn__json_node *dt = NULL, *sh = NULL, *off = NULL;
    for (int64_t c = v->child; c >= 0; c = j->nodes[c].next) {
        const attn__json_node *m = &j->nodes[c];
        const attn__json_node **slot = strcmp(m->key, "dtype") == 0   ? &dt
                                       : strcmp(m->key, "shape") == 0 ? &sh
                                       : strcmp(m->key, "data_offsets") == 0
                                           ? &off
                                           : NULL;
        if (!slot) {
            snprintf(msg, sizeof msg,
                     "unknown key '%s' (dtype, shape and "
                     "data_offsets only)",
                     esc(m->key, eb, sizeof eb));
            return bad(label, name, msg);
        }
        if (*slot) {
            snprintf(msg, sizeof msg, "key '%s' given twice", m->key);
            return bad(label, name, msg);
        }
        *slot = m;
    }
    if (!dt || !sh || !off)
        return bad(label, name,
                   !dt   ? "lacks 'dtype'"
                   : !sh ? "lacks 'shape'"
                         : "lacks 'data_offsets'");
    if (dt->kind != ATTN__JSON_STR)
        return bad(label, name, "dtype is not a string");
    size_t esize = 0;
    int found = 0;
    for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
        if (strcmp(dt->str, st_dtypes[k].name) == 0) {
            found = 1;
            if (!st_dtypes[k].known) {
                char nb[96];
                return attn__fail(ATTN_E_UNSUPPORTED,
                                  "%s: tensor '%s' has "
                                  "dtype %s, which attn does not read",
                                  label, esc(name, nb, sizeof nb),
                                  st_dtypes[k].name);
            }
            e->dtype = st_dtypes[k].dtype;
            esize = st_dtypes[k].size;
        }
    if (!found) {
        snprintf(msg, sizeof msg, "unknown dtype '%s'",
                 esc(dt->str, eb, sizeof eb));
        return bad(label, name, msg);
    }
    if (sh->kind != ATTN__JSON_ARR)
        return bad(label, name, "shape is not an array");
    if (sh->count > ATTN_ST_MAX_DIMS) {
        snprintf(msg, sizeof msg, "shape has %lld dimensions (at most %d)",
                 (long long)sh->count, ATTN_ST_MAX_DIMS);
        return bad(label, name, msg);
    }
    e->ndim = (int)sh->count;
    e->numel = 1;
    int k = 0;
    for (int64_t c = sh->child; c >= 0; c = j->nodes[c].next, k++) {
        const attn__json_node *d = &j->nodes[c];
        if (d->kind != ATTN__JSON_NUM || !d->is_int || d->i64 < 0)
            return bad(label, name,
                       "shape holds something other than a "
                       "non-negative integer");
        e->shape[k] = d->i64;
        if (!attn__mul_i64(e->numel, d->i64, &e->numel))
            return bad(label, name, "shape's element count overflows");
    }
    if (off->kind != ATTN__JSON_ARR || off->count != 2)
        return bad(label, name, "data_offsets is not [begin, end]");
    const attn__json_node *b = &j->nodes[off->child], *en = &j->nodes[b->next];
    if (b->kind != ATTN__JSON_NUM || !b->is_int || b->i64 < 0 ||
        en->kind != ATTN__JSON_NUM || !en->is_int || en->i64 < 0)
        return bad(label, name, "data_offsets are not non-negative integers");
    e->begin = (uint64_t)b->i64;
    e->end = (uint64_t)en->i64;
    if (e->end < e->begin) {
        snprintf(msg, sizeof msg,
                 "data_offsets [%llu, %llu] end before they "
                 "begin",
                 (unsigned long long)e->begin, (unsigned long long)e->end);
        return bad(label, name, msg);
    }
    if (e->end > data_size) {
        snprintf(msg, sizeof msg,
                 "data_offsets [%llu, %llu] reach past the "
                 "%llu bytes of data",
                 (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)data_size);
        return bad(label, name, msg);
    }
    int64_t nbytes;
    if (!attn__mul_i64(e->numel, (int64_t)esize, &nbytes) ||
        (uint64_t)nbytes != e->end - e->begin) {
        snprintf(msg, sizeof msg,
                 "shape holds %lld elements of %s (%zu bytes "
                 "each) but data_offsets [%llu, %llu] give %llu bytes",
                 (long long)e->numel, dt->str, esize,
                 (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)(e->end - e->begin));
        return bad(label, name, msg);
    }
    return ATTN_OK;
}

/* Index comparisons for the merge sort (n can be large: no quadratic sort). */
typedef int (*cmp_fn)(const attn_safetensors *s, int64_t a, int64_t b);

static int by_offset(const attn_safetensors *s, int64_t a, int64_t b) {
    if (s->t[a].begin != s->t[b].begin)
        return s->t[a].begin < s->t[b].begin ? -1 : 1;
    return s->t[a].end < s->t[b].end ? -1 : s->t[a].end > s->t[b].end;
}

static int by_name(const attn_safetensors *s, int64_t a, int64_t b) {
    return strcmp(s->t[a].name, s->t[b].name);
}

static void merge_sort(const attn_safetensors *s, int64_t *v, int64_t *tmp,
                       int64_t n, cmp_fn cmp) {
    if (n < 2) return;
    int64_t h = n / 2;
    merge_sort(s, v, tmp, h, cmp);
    merge_sort(s, v + h, tmp, n - h, cmp);
    int64_t i = 0, k = h, o = 0;
    while (i < h && k < n) tmp[o++] = cmp(s, v[i], v[k]) <= 0 ? v[i++] : v[k++];
    while (i < h) tmp[o++] = v[i++];
    while (k < n) tmp[o++] = v[k++];
    memcpy(v, tmp, sizeof *v * (size_t)n);
}

void attn_safetensors_close(attn_safetensors *s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->map_size);
    ATTN__FREE_ALL(s->t, s->by_name, s->names, s);
}

/* Puts the entries in offset order and checks that they tile the data. */
static attn_status order_and_check(attn_safetensors *s, const char *label,
                                   uint64_t data_size) {
    int64_t *ord = attn__alloc((size_t)s->n + 1, sizeof *ord, "tensor order");
    int64_t *tmp = attn__alloc((size_t)s->n + 1, sizeof *tmp, "tensor order");
    st_entry *t2 = attn__alloc((size_t)s->n + 1, sizeof *t2, "tensor table");
    s->by_name =
        attn__alloc((size_t)s->n + 1, sizeof *s->by_name, "tensor names");
    attn_status st = ATTN_OK;
    if (!ord || !tmp || !t2 || !s->by_name) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    for (int64_t i = 0; i < s->n; i++) ord[i] = i;
    merge_sort(s, ord, tmp, s->n, by_offset);
    for (int64_t i = 0; i < s->n; i++) t2[i] = s->t[ord[i]];
    attn__free(s->t);
    s->t = t2;
    t2 = NULL;
    uint64_t at = 0;
    char e1[96], e2[96];
    for (int64_t i = 0; i < s->n; i++) {
        const st_entry *e = &s->t[i];
        if (e->begin < at) {
            st = attn__fail(
                ATTN_E_FORMAT,
                "%s: tensor '%s' (bytes %llu..%llu) "
                "overlaps tensor '%s' (ending at %llu)",
                label, esc(e->name, e1, sizeof e1),
                (unsigned long long)e->begin, (unsigned long long)e->end,
                esc(s->t[i - 1].name, e2, sizeof e2), (unsigned long long)at);
            goto done;
        }
        if (e->begin > at) {
            st = attn__fail(ATTN_E_FORMAT,
                            "%s: data bytes %llu..%llu before "
                            "tensor '%s' belong to no tensor",
                            label, (unsigned long long)at,
                            (unsigned long long)e->begin,
                            esc(e->name, e1, sizeof e1));
            goto done;
        }
        at = e->end;
    }
    if (at != data_size) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: the tensors end at data byte %llu "
                        "but the file holds %llu bytes of data (trailing "
                        "bytes)",
                        label, (unsigned long long)at,
                        (unsigned long long)data_size);
        goto done;
    }
    for (int64_t i = 0; i < s->n; i++) s->by_name[i] = i;
    merge_sort(s, s->by_name, tmp, s->n, by_name);
    for (int64_t i = 1; i < s->n; i++)
        if (!by_name(s, s->by_name[i - 1], s->by_name[i])) {
            st =
                attn__fail(ATTN_E_FORMAT, "%s: tensor '%s' is given twice",
                           label, esc(s->t[s->by_name[i]].name, e1, sizeof e1));
            goto done;
        }
done:
    attn__free(ord);
    attn__free(tmp);
    attn__free(t2);
    return st;
}

static attn_status parse_body(attn_safetensors *s, const unsigned char *buf,
                              size_t size, const char *label) {
    if (size < 8)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: %zu bytes: too short to be a "
                          "safetensors file (8-byte header length)",
                          label, size);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)buf[i] << (8 * i);
    if (hl > size - 8)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: header length %llu reaches past "
                          "the end of the file (%zu bytes; truncated?)",
                          label, (unsigned long long)hl, size);
    if (hl > ST_MAX_HEADER)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: header length %llu is above the "
                          "limit of %llu bytes",
                          label, (unsigned long long)hl,
                          (unsigned long long)ST_MAX_HEADER);
    if (hl < 2 || buf[8] != '{')
        return attn__fail(ATTN_E_FORMAT,
                          "%s: the header does not start with "
                          "'{'",
                          label);
    const uint64_t data_size = size - 8 - hl;
    s->data = buf + 8 + hl;
    char jl[160];
    snprintf(jl, sizeof jl, "%s header", label);
    attn__json j;
    /* what a header holds: {name: {dtype, shape (at most 8 extents),
     * data_offsets (2)}}, and strings in __metadata__; refused past that
     * while parsing, before a hostile header grows the tree */
    const attn__json_limits lim = {0, ATTN_ST_MAX_DIMS, 3};
    attn_status st =
        attn__json_parse_lim((const char *)buf + 8, (size_t)hl, jl, &lim, &j);
    if (st) return st;
    const attn__json_node *root = &j.nodes[0];
    if (root->kind != ATTN__JSON_OBJ) {
        attn__json_free(&j);
        return attn__fail(ATTN_E_FORMAT, "%s: the header is not a JSON object",
                          label);
    }
    s->t = attn__alloc((size_t)root->count + 1, sizeof *s->t, "tensor table");
    s->names = attn__alloc((size_t)hl + 1, 1, "tensor names");
    if (!s->t || !s->names) {
        attn__json_free(&j);
        return ATTN_E_NOMEM;
    }
    size_t used = 0;
    int meta = 0;
    for (int64_t c = root->child; c >= 0 && !st; c = j.nodes[c].next) {
        const attn__json_node *v = &j.nodes[c];
        if (strcmp(v->key, "__metadata__") == 0) {
            if (meta++) {
                st = attn__fail(ATTN_E_FORMAT,
                                "%s: __metadata__ is given "
                                "twice",
                                label);
                break;
            }
            if (v->kind != ATTN__JSON_OBJ) {
                st = attn__fail(ATTN_E_FORMAT,
                                "%s: __metadata__ is not an "
                                "object",
                                label);
                break;
            }
            for (int64_t m = v->child; m >= 0; m = j.nodes[m].next)
                if (j.nodes[m].kind != ATTN__JSON_STR) {
                    char eb[64];
                    st = attn__fail(ATTN_E_FORMAT,
                                    "%s: __metadata__ entry "
                                    "'%s' is not a string",
                                    label, esc(j.nodes[m].key, eb, sizeof eb));
                    break;
                }
            continue;
        }
        st_entry *e = &s->t[s->n];
        memset(e, 0, sizeof *e);
        size_t kl = strlen(v->key) + 1; /* decoded keys fit the header size */
        e->name = s->names + used;
        memcpy(e->name, v->key, kl);
        used += kl;
        if ((st = parse_entry(&j, v, label, data_size, e))) break;
        s->n++;
    }
    attn__json_free(&j);
    if (st) return st;
    return order_and_check(s, label, data_size);
}

attn_status attn_safetensors_parse(const void *buf, size_t size,
                                   const char *label, attn_safetensors **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!buf && size) return attn__fail(ATTN_E_INVALID, "buf is NULL");
    attn_safetensors *s = attn__alloc(1, sizeof *s, "safetensors");
    if (!s) return ATTN_E_NOMEM;
    memset(s, 0, sizeof *s);
    attn_status st = parse_body(s, buf, size, label ? label : "safetensors");
    if (st) {
        attn_safetensors_close(s);
        return st;
    }
    *out = s;
    return ATTN_OK;
}

attn_status attn_safetensors_open(const char *path, attn_safetensors **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_E_INVALID, "path is NULL");
    void *map;
    size_t size;
    attn_status ost = attn__map_input(path, &map, &size);
    if (ost) return ost;
    static const unsigned char empty[1] = {0};
    attn_status st = attn_safetensors_parse(map ? map : (const void *)empty,
                                            size, path, out);
    if (st) {
        if (map) munmap(map, size);
        return st;
    }
    (*out)->map = map;
    (*out)->map_size = size;
    return ATTN_OK;
}

int64_t attn_safetensors_count(const attn_safetensors *s) {
    return s ? s->n : 0;
}

static void fill(const attn_safetensors *s, int64_t i, attn_st_tensor *t) {
    const st_entry *e = &s->t[i];
    memset(t, 0, sizeof *t);
    t->name = e->name;
    t->dtype = e->dtype;
    t->ndim = e->ndim;
    memcpy(t->shape, e->shape, sizeof t->shape);
    t->numel = e->numel;
    t->data = s->data + e->begin;
    t->nbytes = (size_t)(e->end - e->begin);
}

attn_status attn_safetensors_get(const attn_safetensors *s, int64_t i,
                                 attn_st_tensor *t) {
    if (!s || !t)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", s ? "t" : "st");
    if (i < 0 || i >= s->n)
        return attn__fail(ATTN_E_INVALID,
                          "tensor index %lld is outside [0, "
                          "%lld)",
                          (long long)i, (long long)s->n);
    fill(s, i, t);
    return ATTN_OK;
}

attn_status attn_safetensors_find(const attn_safetensors *s, const char *name,
                                  attn_st_tensor *t) {
    ATTN__NONNULL("st, t, name", s, t, name);
    int64_t lo = 0, hi = s->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->t[s->by_name[mid]].name, name);
        if (c == 0) {
            fill(s, s->by_name[mid], t);
            return ATTN_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    char e[96];
    return attn__fail(ATTN_E_INVALID, "no tensor named '%s'",
                      esc(name, e, sizeof e));
}

attn_status attn_st_tensor_to_f32(const attn_st_tensor *t, float *dst,
                                  int64_t n) {
    if (!t || !dst)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", t ? "dst" : "t");
    if (!attn__is_float_dtype(t->dtype))
        return attn__fail(ATTN_E_DTYPE, "tensor '%s' is %s, not a float dtype",
                          t->name ? t->name : "?", attn_dtype_name(t->dtype));
    if (n != t->numel)
        return attn__fail(ATTN_E_SHAPE,
                          "tensor '%s' has %lld elements, not "
                          "%lld",
                          t->name ? t->name : "?", (long long)t->numel,
                          (long long)n);
    /* the data may be unaligned: convert through aligned chunks */
    const size_t es = attn_dtype_size(t->dtype);
    _Alignas(8) unsigned char tmp[4096];
    const size_t per = sizeof tmp / es;
    for (int64_t i = 0; i < n;) {
        size_t k = (size_t)(n - i) < per ? (size_t)(n - i) : per;
        memcpy(tmp, (const unsigned char *)t->data + (size_t)i * es, k * es);
        attn__convert_to_float(tmp, t->dtype, dst + i, ATTN_F32, k);
        i += (int64_t)k;
    }
    return ATTN_OK;
}
