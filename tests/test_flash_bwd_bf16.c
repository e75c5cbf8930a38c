/* The flash backward with bf16 tile products (ATTN_IMPL_FLASH_BF16 on bf16
 * q, k, v; dout f32 holding bf16 values), against the float64 reference
 * backward on the same inputs:
 *   - on every case of bf16_cases.h (sizes 1, 3, 17, 129, Lq != Lk,
 *     causal and padding masks, grouped heads, long rows) each gradient's
 *     error is within 2x PyTorch's bf16 backward error on those inputs
 *     (the committed fixture tests/data/torch_bf16_sdpa_errors.txt, lines
 *     NAME.dq/.dk/.dv, made by tests/torch_bf16_errors.py);
 *   - with each mask, score modifier, user function and dropout the f32
 *     backward supports, within bf16's rounding of the gradients' scale;
 *   - 1, 2 and 3 threads give the same bits (both schemes of the backward);
 *   - it really is the bf16 path: its gradients differ from FLASH's.
 * Where the CPU lacks AVX512_BF16 FLASH_BF16 runs FLASH: checked to give
 * FLASH's bits, and the bf16 path is reported NOT run on stderr. */
#include "../src/kernels/cpu.h"
#include "attn.h"
#include "check.h"
#include "bf16_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The row band of split tiles (flash_tiles.c; 0: the default). */
extern int64_t attn__flash_rc_override;

/* A problem: bf16 inputs and the options of a case. */
typedef struct {
    int64_t B, H, Hkv, Lq, Lk, D, Dv; /* D: of q and k */
    attn_tensor q, k, v, g;
    attn_sdpa_opts o;
} prob;

/* The gradients of one run (f32; dbias and the sink gradient when asked). */
typedef struct {
    float *dq, *dk, *dv, *db;
    double sg[8];
    int64_t nq, nk, nv, nb;
} grads;

static void grads_alloc(grads *r, const prob *p) {
    memset(r, 0, sizeof *r);
    r->nq = p->B * p->H * p->Lq * p->D;
    r->nk = p->B * p->Hkv * p->Lk * p->D;
    r->nv = p->B * p->Hkv * p->Lk * p->Dv;
    r->nb = p->o.mask.bias ? attn_tensor_numel(p->o.mask.bias) : 0;
    r->dq = calloc((size_t)r->nq + 1, sizeof(float));
    r->dk = calloc((size_t)r->nk + 1, sizeof(float));
    r->dv = calloc((size_t)r->nv + 1, sizeof(float));
    r->db = calloc((size_t)r->nb + 1, sizeof(float));
}

static void grads_free(grads *r) {
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->db);
}

/* Forward then backward with impl and threads (the forward with the same
 * impl: the bf16 forward's out and lse feed the bf16 backward). */
static void run_flash(prob *p, attn_impl impl, int threads, grads *r) {
    grads_alloc(r, p);
    float *out = calloc((size_t)(p->B * p->H * p->Lq * p->Dv) + 1, 4);
    float *lse = calloc((size_t)(p->B * p->H * p->Lq) + 1, 4);
    attn_tensor O = attn_tensor_4d(out, ATTN_F32, p->B, p->H, p->Lq, p->Dv);
    attn_tensor DQ = attn_tensor_4d(r->dq, ATTN_F32, p->B, p->H, p->Lq, p->D);
    attn_tensor DK = attn_tensor_4d(r->dk, ATTN_F32, p->B, p->Hkv, p->Lk, p->D);
    attn_tensor DV =
        attn_tensor_4d(r->dv, ATTN_F32, p->B, p->Hkv, p->Lk, p->Dv);
    attn_tensor DB;
    attn_sdpa_opts o = p->o;
    o.impl = impl;
    o.threads = threads;
    if (o.mask.sinks_grad) o.mask.sinks_grad = r->sg;
    if (r->nb) {
        const attn_tensor *b = o.mask.bias;
        DB = attn_tensor_4d(r->db, ATTN_F32, b->shape[0], b->shape[1],
                            b->shape[2], b->shape[3]);
    }
    CHECK_STATUS(attn_sdpa_forward(&p->q, &p->k, &p->v, &o, &O, NULL, lse),
                 ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&p->q, &p->k, &p->v, &O, lse, &p->g, &o,
                                    &DQ, &DK, &DV, r->nb ? &DB : NULL),
                 ATTN_OK);
    free(out);
    free(lse);
}

/* The float64 reference's gradients. */
typedef struct {
    double *dq, *dk, *dv, *db, sg[8];
} refgrads;

static void run_ref(prob *p, const grads *shape, refgrads *r) {
    memset(r, 0, sizeof *r);
    r->dq = calloc((size_t)shape->nq + 1, 8);
    r->dk = calloc((size_t)shape->nk + 1, 8);
    r->dv = calloc((size_t)shape->nv + 1, 8);
    r->db = calloc((size_t)shape->nb + 1, 8);
    double *out = calloc((size_t)(p->B * p->H * p->Lq * p->Dv) + 1, 8);
    attn_tensor O = attn_tensor_4d(out, ATTN_F64, p->B, p->H, p->Lq, p->Dv);
    attn_tensor DQ = attn_tensor_4d(r->dq, ATTN_F64, p->B, p->H, p->Lq, p->D);
    attn_tensor DK = attn_tensor_4d(r->dk, ATTN_F64, p->B, p->Hkv, p->Lk, p->D);
    attn_tensor DV =
        attn_tensor_4d(r->dv, ATTN_F64, p->B, p->Hkv, p->Lk, p->Dv);
    attn_tensor DB;
    attn_sdpa_opts o = p->o;
    o.impl = ATTN_IMPL_REF;
    if (o.mask.sinks_grad) o.mask.sinks_grad = r->sg;
    if (shape->nb) {
        const attn_tensor *b = o.mask.bias;
        DB = attn_tensor_4d(r->db, ATTN_F64, b->shape[0], b->shape[1],
                            b->shape[2], b->shape[3]);
    }
    CHECK_STATUS(attn_sdpa_forward(&p->q, &p->k, &p->v, &o, &O, NULL, NULL),
                 ATTN_OK);
    CHECK_STATUS(attn_sdpa_backward(&p->q, &p->k, &p->v, &O, NULL, &p->g, &o,
                                    &DQ, &DK, &DV, shape->nb ? &DB : NULL),
                 ATTN_OK);
    free(out);
}

static void ref_free(refgrads *r) {
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->db);
}

static double max_err(const float *a, const double *ref, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs(a[i] - ref[i]);
        if (!(x <= e)) e = x; /* NaN wins */
    }
    return e;
}

static double max_abs(const double *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static int same_bits(const grads *a, const grads *b) {
    return !memcmp(a->dq, b->dq, sizeof(float) * (size_t)a->nq) &&
           !memcmp(a->dk, b->dk, sizeof(float) * (size_t)a->nk) &&
           !memcmp(a->dv, b->dv, sizeof(float) * (size_t)a->nv) &&
           !memcmp(a->db, b->db, sizeof(float) * (size_t)a->nb) &&
           !memcmp(a->sg, b->sg, sizeof a->sg);
}

/* Runs p: threads 1, 2, 3 bitwise; bf16 path differs from FLASH (or, off
 * the path, equals it); returns the bf16 errors of dq, dk, dv, dbias in
 * err[0..3] and the reference's magnitudes in mag[0..3]. */
static void check_prob(prob *p, const char *name, int bf16_path, double *err,
                       double *mag) {
    grads g[3], f;
    refgrads r;
    for (int t = 0; t < 3; t++)
        run_flash(p, ATTN_IMPL_FLASH_BF16, t + 1, &g[t]);
    run_flash(p, ATTN_IMPL_FLASH, 0, &f);
    run_ref(p, &g[0], &r);
    CHECK_MSG(same_bits(&g[0], &g[1]) && same_bits(&g[0], &g[2]),
              "%s: thread counts give different bits", name);
    if (bf16_path)
        CHECK_MSG(!same_bits(&g[0], &f) || p->Lk == 1,
                  "%s: FLASH_BF16 gave FLASH's bits: not the bf16 path", name);
    else
        CHECK_MSG(same_bits(&g[0], &f),
                  "%s: FLASH_BF16 without AVX512_BF16 differs from FLASH",
                  name);
    err[0] = max_err(g[0].dq, r.dq, g[0].nq);
    err[1] = max_err(g[0].dk, r.dk, g[0].nk);
    err[2] = max_err(g[0].dv, r.dv, g[0].nv);
    err[3] = max_err(g[0].db, r.db, g[0].nb);
    mag[0] = max_abs(r.dq, g[0].nq);
    mag[1] = max_abs(r.dk, g[0].nk);
    mag[2] = max_abs(r.dv, g[0].nv);
    mag[3] = max_abs(r.db, g[0].nb);
    if (p->o.mask.sinks_grad) {
        /* -sum_i P_sink,i dO_i . O_i: O carries the bf16 forward's error
         * (P rounded for P V), which the sum over rows cancels poorly:
         * held to bf16's rounding of the largest head's gradient */
        double sm = 0;
        for (int h = 0; h < p->H; h++)
            if (fabs(r.sg[h]) > sm) sm = fabs(r.sg[h]);
        for (int h = 0; h < p->H; h++) {
            double e = fabs(g[0].sg[h] - r.sg[h]);
            CHECK_MSG(e <= 0x1p-6 * sm + 1e-6, "%s: sink gradient %d: %g vs %g",
                      name, h, g[0].sg[h], r.sg[h]);
            if (getenv("ATTN_VERBOSE"))
                printf("sink %d: %g vs %g\n", h, g[0].sg[h], r.sg[h]);
        }
    }
    for (int t = 0; t < 3; t++) grads_free(&g[t]);
    grads_free(&f);
    ref_free(&r);
}

static void prob_init(prob *p, int64_t B, int64_t H, int64_t Hkv, int64_t Lq,
                      int64_t Lk, int64_t D, int64_t Dv, double amp,
                      unsigned long long seed, uint16_t **bufs) {
    unsigned long long st = seed;
    p->B = B, p->H = H, p->Hkv = Hkv, p->Lq = Lq, p->Lk = Lk, p->D = D;
    p->Dv = Dv;
    const int64_t nq = B * H * Lq * D, nk = B * Hkv * Lk * D;
    const int64_t nv = B * Hkv * Lk * Dv, no = B * H * Lq * Dv;
    /* the order of bf16_cases.h: q, k, v, then dout */
    bufs[0] = bf16_gen(nq, amp, &st);
    bufs[1] = bf16_gen(nk, amp, &st);
    bufs[2] = bf16_gen(nv, 1.0, &st);
    bufs[3] = bf16_gen(no, 1.0, &st);
    /* dout is f32 (the API's): the same bf16 values widened */
    float *g = malloc(sizeof(float) * (size_t)(no + 1));
    for (int64_t i = 0; i < no; i++) g[i] = attn_bf16_to_f32(bufs[3][i]);
    free(bufs[3]);
    bufs[3] = (uint16_t *)(void *)g;
    p->q = attn_tensor_4d(bufs[0], ATTN_BF16, B, H, Lq, D);
    p->k = attn_tensor_4d(bufs[1], ATTN_BF16, B, Hkv, Lk, D);
    p->v = attn_tensor_4d(bufs[2], ATTN_BF16, B, Hkv, Lk, Dv);
    p->g = attn_tensor_4d(bufs[3], ATTN_F32, B, H, Lq, Dv);
    attn_sdpa_opts_init(&p->o);
}

/* ---- the fixture's cases ----------------------------------------------- */

static void fixture_case(const bf16_case *c, int bf16_path, int *missing) {
    prob p;
    uint16_t *bufs[4];
    uint8_t *keep = NULL;
    attn_tensor Keep;
    prob_init(&p, c->B, c->H, c->Hkv, c->Lq, c->Lk, c->D, c->D, c->amp, c->seed,
              bufs);
    p.o.mask.causal = c->mask == BF16_CAUSAL;
    if (c->mask == BF16_PAD) {
        keep = malloc((size_t)(c->B * c->Lk));
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t j = 0; j < c->Lk; j++)
                keep[b * c->Lk + j] = j < c->Lk - 7 * b - 3;
        Keep = attn_tensor_4d(keep, ATTN_U8, c->B, 1, 1, c->Lk);
        p.o.mask.keep = &Keep;
    }
    double err[4], mag[4];
    check_prob(&p, c->name, bf16_path, err, mag);
    const char *gn[3] = {"dq", "dk", "dv"};
    double te[3];
    for (int x = 0; x < 3; x++) {
        char nm[80];
        snprintf(nm, sizeof nm, "%s.%s", c->name, gn[x]);
        te[x] = bf16_torch_err(nm);
        if (te[x] < 0) {
            *missing = 1;
            continue;
        }
        /* the floor: gradients that are 0 in exact arithmetic (Lk = 1),
         * which PyTorch's bf16 can hit exactly by luck */
        if (bf16_path)
            CHECK_MSG(err[x] <= 2.0 * te[x] + 1e-6,
                      "%s: bf16 %s error %g > 2 x PyTorch's %g", c->name, gn[x],
                      err[x], te[x]);
    }
    if (bf16_path)
        printf("%-12s dq %.3g (PyTorch %.3g, ratio %.2f)  dk %.3g (%.3g, "
               "%.2f)  dv %.3g (%.3g, %.2f)\n",
               c->name, err[0], te[0], te[0] > 0 ? err[0] / te[0] : 0, err[1],
               te[1], te[1] > 0 ? err[1] / te[1] : 0, err[2], te[2],
               te[2] > 0 ? err[2] / te[2] : 0);
    for (int x = 0; x < 4; x++) free(bufs[x]);
    free(keep);
}

/* ---- masks, modifiers, user functions, dropout ------------------------- */

static int smod(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                int64_t n, double *score, double *dscore) {
    (void)ctx, (void)b;
    for (int64_t x = 0; x < n; x++) {
        /* a slope that depends on the head and distance: dscore != 1 */
        double a = 1.0 + 0.25 * (double)h;
        score[x] = a * score[x] - 0.01 * (double)llabs(i - (j0 + x));
        if (dscore) dscore[x] = a;
    }
    return 0;
}

static int mmod(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                int64_t n, uint8_t *keep) {
    (void)ctx, (void)b, (void)h;
    for (int64_t x = 0; x < n; x++) keep[x] = (i + j0 + x) % 5 != 1;
    return 0;
}

enum {
    O_WINDOW,
    O_LENGTHS,
    O_BLOCK,
    O_BIAS_SOFTCAP,
    O_BIAS_BCAST,
    O_ALIBI_SINKS,
    O_DROPOUT,
    O_SCORE_MOD,
    O_MASK_MOD,
    O_ODD_BANDS,
    O_DV,
    O_COUNT
};

static const char *opt_name[O_COUNT] = {
    "window",     "lengths",    "block",       "bias+softcap",
    "bias-bcast", "alibi+sink", "dropout 0.2", "score_mod",
    "mask_mod",   "odd bands",  "Dv 40"};

static void options_case(int which, int bf16_path) {
    prob p;
    uint16_t *bufs[4];
    /* Dv != Dk in one case: the value side's operands have their own
     * widths */
    prob_init(&p, 2, 4, 2, 67, 129, 17, which == O_DV ? 40 : 17, 1.0,
              100 + (unsigned)which, bufs);
    attn_mask *m = &p.o.mask;
    int64_t klen[2] = {50, 0}, qlen[2] = {67, 40};
    uint8_t layout[3 * 5] = {1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1};
    double slopes[4] = {0.5, 0.25, 0.125, 0.0625}, sinks[4] = {0.5, -1, 2, 0},
           sg[4] = {0};
    float *bias = NULL;
    attn_tensor Bias;
    unsigned long long st = 77;
    switch (which) {
    case O_WINDOW:
        m->window_left = 21; /* blocks start on odd keys */
        m->window_right = 3;
        m->align = ATTN_ALIGN_BOTTOM_RIGHT;
        break;
    case O_LENGTHS: /* entry 1 sees no key: fully masked rows */
        m->key_lengths = klen;
        m->query_lengths = qlen;
        break;
    case O_BLOCK:
        m->block_size = 32;
        m->layout = layout;
        m->layout_heads = 1;
        m->causal = 1;
        break;
    case O_BIAS_SOFTCAP:
    case O_BIAS_BCAST: {
        const int full = which == O_BIAS_SOFTCAP;
        const int64_t n = full ? 2 * 4 * 67 * 129 : 4 * 129;
        bias = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) bias[i] = (float)test_rand(&st);
        Bias = full ? attn_tensor_4d(bias, ATTN_F32, 2, 4, 67, 129)
                    : attn_tensor_4d(bias, ATTN_F32, 1, 4, 1, 129);
        m->bias = &Bias;
        if (full) m->softcap = 2.0;
        m->causal = !full;
        break;
    }
    case O_ALIBI_SINKS:
        m->alibi = ATTN_ALIBI_CAUSAL;
        m->alibi_slopes = slopes;
        m->n_alibi_slopes = 4;
        m->causal = 1;
        m->sinks = sinks;
        m->n_sinks = 4;
        m->sinks_grad = sg;
        break;
    case O_DROPOUT:
        p.o.dropout_p = 0.2;
        p.o.seed = 12345;
        m->causal = 1;
        break;
    case O_SCORE_MOD: m->score_mod = smod; break;
    case O_MASK_MOD: m->mask_mod = mmod; break;
    case O_DV: m->causal = 1; break;
    case O_ODD_BANDS: /* the causal diagonal in bands of 5 rows: blocks
                       * start on odd query rows */
        m->causal = 1;
        attn__flash_rc_override = 5;
        break;
    default: break;
    }
    double err[4], mag[4];
    check_prob(&p, opt_name[which], bf16_path, err, mag);
    attn__flash_rc_override = 0;
    /* bf16 rounds each operand by at most 2^-9 relatively; the products
     * sum them with f32 accumulation: a gradient stays within about one
     * bf16 ulp of its largest entry (2^-9 measured, the bound takes 2x).
     * Wrong masking or a missing derivative is of the gradients' size. */
    const char *gn[4] = {"dq", "dk", "dv", "dbias"};
    for (int x = 0; x < 4; x++)
        CHECK_MSG(err[x] <= 0x1p-8 * mag[x] + 1e-6,
                  "%s: bf16 %s error %g > 2^-8 x max |%s| (%g)",
                  opt_name[which], gn[x], err[x], gn[x], mag[x]);
    if (bf16_path)
        printf("%-12s dq %.3g/%.3g dk %.3g/%.3g dv %.3g/%.3g db %.3g/%.3g "
               "(error/max)\n",
               opt_name[which], err[0], mag[0], err[1], mag[1], err[2], mag[2],
               err[3], mag[3]);
    free(bias);
    for (int x = 0; x < 4; x++) free(bufs[x]);
}

int main(void) {
    const int bf16 = attn__isa_get() >= ATTN__ISA_AVX512_BF16;
    int missing = 0;
    printf("path %s: bf16 backward tile products %s\n",
           attn__isa_name(attn__isa_get()), bf16 ? "run" : "NOT run");
    for (int i = 0; i < BF16_NCASES; i++)
        fixture_case(&bf16_cases[i], bf16, &missing);
    for (int w = 0; w < O_COUNT; w++) options_case(w, bf16);
    if (!bf16)
        fprintf(stderr,
                "*** the bf16 backward tile products NOT run: this process's "
                "path is %s (AVX512_BF16 needed); FLASH_BF16 checked to be "
                "FLASH ***\n",
                attn__isa_name(attn__isa_get()));
    CHECK_MSG(!missing, "tests/data/torch_bf16_sdpa_errors.txt lacks the "
                        "backward's cases (make it again with "
                        "tests/torch_bf16_errors.py)");
    return check_done("test_flash_bwd_bf16");
}
