/* What the encoder (encoder.c) and the decoder (decoder.c) layers share:
 * the checks of their common configuration fields, the residual
 * connection and LayerNorm around each sublayer (pre-norm or post-norm)
 * with its output dropout, and the feed-forward body. Each is written
 * once so the two stacks compute the same bits the same way. */
#include "layers.h"

#include <stdio.h>
#include <string.h>

attn_status attn__stack_check(const char *who, const attn__stack_fields *f) {
    if (f->num_layers < 1 || f->d_model < 1 || f->dim_feedforward < 1 ||
        f->additive_dim < 0)
        return attn__fail(ATTN_E_INVALID,
                          "%s config: num_layers %lld, "
                          "d_model %lld, dim_feedforward %lld must be >= 1 "
                          "(additive_dim %lld >= 0)",
                          who, (long long)f->num_layers, (long long)f->d_model,
                          (long long)f->dim_feedforward,
                          (long long)f->additive_dim);
    if (!attn__blas_ok(f->dim_feedforward) || f->num_layers > 100000 ||
        f->d_model > f->max_d_model || f->dim_feedforward > f->max_ff)
        return attn__fail(ATTN_E_INVALID, "%s config sizes out of range", who);
    if (f->activation != ATTN_ACT_RELU && f->activation != ATTN_ACT_GELU &&
        f->activation != ATTN_ACT_SWIGLU)
        return attn__fail(ATTN_E_INVALID, "%s activation is %d", who,
                          (int)f->activation);
    if ((f->norm_first != 0 && f->norm_first != 1) ||
        (f->final_norm != 0 && f->final_norm != 1))
        return attn__fail(ATTN_E_INVALID,
                          "%s norm_first (%d) and "
                          "final_norm (%d) must be 0 or 1",
                          who, f->norm_first, f->final_norm);
    if (isnan(f->layer_norm_eps) || f->layer_norm_eps < 0 ||
        isinf(f->layer_norm_eps))
        return attn__fail(ATTN_E_INVALID, "%s layer_norm_eps is %g", who,
                          f->layer_norm_eps);
    return ATTN_OK;
}

/* ---- residual + norm -------------------------------------------------- */

static void norm_fwd(const attn__sublayer *s, const float *x) {
    if (s->rms)
        attn__rmsnorm_forward(s->n, s->E, x, s->gamma, s->beta, s->eps, s->lny,
                              s->rstd, s->th);
    else
        attn__layernorm_forward(s->n, s->E, x, s->gamma, s->beta, s->eps,
                                s->lny, s->mean, s->rstd, s->th);
}

static void norm_bwd(const attn__sublayer *s, const float *x, const float *g,
                     float *dx) {
    if (s->rms)
        attn__rmsnorm_backward(s->n, s->E, x, s->gamma, s->rstd, g, s->dgamma,
                               s->dbeta, dx, s->th);
    else
        attn__layernorm_backward(s->n, s->E, x, s->gamma, s->mean, s->rstd, g,
                                 s->dgamma, s->dbeta, dx, s->th);
}

const float *attn__sublayer_in(const attn__sublayer *s) {
    if (!s->norm_first) return s->x;
    norm_fwd(s, s->x);
    return s->lny;
}

const float *attn__sublayer_out(const attn__sublayer *s, float *a) {
    const int64_t ne = s->n * s->E;
    attn__dropout_apply(s->seed, s->stream, s->p, a, ne, s->th);
    if (!s->norm_first && !s->rms) { /* the sum and its norm in one pass */
        attn__ln_rows(s->n, s->E, s->x, a, s->r, s->gamma, s->beta, s->eps,
                      s->lny, s->mean, s->rstd, s->th);
        return s->lny;
    }
    for (int64_t i = 0; i < ne; i++) s->r[i] = s->x[i] + a[i];
    if (s->norm_first) return s->r;
    norm_fwd(s, s->r);
    return s->lny;
}

float *attn__sublayer_back_in(const attn__sublayer *s, float *g, float *dy,
                              float *t, const float **bin) {
    const int64_t ne = s->n * s->E;
    const size_t bytes = (size_t)ne * sizeof(float);
    if (s->norm_first) {
        /* out = x + drop(body(LN(x))): g passes the residual as is */
        memcpy(dy, g, bytes);
        attn__dropout_apply(s->seed, s->stream, s->p, dy, ne, s->th);
        memset(t, 0, bytes);
        *bin = s->lny;
        return t;
    }
    /* out = LN(x + drop(body(x))): d r is the residual's and the body's */
    memset(dy, 0, bytes);
    norm_bwd(s, s->r, g, dy);
    memcpy(g, dy, bytes);
    attn__dropout_apply(s->seed, s->stream, s->p, dy, ne, s->th);
    *bin = s->x;
    return g;
}

void attn__sublayer_back_out(const attn__sublayer *s, float *g,
                             const float *t) {
    if (s->norm_first) norm_bwd(s, s->x, t, g);
}

/* ---- the feed-forward body -------------------------------------------- */

attn_status attn__ffn_forward(const attn__ffn *f, const float *in, float *out) {
    const int64_t nf = f->n * f->F;
    if (f->act == ATTN_ACT_SWIGLU) { /* w_1 (2F, E): gate rows, then up */
        attn_linear_forward(f->n, f->E, 2 * f->F, in, f->w_1, f->b_1, f->hpre);
        attn__swiglu_forward(f->n, f->F, f->hpre, f->hact, f->th);
    } else if (attn__linear_bf16_active() ||
               attn__linear_packed_forward(f->n, f->E, f->F, in, f->w_1, f->b_1,
                                           f->hpre, f->act, f->hact) <= 0) {
        attn_linear_forward(f->n, f->E, f->F, in, f->w_1, f->b_1, f->hpre);
        attn__act_forward(f->act, f->hpre, f->hact, nf, f->th);
    }
    attn__dropout_apply(f->seed, f->stream, f->p, f->hact, nf, f->th);
    return attn_linear_forward(f->n, f->F, f->E, f->hact, f->w_2, f->b_2, out);
}

attn_status attn__ffn_backward(const attn__ffn *f, const float *in,
                               const float *dy, float *gh, float *din) {
    const int64_t nf = f->n * f->F;
    memset(gh, 0, (size_t)nf * sizeof(float));
    attn_linear_backward(f->n, f->F, f->E, f->hact, f->w_2, dy, f->dw_2,
                         f->db_2, gh);
    attn__dropout_apply(f->seed, f->stream, f->p, gh, nf, f->th);
    if (f->act == ATTN_ACT_SWIGLU) {
        attn__swiglu_backward(f->n, f->F, f->hpre, gh);
        return attn_linear_backward(f->n, f->E, 2 * f->F, in, f->w_1, gh,
                                    f->dw_1, f->db_1, din);
    }
    attn__act_backward(f->act, f->hpre, gh, gh, nf, f->th);
    return attn_linear_backward(f->n, f->E, f->F, in, f->w_1, gh, f->dw_1,
                                f->db_1, din);
}
