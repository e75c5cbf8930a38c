/* Properties that hold for any correct attention, on random inputs and
 * every kernel: permuting keys with values leaves O unchanged, constant V
 * gives O = V, a per-row constant in the bias changes nothing, and every
 * output lies within [min V, max V] of its column. */
#include "attn.h"
#include "sdpa_test_util.h"

#include <math.h>

static const attn_impl impls[] = {ATTN_IMPL_REF, ATTN_IMPL_AUTO};

static double max_diff(const float *a, const float *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > w) w = d;
    }
    return w;
}

static void permutation(attn_impl impl, int64_t Lq, int64_t Lk) {
    test_qkv t, p;
    test_qkv_make(&t, 2, 4, 2, Lq, Lk, 16, 9, 21);
    test_qkv_make(&p, 2, 4, 2, Lq, Lk, 16, 9, 21);
    /* reverse-and-rotate the keys of every (b, h) with their values */
    for (int64_t bh = 0; bh < 2 * 2; bh++)
        for (int64_t j = 0; j < Lk; j++) {
            int64_t pj = (Lk - 1 - j + 3) % Lk;
            memcpy(p.k + (bh * Lk + pj) * 16, t.k + (bh * Lk + j) * 16,
                   16 * sizeof(float));
            memcpy(p.v + (bh * Lk + pj) * 9, t.v + (bh * Lk + j) * 9,
                   9 * sizeof(float));
        }
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.impl = impl;
    test_run a, b;
    test_run_sdpa(&a, &t, &o);
    test_run_sdpa(&b, &p, &o);
    CHECK(a.st == ATTN_OK && b.st == ATTN_OK);
    double d = max_diff(a.o, b.o, 2 * 4 * Lq * 9);
    CHECK_MSG(d <= 1e-5, "impl %d Lq %lld Lk %lld: permutation changes O by %g",
              impl, (long long)Lq, (long long)Lk, d);
    test_run_free(&a);
    test_run_free(&b);
    test_qkv_free(&t);
    test_qkv_free(&p);
}

static void constant_v_and_bounds(attn_impl impl, int64_t Lq, int64_t Lk) {
    test_qkv t;
    test_qkv_make(&t, 1, 2, 1, Lq, Lk, 8, 4, 33);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.impl = impl;
    o.mask.causal = 1;
    o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    /* bounds on random V */
    test_run r;
    test_run_sdpa(&r, &t, &o);
    CHECK(r.st == ATTN_OK);
    int outside = 0;
    for (int64_t d = 0; d < 4; d++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int64_t j = 0; j < Lk; j++) {
            double x = t.v[j * 4 + d];
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        for (int64_t row = 0; row < 2 * Lq; row++) {
            if (isinf(r.lse[row])) continue; /* fully masked: O = 0 */
            double x = r.o[row * 4 + d];
            if (x < lo - 1e-6 || x > hi + 1e-6) outside++;
        }
    }
    CHECK_MSG(outside == 0, "%d outputs outside [min V, max V]", outside);
    test_run_free(&r);
    /* constant V */
    for (int64_t j = 0; j < Lk; j++)
        for (int64_t d = 0; d < 4; d++)
            t.v[j * 4 + d] = (float)(0.25 * d - 0.3);
    test_run_sdpa(&r, &t, &o);
    double worst = 0;
    for (int64_t row = 0; row < 2 * Lq; row++) {
        if (isinf(r.lse[row])) continue;
        for (int64_t d = 0; d < 4; d++) {
            double e = fabs(r.o[row * 4 + d] - (0.25 * d - 0.3));
            if (e > worst) worst = e;
        }
    }
    CHECK_MSG(worst <= 1e-6, "constant V: O differs from V by %g", worst);
    test_run_free(&r);
    test_qkv_free(&t);
}

static void bias_row_constant(attn_impl impl) {
    const int64_t Lq = 13, Lk = 21;
    test_qkv t;
    test_qkv_make(&t, 1, 1, 1, Lq, Lk, 8, 8, 44);
    float b0[13 * 21], b1[13 * 21];
    unsigned long long s = 9;
    for (int64_t i = 0; i < Lq; i++) {
        double c = 50.0 * test_rand(&s);
        for (int64_t j = 0; j < Lk; j++) {
            b0[i * Lk + j] = (float)test_rand(&s);
            b1[i * Lk + j] = (float)(b0[i * Lk + j] + c);
        }
    }
    attn_tensor B0 = attn_tensor_4d(b0, ATTN_F32, 1, 1, Lq, Lk);
    attn_tensor B1 = attn_tensor_4d(b1, ATTN_F32, 1, 1, Lq, Lk);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.impl = impl;
    test_run a, b;
    o.mask.bias = &B0;
    test_run_sdpa(&a, &t, &o);
    o.mask.bias = &B1;
    test_run_sdpa(&b, &t, &o);
    CHECK(a.st == ATTN_OK && b.st == ATTN_OK);
    /* f32 rounding of b + c with |c| <= 50 moves scores by ~4e-6 */
    double d = max_diff(a.o, b.o, Lq * 8);
    CHECK_MSG(d <= 2e-5, "impl %d: a per-row bias constant changes O by %g",
              impl, d);
    test_run_free(&a);
    test_run_free(&b);
    test_qkv_free(&t);
}

int main(void) {
    const int64_t sizes[][2] = {{1, 1}, {3, 17}, {17, 3}, {64, 64}, {129, 40}};
    for (int m = 0; m < 2; m++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            permutation(impls[m], sizes[i][0], sizes[i][1]);
            constant_v_and_bounds(impls[m], sizes[i][0], sizes[i][1]);
        }
        bias_row_constant(impls[m]);
    }
    return check_done("test_properties");
}
