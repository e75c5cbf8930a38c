/* Ring attention backward over MPI (as ring-flash-attention does it).
 *
 * The K/V blocks travel around the ring as in the forward (ring.c). Each
 * block's dK/dV accumulator travels with it, one step behind: at step s
 * rank r holds the block of rank src = (r - s) mod P and
 *   - posts the receive of the next K/V block and of this block's
 *     accumulator (sent by r - 1 after its step s - 1), and the send of the
 *     current K/V block;
 *   - computes its queries' contribution to dQ (added in place) and to the
 *     block's dK/dV (into a fresh buffer) with the flash backward in the
 *     full sequence's frame (attn__flash_backward_at: lse, O and dO are of
 *     the full attention, so the block's weights are exact);
 *   - waits for the accumulator, adds it to its contribution and sends the
 *     sum on to r + 1.
 * After P steps the accumulator of every block has visited every rank and
 * arrives at its owner (r + 1 holds the block of r + 1 - P = r + 1 at the
 * last step), which adds it into dk, dv. The receive of an accumulator runs
 * during the compute; only the sum waits for it.
 *
 * With attention sinks the blocks run without the sink (lse, which holds
 * it, already makes their weights exact) and dL/dsinks is formed once per
 * query row from the row alone, -e^(sink - lse) dO.O, summed per head on
 * each rank and then across ranks in rank order (sink_grad), so every rank
 * adds the same full gradient. */
#include "dist.h"

#include <math.h>
#include <string.h>

enum { TAG_KV = 7101, TAG_ACC = 7102 };

/* Bytes of the f32 dK/dV accumulator of rank r's block. */
static size_t acc_bytes(const attn__ring *c, int r) {
    const attn__sdpa_dims *d = &c->d;
    return (size_t)(d->B * d->Hkv * c->nk[r] * (d->Dk + d->Dv)) * sizeof(float);
}

typedef struct {
    const attn_tensor *q, *out, *dout;
    const float *lse;
    attn_tensor *dq;
    float *lt; /* lse of one query run, contiguous (B * H * run) */
} bwd_in;

/* This rank's queries against the block of rank src: dQ added into in->dq,
 * dK/dV of the block added into acc (f32, packed like the block). */
static attn_status step(const attn__ring *c, const bwd_in *in,
                        const attn_sdpa_opts *opts, int src, void *kv,
                        float *acc, attn__ring_reqs *rq, attn__ring_reqs *ra,
                        int *computed) {
    const attn__sdpa_dims *d = &c->d;
    int64_t qs[2], ql[2], ks[2], kl[2];
    const int nqr = attn__ring_qruns(c, c->rank, qs, ql);
    const int nkr = attn__ring_kruns(c, src, ks, kl);
    int64_t qro = 0;
    *computed = 0;
    for (int x = 0; x < nqr; qro += ql[x], x++) {
        int64_t kro = 0;
        const int64_t sl = attn__ring_slice(c, opts, ql[x]);
        for (int y = 0; y < nkr; kro += kl[y], y++) {
            if (attn__ring_pair_empty(c, &opts->mask, qs[x], ql[x], ks[y],
                                      kl[y]))
                continue;
            attn_tensor K, V, dK, dV;
            attn__ring_block_views(c, kv, c->dt, c->nk[src], kro, kl[y], &K,
                                   &V);
            attn__ring_block_views(c, acc, ATTN_F32, c->nk[src], kro, kl[y],
                                   &dK, &dV);
            /* in slices of query rows, letting MPI move the blocks between */
            for (int64_t r0 = 0; r0 < ql[x]; r0 += sl) {
                const int64_t nr = ql[x] - r0 < sl ? ql[x] - r0 : sl;
                if (attn__ring_pair_empty(c, &opts->mask, qs[x] + r0, nr, ks[y],
                                          kl[y]))
                    continue;
                /* the slice's lse rows, contiguous for the kernel */
                for (int64_t bh = 0; bh < d->B * d->H; bh++)
                    memcpy(in->lt + bh * nr, in->lse + bh * d->Lq + qro + r0,
                           (size_t)nr * sizeof(float));
                attn_tensor Q = attn__ring_rows(in->q, qro + r0, nr);
                attn_tensor O = attn__ring_rows(in->out, qro + r0, nr);
                attn_tensor dO = attn__ring_rows(in->dout, qro + r0, nr);
                attn_tensor dQ = attn__ring_rows(in->dq, qro + r0, nr);
                attn__sdpa_dims pd = attn__ring_pair_dims(c, nr, kl[y]);
                attn__flash_pos pos = {qs[x] + r0, ks[y], c->Lq, c->Lk};
                attn_status st =
                    attn__flash_backward_at(&Q, &K, &V, &O, in->lt, &dO, opts,
                                            &pd, &pos, &dQ, &dK, &dV);
                if (st) return st;
                attn__ring_progress(rq, ra);
                *computed = 1;
            }
        }
    }
    return ATTN_OK;
}

/* Adds a packed f32 accumulator of this rank's block into dk and dv. */
static void add_into(const attn__ring *c, const float *acc, attn_tensor *dk,
                     attn_tensor *dv) {
    const attn__sdpa_dims *d = &c->d;
    const int64_t nk = d->Lk;
    const float *a = acc;
    for (int pass = 0; pass < 2; pass++) {
        attn_tensor *t = pass ? dv : dk;
        const int64_t D = pass ? d->Dv : d->Dk;
        float *base = t->data;
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t h = 0; h < d->Hkv; h++)
                for (int64_t i = 0; i < nk; i++, a += D) {
                    float *row = base + attn__off(t, b, h, i, 0);
                    for (int64_t e = 0; e < D; e++)
                        row[e * t->stride[3]] += a[e];
                }
    }
}

/* dL/dsinks: this rank's rows' part per head (-sum_i e^(sink - lse_i)
 * dO_i.O_i, in double), every rank's parts gathered and summed in rank
 * order, added into sinks_grad where this rank passes one. sg holds
 * (P + 1) H doubles. Collective. */
static attn_status sink_grad(const attn__ring *c, const bwd_in *in,
                             const attn_mask *m, double *sg) {
    const attn__sdpa_dims *d = &c->d;
    double *mine = sg + (size_t)c->P * (size_t)d->H;
    for (int64_t h = 0; h < d->H; h++) mine[h] = 0;
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->Lq; i++) {
                const float *o = (const float *)in->out->data +
                                 attn__off(in->out, b, h, i, 0);
                const float *g = (const float *)in->dout->data +
                                 attn__off(in->dout, b, h, i, 0);
                double dot = 0;
                for (int64_t e = 0; e < d->Dv; e++)
                    dot += (double)g[e * in->dout->stride[3]] *
                           o[e * in->out->stride[3]];
                const float l = in->lse[(b * d->H + h) * d->Lq + i];
                mine[h] -= exp(m->sinks[h] - (double)l) * dot;
            }
    int err = MPI_Allgather(mine, (int)d->H, MPI_DOUBLE, sg, (int)d->H,
                            MPI_DOUBLE, c->comm);
    if (err != MPI_SUCCESS)
        return attn__fail(ATTN_E_IO, "ring: MPI_Allgather of dL/dsinks failed");
    if (m->sinks_grad)
        for (int64_t h = 0; h < d->H; h++) {
            double t = 0;
            for (int r = 0; r < c->P; r++) t += sg[(size_t)r * d->H + h];
            m->sinks_grad[h] += t;
        }
    return ATTN_OK;
}

static void add_acc(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static attn_status ring_backward(const attn__ring *c, const bwd_in *in,
                                 const attn_tensor *k, const attn_tensor *v,
                                 const attn_sdpa_opts *opts, attn_tensor *dk,
                                 attn_tensor *dv, attn_ring_stats *stats) {
    const attn__sdpa_dims *d = &c->d;
    int64_t maxrun = 0, s2[2], l2[2];
    for (int x = 0, n = attn__ring_qruns(c, c->rank, s2, l2); x < n; x++)
        if (attn__ring_slice(c, opts, l2[x]) > maxrun)
            maxrun = attn__ring_slice(c, opts, l2[x]);
    const size_t kvb =
        (size_t)(d->B * d->Hkv * c->maxnk * (d->Dk + d->Dv)) * c->es;
    const size_t accb =
        (size_t)(d->B * d->Hkv * c->maxnk * (d->Dk + d->Dv)) * sizeof(float);
    char *kv = attn__alloc(2 * kvb, 1, "ring K/V buffers");
    /* two accumulators being sent (one step of slack) and one arriving */
    char *accs = attn__alloc(3 * accb, 1, "ring dK/dV accumulators");
    bwd_in io = *in;
    io.lt = attn__alloc((size_t)(d->B * d->H * maxrun), sizeof(float),
                        "ring lse rows");
    double *sg = NULL;
    if (opts->mask.sinks)
        sg = attn__alloc((size_t)(c->P + 1) * (size_t)d->H, sizeof(double),
                         "ring dL/dsinks");
    attn_status st = (!kv || !accs || !io.lt || (opts->mask.sinks && !sg))
                         ? ATTN_E_NOMEM
                         : ATTN_OK;
    st = attn__ring_agree(c, st);
    if (st) goto done;
    /* the blocks' opts: no sink gradient per block (sink_grad forms it) */
    attn_sdpa_opts bo = *opts;
    bo.mask.sinks = NULL;
    bo.mask.n_sinks = 0;
    bo.mask.sinks_grad = NULL;
    attn__ring_pack_kv(c, k, v, kv);
    float *arrive = (float *)(void *)(accs + 2 * accb);
    attn_status mpi = ATTN_OK;
    attn__ring_reqs acc_sent[2] = {{.n = 0}, {.n = 0}};
    for (int s = 0; s < c->P && !mpi; s++) {
        const int src = (c->rank - s + c->P) % c->P;
        char *cur = kv + (size_t)(s % 2) * kvb;
        float *mine = (float *)(void *)(accs + (size_t)(s % 2) * accb);
        const size_t nacc = acc_bytes(c, src) / sizeof(float);
        attn__ring_reqs rq = {.n = 0}, ra = {.n = 0};
        double waited = 0;
        /* the send of this buffer two steps ago must be done before reuse */
        mpi = attn__ring_wait(&acc_sent[s % 2], &waited);
        if (!mpi) mpi = attn__ring_pass_kv(c, s, kv, kvb, TAG_KV, &rq);
        if (!mpi && s > 0)
            mpi = attn__ring_irecv(c, arrive, acc_bytes(c, src), c->prev,
                                   TAG_ACC, &ra);
        double t0 = MPI_Wtime();
        int computed = 0;
        memset(mine, 0, nacc * sizeof(float));
        if (!st && !mpi)
            st = step(c, &io, &bo, src, cur, mine, &rq, &ra, &computed);
        double t1 = MPI_Wtime();
        if (!mpi) mpi = attn__ring_wait(&ra, &waited);
        if (!mpi && s > 0) add_acc(mine, arrive, nacc);
        if (!mpi && c->P > 1)
            mpi = attn__ring_isend(c, mine, acc_bytes(c, src), c->next, TAG_ACC,
                                   &acc_sent[s % 2]);
        attn_status w = attn__ring_wait(&rq, &waited);
        if (!mpi) mpi = w;
        attn__ring_stats_step(stats, s, t1 - t0, waited, computed);
    }
    /* this rank's own accumulator, back from its last visit (P = 1: the
     * one computed here) */
    float *own = (float *)(void *)accs; /* P = 1: step 0's buffer */
    if (!mpi && c->P > 1) {
        attn__ring_reqs ra = {.n = 0};
        double waited = 0;
        mpi = attn__ring_irecv(c, arrive, acc_bytes(c, c->rank), c->prev,
                               TAG_ACC, &ra);
        if (!mpi) mpi = attn__ring_wait(&ra, &waited);
        if (stats) stats->wait_s += waited;
        own = arrive;
    }
    for (int x = 0; x < 2; x++) {
        attn_status w = attn__ring_wait(&acc_sent[x], NULL);
        if (!mpi) mpi = w;
    }
    if (mpi) {
        st = mpi;
        goto done;
    }
    st = attn__ring_agree(c, st);
    if (!st) add_into(c, own, dk, dv);
    if (!st && opts->mask.sinks) st = sink_grad(c, &io, &opts->mask, sg);
done:
    attn__free(sg);
    attn__free(kv);
    attn__free(accs);
    attn__free(io.lt);
    return st;
}

/* A view of shape (d0, d1, d2, d3) in f32 that may be written (or read):
 * the SDPA kernels' check of their outputs. */
static attn_status check_f32(const attn_tensor *t, const char *name, int64_t d0,
                             int64_t d1, int64_t d2, int64_t d3, int written) {
    return attn__sdpa_check_view(t, name, d0, d1, d2, d3, 0, written);
}

/* With opts.rope: the ring backward of the rotated q and k (ring_rope.c)
 * into zeroed gradients, then back through the rotation into dq and dk. */
static attn_status rope_backward(attn__ring *c, const attn_tensor *q,
                                 const attn_tensor *k, const attn_tensor *v,
                                 const attn_tensor *out, const float *lse,
                                 const attn_tensor *dout,
                                 const attn_sdpa_opts *opts, attn_tensor *dq,
                                 attn_tensor *dk, attn_tensor *dv,
                                 attn_ring_stats *stats) {
    const attn__sdpa_dims *d = &c->d;
    attn__ring_rope r;
    attn_status st = attn__ring_rope_make(c, q, k, v, opts, &r);
    const int64_t nq = d->B * d->H * d->Lq * d->Dk,
                  nk = d->B * d->Hkv * d->Lk * d->Dk;
    float *g =
        st ? NULL
           : attn__alloc((size_t)(nq + nk), sizeof(float), "rotated gradients");
    if (!st && !g) st = ATTN_E_NOMEM;
    st = attn__ring_agree(c, st);
    if (!st) {
        memset(g, 0, (size_t)(nq + nk) * sizeof(float));
        attn_tensor gq = attn_tensor_4d(g, ATTN_F32, d->B, d->H, d->Lq, d->Dk);
        attn_tensor gk =
            attn_tensor_4d(g + nq, ATTN_F32, d->B, d->Hkv, d->Lk, d->Dk);
        bwd_in in = {
            .q = &r.q, .out = out, .dout = dout, .lse = lse, .dq = &gq};
        st = ring_backward(c, &in, &r.k, &r.v, &r.opts, &gk, dv, stats);
        if (!st) st = attn__ring_rope_grads(&r, opts, &gq, &gk, dq, dk);
    }
    attn__free(g);
    if (r.qpos) attn__ring_rope_free(&r);
    return st;
}

attn_status attn_ring_sdpa_backward(
    MPI_Comm comm, attn_ring_layout layout, const attn_tensor *q,
    const attn_tensor *k, const attn_tensor *v, const attn_tensor *out,
    const float *lse, const attn_tensor *dout, const attn_sdpa_opts *opts,
    attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, attn_ring_stats *stats) {
    double t0 = MPI_Wtime();
    attn__ring_stats_begin(stats);
    attn__sdpa_dims d;
    memset(&d, 0, sizeof d);
    attn_status local = attn__ring_local_check(layout, q, k, v, opts, &d);
    if (!local && d.Lq > 0 && d.Lk > 0) {
        if (!lse)
            local =
                attn__fail(ATTN_E_INVALID,
                           "lse is NULL: the ring backward "
                           "needs the log-sum-exp of attn_ring_sdpa_forward");
        if (!local) local = check_f32(out, "out", d.B, d.H, d.Lq, d.Dv, 0);
        if (!local) local = check_f32(dout, "dout", d.B, d.H, d.Lq, d.Dv, 0);
        if (!local) local = check_f32(dq, "dq", d.B, d.H, d.Lq, d.Dk, 1);
        if (!local) local = check_f32(dk, "dk", d.B, d.Hkv, d.Lk, d.Dk, 1);
        if (!local) local = check_f32(dv, "dv", d.B, d.Hkv, d.Lk, d.Dv, 1);
        if (!local) local = attn__check_finite(dout, "dout");
    }
    attn__ring c;
    attn_status st = attn__ring_begin(comm, layout, local, q, k, opts, &d, &c);
    if (st) return st;
    if (opts->rope) {
        st =
            rope_backward(&c, q, k, v, out, lse, dout, opts, dq, dk, dv, stats);
    } else {
        bwd_in in = {.q = q, .out = out, .dout = dout, .lse = lse, .dq = dq};
        st = ring_backward(&c, &in, k, v, opts, dk, dv, stats);
    }
    return attn__ring_finish(&c, stats, t0, st);
}
