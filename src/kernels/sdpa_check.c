/* The argument check every SDPA kernel shares: q, k, v against each other,
 * the options and the mask, and the outputs against the shapes (see
 * kernels.h). sdpa.c and sdpa_weights.c both call it. */
#include "kernels.h"

#include <float.h>
#include <math.h>

static int is_input_dtype(attn_dtype d, int allow_f64) {
    return d == ATTN_F32 || d == ATTN_F16 || d == ATTN_BF16 ||
           (allow_f64 && d == ATTN_F64);
}

static int is_output_dtype(attn_dtype d, int allow_f64) {
    return d == ATTN_F32 || (allow_f64 && d == ATTN_F64);
}

attn_status attn__sdpa_check_view(const attn_tensor *t, const char *name,
                                  int64_t d0, int64_t d1, int64_t d2,
                                  int64_t d3, int allow_f64, int is_output) {
    attn_status st = attn_tensor_check(t, name);
    if (st) return st;
    if (!is_output_dtype(t->dtype, allow_f64))
        return attn__fail(ATTN_E_DTYPE, "%s must be f32%s, not %s", name,
                          allow_f64 ? " or f64" : "",
                          attn_dtype_name(t->dtype));
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
        return attn__fail(ATTN_E_DTYPE,
                          "q has dtype %s; f32, f16 or bf16%s "
                          "is needed",
                          attn_dtype_name(q->dtype),
                          allow_f64 ? " (or f64)" : "");
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return attn__fail(ATTN_E_DTYPE,
                          "q, k and v must share a dtype: q is "
                          "%s, k is %s, v is %s",
                          attn_dtype_name(q->dtype), attn_dtype_name(k->dtype),
                          attn_dtype_name(v->dtype));
    int64_t B = q->shape[0], H = q->shape[1], Lq = q->shape[2];
    int64_t Dk = q->shape[3], Hkv = k->shape[1], Lk = k->shape[2];
    int64_t Dv = v->shape[3];
    if (k->shape[0] != B || v->shape[0] != B)
        return attn__fail(ATTN_E_SHAPE,
                          "batch sizes differ: q has %lld, k "
                          "has %lld, v has %lld",
                          (long long)B, (long long)k->shape[0],
                          (long long)v->shape[0]);
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
        return attn__fail(ATTN_E_SHAPE,
                          "q has %lld heads, not a multiple of "
                          "the %lld heads of k and v",
                          (long long)H, (long long)Hkv);
    for (int a = 0; a < 4; a++)
        if ((q->stride[a] == 0 && q->shape[a] > 1) ||
            (k->stride[a] == 0 && k->shape[a] > 1) ||
            (v->stride[a] == 0 && v->shape[a] > 1))
            return attn__fail(ATTN_E_SHAPE,
                              "q, k and v may not broadcast "
                              "(stride 0 on axis %d)",
                              a);
    if (isnan(opts->scale) || opts->scale < 0 || isinf(opts->scale))
        return attn__fail(ATTN_E_INVALID,
                          "scale is %g; it must be positive "
                          "(or 0 for 1/sqrt(Dk))",
                          opts->scale);
    if (!(opts->dropout_p >= 0.0 && opts->dropout_p < 1.0))
        return attn__fail(ATTN_E_INVALID,
                          "dropout_p is %g; it must be in "
                          "[0, 1)",
                          opts->dropout_p);
    if (opts->threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", opts->threads);
    if (opts->impl != ATTN_IMPL_AUTO && opts->impl != ATTN_IMPL_REF &&
        opts->impl != ATTN_IMPL_FLASH && opts->impl != ATTN_IMPL_FLASH_BF16)
        return attn__fail(ATTN_E_INVALID, "impl is %d: not a kernel",
                          (int)opts->impl);
    if ((st = attn_mask_check(&opts->mask, B, H, Lq, Lk))) return st;
    if (out &&
        (st = attn__sdpa_check_view(out, "out", B, H, Lq, Dv, allow_f64, 1)))
        return st;
    if (weights && (st = attn__sdpa_check_view(weights, "weights", B, H, Lq, Lk,
                                               allow_f64, 1)))
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
        const double sc =
            opts->scale > 0 ? opts->scale : 1.0 / sqrt((double)Dk);
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
