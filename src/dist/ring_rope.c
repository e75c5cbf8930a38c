/* Rotary positions on the ring. Each rank rotates its own q and k rows at
 * their positions in the full sequence (the layout says which rows it
 * holds: one run, or two under zigzag), and the ring then runs on the
 * rotated f32 copies exactly as without rotation: scores of rotated rows
 * depend only on the distance of the two positions, whichever rank holds
 * them. The backward takes dq and dk back through the same rotation
 * (attn_rope_backward adds R^T g into the caller's gradients). */
#include "dist.h"
#include "rope.h"

#include <string.h>

/* Positions of this rank's rows of one side: the given array (of the full
 * sequence, [L] or [B * L]) or full[B * L] (the defaults), picked along the
 * rank's runs into out[B * n]. */
static void pick(const int64_t *given, int64_t n_given, const int64_t *full,
                 int64_t B, int64_t L, int nruns, const int64_t s[2],
                 const int64_t l[2], int64_t *out) {
    for (int64_t b = 0, o = 0; b < B; b++)
        for (int x = 0; x < nruns; x++)
            for (int64_t i = s[x]; i < s[x] + l[x]; i++) {
                if (given)
                    out[o++] = given[n_given == L ? i : b * L + i];
                else
                    out[o++] = full ? full[b * L + i] : i;
            }
}

attn_status attn__ring_rope_make(attn__ring *c, const attn_tensor *q,
                                 const attn_tensor *k, const attn_tensor *v,
                                 const attn_sdpa_opts *opts,
                                 attn__ring_rope *r) {
    memset(r, 0, sizeof *r);
    const attn__sdpa_dims *d = &c->d;
    const int64_t B = d->B;
    int64_t qs[2], ql[2], ks[2], kl[2];
    const int nqr = attn__ring_qruns(c, c->rank, qs, ql);
    const int nkr = attn__ring_kruns(c, c->rank, ks, kl);
    r->qpos = attn__alloc((size_t)(B * (d->Lq + d->Lk)), sizeof(int64_t),
                          "rotary positions");
    if (!r->qpos) return ATTN_E_NOMEM;
    r->kpos = r->qpos + B * d->Lq;
    int64_t *full = NULL; /* default query positions of the full sequence */
    if (!opts->rope_q_positions) {
        full = attn__alloc((size_t)(B * c->Lq), sizeof(int64_t),
                           "query positions");
        if (!full) {
            attn__ring_rope_free(r);
            return ATTN_E_NOMEM;
        }
        attn__rope_query_positions(&opts->mask, B, c->Lq, c->Lk,
                                   opts->mask.key_lengths, full);
    }
    pick(opts->rope_q_positions, opts->n_rope_q_positions, full, B, c->Lq, nqr,
         qs, ql, r->qpos);
    pick(opts->rope_k_positions, opts->n_rope_k_positions, NULL, B, c->Lk, nkr,
         ks, kl, r->kpos);
    attn__free(full);
    const int64_t nq = attn_tensor_numel(q), nk = attn_tensor_numel(k);
    float *buf = attn__alloc((size_t)(nq + nk), sizeof(float), "rotated q, k");
    if (!buf) {
        attn__ring_rope_free(r);
        return ATTN_E_NOMEM;
    }
    r->qk = buf;
    r->q = attn_tensor_4d(buf, ATTN_F32, B, d->H, d->Lq, d->Dk);
    r->k = attn_tensor_4d(buf + nq, ATTN_F32, B, d->Hkv, d->Lk, d->Dk);
    attn_status st = attn_rope_forward(opts->rope, q, r->qpos, B * d->Lq, &r->q,
                                       opts->threads);
    if (!st)
        st = attn_rope_forward(opts->rope, k, r->kpos, B * d->Lk, &r->k,
                               opts->threads);
    r->v = *v;
    if (!st && v->dtype != ATTN_F32) { /* the ring moves one dtype */
        r->vbuf = attn__f32_copy(v);
        if (!r->vbuf)
            st = ATTN_E_NOMEM;
        else
            r->v = attn_tensor_4d(r->vbuf, ATTN_F32, B, d->Hkv, d->Lk, d->Dv);
    }
    if (st) {
        attn__ring_rope_free(r);
        return st;
    }
    r->opts = attn__opts_without_rope(opts);
    c->dt = ATTN_F32;
    c->es = sizeof(float);
    return ATTN_OK;
}

void attn__ring_rope_free(attn__ring_rope *r) {
    attn__free(r->qpos);
    attn__free(r->qk);
    attn__free(r->vbuf);
    memset(r, 0, sizeof *r);
}

attn_status attn__ring_rope_grads(const attn__ring_rope *r,
                                  const attn_sdpa_opts *opts,
                                  const attn_tensor *gq, const attn_tensor *gk,
                                  attn_tensor *dq, attn_tensor *dk) {
    const int64_t B = gq->shape[0];
    attn_status st = attn_rope_backward(opts->rope, gq, r->qpos,
                                        B * gq->shape[2], dq, opts->threads);
    if (!st)
        st = attn_rope_backward(opts->rope, gk, r->kpos, B * gk->shape[2], dk,
                                opts->threads);
    return st;
}
