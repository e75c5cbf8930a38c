/* The built-in score modifiers and documents of attn_mask (soft-capping,
 * ALiBi, attention sinks, document ids): the flash forward and backward
 * against the double reference (output, lse, weights, dQ, dK, dV, dSinks)
 * on odd sizes, Lq != Lk, GQA and combinations with causal / window /
 * padding; finite-difference gradient checks of the reference in double;
 * ALiBi slopes; a direct formula check of one score; the tile classifier
 * against attn_mask_visible with documents; bitwise equality over thread
 * counts; and the errors for bad input. */
#include "attn.h"
#include "attn_cache.h"
#include "check.h"
#include "mask.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern int64_t attn__flash_bq_override, attn__flash_bk_override;

typedef struct {
    int B, H, Hkv, Lq, Lk, D;
    double softcap;
    int alibi, given_slopes, sinks, docs, causal, window, br, lengths;
} mcase;

typedef struct {
    mcase c;
    double *q, *k, *v, *g; /* f64 data */
    float *qf, *kf, *vf, *gf;
    double slopes[16], sinks[16];
    int64_t *dq_ids, *dk_ids, qlen[4], klen[4];
    attn_sdpa_opts opts;
} prob;

static void *zalloc(size_t n) { return calloc(1, n ? n : 1); }

/* documents of random lengths 1..7 along each entry: ids 0, 0, 1, 1, 1, ... */
static void make_docs(int64_t *ids, int B, int L, unsigned long long *s) {
    for (int b = 0; b < B; b++) {
        int64_t id = 0, left = 1 + (int64_t)((test_rand(s) + 1.0) * 3.4);
        for (int i = 0; i < L; i++) {
            if (left-- == 0) {
                id += 1 + (test_rand(s) > 0.6); /* ids may skip a value */
                left = (int64_t)((test_rand(s) + 1.0) * 3.4);
            }
            ids[b * L + i] = id;
        }
    }
}

static void prob_make(prob *p, const mcase *c, unsigned long long seed) {
    memset(p, 0, sizeof *p);
    p->c = *c;
    size_t nq = (size_t)c->B * c->H * c->Lq * c->D;
    size_t nk = (size_t)c->B * c->Hkv * c->Lk * c->D;
    p->q = zalloc(nq * 8);
    p->g = zalloc(nq * 8);
    p->k = zalloc(nk * 8);
    p->v = zalloc(nk * 8);
    p->qf = zalloc(nq * 4);
    p->gf = zalloc(nq * 4);
    p->kf = zalloc(nk * 4);
    p->vf = zalloc(nk * 4);
    unsigned long long s = seed;
    /* scores of magnitude a few units so soft-capping at 1..3 bites */
    for (size_t i = 0; i < nq; i++) p->qf[i] = (float)(2.0 * test_rand(&s));
    for (size_t i = 0; i < nk; i++) p->kf[i] = (float)(2.0 * test_rand(&s));
    for (size_t i = 0; i < nk; i++) p->vf[i] = (float)test_rand(&s);
    for (size_t i = 0; i < nq; i++) p->gf[i] = (float)test_rand(&s);
    for (size_t i = 0; i < nq; i++) {
        p->q[i] = p->qf[i];
        p->g[i] = p->gf[i];
    }
    for (size_t i = 0; i < nk; i++) {
        p->k[i] = p->kf[i];
        p->v[i] = p->vf[i];
    }
    attn_sdpa_opts_init(&p->opts);
    attn_mask *m = &p->opts.mask;
    m->causal = c->causal;
    m->align = c->br ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
    if (c->window) m->window_left = c->window;
    m->softcap = c->softcap;
    m->alibi = c->alibi;
    for (int h = 0; h < c->H; h++) {
        p->slopes[h] = 0.05 + 0.3 * (test_rand(&s) + 1.0);
        p->sinks[h] = 1.5 * test_rand(&s);
    }
    if (c->given_slopes) {
        m->alibi_slopes = p->slopes;
        m->n_alibi_slopes = c->H;
    }
    if (c->sinks) {
        m->sinks = p->sinks;
        m->n_sinks = c->H;
    }
    if (c->docs) {
        p->dq_ids = zalloc((size_t)c->B * c->Lq * 8);
        make_docs(p->dq_ids, c->B, c->Lq, &s);
        m->doc_q = p->dq_ids;
        m->n_doc_q = (int64_t)c->B * c->Lq;
        if (c->Lq != c->Lk || c->docs == 2) {
            p->dk_ids = zalloc((size_t)c->B * c->Lk * 8);
            make_docs(p->dk_ids, c->B, c->Lk, &s);
            m->doc_k = p->dk_ids;
            m->n_doc_k = (int64_t)c->B * c->Lk;
        }
    }
    if (c->lengths) {
        for (int b = 0; b < c->B; b++) {
            p->qlen[b] = c->Lq - b % 2;
            p->klen[b] = c->Lk > 2 ? c->Lk - (b + 1) % 3 : c->Lk;
        }
        m->query_lengths = p->qlen;
        m->key_lengths = p->klen;
    }
}

static void prob_free(prob *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->g);
    free(p->qf);
    free(p->kf);
    free(p->vf);
    free(p->gf);
    free(p->dq_ids);
    free(p->dk_ids);
}

static double maxabs_diff_fd(const float *a, const double *b, size_t n,
                             double *scale) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN propagates as a failure */
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    *scale = s;
    return e;
}

/* Reference (f64) vs flash (f32): forward out, lse and weights; backward
 * dQ, dK, dV and dSinks. */
static void compare(const mcase *c, unsigned long long seed) {
    prob p;
    prob_make(&p, c, seed);
    const int B = c->B, H = c->H, Hkv = c->Hkv, Lq = c->Lq, Lk = c->Lk,
              D = c->D;
    size_t no = (size_t)B * H * Lq * D, nk = (size_t)B * Hkv * Lk * D;
    size_t nw = (size_t)B * H * Lq * Lk, nl = (size_t)B * H * Lq;
    double *od = zalloc(no * 8), *wd = zalloc(nw * 8);
    double *dqd = zalloc(no * 8), *dkd = zalloc(nk * 8), *dvd = zalloc(nk * 8);
    float *of = zalloc(no * 4), *wf = zalloc(nw * 4), *lf = zalloc(nl * 4);
    float *lr = zalloc(nl * 4);
    float *dqf = zalloc(no * 4), *dkf = zalloc(nk * 4), *dvf = zalloc(nk * 4);
    double gs_ref[16] = {0}, gs_fl[16] = {0};
    attn_tensor Qd = attn_tensor_4d(p.q, ATTN_F64, B, H, Lq, D);
    attn_tensor Kd = attn_tensor_4d(p.k, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor Vd = attn_tensor_4d(p.v, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor Gd = attn_tensor_4d(p.g, ATTN_F64, B, H, Lq, D);
    attn_tensor Od = attn_tensor_4d(od, ATTN_F64, B, H, Lq, D);
    attn_tensor Wd = attn_tensor_4d(wd, ATTN_F64, B, H, Lq, Lk);
    attn_tensor dQd = attn_tensor_4d(dqd, ATTN_F64, B, H, Lq, D);
    attn_tensor dKd = attn_tensor_4d(dkd, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor dVd = attn_tensor_4d(dvd, ATTN_F64, B, Hkv, Lk, D);
    attn_tensor Qf = attn_tensor_4d(p.qf, ATTN_F32, B, H, Lq, D);
    attn_tensor Kf = attn_tensor_4d(p.kf, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor Vf = attn_tensor_4d(p.vf, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor Gf = attn_tensor_4d(p.gf, ATTN_F32, B, H, Lq, D);
    attn_tensor Of = attn_tensor_4d(of, ATTN_F32, B, H, Lq, D);
    attn_tensor Wf = attn_tensor_4d(wf, ATTN_F32, B, H, Lq, Lk);
    attn_tensor dQf = attn_tensor_4d(dqf, ATTN_F32, B, H, Lq, D);
    attn_tensor dKf = attn_tensor_4d(dkf, ATTN_F32, B, Hkv, Lk, D);
    attn_tensor dVf = attn_tensor_4d(dvf, ATTN_F32, B, Hkv, Lk, D);

    attn_sdpa_opts ro = p.opts, fo = p.opts;
    ro.impl = ATTN_IMPL_REF;
    fo.impl = ATTN_IMPL_FLASH;
    if (c->sinks) {
        ro.mask.sinks_grad = gs_ref;
        fo.mask.sinks_grad = gs_fl;
    }
    CHECK_STATUS(attn_sdpa_forward(&Qd, &Kd, &Vd, &ro, &Od, &Wd, lr), ATTN_OK);
    CHECK_STATUS(attn_sdpa_forward(&Qf, &Kf, &Vf, &fo, &Of, &Wf, lf), ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&Qd, &Kd, &Vd, &Od, NULL, &Gd, &ro, &dQd,
                                    &dKd, &dVd, NULL),
                 ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&Qf, &Kf, &Vf, &Of, lf, &Gf, &fo, &dQf,
                                    &dKf, &dVf, NULL),
                 ATTN_OK);
    double sc, e;
    const double tol = 2e-5 * sqrt((double)Lk);
    e = maxabs_diff_fd(of, od, no, &sc);
    CHECK_MSG(e <= tol * (1 + sc),
              "out err %g (case L %d/%d cap %g alibi %d sinks %d docs %d)", e,
              Lq, Lk, c->softcap, c->alibi, c->sinks, c->docs);
    e = maxabs_diff_fd(wf, wd, nw, &sc);
    CHECK_MSG(e <= tol, "weights err %g", e);
    double el = 0;
    for (size_t i = 0; i < nl; i++) {
        double d = isinf(lr[i]) && lr[i] == lf[i] ? 0 : fabs(lr[i] - lf[i]);
        if (!(d <= el)) el = d;
    }
    CHECK_MSG(el <= 1e-4 * (1 + sqrt((double)Lk)), "lse err %g", el);
    e = maxabs_diff_fd(dqf, dqd, no, &sc);
    CHECK_MSG(e <= 5 * tol * (1 + sc), "dq err %g (scale %g)", e, sc);
    e = maxabs_diff_fd(dkf, dkd, nk, &sc);
    CHECK_MSG(e <= 5 * tol * (1 + sc), "dk err %g (scale %g)", e, sc);
    e = maxabs_diff_fd(dvf, dvd, nk, &sc);
    CHECK_MSG(e <= 5 * tol * (1 + sc), "dv err %g (scale %g)", e, sc);
    for (int h = 0; h < H && c->sinks; h++)
        CHECK_MSG(fabs(gs_ref[h] - gs_fl[h]) <=
                      1e-4 * (1 + fabs(gs_ref[h])) * sqrt((double)Lq * B),
                  "dsink[%d] ref %g flash %g", h, gs_ref[h], gs_fl[h]);
    free(od);
    free(wd);
    free(dqd);
    free(dkd);
    free(dvd);
    free(of);
    free(wf);
    free(lf);
    free(lr);
    free(dqf);
    free(dkf);
    free(dvf);
    prob_free(&p);
}

static void test_sweep(void) {
    static const int sizes[][2] = {{1, 1},  {3, 3},     {17, 17}, {17, 5},
                                   {5, 17}, {129, 129}, {33, 70}};
    unsigned long long seed = 11;
    int n = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 10; combo++) {
            mcase c = {.B = 2,
                       .H = 4,
                       .Hkv = combo % 3 == 0 ? 2 : 4,
                       .Lq = sizes[s][0],
                       .Lk = sizes[s][1],
                       .D = combo % 2 ? 8 : 5};
            switch (combo) {
            case 0: c.softcap = 2.0; break;
            case 1:
                c.alibi = ATTN_ALIBI_CAUSAL;
                c.causal = 1;
                break;
            case 2:
                c.alibi = ATTN_ALIBI_SYMMETRIC;
                c.given_slopes = 1;
                break;
            case 3: c.sinks = 1; break;
            case 4:
                c.docs = 1;
                c.causal = 1;
                break;
            case 5:
                c.docs = 2;
                c.window = 4;
                c.sinks = 1;
                break;
            case 6: /* everything at once */
                c.softcap = 1.5;
                c.alibi = ATTN_ALIBI_CAUSAL;
                c.sinks = 1;
                c.docs = 1;
                c.causal = 1;
                c.window = 6;
                c.br = 1;
                break;
            case 7:
                c.softcap = 3.0;
                c.sinks = 1;
                c.causal = 1;
                c.lengths = 1;
                break;
            case 8:
                c.alibi = ATTN_ALIBI_SYMMETRIC;
                c.docs = 1;
                c.lengths = 1;
                break;
            case 9:
                c.softcap = 1.0;
                c.alibi = ATTN_ALIBI_CAUSAL;
                c.br = 1;
                c.causal = 1;
                c.H = 3;
                c.Hkv = 1;
                c.sinks = 1;
                break;
            }
            compare(&c, seed++);
            n++;
        }
    /* small tiles: the classifier skips whole tiles across documents */
    attn__flash_bq_override = 16;
    attn__flash_bk_override = 16;
    mcase t1 = {.B = 2,
                .H = 2,
                .Hkv = 1,
                .Lq = 100,
                .Lk = 100,
                .D = 8,
                .docs = 1,
                .causal = 1,
                .softcap = 2,
                .sinks = 1};
    compare(&t1, 99);
    mcase t2 = {.B = 1,
                .H = 2,
                .Hkv = 2,
                .Lq = 70,
                .Lk = 90,
                .D = 4,
                .docs = 1,
                .alibi = ATTN_ALIBI_SYMMETRIC};
    compare(&t2, 98);
    attn__flash_bq_override = 0;
    attn__flash_bk_override = 0;
    /* several backward tiles (128) */
    mcase t3 = {.B = 1,
                .H = 2,
                .Hkv = 1,
                .Lq = 300,
                .Lk = 260,
                .D = 8,
                .docs = 1,
                .softcap = 2.5,
                .alibi = ATTN_ALIBI_CAUSAL,
                .sinks = 1,
                .causal = 1,
                .br = 1};
    compare(&t3, 97);
    printf("sweep: %d cases\n", n + 3);
}

/* ---- formulas ---------------------------------------------------------- */

static void test_slopes(void) {
    double s[12];
    CHECK_STATUS(attn_alibi_slopes(8, s), ATTN_OK);
    for (int k = 0; k < 8; k++) CHECK_NEAR(s[k], pow(2.0, -(k + 1)), 1e-15);
    /* H = 12: the 8 of H = 8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 */
    CHECK_STATUS(attn_alibi_slopes(12, s), ATTN_OK);
    for (int k = 0; k < 4; k++) CHECK_NEAR(s[8 + k], pow(2.0, -0.5 - k), 1e-15);
    CHECK_STATUS(attn_alibi_slopes(0, s), ATTN_E_INVALID);
    CHECK_STATUS(attn_alibi_slopes(3, NULL), ATTN_E_INVALID);
}

/* One query, two keys, by hand: weights from the documented formula. */
static void test_formula(void) {
    double q[2] = {1.0, 2.0}, k[4] = {3.0, -1.0, 0.5, 4.0}, v[4] = {1, 0, 0, 1};
    double o[2], w[2], sink = 0.7, slope = 0.25, cap = 2.0;
    attn_tensor Q = attn_tensor_4d(q, ATTN_F64, 1, 1, 1, 2);
    attn_tensor K = attn_tensor_4d(k, ATTN_F64, 1, 1, 2, 2);
    attn_tensor V = attn_tensor_4d(v, ATTN_F64, 1, 1, 2, 2);
    attn_tensor O = attn_tensor_4d(o, ATTN_F64, 1, 1, 1, 2);
    attn_tensor W = attn_tensor_4d(w, ATTN_F64, 1, 1, 1, 2);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.impl = ATTN_IMPL_REF;
    op.scale = 0.5;
    op.mask.softcap = cap;
    op.mask.alibi = ATTN_ALIBI_SYMMETRIC;
    op.mask.alibi_slopes = &slope;
    op.mask.n_alibi_slopes = 1;
    op.mask.sinks = &sink;
    op.mask.n_sinks = 1;
    float lse;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &op, &O, &W, &lse), ATTN_OK);
    /* query 0 (c = 0): keys 0 and 1 at distances 0 and 1 */
    double x0 = cap * tanh(0.5 * (3.0 - 2.0) / cap);
    double x1 = cap * tanh(0.5 * (0.5 + 8.0) / cap) - slope * 1.0;
    double den = exp(sink) + exp(x0) + exp(x1);
    CHECK_NEAR(w[0], exp(x0) / den, 1e-14);
    CHECK_NEAR(w[1], exp(x1) / den, 1e-14);
    CHECK_NEAR(lse, log(den), 1e-6);
}

/* ---- gradient checks in double ------------------------------------------ */

/* loss = sum(g * out); central differences of q, k and the sinks against
 * the reference backward, all in f64. */
static void test_gradcheck(int with_cap, int with_sinks) {
    mcase c = {.B = 1,
               .H = 2,
               .Hkv = 1,
               .Lq = 5,
               .Lk = 7,
               .D = 3,
               .softcap = with_cap ? 1.5 : 0,
               .sinks = with_sinks,
               .alibi = ATTN_ALIBI_CAUSAL,
               .causal = 0,
               .docs = 1};
    prob p;
    prob_make(&p, &c, 1234 + with_cap * 2 + with_sinks);
    attn_sdpa_opts o = p.opts;
    o.impl = ATTN_IMPL_REF;
    const int nq = 2 * 5 * 3, nk = 7 * 3;
    double out[2 * 5 * 3], dq[2 * 5 * 3] = {0}, dk[7 * 3] = {0},
                                      dv[7 * 3] = {0};
    double gs[2] = {0};
    attn_tensor Q = attn_tensor_4d(p.q, ATTN_F64, 1, 2, 5, 3);
    attn_tensor K = attn_tensor_4d(p.k, ATTN_F64, 1, 1, 7, 3);
    attn_tensor V = attn_tensor_4d(p.v, ATTN_F64, 1, 1, 7, 3);
    attn_tensor G = attn_tensor_4d(p.g, ATTN_F64, 1, 2, 5, 3);
    attn_tensor O = attn_tensor_4d(out, ATTN_F64, 1, 2, 5, 3);
    attn_tensor dQ = attn_tensor_4d(dq, ATTN_F64, 1, 2, 5, 3);
    attn_tensor dK = attn_tensor_4d(dk, ATTN_F64, 1, 1, 7, 3);
    attn_tensor dV = attn_tensor_4d(dv, ATTN_F64, 1, 1, 7, 3);
    if (with_sinks) o.mask.sinks_grad = gs;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL), ATTN_OK);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &K, &V, &O, NULL, &G, &o, &dQ, &dK, &dV, NULL),
        ATTN_OK);
    o.mask.sinks_grad = NULL;
#define LOSS(res)                                                              \
    do {                                                                       \
        attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL);                     \
        res = 0;                                                               \
        for (int t_ = 0; t_ < nq; t_++) res += p.g[t_] * out[t_];              \
    } while (0)
    const double h = 1e-6;
    double worst = 0;
    double *xs[3] = {p.q, p.k, p.sinks};
    const double *gr[3] = {dq, dk, gs};
    const int ns[3] = {nq, nk, with_sinks ? 2 : 0};
    for (int a = 0; a < 3; a++)
        for (int t = 0; t < ns[a]; t++) {
            double keep = xs[a][t], lp, lm;
            xs[a][t] = keep + h;
            LOSS(lp);
            xs[a][t] = keep - h;
            LOSS(lm);
            xs[a][t] = keep;
            double fd = (lp - lm) / (2 * h), e = fabs(fd - gr[a][t]);
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1e-7 * (1 + fabs(fd)),
                      "grad %d[%d]: fd %.10g analytic %.10g", a, t, fd,
                      gr[a][t]);
        }
#undef LOSS
    printf("gradcheck cap %d sinks %d: worst %.3g\n", with_cap, with_sinks,
           worst);
    prob_free(&p);
}

/* ---- the classifier with documents -------------------------------------- */

static void test_classify(void) {
    unsigned long long s = 5;
    for (int rep = 0; rep < 20; rep++) {
        const int Lq = 40, Lk = 40 + rep % 3 * 7;
        int64_t dq[40], dk[54];
        make_docs(dq, 1, Lq, &s);
        make_docs(dk, 1, Lk, &s);
        attn_mask m;
        attn_mask_init(&m);
        m.doc_q = dq;
        m.n_doc_q = Lq;
        m.doc_k = dk;
        m.n_doc_k = Lk;
        m.causal = rep % 2;
        CHECK_STATUS(attn_mask_check(&m, 1, 1, Lq, Lk), ATTN_OK);
        int bad = 0, empties = 0;
        for (int t = 4; t <= 12; t += 4)
            for (int i0 = 0; i0 < Lq; i0 += t)
                for (int j0 = 0; j0 < Lk; j0 += t) {
                    int i1 = i0 + t < Lq ? i0 + t : Lq,
                        j1 = j0 + t < Lk ? j0 + t : Lk;
                    attn__tile_class cls =
                        attn__mask_classify(&m, 0, 0, i0, i1, j0, j1, Lq, Lk);
                    int any = 0, all = 1;
                    for (int i = i0; i < i1; i++)
                        for (int j = j0; j < j1; j++) {
                            int vis = attn_mask_visible(&m, 0, 0, i, j, Lq, Lk);
                            any |= vis;
                            all &= vis;
                        }
                    /* sound: empty only if nothing is visible, full only
                     * if all is; exact for documents alone (with causal
                     * too, two partial parts may leave nothing) */
                    if (cls == ATTN__TILE_EMPTY && any) bad++;
                    if (!m.causal && (cls == ATTN__TILE_EMPTY) != !any) bad++;
                    if (cls == ATTN__TILE_FULL && !all) bad++;
                    if (!m.causal && all && cls != ATTN__TILE_FULL) bad++;
                    empties += cls == ATTN__TILE_EMPTY;
                }
        CHECK_MSG(bad == 0, "rep %d: %d misclassified tiles", rep, bad);
        CHECK(empties > 0);
    }
}

/* ---- threads ------------------------------------------------------------- */

static void test_threads(void) {
    mcase c = {.B = 2,
               .H = 4,
               .Hkv = 2,
               .Lq = 300,
               .Lk = 280,
               .D = 16,
               .softcap = 2,
               .alibi = ATTN_ALIBI_CAUSAL,
               .sinks = 1,
               .docs = 1,
               .causal = 1,
               .br = 1};
    prob p;
    prob_make(&p, &c, 77);
    size_t no = (size_t)2 * 4 * 300 * 16, nk = (size_t)2 * 2 * 280 * 16;
    float *ref[5] = {0};
    double gs0[4];
    for (int nt = 1; nt <= 3; nt++) {
        float *o = zalloc(no * 4), *l = zalloc((size_t)2 * 4 * 300 * 4);
        float *dq = zalloc(no * 4), *dk = zalloc(nk * 4), *dv = zalloc(nk * 4);
        double gs[4] = {0};
        attn_tensor Q = attn_tensor_4d(p.qf, ATTN_F32, 2, 4, 300, 16);
        attn_tensor K = attn_tensor_4d(p.kf, ATTN_F32, 2, 2, 280, 16);
        attn_tensor V = attn_tensor_4d(p.vf, ATTN_F32, 2, 2, 280, 16);
        attn_tensor G = attn_tensor_4d(p.gf, ATTN_F32, 2, 4, 300, 16);
        attn_tensor O = attn_tensor_4d(o, ATTN_F32, 2, 4, 300, 16);
        attn_tensor dQ = attn_tensor_4d(dq, ATTN_F32, 2, 4, 300, 16);
        attn_tensor dK = attn_tensor_4d(dk, ATTN_F32, 2, 2, 280, 16);
        attn_tensor dV = attn_tensor_4d(dv, ATTN_F32, 2, 2, 280, 16);
        attn_sdpa_opts op = p.opts;
        op.threads = nt;
        op.mask.sinks_grad = gs;
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &op, &O, NULL, l), ATTN_OK);
        CHECK_STATUS(
            attn_sdpa_backward(&Q, &K, &V, &O, l, &G, &op, &dQ, &dK, &dV, NULL),
            ATTN_OK);
        float *now[5] = {o, l, dq, dk, dv};
        size_t sz[5] = {no, (size_t)2 * 4 * 300, no, nk, nk};
        if (nt == 1) {
            memcpy(ref, now, sizeof now);
            memcpy(gs0, gs, sizeof gs);
        } else {
            for (int a = 0; a < 5; a++)
                CHECK_MSG(memcmp(ref[a], now[a], sz[a] * 4) == 0,
                          "array %d differs with %d threads", a, nt);
            CHECK(memcmp(gs0, gs, sizeof gs) == 0);
            for (int a = 0; a < 5; a++) free(now[a]);
        }
    }
    for (int a = 0; a < 5; a++) free(ref[a]);
    prob_free(&p);
}

/* ---- errors -------------------------------------------------------------- */

static void test_errors(void) {
    double sl[3] = {0.5, 0.25, 0.125}, bad[2] = {0.1, NAN};
    int64_t ids[6] = {0, 0, 1, 1, 0, 2};
    attn_mask m;
#define FRESH() attn_mask_init(&m)
    FRESH();
    m.softcap = -1;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "softcap") != NULL);
    FRESH();
    m.softcap = NAN;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_INVALID);
    FRESH();
    m.alibi = 7;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_INVALID);
    FRESH();
    m.alibi = ATTN_ALIBI_CAUSAL;
    m.alibi_slopes = sl;
    m.n_alibi_slopes = 3;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_SHAPE);
    CHECK(strstr(attn_last_error(), "alibi_slopes has 3 entries") != NULL);
    FRESH();
    m.alibi_slopes = sl;
    m.n_alibi_slopes = 2;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_INVALID);
    FRESH();
    m.sinks = sl;
    m.n_sinks = 3;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_SHAPE);
    CHECK(strstr(attn_last_error(), "sinks has 3 entries") != NULL);
    FRESH();
    m.sinks = bad;
    m.n_sinks = 2;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_NONFINITE);
    FRESH();
    m.sinks_grad = sl;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_INVALID);
    FRESH();
    m.doc_q = ids;
    m.n_doc_q = 6;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 6, 6), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "position 4 has id 0 after 1") != NULL);
    FRESH();
    m.doc_q = ids;
    m.n_doc_q = 4;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_SHAPE);
    FRESH();
    m.doc_q = ids;
    m.n_doc_q = 3;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 4), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "doc_k") != NULL);
    FRESH();
    m.doc_k = ids;
    m.n_doc_k = 3;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 3), ATTN_E_INVALID);
    FRESH();
    m.doc_q = ids;
    m.n_doc_q = 3;
    m.doc_k = ids + 2;
    m.n_doc_k = 4;
    CHECK_STATUS(attn_mask_check(&m, 1, 2, 3, 4), ATTN_E_INVALID); /* 1,1,0 */
#undef FRESH
    /* the flash backward serves dbias with a cap (against the reference:
     * test_user_mod.c) */
    float q[6] = {1, 2, 3, 4, 5, 6}, o[6], l[3], g[6] = {1, 1, 1, 1, 1, 1};
    float dq[6] = {0}, dk[6] = {0}, dv[6] = {0}, bias[9] = {0}, db[9] = {0};
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, 3, 2);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, 3, 2);
    attn_tensor G = attn_tensor_4d(g, ATTN_F32, 1, 1, 3, 2);
    attn_tensor dQ = attn_tensor_4d(dq, ATTN_F32, 1, 1, 3, 2);
    attn_tensor dK = attn_tensor_4d(dk, ATTN_F32, 1, 1, 3, 2);
    attn_tensor dV = attn_tensor_4d(dv, ATTN_F32, 1, 1, 3, 2);
    attn_tensor Bt = attn_tensor_4d(bias, ATTN_F32, 1, 1, 3, 3);
    attn_tensor dB = attn_tensor_4d(db, ATTN_F32, 1, 1, 3, 3);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.softcap = 5;
    op.mask.bias = &Bt;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &op, &O, NULL, l), ATTN_OK);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, l, &G, &op, &dQ, &dK, &dV, &dB),
        ATTN_OK);
    /* a row that sees nothing: output 0; lse -inf, or the sink with sinks */
    int64_t dqi[3] = {0, 1, 5}, dki[3] = {0, 1, 2};
    double sk = 0.3;
    attn_sdpa_opts_init(&op);
    op.mask.doc_q = dqi;
    op.mask.n_doc_q = 3;
    op.mask.doc_k = dki;
    op.mask.n_doc_k = 3;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &op, &O, NULL, l), ATTN_OK);
    CHECK(o[4] == 0 && o[5] == 0 && l[2] == -INFINITY && isfinite(l[1]));
    op.mask.sinks = &sk;
    op.mask.n_sinks = 1;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Q, &Q, &op, &O, NULL, l), ATTN_OK);
    CHECK(o[4] == 0 && o[5] == 0 && fabsf(l[2] - 0.3f) < 1e-6f);
    CHECK_STATUS(
        attn_sdpa_backward(&Q, &Q, &Q, &O, l, &G, &op, &dQ, &dK, &dV, NULL),
        ATTN_OK);
    for (int t = 0; t < 6; t++) CHECK(isfinite(dq[t]) && isfinite(dk[t]));
}

/* ---- the decode kernel over a KV cache ----------------------------------- */

/* attn_sdpa_cached (kernel and its reference) against attn_sdpa_forward's
 * reference on the same keys, with every modifier a cache takes. */
static void test_decode(void) {
    enum { B = 2, HK = 2, H = 4, D = 8, CAP = 300, LQ = 3 };
    const int64_t lens[B] = {290, 37};
    float *k = calloc((size_t)B * HK * CAP * D, 4),
          *v = calloc((size_t)B * HK * CAP * D, 4);
    float q[B * H * LQ * D], o1[B * H * LQ * D], o2[B * H * LQ * D],
        o3[B * H * LQ * D];
    float l1[B * H * LQ], l2[B * H * LQ], l3[B * H * LQ];
    unsigned long long s = 31;
    for (int i = 0; i < B * HK * CAP * D; i++) {
        k[i] = (float)(2 * test_rand(&s));
        v[i] = (float)test_rand(&s);
    }
    for (int i = 0; i < B * H * LQ * D; i++) q[i] = (float)(2 * test_rand(&s));
    attn_kv_cache_config cfg;
    attn_kv_cache_config_init(&cfg);
    cfg.batch = B;
    cfg.kv_heads = HK;
    cfg.capacity = CAP;
    cfg.head_dim = D;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cfg, &cache), ATTN_OK);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, HK, CAP, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, HK, CAP, D);
    CHECK_STATUS(attn_kv_cache_append(cache, &K, &V, lens), ATTN_OK);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, LQ, D);
    attn_tensor O1 = attn_tensor_4d(o1, ATTN_F32, B, H, LQ, D);
    attn_tensor O2 = attn_tensor_4d(o2, ATTN_F32, B, H, LQ, D);
    attn_tensor O3 = attn_tensor_4d(o3, ATTN_F32, B, H, LQ, D);
    double sinks[H] = {0.5, -1, 2, 0}, slopes[H] = {0.3, 0.1, 0.05, 0.6};
    for (int mode = 0; mode < 3; mode++) {
        attn_sdpa_opts op;
        attn_sdpa_opts_init(&op);
        op.mask.causal = 1;
        op.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
        op.mask.softcap = mode == 1 ? 0 : 2.0;
        op.mask.alibi = mode == 2 ? ATTN_ALIBI_SYMMETRIC : ATTN_ALIBI_CAUSAL;
        if (mode == 2) {
            op.mask.alibi_slopes = slopes;
            op.mask.n_alibi_slopes = H;
        }
        if (mode != 1) {
            op.mask.sinks = sinks;
            op.mask.n_sinks = H;
        }
        CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_OK);
        attn_sdpa_opts rf = op;
        rf.impl = ATTN_IMPL_REF;
        CHECK_STATUS(attn_sdpa_cached(&Q, cache, &rf, &O2, l2), ATTN_OK);
        rf.mask.key_lengths = lens;
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &rf, &O3, NULL, l3),
                     ATTN_OK);
        double e1 = 0, e2 = 0, el = 0;
        for (int i = 0; i < B * H * LQ * D; i++) {
            e1 = fmax(e1, fabs(o1[i] - o3[i]));
            e2 = fmax(e2, fabs(o2[i] - o3[i]));
        }
        for (int i = 0; i < B * H * LQ; i++)
            el = fmax(el, fmax(fabs(l1[i] - l3[i]), fabs(l2[i] - l3[i])));
        CHECK_MSG(e1 < 2e-5 && e2 < 1e-6 && el < 1e-4,
                  "decode mode %d: kernel %g, reference %g, lse %g", mode, e1,
                  e2, el);
    }
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    int64_t ids[B * LQ] = {0};
    op.mask.doc_q = ids;
    op.mask.n_doc_q = B * LQ;
    /* documents need ids in the cache (tests/test_kv_docs.c) */
    CHECK_STATUS(attn_sdpa_cached(&Q, cache, &op, &O1, l1), ATTN_E_INVALID);
    attn_kv_cache_free(cache);
    free(k);
    free(v);
}

int main(void) {
    test_decode();
    test_slopes();
    test_formula();
    test_gradcheck(1, 0);
    test_gradcheck(0, 1);
    test_gradcheck(1, 1);
    test_classify();
    test_errors();
    test_sweep();
    test_threads();
    return check_done("test_score_mod");
}
