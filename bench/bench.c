/* The attention benchmark: the machine's own sgemm ceiling, then for each
 * case the reference and the flash kernel, each checked against the
 * reference before any figure is reported.
 *
 * FLOPs are 4 B H D x (visible query-key pairs): the two products
 * Q K^T and P V, counting for causal masks only the pairs under the
 * diagonal. Extra memory is the peak of what the library allocated during
 * the call (attn__alloc's counter), beyond inputs and outputs. */
#include "bench.h"

#include "attn.h"
#include "flash.h"
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* uniform [-1, 1) numbers from a 64-bit LCG: fast enough for 1e9 values */
static void fill_random(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) * 0x1p-23 - 1.0);
    }
}

/* sgemm GFLOP/s on n^3 with t OpenBLAS threads (best of a few runs) */
static double sgemm_gflops(int n, int t) {
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float)),
          *c = malloc(nn * sizeof(float));
    if (!a || !b || !c) {
        free(a); free(b); free(c);
        return 0.0;
    }
    fill_random(a, nn, 1);
    fill_random(b, nn, 2);
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(t);
    double best = INFINITY;
    /* best of 10: on a shared machine one slow thread delays a whole call */
    for (int r = 0; r < 10; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a,
                    n, b, n, 0.0f, c, n);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    openblas_set_num_threads(saved);
    free(a); free(b); free(c);
    return 2.0 * n * (double)n * n / best * 1e-9;
}

int bench_parse_case(const char *spec, bench_case *c) {
    char buf[128];
    if (strlen(spec) >= sizeof buf) return -1;
    strcpy(buf, spec);
    memset(c, 0, sizeof *c);
    c->B = 1;
    c->H = 8;
    c->dtype = ATTN_F32;
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    for (int field = 0; tok; field++, tok = strtok_r(NULL, ":", &save)) {
        char *end;
        if (field < 2) {
            long long v = strtoll(tok, &end, 10);
            if (*end || v < 1 || v > (1ll << 24)) return -1;
            if (field == 0) c->L = v;
            else c->D = v;
        } else if (strcmp(tok, "causal") == 0) {
            c->causal = 1;
        } else if (strcmp(tok, "f32") == 0) {
            c->dtype = ATTN_F32;
        } else if (strcmp(tok, "f16") == 0) {
            c->dtype = ATTN_F16;
        } else if (strcmp(tok, "bf16") == 0) {
            c->dtype = ATTN_BF16;
        } else if (tok[0] == 'h') {
            long long v = strtoll(tok + 1, &end, 10);
            if (*end || v < 1 || v > 4096) return -1;
            c->H = v;
        } else {
            return -1;
        }
    }
    return c->L > 0 && c->D > 0 ? 0 : -1;
}

/* ---- one case ----------------------------------------------------------- */

typedef struct {
    const bench_opts *o;
    FILE *out;
    int threads;
    double ceiling; /* sgemm GFLOP/s at the run's thread count */
} runner;

/* Visible pairs of one head: L^2, or L (L + 1) / 2 under a causal mask. */
static double pairs(const bench_case *c) {
    double L = (double)c->L;
    return c->causal ? L * (L + 1) / 2 : L * L;
}

static void report(const runner *r, const bench_case *c, const char *impl,
                   double ms, size_t extra, double speedup, double err) {
    double gf = 4.0 * c->B * c->H * c->D * pairs(c) / (ms * 1e-3) * 1e-9;
    if (r->o->json) {
        fprintf(r->out,
                "{\"impl\": \"%s\", \"B\": %lld, \"H\": %lld, \"Lq\": %lld, "
                "\"Lk\": %lld, \"D\": %lld, \"causal\": %s, \"dtype\": \"%s\", "
                "\"threads\": %d, \"ms\": %.3f, \"gflops\": %.2f, "
                "\"ceiling_gflops\": %.2f, \"ratio\": %.3f, \"extra_bytes\": %zu",
                impl, (long long)c->B, (long long)c->H, (long long)c->L,
                (long long)c->L, (long long)c->D, c->causal ? "true" : "false",
                attn_dtype_name((attn_dtype)c->dtype), r->threads, ms, gf,
                r->ceiling, gf / r->ceiling, extra);
        if (speedup > 0) fprintf(r->out, ", \"speedup\": %.1f", speedup);
        if (err >= 0) fprintf(r->out, ", \"max_err\": %.3g", err);
        fprintf(r->out, "}\n");
    } else {
        char sp[32] = "", er[32] = "";
        if (speedup > 0) snprintf(sp, sizeof sp, "%.1fx", speedup);
        if (err >= 0) snprintf(er, sizeof er, "%.1e", err);
        fprintf(r->out,
                "%6lld %4lld %-6s %-4s %-5s %10.2f %8.1f %6.1f%% %8s %10.2f %9s\n",
                (long long)c->L, (long long)c->D, c->causal ? "causal" : "full",
                attn_dtype_name((attn_dtype)c->dtype), impl, ms, gf,
                100.0 * gf / r->ceiling, sp, (double)extra / 1048576.0, er);
    }
    fflush(r->out);
}

/* Runs attention once; returns seconds (negative on failure). */
static double run_once(const attn_tensor *q, const attn_tensor *k,
                       const attn_tensor *v, const attn_sdpa_opts *op,
                       attn_tensor *out, float *lse, size_t *extra) {
    size_t before = attn__alloc_current();
    attn__alloc_peak_reset();
    double t0 = now_s();
    attn_status st = attn_sdpa_forward(q, k, v, op, out, NULL, lse);
    double dt = now_s() - t0;
    if (st) {
        fprintf(stderr, "attn bench: %s: %s\n", attn_strerror(st), attn_last_error());
        return -1.0;
    }
    size_t peak = attn__alloc_peak();
    if (extra) *extra = peak > before ? peak - before : 0;
    return dt;
}

/* max |flash - reference| on sampled rows of heads 0 and H-1, the
 * reference run on one query row at a time (keys 0..i for causal). */
static double check_rows(const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v, const float *of,
                         const bench_case *c, int *failed) {
    const int64_t L = c->L, D = c->D;
    int64_t rows[12] = {0, 1, 2, L / 7, L / 3, L / 2, (2 * L) / 3, L - 129,
                        L - 128, L - 65, L - 2, L - 1};
    double *o = malloc((size_t)D * sizeof(double));
    double worst = 0.0;
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.impl = ATTN_IMPL_REF;
    for (int64_t h = 0; h < c->H; h += c->H - 1 > 0 ? c->H - 1 : 1)
        for (int x = 0; x < 12; x++) {
            int64_t i = rows[x];
            if (i < 0 || i >= L) continue;
            size_t es = attn_dtype_size(q->dtype);
            attn_tensor qi = *q, ki = *k, vi = *v;
            qi.data = (char *)q->data + (size_t)attn__off(q, 0, h, i, 0) * es;
            ki.data = (char *)k->data + (size_t)attn__off(k, 0, h, 0, 0) * es;
            vi.data = (char *)v->data + (size_t)attn__off(v, 0, h, 0, 0) * es;
            qi.shape[0] = ki.shape[0] = vi.shape[0] = 1;
            qi.shape[1] = ki.shape[1] = vi.shape[1] = 1;
            qi.shape[2] = 1;
            ki.shape[2] = vi.shape[2] = c->causal ? i + 1 : L;
            attn_tensor ot = attn_tensor_4d(o, ATTN_F64, 1, 1, 1, D);
            attn_status st = attn_sdpa_forward(&qi, &ki, &vi, &op, &ot, NULL, NULL);
            if (st) {
                *failed = 1;
                break;
            }
            for (int64_t d = 0; d < D; d++) {
                double e = fabs(o[d] - of[((h * L) + i) * D + d]);
                if (!(e <= worst)) worst = e;
            }
        }
    free(o);
    return worst;
}

/* tolerance of the bench's check: inputs in [-1, 1), outputs |o| < 1; a
 * correct f32 kernel is within ~1e-6, a wrong one is off by ~0.1 */
#define BENCH_TOL 2e-4

static int run_case(const runner *r, const bench_case *c) {
    const int64_t B = c->B, H = c->H, L = c->L, D = c->D;
    const size_t n = (size_t)(B * H * L * D);
    const attn_dtype dt = (attn_dtype)c->dtype;
    float *qf = malloc(n * 4), *kf = malloc(n * 4), *vf = malloc(n * 4);
    float *of = malloc(n * 4), *lse = malloc((size_t)(B * H * L) * 4);
    void *q16 = NULL, *k16 = NULL, *v16 = NULL;
    float *oref = NULL;
    int rc = 2;
    if (!qf || !kf || !vf || !of || !lse) goto done;
    fill_random(qf, n, 11);
    fill_random(kf, n, 12);
    fill_random(vf, n, 13);
    void *qd = qf, *kd = kf, *vd = vf;
    if (dt != ATTN_F32) {
        q16 = malloc(n * 2);
        k16 = malloc(n * 2);
        v16 = malloc(n * 2);
        if (!q16 || !k16 || !v16) goto done;
        attn_convert(qf, ATTN_F32, q16, dt, n);
        attn_convert(kf, ATTN_F32, k16, dt, n);
        attn_convert(vf, ATTN_F32, v16, dt, n);
        qd = q16;
        kd = k16;
        vd = v16;
    }
    attn_tensor q = attn_tensor_4d(qd, dt, B, H, L, D);
    attn_tensor k = attn_tensor_4d(kd, dt, B, H, L, D);
    attn_tensor v = attn_tensor_4d(vd, dt, B, H, L, D);
    attn_tensor o = attn_tensor_4d(of, ATTN_F32, B, H, L, D);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.causal = c->causal;
    op.threads = r->threads;

    /* the reference: timed once, and its output is the check's oracle */
    double ref_ms = 0.0;
    size_t extra = 0;
    int have_ref = L <= r->o->ref_max_l;
    if (have_ref) {
        oref = malloc(n * 4);
        if (!oref) goto done;
        attn_tensor orf = attn_tensor_4d(oref, ATTN_F32, B, H, L, D);
        op.impl = ATTN_IMPL_REF;
        double t = run_once(&q, &k, &v, &op, &orf, lse, &extra);
        if (t < 0) goto done;
        ref_ms = t * 1e3;
    }

    /* flash: the first run is checked; then the best of a few */
    op.impl = ATTN_IMPL_FLASH;
    size_t fextra = 0;
    double best = run_once(&q, &k, &v, &op, &o, lse, &fextra);
    if (best < 0) goto done;
    double err = 0.0;
    int failed = 0;
    if (have_ref) {
        for (size_t x = 0; x < n; x++) {
            double e = fabs((double)of[x] - oref[x]);
            if (!(e <= err)) err = e;
        }
    } else {
        err = check_rows(&q, &k, &v, of, c, &failed);
    }
    if (failed || !(err <= BENCH_TOL)) {
        fprintf(stderr,
                "attn bench: L=%lld D=%lld %s %s: flash differs from the "
                "reference by %.3g (> %.1g): not reported\n",
                (long long)L, (long long)D, c->causal ? "causal" : "full",
                attn_dtype_name(dt), err, BENCH_TOL);
        rc = 1;
        goto done;
    }
    double total = best;
    for (int runs = 1; (total < 0.6 || runs < 2) && best < 1.5; runs++) {
        double t = run_once(&q, &k, &v, &op, &o, lse, NULL);
        if (t < 0) goto done;
        total += t;
        if (t < best) best = t;
    }
    double fl_ms = best * 1e3;
    if (have_ref) report(r, c, "ref", ref_ms, extra, 0.0, -1.0);
    report(r, c, "flash", fl_ms, fextra, have_ref ? ref_ms / fl_ms : 0.0, err);
    if (L >= 65536 && !r->o->json) {
        /* the whole process, as the OS sees it: inputs and outputs, plus
         * OpenBLAS's own buffers, plus the kernel's workspace */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double io = 4.0 * 4 * n + 4.0 * (double)(B * H * L) +
                    (dt == ATTN_F32 ? 0.0 : 3.0 * 2 * n);
        fprintf(r->out, "%6s peak RSS of the process %.0f MiB; inputs, outputs "
                "and their f32 copies %.0f MiB\n", "", (double)ru.ru_maxrss / 1024.0,
                io / 1048576.0);
    }
    rc = 0;
done:
    if (rc == 2) fprintf(stderr, "attn bench: out of memory or kernel error\n");
    free(qf); free(kf); free(vf); free(of); free(lse);
    free(q16); free(k16); free(v16); free(oref);
    return rc;
}

int bench_run(const bench_opts *o, FILE *out) {
    runner r;
    r.o = o;
    r.out = out;
    r.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    attn__flash_bq_override = o->tile_bq;
    attn__flash_bk_override = o->tile_bk;
    attn__flash_rc_override = o->tile_rc;

    /* the ceiling: this machine's sgemm on 1024^3 */
    double g1 = sgemm_gflops(1024, 1), g2 = sgemm_gflops(1024, 2);
    double gt = r.threads == 1 ? g1 : r.threads == 2 ? g2 : sgemm_gflops(1024, r.threads);
    r.ceiling = gt;
    if (o->json) {
        fprintf(out, "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, \"K\": 1024, "
                     "\"threads\": 1, \"gflops\": %.2f}\n", g1);
        fprintf(out, "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, \"K\": 1024, "
                     "\"threads\": 2, \"gflops\": %.2f}\n", g2);
        if (r.threads > 2)
            fprintf(out, "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, "
                         "\"K\": 1024, \"threads\": %d, \"gflops\": %.2f}\n",
                    r.threads, gt);
    } else {
        int64_t bq = 0, bk = 0;
        attn__sdpa_dims d = {1, 1, 1, 1 << 20, 1 << 20, 64, 64, 1, 0.125};
        attn__flash_tile_sizes(&d, &bq, &bk);
        fprintf(out, "attn bench: %d thread%s, vector level %d, flash tiles "
                     "%lldx%lld (bands of %lld rows; D=64)\n", r.threads,
                r.threads == 1 ? "" : "s", (int)attn__vec_best(), (long long)bq,
                (long long)bk, (long long)attn__flash_split_rows(&d));
        fprintf(out, "sgemm 1024^3 (the ceiling): 1 thread %.1f GFLOP/s, "
                     "2 threads %.1f GFLOP/s", g1, g2);
        if (r.threads > 2) fprintf(out, ", %d threads %.1f GFLOP/s", r.threads, gt);
        fprintf(out, "\nB=1 H=8; GFLOP/s = 4 B H D x visible pairs / time; %% of "
                     "the %d-thread sgemm ceiling\n\n", r.threads);
        fprintf(out, "%6s %4s %-6s %-4s %-5s %10s %8s %7s %8s %10s %9s\n", "L", "D",
                "mask", "type", "impl", "ms", "GFLOP/s", "ceil", "speedup",
                "extra MiB", "max err");
    }

    bench_case list[64];
    int nlist = 0;
    if (o->cases) {
        for (int i = 0; i < o->ncases && nlist < 64; i++) list[nlist++] = o->cases[i];
    } else {
        static const int64_t Ls[] = {512, 1024, 2048, 4096, 16384};
        static const int64_t Lquick[] = {1024, 4096};
        const int64_t *ls = o->quick ? Lquick : Ls;
        int nl = o->quick ? 2 : 5;
        for (int li = 0; li < nl; li++)
            for (int64_t D = 64; D <= 128; D *= 2)
                for (int causal = 0; causal < 2; causal++)
                    for (int f16 = 0; f16 < 2; f16++) {
                        if (o->quick && f16 && D == 128) continue;
                        bench_case c = {1, 8, ls[li], D, causal,
                                        f16 ? ATTN_F16 : ATTN_F32};
                        list[nlist++] = c;
                    }
    }
    if (o->long_case && nlist < 64) {
        bench_case c = {1, 8, 65536, 64, 0, ATTN_F32};
        list[nlist++] = c;
    }
    int rc = 0;
    for (int i = 0; i < nlist; i++) {
        int x = run_case(&r, &list[i]);
        if (x > rc) rc = x;
    }
    /* the ceiling again: a large difference means the machine was busy and
     * the run's ratios are not to be trusted */
    double again = sgemm_gflops(1024, r.threads);
    if (o->json)
        fprintf(out, "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, "
                     "\"K\": 1024, \"threads\": %d, \"gflops\": %.2f, "
                     "\"when\": \"end\"}\n", r.threads, again);
    else
        fprintf(out, "\nsgemm 1024^3 again at the end: %.1f GFLOP/s on %d "
                     "thread%s (start: %.1f)\n", again, r.threads,
                r.threads == 1 ? "" : "s", gt);
    attn__flash_bq_override = attn__flash_bk_override = 0;
    attn__flash_rc_override = 0;
    return rc;
}
