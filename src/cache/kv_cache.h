/* The KV cache's insides, shared by kv_cache.c (the object) and
 * decode*.c (attention over it). Internal: not installed.
 *
 * Storage is slot-major: slot s holds the K rows of its Hkv heads, each a
 * run of capacity rows of D values (row_k bytes), then likewise V. The
 * logical entry b lives in slot slot[b]; reorder rewrites that table, so
 * a beam that keeps its parent moves no data. q8 scales sit in arrays of
 * the same order, nb_k (nb_v) per row. */
#ifndef ATTN_KV_CACHE_INTERNAL_H
#define ATTN_KV_CACHE_INTERNAL_H

#include "attn_cache.h"
#include "internal.h"

struct attn_kv_cache {
    attn_kv_cache_config cfg; /* value_dim filled in                      */
    int64_t nb_k, nb_v;       /* q8 blocks per K / V row (0 otherwise)    */
    size_t row_k, row_v;      /* bytes of one stored K / V row            */
    int64_t *len;             /* [B] valid positions of logical entry b   */
    int64_t *slot;            /* [B] storage slot of logical entry b      */
    unsigned char *k, *v;     /* values, slot-major (see above)           */
    float *ks, *vs;           /* q8 scales, same order; NULL otherwise    */
    /* document id of each position, slot-major [B * capacity] (slot s,
     * position p at s * capacity + p); NULL until the first
     * attn_kv_cache_append_docs */
    int64_t *doc;
    /* rotary positions of the keys (attn_kv_cache_set_rope): rope_freq
     * [rotary dim / 2], NULL when keys are stored as given */
    attn_rope rope;
    double *rope_freq;
};

/* Document ids of logical entry b's positions (c->doc not NULL). */
static inline const int64_t *attn__kv_doc_row(const attn_kv_cache *c,
                                              int64_t b) {
    return c->doc + (size_t)(c->slot[b] * c->cfg.capacity);
}

/* Row (b, hk, pos) of K or V of logical entry b: values and (q8) scales. */
static inline const unsigned char *
attn__kv_krow(const attn_kv_cache *c, int64_t b, int64_t hk, int64_t pos) {
    int64_t r = (c->slot[b] * c->cfg.kv_heads + hk) * c->cfg.capacity + pos;
    return c->k + (size_t)r * c->row_k;
}
static inline const unsigned char *
attn__kv_vrow(const attn_kv_cache *c, int64_t b, int64_t hk, int64_t pos) {
    int64_t r = (c->slot[b] * c->cfg.kv_heads + hk) * c->cfg.capacity + pos;
    return c->v + (size_t)r * c->row_v;
}
static inline const float *attn__kv_kscale(const attn_kv_cache *c, int64_t b,
                                           int64_t hk, int64_t pos) {
    int64_t r = (c->slot[b] * c->cfg.kv_heads + hk) * c->cfg.capacity + pos;
    return c->ks ? c->ks + (size_t)r * (size_t)c->nb_k : NULL;
}
static inline const float *attn__kv_vscale(const attn_kv_cache *c, int64_t b,
                                           int64_t hk, int64_t pos) {
    int64_t r = (c->slot[b] * c->cfg.kv_heads + hk) * c->cfg.capacity + pos;
    return c->vs ? c->vs + (size_t)r * (size_t)c->nb_v : NULL;
}

/* n stored values of one row (dtype of the cache; scales for q8) as f32:
 * exactly the values attention sees. */
void attn__kv_row_to_f32(attn_dtype dtype, const void *row, const float *scales,
                         int64_t n, float *dst);

#endif /* ATTN_KV_CACHE_INTERNAL_H */
