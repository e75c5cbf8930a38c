/* The C lines of docs/masks.md's "Packed documents: cu_seqlens, a KV cache,
 * a ring" section, compiled and run here (tests/cli_readme.py checks that
 * the page's block is a part of this file, character for character):
 * cumulative starts to document ids, and a cache whose keys keep their
 * documents, against attn_sdpa_forward over the same keys. */
#include "attn_cache.h"
#include "check.h"

#include <stdint.h>

int main(void) {
    enum { H = 2, D = 8 };
    static float q[H * 6 * D], kv[6 * D], o[H * 6 * D], o2[H * 6 * D];
    for (int i = 0; i < H * 6 * D; i++) q[i] = (float)((i * 5 % 13) - 6) / 4;
    for (int i = 0; i < 6 * D; i++) kv[i] = (float)((i * 3 % 7) - 3) / 2;
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, H, 6, D);
    attn_tensor K = attn_tensor_4d(kv, ATTN_F32, 1, 1, 6, D);
    attn_tensor V = K;
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, H, 6, D);
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = 1, cc.kv_heads = 1, cc.capacity = 16, cc.head_dim = D;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cc, &cache), ATTN_OK);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.mask.causal = 1;
    opts.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_status st = ATTN_OK;
    /* README begin */
    const int64_t cu[4] = {0, 2, 5, 6};        /* 3 documents: 2, 3, 1 long */
    int64_t ids[6];
    st = attn_doc_ids_from_cu_seqlens(cu, 3, 6, ids);     /* 0 0 1 1 1 2 */
    opts.mask.doc_q = ids;                     /* like --doc-ids (Lq == Lk) */
    opts.mask.n_doc_q = 6;                     /* B * Lq */
    st = attn_kv_cache_append_docs(cache, &K, &V, NULL, ids); /* keys keep ids */
    st = attn_sdpa_cached(&Q, cache, &opts, &O, NULL);  /* queries: doc_q */
    /* README end */
    CHECK_STATUS(st, ATTN_OK);
    CHECK(ids[0] == 0 && ids[1] == 0 && ids[2] == 1 && ids[4] == 1 &&
          ids[5] == 2);
    /* the same attention without a cache */
    attn_tensor O2 = attn_tensor_4d(o2, ATTN_F32, 1, H, 6, D);
    opts.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &opts, &O2, NULL, NULL),
                 ATTN_OK);
    double e = 0;
    for (int i = 0; i < H * 6 * D; i++) e = fmax(e, fabs(o[i] - o2[i]));
    CHECK_MSG(e < 1e-5, "cache vs forward: %g", e);
    /* the last document (position 5) sees only itself: its own value */
    for (int d = 0; d < D; d++) CHECK_NEAR(o[5 * D + d], kv[5 * D + d], 1e-6);
    attn_kv_cache_free(cache);
    return check_done("test_readme_docs");
}
