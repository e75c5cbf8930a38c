/* Vector versions of the decode kernel's inner loops (decode.h): AVX2 +
 * FMA + F16C, and AVX-512F, from one body (decode_simd.inc). Stored f16,
 * bf16 and q8 values are widened to f32 in registers: f16 by vcvtph2ps,
 * bf16 by a 16-bit shift, q8 by sign extension, int-to-float and the
 * block's scale. */
#include "decode.h"

#define elem attn__decode_elem

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* ---- AVX2 + FMA + F16C ---------------------------------------------- */

#define SFX avx2
#define T __attribute__((target("avx2,fma,f16c")))
#define VEC __m256
#define VL 8
#define LOADF(p) _mm256_loadu_ps(p)
#define STOREF(p, x) _mm256_storeu_ps(p, x)
#define SET1(x) _mm256_set1_ps(x)
#define ZERO _mm256_setzero_ps()
#define MUL(a, b) _mm256_mul_ps(a, b)
#define ADD(a, b) _mm256_add_ps(a, b)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define CVT_F16(p)                                                             \
    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define CVT_BF16(p)                                                            \
    _mm256_castsi256_ps(                                                       \
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(               \
                              (const __m128i *)(const void *)(p))),            \
                          16))
#define CVT_Q8(p)                                                              \
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(                                   \
        _mm_loadl_epi64((const __m128i *)(const void *)(p))))
#define HSUM(x) hsum_avx2(x)

T static inline float hsum_avx2(__m256 v) {
    __m128 s =
        _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

#include "decode_simd.inc"

#undef SFX
#undef T
#undef VEC
#undef VL
#undef LOADF
#undef STOREF
#undef SET1
#undef ZERO
#undef MUL
#undef ADD
#undef FMA
#undef CVT_F16
#undef CVT_BF16
#undef CVT_Q8
#undef HSUM

/* ---- AVX-512F -------------------------------------------------------- */

#define SFX avx512
#define T __attribute__((target("avx512f,avx2,fma,f16c")))
#define VEC __m512
#define VL 16
#define LOADF(p) _mm512_loadu_ps(p)
#define STOREF(p, x) _mm512_storeu_ps(p, x)
#define SET1(x) _mm512_set1_ps(x)
#define ZERO _mm512_setzero_ps()
#define MUL(a, b) _mm512_mul_ps(a, b)
#define ADD(a, b) _mm512_add_ps(a, b)
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define CVT_F16(p)                                                             \
    _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define CVT_BF16(p)                                                            \
    _mm512_castsi512_ps(                                                       \
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(            \
                              (const __m256i *)(const void *)(p))),            \
                          16))
#define CVT_Q8(p)                                                              \
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(                                   \
        _mm_loadu_si128((const __m128i *)(const void *)(p))))
#define HSUM(x) hsum_avx512(x)

/* halves, then the AVX2 order: fixed, whatever the compiler's reduce is */
T static inline float hsum_avx512(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi =
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 h = _mm256_add_ps(lo, hi);
    __m128 s =
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

#include "decode_simd.inc"

/* F16C by CPUID (attn__cpu_has_f16c): the OS keeps the YMM state
 * whenever "avx2" holds. */
static int cpu_has(attn__vec_level level) {
    int avx2 = __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && attn__cpu_has_f16c();
    if (level == ATTN__VEC_AVX512)
        return avx2 && __builtin_cpu_supports("avx512f");
    return avx2;
}

const attn__decode_ops *attn__decode_simd_ops(attn_dtype dtype,
                                              attn__vec_level level) {
    if (level == ATTN__VEC_SCALAR || !cpu_has(level)) return NULL;
    const int w = level == ATTN__VEC_AVX512;
    switch (dtype) {
    case ATTN_F16: return w ? &ops_f16_avx512 : &ops_f16_avx2;
    case ATTN_BF16: return w ? &ops_bf16_avx512 : &ops_bf16_avx2;
    case ATTN_Q8: return w ? &ops_q8_avx512 : &ops_q8_avx2;
    default: return w ? &ops_f32_avx512 : &ops_f32_avx2;
    }
}

#else /* not x86: the scalar loops only */

const attn__decode_ops *attn__decode_simd_ops(attn_dtype dtype,
                                              attn__vec_level level) {
    (void)dtype;
    (void)level;
    return NULL;
}

#endif
