/* Gradient checks of attn_sdpa_backward: the reference backward against
 * central differences of the reference forward, all in double, for every
 * mask kind, grouped heads, biases (full and broadcast), strided views and
 * dropout; plus "adds into", fully masked rows and argument validation. */
#include "attn.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { BIAS_NONE, BIAS_FULL, BIAS_SIZE1, BIAS_STRIDE0 };

typedef struct {
    int B, H, Hkv, Lq, Lk, Dk, Dv;
    int strided; /* batch-first (B, L, H, D) views for every tensor   */
    int bias_kind;
    int keep;  /* key-padding keep tensor (B, 1, 1, Lk)             */
    int block; /* block-sparse layout with blocks of 2              */
    int64_t qlen_cut, klen_cut; /* query/key lengths Lq - cut (>= 0)   */
    attn_sdpa_opts opts;        /* scale, causal, window, dropout, random */
    const char *name;
} gcase;

static int sanitized;
static int64_t ncases;

static attn_tensor view(double *d, int strided, int64_t B, int64_t H, int64_t L,
                        int64_t D) {
    return strided ? attn_tensor_bthd(d, ATTN_F64, B, L, H, D)
                   : attn_tensor_4d(d, ATTN_F64, B, H, L, D);
}

static double *rand_buf(size_t n, unsigned long long *s, double amp) {
    double *x = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = amp * test_rand(s);
    return x;
}

static double *const_buf(size_t n, double c) {
    double *x = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = c;
    return x;
}

/* sum(out * G), the loss whose gradient backward computes with dout = G */
static double loss(const attn_tensor *Q, const attn_tensor *K,
                   const attn_tensor *V, const attn_sdpa_opts *o,
                   attn_tensor *O, const attn_tensor *G) {
    attn_status st = attn_sdpa_forward(Q, K, V, o, O, NULL, NULL);
    if (st != ATTN_OK) {
        fprintf(stderr, "forward failed: %s\n", attn_last_error());
        return NAN;
    }
    double l = 0;
    for (int64_t a = 0; a < O->shape[0]; a++)
        for (int64_t b = 0; b < O->shape[1]; b++)
            for (int64_t c = 0; c < O->shape[2]; c++)
                for (int64_t d = 0; d < O->shape[3]; d++)
                    l += attn_tensor_get(O, a, b, c, d) *
                         attn_tensor_get(G, a, b, c, d);
    return l;
}

/* Compares grad - init (what backward added) with central differences of
 * the loss in each element of the view X. Elements of X that share storage
 * (stride 0) are perturbed together, as the storage is the parameter. */
static int check_tensor(const char *what, const gcase *gc, attn_tensor *X,
                        const attn_tensor *grad, double init,
                        const attn_tensor *Q, const attn_tensor *K,
                        const attn_tensor *V, const attn_sdpa_opts *o,
                        attn_tensor *O, const attn_tensor *G) {
    const double eps = 1e-5;
    int64_t n = 0, every = sanitized ? 7 : 1;
    int bad = 0;
    double *x = X->data;
    for (int64_t a = 0; a < X->shape[0]; a++)
        for (int64_t b = 0; b < X->shape[1]; b++)
            for (int64_t c = 0; c < X->shape[2]; c++)
                for (int64_t d = 0; d < X->shape[3]; d++) {
                    if (n++ % every) continue;
                    int64_t off = a * X->stride[0] + b * X->stride[1] +
                                  c * X->stride[2] + d * X->stride[3];
                    double x0 = x[off];
                    x[off] = x0 + eps;
                    double lp = loss(Q, K, V, o, O, G);
                    x[off] = x0 - eps;
                    double lm = loss(Q, K, V, o, O, G);
                    x[off] = x0;
                    double num = (lp - lm) / (2 * eps);
                    if (x0 == -INFINITY) num = 0; /* a masked bias entry */
                    double ana = attn_tensor_get(grad, a, b, c, d) - init;
                    double tol = 1e-7 * (1 + fabs(num));
                    if (!(fabs(num - ana) <= tol)) {
                        if (bad < 3)
                            fprintf(stderr,
                                    "FAIL %s: d%s[%lld,%lld,%lld,%lld] = %.12g "
                                    "but central difference gives %.12g\n",
                                    gc->name, what, (long long)a, (long long)b,
                                    (long long)c, (long long)d, ana, num);
                        bad++;
                    }
                }
    CHECK_MSG(bad == 0, "%s: %d entries of d%s wrong", gc->name, bad, what);
    return bad;
}

static void run_case(gcase gc) {
    unsigned long long s = 0x9e3779b97f4a7c15ull ^
                           (unsigned long long)(gc.Lq * 131 + gc.Lk * 17 +
                                                gc.bias_kind * 7 + ncases++);
    const int B = gc.B, H = gc.H, Hkv = gc.Hkv, Lq = gc.Lq, Lk = gc.Lk;
    const int Dk = gc.Dk, Dv = gc.Dv, st = gc.strided;
    size_t nq = (size_t)B * H * Lq * Dk, nk = (size_t)B * Hkv * Lk * Dk;
    size_t nv = (size_t)B * Hkv * Lk * Dv, no = (size_t)B * H * Lq * Dv;
    double *q = rand_buf(nq, &s, 1.0), *k = rand_buf(nk, &s, 1.0);
    double *v = rand_buf(nv, &s, 1.0), *g = rand_buf(no, &s, 1.0);
    double *o = const_buf(no, 0);
    const double init = 0.25; /* backward adds: start from a non-zero value */
    double *dq = const_buf(nq, init), *dk = const_buf(nk, init);
    double *dv = const_buf(nv, init);
    attn_tensor Q = view(q, st, B, H, Lq, Dk), K = view(k, st, B, Hkv, Lk, Dk);
    attn_tensor V = view(v, st, B, Hkv, Lk, Dv), G = view(g, st, B, H, Lq, Dv);
    attn_tensor O = attn_tensor_4d(o, ATTN_F64, B, H, Lq, Dv);
    attn_tensor dQ = view(dq, st, B, H, Lq, Dk),
                dK = view(dk, st, B, Hkv, Lk, Dk);
    attn_tensor dV = view(dv, st, B, Hkv, Lk, Dv);
    attn_sdpa_opts opts = gc.opts;
    opts.impl = ATTN_IMPL_REF;

    /* bias and its gradient */
    attn_tensor Bi, dB;
    double *bias = NULL, *dbias = NULL;
    if (gc.bias_kind != BIAS_NONE) {
        size_t nb = (size_t)B * H * Lq * Lk;
        bias = rand_buf(nb, &s, 1.0);
        dbias = const_buf(nb, init);
        if (gc.bias_kind == BIAS_FULL) {
            Bi = attn_tensor_4d(bias, ATTN_F64, B, H, Lq, Lk);
            if (Lk > 2) bias[1] = -INFINITY; /* one entry masked by the bias */
            dB = attn_tensor_4d(dbias, ATTN_F64, B, H, Lq, Lk);
        } else if (gc.bias_kind == BIAS_SIZE1) {
            Bi = attn_tensor_4d(bias, ATTN_F64, 1, H, 1, Lk);
            dB = attn_tensor_4d(dbias, ATTN_F64, 1, H, 1, Lk);
        } else { /* full shape, but shared over batch and queries */
            Bi = attn_tensor_4d(bias, ATTN_F64, B, H, Lq, Lk);
            Bi.stride[0] = 0;
            Bi.stride[2] = 0;
            Bi.stride[1] = Lk;
            dB = attn_tensor_4d(dbias, ATTN_F64, B, H, Lq, Lk);
            if (st) { /* a non-contiguous gradient view: (Lq, Lk) transposed */
                dB.stride[2] = 1;
                dB.stride[3] = Lq;
            }
        }
        opts.mask.bias = &Bi;
    }
    uint8_t *keep = NULL;
    attn_tensor Keep;
    if (gc.keep) {
        keep = malloc((size_t)B * Lk);
        for (int i = 0; i < B * Lk; i++) keep[i] = test_rand(&s) > -0.4;
        keep[0] = 1;
        if (B > 1 && Lk > 1) /* entry 1 sees nothing: fully masked rows */
            memset(keep + Lk, 0, (size_t)Lk);
        Keep = attn_tensor_4d(keep, ATTN_U8, B, 1, 1, Lk);
        opts.mask.keep = &Keep;
    }
    uint8_t *layout = NULL;
    if (gc.block) {
        int rows = (Lq + 1) / 2, cols = (Lk + 1) / 2;
        layout = malloc((size_t)H * rows * cols);
        for (int i = 0; i < H * rows * cols; i++)
            layout[i] = test_rand(&s) > -0.3;
        opts.mask.block_size = 2;
        opts.mask.layout = layout;
        opts.mask.layout_heads = H;
    }
    int64_t qlen[8], klen[8];
    if (gc.qlen_cut) {
        for (int b = 0; b < B; b++)
            qlen[b] = b == 0 ? Lq : (Lq > gc.qlen_cut ? Lq - gc.qlen_cut : 0);
        opts.mask.query_lengths = qlen;
    }
    if (gc.klen_cut) {
        for (int b = 0; b < B; b++)
            klen[b] = b == 1 ? Lk : (Lk > gc.klen_cut ? Lk - gc.klen_cut : 0);
        opts.mask.key_lengths = klen;
    }

    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &opts, &O, NULL, NULL), ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&Q, &K, &V, &O, NULL, &G, &opts, &dQ, &dK,
                                    &dV, gc.bias_kind ? &dB : NULL),
                 ATTN_OK);
    int bad = 0;
    bad += check_tensor("q", &gc, &Q, &dQ, init, &Q, &K, &V, &opts, &O, &G);
    bad += check_tensor("k", &gc, &K, &dK, init, &Q, &K, &V, &opts, &O, &G);
    bad += check_tensor("v", &gc, &V, &dV, init, &Q, &K, &V, &opts, &O, &G);
    if (gc.bias_kind)
        bad += check_tensor("bias", &gc, &Bi, &dB, init, &Q, &K, &V, &opts, &O,
                            &G);

    /* rows no key is visible from get exactly nothing (and nothing NaN) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Lq; i++) {
                int any = 0;
                for (int j = 0; j < Lk; j++)
                    any |=
                        attn_mask_visible(&opts.mask, b, h, i, j, Lq, Lk) &&
                        !(bias && attn_tensor_get(
                                      &Bi, gc.bias_kind == BIAS_SIZE1 ? 0 : b,
                                      h, gc.bias_kind == BIAS_SIZE1 ? 0 : i,
                                      j) == -INFINITY);
                if (any) continue;
                for (int d = 0; d < Dk; d++)
                    CHECK_MSG(attn_tensor_get(&dQ, b, h, i, d) == init,
                              "%s: masked row (%d,%d,%d) has dq %g", gc.name, b,
                              h, i, attn_tensor_get(&dQ, b, h, i, d) - init);
            }
    for (size_t i = 0; i < nq; i++) CHECK(isfinite(dq[i]));
    if (bad)
        fprintf(stderr, "  case %s: B=%d H=%d Hkv=%d Lq=%d Lk=%d\n", gc.name, B,
                H, Hkv, Lq, Lk);
    free(q);
    free(k);
    free(v);
    free(g);
    free(o);
    free(dq);
    free(dk);
    free(dv);
    free(bias);
    free(dbias);
    free(keep);
    free(layout);
}

static gcase base(int Lq, int Lk, const char *name) {
    gcase gc;
    memset(&gc, 0, sizeof gc);
    gc.B = 2;
    gc.H = 2;
    gc.Hkv = 2;
    gc.Lq = Lq;
    gc.Lk = Lk;
    gc.Dk = 16;
    gc.Dv = 16;
    attn_sdpa_opts_init(&gc.opts);
    gc.name = name;
    return gc;
}

static void sweep(void) {
    static const int Ls[3] = {1, 4, 9};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            gcase gc = base(Ls[a], Ls[b], "plain");
            run_case(gc);
            gc = base(Ls[a], Ls[b], "strided+bias");
            gc.strided = 1;
            gc.bias_kind = BIAS_FULL;
            run_case(gc);
        }
    /* each mask kind on shapes with Lq != Lk both ways and Lq = Lk */
    static const int shapes[3][2] = {{4, 9}, {9, 4}, {9, 9}};
    for (int t = 0; t < 3; t++) {
        int Lq = shapes[t][0], Lk = shapes[t][1];
        gcase gc;
        gc = base(Lq, Lk, "causal top-left");
        gc.opts.mask.causal = 1;
        run_case(gc);
        gc = base(Lq, Lk, "causal bottom-right");
        gc.opts.mask.causal = 1;
        gc.opts.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
        run_case(gc);
        gc = base(Lq, Lk, "window (2, 1)");
        gc.opts.mask.window_left = 2;
        gc.opts.mask.window_right = 1;
        gc.opts.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
        run_case(gc);
        gc = base(Lq, Lk, "lengths");
        gc.qlen_cut = 2;
        gc.klen_cut = 3;
        run_case(gc);
        gc = base(Lq, Lk, "keep tensor");
        gc.keep = 1;
        run_case(gc);
        gc = base(Lq, Lk, "block sparse");
        gc.block = 1;
        run_case(gc);
        gc = base(Lq, Lk, "random blocks");
        gc.opts.mask.random_block = 2;
        gc.opts.mask.random_keep_p = 0.6;
        gc.opts.mask.random_seed = 11;
        run_case(gc);
        gc = base(Lq, Lk, "bias size-1 broadcast");
        gc.bias_kind = BIAS_SIZE1;
        run_case(gc);
        gc = base(Lq, Lk, "bias stride-0 broadcast");
        gc.bias_kind = BIAS_STRIDE0;
        gc.strided = t == 2;
        run_case(gc);
        gc = base(Lq, Lk, "GQA causal");
        gc.Hkv = 1;
        gc.opts.mask.causal = 1;
        run_case(gc);
        gc = base(Lq, Lk, "dropout");
        gc.opts.dropout_p = 0.3;
        gc.opts.seed = 1234;
        run_case(gc);
        gc = base(Lq, Lk, "dropout+GQA+strided+bias+causal, Dv 8, scale 0.7");
        gc.Hkv = 1;
        gc.Dv = 8;
        gc.strided = 1;
        gc.bias_kind = BIAS_SIZE1;
        gc.opts.mask.causal = 1;
        gc.opts.dropout_p = 0.5;
        gc.opts.seed = 99;
        gc.opts.scale = 0.7;
        run_case(gc);
    }
}

/* f32 tensors through AUTO (lse from the forward) match the f64 gradient */
static void f32_path(void) {
    const int B = 2, H = 4, Hkv = 2, Lq = 17, Lk = 13, D = 16;
    unsigned long long s = 5;
    size_t nq = (size_t)B * H * Lq * D, nk = (size_t)B * Hkv * Lk * D;
    float *buf[12];
    double *dbuf[12];
    size_t n[6] = {nq, nk, nk, nq, nq, 0};
    for (int t = 0; t < 5; t++) {
        buf[t] = malloc(n[t] * sizeof(float));
        dbuf[t] = malloc(n[t] * sizeof(double));
        for (size_t i = 0; i < n[t]; i++) {
            buf[t][i] = (float)test_rand(&s);
            dbuf[t][i] = buf[t][i];
        }
    }
    /* gradients: dq dk dv in f32 and f64 */
    float *g32[3];
    double *g64[3];
    size_t gn[3] = {nq, nk, nk};
    for (int t = 0; t < 3; t++) {
        g32[t] = calloc(gn[t], sizeof(float));
        g64[t] = calloc(gn[t], sizeof(double));
    }
    float lse[B * H * Lq];
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.mask.causal = 1;
    opts.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    opts.dropout_p = 0.2;
    opts.seed = 3;
    attn_tensor Q = attn_tensor_4d(buf[0], ATTN_F32, B, H, Lq, D);
    attn_tensor K = attn_tensor_4d(buf[1], ATTN_F32, B, Hkv, Lk, D);
    attn_tensor V = attn_tensor_4d(buf[2], ATTN_F32, B, Hkv, Lk, D);
    attn_tensor O = attn_tensor_4d(buf[3], ATTN_F32, B, H, Lq, D);
    attn_tensor G = attn_tensor_4d(buf[4], ATTN_F32, B, H, Lq, D);
    attn_tensor dQ = attn_tensor_4d(g32[0], ATTN_F32, B, H, Lq, D);
    attn_tensor dK = attn_tensor_4d(g32[1], ATTN_F32, B, Hkv, Lk, D);
    attn_tensor dV = attn_tensor_4d(g32[2], ATTN_F32, B, Hkv, Lk, D);
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &opts, &O, NULL, lse), ATTN_OK);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &K, &V, &O, lse, &G, &opts, &dQ, &dK, &dV, NULL),
        ATTN_OK);
    attn_tensor Qd = attn_tensor_4d(dbuf[0], ATTN_F64, B, H, Lq, D);
    attn_tensor Kd = attn_tensor_4d(dbuf[1], ATTN_F64, B, Hkv, Lk, D);
    attn_tensor Vd = attn_tensor_4d(dbuf[2], ATTN_F64, B, Hkv, Lk, D);
    attn_tensor Od = attn_tensor_4d(dbuf[3], ATTN_F64, B, H, Lq, D);
    attn_tensor Gd = attn_tensor_4d(dbuf[4], ATTN_F64, B, H, Lq, D);
    attn_tensor dQd = attn_tensor_4d(g64[0], ATTN_F64, B, H, Lq, D);
    attn_tensor dKd = attn_tensor_4d(g64[1], ATTN_F64, B, Hkv, Lk, D);
    attn_tensor dVd = attn_tensor_4d(g64[2], ATTN_F64, B, Hkv, Lk, D);
    opts.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Qd, &Kd, &Vd, &opts, &Od, NULL, NULL),
                 ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&Qd, &Kd, &Vd, &Od, NULL, &Gd, &opts, &dQd,
                                    &dKd, &dVd, NULL),
                 ATTN_OK);
    double worst = 0;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < gn[t]; i++) {
            double e = fabs(g32[t][i] - g64[t][i]) / (1 + fabs(g64[t][i]));
            if (e > worst) worst = e;
        }
    CHECK_MSG(worst < 1e-5, "f32 gradients differ from f64 by %g", worst);
    for (int t = 0; t < 5; t++) {
        free(buf[t]);
        free(dbuf[t]);
    }
    for (int t = 0; t < 3; t++) {
        free(g32[t]);
        free(g64[t]);
    }
}

static void validation(void) {
    enum { B = 1, H = 2, L = 3, D = 4 };
    float q[B * H * L * D] = {0}, o[B * H * L * D] = {0},
                        g[B * H * L * D] = {0};
    float dq[B * H * L * D], dk[B * H * L * D], dv[B * H * L * D],
        lse[B * H * L];
    float bias[L * L] = {0}, db[L * L];
    double d64[B * H * L * D];
    uint16_t h16[B * H * L * D];
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, H, L, D);
    attn_tensor G = attn_tensor_4d(g, ATTN_F32, B, H, L, D);
    attn_tensor dQ = attn_tensor_4d(dq, ATTN_F32, B, H, L, D);
    attn_tensor dK = attn_tensor_4d(dk, ATTN_F32, B, H, L, D);
    attn_tensor dV = attn_tensor_4d(dv, ATTN_F32, B, H, L, D);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &opts, &O, NULL, lse), ATTN_OK);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &dK, &dV, NULL),
        ATTN_OK);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, NULL, &dQ, &dK, &dV, NULL),
        ATTN_E_INVALID);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, NULL, lse, &G, &opts, &dQ, &dK,
                                    &dV, NULL),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, NULL, &opts, &dQ, &dK,
                                    &dV, NULL),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, NULL, &dK,
                                    &dV, NULL),
                 ATTN_E_INVALID);
    /* lse is needed except by the reference */
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, NULL, &G, &opts, &dQ, &dK,
                                    &dV, NULL),
                 ATTN_E_INVALID);
    opts.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, NULL, &G, &opts, &dQ, &dK,
                                    &dV, NULL),
                 ATTN_E_INVALID);
    opts.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, NULL, &G, &opts, &dQ, &dK,
                                    &dV, NULL),
                 ATTN_OK);
    opts.impl = ATTN_IMPL_AUTO;
    /* shapes */
    attn_tensor bad = attn_tensor_4d(dq, ATTN_F32, B, H, L, D - 1);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &bad, &dK,
                                    &dV, NULL),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &bad,
                                    &dV, NULL),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &dK,
                                    &bad, NULL),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &bad, lse, &G, &opts, &dQ, &dK,
                                    &dV, NULL),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &bad, &opts, &dQ, &dK,
                                    &dV, NULL),
                 ATTN_E_SHAPE);
    attn_tensor bcast = dQ;
    bcast.stride[1] = 0;
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &bcast, &dK,
                                    &dV, NULL),
                 ATTN_E_SHAPE);
    /* dtypes: f16 gradients never, f64 only with the reference (unsupported
     * elsewhere) */
    attn_tensor h = attn_tensor_4d(h16, ATTN_F16, B, H, L, D);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &h, &dK, &dV, NULL),
        ATTN_E_DTYPE);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &h, &opts, &dQ, &dK, &dV, NULL),
        ATTN_E_DTYPE);
    attn_tensor d = attn_tensor_4d(d64, ATTN_F64, B, H, L, D);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &d, &dK, &dV, NULL),
        ATTN_E_UNSUPPORTED);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &d, &opts, &dQ, &dK, &dV, NULL),
        ATTN_E_UNSUPPORTED);
    attn_tensor i32 = attn_tensor_4d(dq, ATTN_I32, B, H, L, D);
    CHECK_STATUS(attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &i32,
                                    &dV, NULL),
                 ATTN_E_DTYPE);
    opts.impl = ATTN_IMPL_REF;
    memset(d64, 0, sizeof d64);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &d, &dK, &dV, NULL),
        ATTN_OK);
    opts.impl = ATTN_IMPL_AUTO;
    /* dbias needs a bias, of the bias's shape */
    attn_tensor Bi = attn_tensor_4d(bias, ATTN_F32, 1, 1, L, L);
    attn_tensor dB = attn_tensor_4d(db, ATTN_F32, 1, 1, L, L);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &dK, &dV, &dB),
        ATTN_E_INVALID);
    opts.mask.bias = &Bi;
    memset(db, 0, sizeof db);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &dK, &dV, &dB),
        ATTN_OK);
    attn_tensor dB2 = attn_tensor_4d(db, ATTN_F32, 1, 1, 1, L);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &dK, &dV, &dB2),
        ATTN_E_SHAPE);
    opts.mask.bias = NULL;
    /* a NaN in dout */
    g[5] = NAN;
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &dK, &dV, NULL),
        ATTN_E_NONFINITE);
    g[5] = 0;
    /* bad options are refused as in forward */
    opts.dropout_p = 1.0;
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &G, &opts, &dQ, &dK, &dV, NULL),
        ATTN_E_INVALID);
}

int main(void) {
    const char *e = getenv("ATTN_SANITIZED");
    sanitized = e && e[0] && e[0] != '0';
    validation();
    f32_path();
    sweep();
    return check_done("test_grad");
}
