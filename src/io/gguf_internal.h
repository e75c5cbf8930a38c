/* The GGUF reader's insides (src/io/gguf.c parses, gguf_access.c reads
 * what was parsed). Not installed. */
#ifndef ATTN_GGUF_INTERNAL_H
#define ATTN_GGUF_INTERNAL_H

#include "attn_gguf.h"
#include "internal.h"

#include <stddef.h>
#include <stdint.h>

#define GGUF_MAX_DIMS 4

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

/* A tensor type of the format: name, values per block, bytes per block. */
typedef struct {
    int id;
    const char *name;
    int block;
    int bytes;
} attn__ggml_type;

/* The type with this number, or NULL when the format has none. */
const attn__ggml_type *attn__ggml_type_of(int id);
/* "UINT8", ... for a value type. */
const char *attn__gguf_value_name(attn_gguf_type t);
/* Bytes of a scalar value type (0 for STRING and ARRAY). */
size_t attn__gguf_scalar_size(uint32_t t);
/* A scalar of type t at b: integers in *i (and *u), floats in *f. */
void attn__gguf_load_scalar(const unsigned char *b, uint32_t t, int64_t *i,
                            uint64_t *u, double *f);
double attn__gguf_load_float(const unsigned char *b, uint32_t t);
/* Index of the record called name (records of stride bytes at base whose
 * first member is the name, idx their order by name), or -1. */
int64_t attn__gguf_find(const void *base, size_t stride, const int64_t *idx,
                        int64_t n, const char *name);

static inline uint64_t attn__le64(const unsigned char *b) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | b[i];
    return x;
}

static inline uint32_t attn__le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
           (uint32_t)b[3] << 24;
}

#endif
