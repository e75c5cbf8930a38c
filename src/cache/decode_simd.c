/* Vector versions of the decode kernel's inner loops (decode.h): AVX2 +
 * FMA + F16C, and AVX-512F, from one body (decode_simd.inc). Stored f16,
 * bf16 and q8 values are widened to f32 in registers: f16 by vcvtph2ps,
 * bf16 by a 16-bit shift, q8 by sign extension, int-to-float and the
 * block's scale. */
#include "decode.h"

#define elem attn__decode_elem

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include "../kernels/hsum.h"

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
#define HSUM(x) attn__hsum8(x)

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
#define HSUM(x) attn__hsum16(x)

#include "decode_simd.inc"

/* The process's path (cpu.h) includes F16C from AVX2 up. */
static int cpu_has(attn__vec_level level) {
    const attn__isa isa = attn__isa_cpu();
    if (level == ATTN__VEC_AVX512) return isa >= ATTN__ISA_AVX512;
    return isa >= ATTN__ISA_AVX2;
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
