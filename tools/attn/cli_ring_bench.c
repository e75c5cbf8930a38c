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

static int run(attn_ring_layout lay, const char *layout, const rb_opts *b,
               int P, int R) {
    const int64_t L = b->L, H = b->H, D = b->D;
    unsigned long long seed = 42;
    const size_t n = (size_t)(H * L * D);
    float *q = rnd(n, &seed), *k = rnd(n, &seed), *v = rnd(n, &seed);
    int64_t nl;
    if (!q || !k || !v || attn_ring_shard_length(lay, L, P, R, &nl)) {
        if (R == 0)
            fprintf(stderr, "attn bench: ring: %s\n", attn_last_error());
        return 1;
    }
    const size_t ns = (size_t)(H * nl * D);
    float *qs = malloc(ns * 4), *ks = malloc(ns * 4), *vs = malloc(ns * 4);
    float *os = malloc(ns * 4), *ls = malloc((size_t)(H * nl) * 4);
    float *ot = malloc(ns * 4), *lt = malloc((size_t)(H * nl) * 4);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, H, L, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, H, L, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, H, L, D);
    attn_tensor Qs = attn_tensor_4d(qs, ATTN_F32, 1, H, nl, D);
    attn_tensor Ks = attn_tensor_4d(ks, ATTN_F32, 1, H, nl, D);
    attn_tensor Vs = attn_tensor_4d(vs, ATTN_F32, 1, H, nl, D);
    attn_tensor Os = attn_tensor_4d(os, ATTN_F32, 1, H, nl, D);
    attn_ring_shard(lay, P, R, &Q, &Qs);
    attn_ring_shard(lay, P, R, &K, &Ks);
    attn_ring_shard(lay, P, R, &V, &Vs);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = b->threads;
    o.mask.causal = b->causal;

    /* the K/V block transfer alone: a ring exchange of the largest block
     * (every rank sends and receives the same size), best of 3 */
    const size_t kvb = (size_t)(2 * H * ((L + P - 1) / P) * D) * 4;
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
    double *txa = malloc(sizeof(double) * (size_t)P),
           *alone = malloc(sizeof(double) * (size_t)P);
    double *comp = malloc(sizeof(double) * (size_t)P),
           *wait = malloc(sizeof(double) * (size_t)P);
    double *tot = malloc(sizeof(double) * (size_t)P);
    all_of(tx, txa);

    /* each rank's compute alone (all ranks at once: they share the cores
     * as the ring's ranks do), then the ring; alternated --reps times, the
     * fastest of each kept (the ring's by its slowest rank) */
    double *sc = calloc((size_t)P, sizeof(double)),
           *sw = calloc((size_t)P, sizeof(double));
    double *sc1 = calloc((size_t)P, sizeof(double)),
           *sw1 = calloc((size_t)P, sizeof(double));
    double *a1 = malloc(sizeof(double) * (size_t)P),
           *c1 = malloc(sizeof(double) * (size_t)P);
    double *w1 = malloc(sizeof(double) * (size_t)P),
           *t1s = malloc(sizeof(double) * (size_t)P);
    attn_status s = ATTN_OK;
    for (int rep = 0; rep < b->reps; rep++) {
        quiet_barrier();
        double ta = compute_alone(lay, P, R, &Qs, &K, &V, &o, ot, lt);
        all_of(ta, a1);
        if (rep == 0 || vmax(a1, P) < vmax(alone, P))
            memcpy(alone, a1, sizeof(double) * (size_t)P);
        attn_ring_stats st;
        memset(&st, 0, sizeof st);
        st.step_compute_s = sc1;
        st.step_wait_s = sw1;
        quiet_barrier();
        s = attn_ring_sdpa_forward(MPI_COMM_WORLD, lay, &Qs, &Ks, &Vs, &o, &Os,
                                   ls, &st);
        if (s) {
            if (R == 0)
                fprintf(stderr, "attn bench: ring: %s\n", attn_last_error());
            return 1;
        }
        all_of(st.compute_s, c1);
        all_of(st.wait_s, w1);
        all_of(st.total_s, t1s);
        if (rep == 0 || vmax(t1s, P) < vmax(tot, P)) {
            memcpy(comp, c1, sizeof(double) * (size_t)P);
            memcpy(wait, w1, sizeof(double) * (size_t)P);
            memcpy(tot, t1s, sizeof(double) * (size_t)P);
            memcpy(sc, sc1, sizeof(double) * (size_t)P);
            memcpy(sw, sw1, sizeof(double) * (size_t)P);
        }
    }
    free(sc1);
    free(sw1);
    free(a1);
    free(c1);
    free(w1);
    free(t1s);
    double *stepc = malloc(sizeof(double) * (size_t)P * (size_t)P);
    double *stepw = malloc(sizeof(double) * (size_t)P * (size_t)P);
    MPI_Gather(sc, P, MPI_DOUBLE, stepc, P, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(sw, P, MPI_DOUBLE, stepw, P, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    /* one process, P x threads threads, full tensors (rank 0 alone) */
    double t1 = -1;
    quiet_barrier();
    if (R == 0 && b->single) {
        float *of = malloc(n * 4);
        attn_tensor Of = attn_tensor_4d(of, ATTN_F32, 1, H, L, D);
        attn_sdpa_opts o1 = o;
        o1.threads = P * b->threads;
        double t0 = MPI_Wtime();
        attn_sdpa_forward(&Q, &K, &V, &o1, &Of, NULL, NULL);
        t1 = MPI_Wtime() - t0;
        free(of);
    }
    quiet_barrier();

    /* backward: ring, and compute alone is not repeated (see the docs) */
    double *btot = malloc(sizeof(double) * (size_t)P),
           *bcomp = malloc(sizeof(double) * (size_t)P);
    double *bwait = malloc(sizeof(double) * (size_t)P);
    double tb1 = -1;
    if (b->backward) {
        float *dos = rnd(ns, &seed), *g = calloc(3 * ns, 4);
        attn_tensor dO = attn_tensor_4d(dos, ATTN_F32, 1, H, nl, D);
        attn_tensor dQ = attn_tensor_4d(g, ATTN_F32, 1, H, nl, D);
        attn_tensor dK = attn_tensor_4d(g + ns, ATTN_F32, 1, H, nl, D);
        attn_tensor dV = attn_tensor_4d(g + 2 * ns, ATTN_F32, 1, H, nl, D);
        attn_ring_stats bs;
        memset(&bs, 0, sizeof bs);
        quiet_barrier();
        s = attn_ring_sdpa_backward(MPI_COMM_WORLD, lay, &Qs, &Ks, &Vs, &Os, ls,
                                    &dO, &o, &dQ, &dK, &dV, &bs);
        if (s && R == 0)
            fprintf(stderr, "attn bench: ring backward: %s\n",
                    attn_last_error());
        all_of(bs.total_s, btot);
        all_of(bs.compute_s, bcomp);
        all_of(bs.wait_s, bwait);
        quiet_barrier();
        if (R == 0 && b->single) {
            float *of = malloc(n * 4), *lf = malloc((size_t)(H * L) * 4);
            float *dof = rnd(n, &seed), *gf = calloc(3 * n, 4);
            attn_tensor Of = attn_tensor_4d(of, ATTN_F32, 1, H, L, D);
            attn_tensor dOf = attn_tensor_4d(dof, ATTN_F32, 1, H, L, D);
            attn_tensor gq = attn_tensor_4d(gf, ATTN_F32, 1, H, L, D);
            attn_tensor gk = attn_tensor_4d(gf + n, ATTN_F32, 1, H, L, D);
            attn_tensor gv = attn_tensor_4d(gf + 2 * n, ATTN_F32, 1, H, L, D);
            attn_sdpa_opts o1 = o;
            o1.threads = P * b->threads;
            attn_sdpa_forward(&Q, &K, &V, &o1, &Of, NULL, lf);
            double t0 = MPI_Wtime();
            attn_sdpa_backward(&Q, &K, &V, &Of, lf, &dOf, &o1, &gq, &gk, &gv,
                               NULL);
            tb1 = MPI_Wtime() - t0;
            free(of);
            free(lf);
            free(dof);
            free(gf);
        }
        quiet_barrier();
        free(dos);
        free(g);
    }

    if (R == 0) {
        rb_res x = {txa,  alone, comp,  wait, tot, stepc, stepw,
                    btot, bcomp, bwait, t1,   tb1, kvb};
        report(&x, b, layout, P);
    }
    free(q);
    free(k);
    free(v);
    free(qs);
    free(ks);
    free(vs);
    free(os);
    free(ls);
    free(ot);
    free(lt);
    free(txa);
    free(alone);
    free(comp);
    free(wait);
    free(tot);
    free(sc);
    free(sw);
    free(stepc);
    free(stepw);
    free(btot);
    free(bcomp);
    free(bwait);
    return 0;
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
