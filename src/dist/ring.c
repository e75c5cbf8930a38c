/* Ring attention forward (Liu et al., "Ring Attention with Blockwise
 * Transformers", 2023) over MPI.
 *
 * Rank r holds its query rows and one K/V block. At step s = 0 .. P-1 it
 * holds the block of rank (r - s) mod P: it posts the receive of the next
 * block from r - 1 and the send of the current one to r + 1 (two buffers
 * that swap each step), then computes its queries against the block it
 * holds with the flash kernel, in the full sequence's frame
 * (attn__flash_forward_at: masks and dropout at global positions), and
 * merges the block's (O, lse) into its running result by log-sum-exp:
 *   lse' = log(e^lse + e^lse_b),  O' = O e^(lse - lse') + O_b e^(lse_b - lse').
 * Only then does it wait for the transfers, which ran during the compute.
 * A (query run, key run) pair that the mask hides entirely (causal:
 * keys after every query; blocks of other documents) is not computed at
 * all; zigzag shards hold two runs each, so that every rank has the same
 * causal work. Soft-capping, ALiBi and document ids are functions of the
 * global positions, which the flash kernel is given; an attention sink is
 * one more term of a row's denominator, so the blocks run without it and
 * it joins each row once, after the last merge (fold_sinks). */
#include "dist.h"

#include <math.h>
#include <string.h>

enum { TAG_KV = 7001 };

/* The running result of this rank's query rows: o (B, H, nq, Dv) and lse
 * (B * H * nq), both f32, with temporaries for one run's block result. */
typedef struct {
    float *o, *lse; /* running result                              */
    float *ot, *lt; /* one (query run, key run) pair's result       */
} acc;

/* Merges the pair result (rows [0, n) of ot / lt, (B, H, n, Dv)) into rows
 * [r0, r0 + n) of the running result. */
static void merge(const attn__ring *c, acc *a, int64_t r0, int64_t n) {
    const attn__sdpa_dims *d = &c->d;
    const int64_t nq = d->Lq, Dv = d->Dv;
    for (int64_t bh = 0; bh < d->B * d->H; bh++)
        for (int64_t i = 0; i < n; i++) {
            const float lb = a->lt[bh * n + i];
            if (lb == -INFINITY)
                continue; /* the block shows this row nothing */
            float *o = a->o + (bh * nq + r0 + i) * Dv;
            const float *ob = a->ot + (bh * n + i) * Dv;
            float *l = a->lse + bh * nq + r0 + i;
            if (*l == -INFINITY) {
                memcpy(o, ob, (size_t)Dv * sizeof(float));
                *l = lb;
                continue;
            }
            const double m = *l > lb ? *l : lb;
            const double wa = exp(*l - m), wb = exp(lb - m), s = wa + wb;
            const float fa = (float)(wa / s), fb = (float)(wb / s);
            for (int64_t e = 0; e < Dv; e++) o[e] = o[e] * fa + ob[e] * fb;
            *l = (float)(m + log(s));
        }
}

/* The sink of head h joins the denominator of each row of the merged
 * result: lse' = log(e^lse + e^sink), O' = O e^(lse - lse'). A row that saw
 * no key keeps O = 0 and gets lse = sink (attn_mask's rule). */
static void fold_sinks(const attn__ring *c, const attn_mask *m, acc *a) {
    const attn__sdpa_dims *d = &c->d;
    const int64_t nq = d->Lq, Dv = d->Dv;
    for (int64_t bh = 0; bh < d->B * d->H; bh++) {
        const double sk = m->sinks[bh % d->H];
        for (int64_t i = 0; i < nq; i++) {
            float *l = a->lse + bh * nq + i, *o = a->o + (bh * nq + i) * Dv;
            if (*l == -INFINITY) {
                *l = (float)sk;
                continue;
            }
            const double mx = *l > sk ? *l : sk;
            const double s = exp(*l - mx) + exp(sk - mx);
            const float f = (float)(exp(*l - mx) / s);
            for (int64_t e = 0; e < Dv; e++) o[e] *= f;
            *l = (float)(mx + log(s));
        }
    }
}

/* This rank's queries against the block of rank src (packed in buf). */
static attn_status step(const attn__ring *c, const attn_tensor *q,
                        const attn_sdpa_opts *opts, int src, void *buf, acc *a,
                        attn__ring_reqs *rq, int *computed) {
    int64_t qs[2], ql[2], ks[2], kl[2];
    const int nqr = attn__ring_qruns(c, c->rank, qs, ql);
    const int nkr = attn__ring_kruns(c, src, ks, kl);
    int64_t qro = 0;
    *computed = 0;
    for (int x = 0; x < nqr; qro += ql[x], x++) {
        int64_t kro = 0;
        for (int y = 0; y < nkr; kro += kl[y], y++) {
            if (attn__ring_pair_empty(c, &opts->mask, qs[x], ql[x], ks[y],
                                      kl[y]))
                continue;
            attn_tensor K, V;
            attn__ring_block_views(c, buf, c->dt, c->nk[src], kro, kl[y], &K,
                                   &V);
            /* in slices of query rows, letting MPI move the next block
             * between them */
            const int64_t sl = attn__ring_slice(c, opts, ql[x]);
            for (int64_t r0 = 0; r0 < ql[x]; r0 += sl) {
                const int64_t nr = ql[x] - r0 < sl ? ql[x] - r0 : sl;
                if (attn__ring_pair_empty(c, &opts->mask, qs[x] + r0, nr, ks[y],
                                          kl[y]))
                    continue;
                attn_tensor Q = attn__ring_rows(q, qro + r0, nr);
                attn__sdpa_dims pd = attn__ring_pair_dims(c, nr, kl[y]);
                attn__flash_pos pos = {qs[x] + r0, ks[y], c->Lq, c->Lk};
                attn_tensor O =
                    attn_tensor_4d(a->ot, ATTN_F32, pd.B, pd.H, nr, pd.Dv);
                attn_status st = attn__flash_forward_at(
                    &Q, &K, &V, opts, &pd, &pos, &O, a->lt, NULL, NULL);
                if (st) return st;
                merge(c, a, qro + r0, nr);
                attn__ring_progress(rq, NULL);
                *computed = 1;
            }
        }
    }
    return ATTN_OK;
}

/* The ring proper, after the checks. */
static attn_status ring_forward(const attn__ring *c, const attn_tensor *q,
                                const attn_tensor *k, const attn_tensor *v,
                                const attn_sdpa_opts *opts, attn_tensor *out,
                                float *lse, attn_ring_stats *stats) {
    const attn__sdpa_dims *d = &c->d;
    const int64_t rows = d->B * d->H * d->Lq;
    int64_t maxrun = 0, s2[2], l2[2];
    for (int x = 0, n = attn__ring_qruns(c, c->rank, s2, l2); x < n; x++)
        if (attn__ring_slice(c, opts, l2[x]) > maxrun)
            maxrun = attn__ring_slice(c, opts, l2[x]);
    const size_t kvb =
        (size_t)(d->B * d->Hkv * c->maxnk * (d->Dk + d->Dv)) * c->es;
    acc a;
    char *kv = attn__alloc(2 * kvb, 1, "ring K/V buffers");
    a.o = attn__alloc((size_t)(rows * d->Dv), sizeof(float), "ring output");
    a.lse = attn__alloc((size_t)rows, sizeof(float), "ring lse");
    a.ot = attn__alloc((size_t)(d->B * d->H * maxrun * d->Dv), sizeof(float),
                       "ring block output");
    a.lt = attn__alloc((size_t)(d->B * d->H * maxrun), sizeof(float),
                       "ring block lse");
    attn_status st = ATTN_OK;
    if (!kv || !a.o || !a.lse || !a.ot || !a.lt) st = ATTN_E_NOMEM;
    st = attn__ring_agree(c, st);
    if (!st) {
        memset(a.o, 0, (size_t)(rows * d->Dv) * sizeof(float));
        for (int64_t i = 0; i < rows; i++) a.lse[i] = -INFINITY;
        attn__ring_pack_kv(c, k, v, kv);
    }
    if (st) goto done;
    /* a rank whose step fails keeps passing blocks on (no neighbour waits
     * for a message that never comes) and the verdict is shared at the end */
    attn_status mpi = ATTN_OK;
    /* the blocks' opts: without the sink (fold_sinks adds it once) */
    attn_sdpa_opts bo = *opts;
    bo.mask.sinks = NULL;
    bo.mask.n_sinks = 0;
    bo.mask.sinks_grad = NULL;
    for (int s = 0; s < c->P && !mpi; s++) {
        const int src = (c->rank - s + c->P) % c->P;
        char *cur = kv + (size_t)(s % 2) * kvb;
        attn__ring_reqs rq = {.n = 0};
        mpi = attn__ring_pass_kv(c, s, kv, kvb, TAG_KV, &rq);
        double t0 = MPI_Wtime(), waited = 0;
        int computed = 0;
        if (!st && !mpi) st = step(c, q, &bo, src, cur, &a, &rq, &computed);
        double t1 = MPI_Wtime();
        attn_status wst = attn__ring_wait(&rq, &waited);
        if (!mpi) mpi = wst;
        attn__ring_stats_step(stats, s, t1 - t0, waited, computed);
    }
    /* an MPI failure leaves the ring broken: reported by the ranks that
     * see it (no collective can be trusted now) */
    if (mpi) {
        st = mpi;
        goto done;
    }
    st = attn__ring_agree(c, st);
    if (!st && opts->mask.sinks) fold_sinks(c, &opts->mask, &a);
    if (!st) {
        float *od = out->data;
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t h = 0; h < d->H; h++)
                for (int64_t i = 0; i < d->Lq; i++) {
                    const float *src =
                        a.o + ((b * d->H + h) * d->Lq + i) * d->Dv;
                    float *dst = od + attn__off(out, b, h, i, 0);
                    for (int64_t e = 0; e < d->Dv; e++)
                        dst[e * out->stride[3]] = src[e];
                }
        if (lse) memcpy(lse, a.lse, (size_t)rows * sizeof(float));
    }
done:
    attn__free(kv);
    attn__free(a.o);
    attn__free(a.lse);
    attn__free(a.ot);
    attn__free(a.lt);
    return st;
}

attn_status attn_ring_sdpa_forward(MPI_Comm comm, attn_ring_layout layout,
                                   const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts, attn_tensor *out,
                                   float *lse, attn_ring_stats *stats) {
    double t0 = MPI_Wtime();
    attn__ring_stats_begin(stats);
    attn__sdpa_dims d;
    memset(&d, 0, sizeof d);
    attn_status local = attn__ring_local_check(layout, q, k, v, opts, &d);
    if (!local && d.Lq > 0) /* out (B, H, nq, Dv) f32, not broadcasting */
        local = attn__sdpa_check_view(out, "out", d.B, d.H, d.Lq, d.Dv, 0, 1);
    attn__ring c;
    attn_status st = attn__ring_begin(comm, layout, local, q, k, opts, &d, &c);
    if (st) return st;
    if (opts->rope) { /* rotated copies, then the ring without rotation */
        attn__ring_rope r;
        st = attn__ring_agree(&c, attn__ring_rope_make(&c, q, k, v, opts, &r));
        if (!st)
            st = ring_forward(&c, &r.q, &r.k, &r.v, &r.opts, out, lse, stats);
        attn__ring_rope_free(&r);
    } else {
        st = ring_forward(&c, q, k, v, opts, out, lse, stats);
    }
    return attn__ring_finish(&c, stats, t0, st);
}
