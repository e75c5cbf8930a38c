/* --ring: attention across processes under mpirun (src/dist/, attn_dist.h).
 * Every rank reads the full inputs, keeps its shard, runs the ring; rank 0
 * gathers the result and writes the files the one-process command writes.
 * Built without MPI, --ring is a clear error. */
#include "cli.h"
#include "cli_ring.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Launchers tell each process its place before MPI starts: Open MPI's
 * mpirun, then the PMI / PMIx variables of MPICH's and Slurm's. */
static long env_long(const char *a, const char *b, const char *c) {
    const char *names[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        const char *v = names[i] ? getenv(names[i]) : NULL;
        char *end;
        if (!v || !*v) continue;
        long x = strtol(v, &end, 10);
        if (*end == 0 && x >= 0 && x < (1L << 30)) return x;
    }
    return -1;
}

int cli_mpi_world(int *rank) {
    long n = env_long("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE");
    long r = env_long("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK");
    *rank = r < 0 ? 0 : (int)r;
    return n < 0 ? 0 : (int)n;
}

static int joined;

int cli_ring_joined(void) { return joined; }

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

int cli_ring_sdpa_args(const char *cmd, int *argc, char **argv,
                       cli_sdpa_args *a, const char **layout) {
    cli_sdpa_args_init(a);
    int rc = cli_ring_take(cmd, argc, argv, layout);
    return rc ? rc : cli_sdpa_args_parse(cmd, argc, argv, a);
}

#ifndef ATTN_HAVE_MPI

int cli_ring_sdpa(const char *cmd, const char *layout, cli_tensor *q,
                  cli_tensor *k, cli_tensor *v, const attn_sdpa_opts *opts,
                  const char *out_path, const char *lse_path,
                  attn_dtype out_dtype) {
    (void)layout;
    (void)q;
    (void)k;
    (void)v;
    (void)opts;
    (void)out_path;
    (void)lse_path;
    (void)out_dtype;
    return no_mpi(cmd);
}

int cli_ring_backward(const char *cmd, const char *layout, attn_dtype out_dtype,
                      cli_tensor *q, cli_tensor *k, cli_tensor *v,
                      cli_tensor *dout, const attn_sdpa_opts *opts,
                      const char *dq_path, const char *dk_path,
                      const char *dv_path, const char *dsinks_path) {
    (void)dsinks_path;
    (void)out_dtype;
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

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

/* MPI_Init returns once every rank has called it; a rank that never does
 * (it ran without --ring, or stopped before joining) would leave the
 * others waiting forever. A watchdog thread gives up after
 * ATTN_RING_JOIN_TIMEOUT seconds (default 120) with a message and exit
 * status 1, and mpirun then ends the job. */
static pthread_mutex_t join_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t join_cv = PTHREAD_COND_INITIALIZER;
static int join_done;

static double join_timeout(void) {
    const char *v = getenv("ATTN_RING_JOIN_TIMEOUT");
    char *end;
    double t = v ? strtod(v, &end) : 0.0;
    return v && *end == 0 && t > 0 && t < 1e6 ? t : 120.0;
}

static void *join_watch(void *arg) {
    const double secs = *(const double *)arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)secs;
    until.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&join_mu);
    int rc = 0;
    while (!join_done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&join_cv, &join_mu, &until);
    int done = join_done;
    pthread_mutex_unlock(&join_mu);
    if (!done) {
        int rank, n = cli_mpi_world(&rank);
        fprintf(stderr,
                "attn: rank %d of %d: not every rank joined the ring within "
                "%g s (a rank ran without --ring or with other arguments, "
                "or stopped before joining: its own message says which); "
                "giving up (ATTN_RING_JOIN_TIMEOUT sets the wait)\n",
                rank, n, secs);
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

/* Starts MPI once (a plain run without mpirun is a ring of one). */
void cli_ring_init(int *P, int *R) {
    int up = 0;
    MPI_Initialized(&up);
    if (!up) {
        static double secs;
        secs = join_timeout();
        pthread_t th;
        int watching = pthread_create(&th, NULL, join_watch, &secs) == 0;
        MPI_Init(NULL, NULL);
        pthread_mutex_lock(&join_mu);
        join_done = 1;
        pthread_cond_signal(&join_cv);
        pthread_mutex_unlock(&join_mu);
        if (watching) pthread_join(th, NULL);
    }
    joined = 1;
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

/* A 64-bit hash of a tensor's dtype, shape and bytes (contiguous: the
 * CLI's inputs are), four independent lanes so that it runs near memory
 * speed. Only for comparing what the ranks read, not for security. */
static uint64_t tensor_hash(const attn_tensor *t) {
    uint64_t h[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full,
                     0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull};
    const uint64_t m = 0xFF51AFD7ED558CCDull;
    h[0] ^= (uint64_t)t->dtype;
    for (int i = 0; i < 4; i++) h[i] = (h[i] ^ (uint64_t)t->shape[i]) * m;
    size_t n = attn_dtype_size(t->dtype);
    for (int i = 0; i < 4; i++) n *= (size_t)t->shape[i];
    const unsigned char *b = t->data;
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * (size_t)l, 8);
            h[l] = (h[l] ^ w) * m;
            h[l] ^= h[l] >> 29;
        }
    for (; i < n; i++) h[0] = (h[0] ^ b[i]) * m;
    uint64_t x = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7) ^ (uint64_t)n;
    x ^= x >> 31;
    return x * m;
}

/* Every rank read the full inputs from its own files: they must hold the
 * same data, or each rank would compute with its own and rank 0 would
 * write a mix. The hashes are gathered and compared with rank 0's; the
 * same verdict on every rank, naming the first rank and input that
 * differ. 0, or the exit status. */
static int ring_same_inputs(const char *cmd, int P, int R,
                            const cli_tensor *const *in,
                            const char *const *names, int n) {
    uint64_t mine[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i++) mine[i] = tensor_hash(&in[i]->t);
    uint64_t *all = malloc(sizeof(uint64_t) * 4 * (size_t)P);
    int ok = all != NULL, every = 0;
    MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!every) {
        free(all);
        if (R == 0)
            return cli_fail(cmd, ATTN_E_NOMEM, "comparing the ranks' inputs");
        return 1;
    }
    MPI_Allgather(mine, 4, MPI_UINT64_T, all, 4, MPI_UINT64_T, MPI_COMM_WORLD);
    int bad_rank = -1, bad_in = -1;
    for (int r = 1; r < P && bad_rank < 0; r++)
        for (int i = 0; i < n && bad_rank < 0; i++)
            if (all[4 * r + i] != all[i]) {
                bad_rank = r;
                bad_in = i;
            }
    free(all);
    if (bad_rank < 0) return 0;
    if (R == 0)
        fprintf(stderr,
                "attn %s: rank %d read other data for %s than rank 0 (its "
                "shape, dtype or values differ): every rank must read the "
                "same input files\n",
                cmd, bad_rank, names[bad_in]);
    return 1;
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
                  const char *out_path, const char *lse_path,
                  attn_dtype out_dtype) {
    int P, R, rc = 0;
    cli_ring_init(&P, &R);
    const attn_ring_layout lay = cli_ring_layout(layout);
    attn_tensor Qs = {0}, Ks = {0}, Vs = {0};
    float *o = NULL, *l = NULL, *ofull = NULL, *lfull = NULL;
    attn_status st;
    const cli_tensor *in[3] = {q, k, v};
    const char *const names[3] = {"q", "k", "v"};
    if ((rc = ring_same_inputs(cmd, P, R, in, names, 3))) goto done;
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
        rc = cli_save_like_as(cmd, out_path, ATTN_F32, ofull, 4, os, q->rank,
                              out_dtype);
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

int cli_ring_backward(const char *cmd, const char *layout, attn_dtype out_dtype,
                      cli_tensor *q, cli_tensor *k, cli_tensor *v,
                      cli_tensor *dout, const attn_sdpa_opts *opts,
                      const char *dq_path, const char *dk_path,
                      const char *dv_path, const char *dsinks_path) {
    int P, R, rc = 0;
    cli_ring_init(&P, &R);
    const attn_ring_layout lay = cli_ring_layout(layout);
    attn_tensor Qs = {0}, Ks = {0}, Vs = {0}, dOs = {0};
    float *o = NULL, *l = NULL, *g = NULL, *full[3] = {NULL, NULL, NULL};
    double *ds = NULL; /* dL/dsinks: the full gradient on every rank */
    attn_sdpa_opts bo = *opts;
    attn_status st;
    const cli_tensor *in[4] = {q, k, v, dout};
    const char *const names[4] = {"q", "k", "v", "dout"};
    if ((rc = ring_same_inputs(cmd, P, R, in, names, 4))) goto done;
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
        if ((rc = cli_save_like_as(cmd, dq_path, ATTN_F32, full[0], 4, qs,
                                   q->rank, out_dtype)) ||
            (rc = cli_save_like_as(cmd, dk_path, ATTN_F32, full[1], 4, ks,
                                   k->rank, out_dtype)))
            goto done;
        rc = cli_save_like_as(cmd, dv_path, ATTN_F32, full[2], 4, vs, v->rank,
                              out_dtype);
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
