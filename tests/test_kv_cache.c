/* The KV cache and attention over it (attn_cache.h).
 *
 * Tolerance rule (the flash kernel's, issue 3): the kernel's max error
 * against the f64 reference over the stored (dequantized) values is at
 * most 2x the error of a plain f32 computation (materialized scores,
 * written below) against the same reference, plus 1e-6.
 *
 * Covered: the sweep Lq in {1, 2, 7, 64} x Lk in {1, 31, 32, 33, 1000,
 * 4099} x D in {1, 64, 80, 128} (each value in some case, with every
 * storage dtype), ragged key and query lengths, causal with both
 * alignments, sliding windows, grouped heads, strided q and out, every
 * vector level of this CPU, thread counts 1, 2 and 3 (bitwise), q8 against
 * the unquantized reference (its max relative error), chunked prefill
 * against one causal pass, append / truncate / reorder against a cache
 * built afresh, and every misuse. ATTN_SANITIZED=1 drops the costly cases
 * whose values other cases also cover. */
#include "attn.h"
#include "attn_cache.h"
#include "check.h"
#include "internal.h"
#include "../src/kernels/vec.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int sanitized;
static const attn_dtype DTYPES[4] = {ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_Q8};

/* ---- a case ----------------------------------------------------------- */

typedef struct {
    int64_t B, H, Hkv, Lq, Lk, D, Dv;
    attn_dtype dt;
    int causal; /* bottom-right unless top_left */
    int top_left;
    int64_t wl, wr; /* window (< 0: none) */
    int ragged_k;   /* entry b holds fewer keys */
    int ragged_q;   /* entry b has fewer new queries */
    int strided;    /* q and out batch-first (B, L, H, D) views */
    int threads;    /* 1: compare 1, 2, 3 threads bitwise */
} tcase;

typedef struct {
    float *k, *v, *q; /* (B, Hkv, Lk, D), (B, Hkv, Lk, Dv), q views */
    attn_tensor K, V, Q;
    int64_t *klen, *qlen;
    attn_kv_cache *cache;
} built;

static void fill(float *x, int64_t n, double amp, unsigned long long *st) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(amp * test_rand(st));
}

static void build(built *w, const tcase *c, unsigned long long seed) {
    memset(w, 0, sizeof *w);
    w->k = malloc(sizeof(float) * (size_t)(c->B * c->Hkv * c->Lk * c->D));
    w->v = malloc(sizeof(float) * (size_t)(c->B * c->Hkv * c->Lk * c->Dv));
    w->q = malloc(sizeof(float) * (size_t)(c->B * c->H * c->Lq * c->D));
    fill(w->k, c->B * c->Hkv * c->Lk * c->D, 1.5, &seed);
    fill(w->v, c->B * c->Hkv * c->Lk * c->Dv, 1.0, &seed);
    fill(w->q, c->B * c->H * c->Lq * c->D, 1.5, &seed);
    w->K = attn_tensor_4d(w->k, ATTN_F32, c->B, c->Hkv, c->Lk, c->D);
    w->V = attn_tensor_4d(w->v, ATTN_F32, c->B, c->Hkv, c->Lk, c->Dv);
    w->Q = c->strided
               ? attn_tensor_bthd(w->q, ATTN_F32, c->B, c->Lq, c->H, c->D)
               : attn_tensor_4d(w->q, ATTN_F32, c->B, c->H, c->Lq, c->D);
    w->klen = malloc(sizeof(int64_t) * (size_t)c->B);
    w->qlen = malloc(sizeof(int64_t) * (size_t)c->B);
    for (int64_t b = 0; b < c->B; b++) {
        w->klen[b] =
            c->ragged_k ? c->Lk - (b * (c->Lk / 3 + 1)) % (c->Lk + 1) : c->Lk;
        if (w->klen[b] < 0) w->klen[b] = 0;
        w->qlen[b] = c->ragged_q ? c->Lq - (b * 3) % c->Lq : c->Lq;
    }
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = c->B;
    cc.kv_heads = c->Hkv;
    cc.capacity = c->Lk + 5;
    cc.head_dim = c->D;
    cc.value_dim = c->Dv;
    cc.dtype = c->dt;
    CHECK_STATUS(attn_kv_cache_create(&cc, &w->cache), ATTN_OK);
    if (w->cache)
        CHECK_STATUS(attn_kv_cache_append(w->cache, &w->K, &w->V, w->klen),
                     ATTN_OK);
}

static void unbuild(built *w) {
    attn_kv_cache_free(w->cache);
    free(w->k);
    free(w->v);
    free(w->q);
    free(w->klen);
    free(w->qlen);
}

static void opts_of(const tcase *c, const built *w, attn_sdpa_opts *o) {
    attn_sdpa_opts_init(o);
    o->mask.causal = c->causal;
    o->mask.align = c->top_left ? ATTN_ALIGN_TOP_LEFT : ATTN_ALIGN_BOTTOM_RIGHT;
    o->mask.window_left = c->wl;
    o->mask.window_right = c->wr;
    if (c->ragged_q) o->mask.query_lengths = w->qlen;
}

/* Plain f32 attention over the stored values (read back from the cache):
 * the yardstick of the tolerance. Visibility from attn_mask_visible. */
static void plain_f32(const tcase *c, const built *w, const attn_sdpa_opts *o,
                      float *out) {
    attn_mask m = o->mask;
    m.key_lengths = w->klen;
    const int64_t L = c->Lk + 5, G = c->H / c->Hkv;
    float *kb = malloc(sizeof(float) * (size_t)(c->Hkv * c->Lk * c->D + 1));
    float *vb = malloc(sizeof(float) * (size_t)(c->Hkv * c->Lk * c->Dv + 1));
    float *s = malloc(sizeof(float) * (size_t)c->Lk + 4);
    float *qr = malloc(sizeof(float) * (size_t)c->D);
    const float scale = (float)(1.0 / sqrt((double)c->D));
    for (int64_t b = 0; b < c->B; b++) {
        int64_t n = w->klen[b];
        if (n > 0) {
            attn_tensor K = attn_tensor_4d(kb, ATTN_F32, 1, c->Hkv, n, c->D);
            attn_tensor V = attn_tensor_4d(vb, ATTN_F32, 1, c->Hkv, n, c->Dv);
            CHECK_STATUS(attn_kv_cache_read(w->cache, b, 0, &K, &V), ATTN_OK);
        }
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++) {
                const int64_t hk = h / G;
                float mx = -INFINITY, sum = 0.0f;
                for (int64_t d = 0; d < c->D; d++)
                    qr[d] = (float)attn_tensor_get(&w->Q, b, h, i, d);
                for (int64_t j = 0; j < n; j++) {
                    s[j] = -INFINITY;
                    if (!attn_mask_visible(&m, b, h, i, j, c->Lq, L)) continue;
                    float a = 0.0f;
                    for (int64_t d = 0; d < c->D; d++)
                        a += qr[d] * kb[(hk * n + j) * c->D + d];
                    s[j] = a * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int64_t j = 0; j < n; j++)
                    if (s[j] > -INFINITY)
                        sum += (s[j] = expf(s[j] - mx));
                    else
                        s[j] = 0.0f;
                float *orow = out + ((b * c->H + h) * c->Lq + i) * c->Dv;
                for (int64_t d = 0; d < c->Dv; d++) {
                    float a = 0.0f;
                    for (int64_t j = 0; j < n; j++)
                        a += s[j] * vb[(hk * n + j) * c->Dv + d];
                    orow[d] = sum > 0.0f ? a / sum : 0.0f;
                }
            }
    }
    free(kb);
    free(vb);
    free(s);
    free(qr);
}

typedef struct {
    float *buf;
    attn_tensor t;
} obuf;

static obuf make_out(const tcase *c) {
    obuf o;
    size_t n = (size_t)(c->B * c->H * c->Lq * c->Dv);
    o.buf = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        o.buf[i] = 12345.0f; /* every one overwritten */
    o.t = c->strided
              ? attn_tensor_bthd(o.buf, ATTN_F32, c->B, c->Lq, c->H, c->Dv)
              : attn_tensor_4d(o.buf, ATTN_F32, c->B, c->H, c->Lq, c->Dv);
    return o;
}

static double max_err(const obuf *a, const float *ref, const tcase *c) {
    double e = 0.0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++)
                for (int64_t d = 0; d < c->Dv; d++) {
                    double x = attn_tensor_get(&a->t, b, h, i, d);
                    double y = ref[((b * c->H + h) * c->Lq + i) * c->Dv + d];
                    double df = fabs(x - y);
                    if (!(df <= e)) e = isnan(df) ? INFINITY : df;
                }
    return e;
}

static int ncase = 0;

static void run_case(const tcase *c) {
    ncase++;
    built w;
    build(&w, c, 0x9e3779b9ull + (unsigned long long)ncase * 7919);
    if (!w.cache) {
        unbuild(&w);
        return;
    }
    attn_sdpa_opts o;
    opts_of(c, &w, &o);
    const int64_t rows = c->B * c->H * c->Lq;
    /* the oracle over the stored values, as a dense f32 array */
    obuf ref = make_out(c);
    float *lref = malloc(sizeof(float) * (size_t)rows);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_cached(&w.Q, w.cache, &o, &ref.t, lref), ATTN_OK);
    float *dense = malloc(sizeof(float) * (size_t)(rows * c->Dv));
    for (int64_t b = 0, r = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++, r++)
                for (int64_t d = 0; d < c->Dv; d++)
                    dense[r * c->Dv + d] =
                        (float)attn_tensor_get(&ref.t, b, h, i, d);
    float *p32 = malloc(sizeof(float) * (size_t)(rows * c->Dv));
    plain_f32(c, &w, &o, p32);
    double e32 = 0.0;
    for (int64_t r = 0; r < rows * c->Dv; r++)
        e32 = fmax(e32, fabs((double)p32[r] - dense[r]));

    obuf out = make_out(c);
    float *lse = malloc(sizeof(float) * (size_t)rows);
    o.impl = ATTN_IMPL_AUTO;
    o.threads = 2;
    CHECK_STATUS(attn_sdpa_cached(&w.Q, w.cache, &o, &out.t, lse), ATTN_OK);
    double e = max_err(&out, dense, c);
    double el = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        if (lref[r] == -INFINITY || lse[r] == -INFINITY)
            el = fmax(el, lref[r] == lse[r] ? 0.0 : INFINITY);
        else
            el = fmax(el, fabs((double)lse[r] - lref[r]) /
                              fmax(1.0, fabs(lref[r])));
    }
    CHECK_MSG(e <= 2.0 * e32 + 1e-6 && el <= 1e-5,
              "case %d (B %lld H %lld/%lld Lq %lld Lk %lld D %lld/%lld %s "
              "causal %d%s window %lld/%lld ragged %d/%d vec %d): error %.3g, "
              "plain f32 %.3g, lse %.3g",
              ncase, (long long)c->B, (long long)c->H, (long long)c->Hkv,
              (long long)c->Lq, (long long)c->Lk, (long long)c->D,
              (long long)c->Dv, attn_dtype_name(c->dt), c->causal,
              c->top_left ? " top-left" : "", (long long)c->wl,
              (long long)c->wr, c->ragged_k, c->ragged_q, (int)attn__vec_best(),
              e, e32, el);
    if (c->threads) {
        for (int t = 1; t <= 5; t += 2) {
            obuf o2 = make_out(c);
            float *l2 = malloc(sizeof(float) * (size_t)rows);
            o.threads = t;
            CHECK_STATUS(attn_sdpa_cached(&w.Q, w.cache, &o, &o2.t, l2),
                         ATTN_OK);
            CHECK_MSG(memcmp(o2.buf, out.buf,
                             sizeof(float) * (size_t)(rows * c->Dv)) == 0 &&
                          memcmp(l2, lse, sizeof(float) * (size_t)rows) == 0,
                      "case %d: %d threads differ from 2", ncase, t);
            free(o2.buf);
            free(l2);
        }
    }
    free(ref.buf);
    free(lref);
    free(dense);
    free(p32);
    free(out.buf);
    free(lse);
    unbuild(&w);
}

static tcase base(int64_t Lq, int64_t Lk, int64_t D, attn_dtype dt) {
    tcase c;
    memset(&c, 0, sizeof c);
    c.B = 2;
    c.H = 4;
    c.Hkv = 2;
    c.Lq = Lq;
    c.Lk = Lk;
    c.D = D;
    c.Dv = D;
    c.dt = dt;
    c.causal = 1;
    c.wl = c.wr = -1;
    return c;
}

/* ---- the sweep ------------------------------------------------------------ */

static void test_sweep(void) {
    const int64_t lqs[4] = {1, 2, 7, 64};
    const int64_t lks[6] = {1, 31, 32, 33, 1000, 4099};
    const int64_t ds[4] = {1, 64, 80, 128};
    int n = 0;
    for (int a = 0; a < 4; a++)
        for (int bk = 0; bk < 6; bk++)
            for (int dd = 0; dd < 4; dd++, n++) {
                /* every (Lq, Lk) pair with a rotating D and dtype; the big
                 * Lk with D = 128 once per Lq */
                if ((n % 4) != dd) continue;
                tcase c = base(lqs[a], lks[bk], ds[dd], DTYPES[n % 4]);
                /* under the sanitizers, the costly cases whose values
                 * (Lq 64, Lk 1000 and 4099, D 128) smaller ones cover */
                if (sanitized && lqs[a] * lks[bk] * ds[dd] > 600000) continue;
                c.ragged_k = (n / 3) % 2;
                c.ragged_q = (n / 5) % 2;
                c.threads = (n % 7) == 0;
                if (n % 5 == 1) {
                    c.wl = lks[bk] / 3 + 1;
                    c.wr = n % 2 ? 0 : -1;
                }
                if (n % 11 == 2) c.H = 8, c.Hkv = 8;
                if (n % 13 == 3) c.causal = 0;
                run_case(&c);
            }
    for (int t = 0; t < 4; t++) { /* Lk 4099, D 128 in every dtype */
        tcase c = base(t == 0 || sanitized ? 1 : 2, 4099, 128, DTYPES[t]);
        c.threads = 1;
        run_case(&c);
    }
}

/* Every vector level this CPU has (scalar, AVX2, AVX-512) on a few cases
 * with feature tails (D 7, 17) and the tile edges (rows 1..5 per group). */
static void test_levels(void) {
    const attn__vec_level top = attn__vec_best();
    for (int lv = 0; lv <= (int)top; lv++) {
        attn__vec_set_max_level((attn__vec_level)lv);
        for (int t = 0; t < 4; t++) {
            tcase c = base(lv == 0 ? 3 : 5, 300 + 37 * t, t % 2 ? 17 : 128,
                           DTYPES[t]);
            c.H = 6;
            c.Hkv = 2;
            c.ragged_k = c.ragged_q = 1;
            c.threads = t == 0;
            run_case(&c);
            tcase d = base(1, 513, t % 2 ? 7 : 64, DTYPES[t]);
            d.H = 5;
            d.Hkv = 5;
            d.strided = 1;
            d.wl = 100;
            run_case(&d);
        }
    }
    attn__vec_set_max_level(ATTN__VEC_AVX512);
}

/* Alignments, windows, empty entries, grouped heads, strided views. */
static void test_masks(void) {
    tcase c = base(7, 200, 64, ATTN_F16);
    c.top_left = 1;
    run_case(&c);
    c.causal = 0;
    c.wl = 3;
    c.wr = 2;
    run_case(&c);
    c = base(64, 33, 80, ATTN_BF16); /* more queries than keys */
    c.ragged_k = 1;
    run_case(&c);
    c = base(2, 1000, 128, ATTN_Q8);
    c.H = 32;
    c.Hkv = 4;
    c.strided = 1;
    c.threads = 1;
    c.wl = 0; /* each query sees itself only */
    run_case(&c);
    c = base(1, 1, 1, ATTN_F32);
    c.B = 3;
    c.ragged_k = 1; /* entries with 1, 0 and 0 keys */
    run_case(&c);
}

/* ---- q8 against the unquantized values ---------------------------------- */

static void test_q8_error(void) {
    tcase c = base(4, 4099, 128, ATTN_Q8);
    if (sanitized) c.Lk = 1000;
    built w;
    build(&w, &c, 77);
    if (!w.cache) {
        unbuild(&w);
        return;
    }
    attn_sdpa_opts o;
    opts_of(&c, &w, &o);
    const int64_t n = c.B * c.H * c.Lq * c.Dv;
    float *out = malloc(sizeof(float) * (size_t)n);
    double *ref = malloc(sizeof(double) * (size_t)n);
    attn_tensor O = attn_tensor_4d(out, ATTN_F32, c.B, c.H, c.Lq, c.Dv);
    attn_tensor R = attn_tensor_4d(ref, ATTN_F64, c.B, c.H, c.Lq, c.Dv);
    CHECK_STATUS(attn_sdpa_cached(&w.Q, w.cache, &o, &O, NULL), ATTN_OK);
    /* the plain reference on the f32 inputs (never quantized) */
    o.impl = ATTN_IMPL_REF;
    o.mask.key_lengths = w.klen;
    CHECK_STATUS(attn_sdpa_forward(&w.Q, &w.K, &w.V, &o, &R, NULL, NULL),
                 ATTN_OK);
    double emax = 0.0, omax = 0.0;
    for (int64_t i = 0; i < n; i++) {
        emax = fmax(emax, fabs(out[i] - ref[i]));
        omax = fmax(omax, fabs(ref[i]));
    }
    printf(
        "q8 cache: max error %.3g relative to the largest output %.3g: %.3g\n",
        emax, omax, emax / omax);
    CHECK_MSG(emax / omax <= 2e-2, "q8 relative error %.3g", emax / omax);
    CHECK(emax > 0.0); /* it is quantized */
    free(out);
    free(ref);
    unbuild(&w);
}

/* ---- chunked prefill --------------------------------------------------- */

/* A prompt of L tokens appended in chunks of T (entry 1 with a shorter
 * prompt: its counts run out first) gives what one causal pass over the
 * whole prompt gives, within the tolerance rule. */
static void test_chunked_prefill(attn_dtype dt, int64_t L, int64_t T) {
    tcase c = base(L, L, 64, dt);
    c.ragged_k = 1; /* entry b's prompt has klen[b] tokens */
    built w;
    build(&w, &c, 1234 + (unsigned long long)dt);
    if (!w.cache) {
        unbuild(&w);
        return;
    }
    /* the one pass: all L queries over the whole prompt (query lengths =
     * prompt lengths, bottom-right: query i sits at position i) */
    attn_sdpa_opts o;
    opts_of(&c, &w, &o);
    o.mask.query_lengths = w.klen;
    const int64_t rows = c.B * c.H * L;
    obuf ref = make_out(&c);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_cached(&w.Q, w.cache, &o, &ref.t, NULL), ATTN_OK);
    float *p32 = malloc(sizeof(float) * (size_t)(rows * c.Dv));
    plain_f32(&c, &w, &o, p32);
    double e32 = 0.0;
    for (int64_t r = 0; r < rows * c.Dv; r++)
        e32 = fmax(e32, fabs(p32[r] - ref.buf[r]));
    /* chunks through a fresh cache */
    attn_kv_cache_config cc;
    CHECK_STATUS(attn_kv_cache_config_get(w.cache, &cc), ATTN_OK);
    attn_kv_cache *ch;
    CHECK_STATUS(attn_kv_cache_create(&cc, &ch), ATTN_OK);
    obuf out = make_out(&c);
    int64_t counts[8], qls[8];
    for (int64_t t0 = 0; t0 < L && ch; t0 += T) {
        int64_t n = L - t0 < T ? L - t0 : T;
        for (int64_t b = 0; b < c.B; b++) {
            int64_t left = w.klen[b] - t0;
            counts[b] = left < 0 ? 0 : (left < n ? left : n);
            qls[b] = counts[b];
        }
        attn_tensor K = w.K, V = w.V, Q = w.Q, O = out.t;
        K.data = w.k + t0 * c.D;
        V.data = w.v + t0 * c.Dv;
        Q.data = w.q + t0 * c.D;
        O.data = out.buf + t0 * c.Dv;
        K.shape[2] = V.shape[2] = Q.shape[2] = O.shape[2] = n;
        CHECK_STATUS(attn_kv_cache_append(ch, &K, &V, counts), ATTN_OK);
        attn_sdpa_opts oc;
        opts_of(&c, &w, &oc);
        oc.mask.query_lengths = qls;
        oc.threads = 2;
        CHECK_STATUS(attn_sdpa_cached(&Q, ch, &oc, &O, NULL), ATTN_OK);
    }
    double e = 0.0;
    for (int64_t r = 0; r < rows * c.Dv; r++)
        e = fmax(e, fabs(out.buf[r] - ref.buf[r]));
    CHECK_MSG(e <= 2.0 * e32 + 1e-6,
              "chunked prefill %s L %lld T %lld: error "
              "%.3g, plain f32 %.3g",
              attn_dtype_name(dt), (long long)L, (long long)T, e, e32);
    attn_kv_cache_free(ch);
    free(p32);
    free(ref.buf);
    free(out.buf);
    unbuild(&w);
}

/* ---- append, truncate, reorder ------------------------------------------ */

/* Decode outputs of q1 (B, H, 1, D) over cache a and over cache b are
 * bitwise the same. */
static void same_answers(attn_kv_cache *a, attn_kv_cache *b, const tcase *c,
                         const char *what) {
    unsigned long long st = 555;
    float *q = malloc(sizeof(float) * (size_t)(c->B * c->H * 3 * c->D));
    fill(q, c->B * c->H * 3 * c->D, 1.0, &st);
    float *o1 = malloc(sizeof(float) * (size_t)(c->B * c->H * 3 * c->Dv));
    float *o2 = malloc(sizeof(float) * (size_t)(c->B * c->H * 3 * c->Dv));
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, c->B, c->H, 3, c->D);
    attn_tensor O1 = attn_tensor_4d(o1, ATTN_F32, c->B, c->H, 3, c->Dv);
    attn_tensor O2 = attn_tensor_4d(o2, ATTN_F32, c->B, c->H, 3, c->Dv);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.causal = 1;
    o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    CHECK_STATUS(attn_sdpa_cached(&Q, a, &o, &O1, NULL), ATTN_OK);
    CHECK_STATUS(attn_sdpa_cached(&Q, b, &o, &O2, NULL), ATTN_OK);
    int64_t la[8], lb[8];
    attn_kv_cache_lengths(a, la);
    attn_kv_cache_lengths(b, lb);
    CHECK_MSG(memcmp(la, lb, sizeof(int64_t) * (size_t)c->B) == 0,
              "%s: lengths differ", what);
    CHECK_MSG(
        memcmp(o1, o2, sizeof(float) * (size_t)(c->B * c->H * 3 * c->Dv)) == 0,
        "%s: answers differ", what);
    free(q);
    free(o1);
    free(o2);
}

/* A cache holding rows [0, n[b]) of K/V entry src[b] for each b. */
static attn_kv_cache *fresh(const tcase *c, const built *w, const int64_t *src,
                            const int64_t *n) {
    attn_kv_cache_config cc;
    attn_kv_cache_config_get(w->cache, &cc);
    attn_kv_cache *f = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cc, &f), ATTN_OK);
    if (!f) return NULL;
    /* entry b's rows of entry src[b]: a view with its batch stride
     * following src (strides cannot permute, so one append per entry) */
    for (int64_t b = 0; b < c->B; b++) {
        int64_t cnt[8] = {0};
        cnt[b] = n[b];
        attn_tensor K = w->K, V = w->V;
        K.data = w->k + (src[b] - b) * K.stride[0];
        V.data = w->v + (src[b] - b) * V.stride[0];
        CHECK_STATUS(attn_kv_cache_append(f, &K, &V, cnt), ATTN_OK);
    }
    return f;
}

static void test_edit(attn_dtype dt) {
    tcase c = base(1, 100, 40, dt);
    c.B = 4;
    built w;
    build(&w, &c, 4242);
    if (!w.cache) {
        unbuild(&w);
        return;
    }
    const int64_t id[4] = {0, 1, 2, 3}, full[4] = {100, 100, 100, 100};
    /* pieces of 1, 29, 70 positions, ragged on the way, equal one append */
    attn_kv_cache_config cc;
    attn_kv_cache_config_get(w.cache, &cc);
    attn_kv_cache *p;
    CHECK_STATUS(attn_kv_cache_create(&cc, &p), ATTN_OK);
    const int64_t cut[4][4] = {{1, 0, 1, 1}, {29, 30, 0, 29}, {70, 70, 99, 70}};
    int64_t at[4] = {0, 0, 0, 0};
    for (int s = 0; s < 3 && p; s++) {
        attn_tensor K = w.K, V = w.V;
        int64_t cnt[4];
        for (int64_t b = 0; b < 4; b++) cnt[b] = cut[s][b];
        /* per entry b, the view starts at its own at[b]: append one entry
         * at a time */
        for (int64_t b = 0; b < 4; b++) {
            int64_t one[4] = {0, 0, 0, 0};
            one[b] = cnt[b];
            K.data = w.k + at[b] * c.D;
            V.data = w.v + at[b] * c.Dv;
            K.shape[2] = V.shape[2] = 100 - at[b];
            CHECK_STATUS(attn_kv_cache_append(p, &K, &V, one), ATTN_OK);
            at[b] += cnt[b];
        }
    }
    attn_kv_cache *f = fresh(&c, &w, id, full);
    same_answers(p, f, &c, "append in pieces");
    /* truncate: 7 more junk positions, rolled back */
    attn_tensor K = w.K, V = w.V;
    K.shape[2] = V.shape[2] = 5;
    CHECK_STATUS(attn_kv_cache_append(p, &K, &V, NULL), ATTN_OK);
    CHECK_STATUS(attn_kv_cache_truncate(p, full), ATTN_OK);
    same_answers(p, f, &c, "truncate");
    const int64_t part[4] = {10, 0, 100, 57};
    CHECK_STATUS(attn_kv_cache_truncate(p, part), ATTN_OK);
    attn_kv_cache *g = fresh(&c, &w, id, part);
    same_answers(p, g, &c, "ragged truncate");
    attn_kv_cache_free(g);
    /* reorder with a repeated parent and a dropped one, then grow */
    const int64_t idx[4] = {2, 0, 2, 3}, nl[4] = {100, 10, 100, 57};
    CHECK_STATUS(attn_kv_cache_reorder(p, idx), ATTN_OK);
    g = fresh(&c, &w, idx, nl);
    same_answers(p, g, &c, "reorder");
    K.shape[2] = V.shape[2] = 3; /* rows 0..2 of every entry, again */
    CHECK_STATUS(attn_kv_cache_append(p, &K, &V, NULL), ATTN_OK);
    CHECK_STATUS(attn_kv_cache_append(g, &K, &V, NULL), ATTN_OK);
    same_answers(p, g, &c, "append after reorder");
    /* a permutation (no copies) and back to front */
    const int64_t perm[4] = {3, 2, 1, 0};
    CHECK_STATUS(attn_kv_cache_reorder(p, perm), ATTN_OK);
    CHECK_STATUS(attn_kv_cache_reorder(g, perm), ATTN_OK);
    same_answers(p, g, &c, "reorder twice");
    /* read-back sees the stored rows of the right entry */
    float kb[3 * 40 * 2], kf[3 * 40 * 2];
    attn_tensor R1 = attn_tensor_4d(kb, ATTN_F32, 1, 2, 3, 40);
    attn_tensor R2 = attn_tensor_4d(kf, ATTN_F32, 1, 2, 3, 40);
    CHECK_STATUS(attn_kv_cache_read(p, 0, 55, &R1, NULL), ATTN_OK);
    CHECK_STATUS(attn_kv_cache_read(g, 0, 55, &R2, NULL), ATTN_OK);
    CHECK(memcmp(kb, kf, sizeof kb) == 0);
    CHECK_STATUS(attn_kv_cache_clear(p), ATTN_OK);
    int64_t ls[4];
    CHECK_STATUS(attn_kv_cache_lengths(p, ls), ATTN_OK);
    CHECK(ls[0] == 0 && ls[1] == 0 && ls[2] == 0 && ls[3] == 0);
    attn_kv_cache_free(g);
    attn_kv_cache_free(f);
    attn_kv_cache_free(p);
    unbuild(&w);
}

/* ---- misuse -------------------------------------------------------------- */

#define CHECK_ERR(expr, want, needle)                                          \
    do {                                                                       \
        attn_clear_error();                                                    \
        CHECK_STATUS(expr, want);                                              \
        CHECK_MSG(strstr(attn_last_error(), needle) != NULL,                   \
                  "message '%s' lacks '%s'", attn_last_error(), needle);       \
    } while (0)

static void test_misuse(void) {
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    attn_kv_cache *c = NULL;
    size_t bytes;
    CHECK_ERR(attn_kv_cache_create(&cc, &c), ATTN_E_INVALID, "batch is 0");
    CHECK(c == NULL);
    cc.batch = 2;
    cc.kv_heads = 2;
    cc.capacity = 8;
    cc.head_dim = 4;
    cc.value_dim = -1;
    CHECK_ERR(attn_kv_cache_bytes(&cc, &bytes), ATTN_E_INVALID,
              "value_dim is -1");
    cc.value_dim = 0;
    cc.dtype = ATTN_I32;
    CHECK_ERR(attn_kv_cache_create(&cc, &c), ATTN_E_DTYPE, "i32");
    cc.dtype = ATTN_Q8;
    cc.capacity = INT64_MAX / 4;
    CHECK_ERR(attn_kv_cache_bytes(&cc, &bytes), ATTN_E_NOMEM, "overflow");
    cc.capacity = 8;
    CHECK_STATUS(attn_kv_cache_bytes(&cc, &bytes), ATTN_OK);
    CHECK(bytes == (size_t)(2 * 2 * 8 * (4 + 4) * 2));
    CHECK_STATUS(attn_kv_cache_create(&cc, &c), ATTN_OK);
    attn_kv_cache *none = c;
    CHECK_ERR(attn_kv_cache_create(NULL, &none), ATTN_E_INVALID, "NULL");
    CHECK(none == NULL);
    if (!c) return;
    float k[2 * 2 * 5 * 4], q[2 * 4 * 1 * 4], o[2 * 4 * 1 * 4];
    for (int i = 0; i < 80; i++) k[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 32; i++) q[i] = 0.25f;
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 2, 2, 5, 4);
    int64_t cnt[2] = {5, 2}, lens[2];
    CHECK_STATUS(attn_kv_cache_append(c, &K, &K, cnt), ATTN_OK);
    /* overflow: 5 + 5 > 8, nothing appended */
    CHECK_ERR(attn_kv_cache_append(c, &K, &K, NULL), ATTN_E_SHAPE,
              "overflow: entry 0 holds 5 of 8");
    attn_kv_cache_lengths(c, lens);
    CHECK(lens[0] == 5 && lens[1] == 2);
    cnt[0] = -1;
    CHECK_ERR(attn_kv_cache_append(c, &K, &K, cnt), ATTN_E_SHAPE,
              "counts[0] = -1");
    cnt[0] = 6;
    CHECK_ERR(attn_kv_cache_append(c, &K, &K, cnt), ATTN_E_SHAPE,
              "counts[0] = 6");
    attn_tensor Kh = attn_tensor_4d(k, ATTN_F32, 2, 4, 2, 5);
    CHECK_ERR(attn_kv_cache_append(c, &Kh, &Kh, NULL), ATTN_E_SHAPE,
              "(2, 2, T, 4)");
    attn_tensor Ks = attn_tensor_4d(k, ATTN_F32, 2, 2, 3, 4);
    CHECK_ERR(attn_kv_cache_append(c, &K, &Ks, NULL), ATTN_E_SHAPE,
              "k has 5 new positions but v has 3");
    attn_tensor Ku = attn_tensor_4d(k, ATTN_U8, 2, 2, 5, 4);
    CHECK_ERR(attn_kv_cache_append(c, &Ku, &Ku, NULL), ATTN_E_DTYPE, "u8");
    attn_tensor Kd = attn_tensor_4d(k, ATTN_F16, 2, 2, 1, 4);
    attn_tensor K1 = attn_tensor_4d(k, ATTN_F32, 2, 2, 1, 4);
    CHECK_ERR(attn_kv_cache_append(c, &K1, &Kd, NULL), ATTN_E_DTYPE, "share");
    k[6] = NAN;
    CHECK_ERR(attn_kv_cache_append(c, &K1, &K1, NULL), ATTN_E_NONFINITE,
              "k[0, 1, 0, 2]");
    attn_kv_cache_lengths(c, lens);
    CHECK(lens[0] == 5 && lens[1] == 2); /* unchanged */
    k[6] = 1.0f;
    CHECK_ERR(attn_kv_cache_append(c, NULL, &K1, NULL), ATTN_E_INVALID, "k");
    /* truncate cannot grow; reorder indices in range */
    int64_t tl[2] = {5, 3};
    CHECK_ERR(attn_kv_cache_truncate(c, tl), ATTN_E_SHAPE,
              "lengths[1] = 3 is outside [0, 2]");
    tl[1] = -1;
    CHECK_ERR(attn_kv_cache_truncate(c, tl), ATTN_E_SHAPE, "lengths[1] = -1");
    int64_t ix[2] = {0, 2};
    CHECK_ERR(attn_kv_cache_reorder(c, ix), ATTN_E_SHAPE,
              "index[1] = 2 is outside [0, 2)");
    ix[1] = -1;
    CHECK_ERR(attn_kv_cache_reorder(c, ix), ATTN_E_SHAPE, "index[1] = -1");
    CHECK_ERR(attn_kv_cache_reorder(c, NULL), ATTN_E_INVALID, "index is NULL");
    /* read-back bounds */
    float rb[2 * 3 * 4];
    attn_tensor R = attn_tensor_4d(rb, ATTN_F32, 1, 2, 3, 4);
    CHECK_ERR(attn_kv_cache_read(c, 1, 0, &R, NULL), ATTN_E_SHAPE, "length 2");
    CHECK_ERR(attn_kv_cache_read(c, 2, 0, &R, NULL), ATTN_E_SHAPE, "entry 2");
    /* attention misuse */
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 2, 4, 1, 4);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 2, 4, 1, 4);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_OK);
    attn_tensor Qb = attn_tensor_4d(q, ATTN_F32, 1, 4, 1, 4);
    CHECK_ERR(attn_sdpa_cached(&Qb, c, &op, &O, NULL), ATTN_E_SHAPE,
              "batch 1 but the cache has 2");
    attn_tensor Qh = attn_tensor_4d(q, ATTN_F32, 2, 3, 1, 4);
    CHECK_ERR(attn_sdpa_cached(&Qh, c, &op, &O, NULL), ATTN_E_SHAPE, "3 heads");
    attn_tensor Qd = attn_tensor_4d(q, ATTN_F32, 2, 2, 1, 8);
    CHECK_ERR(attn_sdpa_cached(&Qd, c, &op, &O, NULL), ATTN_E_SHAPE,
              "8 features");
    attn_tensor Q64 = attn_tensor_4d(q, ATTN_F64, 2, 2, 1, 4);
    CHECK_ERR(attn_sdpa_cached(&Q64, c, &op, &O, NULL), ATTN_E_DTYPE, "f64");
    attn_tensor Ob = attn_tensor_4d(o, ATTN_F32, 2, 4, 2, 2);
    CHECK_ERR(attn_sdpa_cached(&Q, c, &op, &Ob, NULL), ATTN_E_SHAPE,
              "out has shape");
    CHECK_ERR(attn_sdpa_cached(&Q, NULL, &op, &O, NULL), ATTN_E_INVALID,
              "cache is NULL");
    op.dropout_p = 0.1;
    CHECK_ERR(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_UNSUPPORTED,
              "dropout");
    op.dropout_p = 0.0;
    op.mask.key_lengths = lens;
    CHECK_ERR(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_UNSUPPORTED,
              "key_lengths");
    op.mask.key_lengths = NULL;
    op.mask.bias = &K;
    CHECK_ERR(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_UNSUPPORTED,
              "bias");
    op.mask.bias = NULL;
    int64_t ql[2] = {1, 2};
    op.mask.query_lengths = ql;
    CHECK_ERR(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_SHAPE,
              "query_lengths[1] = 2");
    op.mask.query_lengths = NULL;
    op.scale = -1.0;
    CHECK_ERR(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_INVALID, "scale");
    op.scale = 0.0;
    q[3] = INFINITY;
    CHECK_ERR(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_NONFINITE, "q");
    attn_kv_cache_free(c);
    /* f16 storage refuses values it would turn into Inf */
    cc.dtype = ATTN_F16;
    CHECK_STATUS(attn_kv_cache_create(&cc, &c), ATTN_OK);
    k[1] = 1e5f;
    CHECK_ERR(attn_kv_cache_append(c, &K1, &K1, NULL), ATTN_E_NONFINITE,
              "= 100000 is not finite in the f16 cache");
    attn_kv_cache_free(c);
    attn_kv_cache_free(NULL);
    CHECK(strcmp(attn_dtype_name(ATTN_Q8), "q8") == 0 &&
          attn_dtype_size(ATTN_Q8) == 0);
}

int main(void) {
    sanitized = getenv("ATTN_SANITIZED") != NULL;
    test_misuse();
    test_edit(ATTN_F32);
    test_edit(ATTN_Q8);
    test_edit(ATTN_BF16);
    test_masks();
    test_levels();
    for (int t = 0; t < 4; t++)
        test_chunked_prefill(DTYPES[t], sanitized ? 100 : 300, t % 2 ? 64 : 37);
    test_chunked_prefill(ATTN_F32, 129, 1); /* token by token */
    test_q8_error();
    test_sweep();
    return check_done("test_kv_cache");
}
