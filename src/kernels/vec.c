/* Vectorized exp and row reductions (see vec.h). The exp is the classic
 * range reduction x = n ln2 + r (|r| <= ln2/2, ln2 split in two parts so
 * n ln2 is exact), a degree-6 polynomial for e^r (Cephes' coefficients),
 * and a scaling by 2^n done in two halves so that n = -126 .. 128 all stay
 * representable. Tails shorter than a vector go through a padded buffer
 * filled with -inf (whose exp is 0), so they use the very same code. */
#include "vec.h"

#include "attn.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include "hsum.h"
#define ATTN_X86 1
#else
#define ATTN_X86 0
#endif

/* ln(FLT_MIN): below it the result would be subnormal; we flush to 0 */
#define EXP_LO (-87.33654475f)
/* ln(FLT_MAX) */
#define EXP_HI 88.72283905f

/* ---------------------------------------------------------------- scalar */

static float exp1(float x) {
    if (x < EXP_LO) return 0.0f; /* includes -inf */
    return expf(x);
}

static void exp_scalar(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = exp1(x[i]);
}

static float max_scalar(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static float exp_sub_sum_scalar(float *x, int64_t n, float m) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = exp1(x[i] - m);
        s += x[i];
    }
    return s;
}

static void scale_scalar(float *x, int64_t n, float a) {
    for (int64_t i = 0; i < n; i++) x[i] *= a;
}

/* tanh(y) = y P(y^2) / Q(y^2) for |y| <= 9 (beyond, tanh rounds to +-1 in
 * float), P and Q of degree 4, fitted here for relative error (2e-8 in
 * exact arithmetic, 4e-7 with float coefficients). One division and nine
 * FMAs: a third of the exp-based 1 - 2 / (e^2y + 1), with no cancellation
 * near 0. */
#define TANH_CLAMP 9.0f
#define TANH_P1 0.13380366563796997f
#define TANH_P2 0.0034948226530104876f
#define TANH_P3 2.0597253751475364e-05f
#define TANH_P4 1.3339825244429449e-08f
#define TANH_Q1 0.46713683009147644f
#define TANH_Q2 0.025874024257063866f
#define TANH_Q3 0.00032844149973243475f
#define TANH_Q4 7.770153160890914e-07f

float attn__vec_tanh1(float y) {
    if (y > TANH_CLAMP) y = TANH_CLAMP;
    if (y < -TANH_CLAMP) y = -TANH_CLAMP;
    const float z = y * y;
    float p = ((TANH_P4 * z + TANH_P3) * z + TANH_P2) * z + TANH_P1;
    float q = (((TANH_Q4 * z + TANH_Q3) * z + TANH_Q2) * z + TANH_Q1) * z;
    float t = y * (p * z + 1.0f) / (q + 1.0f);
    return t > 1.0f ? 1.0f : t < -1.0f ? -1.0f : t;
}

static void softcap_scalar(float *x, int64_t n, float cap, float *capd) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) {
        float t = attn__vec_tanh1(x[i] * inv);
        x[i] = cap * t;
        if (capd) capd[i] = 1.0f - t * t;
    }
}

static const attn__vec_ops ops_scalar = {ATTN__VEC_SCALAR, exp_scalar,
                                         max_scalar,       exp_sub_sum_scalar,
                                         scale_scalar,     softcap_scalar};

#if ATTN_X86
/* ------------------------------------------------------------ AVX2 + FMA */

#define T_AVX2 __attribute__((target("avx2,fma")))

T_AVX2 static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(EXP_LO), hi = _mm256_set1_ps(EXP_HI);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n =
        _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    /* 2^n as 2^a * 2^b with a = n >> 1, b = n - a, both in [-63, 64] */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i a = _mm256_srai_epi32(ni, 1), b = _mm256_sub_epi32(ni, a);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 sa =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(a, bias), 23));
    __m256 sb =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(b, bias), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, sa), sb);
    p = _mm256_andnot_ps(under, p); /* x < ln(FLT_MIN) or -inf: 0 */
    return _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), over);
}

/* Loads the n < 8 tail into a vector padded with -inf. */
T_AVX2 static inline __m256 load_tail(const float *x, int64_t n) {
    float buf[8];
    for (int i = 0; i < 8; i++) buf[i] = i < n ? x[i] : -INFINITY;
    return _mm256_loadu_ps(buf);
}

T_AVX2 static inline void store_tail(float *y, __m256 v, int64_t n) {
    float buf[8];
    _mm256_storeu_ps(buf, v);
    memcpy(y, buf, (size_t)n * sizeof(float));
}

/* horizontal sum/max in a fixed lane order */

T_AVX2 static inline float hmax8(__m256 v) {
    __m128 s =
        _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

T_AVX2 static void exp_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) store_tail(y + i, exp8(load_tail(x + i, n - i)), n - i);
}

T_AVX2 static float max_avx2(const float *x, int64_t n) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    if (i < n) m1 = _mm256_max_ps(m1, load_tail(x + i, n - i));
    return hmax8(_mm256_max_ps(m0, m1));
}

T_AVX2 static float exp_sub_sum_avx2(float *x, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), mv));
        _mm256_storeu_ps(x + i, e0);
        _mm256_storeu_ps(x + i + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        s0 = _mm256_add_ps(s0, e);
    }
    if (i < n) {
        __m256 e = exp8(_mm256_sub_ps(load_tail(x + i, n - i), mv));
        store_tail(x + i, e, n - i);
        s1 = _mm256_add_ps(s1, e);
    }
    return attn__hsum8(_mm256_add_ps(s0, s1));
}

T_AVX2 static void scale_avx2(float *x, int64_t n, float a) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), av));
    for (; i < n; i++) x[i] *= a;
}

T_AVX2 static inline __m256 tanh8(__m256 y) {
    const __m256 c = _mm256_set1_ps(TANH_CLAMP), one = _mm256_set1_ps(1.0f);
    y = _mm256_min_ps(_mm256_max_ps(y, _mm256_sub_ps(_mm256_setzero_ps(), c)),
                      c);
    const __m256 z = _mm256_mul_ps(y, y);
    __m256 p =
        _mm256_fmadd_ps(_mm256_set1_ps(TANH_P4), z, _mm256_set1_ps(TANH_P3));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P2));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P1));
    p = _mm256_fmadd_ps(p, z, one);
    __m256 q =
        _mm256_fmadd_ps(_mm256_set1_ps(TANH_Q4), z, _mm256_set1_ps(TANH_Q3));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(TANH_Q2));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(TANH_Q1));
    q = _mm256_fmadd_ps(q, z, one);
    __m256 t = _mm256_div_ps(_mm256_mul_ps(y, p), q);
    return _mm256_min_ps(
        _mm256_max_ps(t, _mm256_sub_ps(_mm256_setzero_ps(), one)), one);
}

T_AVX2 static void softcap_avx2(float *x, int64_t n, float cap, float *capd) {
    const __m256 cv = _mm256_set1_ps(cap), iv = _mm256_set1_ps(1.0f / cap);
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 t = tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(cv, t));
        if (capd) _mm256_storeu_ps(capd + i, _mm256_fnmadd_ps(t, t, one));
    }
    if (i < n) {
        /* the tail padded with -inf: clamped, stored only where it is x */
        __m256 t = tanh8(_mm256_mul_ps(load_tail(x + i, n - i), iv));
        store_tail(x + i, _mm256_mul_ps(cv, t), n - i);
        if (capd) store_tail(capd + i, _mm256_fnmadd_ps(t, t, one), n - i);
    }
}

static const attn__vec_ops ops_avx2 = {ATTN__VEC_AVX2, exp_avx2,
                                       max_avx2,       exp_sub_sum_avx2,
                                       scale_avx2,     softcap_avx2};

/* --------------------------------------------------------------- AVX-512 */

#define T_AVX512 __attribute__((target("avx512f")))

/* As exp8, in fewer operations (the softmax runs it on every score): n
 * rounded by adding 1.5 * 2^23 inside the FMA, the polynomial closed by two
 * FMAs, x clamped above at 89 where scalef overflows to +inf by itself,
 * and the flush below EXP_LO folded into scalef's zeroing mask. */
T_AVX512 static inline __m512 exp16(__m512 x) {
    const __m512 magic = _mm512_set1_ps(12582912.0f); /* 1.5 * 2^23 */
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 lo = _mm512_set1_ps(EXP_LO);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    const __m512 xc =
        _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(89.0f));
    const __m512 n = _mm512_sub_ps(
        _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic),
        magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, r, one); /* 1 + r q */
    p = _mm512_fmadd_ps(p, r, one); /* 1 + r + r^2 q */
    /* p * 2^n with correct overflow; 0 below EXP_LO (and for -inf) */
    return _mm512_maskz_scalef_ps(keep, p, n);
}

static inline __mmask16 tail_mask(int64_t n) {
    return (__mmask16)((1u << n) - 1u);
}

T_AVX512 static void exp_avx512(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i);
        _mm512_mask_storeu_ps(y + i, k, exp16(v));
    }
}

T_AVX512 static float max_avx512(const float *x, int64_t n) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
    }
    for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    if (i < n)
        m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY),
                                                    tail_mask(n - i), x + i));
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

T_AVX512 static float exp_sub_sum_avx512(float *x, int64_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
        __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), mv));
        _mm512_storeu_ps(x + i, e0);
        _mm512_storeu_ps(x + i + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
        _mm512_storeu_ps(x + i, e);
        s0 = _mm512_add_ps(s0, e);
    }
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i);
        __m512 e = exp16(_mm512_sub_ps(v, mv));
        _mm512_mask_storeu_ps(x + i, k, e);
        s1 = _mm512_add_ps(s1, e);
    }
    /* a fixed reduction order (a tree: four dependent adds, where a
     * running sum over the lanes made the softmax of a row wait on 16):
     * the result depends only on the row */
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

T_AVX512 static void scale_avx512(float *x, int64_t n, float a) {
    const __m512 av = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), av));
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(
            x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), av));
    }
}

/* The bf16 flash forward's softmax step (vec.h): one pass from the raw
 * scores to the rounded weights, the f32 sum kept for l. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) float
attn__vec_exp_bf16(const float *x, int64_t n, float a, float m, uint16_t *y) {
    const __m512 av = _mm512_set1_ps(a), mv = _mm512_set1_ps(m);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 e0 =
            exp16(_mm512_fmsub_ps(av, _mm512_loadu_ps(x + i), mv));
        const __m512 e1 =
            exp16(_mm512_fmsub_ps(av, _mm512_loadu_ps(x + i + 16), mv));
        _mm512_storeu_si512(y + i, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
        const __m512 v =
            _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i);
        /* -inf stays -inf through a x - m (a > 0): exp gives 0 */
        const __m512 e = exp16(_mm512_fmsub_ps(av, v, mv));
        _mm256_mask_storeu_epi16(y + i, k, (__m256i)_mm512_cvtneps_pbh(e));
        s1 = _mm512_add_ps(s1, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* soft-capping keeps the AVX2 op: it is not where the time goes */
static const attn__vec_ops ops_avx512 = {ATTN__VEC_AVX512, exp_avx512,
                                         max_avx512,       exp_sub_sum_avx512,
                                         scale_avx512,     softcap_avx2};
#else
float attn__vec_exp_bf16(const float *x, int64_t n, float a, float m,
                         uint16_t *y) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float e = exp1(a * x[i] - m);
        y[i] = attn_f32_to_bf16(e);
        s += e;
    }
    return s;
}
#endif /* ATTN_X86 */

/* ------------------------------------------------------------- dispatch */

/* The row helpers' level is the process's path (cpu.h) up to AVX-512: the
 * bf16 and AMX paths add tile products, not row helpers. */
static attn__vec_level of_isa(attn__isa isa) {
    return isa >= ATTN__ISA_AVX512 ? ATTN__VEC_AVX512
           : isa == ATTN__ISA_AVX2 ? ATTN__VEC_AVX2
                                   : ATTN__VEC_SCALAR;
}

attn__vec_level attn__vec_best(void) { return of_isa(attn__isa_get()); }

void attn__vec_set_max_level(attn__vec_level level) {
    attn__isa_set_max(level >= ATTN__VEC_AVX512 ? ATTN__ISA_AMX
                                                : (attn__isa)level);
}

const attn__vec_ops *attn__vec_table(attn__vec_level level) {
#if ATTN_X86
    attn__vec_level have = of_isa(attn__isa_cpu());
    if (level > have) level = have;
    if (level == ATTN__VEC_AVX512) return &ops_avx512;
    if (level == ATTN__VEC_AVX2) return &ops_avx2;
#else
    (void)level;
#endif
    return &ops_scalar;
}
