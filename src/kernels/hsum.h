/* Horizontal sums of AVX2/AVX-512 registers in one fixed lane order
 * (halves, then quarters, then pairs), written once for every kernel that
 * reduces lanes: a fixed order keeps results the same bits on any thread
 * and lets the AVX-512 sum agree with the AVX2 one on the same values.
 * x86 only; include after <immintrin.h>. Internal: not installed. */
#ifndef ATTN_HSUM_H
#define ATTN_HSUM_H

#include <immintrin.h>

__attribute__((target("avx2"))) static inline float attn__hsum8(__m256 v) {
    __m128 s =
        _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx512f,avx2"))) static inline float
attn__hsum16(__m512 v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi =
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return attn__hsum8(_mm256_add_ps(lo, hi));
}

#endif /* ATTN_HSUM_H */
