/* Scaled dot-product attention: options, argument checks shared by every
 * kernel, and the choice of kernel. */
#include "internal.h"
#include "flash.h"

#include <float.h>
#include <math.h>
#include <string.h>

void attn_sdpa_opts_init(attn_sdpa_opts *opts) {
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    attn_mask_init(&opts->mask);
    opts->impl = ATTN_IMPL_AUTO;
}

static int is_input_dtype(attn_dtype d, int allow_f64) {
    return d == ATTN_F32 || d == ATTN_F16 || d == ATTN_BF16 ||
           (allow_f64 && d == ATTN_F64);
}

static int is_output_dtype(attn_dtype d, int allow_f64) {
    return d == ATTN_F32 || (allow_f64 && d == ATTN_F64);
}

/* A view of shape (d0, d1, d2, d3) and dtype f32 (or f64 with allow_f64);
 * written outputs (is_output) may not broadcast. */
static attn_status check_view(const attn_tensor *t, const char *name,
                              int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                              int allow_f64, int is_output) {
    attn_status st = attn_tensor_check(t, name);
    if (st) return st;
    if (!is_output_dtype(t->dtype, allow_f64))
        return attn__fail(ATTN_E_DTYPE, "%s must be f32%s, not %s", name,
                          allow_f64 ? " or f64" : "", attn_dtype_name(t->dtype));
    const int64_t want[4] = {d0, d1, d2, d3};
    for (int a = 0; a < 4; a++)
        if (t->shape[a] != want[a])
            return attn__fail(ATTN_E_SHAPE,
                              "%s has shape (%lld, %lld, %lld, %lld) but "
                              "(%lld, %lld, %lld, %lld) is needed",
                              name, (long long)t->shape[0],
                              (long long)t->shape[1], (long long)t->shape[2],
                              (long long)t->shape[3], (long long)d0,
                              (long long)d1, (long long)d2, (long long)d3);
    for (int a = 0; a < 4 && is_output; a++)
        if (t->stride[a] == 0 && t->shape[a] > 1)
            return attn__fail(ATTN_E_SHAPE,
                              "%s has stride 0 on axis %d: an output cannot "
                              "broadcast",
                              name, a);
    return ATTN_OK;
}

static attn_status check_out(const attn_tensor *t, const char *name,
                             int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                             int allow_f64) {
    return check_view(t, name, d0, d1, d2, d3, allow_f64, 1);
}

attn_status attn__sdpa_check(const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, const attn_sdpa_opts *opts,
                             const attn_tensor *out, const attn_tensor *weights,
                             int allow_f64, attn__sdpa_dims *dims) {
    attn_status st;
    if (!opts) return attn__fail(ATTN_E_INVALID, "opts is NULL");
    if ((st = attn_tensor_check(q, "q")) || (st = attn_tensor_check(k, "k")) ||
        (st = attn_tensor_check(v, "v")))
        return st;
    if (!is_input_dtype(q->dtype, allow_f64))
        return attn__fail(ATTN_E_DTYPE, "q has dtype %s; f32, f16 or bf16%s "
                          "is needed", attn_dtype_name(q->dtype),
                          allow_f64 ? " (or f64)" : "");
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return attn__fail(ATTN_E_DTYPE, "q, k and v must share a dtype: q is "
                          "%s, k is %s, v is %s", attn_dtype_name(q->dtype),
                          attn_dtype_name(k->dtype), attn_dtype_name(v->dtype));
    int64_t B = q->shape[0], H = q->shape[1], Lq = q->shape[2];
    int64_t Dk = q->shape[3], Hkv = k->shape[1], Lk = k->shape[2];
    int64_t Dv = v->shape[3];
    if (k->shape[0] != B || v->shape[0] != B)
        return attn__fail(ATTN_E_SHAPE, "batch sizes differ: q has %lld, k "
                          "has %lld, v has %lld", (long long)B,
                          (long long)k->shape[0], (long long)v->shape[0]);
    if (k->shape[3] != Dk)
        return attn__fail(ATTN_E_SHAPE, "k has %lld features but q has %lld",
                          (long long)k->shape[3], (long long)Dk);
    if (v->shape[1] != Hkv)
        return attn__fail(ATTN_E_SHAPE, "v has %lld heads but k has %lld",
                          (long long)v->shape[1], (long long)Hkv);
    if (v->shape[2] != Lk)
        return attn__fail(ATTN_E_SHAPE, "v has %lld positions but k has %lld",
                          (long long)v->shape[2], (long long)Lk);
    if (H % Hkv != 0)
        return attn__fail(ATTN_E_SHAPE, "q has %lld heads, not a multiple of "
                          "the %lld heads of k and v", (long long)H,
                          (long long)Hkv);
    for (int a = 0; a < 4; a++)
        if ((q->stride[a] == 0 && q->shape[a] > 1) ||
            (k->stride[a] == 0 && k->shape[a] > 1) ||
            (v->stride[a] == 0 && v->shape[a] > 1))
            return attn__fail(ATTN_E_SHAPE, "q, k and v may not broadcast "
                              "(stride 0 on axis %d)", a);
    if (isnan(opts->scale) || opts->scale < 0 || isinf(opts->scale))
        return attn__fail(ATTN_E_INVALID, "scale is %g; it must be positive "
                          "(or 0 for 1/sqrt(Dk))", opts->scale);
    if (!(opts->dropout_p >= 0.0 && opts->dropout_p < 1.0))
        return attn__fail(ATTN_E_INVALID, "dropout_p is %g; it must be in "
                          "[0, 1)", opts->dropout_p);
    if (opts->threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", opts->threads);
    if (opts->impl != ATTN_IMPL_AUTO && opts->impl != ATTN_IMPL_REF &&
        opts->impl != ATTN_IMPL_FLASH)
        return attn__fail(ATTN_E_INVALID, "impl is %d: not a kernel",
                          (int)opts->impl);
    if ((st = attn_mask_check(&opts->mask, B, H, Lq, Lk))) return st;
    if (out && (st = check_out(out, "out", B, H, Lq, Dv, allow_f64))) return st;
    if (weights &&
        (st = check_out(weights, "weights", B, H, Lq, Lk, allow_f64)))
        return st;
    double qmax, kmax;
    if ((st = attn__check_finite_max(q, "q", &qmax)) ||
        (st = attn__check_finite_max(k, "k", &kmax)) ||
        (st = attn__check_finite(v, "v")))
        return st;
    /* Scaled scores must stay finite in the compute type (f32; f64 for the
     * f64 reference): past it the flash kernel's scores overflow to +inf
     * and it cannot agree with the reference, which sums in double. The
     * bound |s| <= scale * Dk * max|q| * max|k| costs nothing extra (the
     * finiteness pass finds the maxima); half the range leaves room for
     * the bias and rounding. */
    {
        const double sc = opts->scale > 0 ? opts->scale : 1.0 / sqrt((double)Dk);
        const double bound = sc * (double)Dk * qmax * kmax;
        const double limit = q->dtype == ATTN_F64 ? DBL_MAX / 2 : FLT_MAX / 2;
        if (!(bound <= limit))
            return attn__fail(ATTN_E_NONFINITE,
                              "scale %g x %lld features x max|q| %g x max|k| "
                              "%g bounds the scaled scores by %g, beyond "
                              "the %s range (%g); lower the scale or the "
                              "inputs' magnitude",
                              sc, (long long)Dk, qmax, kmax, bound,
                              q->dtype == ATTN_F64 ? "f64" : "f32", limit);
    }
    if (dims) {
        dims->B = B;
        dims->H = H;
        dims->Hkv = Hkv;
        dims->Lq = Lq;
        dims->Lk = Lk;
        dims->Dk = Dk;
        dims->Dv = Dv;
        dims->group = H / Hkv;
        dims->scale = opts->scale > 0 ? opts->scale : 1.0 / sqrt((double)Dk);
    }
    return ATTN_OK;
}

attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_opts *opts,
                              attn_tensor *out, attn_tensor *weights,
                              float *lse) {
    attn__sdpa_dims dims;
    attn_status st = attn__sdpa_check(q, k, v, opts, out, weights, 1, &dims);
    if (st) return st;
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    if (opts->impl != ATTN_IMPL_REF &&
        (q->dtype == ATTN_F64 || out->dtype == ATTN_F64 ||
         (weights && weights->dtype == ATTN_F64)))
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "f64 tensors are served by the reference kernel "
                          "only (impl = ATTN_IMPL_REF)");
    if (opts->impl == ATTN_IMPL_REF)
        return attn__sdpa_ref_forward(q, k, v, opts, &dims, out, weights, lse);
    /* AUTO and FLASH: the flash kernel; weights, when asked, come from its
     * second pass, normalized with each row's max and sum. */
    if (!weights) return attn__sdpa_flash_forward(q, k, v, opts, &dims, out, lse);
    size_t n = (size_t)(dims.B * dims.H * dims.Lq);
    float *ml = attn__alloc(2 * n, sizeof(float), "row max and sum");
    if (!ml) return ATTN_E_NOMEM;
    st = attn__flash_forward_ml(q, k, v, opts, &dims, out, lse, ml, ml + n);
    if (!st)
        st = attn__flash_fill_weights(q, k, opts, &dims, ml, ml + n, weights);
    attn__free(ml);
    return st;
}

/* out and dout of backward: read-only inputs of the forward's output shape. */
static attn_status check_in(const attn_tensor *t, const char *name,
                            const attn__sdpa_dims *dm, int allow_f64) {
    return check_view(t, name, dm->B, dm->H, dm->Lq, dm->Dv, allow_f64, 0);
}

attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *out,
                               const float *lse, const attn_tensor *dout,
                               const attn_sdpa_opts *opts, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv,
                               attn_tensor *dbias) {
    attn__sdpa_dims dm;
    const int ref = 1; /* f64 is a valid dtype: refused below if not REF */
    attn_status st = attn__sdpa_check(q, k, v, opts, NULL, NULL, ref, &dm);
    if (st) return st;
    if ((st = check_in(out, "out", &dm, ref)) ||
        (st = check_in(dout, "dout", &dm, ref)) ||
        (st = check_out(dq, "dq", dm.B, dm.H, dm.Lq, dm.Dk, ref)) ||
        (st = check_out(dk, "dk", dm.B, dm.Hkv, dm.Lk, dm.Dk, ref)) ||
        (st = check_out(dv, "dv", dm.B, dm.Hkv, dm.Lk, dm.Dv, ref)))
        return st;
    const attn_tensor *bias = opts->mask.bias;
    if (dbias) {
        if (!bias)
            return attn__fail(ATTN_E_INVALID,
                              "dbias is given but opts.mask.bias is NULL");
        if ((st = check_out(dbias, "dbias", bias->shape[0], bias->shape[1],
                            bias->shape[2], bias->shape[3], ref)))
            return st;
    }
    if (opts->impl != ATTN_IMPL_REF &&
        (q->dtype == ATTN_F64 || out->dtype == ATTN_F64 ||
         dout->dtype == ATTN_F64 || dq->dtype == ATTN_F64 ||
         dk->dtype == ATTN_F64 || dv->dtype == ATTN_F64 ||
         (dbias && dbias->dtype == ATTN_F64)))
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "f64 tensors are served by the reference kernel "
                          "only (impl = ATTN_IMPL_REF)");
    if (!lse && opts->impl != ATTN_IMPL_REF)
        return attn__fail(ATTN_E_INVALID, "lse is NULL: the flash backward "
                          "needs the log-sum-exp saved by attn_sdpa_forward "
                          "(only IMPL_REF recomputes it)");
    if ((st = attn__check_finite(dout, "dout"))) return st;
    if (opts->impl == ATTN_IMPL_REF)
        return attn__sdpa_ref_backward(q, k, v, dout, opts, &dm, dq, dk, dv,
                                       dbias);
    return attn__sdpa_flash_backward(q, k, v, out, lse, dout, opts, &dm, dq,
                                     dk, dv, dbias);
}
