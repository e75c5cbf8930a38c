/* The reference scaled dot-product attention: plain loops, double
 * accumulation, the full score row materialized. It is the oracle that
 * every fast kernel is tested against, so it favours clarity over speed. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* Copies one (Lk, D) slice of a view into a contiguous double array. */
static void load_slice(const attn_tensor *t, int64_t b, int64_t h,
                       double *dst) {
    for (int64_t l = 0; l < t->shape[2]; l++)
        for (int64_t d = 0; d < t->shape[3]; d++)
            dst[l * t->shape[3] + d] = attn_tensor_get(t, b, h, l, d);
}

static void store(attn_tensor *t, int64_t i0, int64_t i1, int64_t i2,
                  int64_t i3, double x) {
    int64_t o = attn__off(t, i0, i1, i2, i3);
    if (t->dtype == ATTN_F64)
        ((double *)t->data)[o] = x;
    else
        ((float *)t->data)[o] = (float)x;
}

attn_status attn__sdpa_ref_forward(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   const attn__sdpa_dims *dm,
                                   attn_tensor *out, attn_tensor *weights,
                                   float *lse) {
    const attn_mask *m = &opts->mask;
    const int64_t Lq = dm->Lq, Lk = dm->Lk, Dk = dm->Dk, Dv = dm->Dv;
    const double p = opts->dropout_p, keep_scale = 1.0 / (1.0 - p);
    double *kd = attn__alloc((size_t)(Lk * Dk), sizeof(double), "reference k");
    double *vd = attn__alloc((size_t)(Lk * Dv), sizeof(double), "reference v");
    double *qd = attn__alloc((size_t)Dk, sizeof(double), "reference q row");
    double *s = attn__alloc((size_t)Lk, sizeof(double), "reference scores");
    double *o = attn__alloc((size_t)Dv, sizeof(double), "reference output");
    if (!kd || !vd || !qd || !s || !o) {
        attn__free(kd);
        attn__free(vd);
        attn__free(qd);
        attn__free(s);
        attn__free(o);
        return ATTN_E_NOMEM;
    }
    for (int64_t b = 0; b < dm->B; b++)
        for (int64_t h = 0; h < dm->H; h++) {
            int64_t hk = h / dm->group;
            /* K and V slices are shared by the heads of a group */
            if (h % dm->group == 0) {
                load_slice(k, b, hk, kd);
                load_slice(v, b, hk, vd);
            }
            for (int64_t i = 0; i < Lq; i++) {
                for (int64_t d = 0; d < Dk; d++)
                    qd[d] = attn_tensor_get(q, b, h, i, d);
                double mx = -INFINITY;
                for (int64_t j = 0; j < Lk; j++) {
                    s[j] = -INFINITY;
                    if (!attn_mask_visible(m, b, h, i, j, Lq, Lk)) continue;
                    double acc = 0.0;
                    for (int64_t d = 0; d < Dk; d++) acc += qd[d] * kd[j * Dk + d];
                    s[j] = dm->scale * acc + attn__bias_at(m, b, h, i, j);
                    if (s[j] > mx) mx = s[j];
                }
                double sum = 0.0;
                if (mx > -INFINITY)
                    for (int64_t j = 0; j < Lk; j++)
                        if (s[j] > -INFINITY) sum += exp(s[j] - mx);
                memset(o, 0, (size_t)Dv * sizeof(double));
                for (int64_t j = 0; j < Lk; j++) {
                    double w = 0.0;
                    if (mx > -INFINITY && s[j] > -INFINITY) {
                        w = exp(s[j] - mx) / sum;
                        if (p > 0)
                            w = attn_dropout_kept(opts->seed, p, b, h, i, j)
                                    ? w * keep_scale
                                    : 0.0;
                    }
                    if (weights) store(weights, b, h, i, j, w);
                    if (w != 0.0)
                        for (int64_t d = 0; d < Dv; d++) o[d] += w * vd[j * Dv + d];
                }
                for (int64_t d = 0; d < Dv; d++) store(out, b, h, i, d, o[d]);
                if (lse)
                    lse[(b * dm->H + h) * Lq + i] =
                        mx > -INFINITY ? (float)(mx + log(sum)) : -INFINITY;
            }
        }
    attn__free(kd);
    attn__free(vd);
    attn__free(qd);
    attn__free(s);
    attn__free(o);
    return ATTN_OK;
}
