/* Scaled dot-product attention: options and the choice of kernel. The
 * argument checks every kernel shares are in sdpa_check.c. */
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

static attn_status check_out(const attn_tensor *t, const char *name, int64_t d0,
                             int64_t d1, int64_t d2, int64_t d3,
                             int allow_f64) {
    return attn__sdpa_check_view(t, name, d0, d1, d2, d3, allow_f64, 1);
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
    if (!weights)
        return attn__sdpa_flash_forward(q, k, v, opts, &dims, out, lse);
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
    return attn__sdpa_check_view(t, name, dm->B, dm->H, dm->Lq, dm->Dv,
                                 allow_f64, 0);
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
        return attn__fail(ATTN_E_INVALID,
                          "lse is NULL: the flash backward "
                          "needs the log-sum-exp saved by attn_sdpa_forward "
                          "(only IMPL_REF recomputes it)");
    if ((st = attn__check_finite(dout, "dout"))) return st;
    if (opts->impl == ATTN_IMPL_REF)
        return attn__sdpa_ref_backward(q, k, v, dout, opts, &dm, dq, dk, dv,
                                       dbias);
    return attn__sdpa_flash_backward(q, k, v, out, lse, dout, opts, &dm, dq, dk,
                                     dv, dbias);
}
