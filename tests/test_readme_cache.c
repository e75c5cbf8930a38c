/* The C example of docs/cache.md,
 * verbatim between the markers (tests/cli_readme.py checks that), compiled
 * and run: a prompt appended to an f16 cache, then decode steps, each
 * against the reference over the same cache. */
#include "attn.h"
#include "attn_cache.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>

enum { B = 2, H = 8, HKV = 2, D = 64, PROMPT = 40, STEPS = 3 };

static float *rnd(size_t n, unsigned long long *st) {
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = (float)test_rand(st);
    return x;
}

int main(void) {
    unsigned long long st = 3;
    float *kp = rnd((size_t)B * HKV * PROMPT * D, &st), *vp = rnd((size_t)B * HKV * PROMPT * D, &st);
    float *qp = rnd((size_t)B * H * PROMPT * D, &st), *op = malloc(sizeof(float) * B * H * PROMPT * D);
    float *k1 = rnd((size_t)B * HKV * D, &st), *v1 = rnd((size_t)B * HKV * D, &st);
    float *q1 = rnd((size_t)B * H * D, &st), *o1 = malloc(sizeof(float) * B * H * D);
    float ref[B * H * D];
    int failed = 0;
    /* README BEGIN */
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = B; cc.kv_heads = HKV; cc.capacity = 1024; cc.head_dim = D;
    cc.dtype = ATTN_F16;                          /* f32, f16, bf16 or q8 */
    attn_kv_cache *cache;
    if (attn_kv_cache_create(&cc, &cache)) return 1;
    attn_tensor K = attn_tensor_4d(kp, ATTN_F32, B, HKV, PROMPT, D);
    attn_tensor V = attn_tensor_4d(vp, ATTN_F32, B, HKV, PROMPT, D);
    attn_tensor Q = attn_tensor_4d(qp, ATTN_F32, B, H, PROMPT, D);
    attn_tensor O = attn_tensor_4d(op, ATTN_F32, B, H, PROMPT, D);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.mask.causal = 1;                         /* query t sees the cache */
    opts.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;    /* and itself, not later */
    attn_kv_cache_append(cache, &K, &V, NULL);    /* the prompt: prefill */
    attn_sdpa_cached(&Q, cache, &opts, &O, NULL);
    for (int step = 0; step < STEPS; step++) {    /* one token per step */
        attn_tensor K1 = attn_tensor_4d(k1, ATTN_F32, B, HKV, 1, D);
        attn_tensor V1 = attn_tensor_4d(v1, ATTN_F32, B, HKV, 1, D);
        attn_tensor Q1 = attn_tensor_4d(q1, ATTN_F32, B, H, 1, D);
        attn_tensor O1 = attn_tensor_4d(o1, ATTN_F32, B, H, 1, D);
        if (attn_kv_cache_append(cache, &K1, &V1, NULL) ||
            attn_sdpa_cached(&Q1, cache, &opts, &O1, NULL)) {
            fprintf(stderr, "%s\n", attn_last_error());
            break;
        }
        /* README END */
        attn_sdpa_opts ro = opts;
        ro.impl = ATTN_IMPL_REF;
        attn_tensor R = attn_tensor_4d(ref, ATTN_F32, B, H, 1, D);
        CHECK_STATUS(attn_sdpa_cached(&Q1, cache, &ro, &R, NULL), ATTN_OK);
        for (int i = 0; i < B * H * D; i++) failed |= !(fabsf(o1[i] - ref[i]) <= 1e-5f);
        /* README BEGIN */
    }
    attn_kv_cache_free(cache);
    /* README END */
    CHECK(!failed);
    free(kp); free(vp); free(qp); free(op); free(k1); free(v1); free(q1); free(o1);
    return check_done("test_readme_cache");
}
