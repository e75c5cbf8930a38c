/* Scaled dot-product attention: options and the choice of kernel. The
 * argument checks every kernel shares are in sdpa_check.c. */
#include "flash.h"
#include "rope.h"

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
    if (opts->rope) { /* rotated copies of q and k, then the plain call */
        attn__rope_qk r;
        if ((st = attn__rope_qk_make(q, k, v, opts, &r))) return st;
        st = attn_sdpa_forward(&r.q, &r.k, &r.v, &r.opts, out, weights, lse);
        attn__rope_qk_free(&r);
        return st;
    }
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

/* Backward through the rotation: the gradients at the rotated q and k
 * (fresh zeroed buffers), then dq += R^T dq_rot and dk += R^T dk_rot. */
static attn_status rope_backward(const attn_tensor *q, const attn_tensor *k,
                                 const attn_tensor *v, const attn_tensor *out,
                                 const float *lse, const attn_tensor *dout,
                                 const attn_sdpa_opts *opts, attn_tensor *dq,
                                 attn_tensor *dk, attn_tensor *dv,
                                 attn_tensor *dbias) {
    attn__rope_qk r;
    attn_status st = attn__rope_qk_make(q, k, v, opts, &r);
    if (st) return st;
    attn_dtype gt = dq->dtype;
    size_t es = attn_dtype_size(gt);
    int64_t nq = attn_tensor_numel(q), nk = attn_tensor_numel(k);
    char *g = attn__alloc((size_t)(nq + nk), es, "rotated gradients");
    if (!g) {
        attn__rope_qk_free(&r);
        return ATTN_E_NOMEM;
    }
    memset(g, 0, (size_t)(nq + nk) * es);
    attn_tensor gq = attn_tensor_4d(g, gt, q->shape[0], q->shape[1],
                                    q->shape[2], q->shape[3]);
    attn_tensor gk = attn_tensor_4d(g + (size_t)nq * es, gt, k->shape[0],
                                    k->shape[1], k->shape[2], k->shape[3]);
    st = attn_sdpa_backward(&r.q, &r.k, &r.v, out, lse, dout, &r.opts, &gq, &gk,
                            dv, dbias);
    if (!st)
        st = attn_rope_backward(opts->rope, &gq, r.qpos,
                                q->shape[0] * q->shape[2], dq, opts->threads);
    if (!st)
        st = attn_rope_backward(opts->rope, &gk, r.kpos, r.n_kpos, dk,
                                opts->threads);
    attn__free(g);
    attn__rope_qk_free(&r);
    return st;
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
    if (opts->rope)
        return rope_backward(q, k, v, out, lse, dout, opts, dq, dk, dv, dbias);
    if (opts->impl == ATTN_IMPL_REF)
        return attn__sdpa_ref_backward(q, k, v, dout, opts, &dm, dq, dk, dv,
                                       dbias);
    return attn__sdpa_flash_backward(q, k, v, out, lse, dout, opts, &dm, dq, dk,
                                     dv, dbias);
}
