/* The reference scaled dot-product attention: plain loops, double
 * accumulation, the full score row materialized. It is the oracle that
 * every fast kernel is tested against, so it favours clarity over speed. */
#include "kernels.h"

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

/* Per-row scratch of the score pass: user functions' flags, derivatives
 * and a copy of the row (NULL when the mask has no user function). */
typedef struct {
    uint8_t *keep;
    double *dmod, *old;
    attn__ufn_err err;
} urow;

/* Scores of query row i of (b, h) against every key (qd: the row, kd: the
 * keys of its group): x = scale q.k_j, soft-capped, plus bias and ALiBi,
 * then the user's score_mod; -inf where masked (mask_mod included; the
 * order of attn_mask's doc). capd, if not NULL, receives d(capped)/dx =
 * 1 - tanh^2 per key, and u->dmod (backward) d(score_mod)/dx. *mx gets
 * the row's max over the keys and the sink (-inf when neither). Forward
 * and backward share it, so both see the very same scores. Nonzero when a
 * user function failed (u->err says how). */
static int score_row(const attn_mask *m, const attn__sdpa_dims *dm, int64_t b,
                     int64_t h, int64_t i, const double *qd, const double *kd,
                     double *s, double *capd, urow *u, int bwd, double *mx) {
    const int64_t Lq = dm->Lq, Lk = dm->Lk, Dk = dm->Dk;
    int64_t lo = 0, hi = 0;
    if (m->mask_mod) {
        /* asked for the row's range under padding, causal, window and
         * documents; the other parts are asked per pair below */
        attn__mask_row_range(m, b, i, Lq, Lk, &lo, &hi);
        attn__doc_range(m, b, i, Lq, Lk, &lo, &hi);
        if (attn__mask_mod_keep(m, b, h, i, lo, hi - lo, u->keep, &u->err))
            return 1;
    }
    attn_mask fixed = *m; /* visibility without asking mask_mod again */
    fixed.mask_mod = NULL;
    for (int64_t j = 0; j < Lk; j++) {
        s[j] = -INFINITY;
        if (capd) capd[j] = 1.0;
        if (m->mask_mod && (j < lo || j >= hi || !u->keep[j - lo])) continue;
        if (!attn_mask_visible(&fixed, b, h, i, j, Lq, Lk)) continue;
        double acc = 0.0;
        for (int64_t d = 0; d < Dk; d++) acc += qd[d] * kd[j * Dk + d];
        double x = dm->scale * acc;
        if (m->softcap > 0) {
            double t = tanh(x / m->softcap);
            x = m->softcap * t;
            if (capd) capd[j] = 1.0 - t * t;
        }
        s[j] = x + attn__bias_at(m, b, h, i, j) +
               attn__alibi_at(m, b, dm->H, h, i, j, Lq, Lk);
    }
    if (attn__score_mod_row_d(m, b, h, i, 0, Lk, s, bwd ? u->dmod : NULL,
                              u->old, &u->err))
        return 1;
    *mx = m->sinks ? m->sinks[h] : -INFINITY;
    for (int64_t j = 0; j < Lk; j++)
        if (s[j] > *mx) *mx = s[j];
    return 0;
}

static int urow_alloc(urow *u, const attn_mask *m, int64_t Lk) {
    memset(u, 0, sizeof *u);
    if (!m->mask_mod && !m->score_mod) return 0;
    u->keep = attn__alloc((size_t)Lk, 1, "reference mask_mod row");
    u->dmod = attn__alloc((size_t)Lk, sizeof(double), "reference dscore");
    u->old = attn__alloc((size_t)Lk, sizeof(double), "reference score copy");
    return !u->keep || !u->dmod || !u->old;
}

static void urow_free(urow *u) {
    attn__free(u->keep);
    attn__free(u->dmod);
    attn__free(u->old);
}

/* exp(sink - mx) of head h: the sink's share of the denominator. */
static double sink_term(const attn_mask *m, int64_t h, double mx) {
    return m->sinks ? exp(m->sinks[h] - mx) : 0.0;
}

attn_status attn__sdpa_ref_forward(const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   const attn__sdpa_dims *dm, attn_tensor *out,
                                   attn_tensor *weights, float *lse) {
    const attn_mask *m = &opts->mask;
    const int64_t Lq = dm->Lq, Lk = dm->Lk, Dk = dm->Dk, Dv = dm->Dv;
    const double p = opts->dropout_p, keep_scale = 1.0 / (1.0 - p);
    double *kd = attn__alloc((size_t)(Lk * Dk), sizeof(double), "reference k");
    double *vd = attn__alloc((size_t)(Lk * Dv), sizeof(double), "reference v");
    double *qd = attn__alloc((size_t)Dk, sizeof(double), "reference q row");
    double *s = attn__alloc((size_t)Lk, sizeof(double), "reference scores");
    double *o = attn__alloc((size_t)Dv, sizeof(double), "reference output");
    urow u;
    int ufail = urow_alloc(&u, m, Lk);
    attn_status st = ATTN_OK;
    if (!kd || !vd || !qd || !s || !o || ufail) {
        st = ATTN_E_NOMEM;
        goto done;
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
                double mx;
                if (score_row(m, dm, b, h, i, qd, kd, s, NULL, &u, 0, &mx)) {
                    st = attn__ufn_status(&u.err);
                    goto done;
                }
                double sum = mx > -INFINITY ? sink_term(m, h, mx) : 0.0;
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
                        for (int64_t d = 0; d < Dv; d++)
                            o[d] += w * vd[j * Dv + d];
                }
                for (int64_t d = 0; d < Dv; d++) store(out, b, h, i, d, o[d]);
                if (lse)
                    lse[(b * dm->H + h) * Lq + i] =
                        mx > -INFINITY ? (float)(mx + log(sum)) : -INFINITY;
            }
        }
done:
    urow_free(&u);
    attn__free(kd);
    attn__free(vd);
    attn__free(qd);
    attn__free(s);
    attn__free(o);
    return st;
}

/* ---- backward ---------------------------------------------------------- */

/* Adds x into element (i0, i1, i2, i3) of an f32 or f64 gradient. */
static void add_to(attn_tensor *t, int64_t i0, int64_t i1, int64_t i2,
                   int64_t i3, double x) {
    int64_t o = attn__off(t, i0, i1, i2, i3);
    if (t->dtype == ATTN_F64)
        ((double *)t->data)[o] += x;
    else
        ((float *)t->data)[o] = (float)((double)((float *)t->data)[o] + x);
}

/* Cell of the dBias accumulator that score (b, h, i, j) feeds: axes the bias
 * broadcasts (size 1 or stride 0) collapse to index 0, so the accumulator
 * sums over them. Row-major over the bias's shape. */
static int64_t bias_cell(const attn_tensor *t, int64_t b, int64_t h, int64_t i,
                         int64_t j) {
    const int64_t x[4] = {b, h, i, j};
    int64_t c = 0;
    for (int a = 0; a < 4; a++) {
        int bc = t->shape[a] == 1 || t->stride[a] == 0;
        c = c * t->shape[a] + (bc ? 0 : x[a]);
    }
    return c;
}

/*
 * With s_j = scale q.k_j + bias_ij over visible keys, P = softmax(s), kept
 * weights W_j = P_j z_j / (1 - p) (z_j the dropout decision) and
 * O = sum_j W_j v_j:
 *   dV_j += W_j dO,   dP_j = (dO . v_j) z_j / (1 - p),
 *   dS_j = P_j (dP_j - sum_l P_l dP_l),
 *   dQ += scale sum_j dS_j k_j,   dK_j += scale dS_j q,   dBias_ij += dS_j.
 * With a user score_mod, dS_j is first multiplied by its dscore (the
 * derivative at the biased score: dBias gets that). With soft-capping, dQ
 * and dK see dS_j (1 - tanh^2) (the cap's slope; dBias does not); a sink adds P_sink = exp(sink - lse) to the softmax and
 * receives dSink = -P_sink sum_l P_l dP_l (it carries no value).
 * Everything is recomputed in double from q, k, v, so a gradient check in
 * double sees no f32 rounding from the forward's out or lse.
 */
attn_status attn__sdpa_ref_backward(const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v,
                                    const attn_tensor *dout,
                                    const attn_sdpa_opts *opts,
                                    const attn__sdpa_dims *dm, attn_tensor *dq,
                                    attn_tensor *dk, attn_tensor *dv,
                                    attn_tensor *dbias) {
    const attn_mask *m = &opts->mask;
    const int64_t Lq = dm->Lq, Lk = dm->Lk, Dk = dm->Dk, Dv = dm->Dv;
    const double p = opts->dropout_p, keep_scale = 1.0 / (1.0 - p);
    const attn_tensor *bias = dbias ? m->bias : NULL;
    size_t nbias = bias ? (size_t)attn_tensor_numel(bias) : 1;
    double *kd = attn__alloc((size_t)(Lk * Dk), sizeof(double), "reference k");
    double *vd = attn__alloc((size_t)(Lk * Dv), sizeof(double), "reference v");
    double *dkd =
        attn__alloc((size_t)(Lk * Dk), sizeof(double), "reference dk");
    double *dvd =
        attn__alloc((size_t)(Lk * Dv), sizeof(double), "reference dv");
    double *qd = attn__alloc((size_t)Dk, sizeof(double), "reference q row");
    double *dqd = attn__alloc((size_t)Dk, sizeof(double), "reference dq row");
    double *dod = attn__alloc((size_t)Dv, sizeof(double), "reference dout row");
    double *s = attn__alloc((size_t)Lk, sizeof(double), "reference scores");
    double *dp = attn__alloc((size_t)Lk, sizeof(double), "reference dP");
    double *gb = attn__alloc(nbias, sizeof(double), "reference dbias");
    double *capd = attn__alloc((size_t)Lk, sizeof(double), "reference dcap");
    double *gs = attn__alloc((size_t)dm->H, sizeof(double), "reference dsinks");
    attn_status st = ATTN_OK;
    urow u;
    int ufail = urow_alloc(&u, m, Lk);
    if (!kd || !vd || !dkd || !dvd || !qd || !dqd || !dod || !s || !dp || !gb ||
        !capd || !gs || ufail) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    memset(gb, 0, nbias * sizeof(double));
    memset(gs, 0, (size_t)dm->H * sizeof(double));
    for (int64_t b = 0; b < dm->B; b++)
        for (int64_t hk = 0; hk < dm->Hkv; hk++) {
            load_slice(k, b, hk, kd);
            load_slice(v, b, hk, vd);
            memset(dkd, 0, (size_t)(Lk * Dk) * sizeof(double));
            memset(dvd, 0, (size_t)(Lk * Dv) * sizeof(double));
            /* the heads of a group share k and v: their gradients sum */
            for (int64_t h = hk * dm->group; h < (hk + 1) * dm->group; h++)
                for (int64_t i = 0; i < Lq; i++) {
                    for (int64_t d = 0; d < Dk; d++)
                        qd[d] = attn_tensor_get(q, b, h, i, d);
                    double mx;
                    if (score_row(m, dm, b, h, i, qd, kd, s, capd, &u, 1,
                                  &mx)) {
                        st = attn__ufn_status(&u.err);
                        goto done;
                    }
                    if (mx == -INFINITY)
                        continue; /* fully masked: no gradient */
                    double sum = sink_term(m, h, mx);
                    for (int64_t j = 0; j < Lk; j++)
                        if (s[j] > -INFINITY) sum += exp(s[j] - mx);
                    for (int64_t d = 0; d < Dv; d++)
                        dod[d] = attn_tensor_get(dout, b, h, i, d);
                    /* s[j] becomes P_j; dp[j] becomes dP_j */
                    double dsum = 0.0;
                    for (int64_t j = 0; j < Lk; j++) {
                        dp[j] = 0.0;
                        if (s[j] == -INFINITY) {
                            s[j] = 0.0;
                            continue;
                        }
                        s[j] = exp(s[j] - mx) / sum;
                        double z = 1.0;
                        if (p > 0)
                            z = attn_dropout_kept(opts->seed, p, b, h, i, j)
                                    ? keep_scale
                                    : 0.0;
                        if (z == 0.0) continue;
                        double w = s[j] * z, acc = 0.0;
                        for (int64_t d = 0; d < Dv; d++) {
                            acc += dod[d] * vd[j * Dv + d];
                            dvd[j * Dv + d] += w * dod[d];
                        }
                        dp[j] = acc * z;
                        dsum += s[j] * dp[j];
                    }
                    /* the sink: P_sink = exp(sink - mx) / sum, dP = 0 */
                    if (m->sinks_grad)
                        gs[h] -= sink_term(m, h, mx) / sum * dsum;
                    memset(dqd, 0, (size_t)Dk * sizeof(double));
                    for (int64_t j = 0; j < Lk; j++) {
                        if (s[j] == 0.0) continue;
                        double ds = s[j] * (dp[j] - dsum);
                        if (m->score_mod) ds *= u.dmod[j];
                        if (bias) gb[bias_cell(bias, b, h, i, j)] += ds;
                        ds *= dm->scale * capd[j];
                        for (int64_t d = 0; d < Dk; d++) {
                            dqd[d] += ds * kd[j * Dk + d];
                            dkd[j * Dk + d] += ds * qd[d];
                        }
                    }
                    for (int64_t d = 0; d < Dk; d++)
                        add_to(dq, b, h, i, d, dqd[d]);
                }
            for (int64_t j = 0; j < Lk; j++) {
                for (int64_t d = 0; d < Dk; d++)
                    add_to(dk, b, hk, j, d, dkd[j * Dk + d]);
                for (int64_t d = 0; d < Dv; d++)
                    add_to(dv, b, hk, j, d, dvd[j * Dv + d]);
            }
        }
    if (bias)
        for (int64_t a = 0; a < bias->shape[0]; a++)
            for (int64_t c = 0; c < bias->shape[1]; c++)
                for (int64_t i = 0; i < bias->shape[2]; i++)
                    for (int64_t j = 0; j < bias->shape[3]; j++)
                        add_to(dbias, a, c, i, j,
                               gb[bias_cell(bias, a, c, i, j)]);
    if (m->sinks_grad)
        for (int64_t h = 0; h < dm->H; h++) m->sinks_grad[h] += gs[h];
done:
    urow_free(&u);
    attn__free(capd);
    attn__free(gs);
    attn__free(kd);
    attn__free(vd);
    attn__free(dkd);
    attn__free(dvd);
    attn__free(qd);
    attn__free(dqd);
    attn__free(dod);
    attn__free(s);
    attn__free(dp);
    attn__free(gb);
    return st;
}
