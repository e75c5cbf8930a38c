/* Rotary positions: attn_rope_forward / backward against a plain
 * reference written from the formulas (rotate_half for neox, complex
 * products for interleaved pairs, transformers' llama3 rule), every style,
 * scaling, partial dim and position layout; the backward by central
 * differences; attention with opts.rope against attention on rotated
 * inputs, forward and backward (differences in f64 through the reference,
 * flash against reference); the KV cache's rotated keys (decode continues
 * at the cache's length; truncate and reorder stay right); bad input. */
#include "attn.h"
#include "attn_cache.h"
#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 12345;
static double urand(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* inv_freq by the formulas of transformers' rope utils (f64). */
static void ref_freq(const attn_rope *r, int64_t rd, double *f) {
    for (int64_t i = 0; i < rd / 2; i++) {
        double base = 1.0 / pow(r->theta, (double)(2 * i) / (double)rd);
        if (r->scaling == ATTN_ROPE_SCALING_LINEAR) {
            base /= r->factor;
        } else if (r->scaling == ATTN_ROPE_SCALING_LLAMA3) {
            double low_wl = r->original_max_position / r->low_freq_factor;
            double high_wl = r->original_max_position / r->high_freq_factor;
            double wl = 2 * 3.14159265358979323846 / base;
            double llama = wl > low_wl ? base / r->factor : base;
            double smooth =
                (r->original_max_position / wl - r->low_freq_factor) /
                (r->high_freq_factor - r->low_freq_factor);
            double smoothed = (1 - smooth) * llama / r->factor + smooth * llama;
            int medium = !(wl < high_wl) && !(wl > low_wl);
            base = medium ? smoothed : llama;
        }
        f[i] = base;
    }
}

/* y = rotate(x) for one row of D features at position p. */
static void ref_row(const attn_rope *r, int64_t D, double p, const double *x,
                    double *y) {
    int64_t rd = r->rotary_dim ? r->rotary_dim : D;
    double f[512];
    ref_freq(r, rd, f);
    for (int64_t d = 0; d < D; d++) y[d] = x[d];
    if (r->style == ATTN_ROPE_NEOX) {
        /* x * cos(cat(a, a)) + rotate_half(x) * sin(cat(a, a)) */
        int64_t h = rd / 2;
        for (int64_t d = 0; d < rd; d++) {
            double a = p * f[d % h];
            double rot = d < h ? -x[d + h] : x[d - h];
            y[d] = x[d] * cos(a) + rot * sin(a);
        }
    } else {
        for (int64_t i = 0; i < rd / 2; i++) { /* (x0 + i x1) e^{i a} */
            double a = p * f[i];
            double re = x[2 * i], im = x[2 * i + 1];
            y[2 * i] = re * cos(a) - im * sin(a);
            y[2 * i + 1] = re * sin(a) + im * cos(a);
        }
    }
}

static int64_t pos_of(const int64_t *pos, int64_t n, int64_t B, int64_t L,
                      int64_t b, int64_t l) {
    (void)B;
    if (!pos) return l;
    return n == L ? pos[l] : pos[b * L + l];
}

static void setup(attn_rope *r, int style, int scaling, int64_t rd) {
    attn_rope_init(r);
    r->style = style;
    r->rotary_dim = rd;
    r->scaling = scaling;
    if (scaling == ATTN_ROPE_SCALING_LINEAR) r->factor = 2.5;
    if (scaling == ATTN_ROPE_SCALING_LLAMA3) {
        r->factor = 8;
        r->low_freq_factor = 1;
        r->high_freq_factor = 4;
        r->original_max_position = 64; /* every branch within D = 16 */
    }
}

/* Forward (f64 and f32, strided output, in place) and backward by
 * differences, for one configuration. */
static void forward_case(int style, int scaling, int64_t D, int64_t rd,
                         int posmode) {
    const int64_t B = 2, H = 3, L = 5, n = B * H * L * D;
    attn_rope r;
    setup(&r, style, scaling, rd);
    int64_t pos[2 * 5];
    int64_t npos = 0;
    if (posmode == 1) {
        npos = L;
        for (int64_t l = 0; l < L; l++) pos[l] = 100 + 3 * l; /* offset */
    } else if (posmode == 2) {
        npos = B * L;
        for (int64_t i = 0; i < B * L; i++) pos[i] = 7 * i + (i % 3);
    }
    const int64_t *pp = posmode ? pos : NULL;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    float *xf = malloc(n * sizeof *xf), *yf = malloc(n * sizeof *yf);
    for (int64_t i = 0; i < n; i++) {
        x[i] = urand();
        xf[i] = (float)x[i];
    }
    attn_tensor X = attn_tensor_4d(x, ATTN_F64, B, H, L, D);
    attn_tensor Y = attn_tensor_4d(y, ATTN_F64, B, H, L, D);
    CHECK_STATUS(attn_rope_forward(&r, &X, pp, npos, &Y, 2), ATTN_OK);
    /* f32 in, f32 out written through a batch-first (B, L, H, D) view */
    attn_tensor XF = attn_tensor_4d(xf, ATTN_F32, B, H, L, D);
    attn_tensor YF = attn_tensor_bthd(yf, ATTN_F32, B, L, H, D);
    CHECK_STATUS(attn_rope_forward(&r, &XF, pp, npos, &YF, 3), ATTN_OK);
    double err = 0, errf = 0;
    double want[64];
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t l = 0; l < L; l++) {
                const double *row = x + ((b * H + h) * L + l) * D;
                ref_row(&r, D, (double)pos_of(pp, npos, B, L, b, l), row, want);
                for (int64_t d = 0; d < D; d++) {
                    double e = fabs(y[((b * H + h) * L + l) * D + d] - want[d]);
                    double ef =
                        fabs(yf[((b * L + l) * H + h) * D + d] - want[d]);
                    err = e > err ? e : err;
                    errf = ef > errf ? ef : errf;
                }
            }
    CHECK_MSG(err < 1e-12, "style %d scaling %d D %lld rd %lld pos %d: %g",
              style, scaling, (long long)D, (long long)rd, posmode, err);
    CHECK_MSG(errf < 1e-6, "f32: style %d scaling %d: %g", style, scaling,
              errf);
    /* in place, and bitwise the same on 1, 2, 3 threads */
    float *ip = malloc(n * sizeof *ip);
    for (int t = 1; t <= 3; t++) {
        memcpy(ip, xf, n * sizeof *ip);
        attn_tensor IP = attn_tensor_4d(ip, ATTN_F32, B, H, L, D);
        CHECK_STATUS(attn_rope_forward(&r, &IP, pp, npos, &IP, t), ATTN_OK);
        int same = 1;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t l = 0; l < L; l++)
                    for (int64_t d = 0; d < D; d++)
                        same &= ip[((b * H + h) * L + l) * D + d] ==
                                yf[((b * L + l) * H + h) * D + d];
        CHECK_MSG(same, "in place, %d threads", t);
    }
    /* backward: dx += R^T dy against central differences of
     * loss = sum(w * rope(x)) */
    double *w = malloc(n * sizeof *w), *dx = malloc(n * sizeof *dx);
    for (int64_t i = 0; i < n; i++) {
        w[i] = urand();
        dx[i] = 0.5; /* added into */
    }
    attn_tensor W = attn_tensor_4d(w, ATTN_F64, B, H, L, D);
    attn_tensor DX = attn_tensor_4d(dx, ATTN_F64, B, H, L, D);
    CHECK_STATUS(attn_rope_backward(&r, &W, pp, npos, &DX, 2), ATTN_OK);
    double gerr = 0;
    for (int64_t i = 0; i < n; i += 3) {
        double keep = x[i], lp = 0, lm = 0, hstep = 1e-6;
        x[i] = keep + hstep;
        attn_rope_forward(&r, &X, pp, npos, &Y, 1);
        for (int64_t j = 0; j < n; j++) lp += w[j] * y[j];
        x[i] = keep - hstep;
        attn_rope_forward(&r, &X, pp, npos, &Y, 1);
        for (int64_t j = 0; j < n; j++) lm += w[j] * y[j];
        x[i] = keep;
        double e = fabs((lp - lm) / (2 * hstep) - (dx[i] - 0.5));
        gerr = e > gerr ? e : gerr;
    }
    CHECK_MSG(gerr < 1e-7, "backward vs differences: %g (style %d scaling %d)",
              gerr, style, scaling);
    free(x);
    free(y);
    free(xf);
    free(yf);
    free(ip);
    free(w);
    free(dx);
}

/* Attention with opts.rope equals attention on inputs rotated by hand;
 * the backward's dq, dk agree with differences (f64 reference) and the
 * flash backward agrees with the reference. */
static void sdpa_case(int style, int64_t Lq, int64_t Lk, int use_pos) {
    const int64_t B = 2, H = 4, Hkv = 2, D = 8;
    attn_rope r;
    setup(&r, style, ATTN_ROPE_SCALING_NONE, 0);
    r.theta = 500;
    const int64_t nq = B * H * Lq * D, nk = B * Hkv * Lk * D;
    double *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k),
           *v = malloc(nk * sizeof *v);
    double *qr = malloc(nq * sizeof *qr), *kr = malloc(nk * sizeof *kr);
    for (int64_t i = 0; i < nq; i++) q[i] = urand();
    for (int64_t i = 0; i < nk; i++) {
        k[i] = urand();
        v[i] = urand();
    }
    int64_t qpos[64], kpos[64];
    for (int64_t i = 0; i < Lq; i++) qpos[i] = 40 + 2 * i;
    for (int64_t j = 0; j < Lk; j++) kpos[j] = 37 + 2 * j;
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.causal = 1;
    o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    o.rope = &r;
    if (use_pos) {
        o.rope_q_positions = qpos;
        o.n_rope_q_positions = Lq;
        o.rope_k_positions = kpos;
        o.n_rope_k_positions = Lk;
    }
    /* rotation by hand: default positions are c = i + Lk - Lq and j */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                double p = use_pos ? (double)qpos[i] : (double)(i + Lk - Lq);
                ref_row(&r, D, p, q + ((b * H + h) * Lq + i) * D,
                        qr + ((b * H + h) * Lq + i) * D);
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t j = 0; j < Lk; j++)
                ref_row(&r, D, use_pos ? (double)kpos[j] : (double)j,
                        k + ((b * Hkv + h) * Lk + j) * D,
                        kr + ((b * Hkv + h) * Lk + j) * D);
    double *out = malloc(nq * sizeof *out), *want = malloc(nq * sizeof *want);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F64, B, H, Lq, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor QR = attn_tensor_4d(qr, ATTN_F64, B, H, Lq, D);
    attn_tensor KR = attn_tensor_4d(kr, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor O = attn_tensor_4d(out, ATTN_F64, B, H, Lq, D);
    attn_tensor OW = attn_tensor_4d(want, ATTN_F64, B, H, Lq, D);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL), ATTN_OK);
    attn_sdpa_opts plain = o;
    plain.rope = NULL;
    CHECK_STATUS(attn_sdpa_forward(&QR, &KR, &V, &plain, &OW, NULL, NULL),
                 ATTN_OK);
    double err = 0;
    for (int64_t i = 0; i < nq; i++) {
        double e = fabs(out[i] - want[i]);
        err = e > err ? e : err;
    }
    CHECK_MSG(err < 1e-12, "sdpa rope vs by hand: %g", err);

    /* backward in f64 through the reference against differences of
     * loss = sum(g * out) */
    double *g = malloc(nq * sizeof *g), *dq = calloc(nq, sizeof *dq),
           *dk = calloc(nk, sizeof *dk), *dv = calloc(nk, sizeof *dv);
    for (int64_t i = 0; i < nq; i++) g[i] = urand();
    attn_tensor G = attn_tensor_4d(g, ATTN_F64, B, H, Lq, D);
    attn_tensor DQ = attn_tensor_4d(dq, ATTN_F64, B, H, Lq, D);
    attn_tensor DK = attn_tensor_4d(dk, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor DV = attn_tensor_4d(dv, ATTN_F64, B, Hkv, Lk, D);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &K, &V, &O, NULL, &G, &o, &DQ, &DK, &DV, NULL),
        ATTN_OK);
    double gerr = 0, gmax = 0;
    for (int which = 0; which < 2; which++) {
        double *x = which ? k : q, *dx = which ? dk : dq;
        int64_t n = which ? nk : nq;
        for (int64_t i = 0; i < n; i += 5) {
            double keep = x[i], lp = 0, lm = 0, hs = 1e-6;
            x[i] = keep + hs;
            attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL);
            for (int64_t j = 0; j < nq; j++) lp += g[j] * out[j];
            x[i] = keep - hs;
            attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL);
            for (int64_t j = 0; j < nq; j++) lm += g[j] * out[j];
            x[i] = keep;
            double fd = (lp - lm) / (2 * hs), e = fabs(fd - dx[i]);
            gerr = e > gerr ? e : gerr;
            gmax = fabs(fd) > gmax ? fabs(fd) : gmax;
        }
    }
    CHECK_MSG(gerr < 1e-6 * (1 + gmax), "sdpa rope backward: %g (max %g)", gerr,
              gmax);

    /* flash f32 forward and backward against the f64 reference */
    float *qf = malloc(nq * sizeof *qf), *kf = malloc(nk * sizeof *kf),
          *vf = malloc(nk * sizeof *vf), *of = malloc(nq * sizeof *of),
          *gf = malloc(nq * sizeof *gf), *dqf = calloc(nq, sizeof *dqf),
          *dkf = calloc(nk, sizeof *dkf), *dvf = calloc(nk, sizeof *dvf),
          *lse = malloc(B * H * Lq * sizeof *lse);
    for (int64_t i = 0; i < nq; i++) {
        qf[i] = (float)q[i];
        gf[i] = (float)g[i];
    }
    for (int64_t i = 0; i < nk; i++) {
        kf[i] = (float)k[i];
        vf[i] = (float)v[i];
    }
    attn_tensor QF = attn_tensor_4d(qf, ATTN_F32, B, H, Lq, D);
    attn_tensor KF = attn_tensor_4d(kf, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor VF = attn_tensor_4d(vf, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor OF = attn_tensor_4d(of, ATTN_F32, B, H, Lq, D);
    attn_tensor GF = attn_tensor_4d(gf, ATTN_F32, B, H, Lq, D);
    attn_tensor DQF = attn_tensor_4d(dqf, ATTN_F32, B, H, Lq, D);
    attn_tensor DKF = attn_tensor_4d(dkf, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor DVF = attn_tensor_4d(dvf, ATTN_F32, B, Hkv, Lk, D);
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(attn_sdpa_forward(&QF, &KF, &VF, &o, &OF, NULL, lse), ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&QF, &KF, &VF, &OF, lse, &GF, &o, &DQF,
                                    &DKF, &DVF, NULL),
                 ATTN_OK);
    double fe = 0, ge = 0;
    for (int64_t i = 0; i < nq; i++) {
        fe = fmax(fe, fabs(of[i] - want[i]));
        ge = fmax(ge, fabs(dqf[i] - dq[i]));
    }
    for (int64_t i = 0; i < nk; i++) ge = fmax(ge, fabs(dkf[i] - dk[i]));
    CHECK_MSG(fe < 1e-5, "flash forward with rope: %g", fe);
    CHECK_MSG(ge < 1e-4, "flash backward with rope: %g", ge);
    free(q), free(k), free(v), free(qr), free(kr), free(out), free(want);
    free(g), free(dq), free(dk), free(dv);
    free(qf), free(kf), free(vf), free(of), free(gf), free(dqf), free(dkf);
    free(dvf), free(lse);
}

/* The cache stores keys rotated at their absolute positions: a prompt
 * then steps, one at a time, equal full attention with rope; truncate
 * and reorder keep it right. */
static void cache_case(int style, attn_dtype dt) {
    const int64_t H = 4, Hkv = 2, D = 16, P = 6, S = 4, L = P + S;
    attn_rope r;
    setup(&r, style, ATTN_ROPE_SCALING_LLAMA3, 12);
    float *q = malloc(H * L * D * sizeof *q), *k = malloc(Hkv * L * D * 4),
          *v = malloc(Hkv * L * D * 4), *full = malloc(H * L * D * 4),
          *step = malloc(H * L * D * 4);
    for (int64_t i = 0; i < H * L * D; i++) q[i] = (float)urand();
    for (int64_t i = 0; i < Hkv * L * D; i++) {
        k[i] = (float)urand();
        v[i] = (float)urand();
    }
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, H, L, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, Hkv, L, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, Hkv, L, D);
    attn_tensor F = attn_tensor_4d(full, ATTN_F32, 1, H, L, D);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.causal = 1;
    o.rope = &r;
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &F, NULL, NULL), ATTN_OK);

    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = 1;
    cc.kv_heads = Hkv;
    cc.capacity = L;
    cc.head_dim = D;
    cc.dtype = dt;
    attn_kv_cache *c = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cc, &c), ATTN_OK);
    if (!c) return;
    CHECK_STATUS(attn_kv_cache_set_rope(c, &r), ATTN_OK);
    attn_rope got;
    int has = 0;
    CHECK_STATUS(attn_kv_cache_get_rope(c, &got, &has), ATTN_OK);
    CHECK(has == 1 && got.rotary_dim == 12);
    attn_sdpa_opts oc;
    attn_sdpa_opts_init(&oc);
    oc.mask.causal = 1;
    oc.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    /* prompt: rows 0 .. P-1; then a wrong step that is rolled back */
    attn_tensor kp = K, vp = V, qp = Q,
                op = attn_tensor_4d(step, ATTN_F32, 1, H, L, D);
    kp.shape[2] = vp.shape[2] = qp.shape[2] = op.shape[2] = P;
    CHECK_STATUS(attn_kv_cache_append(c, &kp, &vp, NULL), ATTN_OK);
    CHECK_STATUS(attn_sdpa_cached(&qp, c, &oc, &op, NULL), ATTN_OK);
    attn_tensor k1 = K, v1 = V;
    k1.shape[2] = v1.shape[2] = 1;
    k1.data = k + 1 * D; /* a row that is not the next one */
    CHECK_STATUS(attn_kv_cache_append(c, &k1, &v1, NULL), ATTN_OK);
    int64_t keep = P;
    CHECK_STATUS(attn_kv_cache_truncate(c, &keep), ATTN_OK);
    int64_t idx = 0;
    CHECK_STATUS(attn_kv_cache_reorder(c, &idx), ATTN_OK);
    for (int64_t t = P; t < L; t++) {
        attn_tensor ks = K, vs = V, qs = Q, os = op;
        ks.shape[2] = vs.shape[2] = qs.shape[2] = os.shape[2] = 1;
        ks.data = k + t * D;
        vs.data = v + t * D;
        qs.data = q + t * D;
        os.data = step + t * D;
        CHECK_STATUS(attn_kv_cache_append(c, &ks, &vs, NULL), ATTN_OK);
        CHECK_STATUS(attn_sdpa_cached(&qs, c, &oc, &os, NULL), ATTN_OK);
    }
    double tol = dt == ATTN_F32 ? 1e-5 : dt == ATTN_Q8 ? 3e-2 : 2e-2;
    double err = 0;
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < L; t++)
            for (int64_t d = 0; d < D; d++) {
                int64_t i = (h * L + t) * D + d;
                err = fmax(err, fabs(full[i] - step[i]));
            }
    CHECK_MSG(err < tol, "cache with rope (%s, style %d): %g",
              attn_dtype_name(dt), style, err);
    /* opts.rope over a cache is refused; set_rope on a full cache too */
    oc.rope = &r;
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &oc, &F, NULL), ATTN_E_INVALID);
    CHECK_STATUS(attn_kv_cache_set_rope(c, &r), ATTN_E_INVALID);
    attn_kv_cache_free(c);
    free(q), free(k), free(v), free(full), free(step);
}

static void bad_input(void) {
    float x[2 * 6] = {0};
    attn_tensor X = attn_tensor_4d(x, ATTN_F32, 1, 1, 2, 6);
    attn_rope r;
    attn_rope_init(&r);
    r.rotary_dim = 3;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "rotary_dim 3") != NULL);
    r.rotary_dim = 8;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    attn_rope_init(&r);
    r.theta = 1;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    r.theta = NAN;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    attn_rope_init(&r);
    r.style = 7;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    attn_rope_init(&r);
    r.scaling = ATTN_ROPE_SCALING_LLAMA3;
    r.high_freq_factor = 0.5;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    r.scaling = 9;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    attn_rope_init(&r);
    int64_t neg[2] = {0, -1}, three[3] = {0, 1, 2};
    CHECK_STATUS(attn_rope_forward(&r, &X, neg, 2, &X, 1), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "positions[1] = -1") != NULL);
    CHECK_STATUS(attn_rope_forward(&r, &X, three, 3, &X, 1), ATTN_E_SHAPE);
    x[3] = NAN;
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &X, 1), ATTN_E_NONFINITE);
    x[3] = 0;
    uint8_t u[12] = {0};
    attn_tensor U = attn_tensor_4d(u, ATTN_U8, 1, 1, 2, 6);
    CHECK_STATUS(attn_rope_forward(&r, &U, NULL, 0, &X, 1), ATTN_E_DTYPE);
    CHECK_STATUS(attn_rope_forward(NULL, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    float y[12];
    attn_tensor Y = attn_tensor_4d(y, ATTN_F32, 1, 1, 3, 4);
    CHECK_STATUS(attn_rope_forward(&r, &X, NULL, 0, &Y, 1), ATTN_E_SHAPE);
    CHECK_STATUS(attn_rope_backward(&r, &X, NULL, 0, &X, 1), ATTN_E_INVALID);
    double f[3];
    CHECK_STATUS(attn_rope_inv_freq(&r, 6, f, 3), ATTN_OK);
    CHECK_NEAR(f[1], pow(10000.0, -2.0 / 6.0), 1e-15);
    CHECK_STATUS(attn_rope_inv_freq(&r, 6, f, 2), ATTN_E_SHAPE);
    /* a bad rope in sdpa opts */
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    r.rotary_dim = 5;
    o.rope = &r;
    float out[12];
    attn_tensor O = attn_tensor_4d(out, ATTN_F32, 1, 1, 2, 6);
    CHECK_STATUS(attn_sdpa_forward(&X, &X, &X, &o, &O, NULL, NULL),
                 ATTN_E_INVALID);
}

int main(void) {
    const int styles[2] = {ATTN_ROPE_NEOX, ATTN_ROPE_INTERLEAVED};
    const int scalings[3] = {ATTN_ROPE_SCALING_NONE, ATTN_ROPE_SCALING_LINEAR,
                             ATTN_ROPE_SCALING_LLAMA3};
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 3; c++)
            for (int pm = 0; pm < 3; pm++) {
                forward_case(styles[s], scalings[c], 16, 0, pm);
                forward_case(styles[s], scalings[c], 16, 6, pm); /* partial */
                forward_case(styles[s], scalings[c], 3, 2, pm);  /* odd D */
            }
    for (int s = 0; s < 2; s++) {
        sdpa_case(styles[s], 5, 5, 0);
        sdpa_case(styles[s], 3, 7, 0); /* Lq < Lk, bottom-right positions */
        sdpa_case(styles[s], 3, 7, 1);
        cache_case(styles[s], ATTN_F32);
        cache_case(styles[s], ATTN_BF16);
        cache_case(styles[s], ATTN_Q8);
    }
    bad_input();
    return check_done("test_rope");
}
