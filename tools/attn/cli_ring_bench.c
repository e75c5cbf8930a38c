/* attn bench --ring LAYOUT: the ring forward (and backward) under mpirun.
 *
 * Every rank builds the same random full tensors and keeps its shard.
 * Measured, in this order, with the other ranks idle (sleeping, not
 * spinning) whenever one rank measures alone:
 *   - the transfer of one K/V block around the ring, alone (MPI_Sendrecv);
 *   - each rank's compute alone: its queries against every key in one flash
 *     call per query run, at global positions (the ring's work, no ring);
 *   - the ring itself: per-step compute and exposed wait of every rank;
 *   - one process with P x threads threads on the full tensors (rank 0).
 * Printed: ring / compute alone (1.0 = communication fully hidden), the
 * slowest rank's compute against the average (balance), the overlap (1 -
 * exposed wait / transfer time) and the efficiency T(one process) / T(ring).
 * --reps N alternates compute alone and the ring N times and keeps the
 * fastest of each. On a shared machine rerun for stable numbers. */
#include "cli.h"
#include "cli_ring.h"

#ifdef ATTN_HAVE_MPI

#include "attn_dist.h"
#include "flash.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Waits for every rank without spinning (Open MPI's barrier polls a core,
 * which would steal it from the rank measuring alone). */
static void quiet_barrier(void) {
    MPI_Request rq;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    while (!done) {
        MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        if (!done) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
}

static float *rnd(size_t n, unsigned long long *s) {
    float *x = malloc(n * sizeof(float));
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
    return x;
}

typedef struct {
    int64_t L, H, D;
    int causal, threads, backward, single, reps;
} rb_opts;

/* This rank's queries against all keys, one flash call per query run. */
static double compute_alone(attn_ring_layout lay, int P, int R,
                            const attn_tensor *Qs, const attn_tensor *K,
                            const attn_tensor *V, const attn_sdpa_opts *o,
                            float *out, float *lse) {
    int64_t s[2], l[2];
    int n;
    attn_ring_runs(lay, K->shape[2], P, R, s, l, &n);
    double t0 = MPI_Wtime();
    int64_t at = 0;
    for (int x = 0; x < n; at += l[x], x++) {
        attn_tensor q = *Qs;
        q.data = (float *)Qs->data + at * Qs->stride[2];
        q.shape[2] = l[x];
        attn__sdpa_dims d;
        if (attn__sdpa_check(&q, K, V, o, NULL, NULL, 0, &d)) return -1;
        attn__flash_pos pos = {s[x], 0, K->shape[2], K->shape[2]};
        attn_tensor O = attn_tensor_4d(out, ATTN_F32, 1, d.H, l[x], d.Dv);
        if (attn__flash_forward_at(&q, K, V, o, &d, &pos, &O, lse, NULL, NULL))
            return -1;
    }
    return MPI_Wtime() - t0;
}

/* Gathers one double per rank onto every rank. */
static void all_of(double x, double *all) {
    MPI_Allgather(&x, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
}

static void stats_line(const char *what, double *v, int P) {
    double mx = 0, sum = 0;
    for (int r = 0; r < P; r++) {
        sum += v[r];
        if (v[r] > mx) mx = v[r];
    }
    printf("  %-28s", what);
    for (int r = 0; r < P && r < 16; r++) printf(" %9.1f", v[r] * 1e3);
    printf("   (max %.1f, mean %.1f ms)\n", mx * 1e3, sum / P * 1e3);
}

static double vmax(const double *v, int P) {
    double m = 0;
    for (int r = 0; r < P; r++) m = v[r] > m ? v[r] : m;
    return m;
}

static double vmean(const double *v, int P) {
    double s = 0;
    for (int r = 0; r < P; r++) s += v[r];
    return s / P;
}

/* What run() measured, for report(). */
typedef struct {
    double *txa, *alone, *comp, *wait, *tot, *stepc, *stepw, *btot, *bcomp,
        *bwait;
    double t1, tb1;
    size_t kvb;
} rb_res;

/* Rank 0's summary of a run. */
static void report(const rb_res *x, const rb_opts *b, const char *layout,
                   int P) {
    const int64_t L = b->L, H = b->H, D = b->D;
    const double mib = (double)x->kvb / (1 << 20);
    printf("ring bench: P=%d ranks x %d thread(s), B=1 H=%lld L=%lld D=%lld "
           "%s, layout %s, f32\n",
           P, b->threads, (long long)H, (long long)L, (long long)D,
           b->causal ? "causal" : "full", layout);
    printf("  K/V block %.1f MiB; transfer alone %.2f ms (%.2f GB/s)\n", mib,
           vmax(x->txa, P) * 1e3, (double)x->kvb / vmax(x->txa, P) / 1e9);
    printf("  %-28s", "per rank (ms):");
    for (int r = 0; r < P && r < 16; r++) printf(" %9d", r);
    printf("\n");
    stats_line("compute alone", x->alone, P);
    stats_line("ring: total", x->tot, P);
    stats_line("ring: compute", x->comp, P);
    stats_line("ring: exposed wait", x->wait, P);
    printf("  ring per step, compute / wait ms (row = rank, column = step):\n");
    for (int r = 0; r < P && r < 16; r++) {
        printf("    rank %2d:", r);
        for (int s = 0; s < P && s < 16; s++)
            printf(" %7.1f/%.1f", x->stepc[r * P + s] * 1e3,
                   x->stepw[r * P + s] * 1e3);
        printf("\n");
    }
    const double ring = vmax(x->tot, P), al = vmax(x->alone, P);
    /* communication left visible: the ring's time beyond the compute
     * x->alone, against the transfers' time alone */
    const double xfer = vmax(x->txa, P) * (P - 1), shown = ring - al;
    double over = xfer > 0 ? 1.0 - (shown > 0 ? shown : 0) / xfer : 1;
    over = over < 0 ? 0 : over;
    printf("  ring / compute alone (slowest rank): %.3f\n", ring / al);
    printf("  balance: slowest rank's compute / mean: %.3f alone, %.3f in the "
           "ring\n",
           vmax(x->alone, P) / vmean(x->alone, P),
           vmax(x->comp, P) / vmean(x->comp, P));
    if (P > 1) {
        double ow = 1.0 - vmean(x->wait, P) / xfer;
        printf("  overlap: 1 - exposed wait / transfers alone: %.3f (mean wait "
               "%.1f ms)\n",
               ow < 0 ? 0.0 : ow, vmean(x->wait, P) * 1e3);
    }
    if (P > 1)
        printf("  by time: 1 - (ring - compute alone) / transfers alone: %.3f "
               "(%.1f ms beyond compute, %.1f ms of transfers per rank)\n",
               over, shown * 1e3, xfer * 1e3);
    if (x->t1 > 0)
        printf("  one process, %d threads: %.1f ms; efficiency %.3f\n",
               P * b->threads, x->t1 * 1e3, x->t1 / ring);
    if (b->backward) {
        stats_line("ring backward: total", x->btot, P);
        stats_line("ring backward: compute", x->bcomp, P);
        stats_line("ring backward: exposed wait", x->bwait, P);
        printf("  ring backward: exposed wait / total (slowest rank): %.3f\n",
               vmax(x->bwait, P) / vmax(x->btot, P));
        if (x->tb1 > 0)
            printf("  one process backward, %d threads: %.1f ms; efficiency "
                   "%.3f\n",
                   P * b->threads, x->tb1 * 1e3, x->tb1 / vmax(x->btot, P));
    }
}

/* The full tensors (every rank the same), this rank's shards, and the
 * forward's outputs on the shards. */
typedef struct {
    int64_t nl;     /* this rank's sequence length */
    size_t n, ns;   /* elements of a full tensor and of a shard */
    float *buf[10]; /* q k v, qs ks vs, os ls, ot lt */
    attn_tensor Q, K, V, Qs, Ks, Vs, Os;
    float *ls, *ot, *lt;
    unsigned long long seed;
} rb_data;

static void data_free(rb_data *d) {
    for (int i = 0; i < 10; i++) free(d->buf[i]);
}

/* The random tensors and this rank's shards of them; 1 after the message
 * (rank 0) when they cannot be made. */
static int data_make(attn_ring_layout lay, const rb_opts *b, int P, int R,
                     rb_data *d) {
    const int64_t L = b->L, H = b->H, D = b->D;
    memset(d, 0, sizeof *d);
    d->seed = 42;
    d->n = (size_t)(H * L * D);
    for (int i = 0; i < 3; i++) d->buf[i] = rnd(d->n, &d->seed);
    if (!d->buf[0] || !d->buf[1] || !d->buf[2] ||
        attn_ring_shard_length(lay, L, P, R, &d->nl)) {
        if (R == 0)
            fprintf(stderr, "attn bench: ring: %s\n", attn_last_error());
        return 1;
    }
    const int64_t nl = d->nl;
    d->ns = (size_t)(H * nl * D);
    for (int i = 3; i < 10; i++)
        d->buf[i] = malloc((i == 7 || i == 9 ? (size_t)(H * nl) : d->ns) * 4);
    d->ls = d->buf[7];
    d->ot = d->buf[8];
    d->lt = d->buf[9];
    d->Q = attn_tensor_4d(d->buf[0], ATTN_F32, 1, H, L, D);
    d->K = attn_tensor_4d(d->buf[1], ATTN_F32, 1, H, L, D);
    d->V = attn_tensor_4d(d->buf[2], ATTN_F32, 1, H, L, D);
    d->Qs = attn_tensor_4d(d->buf[3], ATTN_F32, 1, H, nl, D);
    d->Ks = attn_tensor_4d(d->buf[4], ATTN_F32, 1, H, nl, D);
    d->Vs = attn_tensor_4d(d->buf[5], ATTN_F32, 1, H, nl, D);
    d->Os = attn_tensor_4d(d->buf[6], ATTN_F32, 1, H, nl, D);
    attn_ring_shard(lay, P, R, &d->Q, &d->Qs);
    attn_ring_shard(lay, P, R, &d->K, &d->Ks);
    attn_ring_shard(lay, P, R, &d->V, &d->Vs);
    return 0;
}

/* The per-rank figures of rb_res: P doubles each (stepc, stepw P x P). */
static void res_alloc(rb_res *x, int P) {
    double **v[] = {&x->txa, &x->alone, &x->comp,  &x->wait,
                    &x->tot, &x->btot,  &x->bcomp, &x->bwait};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        *v[i] = malloc(sizeof(double) * (size_t)P);
    x->stepc = malloc(sizeof(double) * (size_t)P * (size_t)P);
    x->stepw = malloc(sizeof(double) * (size_t)P * (size_t)P);
    x->t1 = x->tb1 = -1;
}

static void res_free(rb_res *x) {
    double *v[] = {x->txa,  x->alone, x->comp,  x->wait,  x->tot,
                   x->btot, x->bcomp, x->bwait, x->stepc, x->stepw};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) free(v[i]);
}

/* The K/V block transfer alone: a ring exchange of kvb bytes (every rank
 * sends and receives the same size), best of 3. */
static double transfer_alone(size_t kvb, int P, int R) {
    char *sb = malloc(kvb), *rb = malloc(kvb);
    memset(sb, 1, kvb);
    double tx = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Sendrecv(sb, (int)kvb, MPI_BYTE, (R + 1) % P, 1, rb, (int)kvb,
                     MPI_BYTE, (R + P - 1) % P, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        double t = MPI_Wtime() - t0;
        tx = t < tx ? t : tx;
    }
    free(sb);
    free(rb);
    return tx;
}

/* Each rank's compute alone (all ranks at once: they share the cores as
 * the ring's ranks do), then the ring; alternated --reps times, the
 * fastest of each kept (the ring's by its slowest rank). */
static int forward_reps(attn_ring_layout lay, const rb_opts *b, int P, int R,
                        rb_data *d, const attn_sdpa_opts *o, rb_res *x) {
    const size_t pb = sizeof(double) * (size_t)P;
    double *sc = calloc((size_t)P, sizeof(double)),
           *sw = calloc((size_t)P, sizeof(double));
    double *sc1 = calloc((size_t)P, sizeof(double)),
           *sw1 = calloc((size_t)P, sizeof(double));
    double *a1 = malloc(pb), *c1 = malloc(pb), *w1 = malloc(pb),
           *t1s = malloc(pb);
    int rc = 0;
    for (int rep = 0; rep < b->reps && !rc; rep++) {
        quiet_barrier();
        double ta =
            compute_alone(lay, P, R, &d->Qs, &d->K, &d->V, o, d->ot, d->lt);
        all_of(ta, a1);
        if (rep == 0 || vmax(a1, P) < vmax(x->alone, P))
            memcpy(x->alone, a1, pb);
        attn_ring_stats st;
        memset(&st, 0, sizeof st);
        st.step_compute_s = sc1;
        st.step_wait_s = sw1;
        quiet_barrier();
        if (attn_ring_sdpa_forward(MPI_COMM_WORLD, lay, &d->Qs, &d->Ks, &d->Vs,
                                   o, &d->Os, d->ls, &st)) {
            if (R == 0)
                fprintf(stderr, "attn bench: ring: %s\n", attn_last_error());
            rc = 1;
            break;
        }
        all_of(st.compute_s, c1);
        all_of(st.wait_s, w1);
        all_of(st.total_s, t1s);
        if (rep == 0 || vmax(t1s, P) < vmax(x->tot, P)) {
            memcpy(x->comp, c1, pb);
            memcpy(x->wait, w1, pb);
            memcpy(x->tot, t1s, pb);
            memcpy(sc, sc1, pb);
            memcpy(sw, sw1, pb);
        }
    }
    if (!rc) {
        MPI_Gather(sc, P, MPI_DOUBLE, x->stepc, P, MPI_DOUBLE, 0,
                   MPI_COMM_WORLD);
        MPI_Gather(sw, P, MPI_DOUBLE, x->stepw, P, MPI_DOUBLE, 0,
                   MPI_COMM_WORLD);
    }
    double *v[] = {sc, sw, sc1, sw1, a1, c1, w1, t1s};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) free(v[i]);
    return rc;
}

/* One process, P x threads threads, full tensors (rank 0 alone): the
 * forward's seconds. */
static double single_forward(const rb_data *d, const attn_sdpa_opts *o,
                             int threads) {
    float *of = malloc(d->n * 4);
    attn_tensor Of = attn_tensor_4d(of, ATTN_F32, 1, d->Q.shape[1],
                                    d->Q.shape[2], d->Q.shape[3]);
    attn_sdpa_opts o1 = *o;
    o1.threads = threads;
    double t0 = MPI_Wtime();
    attn_sdpa_forward(&d->Q, &d->K, &d->V, &o1, &Of, NULL, NULL);
    double t = MPI_Wtime() - t0;
    free(of);
    return t;
}

/* The same for the backward (after a forward for its output and lse). */
static double single_backward(rb_data *d, const attn_sdpa_opts *o,
                              int threads) {
    const size_t n = d->n;
    const int64_t H = d->Q.shape[1], L = d->Q.shape[2], D = d->Q.shape[3];
    float *of = malloc(n * 4), *lf = malloc((size_t)(H * L) * 4);
    float *dof = rnd(n, &d->seed), *gf = calloc(3 * n, 4);
    attn_tensor Of = attn_tensor_4d(of, ATTN_F32, 1, H, L, D);
    attn_tensor dOf = attn_tensor_4d(dof, ATTN_F32, 1, H, L, D);
    attn_tensor gq = attn_tensor_4d(gf, ATTN_F32, 1, H, L, D);
    attn_tensor gk = attn_tensor_4d(gf + n, ATTN_F32, 1, H, L, D);
    attn_tensor gv = attn_tensor_4d(gf + 2 * n, ATTN_F32, 1, H, L, D);
    attn_sdpa_opts o1 = *o;
    o1.threads = threads;
    attn_sdpa_forward(&d->Q, &d->K, &d->V, &o1, &Of, NULL, lf);
    double t0 = MPI_Wtime();
    attn_sdpa_backward(&d->Q, &d->K, &d->V, &Of, lf, &dOf, &o1, &gq, &gk, &gv,
                       NULL);
    double t = MPI_Wtime() - t0;
    free(of);
    free(lf);
    free(dof);
    free(gf);
    return t;
}

/* The ring backward (compute alone is not repeated: see the docs), and
 * one process's backward. */
static void backward(attn_ring_layout lay, const rb_opts *b, int P, int R,
                     rb_data *d, const attn_sdpa_opts *o, rb_res *x) {
    const int64_t H = b->H, D = b->D, nl = d->nl;
    const size_t ns = d->ns;
    float *dos = rnd(ns, &d->seed), *g = calloc(3 * ns, 4);
    attn_tensor dO = attn_tensor_4d(dos, ATTN_F32, 1, H, nl, D);
    attn_tensor dQ = attn_tensor_4d(g, ATTN_F32, 1, H, nl, D);
    attn_tensor dK = attn_tensor_4d(g + ns, ATTN_F32, 1, H, nl, D);
    attn_tensor dV = attn_tensor_4d(g + 2 * ns, ATTN_F32, 1, H, nl, D);
    attn_ring_stats bs;
    memset(&bs, 0, sizeof bs);
    quiet_barrier();
    if (attn_ring_sdpa_backward(MPI_COMM_WORLD, lay, &d->Qs, &d->Ks, &d->Vs,
                                &d->Os, d->ls, &dO, o, &dQ, &dK, &dV, &bs) &&
        R == 0)
        fprintf(stderr, "attn bench: ring backward: %s\n", attn_last_error());
    all_of(bs.total_s, x->btot);
    all_of(bs.compute_s, x->bcomp);
    all_of(bs.wait_s, x->bwait);
    quiet_barrier();
    if (R == 0 && b->single) x->tb1 = single_backward(d, o, P * b->threads);
    quiet_barrier();
    free(dos);
    free(g);
}

static int run(attn_ring_layout lay, const char *layout, const rb_opts *b,
               int P, int R) {
    rb_data d;
    if (data_make(lay, b, P, R, &d)) {
        data_free(&d);
        return 1;
    }
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = b->threads;
    o.mask.causal = b->causal;
    rb_res x;
    memset(&x, 0, sizeof x);
    res_alloc(&x, P);
    x.kvb = (size_t)(2 * b->H * ((b->L + P - 1) / P) * b->D) * 4;
    all_of(transfer_alone(x.kvb, P, R), x.txa);
    int rc = forward_reps(lay, b, P, R, &d, &o, &x);
    if (!rc) {
        quiet_barrier();
        if (R == 0 && b->single) x.t1 = single_forward(&d, &o, P * b->threads);
        quiet_barrier();
        if (b->backward) backward(lay, b, P, R, &d, &o, &x);
        if (R == 0) report(&x, b, layout, P);
    }
    res_free(&x);
    data_free(&d);
    return rc;
}

int cli_ring_bench(const char *layout, int argc, char **argv) {
    const char *cmd = "bench";
    rb_opts b = {16384, 8, 64, 0, 1, 0, 1, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (strcmp(a, "--causal") == 0)
            b.causal = 1;
        else if (strcmp(a, "--backward") == 0)
            b.backward = 1;
        else if (strcmp(a, "--no-single") == 0)
            b.single = 0;
        else if (strcmp(a, "--L") == 0 || strcmp(a, "--H") == 0 ||
                 strcmp(a, "--D") == 0 || strcmp(a, "--threads") == 0 ||
                 strcmp(a, "--reps") == 0) {
            if (!val || cli_parse_i64(val, &x) || x < 1 || x > (1 << 24))
                return cli_usage_error(cmd, "%s wants a positive integer", a);
            if (a[2] == 'L')
                b.L = x;
            else if (a[2] == 'H')
                b.H = x;
            else if (a[2] == 'D')
                b.D = x;
            else if (a[2] == 'r')
                b.reps = (int)(x < 100 ? x : 100);
            else
                b.threads = (int)x;
            i++;
        } else {
            return cli_usage_error(cmd, "--ring: unknown option '%s'", a);
        }
    }
    int P, R;
    cli_ring_init(&P, &R);
    int rc = run(cli_ring_layout(layout), layout, &b, P, R);
    MPI_Finalize();
    return rc;
}

#endif /* ATTN_HAVE_MPI */
