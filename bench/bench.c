/* The attention benchmark: the machine's own sgemm ceiling, then for each
 * case the reference and the flash kernel, each checked against the
 * reference before any figure is reported.
 *
 * FLOPs are 4 B H D x (visible query-key pairs): the two products
 * Q K^T and P V, counting for causal masks only the pairs under the
 * diagonal; the backward counts 2.5 times that (its five products against
 * the forward's two, as FlashAttention-2 counts them). Extra memory is the
 * peak of what the library allocated during the call (attn__alloc's
 * counter), beyond inputs and outputs. */
#include "bench.h"
#include "bench_table.h"

#include "attn.h"
#include "blas.h"
#include "cpu.h"
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
        free(a);
        free(b);
        free(c);
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
    free(a);
    free(b);
    free(c);
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
            if (field == 0)
                c->L = v;
            else
                c->D = v;
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
        fprintf(stderr, "attn bench: %s: %s\n", attn_strerror(st),
                attn_last_error());
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
    int64_t rows[12] = {0,           1,       2,       L / 7,  L / 3, L / 2,
                        (2 * L) / 3, L - 129, L - 128, L - 65, L - 2, L - 1};
    double *o = malloc((size_t)D * sizeof(double));
    double worst = 0.0;
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.impl = ATTN_IMPL_REF;
    for (int64_t h = 0; h<c->H; h += c->H - 1> 0 ? c->H - 1 : 1)
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
            attn_status st =
                attn_sdpa_forward(&qi, &ki, &vi, &op, &ot, NULL, NULL);
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

/* ---- the backward ------------------------------------------------------- */

/* relative tolerance of the backward's check (max error over the largest
 * gradient): correct f32 kernels are within ~1e-6; a 0.1% error in D gave 6e-5 */
#define BENCH_BWD_TOL 1e-5

/* Runs the backward once into dq, dk, dv; returns seconds (negative on
 * failure). */
static double run_bwd_once(const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_tensor *o,
                           const float *lse, const attn_tensor *dout,
                           const attn_sdpa_opts *op, attn_tensor *dq,
                           attn_tensor *dk, attn_tensor *dv, size_t *extra) {
    size_t before = attn__alloc_current();
    attn__alloc_peak_reset();
    double t0 = now_s();
    attn_status st =
        attn_sdpa_backward(q, k, v, o, lse, dout, op, dq, dk, dv, NULL);
    double dt = now_s() - t0;
    if (st) {
        fprintf(stderr, "attn bench: backward: %s: %s\n", attn_strerror(st),
                attn_last_error());
        return -1.0;
    }
    size_t peak = attn__alloc_peak();
    if (extra) *extra = peak > before ? peak - before : 0;
    return dt;
}

/* Slice (0, h, r0..r0+n) of t as a one-head view. */
static attn_tensor rows_view(const attn_tensor *t, int64_t h, int64_t r0,
                             int64_t n) {
    attn_tensor x = *t;
    x.data = (char *)t->data +
             (size_t)attn__off(t, 0, h, r0, 0) * attn_dtype_size(t->dtype);
    x.shape[0] = x.shape[1] = 1;
    x.shape[2] = n;
    return x;
}

/* max |a - b| / max |b| over n floats against n doubles */
static double rel_err(const float *a, const double *b, size_t n) {
    double e = 0.0, m = 0.0;
    for (size_t x = 0; x < n; x++) {
        double d = fabs((double)a[x] - b[x]);
        if (!(d <= e)) e = d;
        if (fabs(b[x]) > m) m = fabs(b[x]);
    }
    return m > 0 ? e / m : e;
}

/*
 * Checks the flash backward against the reference backward, whatever L:
 * dO is kept on a few blocks of query rows (first, middle, last) and zero
 * elsewhere, so dK and dV get contributions from those rows only and the
 * reference can run on each block alone (a view of its rows, keys up to
 * its last row under a bottom-right causal mask, summed into dK, dV); dQ
 * of a row depends on its own row only. Heads 0 and H-1 are compared: dQ
 * on the blocks' rows, dK and dV whole. Returns the largest relative
 * error, or a negative value if a call failed.
 */
static double check_bwd(const bench_case *c, const attn_tensor *q,
                        const attn_tensor *k, const attn_tensor *v,
                        const attn_tensor *o, const float *lse, const float *gd,
                        const attn_sdpa_opts *fop, float *dq, float *dk,
                        float *dv, size_t *extra) {
    const int64_t B = c->B, H = c->H, L = c->L, D = c->D;
    const size_t n = (size_t)(B * H * L * D), nh = (size_t)(L * D);
    const int64_t nb = L < 16 ? L : 16;
    const int64_t starts[3] = {0, L / 2 - nb / 2, L - nb};
    float *gs = calloc(n, sizeof(float));
    double *rq = calloc(nh, sizeof(double)), *rk = calloc(nh, sizeof(double)),
           *rv = calloc(nh, sizeof(double));
    uint8_t *sel = calloc((size_t)L, 1);
    double worst = -1.0;
    if (!gs || !rq || !rk || !rv || !sel) goto out;
    for (int s = 0; s < 3; s++) memset(sel + starts[s], 1, (size_t)nb);
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < L; i++)
            if (sel[i])
                memcpy(gs + (size_t)((bh * L + i) * D),
                       gd + (size_t)((bh * L + i) * D),
                       (size_t)D * sizeof(float));
    memset(dq, 0, n * sizeof(float));
    memset(dk, 0, n * sizeof(float));
    memset(dv, 0, n * sizeof(float));
    attn_tensor gst = attn_tensor_4d(gs, ATTN_F32, B, H, L, D);
    attn_tensor dqt = attn_tensor_4d(dq, ATTN_F32, B, H, L, D);
    attn_tensor dkt = attn_tensor_4d(dk, ATTN_F32, B, H, L, D);
    attn_tensor dvt = attn_tensor_4d(dv, ATTN_F32, B, H, L, D);
    if (run_bwd_once(q, k, v, o, lse, &gst, fop, &dqt, &dkt, &dvt, extra) < 0)
        goto out;
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.impl = ATTN_IMPL_REF;
    op.mask.causal = c->causal;
    op.mask.align =
        ATTN_ALIGN_BOTTOM_RIGHT; /* block rows see keys <= own row */
    worst = 0.0;
    for (int64_t h = 0; h<H; h += H - 1> 0 ? H - 1 : 1) {
        memset(rq, 0, nh * sizeof(double));
        memset(rk, 0, nh * sizeof(double));
        memset(rv, 0, nh * sizeof(double));
        attn_tensor rqt = attn_tensor_4d(rq, ATTN_F64, 1, 1, L, D);
        attn_tensor rkt = attn_tensor_4d(rk, ATTN_F64, 1, 1, L, D);
        attn_tensor rvt = attn_tensor_4d(rv, ATTN_F64, 1, 1, L, D);
        for (int64_t i = 0; i < L;) {
            if (!sel[i]) {
                i++;
                continue;
            }
            int64_t m = 0;
            while (i + m < L && sel[i + m]) m++;
            int64_t nk = c->causal ? i + m : L;
            attn_tensor qi = rows_view(q, h, i, m), ki = rows_view(k, h, 0, nk);
            attn_tensor vi = rows_view(v, h, 0, nk), oi = rows_view(o, h, i, m);
            attn_tensor gi = rows_view(&gst, h, i, m),
                        dqi = rows_view(&rqt, 0, i, m);
            attn_tensor dki = rows_view(&rkt, 0, 0, nk),
                        dvi = rows_view(&rvt, 0, 0, nk);
            attn_status st = attn_sdpa_backward(&qi, &ki, &vi, &oi, NULL, &gi,
                                                &op, &dqi, &dki, &dvi, NULL);
            if (st) {
                fprintf(stderr, "attn bench: reference backward: %s: %s\n",
                        attn_strerror(st), attn_last_error());
                worst = -1.0;
                goto out;
            }
            i += m;
        }
        const size_t off = (size_t)(h * L * D);
        double e[3] = {0.0, rel_err(dk + off, rk, nh),
                       rel_err(dv + off, rv, nh)};
        for (int s = 0; s < 3; s++) {
            double x = rel_err(dq + off + (size_t)(starts[s] * D),
                               rq + (size_t)(starts[s] * D), (size_t)(nb * D));
            if (!(x <= e[0])) e[0] = x;
        }
        for (int x = 0; x < 3; x++)
            if (!(e[x] <= worst)) worst = e[x];
    }
out:
    free(gs);
    free(rq);
    free(rk);
    free(rv);
    free(sel);
    return worst;
}

/* bf16 inputs on a path with AVX512_BF16: the backward with the bf16 tile
 * products (ATTN_IMPL_FLASH_BF16; it rounds dO to bf16), checked against
 * the f32 products' backward (itself checked against the reference) to
 * bf16's tolerance relative to the largest gradient, reported as row
 * "bw16". gd is dO in f32; dq, dk, dv are scratch. Returns like run_case. */
#define BENCH_BWD_TOL_BF16 3e-2
static int run_backward_bf16(const bench_runner *r, const bench_case *c,
                             const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, const attn_tensor *o,
                             const float *lse, const float *gd, float *dq,
                             float *dk, float *dv, double fwd_ms) {
    const int64_t B = c->B, H = c->H, L = c->L, D = c->D;
    const size_t n = (size_t)(B * H * L * D);
    double *ref = malloc(3 * n * sizeof(double));
    int rc = 2;
    if (!ref) goto done;
    attn_tensor gf = attn_tensor_4d((void *)gd, ATTN_F32, B, H, L, D);
    attn_tensor dqt = attn_tensor_4d(dq, ATTN_F32, B, H, L, D);
    attn_tensor dkt = attn_tensor_4d(dk, ATTN_F32, B, H, L, D);
    attn_tensor dvt = attn_tensor_4d(dv, ATTN_F32, B, H, L, D);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.causal = c->causal;
    op.threads = r->threads;
    op.impl = ATTN_IMPL_FLASH;
    float *g3[3] = {dq, dk, dv};
    for (int pass = 0; pass < 2; pass++) {
        for (int x = 0; x < 3; x++) memset(g3[x], 0, n * 4);
        if (run_bwd_once(q, k, v, o, lse, &gf, &op, &dqt, &dkt, &dvt, NULL) < 0)
            goto done;
        if (!pass)
            for (int x = 0; x < 3; x++)
                for (size_t e = 0; e < n; e++) ref[x * n + e] = g3[x][e];
        op.impl = ATTN_IMPL_FLASH_BF16;
    }
    double err = 0.0;
    for (int x = 0; x < 3; x++) {
        double e = rel_err(g3[x], ref + x * n, n);
        if (!(e <= err)) err = e;
    }
    if (!(err <= BENCH_BWD_TOL_BF16)) {
        fprintf(stderr,
                "attn bench: L=%lld D=%lld %s bf16: the bf16 backward differs "
                "from the f32 one by %.3g of the largest gradient (> %.1g): "
                "not reported\n",
                (long long)L, (long long)D, c->causal ? "causal" : "full", err,
                BENCH_BWD_TOL_BF16);
        rc = 1;
        goto done;
    }
    size_t extra = 0;
    double best = INFINITY, total = 0.0;
    for (int runs = 0; runs == 0 || ((total < 0.6 || runs < 2) && best < 1.5);
         runs++) {
        double t =
            run_bwd_once(q, k, v, o, lse, &gf, &op, &dqt, &dkt, &dvt, &extra);
        if (t < 0) goto done;
        total += t;
        if (t < best) best = t;
    }
    bench_row(r, c, r->o->json ? "flash_bf16_bwd" : "bw16", best * 1e3, extra,
              0.0, err, best * 1e3 / fwd_ms);
    rc = 0;
done:
    free(ref);
    return rc;
}

/* The backward of a case whose forward (o, lse, fwd_ms) passed: checked,
 * then the best of a few runs with a dense dO. Returns like run_case. */
static int run_backward(const bench_runner *r, const bench_case *c,
                        const attn_tensor *q, const attn_tensor *k,
                        const attn_tensor *v, const attn_tensor *o,
                        const float *lse, double fwd_ms) {
    const int64_t B = c->B, H = c->H, L = c->L, D = c->D;
    const size_t n = (size_t)(B * H * L * D);
    float *gd = malloc(n * 4), *dq = malloc(n * 4), *dk = malloc(n * 4),
          *dv = malloc(n * 4);
    int rc = 2;
    if (!gd || !dq || !dk || !dv) goto done;
    fill_random(gd, n, 14);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.causal = c->causal;
    op.threads = r->threads;
    op.impl = ATTN_IMPL_FLASH;
    size_t extra = 0;
    double err = check_bwd(c, q, k, v, o, lse, gd, &op, dq, dk, dv, &extra);
    if (err < 0) goto done;
    if (!(err <= BENCH_BWD_TOL)) {
        fprintf(stderr,
                "attn bench: L=%lld D=%lld %s %s: flash backward differs from "
                "the reference by %.3g of the largest gradient (> %.1g): not "
                "reported\n",
                (long long)L, (long long)D, c->causal ? "causal" : "full",
                attn_dtype_name((attn_dtype)c->dtype), err, BENCH_BWD_TOL);
        rc = 1;
        goto done;
    }
    attn_tensor got = attn_tensor_4d(gd, ATTN_F32, B, H, L, D);
    attn_tensor dqt = attn_tensor_4d(dq, ATTN_F32, B, H, L, D);
    attn_tensor dkt = attn_tensor_4d(dk, ATTN_F32, B, H, L, D);
    attn_tensor dvt = attn_tensor_4d(dv, ATTN_F32, B, H, L, D);
    /* gradients add up over the runs; only the time matters here */
    double best = INFINITY, total = 0.0;
    for (int runs = 0; runs == 0 || ((total < 0.6 || runs < 2) && best < 1.5);
         runs++) {
        double t =
            run_bwd_once(q, k, v, o, lse, &got, &op, &dqt, &dkt, &dvt, NULL);
        if (t < 0) goto done;
        total += t;
        if (t < best) best = t;
    }
    bench_row(r, c, "bwd", best * 1e3, extra, 0.0, err, best * 1e3 / fwd_ms);
    rc = 0;
    if (c->dtype == ATTN_BF16 && attn__isa_get() >= ATTN__ISA_AVX512_BF16)
        rc = run_backward_bf16(r, c, q, k, v, o, lse, gd, dq, dk, dv, fwd_ms);
done:
    if (rc == 2)
        fprintf(stderr, "attn bench: out of memory or backward error\n");
    free(gd);
    free(dq);
    free(dk);
    free(dv);
    return rc;
}

/* bf16 inputs on a path with AVX512_BF16: the same case with the bf16
 * tile products (ATTN_IMPL_FLASH_BF16), checked (bf16's tolerance: the
 * weights are rounded to bf16 for P V) and reported as row "fl16".
 * Returns 0, 1 (wrong result) or 2 (failure). */
#define BENCH_TOL_BF16 4e-3
static int run_flash_bf16(const bench_runner *r, const bench_case *c,
                          const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v, const attn_sdpa_opts *op,
                          const float *oref, double ref_ms) {
    const size_t n = (size_t)(c->B * c->H * c->L * c->D);
    float *o16 = malloc(n * 4), *l16 = malloc((size_t)(c->B * c->H * c->L) * 4);
    int rc = 2;
    if (!o16 || !l16) goto done;
    attn_tensor ot = attn_tensor_4d(o16, ATTN_F32, c->B, c->H, c->L, c->D);
    attn_sdpa_opts o = *op;
    o.impl = ATTN_IMPL_FLASH_BF16;
    size_t extra = 0;
    double best = run_once(q, k, v, &o, &ot, l16, &extra);
    if (best < 0) goto done;
    double err = 0.0;
    int failed = 0;
    if (oref) {
        for (size_t x = 0; x < n; x++) {
            double e = fabs((double)o16[x] - oref[x]);
            if (!(e <= err)) err = e;
        }
    } else {
        err = check_rows(q, k, v, o16, c, &failed);
    }
    if (failed || !(err <= BENCH_TOL_BF16)) {
        fprintf(stderr,
                "attn bench: L=%lld D=%lld %s bf16: flash_bf16 differs from "
                "the reference by %.3g (> %.1g): not reported\n",
                (long long)c->L, (long long)c->D, c->causal ? "causal" : "full",
                err, BENCH_TOL_BF16);
        rc = 1;
        goto done;
    }
    double total = best;
    for (int runs = 1; (total < 0.6 || runs < 2) && best < 1.5; runs++) {
        double t = run_once(q, k, v, &o, &ot, l16, NULL);
        if (t < 0) goto done;
        total += t;
        if (t < best) best = t;
    }
    bench_row(r, c, r->o->json ? "flash_bf16" : "fl16", best * 1e3, extra,
              ref_ms > 0 ? ref_ms / (best * 1e3) : 0.0, err, 0.0);
    rc = 0;
done:
    free(o16);
    free(l16);
    return rc;
}

static int run_case(const bench_runner *r, const bench_case *c) {
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
    if (have_ref) bench_row(r, c, "ref", ref_ms, extra, 0.0, -1.0, 0.0);
    bench_row(r, c, "flash", fl_ms, fextra, have_ref ? ref_ms / fl_ms : 0.0,
              err, 0.0);
    if (dt == ATTN_BF16 && attn__isa_get() >= ATTN__ISA_AVX512_BF16) {
        int x = run_flash_bf16(r, c, &q, &k, &v, &op, have_ref ? oref : NULL,
                               have_ref ? ref_ms : 0.0);
        if (x) {
            rc = x;
            goto done;
        }
    }
    if (L <= r->o->bwd_max_l) {
        int x = run_backward(r, c, &q, &k, &v, &o, lse, fl_ms);
        if (x) {
            rc = x;
            goto done;
        }
    }
    if (L >= 65536 && !r->o->json) {
        /* the whole process, as the OS sees it: inputs and outputs, plus
         * OpenBLAS's own buffers, plus the kernel's workspace */
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double io = 4.0 * 4 * n + 4.0 * (double)(B * H * L) +
                    (dt == ATTN_F32 ? 0.0 : 3.0 * 2 * n);
        fprintf(r->out,
                "%6s peak RSS of the process %.0f MiB; inputs, outputs "
                "and their f32 copies %.0f MiB\n",
                "", (double)ru.ru_maxrss / 1024.0, io / 1048576.0);
    }
    rc = 0;
done:
    if (rc == 2) fprintf(stderr, "attn bench: out of memory or kernel error\n");
    free(qf);
    free(kf);
    free(vf);
    free(of);
    free(lse);
    free(q16);
    free(k16);
    free(v16);
    free(oref);
    return rc;
}

int bench_run(const bench_opts *o, FILE *out) {
    bench_runner r;
    r.o = o;
    r.out = out;
    r.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    attn__flash_bq_override = o->tile_bq;
    attn__flash_bk_override = o->tile_bk;
    attn__flash_rc_override = o->tile_rc;

    /* the ceiling: this machine's sgemm on 1024^3 */
    double g1 = sgemm_gflops(1024, 1), g2 = sgemm_gflops(1024, 2);
    double gt = r.threads == 1   ? g1
                : r.threads == 2 ? g2
                                 : sgemm_gflops(1024, r.threads);
    r.ceiling = gt;
    r.peak = bench_fma_peak(r.threads);
    r.ceil_bf16 = bench_bf16_gemm_gflops(1024, r.threads);
    bench_print_head(&r, g1, g2);

    bench_case list[64];
    int nlist = 0;
    if (o->cases) {
        for (int i = 0; i < o->ncases && nlist < 64; i++)
            list[nlist++] = o->cases[i];
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
                        bench_case c = {1, 8,      ls[li],
                                        D, causal, f16 ? ATTN_F16 : ATTN_F32};
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
    bench_print_end(&r, again);
    attn__flash_bq_override = attn__flash_bk_override = 0;
    attn__flash_rc_override = 0;
    return rc;
}
