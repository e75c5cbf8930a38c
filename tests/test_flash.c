/* The flash forward kernel against the double reference.
 *
 * Tolerance rule (issue 3): flash's max error against the f64 reference is
 * at most 2x the error of a plain f32 computation (materialized scores,
 * unfused, written below) against the same reference, plus 1e-6. The same
 * rule is applied to lse and to the weights.
 *
 * Covered: Lq, Lk in {1, 3, 17, 64, 127, 128, 129, 257, 1000} and D in
 * {1, 7, 16, 40, 64, 80, 128, 256} (each value in some case, Lq != Lk,
 * Dk != Dv), every mask part alone and combined, GQA, (B, H, L, D) and
 * batch-first views and a non-contiguous last axis (packed), f32/f16/bf16,
 * the regression cases of the issue, small and odd tile sizes, every
 * vector level of this CPU, thread counts 1, 2, 3 (bitwise), the weights
 * output and the weight-tile callback. ATTN_SANITIZED=1 drops the costly
 * cases whose values other cases also cover. */
#include "attn.h"
#include "check.h"
#include "internal.h"
#include "../src/kernels/flash.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* mask parts, combined as bit flags */
enum {
    M_CAUSAL_TL = 1 << 0,
    M_CAUSAL_BR = 1 << 1,
    M_WINDOW = 1 << 2,        /* (left, right) = (Lk/4 + 2, 3)              */
    M_WINDOW_NARROW = 1 << 3, /* (2, 1): narrower than any tile            */
    M_KEYLEN = 1 << 4,
    M_QLEN = 1 << 5,
    M_KEEP_PAD = 1 << 6,  /* (B, 1, 1, Lk) key padding                 */
    M_KEEP_FULL = 1 << 7, /* (B, H, Lq, Lk), some rows all zero        */
    M_BIAS = 1 << 8,      /* f32 (B, H, Lq, Lk) with a few -inf        */
    M_BIAS_BC = 1 << 9,   /* f64 (1, H, 1, Lk): broadcast              */
    M_BLOCK = 1 << 10,
    M_RANDOM = 1 << 11,
    M_HOLE = 1 << 12, /* keep: row r sees only the far keys (the
                                 near key tiles are all masked for it)     */
};

/* layouts of q, k, v (and of out) */
enum { LAY_BHLD = 0, LAY_BLHD = 1, LAY_PACKED = 2 };

typedef struct {
    int64_t B, H, Hkv, Lq, Lk, Dk, Dv;
    attn_dtype dt;
    int lay, out_lay;
    int mask;
    double dropout, scale, amp;
    int weights, threads_check, big;
} tcase;

static int sanitized;
static int ncase = 0; /* cases run so far: seeds and the keep dtype vary */

/* ---- tensors ---------------------------------------------------------- */

typedef struct {
    attn_tensor t;
    void *buf;
} tbuf;

static tbuf make_tensor(attn_dtype dt, int lay, int64_t B, int64_t H, int64_t L,
                        int64_t D) {
    tbuf r;
    size_t n = (size_t)(B * H * L * D) * (lay == LAY_PACKED ? 2 : 1);
    r.buf = calloc(n, attn_dtype_size(dt));
    if (lay == LAY_BLHD) {
        r.t = attn_tensor_bthd(r.buf, dt, B, L, H, D);
    } else {
        r.t = attn_tensor_4d(r.buf, dt, B, H, L, D);
        if (lay == LAY_PACKED) /* every other element of the last axis */
            for (int a = 0; a < 4; a++) r.t.stride[a] *= 2;
    }
    return r;
}

static void set_el(attn_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d,
                   double x) {
    int64_t o = attn__off(t, a, b, c, d);
    switch (t->dtype) {
    case ATTN_F32: ((float *)t->data)[o] = (float)x; break;
    case ATTN_F64: ((double *)t->data)[o] = x; break;
    case ATTN_F16: ((uint16_t *)t->data)[o] = attn_f32_to_f16((float)x); break;
    case ATTN_BF16:
        ((uint16_t *)t->data)[o] = attn_f32_to_bf16((float)x);
        break;
    default: break;
    }
}

static void fill(attn_tensor *t, double amp, unsigned long long *st) {
    for (int64_t a = 0; a < t->shape[0]; a++)
        for (int64_t b = 0; b < t->shape[1]; b++)
            for (int64_t c = 0; c < t->shape[2]; c++)
                for (int64_t d = 0; d < t->shape[3]; d++)
                    set_el(t, a, b, c, d, amp * test_rand(st));
}

/* ---- masks ------------------------------------------------------------ */

typedef struct {
    attn_mask m;
    int64_t *kl, *ql;
    tbuf keep, bias;
    uint8_t *layout;
    attn_tensor keep_t, bias_t;
} mbuild;

static void build_mask(mbuild *mb, const tcase *c, unsigned long long *st) {
    memset(mb, 0, sizeof *mb);
    attn_mask *m = &mb->m;
    attn_mask_init(m);
    int f = c->mask;
    int64_t B = c->B, H = c->H, Lq = c->Lq, Lk = c->Lk;
    if (f & (M_CAUSAL_TL | M_CAUSAL_BR)) {
        m->causal = 1;
        m->align =
            (f & M_CAUSAL_BR) ? ATTN_ALIGN_BOTTOM_RIGHT : ATTN_ALIGN_TOP_LEFT;
    }
    if (f & M_WINDOW) {
        m->window_left = Lk / 4 + 2;
        m->window_right = 3;
    }
    if (f & M_WINDOW_NARROW) {
        m->window_left = 2;
        m->window_right = 1;
        m->align = ATTN_ALIGN_BOTTOM_RIGHT;
    }
    if (f & M_KEYLEN) {
        mb->kl = malloc((size_t)B * sizeof(int64_t));
        for (int64_t b = 0; b < B; b++) mb->kl[b] = Lk - (b * 7 + Lk / 3) % Lk;
        m->key_lengths = mb->kl;
    }
    if (f & M_QLEN) {
        mb->ql = malloc((size_t)B * sizeof(int64_t));
        for (int64_t b = 0; b < B; b++) mb->ql[b] = Lq - (b * 5 + Lq / 4) % Lq;
        m->query_lengths = mb->ql;
    }
    if (f & (M_KEEP_PAD | M_KEEP_FULL | M_HOLE)) {
        int full = (f & (M_KEEP_FULL | M_HOLE)) != 0;
        /* the three keep dtypes in turn */
        const attn_dtype kd[3] = {ATTN_U8, ATTN_I32, ATTN_F32};
        attn_dtype kdt = kd[ncase % 3];
        mb->keep =
            make_tensor(kdt, LAY_BHLD, B, full ? H : 1, full ? Lq : 1, Lk);
        int64_t n = attn_tensor_numel(&mb->keep.t);
        for (int64_t x = 0; x < n; x++) {
            int64_t j = x % Lk, i = (x / Lk) % (full ? Lq : 1);
            int kv;
            if (f & M_HOLE) /* row i % 3 == 1 sees only the last quarter */
                kv = i % 3 == 1 ? j >= Lk - Lk / 4 - 1
                                : (j < Lk / 2 || j % 5 == 0);
            else if (full) /* random, with every 7th row fully masked */
                kv = i % 7 == 3 ? 0 : test_rand(st) > -0.4;
            else /* padding: the last third of the keys */
                kv = j < Lk - Lk / 3;
            if (kdt == ATTN_U8)
                ((uint8_t *)mb->keep.buf)[x] = (uint8_t)kv;
            else if (kdt == ATTN_I32)
                ((int32_t *)mb->keep.buf)[x] = kv ? -7 : 0;
            else
                ((float *)mb->keep.buf)[x] = kv ? 0.5f : 0.0f;
        }
        mb->keep_t = mb->keep.t;
        m->keep = &mb->keep_t;
    }
    if (f & (M_BIAS | M_BIAS_BC)) {
        int bc = (f & M_BIAS_BC) != 0;
        mb->bias = make_tensor(bc ? ATTN_F64 : ATTN_F32, LAY_BHLD, bc ? 1 : B,
                               H, bc ? 1 : Lq, Lk);
        int64_t n = attn_tensor_numel(&mb->bias.t);
        for (int64_t x = 0; x < n; x++) {
            double v = 2.0 * test_rand(st);
            if (!bc && x % 13 == 5) v = -INFINITY;
            if (bc)
                ((double *)mb->bias.buf)[x] = v;
            else
                ((float *)mb->bias.buf)[x] = (float)v;
        }
        mb->bias_t = mb->bias.t;
        m->bias = &mb->bias_t;
    }
    if (f & M_BLOCK) {
        int64_t bs = 16, rows = (Lq + bs - 1) / bs, cols = (Lk + bs - 1) / bs;
        m->block_size = bs;
        m->layout_heads = H;
        mb->layout = malloc((size_t)(H * rows * cols));
        for (int64_t x = 0; x < H * rows * cols; x++)
            mb->layout[x] = (x % 3 != 1) || (x % cols == 0);
        m->layout = mb->layout;
    }
    if (f & M_RANDOM) {
        m->random_block = 8;
        m->random_keep_p = 0.6;
        m->random_seed = 1234;
    }
}

static void free_mask(mbuild *mb) {
    free(mb->kl);
    free(mb->ql);
    free(mb->keep.buf);
    free(mb->bias.buf);
    free(mb->layout);
}

/* ---- the plain f32 computation (materialized, unfused) ---------------- */

static void plain_f32(const attn_tensor *q, const attn_tensor *k,
                      const attn_tensor *v, const attn_sdpa_opts *o,
                      const tcase *c, float *out, float *lse, float *w) {
    const attn_mask *m = &o->mask;
    float scale = (float)(o->scale > 0 ? o->scale : 1.0 / sqrt((double)c->Dk));
    float *s = malloc((size_t)c->Lk * sizeof(float));
    int64_t g = c->H / c->Hkv;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++) {
                float mx = -INFINITY;
                for (int64_t j = 0; j < c->Lk; j++) {
                    s[j] = -INFINITY;
                    if (!attn_mask_visible(m, b, h, i, j, c->Lq, c->Lk))
                        continue;
                    float acc = 0.0f;
                    for (int64_t d = 0; d < c->Dk; d++)
                        acc += (float)attn_tensor_get(q, b, h, i, d) *
                               (float)attn_tensor_get(k, b, h / g, j, d);
                    s[j] = scale * acc + (float)attn__bias_at(m, b, h, i, j);
                    if (s[j] > mx) mx = s[j];
                }
                float sum = 0.0f;
                for (int64_t j = 0; j < c->Lk; j++) {
                    s[j] = mx == -INFINITY ? 0.0f : expf(s[j] - mx);
                    sum += s[j];
                }
                int64_t row = (b * c->H + h) * c->Lq + i;
                lse[row] = mx == -INFINITY ? -INFINITY : mx + logf(sum);
                for (int64_t j = 0; j < c->Lk; j++) {
                    float x = sum > 0 ? s[j] / sum : 0.0f;
                    if (x != 0.0f && o->dropout_p > 0)
                        x = attn_dropout_kept(o->seed, o->dropout_p, b, h, i, j)
                                ? x * (float)(1.0 / (1.0 - o->dropout_p))
                                : 0.0f;
                    s[j] = x;
                    if (w) w[row * c->Lk + j] = x;
                }
                for (int64_t d = 0; d < c->Dv; d++) {
                    float acc = 0.0f;
                    for (int64_t j = 0; j < c->Lk; j++)
                        if (s[j] != 0.0f)
                            acc += s[j] *
                                   (float)attn_tensor_get(v, b, h / g, j, d);
                    out[row * c->Dv + d] = acc;
                }
            }
    free(s);
}

/* ---- comparisons ------------------------------------------------------ */

/* max |a - ref| over n values; -inf must match exactly (else: infinity) */
static double max_err_lse(const float *a, const float *ref, int64_t n) {
    double e = 0.0;
    for (int64_t x = 0; x < n; x++) {
        if (ref[x] == -INFINITY || a[x] == -INFINITY) {
            if (a[x] != ref[x]) return INFINITY;
            continue;
        }
        double d = fabs((double)a[x] - ref[x]);
        if (!(d <= e)) e = d; /* NaN propagates as the max */
    }
    return e;
}

static double max_err_view(const attn_tensor *t, const double *ref, int64_t B,
                           int64_t H, int64_t L, int64_t D) {
    double e = 0.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++)
                for (int64_t d = 0; d < D; d++) {
                    double x = attn_tensor_get(t, b, h, i, d);
                    double r = ref[((b * H + h) * L + i) * D + d];
                    double dd = fabs(x - r);
                    if (!(dd <= e)) e = dd;
                }
    return e;
}

static double max_err_f32(const float *a, const double *ref, int64_t n) {
    double e = 0.0;
    for (int64_t x = 0; x < n; x++) {
        double d = fabs((double)a[x] - ref[x]);
        if (!(d <= e)) e = d;
    }
    return e;
}

static void run_case(const tcase *c) {
    ncase++;
    unsigned long long st = 0x1234567ull + (unsigned long long)ncase * 7919;
    tbuf q = make_tensor(c->dt, c->lay, c->B, c->H, c->Lq, c->Dk);
    tbuf k = make_tensor(c->dt, c->lay, c->B, c->Hkv, c->Lk, c->Dk);
    tbuf v = make_tensor(c->dt, c->lay, c->B, c->Hkv, c->Lk, c->Dv);
    double amp = c->amp > 0 ? c->amp : 1.0;
    fill(&q.t, amp, &st);
    fill(&k.t, amp, &st);
    fill(&v.t, 1.0, &st);
    mbuild mb;
    build_mask(&mb, c, &st);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask = mb.m;
    o.scale = c->scale;
    o.dropout_p = c->dropout;
    o.seed = 99 + (uint64_t)ncase;
    const int64_t rows = c->B * c->H * c->Lq, nw = rows * c->Lk;

    /* the oracle: the reference with f64 outputs */
    double *oref = malloc((size_t)(rows * c->Dv) * sizeof(double));
    double *wref = c->weights ? malloc((size_t)nw * sizeof(double)) : NULL;
    float *lref = malloc((size_t)rows * sizeof(float));
    attn_tensor Oref = attn_tensor_4d(oref, ATTN_F64, c->B, c->H, c->Lq, c->Dv);
    attn_tensor Wref = attn_tensor_4d(wref, ATTN_F64, c->B, c->H, c->Lq, c->Lk);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&q.t, &k.t, &v.t, &o, &Oref,
                                   wref ? &Wref : NULL, lref),
                 ATTN_OK);

    /* the plain f32 computation: the yardstick of the tolerance */
    float *o32 = malloc((size_t)(rows * c->Dv) * sizeof(float));
    float *l32 = malloc((size_t)rows * sizeof(float));
    float *w32 = c->weights ? malloc((size_t)nw * sizeof(float)) : NULL;
    plain_f32(&q.t, &k.t, &v.t, &o, c, o32, l32, w32);
    double e32 = max_err_f32(o32, oref, rows * c->Dv);
    double e32l = max_err_lse(l32, lref, rows);
    double e32w = w32 ? max_err_f32(w32, wref, nw) : 0.0;

    /* flash */
    tbuf of = make_tensor(ATTN_F32, c->out_lay, c->B, c->H, c->Lq, c->Dv);
    tbuf wf = make_tensor(ATTN_F32, LAY_BHLD, c->B, c->H, c->Lq,
                          c->weights ? c->Lk : 1);
    float *lf = malloc((size_t)rows * sizeof(float));
    o.impl = ATTN_IMPL_FLASH;
    o.threads = 2;
    CHECK_STATUS(attn_sdpa_forward(&q.t, &k.t, &v.t, &o, &of.t,
                                   c->weights ? &wf.t : NULL, lf),
                 ATTN_OK);
    double ef = max_err_view(&of.t, oref, c->B, c->H, c->Lq, c->Dv);
    double efl = max_err_lse(lf, lref, rows);
    CHECK_MSG(
        ef <= 2.0 * e32 + 1e-6,
        "case %d (Lq %lld Lk %lld D %lld/%lld %s mask %#x): flash O error "
        "%.3g, plain f32 %.3g",
        ncase, (long long)c->Lq, (long long)c->Lk, (long long)c->Dk,
        (long long)c->Dv, attn_dtype_name(c->dt), c->mask, ef, e32);
    CHECK_MSG(efl <= 2.0 * e32l + 1e-6,
              "case %d: flash lse error %.3g, plain f32 %.3g", ncase, efl,
              e32l);
    if (c->weights) {
        double efw = max_err_f32(wf.buf, wref, nw);
        CHECK_MSG(efw <= 2.0 * e32w + 1e-6,
                  "case %d (Lq %lld Lk %lld scale %g tiles %lldx%lld vec %d): "
                  "flash weights error %.3g, plain f32 %.3g",
                  ncase, (long long)c->Lq, (long long)c->Lk, c->scale,
                  (long long)attn__flash_bq_override,
                  (long long)attn__flash_bk_override, attn__vec_get()->level,
                  efw, e32w);
    }
    /* fully masked rows: exactly 0 and -inf (compared with the reference) */
    for (int64_t r = 0; r < rows; r++)
        if (lref[r] == -INFINITY) {
            int64_t b = r / (c->H * c->Lq), h = (r / c->Lq) % c->H,
                    i = r % c->Lq;
            int zero = 1;
            for (int64_t d = 0; d < c->Dv; d++)
                zero &= attn_tensor_get(&of.t, b, h, i, d) == 0.0;
            CHECK_MSG(zero && lf[r] == -INFINITY, "case %d row %lld not 0/-inf",
                      ncase, (long long)r);
        }

    /* thread counts 1, 3 and 5 give the bits of 2 */
    if (c->threads_check) {
        for (int t = 1; t <= 5; t += 2) {
            tbuf o2 =
                make_tensor(ATTN_F32, c->out_lay, c->B, c->H, c->Lq, c->Dv);
            float *l2 = malloc((size_t)rows * sizeof(float));
            o.threads = t;
            CHECK_STATUS(
                attn_sdpa_forward(&q.t, &k.t, &v.t, &o, &o2.t, NULL, l2),
                ATTN_OK);
            size_t ob =
                (size_t)(rows * c->Dv) * (c->out_lay == LAY_PACKED ? 2 : 1);
            CHECK_MSG(memcmp(o2.buf, of.buf, ob * sizeof(float)) == 0 &&
                          memcmp(l2, lf, (size_t)rows * sizeof(float)) == 0,
                      "case %d: %d threads differ from 2", ncase, t);
            free(o2.buf);
            free(l2);
        }
    }
    free(q.buf);
    free(k.buf);
    free(v.buf);
    free(of.buf);
    free(wf.buf);
    free(oref);
    free(wref);
    free(lref);
    free(o32);
    free(l32);
    free(w32);
    free(lf);
    free_mask(&mb);
}

/* ---- the weight-tile callback ---------------------------------------- */

typedef struct {
    int64_t B, H, Lq, Lk;
    double *w; /* collected weights */
    int *seen; /* how often each entry was delivered */
    int calls, stop_after;
    int64_t last_b, last_h, last_q0, last_k0;
    int ordered;
} collect;

static int collect_tile(void *user, int64_t b, int64_t h, int64_t q0,
                        int64_t nq, int64_t k0, int64_t nk, const float *w,
                        int64_t ldw) {
    collect *c = user;
    /* row-major tile order within (b, h), (b, h) in order */
    int64_t key = ((b * c->H + h) * c->Lq + q0) * c->Lk + k0;
    int64_t last =
        ((c->last_b * c->H + c->last_h) * c->Lq + c->last_q0) * c->Lk +
        c->last_k0;
    if (c->calls > 0 && key <= last) c->ordered = 0;
    c->last_b = b;
    c->last_h = h;
    c->last_q0 = q0;
    c->last_k0 = k0;
    for (int64_t r = 0; r < nq; r++)
        for (int64_t j = 0; j < nk; j++) {
            int64_t x = ((b * c->H + h) * c->Lq + q0 + r) * c->Lk + k0 + j;
            c->w[x] = w[r * ldw + j];
            c->seen[x]++;
        }
    c->calls++;
    return c->stop_after > 0 && c->calls >= c->stop_after;
}

static void test_weight_tiles(void) {
    const int64_t B = 2, H = 3, Hkv = 1, Lq = 129, Lk = 600, D = 40;
    unsigned long long st = 5;
    tbuf q = make_tensor(ATTN_F16, LAY_BLHD, B, H, Lq, D);
    tbuf k = make_tensor(ATTN_F16, LAY_BLHD, B, Hkv, Lk, D);
    tbuf v = make_tensor(ATTN_F16, LAY_BLHD, B, Hkv, Lk, D);
    fill(&q.t, 1.0, &st);
    fill(&k.t, 1.0, &st);
    fill(&v.t, 1.0, &st);
    tcase c = {B,
               H,
               Hkv,
               Lq,
               Lk,
               D,
               D,
               ATTN_F16,
               0,
               0,
               M_CAUSAL_BR | M_BIAS | M_KEEP_FULL,
               0,
               0,
               0,
               1,
               0,
               0};
    mbuild mb;
    build_mask(&mb, &c, &st);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask = mb.m;
    int64_t rows = B * H * Lq, nw = rows * Lk;
    double *oref = malloc((size_t)(rows * D) * sizeof(double));
    double *wref = malloc((size_t)nw * sizeof(double));
    float *lref = malloc((size_t)rows * sizeof(float)),
          *lf = malloc((size_t)rows * 4);
    float *of = malloc((size_t)(rows * D) * sizeof(float));
    float *w32 = malloc((size_t)nw * sizeof(float)),
          *l32 = malloc((size_t)rows * 4);
    attn_tensor Oref = attn_tensor_4d(oref, ATTN_F64, B, H, Lq, D);
    attn_tensor Wref = attn_tensor_4d(wref, ATTN_F64, B, H, Lq, Lk);
    attn_tensor Of = attn_tensor_4d(of, ATTN_F32, B, H, Lq, D);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&q.t, &k.t, &v.t, &o, &Oref, &Wref, lref),
                 ATTN_OK);
    o.impl = ATTN_IMPL_AUTO;
    CHECK_STATUS(attn_sdpa_forward(&q.t, &k.t, &v.t, &o, &Of, NULL, lf),
                 ATTN_OK);
    plain_f32(&q.t, &k.t, &v.t, &o, &c, of, l32, w32); /* of reused: scratch */
    double e32w = max_err_f32(w32, wref, nw);

    collect col = {B,
                   H,
                   Lq,
                   Lk,
                   calloc((size_t)nw, sizeof(double)),
                   calloc((size_t)nw, sizeof(int)),
                   0,
                   0,
                   0,
                   0,
                   0,
                   0,
                   1};
    CHECK_STATUS(attn_sdpa_weight_tiles(&q.t, &k.t, lf, &o, collect_tile, &col),
                 ATTN_OK);
    int once = 1;
    for (int64_t x = 0; x < nw; x++) once &= col.seen[x] == 1;
    CHECK_MSG(once, "every weight delivered exactly once");
    CHECK(col.ordered);
    double ew = 0.0, rowsum_err = 0.0;
    int masked_zero = 1;
    for (int64_t x = 0; x < nw; x++) {
        double d = fabs(col.w[x] - wref[x]);
        if (!(d <= ew)) ew = d;
        if (wref[x] == 0.0 &&
            !attn_mask_visible(&o.mask, x / (H * Lq * Lk), (x / (Lq * Lk)) % H,
                               (x / Lk) % Lq, x % Lk, Lq, Lk))
            masked_zero &= col.w[x] == 0.0;
    }
    for (int64_t r = 0; r < rows; r++) {
        double s = 0.0;
        for (int64_t j = 0; j < Lk; j++) s += col.w[r * Lk + j];
        double want = lref[r] == -INFINITY ? 0.0 : 1.0;
        if (fabs(s - want) > rowsum_err) rowsum_err = fabs(s - want);
    }
    CHECK_MSG(ew <= 2.0 * e32w + 1e-6,
              "weight tiles error %.3g, plain f32 %.3g", ew, e32w);
    CHECK(masked_zero);
    CHECK_MSG(rowsum_err <= 1e-4, "weight rows sum to 1 (err %.3g)",
              rowsum_err);
    /* stopping early: the call returns OK after the callback said stop */
    collect stop = col;
    stop.calls = 0;
    stop.stop_after = 3;
    CHECK_STATUS(
        attn_sdpa_weight_tiles(&q.t, &k.t, lf, &o, collect_tile, &stop),
        ATTN_OK);
    CHECK(stop.calls == 3);
    /* argument errors */
    CHECK_STATUS(
        attn_sdpa_weight_tiles(&q.t, &k.t, NULL, &o, collect_tile, &col),
        ATTN_E_INVALID);
    CHECK_STATUS(attn_sdpa_weight_tiles(&q.t, &k.t, lf, &o, NULL, &col),
                 ATTN_E_INVALID);
    CHECK_STATUS(
        attn_sdpa_weight_tiles(&q.t, &k.t, lf, NULL, collect_tile, &col),
        ATTN_E_INVALID);
    free(col.w);
    free(col.seen);
    free(q.buf);
    free(k.buf);
    free(v.buf);
    free(oref);
    free(wref);
    free(lref);
    free(lf);
    free(of);
    free(w32);
    free(l32);
    free_mask(&mb);
}

/* flash refuses what it cannot serve, with a message */
static void test_errors(void) {
    double x[16] = {0};
    float y[16];
    attn_tensor q = attn_tensor_4d(x, ATTN_F64, 1, 1, 2, 8);
    attn_tensor o = attn_tensor_4d(y, ATTN_F32, 1, 1, 2, 8);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(attn_sdpa_forward(&q, &q, &q, &op, &o, NULL, NULL),
                 ATTN_E_UNSUPPORTED);
    /* non-finite inputs are refused, for each dtype and a strided view */
    const attn_dtype dts[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    for (int t = 0; t < 3; t++)
        for (int which = 0; which < 3; which++) {
            tbuf in[3];
            unsigned long long st = 3;
            for (int a = 0; a < 3; a++) {
                in[a] = make_tensor(dts[t], t == 2 ? LAY_PACKED : LAY_BLHD, 2,
                                    2, 9, 5);
                fill(&in[a].t, 1.0, &st);
            }
            set_el(&in[which].t, 1, 1, 7, 3, which == 1 ? INFINITY : NAN);
            tbuf ot = make_tensor(ATTN_F32, LAY_BHLD, 2, 2, 9, 5);
            CHECK_STATUS(attn_sdpa_forward(&in[0].t, &in[1].t, &in[2].t, &op,
                                           &ot.t, NULL, NULL),
                         ATTN_E_NONFINITE);
            CHECK(strstr(attn_last_error(), "[1, 1, 7, 3]") != NULL);
            for (int a = 0; a < 3; a++) free(in[a].buf);
            free(ot.buf);
        }
}

int main(void) {
    const char *s = getenv("ATTN_SANITIZED");
    sanitized = s && s[0] == '1';
#define F32 ATTN_F32
#define F16 ATTN_F16
#define BF16 ATTN_BF16
    /* B H Hkv Lq Lk Dk Dv dtype lay out_lay mask dropout scale amp
     * weights threads_check big */
    const tcase sweep[] = {
        {1, 2, 2, 1, 1, 1, 1, F32, LAY_BHLD, LAY_BHLD, 0, 0, 0, 0, 1, 1, 0},
        {1, 2, 1, 3, 17, 7, 7, F16, LAY_BLHD, LAY_BHLD, M_CAUSAL_TL, 0, 0, 0, 1,
         0, 0},
        {2, 2, 2, 17, 3, 16, 7, BF16, LAY_PACKED, LAY_BLHD, M_CAUSAL_BR, 0, 0,
         0, 0, 1, 0},
        {1, 4, 2, 64, 64, 40, 40, F32, LAY_BLHD, LAY_BHLD, M_WINDOW, 0, 0, 0, 1,
         1, 0},
        {1, 2, 2, 127, 129, 64, 80, F32, LAY_BHLD, LAY_PACKED,
         M_KEEP_FULL | M_BIAS, 0, 0, 0, 1, 1, 0},
        {2, 2, 1, 128, 127, 80, 64, F16, LAY_BHLD, LAY_BHLD, M_KEYLEN | M_QLEN,
         0, 0, 0, 0, 1, 0},
        {1, 3, 1, 129, 128, 128, 128, F32, LAY_PACKED, LAY_BHLD,
         M_BIAS_BC | M_CAUSAL_BR, 0, 0.05, 0, 0, 0, 0},
        {1, 2, 2, 257, 64, 256, 256, BF16, LAY_BLHD, LAY_BLHD, M_BLOCK, 0, 0, 0,
         0, 1, 0},
        {1, 1, 1, 1000, 3, 7, 16, F32, LAY_BHLD, LAY_BHLD, M_CAUSAL_TL, 0, 0, 0,
         1, 1, 0},
        {1, 1, 1, 3, 1000, 16, 1, F16, LAY_BHLD, LAY_BHLD,
         M_WINDOW_NARROW | M_KEYLEN, 0, 0, 0, 1, 0, 0},
        {1, 2, 2, 257, 257, 64, 64, F32, LAY_BHLD, LAY_BHLD, M_RANDOM, 0.2, 0,
         0, 1, 1, 0},
        {1, 2, 1, 1000, 1000, 64, 64, F32, LAY_BHLD, LAY_BLHD, M_CAUSAL_TL, 0,
         0, 0, 0, 1, 1},
        {1, 1, 1, 1000, 257, 128, 128, F16, LAY_BLHD, LAY_BHLD, M_KEEP_PAD, 0,
         0, 0, 0, 0, 1},
        {1, 2, 2, 17, 1000, 256, 40, BF16, LAY_BHLD, LAY_BHLD,
         M_CAUSAL_BR | M_BIAS, 0, 0, 0, 1, 0, 0},
        {2, 2, 2, 129, 257, 1, 1, F32, LAY_BLHD, LAY_BHLD, M_KEEP_FULL, 0, 0, 0,
         1, 1, 0},
        {1, 2, 2, 64, 129, 80, 7, F16, LAY_PACKED, LAY_BHLD, M_CAUSAL_TL, 0.3,
         0, 0, 1, 1, 0},
        {1, 4, 1, 128, 128, 16, 64, BF16, LAY_BHLD, LAY_BLHD,
         M_WINDOW | M_BIAS | M_QLEN, 0.1, 0, 0, 1, 1, 0},
        {1, 2, 2, 127, 1000, 40, 128, F32, LAY_BLHD, LAY_BHLD,
         M_BLOCK | M_KEEP_PAD | M_CAUSAL_BR, 0, 0, 0, 0, 1, 0},
        {2, 4, 2, 257, 129, 64, 16, F16, LAY_BHLD, LAY_BHLD,
         M_RANDOM | M_KEEP_FULL | M_KEYLEN | M_BIAS_BC, 0, 0, 0, 1, 1, 0},
        /* regression: a key tile fully masked for rows that are not */
        {1, 2, 2, 129, 700, 64, 64, F32, LAY_BHLD, LAY_BHLD, M_HOLE, 0, 0, 0, 1,
         1, 0},
        {1, 1, 1, 64, 700, 16, 16, F16, LAY_BHLD, LAY_BHLD,
         M_HOLE | M_CAUSAL_BR, 0, 0, 0, 1, 0, 0},
        /* regression: fully masked rows (query lengths, keep rows, bias) */
        {2, 2, 2, 129, 129, 64, 64, F32, LAY_BHLD, LAY_BHLD,
         M_QLEN | M_KEEP_FULL, 0, 0, 0, 1, 1, 0},
        /* regression: scores of magnitude 1e4 */
        {1, 2, 2, 129, 257, 64, 64, F32, LAY_BHLD, LAY_BHLD, 0, 0, 2000.0, 0, 1,
         1, 0},
        {1, 2, 2, 64, 300, 64, 64, BF16, LAY_BHLD, LAY_BHLD, M_CAUSAL_TL, 0,
         20.0, 13.0, 0, 0, 0},
        /* regression: a window narrower than a tile */
        {1, 2, 2, 300, 300, 40, 40, F32, LAY_BHLD, LAY_BHLD, M_WINDOW_NARROW, 0,
         0, 0, 1, 1, 0},
    };
    const int nsweep = (int)(sizeof sweep / sizeof sweep[0]);
    for (int x = 0; x < nsweep; x++)
        if (!(sanitized && sweep[x].big)) run_case(&sweep[x]);

    /* small and odd tile sizes: many tile boundaries, partial tiles, empty
     * key tiles in the middle of a row; the results stay within tolerance */
    const int64_t tiles[][3] = {
        {16, 16, 4}, {33, 17, 5}, {1, 64, 1}, {8, 5, 64}, {40, 24, 16}};
    for (int t = 0; t < 5; t++) {
        attn__flash_bq_override = tiles[t][0];
        attn__flash_bk_override = tiles[t][1];
        attn__flash_rc_override = tiles[t][2];
        for (int x = 0; x < nsweep; x++)
            if (sweep[x].Lq * sweep[x].Lk <= (sanitized ? 20000 : 80000) &&
                (x + t) % 3 == 0)
                run_case(&sweep[x]);
    }
    attn__flash_bq_override = attn__flash_bk_override = 0;
    attn__flash_rc_override = 0;

    /* the other vector levels this CPU has (scalar, AVX2) */
    for (int l = ATTN__VEC_SCALAR; l < (int)attn__vec_best(); l++) {
        attn__vec_set_max_level((attn__vec_level)l);
        for (int x = 0; x < nsweep; x += 3)
            if (!sweep[x].big) run_case(&sweep[x]);
    }
    attn__vec_set_max_level(ATTN__VEC_AVX512);

    test_weight_tiles();
    test_errors();
    printf("%d cases\n", ncase);
    return check_done("test_flash");
}
