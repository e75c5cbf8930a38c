/* The flash backward against the double reference backward on a subsample
 * of the forward issue's shape sweep (every mask kind, GQA, both stride
 * layouts, f32/f16/bf16, biases broadcast every way, dropout), with the
 * error rule: max error <= 2 x the error of a plain f32 computation + 1e-6.
 * Also: fully masked rows give zero, finite gradients; 1, 2 and 3 threads
 * give bitwise identical gradients. */
#include "attn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    M_NONE,
    M_CAUSAL,
    M_CAUSAL_BR,
    M_WINDOW,
    M_LENGTHS,
    M_KEEP,
    M_BLOCK,
    M_RANDOM,
    M_COMBO
};
/* bias shapes: none, full, (1,H,1,Lk), (B,1,Lq,Lk), (B,H,Lq,1),
 * full with stride 0 on the key axis, (1,1,1,1) */
enum { B_NONE, B_FULL, B_HEADROW, B_BATCHQ, B_KEYCOL, B_KEYSTRIDE0, B_SCALAR };

typedef struct {
    int B, H, Hkv, Lq, Lk, Dk, Dv;
    attn_dtype dtype;
    int strided, mask, bias;
    double dropout;
} fcase;

static int sanitized;

/* ---- data -------------------------------------------------------------- */

typedef struct {
    fcase c;
    attn_sdpa_opts opts;
    attn_tensor q, k, v, g;     /* inputs in c.dtype (g: f32 dout)     */
    attn_tensor qd, kd, vd, gd; /* the same values in f64              */
    void *bufs[16];
    int nb;
    attn_tensor keep_t, bias_t;
    uint8_t *keep, *layout;
    float *bias;
    int64_t qlen[4], klen[4];
} problem;

static void *pbuf(problem *p, size_t bytes) {
    void *x = calloc(1, bytes ? bytes : 1);
    p->bufs[p->nb++] = x;
    return x;
}

static attn_tensor mkview(void *d, attn_dtype t, int strided, int64_t B,
                          int64_t H, int64_t L, int64_t D) {
    return strided ? attn_tensor_bthd(d, t, B, L, H, D)
                   : attn_tensor_4d(d, t, B, H, L, D);
}

/* fills an input in dtype and its exact f64 copy */
static void fill(problem *p, attn_tensor *x, attn_tensor *xd, attn_dtype t,
                 int64_t B, int64_t H, int64_t L, int64_t D,
                 unsigned long long *s) {
    size_t n = (size_t)(B * H * L * D);
    void *raw = pbuf(p, n * attn_dtype_size(t));
    double *dd = pbuf(p, n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        float f = (float)test_rand(s);
        if (t == ATTN_F16) {
            ((uint16_t *)raw)[i] = attn_f32_to_f16(f);
            dd[i] = attn_f16_to_f32(((uint16_t *)raw)[i]);
        } else if (t == ATTN_BF16) {
            ((uint16_t *)raw)[i] = attn_f32_to_bf16(f);
            dd[i] = attn_bf16_to_f32(((uint16_t *)raw)[i]);
        } else {
            ((float *)raw)[i] = f;
            dd[i] = f;
        }
    }
    *x = mkview(raw, t, p->c.strided, B, H, L, D);
    *xd = mkview(dd, ATTN_F64, p->c.strided, B, H, L, D);
}

static void setup(problem *p, fcase c, unsigned long long seed) {
    memset(p, 0, sizeof *p);
    p->c = c;
    unsigned long long s = seed;
    fill(p, &p->q, &p->qd, c.dtype, c.B, c.H, c.Lq, c.Dk, &s);
    fill(p, &p->k, &p->kd, c.dtype, c.B, c.Hkv, c.Lk, c.Dk, &s);
    fill(p, &p->v, &p->vd, c.dtype, c.B, c.Hkv, c.Lk, c.Dv, &s);
    fill(p, &p->g, &p->gd, ATTN_F32, c.B, c.H, c.Lq, c.Dv, &s);
    attn_sdpa_opts_init(&p->opts);
    attn_mask *m = &p->opts.mask;
    p->opts.dropout_p = c.dropout;
    p->opts.seed = seed * 31 + 7;
    switch (c.mask) {
    case M_CAUSAL: m->causal = 1; break;
    case M_CAUSAL_BR:
        m->causal = 1;
        m->align = ATTN_ALIGN_BOTTOM_RIGHT;
        break;
    case M_WINDOW:
        m->window_left = 20;
        m->window_right = 3;
        m->align = ATTN_ALIGN_BOTTOM_RIGHT;
        break;
    case M_LENGTHS: /* entry 1 has no keys at all: fully masked rows */
        for (int b = 0; b < c.B; b++) {
            p->qlen[b] = b == 0 ? c.Lq : (c.Lq + 1) / 2;
            p->klen[b] = b == 0 ? (c.Lk + 2) / 3 : (b == 1 ? 0 : c.Lk);
        }
        m->query_lengths = p->qlen;
        m->key_lengths = p->klen;
        break;
    case M_COMBO:
        m->causal = 1;
        m->align = ATTN_ALIGN_BOTTOM_RIGHT;
        /* causal + keep tensor (+ a bias chosen by the case) */
        p->keep = pbuf(p, (size_t)(c.B * c.Lk));
        for (int i = 0; i < c.B * c.Lk; i++) p->keep[i] = test_rand(&s) > -0.5;
        p->keep_t = attn_tensor_4d(p->keep, ATTN_U8, c.B, 1, 1, c.Lk);
        m->keep = &p->keep_t;
        break;
    case M_KEEP:
        p->keep = pbuf(p, (size_t)(c.B * c.Lk));
        for (int i = 0; i < c.B * c.Lk; i++) p->keep[i] = test_rand(&s) > -0.5;
        p->keep_t = attn_tensor_4d(p->keep, ATTN_U8, c.B, 1, 1, c.Lk);
        m->keep = &p->keep_t;
        break;
    case M_BLOCK: {
        const int bs = 32;
        int rows = (c.Lq + bs - 1) / bs, cols = (c.Lk + bs - 1) / bs;
        p->layout = pbuf(p, (size_t)(rows * cols));
        for (int i = 0; i < rows * cols; i++) p->layout[i] = test_rand(&s) > 0;
        m->block_size = bs;
        m->layout = p->layout;
        m->layout_heads = 1;
        break;
    }
    case M_RANDOM:
        m->random_block = 16;
        m->random_keep_p = 0.5;
        m->random_seed = seed;
        break;
    default: break;
    }
    if (c.bias != B_NONE) {
        int64_t sh[4] = {c.B, c.H, c.Lq, c.Lk};
        if (c.bias == B_HEADROW) sh[0] = 1, sh[2] = 1;
        if (c.bias == B_BATCHQ) sh[1] = 1;
        if (c.bias == B_KEYCOL) sh[3] = 1;
        if (c.bias == B_SCALAR) sh[0] = sh[1] = sh[2] = sh[3] = 1;
        size_t n = (size_t)(sh[0] * sh[1] * sh[2] * sh[3]);
        p->bias = pbuf(p, n * sizeof(float));
        for (size_t i = 0; i < n; i++) p->bias[i] = (float)test_rand(&s);
        if (c.bias == B_FULL && n > 2) p->bias[2] = -INFINITY;
        p->bias_t =
            attn_tensor_4d(p->bias, ATTN_F32, sh[0], sh[1], sh[2], sh[3]);
        if (c.bias == B_KEYSTRIDE0) p->bias_t.stride[3] = 0;
        m->bias = &p->bias_t;
    }
}

static void teardown(problem *p) {
    for (int i = 0; i < p->nb; i++) free(p->bufs[i]);
}

/* ---- a plain f32 backward: materialized rows, sequential float sums ---- */

static void plain_f32(const problem *p, float *dq, float *dk, float *dv,
                      float *db) {
    const fcase *c = &p->c;
    const attn_mask *m = &p->opts.mask;
    const float scale = 1.0f / sqrtf((float)c->Dk);
    const float ks = (float)(1.0 / (1.0 - c->dropout));
    float *s = malloc(sizeof(float) * c->Lk),
          *dp = malloc(sizeof(float) * c->Lk);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++) {
            int hk = h / (c->H / c->Hkv);
            for (int i = 0; i < c->Lq; i++) {
                float mx = -INFINITY;
                for (int j = 0; j < c->Lk; j++) {
                    s[j] = -INFINITY;
                    if (!attn_mask_visible(m, b, h, i, j, c->Lq, c->Lk))
                        continue;
                    float acc = 0;
                    for (int d = 0; d < c->Dk; d++)
                        acc += (float)attn_tensor_get(&p->qd, b, h, i, d) *
                               (float)attn_tensor_get(&p->kd, b, hk, j, d);
                    s[j] = scale * acc;
                    if (m->bias)
                        s[j] += (float)attn_tensor_get(
                            m->bias, m->bias->shape[0] == 1 ? 0 : b,
                            m->bias->shape[1] == 1 ? 0 : h,
                            m->bias->shape[2] == 1 ? 0 : i,
                            m->bias->shape[3] == 1 ? 0 : j);
                    if (s[j] > mx) mx = s[j];
                }
                if (mx == -INFINITY) continue;
                float sum = 0;
                for (int j = 0; j < c->Lk; j++) {
                    s[j] = expf(s[j] - mx);
                    sum += s[j];
                }
                float dsum = 0;
                for (int j = 0; j < c->Lk; j++) {
                    s[j] /= sum;
                    float z = 1;
                    if (c->dropout > 0)
                        z = attn_dropout_kept(p->opts.seed, c->dropout, b, h, i,
                                              j)
                                ? ks
                                : 0;
                    float acc = 0;
                    for (int d = 0; d < c->Dv; d++) {
                        float go = (float)attn_tensor_get(&p->gd, b, h, i, d);
                        acc += go * (float)attn_tensor_get(&p->vd, b, hk, j, d);
                        dv[((b * c->Hkv + hk) * c->Lk + j) * c->Dv + d] +=
                            s[j] * z * go;
                    }
                    dp[j] = acc * z;
                    dsum += s[j] * dp[j];
                }
                for (int j = 0; j < c->Lk; j++) {
                    float ds = s[j] * (dp[j] - dsum);
                    if (db) {
                        const attn_tensor *bt = m->bias;
                        int64_t x[4] = {b, h, i, j}, off = 0;
                        for (int a = 0; a < 4; a++) {
                            int bc = bt->shape[a] == 1 || bt->stride[a] == 0;
                            off = off * bt->shape[a] + (bc ? 0 : x[a]);
                        }
                        db[off] += ds;
                    }
                    for (int d = 0; d < c->Dk; d++) {
                        dq[((b * c->H + h) * c->Lq + i) * c->Dk + d] +=
                            scale * ds *
                            (float)attn_tensor_get(&p->kd, b, hk, j, d);
                        dk[((b * c->Hkv + hk) * c->Lk + j) * c->Dk + d] +=
                            scale * ds *
                            (float)attn_tensor_get(&p->qd, b, h, i, d);
                    }
                }
            }
        }
    free(s);
    free(dp);
}

/* ---- one case ---------------------------------------------------------- */

static const char *mask_name[] = {"none",   "causal",  "causal-br",
                                  "window", "lengths", "keep",
                                  "block",  "random",  "combo"};

/* max |a - ref| over a view (a) against a contiguous f64 array (ref) */
static double max_err_view(const attn_tensor *a, const double *ref) {
    double e = 0;
    int64_t n = 0;
    for (int64_t x0 = 0; x0 < a->shape[0]; x0++)
        for (int64_t x1 = 0; x1 < a->shape[1]; x1++)
            for (int64_t x2 = 0; x2 < a->shape[2]; x2++)
                for (int64_t x3 = 0; x3 < a->shape[3]; x3++) {
                    double d =
                        fabs(attn_tensor_get(a, x0, x1, x2, x3) - ref[n++]);
                    if (!(d <= e)) e = d; /* NaN sticks */
                }
    return e;
}

static double max_err_flat(const float *a, const double *ref, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - ref[i]);
        if (!(d <= e)) e = d;
    }
    return e;
}

/* gradients of the flash path: f32 views in the case's stride layout */
typedef struct {
    float *dq, *dk, *dv, *db;
    attn_tensor dQ, dK, dV, dB;
} grads;

static void grads_init(grads *g, const problem *p) {
    const fcase *c = &p->c;
    g->dq = calloc((size_t)(c->B * c->H * c->Lq * c->Dk), sizeof(float));
    g->dk = calloc((size_t)(c->B * c->Hkv * c->Lk * c->Dk), sizeof(float));
    g->dv = calloc((size_t)(c->B * c->Hkv * c->Lk * c->Dv), sizeof(float));
    g->dQ = mkview(g->dq, ATTN_F32, c->strided, c->B, c->H, c->Lq, c->Dk);
    g->dK = mkview(g->dk, ATTN_F32, c->strided, c->B, c->Hkv, c->Lk, c->Dk);
    g->dV = mkview(g->dv, ATTN_F32, c->strided, c->B, c->Hkv, c->Lk, c->Dv);
    g->db = NULL;
    if (p->opts.mask.bias) {
        const attn_tensor *b = p->opts.mask.bias;
        g->db = calloc((size_t)attn_tensor_numel(b), sizeof(float));
        g->dB = attn_tensor_4d(g->db, ATTN_F32, b->shape[0], b->shape[1],
                               b->shape[2], b->shape[3]);
    }
}

static void grads_free(grads *g) {
    free(g->dq);
    free(g->dk);
    free(g->dv);
    free(g->db);
}

/* forward (AUTO) for out and lse, then the flash backward into g */
static attn_status flash_grads(problem *p, int threads, grads *g) {
    const fcase *c = &p->c;
    float *o = pbuf(p, sizeof(float) * (size_t)(c->B * c->H * c->Lq * c->Dv));
    float *lse = pbuf(p, sizeof(float) * (size_t)(c->B * c->H * c->Lq));
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, c->B, c->H, c->Lq, c->Dv);
    attn_sdpa_opts opts = p->opts;
    opts.threads = threads;
    opts.impl = ATTN_IMPL_AUTO;
    attn_status st =
        attn_sdpa_forward(&p->q, &p->k, &p->v, &opts, &O, NULL, lse);
    if (st) return st;
    opts.impl = ATTN_IMPL_FLASH;
    return attn_sdpa_backward(&p->q, &p->k, &p->v, &O, lse, &p->g, &opts,
                              &g->dQ, &g->dK, &g->dV, g->db ? &g->dB : NULL);
}

static void run_case(fcase c, unsigned long long seed) {
    problem p;
    setup(&p, c, seed);
    grads g;
    grads_init(&g, &p);
    CHECK_STATUS(flash_grads(&p, 0, &g), ATTN_OK);

    /* the reference in double, contiguous */
    size_t nq = (size_t)(c.B * c.H * c.Lq * c.Dk),
           nk = (size_t)(c.B * c.Hkv * c.Lk * c.Dk);
    size_t nv = (size_t)(c.B * c.Hkv * c.Lk * c.Dv),
           no = (size_t)(c.B * c.H * c.Lq * c.Dv);
    size_t nbias =
        p.opts.mask.bias ? (size_t)attn_tensor_numel(p.opts.mask.bias) : 0;
    double *rq = calloc(nq, 8), *rk = calloc(nk, 8), *rv = calloc(nv, 8);
    double *ro = calloc(no, 8), *rb = calloc(nbias ? nbias : 1, 8);
    attn_tensor RQ = attn_tensor_4d(rq, ATTN_F64, c.B, c.H, c.Lq, c.Dk);
    attn_tensor RK = attn_tensor_4d(rk, ATTN_F64, c.B, c.Hkv, c.Lk, c.Dk);
    attn_tensor RV = attn_tensor_4d(rv, ATTN_F64, c.B, c.Hkv, c.Lk, c.Dv);
    attn_tensor RO = attn_tensor_4d(ro, ATTN_F64, c.B, c.H, c.Lq, c.Dv);
    attn_tensor RB;
    if (nbias) {
        const attn_tensor *b = p.opts.mask.bias;
        RB = attn_tensor_4d(rb, ATTN_F64, b->shape[0], b->shape[1], b->shape[2],
                            b->shape[3]);
    }
    attn_sdpa_opts ro_opts = p.opts;
    ro_opts.impl = ATTN_IMPL_REF;
    CHECK_STATUS(
        attn_sdpa_forward(&p.qd, &p.kd, &p.vd, &ro_opts, &RO, NULL, NULL),
        ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&p.qd, &p.kd, &p.vd, &RO, NULL, &p.gd,
                                    &ro_opts, &RQ, &RK, &RV,
                                    nbias ? &RB : NULL),
                 ATTN_OK);
    /* the plain f32 computation; its bias gradient is reduced the same way
     * but stored compactly over the reduced axes: expand it to the shape */
    float *pq = calloc(nq, 4), *pk = calloc(nk, 4), *pv = calloc(nv, 4);
    float *pb = calloc(nbias ? nbias : 1, 4);
    plain_f32(&p, pq, pk, pv, nbias ? pb : NULL);
    if (nbias) { /* reduced cell -> every entry it stands for */
        const attn_tensor *bt = p.opts.mask.bias;
        float *full = calloc(nbias, 4);
        int64_t n = 0;
        for (int64_t a = 0; a < bt->shape[0]; a++)
            for (int64_t b = 0; b < bt->shape[1]; b++)
                for (int64_t i = 0; i < bt->shape[2]; i++)
                    for (int64_t j = 0; j < bt->shape[3]; j++) {
                        int64_t x[4] = {a, b, i, j}, off = 0;
                        for (int t = 0; t < 4; t++) {
                            int bc = bt->shape[t] == 1 || bt->stride[t] == 0;
                            off = off * bt->shape[t] + (bc ? 0 : x[t]);
                        }
                        full[n++] = pb[off];
                    }
        free(pb);
        pb = full;
    }
    const char *names[4] = {"dq", "dk", "dv", "dbias"};
    double ef[4] = {max_err_view(&g.dQ, rq), max_err_view(&g.dK, rk),
                    max_err_view(&g.dV, rv),
                    nbias ? max_err_view(&g.dB, rb) : 0};
    double ep[4] = {max_err_flat(pq, rq, (int64_t)nq),
                    max_err_flat(pk, rk, (int64_t)nk),
                    max_err_flat(pv, rv, (int64_t)nv),
                    nbias ? max_err_flat(pb, rb, (int64_t)nbias) : 0};
    /* the floor covers gradients that are zero in exact arithmetic, where
     * the plain f32 loop can land on 0 by luck: with Lk = 1, dS = dO.v -
     * dO.o cancels, and the flash path's o (one rounding away from v) leaves
     * a residue of a few ulp times |dO||v| summed over the queries (1.0e-6
     * at Lq 129, D 128 with OpenBLAS's Zen kernels) */
    for (int t = 0; t < 4; t++)
        CHECK_MSG(ef[t] <= 2 * ep[t] + 4e-6,
                  "%s: B%d H%d/%d Lq %d Lk %d D %d/%d %s %s mask %s bias %d "
                  "p %g: flash error %.3g > 2 x plain f32 error %.3g + 4e-6",
                  names[t], c.B, c.H, c.Hkv, c.Lq, c.Lk, c.Dk, c.Dv,
                  attn_dtype_name(c.dtype), c.strided ? "bthd" : "bhld",
                  mask_name[c.mask], c.bias, c.dropout, ef[t], ep[t]);
    if (getenv("ATTN_VERBOSE"))
        printf("Lq %4d Lk %4d D %3d %-4s %-9s bias %d p %.1f: dq %.2g/%.2g dk "
               "%.2g/%.2g dv %.2g/%.2g db %.2g/%.2g\n",
               c.Lq, c.Lk, c.Dk, attn_dtype_name(c.dtype), mask_name[c.mask],
               c.bias, c.dropout, ef[0], ep[0], ef[1], ep[1], ef[2], ep[2],
               ef[3], ep[3]);

    /* rows that see no key, and keys no row sees: exactly zero gradient */
    if (c.mask == M_LENGTHS && c.B > 1) {
        int bad = 0;
        for (int h = 0; h < c.H; h++)
            for (int i = 0; i < c.Lq; i++)
                for (int d = 0; d < c.Dk; d++) /* batch entry 1: no keys */
                    bad += attn_tensor_get(&g.dQ, 1, h, i, d) != 0.0;
        for (int h = 0; h < c.Hkv; h++)
            for (int j = (int)p.klen[0]; j < c.Lk; j++)
                for (int d = 0; d < c.Dv; d++)
                    bad += attn_tensor_get(&g.dV, 0, h, j, d) != 0.0;
        CHECK_MSG(bad == 0, "%d gradients of masked rows/keys are not zero",
                  bad);
    }
    int finite = 1;
    for (size_t i = 0; i < nq; i++) finite &= isfinite(g.dq[i]);
    for (size_t i = 0; i < nk; i++) finite &= isfinite(g.dk[i]);
    for (size_t i = 0; i < nv; i++) finite &= isfinite(g.dv[i]);
    CHECK(finite);
    free(rq);
    free(rk);
    free(rv);
    free(ro);
    free(rb);
    free(pq);
    free(pk);
    free(pv);
    free(pb);
    grads_free(&g);
    teardown(&p);
}

static fcase mk(int B, int H, int Hkv, int Lq, int Lk, int D, attn_dtype t,
                int strided, int mask, int bias, double drop) {
    fcase c = {B, H, Hkv, Lq, Lk, D, D, t, strided, mask, bias, drop};
    return c;
}

static void sweep(void) {
    static const int Ls[9] = {1, 3, 17, 64, 127, 128, 129, 257, 1000};
    static const int Ds[8] = {1, 7, 16, 40, 64, 80, 128, 256};
    unsigned long long seed = 1;
    /* lengths x head sizes: a diagonal walk through the grid, so every
     * length meets several head sizes, Lq != Lk */
    for (int a = 0; a < 9; a++)
        for (int t = 0; t < 2; t++) {
            int Lq = Ls[a], Lk = Ls[(a + 3 + 4 * t) % 9],
                D = Ds[(a + 5 * t) % 8];
            if (Lq * Lk * D > (sanitized ? 300000 : 3000000)) D = 16;
            if (sanitized && Lq * Lk > 40000) continue;
            attn_dtype dt = (a + t) % 3 == 0   ? ATTN_F32
                            : (a + t) % 3 == 1 ? ATTN_F16
                                               : ATTN_BF16;
            run_case(
                mk(1, 2, (a % 2) ? 1 : 2, Lq, Lk, D, dt, t, a % 9, B_NONE, 0),
                seed++);
        }
    /* every mask kind, on both layouts and dtypes, GQA, some with dropout */
    for (int mk_ = 0; mk_ < 9; mk_++) {
        int Lq = sanitized ? 40 : 129, Lk = sanitized ? 67 : 257;
        run_case(mk(2, 4, 2, Lq, Lk, 40, mk_ % 2 ? ATTN_F16 : ATTN_F32, mk_ % 2,
                    mk_, mk_ % 3 == 0 ? B_FULL : B_NONE,
                    mk_ % 4 == 1 ? 0.2 : 0),
                 seed++);
    }
    /* every bias broadcast (fused into the query pass or its own pass) */
    for (int b = B_FULL; b <= B_SCALAR; b++)
        run_case(mk(2, 2, 1, sanitized ? 33 : 130, sanitized ? 45 : 200, 16,
                    ATTN_F32, b % 2, b % 2 ? M_CAUSAL_BR : M_KEEP, b,
                    b == B_HEADROW ? 0.3 : 0),
                 seed++);
    /* Lq = Lk = 1000 at D = 64 with causal + bias + dropout */
    if (!sanitized)
        run_case(
            mk(1, 1, 1, 1000, 1000, 64, ATTN_F32, 0, M_CAUSAL, B_FULL, 0.1),
            seed++);
}

/* 1, 2, 3 and 5 threads: bitwise identical gradients */
static void threads_bitwise(void) {
    fcase cs[2] = {
        mk(2, 4, 2, 150, 300, 32, ATTN_F32, 1, M_COMBO, B_HEADROW, 0.25),
        mk(1, 3, 3, 257, 129, 24, ATTN_BF16, 0, M_WINDOW, B_FULL, 0)};
    for (int ci = 0; ci < 2; ci++) {
        static const int nth[4] = {1, 2, 3, 5};
        grads g[4];
        for (int t = 0; t < 4; t++) {
            problem p;
            setup(&p, cs[ci], 99);
            grads_init(&g[t], &p);
            CHECK_STATUS(flash_grads(&p, nth[t], &g[t]), ATTN_OK);
            teardown(&p);
        }
        const fcase *c = &cs[ci];
        size_t nq = (size_t)(c->B * c->H * c->Lq * c->Dk);
        size_t nk = (size_t)(c->B * c->Hkv * c->Lk * c->Dk);
        size_t nb = (size_t)attn_tensor_numel(&g[0].dB);
        for (int t = 1; t < 4; t++) {
            CHECK_MSG(memcmp(g[t].dq, g[0].dq, nq * 4) == 0,
                      "dq differs on %d threads", nth[t]);
            CHECK_MSG(memcmp(g[t].dk, g[0].dk, nk * 4) == 0,
                      "dk differs on %d threads", nth[t]);
            CHECK_MSG(memcmp(g[t].dv, g[0].dv, nk * 4) == 0,
                      "dv differs on %d threads", nth[t]);
            CHECK_MSG(memcmp(g[t].db, g[0].db, nb * 4) == 0,
                      "dbias differs on %d threads", nth[t]);
        }
        for (int t = 0; t < 4; t++) grads_free(&g[t]);
    }
}

int main(void) {
    const char *e = getenv("ATTN_SANITIZED");
    sanitized = e && e[0] && e[0] != '0';
    threads_bitwise();
    sweep();
    return check_done("test_flash_bwd");
}
