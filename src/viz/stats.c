/* Diagnostics of attention weights (row sums, normalized entropy, largest
 * weight, leakage onto masked keys, NaN/Inf) with a verdict in plain words,
 * and the comparison of two weight tensors (absolute difference, per-row
 * KL divergence). Reads weights only. */
#include "viz_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define UNIFORM_AT 0.95
/* Sharp maps are often right (a reversal head puts 0.98 of each row on
 * one key, entropy about 0.05): that is a property, said as such. Only a
 * softmax saturated to one-hot at float precision, what unscaled scores
 * of wide heads give, is flagged with advice. */
#define SHARP_AT 0.10
#define SATURATED_AT 0.01
#define ROWSUM_TOL 1e-3

/* Running sums of one map (or all); turned into attn_stats at the end. */
typedef struct {
    attn_stats s;
    double dev_sum, ent_sum;
} acc;

static void acc_init(acc *a) {
    memset(a, 0, sizeof *a);
    a->s.entropy_min = INFINITY;
    a->s.entropy_max = -INFINITY;
}

static void acc_merge(acc *dst, const acc *src) {
    attn_stats *d = &dst->s;
    const attn_stats *s = &src->s;
    d->rows += s->rows;
    d->rows_empty += s->rows_empty;
    d->row_sum_dev_max = fmax(d->row_sum_dev_max, s->row_sum_dev_max);
    d->entropy_rows += s->entropy_rows;
    d->entropy_min = fmin(d->entropy_min, s->entropy_min);
    d->entropy_max = fmax(d->entropy_max, s->entropy_max);
    d->max_weight = fmax(d->max_weight, s->max_weight);
    d->leak_total += s->leak_total;
    d->leak_max = fmax(d->leak_max, s->leak_max);
    d->leak_count += s->leak_count;
    d->nan_count += s->nan_count;
    d->inf_count += s->inf_count;
    dst->dev_sum += src->dev_sum;
    dst->ent_sum += src->ent_sum;
}

static attn_stats acc_finish(const acc *a) {
    attn_stats s = a->s;
    s.row_sum_dev_mean = s.rows ? a->dev_sum / (double)s.rows : 0;
    if (s.entropy_rows) {
        s.entropy_mean = a->ent_sum / (double)s.entropy_rows;
    } else {
        s.entropy_min = s.entropy_max = s.entropy_mean = NAN;
    }
    s.verdict = 0;
    if (s.entropy_rows && s.entropy_mean >= UNIFORM_AT)
        s.verdict |= ATTN_VERDICT_TOO_UNIFORM;
    if (s.entropy_rows && s.entropy_mean <= SATURATED_AT)
        s.verdict |= ATTN_VERDICT_TOO_CONCENTRATED;
    if (s.leak_count) s.verdict |= ATTN_VERDICT_MASK_LEAK;
    if (s.row_sum_dev_max > ROWSUM_TOL)
        s.verdict |= ATTN_VERDICT_NOT_NORMALIZED;
    if (s.nan_count || s.inf_count) s.verdict |= ATTN_VERDICT_NONFINITE;
    return s;
}

static void map_stats(const attn_tensor *w, const attn_mask *mask, int64_t n,
                      int64_t h, acc *a) {
    int64_t Lq = w->shape[2], Lk = w->shape[3];
    for (int64_t i = 0; i < Lq; i++) {
        double sum = 0, plogp = 0, vis_sum = 0;
        int64_t visible = 0;
        for (int64_t j = 0; j < Lk; j++) {
            double x = attn_tensor_get(w, n, h, i, j);
            int vis = mask ? attn_mask_visible(mask, n, h, i, j, Lq, Lk) : 1;
            visible += vis;
            if (isnan(x)) {
                a->s.nan_count++;
                continue;
            }
            if (isinf(x)) {
                a->s.inf_count++;
                continue;
            }
            sum += x;
            if (x > a->s.max_weight) a->s.max_weight = x;
            if (!vis) {
                if (x != 0) {
                    a->s.leak_count++;
                    a->s.leak_total += fabs(x);
                    a->s.leak_max = fmax(a->s.leak_max, fabs(x));
                }
            } else if (x > 0) {
                plogp += x * log(x);
                vis_sum += x;
            }
        }
        a->s.rows++;
        if (!visible) a->s.rows_empty++;
        double dev = fabs(sum - (visible ? 1.0 : 0.0));
        a->dev_sum += dev;
        a->s.row_sum_dev_max = fmax(a->s.row_sum_dev_max, dev);
        if (visible >= 2 && vis_sum > 0) {
            /* entropy of the row renormalized over its visible mass (the
             * same as the plain entropy when the row sums to 1 there):
             * H = log s - sum p log p / s */
            double e = (log(vis_sum) - plogp / vis_sum) / log((double)visible);
            if (e < 0) e = 0; /* -0 and rounding below zero */
            a->s.entropy_rows++;
            a->ent_sum += e;
            a->s.entropy_min = fmin(a->s.entropy_min, e);
            a->s.entropy_max = fmax(a->s.entropy_max, e);
        }
    }
}

attn_status attn_stats_compute(const attn_tensor *w, const attn_mask *mask,
                               attn_stats *per_head, attn_stats *overall) {
    attn_status st = attn__viz_check_weights(w, "w");
    if (st != ATTN_OK) return st;
    if (!overall) return attn__fail(ATTN_E_INVALID, "overall is NULL");
    if (mask) {
        st = attn_mask_check(mask, w->shape[0], w->shape[1], w->shape[2],
                             w->shape[3]);
        if (st != ATTN_OK) return st;
    }
    acc all;
    acc_init(&all);
    for (int64_t n = 0; n < w->shape[0]; n++)
        for (int64_t h = 0; h < w->shape[1]; h++) {
            acc one;
            acc_init(&one);
            map_stats(w, mask, n, h, &one);
            if (per_head) per_head[n * w->shape[1] + h] = acc_finish(&one);
            acc_merge(&all, &one);
        }
    *overall = acc_finish(&all);
    return ATTN_OK;
}

attn_status attn_stats_verdict(const attn_stats *s, char *buf, size_t cap,
                               size_t *len) {
    if (!s) return attn__fail(ATTN_E_INVALID, "stats is NULL");
    if (!buf && cap)
        return attn__fail(ATTN_E_INVALID, "buf is NULL but cap is %zu", cap);
    const unsigned known = ATTN_VERDICT_TOO_UNIFORM |
                           ATTN_VERDICT_TOO_CONCENTRATED |
                           ATTN_VERDICT_MASK_LEAK |
                           ATTN_VERDICT_NOT_NORMALIZED | ATTN_VERDICT_NONFINITE;
    /* unknown flags alone would leave the text empty (and b.s NULL) */
    if (s->verdict & ~known)
        return attn__fail(ATTN_E_INVALID,
                          "stats verdict 0x%x has unknown flags "
                          "0x%x",
                          s->verdict, s->verdict & ~known);
    viz_buf b;
    memset(&b, 0, sizeof b);
    unsigned v = s->verdict;
    if (!v)
        attn__viz_bprintf(
            &b,
            "looks healthy: rows sum to 1 (largest deviation "
            "%.2g), mean normalized entropy %.3f%s, no weight on "
            "masked keys, no NaN or Inf.",
            s->row_sum_dev_max, s->entropy_mean,
            s->entropy_rows && s->entropy_mean <= SHARP_AT
                ? " (sharp: most rows put nearly all their weight on "
                  "one key, as a task that copies or aligns "
                  "positions wants)"
                : "");
    if (v & ATTN_VERDICT_TOO_UNIFORM)
        attn__viz_bprintf(
            &b,
            "too uniform: mean normalized entropy %.3f (>= %.2f), "
            "rows barely prefer any key; check that queries and keys "
            "carry information, the scale (1/sqrt(d) or a "
            "temperature) and the embedding size.",
            s->entropy_mean, UNIFORM_AT);
    if (v & ATTN_VERDICT_TOO_CONCENTRATED)
        attn__viz_bprintf(&b,
                          "%stoo concentrated: mean normalized entropy %.3f "
                          "(<= %.2f), rows are one-hot to float precision. "
                          "A head that follows one position (the previous "
                          "token, an alignment) is right to be; while "
                          "training, such a saturated softmax passes almost "
                          "no gradient to its scores. Weights alone do not "
                          "show why: the scores before the softmax do.",
                          b.len ? " " : "", s->entropy_mean, SATURATED_AT);
    if (v & ATTN_VERDICT_MASK_LEAK)
        attn__viz_bprintf(
            &b,
            "%smasked leakage: %lld masked positions carry weight "
            "(total %.6g, largest %.6g); masked scores must be -inf "
            "before the softmax.",
            b.len ? " " : "", (long long)s->leak_count, s->leak_total,
            s->leak_max);
    if (v & ATTN_VERDICT_NOT_NORMALIZED)
        attn__viz_bprintf(&b,
                          "%snot normalized: a row sum is off by %.3g; the "
                          "softmax must run over the key axis (the last one).",
                          b.len ? " " : "", s->row_sum_dev_max);
    if (v & ATTN_VERDICT_NONFINITE)
        attn__viz_bprintf(
            &b,
            "%snon-finite: %lld NaN and %lld Inf weights; "
            "subtract the row maximum before exp and look for rows "
            "with every key masked.",
            b.len ? " " : "", (long long)s->nan_count, (long long)s->inf_count);
    if (b.oom) {
        attn__viz_buf_free(&b);
        return attn__fail(ATTN_E_NOMEM, "out of memory writing the verdict");
    }
    if (len) *len = b.len;
    if (cap) {
        size_t n = b.len < cap - 1 ? b.len : cap - 1;
        memcpy(buf, b.s, n);
        buf[n] = '\0';
    }
    attn__viz_buf_free(&b);
    return ATTN_OK;
}

attn_status attn_compare_weights(const attn_tensor *a, const attn_tensor *b,
                                 attn_compare_result *r) {
    attn_status st = attn__viz_check_weights(a, "a");
    if (st == ATTN_OK) st = attn__viz_check_weights(b, "b");
    if (st != ATTN_OK) return st;
    if (!r) return attn__fail(ATTN_E_INVALID, "result is NULL");
    if ((st = attn__viz_same_shape(a, b))) return st;
    memset(r, 0, sizeof *r);
    double abs_sum = 0, kl_sum = 0;
    int64_t counted = 0;
    for (int64_t n = 0; n < a->shape[0]; n++)
        for (int64_t h = 0; h < a->shape[1]; h++)
            for (int64_t i = 0; i < a->shape[2]; i++) {
                double kl = 0, mass = 0;
                for (int64_t j = 0; j < a->shape[3]; j++) {
                    double x = attn_tensor_get(a, n, h, i, j);
                    double y = attn_tensor_get(b, n, h, i, j);
                    if (!isfinite(x) || !isfinite(y)) {
                        r->nonfinite++;
                        continue;
                    }
                    double d = fabs(x - y);
                    abs_sum += d;
                    counted++;
                    if (d > r->max_abs) r->max_abs = d;
                    if (x > 0) {
                        mass += x;
                        kl += y > 0 ? x * log(x / y) : INFINITY;
                    }
                }
                if (mass > 0) {
                    r->rows++;
                    kl_sum += kl;
                    if (kl > r->max_kl) r->max_kl = kl;
                }
            }
    r->mean_abs = counted ? abs_sum / (double)counted : 0;
    r->mean_kl = r->rows ? kl_sum / (double)r->rows : 0;
    return ATTN_OK;
}
