/* Diagnostics on constructed maps (uniform, one-hot, masked leakage,
 * NaN/Inf, rows that do not sum to 1) and the comparison of two maps. */
#include "attn.h"
#include "attn_viz.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void uniform_and_onehot(void) {
    enum { N = 2, H = 3, Lq = 5, Lk = 17 };
    static float u[N * H * Lq * Lk], o[N * H * Lq * Lk];
    for (int r = 0; r < N * H * Lq; r++)
        for (int j = 0; j < Lk; j++) {
            u[r * Lk + j] = 1.0f / Lk;
            o[r * Lk + j] = j == (r * 5) % Lk ? 1.0f : 0.0f;
        }
    attn_tensor U = attn_tensor_4d(u, ATTN_F32, N, H, Lq, Lk);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, N, H, Lq, Lk);
    attn_stats per[N * H], all;
    CHECK_STATUS(attn_stats_compute(&U, NULL, per, &all), ATTN_OK);
    CHECK(all.rows == N * H * Lq && all.entropy_rows == N * H * Lq);
    CHECK_NEAR(all.entropy_min, 1, 1e-6);
    CHECK_NEAR(all.entropy_mean, 1, 1e-6);
    CHECK_NEAR(all.entropy_max, 1, 1e-6);
    CHECK(all.verdict == ATTN_VERDICT_TOO_UNIFORM);
    CHECK(per[4].verdict == ATTN_VERDICT_TOO_UNIFORM && per[4].rows == Lq);
    CHECK_NEAR(all.max_weight, 1.0 / Lk, 1e-7);
    CHECK(all.row_sum_dev_max < 1e-6);
    char buf[512];
    size_t len;
    CHECK_STATUS(attn_stats_verdict(&all, buf, sizeof buf, &len), ATTN_OK);
    CHECK(strncmp(buf, "too uniform", 11) == 0 && len == strlen(buf));

    CHECK_STATUS(attn_stats_compute(&O, NULL, per, &all), ATTN_OK);
    CHECK_NEAR(all.entropy_max, 0, 0);
    CHECK_NEAR(all.entropy_mean, 0, 0);
    CHECK(all.verdict == ATTN_VERDICT_TOO_CONCENTRATED);
    CHECK(all.max_weight == 1 && all.row_sum_dev_max == 0);
    attn_stats_verdict(&all, buf, sizeof buf, NULL);
    CHECK(strstr(buf, "too concentrated") == buf);
    /* a one-hot map is no evidence of unscaled scores: no advice to
     * rescale (a previous-token head is one-hot and right) */
    CHECK(!strstr(buf, "sqrt") && !strstr(buf, "scale them") &&
          !strstr(buf, "temperature"));
    /* a sharp map that is right (a reversal head: 0.98 of each row on the
     * mirrored key, the rest spread) is sharp, not a fault: no flag, no
     * advice to rescale */
    {
        enum { R = 16 };
        float m[R * R];
        for (int i = 0; i < R; i++)
            for (int j = 0; j < R; j++)
                m[i * R + j] = j == R - 1 - i ? 0.98f : 0.02f / (R - 1);
        attn_tensor M = attn_tensor_4d(m, ATTN_F32, 1, 1, R, R);
        attn_stats one;
        CHECK_STATUS(attn_stats_compute(&M, NULL, NULL, &one), ATTN_OK);
        CHECK(one.entropy_mean > 0.01 && one.entropy_mean < 0.10);
        CHECK(one.verdict == 0);
        attn_stats_verdict(&one, buf, sizeof buf, NULL);
        CHECK_MSG(strstr(buf, "sharp") && !strstr(buf, "sqrt"), "%s", buf);
    }
    /* truncation keeps a terminated prefix and reports the full length */
    char small[8];
    CHECK_STATUS(attn_stats_verdict(&all, small, sizeof small, &len), ATTN_OK);
    CHECK(strlen(small) == 7 && len > 7);
    /* a verdict with flags this library does not know is refused */
    attn_stats odd = all;
    odd.verdict = 32u;
    CHECK_STATUS(attn_stats_verdict(&odd, buf, sizeof buf, &len),
                 ATTN_E_INVALID);

    /* a row with weights (0.5, 0.25, 0.25): entropy 1.5 ln 2 / ln 3 */
    double w3[3] = {0.5, 0.25, 0.25};
    attn_tensor W3 = attn_tensor_4d(w3, ATTN_F64, 1, 1, 1, 3);
    CHECK_STATUS(attn_stats_compute(&W3, NULL, NULL, &all), ATTN_OK);
    CHECK_NEAR(all.entropy_mean, 1.5 * log(2.0) / log(3.0), 1e-12);
    CHECK(all.verdict == 0);
    attn_stats_verdict(&all, buf, sizeof buf, NULL);
    CHECK(strstr(buf, "looks healthy") == buf);
}

static void leakage(void) {
    /* causal 4 x 4: rows renormalized over visible keys, plus leaks of
     * 0.125 at (0, 3) and 0.0625 at (2, 3) */
    double w[16] = {0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j <= i; j++) w[i * 4 + j] = 1.0 / (i + 1);
    w[0 * 4 + 3] = 0.125;
    w[2 * 4 + 3] = 0.0625;
    attn_tensor W = attn_tensor_4d(w, ATTN_F64, 1, 1, 4, 4);
    attn_mask m;
    attn_mask_init(&m);
    m.causal = 1;
    attn_stats all;
    CHECK_STATUS(attn_stats_compute(&W, &m, NULL, &all), ATTN_OK);
    CHECK(all.leak_count == 2);
    CHECK(all.leak_total == 0.1875);
    CHECK(all.leak_max == 0.125);
    CHECK(all.verdict & ATTN_VERDICT_MASK_LEAK);
    CHECK(all.verdict & ATTN_VERDICT_NOT_NORMALIZED);
    CHECK(all.row_sum_dev_max == 0.125);
    /* row 0 has one visible key: no entropy; rows 1..3 are uniform over
     * their visible keys (row 2 also leaks: renormalized, still 1) */
    CHECK(all.entropy_rows == 3);
    CHECK_NEAR(all.entropy_min, 1, 1e-12);
    CHECK_NEAR(all.entropy_max, 1, 1e-12);
    char buf[512];
    attn_stats_verdict(&all, buf, sizeof buf, NULL);
    CHECK(strstr(buf, "masked leakage: 2 masked positions") != NULL);
    CHECK(strstr(buf, "total 0.1875, largest 0.125") != NULL);

    /* without a mask there is no leak to see */
    CHECK_STATUS(attn_stats_compute(&W, NULL, NULL, &all), ATTN_OK);
    CHECK(all.leak_count == 0 && !(all.verdict & ATTN_VERDICT_MASK_LEAK));

    /* a fully masked row is expected to sum to 0 */
    double z[6] = {0, 0, 0, 0.5, 0.5, 0};
    attn_tensor Z = attn_tensor_4d(z, ATTN_F64, 1, 1, 2, 3);
    int64_t ql[1] = {1}; /* query 1 is padding: no visible key */
    attn_mask_init(&m);
    m.query_lengths = ql;
    CHECK_STATUS(attn_stats_compute(&Z, &m, NULL, &all), ATTN_OK);
    CHECK(all.rows_empty == 1);
    CHECK(all.leak_count == 2 && all.leak_total == 1.0);
    CHECK(all.row_sum_dev_max == 1.0); /* row 0 sums to 0, row 1 to 1 */
}

static void nonfinite(void) {
    float w[6] = {0.5f, NAN, 0.5f, INFINITY, 0.2f, 0.8f};
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 2, 3);
    attn_stats all;
    CHECK_STATUS(attn_stats_compute(&W, NULL, NULL, &all), ATTN_OK);
    CHECK(all.nan_count == 1 && all.inf_count == 1);
    CHECK(all.verdict & ATTN_VERDICT_NONFINITE);
    CHECK_NEAR(all.max_weight, 0.8, 1e-7);
    int32_t bad[4] = {0};
    attn_tensor B = attn_tensor_4d(bad, ATTN_I32, 1, 1, 2, 2);
    CHECK_STATUS(attn_stats_compute(&B, NULL, NULL, &all), ATTN_E_DTYPE);
    CHECK_STATUS(attn_stats_compute(&W, NULL, NULL, NULL), ATTN_E_INVALID);
    CHECK_STATUS(attn_stats_compute(NULL, NULL, NULL, &all), ATTN_E_INVALID);
    CHECK_STATUS(attn_stats_verdict(NULL, NULL, 0, NULL), ATTN_E_INVALID);
}

static void compare(void) {
    enum { L = 17 };
    static float a[3 * L * L], b[3 * L * L];
    unsigned long long s = 3;
    for (int r = 0; r < 3 * L; r++) {
        double sum = 0;
        for (int j = 0; j < L; j++)
            sum += a[r * L + j] = (float)exp(test_rand(&s) * 3);
        for (int j = 0; j < L; j++) a[r * L + j] = (float)(a[r * L + j] / sum);
    }
    attn_tensor A = attn_tensor_4d(a, ATTN_F32, 1, 3, L, L);
    attn_compare_result r;
    CHECK_STATUS(attn_compare_weights(&A, &A, &r), ATTN_OK);
    CHECK(r.max_abs == 0 && r.mean_abs == 0 && r.mean_kl == 0 && r.max_kl == 0);
    CHECK(r.rows == 3 * L);

    /* (1/2, 1/2) against (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln (2/3) = 1/2 ln (4/3);
     * (1, 0) against (1/2, 1/2): KL = ln 2 */
    double p[4] = {0.5, 0.5, 1, 0}, q[4] = {0.25, 0.75, 0.5, 0.5};
    attn_tensor P = attn_tensor_4d(p, ATTN_F64, 1, 1, 2, 2);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F64, 1, 1, 2, 2);
    CHECK_STATUS(attn_compare_weights(&P, &Q, &r), ATTN_OK);
    CHECK_NEAR(r.mean_kl, (0.5 * log(4.0 / 3.0) + log(2.0)) / 2, 1e-15);
    CHECK_NEAR(r.max_kl, log(2.0), 1e-15);
    CHECK_NEAR(r.max_abs, 0.5, 0);
    CHECK_NEAR(r.mean_abs, (0.25 + 0.25 + 0.5 + 0.5) / 4, 1e-15);
    /* b = 0 where a > 0: infinite */
    CHECK_STATUS(attn_compare_weights(&Q, &P, &r), ATTN_OK);
    CHECK(isinf(r.max_kl) && isinf(r.mean_kl));
    /* strided view: the transpose of b compared with itself */
    for (int i = 0; i < 3 * L * L; i++) b[i] = a[i];
    attn_tensor Bt = A;
    Bt.data = b;
    Bt.stride[2] = 1;
    Bt.stride[3] = L;
    attn_tensor At = Bt;
    At.data = a;
    CHECK_STATUS(attn_compare_weights(&At, &Bt, &r), ATTN_OK);
    CHECK(r.max_abs == 0);
    attn_tensor S = attn_tensor_4d(a, ATTN_F32, 1, 3, L, L - 1);
    CHECK_STATUS(attn_compare_weights(&A, &S, &r), ATTN_E_SHAPE);
    CHECK_STATUS(attn_compare_weights(&A, &A, NULL), ATTN_E_INVALID);
}

int main(void) {
    uniform_and_onehot();
    leakage();
    nonfinite();
    compare();
    return check_done("test_viz_stats");
}
