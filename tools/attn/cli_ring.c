/* --ring: attention across processes under mpirun (src/dist/, attn_dist.h).
 * Every rank reads the full inputs, keeps its shard, runs the ring; rank 0
 * gathers the result and writes the files the one-process command writes.
 * Built without MPI, --ring is a clear error. */
#include "cli.h"
#include "cli_ring.h"

#include <stdlib.h>
#include <string.h>

#ifndef ATTN_HAVE_MPI
static int no_mpi(const char *cmd) {
    return cli_usage_error(cmd,
                           "--ring needs attn built with MPI (install "
                           "libopenmpi-dev and openmpi-bin, then rebuild)");
}
#endif

int cli_ring_take(const char *cmd, int *argc, char **argv,
                  const char **layout) {
    *layout = NULL;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--ring") != 0) continue;
        if (i + 1 >= *argc)
            return cli_usage_error(
                cmd, "--ring needs a layout: contiguous or zigzag");
        *layout = argv[i + 1];
        if (strcmp(*layout, "contiguous") != 0 &&
            strcmp(*layout, "zigzag") != 0)
            return cli_usage_error(cmd,
                                   "--ring: unknown layout '%s' (contiguous "
                                   "or zigzag)",
                                   *layout);
        for (int j = i; j + 2 <= *argc; j++) argv[j] = argv[j + 2];
        *argc -= 2;
#ifndef ATTN_HAVE_MPI
        return no_mpi(cmd); /* before any file is read */
#else
        return 0;
#endif
    }
    return 0;
}

#ifndef ATTN_HAVE_MPI

int cli_ring_sdpa(const char *cmd, const char *layout, cli_tensor *q,
                  cli_tensor *k, cli_tensor *v, const attn_sdpa_opts *opts,
                  const char *out_path, const char *lse_path) {
    (void)layout;
    (void)q;
    (void)k;
    (void)v;
    (void)opts;
    (void)out_path;
    (void)lse_path;
    return no_mpi(cmd);
}

int cli_ring_backward(const char *cmd, const char *layout, cli_tensor *q,
                      cli_tensor *k, cli_tensor *v, cli_tensor *dout,
                      const attn_sdpa_opts *opts, const char *dq_path,
                      const char *dk_path, const char *dv_path,
                      const char *dsinks_path) {
    (void)dsinks_path;
    (void)layout;
    (void)q;
    (void)k;
    (void)v;
    (void)dout;
    (void)opts;
    (void)dq_path;
    (void)dk_path;
    (void)dv_path;
    return no_mpi(cmd);
}

int cli_ring_bench(const char *layout, int argc, char **argv) {
    (void)layout;
    (void)argc;
    (void)argv;
    return no_mpi("bench");
}

#else

#include "attn_dist.h"

/* Starts MPI once (a plain run without mpirun is a ring of one). */
static void ring_init(int *P, int *R) {
    int up = 0;
    MPI_Initialized(&up);
    if (!up) MPI_Init(NULL, NULL);
    MPI_Comm_size(MPI_COMM_WORLD, P);
    MPI_Comm_rank(MPI_COMM_WORLD, R);
}

static void ring_done(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

attn_ring_layout cli_ring_layout(const char *s) {
    return strcmp(s, "zigzag") == 0 ? ATTN_RING_ZIGZAG : ATTN_RING_CONTIGUOUS;
}

/* Rank's shard of a full tensor, in its dtype (data to free()). */
static attn_status shard_of(attn_ring_layout lay, int P, int R,
                            const attn_tensor *full, attn_tensor *sh) {
    int64_t n;
    attn_status st = attn_ring_shard_length(lay, full->shape[2], P, R, &n);
    if (st) return st;
    size_t bytes =
        (size_t)(full->shape[0] * full->shape[1] * n * full->shape[3]) *
        attn_dtype_size(full->dtype);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return ATTN_E_NOMEM;
    *sh = attn_tensor_4d(p, full->dtype, full->shape[0], full->shape[1], n,
                         full->shape[3]);
    st = attn_ring_shard(lay, P, R, full, sh);
    if (st) {
        free(p);
        sh->data = NULL;
    }
    return st;
}

/* Sums a float array over the ranks onto rank 0, in int-sized pieces. */
static void reduce0(float *x, size_t n, int R) {
    const size_t step = (size_t)1 << 28;
    for (size_t at = 0; at < n; at += step) {
        int c = (int)(n - at < step ? n - at : step);
        MPI_Reduce(R == 0 ? MPI_IN_PLACE : x + at, x + at, c, MPI_FLOAT,
                   MPI_SUM, 0, MPI_COMM_WORLD);
    }
}

/* The full (d0, d1, L, d3) tensor on rank 0 from every rank's shard:
 * a zeroed full array, each rank's rows, summed. */
static float *gather0(attn_ring_layout lay, int P, int R, const attn_tensor *sh,
                      int64_t L) {
    const size_t n = (size_t)(sh->shape[0] * sh->shape[1] * L * sh->shape[3]);
    float *full = calloc(n ? n : 1, sizeof(float));
    int ok = full != NULL, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        free(full);
        return NULL;
    }
    attn_tensor F = attn_tensor_4d(full, ATTN_F32, sh->shape[0], sh->shape[1],
                                   L, sh->shape[3]);
    attn_ring_unshard(lay, P, R, sh, &F);
    reduce0(full, n, R);
    return full;
}

/* A failure: rank 0 says why (every rank has the same verdict). */
static int ring_fail(const char *cmd, int R, attn_status st, const char *what) {
    if (R == 0) return cli_fail(cmd, st, what);
    return 1;
}

static int alloc_f32(float **p, size_t n) {
    *p = calloc(n ? n : 1, sizeof(float));
    return *p != NULL;
}

int cli_ring_sdpa(const char *cmd, const char *layout, cli_tensor *q,
                  cli_tensor *k, cli_tensor *v, const attn_sdpa_opts *opts,
                  const char *out_path, const char *lse_path) {
    int P, R, rc = 0;
    ring_init(&P, &R);
    const attn_ring_layout lay = cli_ring_layout(layout);
    attn_tensor Qs = {0}, Ks = {0}, Vs = {0};
    float *o = NULL, *l = NULL, *ofull = NULL, *lfull = NULL;
    attn_status st;
    if ((st = shard_of(lay, P, R, &q->t, &Qs)) ||
        (st = shard_of(lay, P, R, &k->t, &Ks)) ||
        (st = shard_of(lay, P, R, &v->t, &Vs))) {
        rc = ring_fail(cmd, R, st, "sharding");
        goto done;
    }
    const int64_t B = Qs.shape[0], H = Qs.shape[1], nq = Qs.shape[2];
    const int64_t Dv = Vs.shape[3], Lq = q->t.shape[2];
    if (!alloc_f32(&o, (size_t)(B * H * nq * Dv)) ||
        !alloc_f32(&l, (size_t)(B * H * nq))) {
        rc = ring_fail(cmd, R, ATTN_E_NOMEM, "ring output");
        goto done;
    }
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, H, nq, Dv);
    st = attn_ring_sdpa_forward(MPI_COMM_WORLD, lay, &Qs, &Ks, &Vs, opts, &O, l,
                                NULL);
    if (st) {
        rc = ring_fail(cmd, R, st, "ring attention");
        goto done;
    }
    attn_tensor Ls = attn_tensor_4d(l, ATTN_F32, B, H, nq, 1);
    ofull = gather0(lay, P, R, &O, Lq);
    lfull = gather0(lay, P, R, &Ls, Lq);
    if (!ofull || !lfull) {
        rc = ring_fail(cmd, R, ATTN_E_NOMEM, "gathering the output");
        goto done;
    }
    if (R == 0) {
        const int64_t os[4] = {B, H, Lq, Dv}, ls[3] = {B, H, Lq};
        rc = cli_save_like(cmd, out_path, ATTN_F32, ofull, 4, os, q->rank);
        if (!rc && lse_path)
            rc = cli_save_like(cmd, lse_path, ATTN_F32, lfull, 3, ls, q->rank);
    }
done:
    free(Qs.data);
    free(Ks.data);
    free(Vs.data);
    free(o);
    free(l);
    free(ofull);
    free(lfull);
    ring_done();
    return rc;
}

int cli_ring_backward(const char *cmd, const char *layout, cli_tensor *q,
                      cli_tensor *k, cli_tensor *v, cli_tensor *dout,
                      const attn_sdpa_opts *opts, const char *dq_path,
                      const char *dk_path, const char *dv_path,
                      const char *dsinks_path) {
    int P, R, rc = 0;
    ring_init(&P, &R);
    const attn_ring_layout lay = cli_ring_layout(layout);
    attn_tensor Qs = {0}, Ks = {0}, Vs = {0}, dOs = {0};
    float *o = NULL, *l = NULL, *g = NULL, *full[3] = {NULL, NULL, NULL};
    double *ds = NULL; /* dL/dsinks: the full gradient on every rank */
    attn_sdpa_opts bo = *opts;
    attn_status st;
    if ((st = shard_of(lay, P, R, &q->t, &Qs)) ||
        (st = shard_of(lay, P, R, &k->t, &Ks)) ||
        (st = shard_of(lay, P, R, &v->t, &Vs)) ||
        (st = shard_of(lay, P, R, &dout->t, &dOs))) {
        rc = ring_fail(cmd, R, st, "sharding");
        goto done;
    }
    const int64_t B = Qs.shape[0], H = Qs.shape[1], nq = Qs.shape[2];
    const int64_t Hkv = Ks.shape[1], nk = Ks.shape[2], Dk = Qs.shape[3];
    const int64_t Dv = Vs.shape[3];
    const size_t nqg = (size_t)(B * H * nq * Dk),
                 nkg = (size_t)(B * Hkv * nk * Dk);
    if (!alloc_f32(&o, (size_t)(B * H * nq * Dv)) ||
        !alloc_f32(&l, (size_t)(B * H * nq)) ||
        !alloc_f32(&g, nqg + nkg + (size_t)(B * Hkv * nk * Dv)) ||
        (dsinks_path && !(ds = calloc((size_t)H, sizeof(double))))) {
        rc = ring_fail(cmd, R, ATTN_E_NOMEM, "ring gradients");
        goto done;
    }
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, H, nq, Dv);
    attn_tensor dQ = attn_tensor_4d(g, ATTN_F32, B, H, nq, Dk);
    attn_tensor dK = attn_tensor_4d(g + nqg, ATTN_F32, B, Hkv, nk, Dk);
    attn_tensor dV = attn_tensor_4d(g + nqg + nkg, ATTN_F32, B, Hkv, nk, Dv);
    st = attn_ring_sdpa_forward(MPI_COMM_WORLD, lay, &Qs, &Ks, &Vs, opts, &O, l,
                                NULL);
    if (st) {
        rc = ring_fail(cmd, R, st, "ring forward");
        goto done;
    }
    bo.mask.sinks_grad = ds;
    st = attn_ring_sdpa_backward(MPI_COMM_WORLD, lay, &Qs, &Ks, &Vs, &O, l,
                                 &dOs, &bo, &dQ, &dK, &dV, NULL);
    if (st) {
        rc = ring_fail(cmd, R, st, "ring backward");
        goto done;
    }
    full[0] = gather0(lay, P, R, &dQ, q->t.shape[2]);
    full[1] = gather0(lay, P, R, &dK, k->t.shape[2]);
    full[2] = gather0(lay, P, R, &dV, k->t.shape[2]);
    if (!full[0] || !full[1] || !full[2]) {
        rc = ring_fail(cmd, R, ATTN_E_NOMEM, "gathering the gradients");
        goto done;
    }
    if (R == 0) {
        const int64_t qs[4] = {B, H, q->t.shape[2], Dk};
        const int64_t ks[4] = {B, Hkv, k->t.shape[2], Dk};
        const int64_t vs[4] = {B, Hkv, k->t.shape[2], Dv};
        if ((rc = cli_save_like(cmd, dq_path, ATTN_F32, full[0], 4, qs,
                                q->rank)) ||
            (rc = cli_save_like(cmd, dk_path, ATTN_F32, full[1], 4, ks,
                                k->rank)))
            goto done;
        rc = cli_save_like(cmd, dv_path, ATTN_F32, full[2], 4, vs, v->rank);
        if (!rc && dsinks_path) {
            const int64_t nh = H;
            rc = cli_save_array(cmd, dsinks_path, ATTN_F64, ds, 1, &nh);
        }
    }
done:
    free(ds);
    free(Qs.data);
    free(Ks.data);
    free(Vs.data);
    free(dOs.data);
    free(o);
    free(l);
    free(g);
    for (int x = 0; x < 3; x++) free(full[x]);
    ring_done();
    return rc;
}

#endif /* ATTN_HAVE_MPI */
