/* The vectorized helpers of kernels/vec.h on every level this CPU has:
 * exp against libm over a wide range (including -inf, values whose exp is
 * subnormal or overflows, 0), and the row max / exp-sum / scale helpers
 * against plain loops. */
#include "attn.h"
#include "check.h"
#include "../src/kernels/vec.h"

#include <float.h>
#include <math.h>
#include <string.h>

static double ulp_err(float got, double want) {
    if (want == 0.0) return got == 0.0f ? 0.0 : INFINITY;
    /* ulp of the float nearest want */
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, e - 24);
    if (fabs(want) < FLT_MIN) ulp = ldexp(1.0, -149);
    return fabs((double)got - want) / ulp;
}

static void test_exp(const attn__vec_ops *ops) {
    /* special values */
    const float sp[] = {-INFINITY, -1e30f, -1000.0f, -104.0f, -88.0f,  -87.34f,
                        0.0f,      -0.0f,  1e-10f,   -1e-10f, 1.0f,    -1.0f,
                        88.7f,     88.73f, 89.0f,    1000.0f, INFINITY};
    const int nsp = (int)(sizeof sp / sizeof sp[0]);
    float y[32];
    ops->exp(sp, y, nsp);
    CHECK_MSG(y[0] == 0.0f, "level %d exp(-inf) = %g", ops->level, y[0]);
    CHECK(y[1] == 0.0f && y[2] == 0.0f && y[3] == 0.0f);
    CHECK(y[6] == 1.0f && y[7] == 1.0f);
    CHECK(fabsf(y[8] - 1.0f) <= FLT_EPSILON &&
          fabsf(y[9] - 1.0f) <= FLT_EPSILON);
    CHECK(isfinite(y[12]) && y[12] > 1e38f);
    CHECK(isinf(y[13]) && isinf(y[14]) && isinf(y[15]) && isinf(y[16]));
    /* just below ln(FLT_MIN): flushed to 0 or at most FLT_MIN */
    CHECK(y[4] <= FLT_MIN && y[5] <= FLT_MIN);

    /* a dense sweep of [-87.3, 88.7] in pieces of odd lengths (tails) */
    enum { N = 200003 };
    static float xs[N], ys[N];
    for (int i = 0; i < N; i++)
        xs[i] = -87.3f + (88.7f + 87.3f) * (float)i / (float)(N - 1);
    for (int at = 0, len = 1; at < N; at += len, len = len % 37 + 1) {
        int n = at + len <= N ? len : N - at;
        ops->exp(xs + at, ys + at, n);
    }
    double worst = 0.0;
    int worst_i = 0;
    for (int i = 0; i < N; i++) {
        double e = ulp_err(ys[i], exp((double)xs[i]));
        if (e > worst) {
            worst = e;
            worst_i = i;
        }
    }
    printf("level %d: exp max error %.2f ulp at x = %.9g\n", ops->level, worst,
           (double)xs[worst_i]);
    CHECK_MSG(worst <= 3.0, "level %d exp error %.2f ulp at %.9g", ops->level,
              worst, (double)xs[worst_i]);
    /* in place and large negatives (the softmax's range) */
    unsigned long long st = 42;
    double worst_neg = 0.0;
    for (int i = 0; i < N; i++) xs[i] = (float)(43.0 * (test_rand(&st) - 1.0));
    memcpy(ys, xs, sizeof xs);
    ops->exp(ys, ys, N);
    for (int i = 0; i < N; i++) {
        double e = ulp_err(ys[i], exp((double)xs[i]));
        if (e > worst_neg) worst_neg = e;
    }
    CHECK_MSG(worst_neg <= 3.0, "level %d in-place exp error %.2f ulp",
              ops->level, worst_neg);
}

static void test_rows(const attn__vec_ops *ops) {
    unsigned long long st = 7;
    float x[300], y[300];
    for (int n = 0; n < 300; n += (n < 40 ? 1 : 37)) {
        for (int i = 0; i < n; i++) {
            x[i] = (float)(5.0 * test_rand(&st));
            if (i % 5 == 3) x[i] = -INFINITY;
        }
        /* max */
        float want = -INFINITY;
        for (int i = 0; i < n; i++) want = x[i] > want ? x[i] : want;
        CHECK_MSG(ops->max(x, n) == want, "level %d n %d max", ops->level, n);
        /* exp_sub_sum: exp(x - m) in place, and the sum */
        float m = 1.5f;
        memcpy(y, x, sizeof x);
        float s = ops->exp_sub_sum(y, n, m);
        double ws = 0.0, werr = 0.0;
        for (int i = 0; i < n; i++) {
            double e = exp((double)x[i] - m);
            ws += e;
            if (x[i] == -INFINITY) CHECK(y[i] == 0.0f);
            double r = fabs(y[i] - e) / (e > 0 ? e : 1.0);
            if (r > werr) werr = r;
        }
        CHECK_MSG(werr <= 4e-7, "level %d n %d exp_sub_sum element error %g",
                  ops->level, n, werr);
        CHECK_MSG(fabs(s - ws) <= 1e-6 * (ws > 1 ? ws : 1),
                  "level %d n %d sum %g want %g", ops->level, n, s, ws);
        /* beyond n nothing is touched */
        if (n < 300) CHECK(memcmp(y + n, x + n, sizeof(float)) == 0);
        /* scale */
        for (int i = 0; i < n; i++) y[i] = (float)i;
        ops->scale(y, n, 0.5f);
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= y[i] == 0.5f * (float)i;
        CHECK(ok);
    }
    /* a row of -inf only: max is -inf */
    for (int i = 0; i < 21; i++) x[i] = -INFINITY;
    CHECK(ops->max(x, 21) == -INFINITY);
    CHECK(ops->max(x, 0) == -INFINITY);
}

/* soft-capping against libm's tanh in double: the scores a kernel sees
 * (wide range, both signs, tiny ones, ones past the clamp) at odd lengths,
 * the slope 1 - tanh^2, |result| <= cap, and nothing beyond n touched */
static void test_softcap(const attn__vec_ops *ops) {
    unsigned long long st = 11;
    enum { N = 1000 };
    static float x[N + 1], y[N + 1], d[N + 1];
    const float caps[] = {1.0f, 30.0f, 50.0f};
    for (int c = 0; c < 3; c++) {
        const float cap = caps[c];
        double worst = 0.0, worst_d = 0.0;
        for (int n = 0; n <= N; n += (n < 20 ? 1 : 129)) {
            for (int i = 0; i < n; i++) {
                double u = test_rand(&st) * 2.0 - 1.0;
                x[i] = (float)(i % 7 == 0   ? u * 1e-5 * cap
                               : i % 7 == 1 ? u * 40.0 * cap
                                            : u * 5.0 * cap);
            }
            x[n] = y[n] = d[n] = 1234.5f;
            memcpy(y, x, sizeof(float) * (size_t)n);
            ops->softcap(y, n, cap, d);
            CHECK(y[n] == 1234.5f && d[n] == 1234.5f);
            for (int i = 0; i < n; i++) {
                double t = tanh((double)(x[i] / cap));
                double want = cap * t;
                /* error relative to the result, or to the float's ulp of
                 * cap when the result is tiny */
                double e =
                    fabs(y[i] - want) / fmax(fabs(want), cap * 1.2e-7 * 1e-3);
                if (e > worst) worst = e;
                double de = fabs(d[i] - (1.0 - t * t));
                if (de > worst_d) worst_d = de;
                CHECK_MSG(fabsf(y[i]) <= cap, "level %d: |%g| > cap %g",
                          ops->level, (double)y[i], (double)cap);
            }
        }
        printf("level %d cap %g: soft-cap max relative error %.3g, slope "
               "%.3g\n",
               ops->level, (double)cap, worst, worst_d);
        CHECK_MSG(worst <= 6e-7, "level %d cap %g soft-cap error %g",
                  ops->level, (double)cap, worst);
        CHECK_MSG(worst_d <= 1.5e-6, "level %d cap %g slope error %g",
                  ops->level, (double)cap, worst_d);
    }
    /* no slope asked: capd NULL is fine; huge scores go to +-cap, odd */
    float z[3] = {-1e30f, 0.0f, 1e30f};
    ops->softcap(z, 3, 2.0f, NULL);
    CHECK(fabsf(z[0] + 2.0f) <= 1e-6f && z[1] == 0.0f &&
          fabsf(z[2] - 2.0f) <= 1e-6f && z[0] == -z[2]);
    CHECK(attn__vec_tanh1(-3.0f) < 0 && attn__vec_tanh1(3.0f) > 0);
}

int main(void) {
    attn__vec_level best = attn__vec_best();
    printf("best vector level on this CPU: %d\n", best);
    for (int l = ATTN__VEC_SCALAR; l <= (int)best; l++) {
        const attn__vec_ops *ops = attn__vec_table((attn__vec_level)l);
        CHECK(ops->level == (attn__vec_level)l);
        test_exp(ops);
        test_rows(ops);
        test_softcap(ops);
    }
    /* the cap used by tests to force a level */
    attn__vec_set_max_level(ATTN__VEC_SCALAR);
    CHECK(attn__vec_get()->level == ATTN__VEC_SCALAR);
    attn__vec_set_max_level(ATTN__VEC_AVX512);
    CHECK(attn__vec_get()->level == best);
    return check_done("test_vec");
}
