/* Helpers for attention tests: random tensors and a run of the kernel
 * chosen by impl into freshly allocated outputs. */
#ifndef ATTN_SDPA_TEST_UTIL_H
#define ATTN_SDPA_TEST_UTIL_H

#include "attn.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t B, H, Hkv, Lq, Lk, Dk, Dv;
    float *q, *k, *v;
    attn_tensor Q, K, V;
} test_qkv;

static inline void test_qkv_make(test_qkv *t, int64_t B, int64_t H, int64_t Hkv,
                                 int64_t Lq, int64_t Lk, int64_t Dk, int64_t Dv,
                                 unsigned long long seed) {
    t->B = B;
    t->H = H;
    t->Hkv = Hkv;
    t->Lq = Lq;
    t->Lk = Lk;
    t->Dk = Dk;
    t->Dv = Dv;
    t->q = malloc(sizeof(float) * (size_t)(B * H * Lq * Dk));
    t->k = malloc(sizeof(float) * (size_t)(B * Hkv * Lk * Dk));
    t->v = malloc(sizeof(float) * (size_t)(B * Hkv * Lk * Dv));
    for (int64_t i = 0; i < B * H * Lq * Dk; i++)
        t->q[i] = (float)test_rand(&seed);
    for (int64_t i = 0; i < B * Hkv * Lk * Dk; i++)
        t->k[i] = (float)test_rand(&seed);
    for (int64_t i = 0; i < B * Hkv * Lk * Dv; i++)
        t->v[i] = (float)test_rand(&seed);
    t->Q = attn_tensor_4d(t->q, ATTN_F32, B, H, Lq, Dk);
    t->K = attn_tensor_4d(t->k, ATTN_F32, B, Hkv, Lk, Dk);
    t->V = attn_tensor_4d(t->v, ATTN_F32, B, Hkv, Lk, Dv);
}

static inline void test_qkv_free(test_qkv *t) {
    free(t->q);
    free(t->k);
    free(t->v);
}

/* Output buffers of one run. */
typedef struct {
    float *o, *w, *lse;
    attn_tensor O, W;
    attn_status st;
} test_run;

static inline void test_run_sdpa(test_run *r, const test_qkv *t,
                                 const attn_sdpa_opts *opts) {
    r->o = malloc(sizeof(float) * (size_t)(t->B * t->H * t->Lq * t->Dv));
    r->w = malloc(sizeof(float) * (size_t)(t->B * t->H * t->Lq * t->Lk));
    r->lse = malloc(sizeof(float) * (size_t)(t->B * t->H * t->Lq));
    r->O = attn_tensor_4d(r->o, ATTN_F32, t->B, t->H, t->Lq, t->Dv);
    r->W = attn_tensor_4d(r->w, ATTN_F32, t->B, t->H, t->Lq, t->Lk);
    r->st = attn_sdpa_forward(&t->Q, &t->K, &t->V, opts, &r->O, &r->W, r->lse);
}

static inline void test_run_free(test_run *r) {
    free(r->o);
    free(r->w);
    free(r->lse);
}

#endif
