/* Loss and optimizer: softmax cross-entropy with an ignore index, global
 * norm clipping and AdamW with warmup and cosine decay. Every sum runs in
 * a fixed order in double, so results do not depend on the thread count. */
#include "attn_train.h"
#include "internal.h"

#include <math.h>
#include <string.h>

attn_status attn_cross_entropy(int64_t n, int64_t classes, const float *logits,
                               const int32_t *targets, int32_t ignore_index,
                               double *loss, float *dlogits, int64_t *counted,
                               int64_t *correct) {
    ATTN__NONNULL("logits, targets, loss", logits, targets, loss);
    if (n < 1 || classes < 1)
        return attn__fail(ATTN_E_SHAPE,
                          "cross-entropy needs n >= 1 and "
                          "classes >= 1, not %lld and %lld",
                          (long long)n, (long long)classes);
    int64_t total;
    if (!attn__mul_i64(n, classes, &total))
        return attn__fail(ATTN_E_NOMEM, "n x classes overflows");
    int64_t cnt = 0;
    for (int64_t r = 0; r < n; r++) {
        const int32_t t = targets[r];
        if (t == ignore_index) continue;
        if (t < 0 || t >= classes)
            return attn__fail(ATTN_E_INVALID,
                              "targets[%lld] is %d; classes "
                              "are 0..%lld (ignore index %d)",
                              (long long)r, t, (long long)classes - 1,
                              ignore_index);
        cnt++;
    }
    for (int64_t i = 0; i < total; i++)
        if (!isfinite(logits[i]))
            return attn__fail(ATTN_E_NONFINITE,
                              "logits[%lld] (row %lld) is "
                              "%s",
                              (long long)i, (long long)(i / classes),
                              isnan(logits[i]) ? "NaN" : "Inf");
    double sum = 0;
    int64_t good = 0;
    const double inv = cnt ? 1.0 / (double)cnt : 0.0;
    for (int64_t r = 0; r < n; r++) {
        const float *z = logits + r * classes;
        float *dz = dlogits ? dlogits + r * classes : NULL;
        const int32_t t = targets[r];
        if (t == ignore_index) {
            if (dz) memset(dz, 0, (size_t)classes * sizeof *dz);
            continue;
        }
        int64_t arg = 0;
        for (int64_t c = 1; c < classes; c++)
            if (z[c] > z[arg]) arg = c;
        const double mx = z[arg];
        double se = 0;
        for (int64_t c = 0; c < classes; c++) se += exp((double)z[c] - mx);
        /* cppcheck-suppress invalidFunctionArg ; se >= 1 (term c = arg) */
        const double lse = mx + log(se);
        sum += lse - (double)z[t];
        good += arg == t;
        if (dz)
            for (int64_t c = 0; c < classes; c++)
                dz[c] = (float)((exp((double)z[c] - lse) - (c == t)) * inv);
    }
    *loss = sum * inv;
    if (counted) *counted = cnt;
    if (correct) *correct = good;
    return ATTN_OK;
}

void attn_adamw_config_init(attn_adamw_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->lr = 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.98;
    c->eps = 1e-9;
    c->weight_decay = 0.01;
    c->warmup = 100;
    c->decay_steps = 0;
    c->min_lr = 0;
    c->clip_norm = 1.0;
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0; }

attn_status attn_adamw_check(const attn_adamw_config *c) {
    if (!c) return attn__fail(ATTN_E_INVALID, "optimizer config is NULL");
    if (!(isfinite(c->lr) && c->lr > 0))
        return attn__fail(ATTN_E_INVALID, "lr is %g; it must be positive",
                          c->lr);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return attn__fail(ATTN_E_INVALID,
                          "betas are %g, %g; each must be in "
                          "[0, 1)",
                          c->beta1, c->beta2);
    if (!(isfinite(c->eps) && c->eps > 0))
        return attn__fail(ATTN_E_INVALID, "eps is %g; it must be positive",
                          c->eps);
    if (!finite_nonneg(c->weight_decay) || !finite_nonneg(c->min_lr) ||
        isnan(c->clip_norm) || isinf(c->clip_norm))
        return attn__fail(ATTN_E_INVALID,
                          "weight decay %g, min_lr %g and "
                          "clip_norm %g must be finite (the first two >= 0)",
                          c->weight_decay, c->min_lr, c->clip_norm);
    if (c->warmup < 0 || c->decay_steps < 0)
        return attn__fail(ATTN_E_INVALID,
                          "warmup %lld and decay_steps %lld "
                          "must be >= 0",
                          (long long)c->warmup, (long long)c->decay_steps);
    return ATTN_OK;
}

double attn_adamw_lr(const attn_adamw_config *c, int64_t step) {
    if (!c) return 0;
    if (step < 0) step = 0;
    if (step < c->warmup) return c->lr * (double)(step + 1) / (double)c->warmup;
    if (c->decay_steps <= c->warmup) return c->lr;
    if (step >= c->decay_steps) return c->min_lr < c->lr ? c->min_lr : c->lr;
    const double pi = 3.14159265358979323846;
    double t =
        (double)(step - c->warmup) / (double)(c->decay_steps - c->warmup);
    double lo = c->min_lr < c->lr ? c->min_lr : c->lr;
    return lo + 0.5 * (c->lr - lo) * (1.0 + cos(pi * t));
}

attn_status attn_clip_grad_norm(float *g, int64_t n, double max_norm,
                                double *norm) {
    if (!g || !norm)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", g ? "norm" : "grads");
    if (n < 0) return attn__fail(ATTN_E_SHAPE, "n is %lld (< 0)", (long long)n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    if (!isfinite(s)) {
        *norm = s;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(g[i]))
                return attn__fail(ATTN_E_NONFINITE,
                                  "gradient element %lld is "
                                  "%s",
                                  (long long)i, isnan(g[i]) ? "NaN" : "Inf");
        return attn__fail(ATTN_E_NONFINITE, "the gradient norm overflows");
    }
    *norm = sqrt(s);
    if (max_norm > 0 && *norm > max_norm) {
        const float f = (float)(max_norm / *norm);
        for (int64_t i = 0; i < n; i++) g[i] *= f;
    }
    return ATTN_OK;
}

attn_status attn_adamw_step(const attn_adamw_config *c, int64_t step,
                            const attn_param_slice *slices, int64_t nslices,
                            int64_t n, float *p, const float *g, float *m,
                            float *v) {
    attn_status st = attn_adamw_check(c);
    if (st) return st;
    if (!p || !g || !m || !v || (nslices > 0 && !slices))
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          !p   ? "params"
                          : !g ? "grads"
                          : !m ? "m"
                          : !v ? "v"
                               : "slices");
    if (n < 0 || nslices < 0 || step < 0)
        return attn__fail(ATTN_E_INVALID,
                          "n %lld, nslices %lld and step %lld "
                          "must be >= 0",
                          (long long)n, (long long)nslices, (long long)step);
    for (int64_t s = 0; s < nslices; s++) {
        int64_t len;
        if (slices[s].offset < 0 ||
            !attn__mul_i64(slices[s].shape[0], slices[s].shape[1], &len) ||
            slices[s].offset > n - len)
            return attn__fail(ATTN_E_INVALID,
                              "slice %s (offset %lld, shape "
                              "%lld x %lld) lies outside the %lld parameters",
                              slices[s].name, (long long)slices[s].offset,
                              (long long)slices[s].shape[0],
                              (long long)slices[s].shape[1], (long long)n);
    }
    const double lr = attn_adamw_lr(c, step);
    const double bc1 = 1.0 - pow(c->beta1, (double)(step + 1));
    const double bc2 = 1.0 - pow(c->beta2, (double)(step + 1));
    const float b1 = (float)c->beta1, b2 = (float)c->beta2;
    const float a = (float)(lr / bc1), rb2 = (float)(1.0 / sqrt(bc2));
    const float eps = (float)c->eps;
    /* moments and the Adam step for every element */
    for (int64_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    }
    /* decoupled weight decay on the Xavier slices first (AdamW: the decay
     * uses the weights before this step's update) */
    if (c->weight_decay > 0) {
        const float keep = (float)(1.0 - lr * c->weight_decay);
        for (int64_t s = 0; s < nslices; s++) {
            if (slices[s].init != ATTN_INIT_XAVIER) continue;
            float *ps = p + slices[s].offset;
            const int64_t len = slices[s].shape[0] * slices[s].shape[1];
            for (int64_t i = 0; i < len; i++) ps[i] *= keep;
        }
    }
    for (int64_t i = 0; i < n; i++)
        p[i] -= a * m[i] / (sqrtf(v[i]) * rb2 + eps);
    return ATTN_OK;
}
