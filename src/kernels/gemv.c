/* Matrix-vector products for decoding (gemv.h): f32 and the GGUF block
 * formats, AVX-512F, AVX2 + FMA + F16C and portable C.
 *
 * A block format's row is dotted block by block without writing the
 * dequantized values anywhere: for a block of 32 values with scale d
 * (and, for Q4_1, minimum m) sum_j (d q_j + m) x_j = d sum_j q_j x_j +
 * m sum_j x_j, and Q4_0's values d (q_j - 8) are the case m = -8 d. The
 * block sums of x, sum_j x_j, are made once per call and serve every row.
 * The q_j x_j products are taken in f32 after widening the 4- or 8-bit
 * q_j in registers: x keeps its full precision. gemv_x8.c's integer
 * products on x quantized to two bytes per value are faster with
 * AVX512_VNNI (attn bench --gemv), and the decoding steps' layers and
 * output head take them there; this kernel serves the other paths. */
#include "gemv.h"

#include "attn_gguf.h"
#include "cpu.h"
#include "internal.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include "hsum.h"
#define ATTN_GEMV_X86 1
#else
#define ATTN_GEMV_X86 0
#endif

/* W's rows a thread takes at a time: small enough to share out 576 rows
 * over a few threads, large enough that a chunk's rows stay in the cache
 * while every row of x uses them. */
#define CHUNK 16

size_t attn__q_row_bytes(int type, int64_t cols) {
    if (cols < 32 || cols % 32) return 0;
    const size_t nb = (size_t)(cols / 32);
    switch (type) {
    case ATTN_GGML_Q8_0: return nb * 34;
    case ATTN_GGML_Q4_0: return nb * 18;
    case ATTN_GGML_Q4_1: return nb * 20;
    default: return 0;
    }
}

float attn__gemv_half(const unsigned char *p) {
    const unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8;
    const unsigned e = h >> 10 & 31, f = h & 1023;
    float v;
    if (e == 0)
        v = ldexpf((float)f, -24);
    else if (e == 31)
        v = f ? NAN : INFINITY;
    else
        v = ldexpf((float)(f | 1024), (int)e - 25);
    return h & 0x8000 ? -v : v;
}

/* The value j of a block at p (the format's definition). */
static float q_value(int type, const unsigned char *p, int j) {
    const float d = attn__gemv_half(p);
    if (type == ATTN_GGML_Q8_0) {
        const int8_t q = (int8_t)p[2 + j];
        return d * (float)q;
    }
    if (type == ATTN_GGML_Q4_0) {
        const int q = j < 16 ? p[2 + j] & 15 : p[2 + j - 16] >> 4;
        return d * (float)(q - 8);
    }
    const int q = j < 16 ? p[4 + j] & 15 : p[4 + j - 16] >> 4;
    return d * (float)q + attn__gemv_half(p + 2);
}

/* ---- references --------------------------------------------------------- */

void attn__gemv_f32_ref(int64_t n, int64_t rows, int64_t cols, const float *x,
                        const float *w, float *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0.0;
            for (int64_t j = 0; j < cols; j++)
                s += (double)w[r * cols + j] * (double)x[i * cols + j];
            y[i * rows + r] = (float)s;
        }
}

void attn__gemv_q_ref(int64_t n, const attn__qmat *w0, const float *x,
                      float *y) {
    attn__qmat w[1];
    void *copy;
    if (attn__q_readable(1, w0, 0, w, &copy)) return;
    const size_t rb = attn__q_row_bytes(w->type, w->cols);
    const size_t bb = rb / (size_t)(w->cols / 32);
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < w->rows; r++) {
            const unsigned char *row =
                (const unsigned char *)w->data + (size_t)r * rb;
            double s = 0.0;
            for (int64_t j = 0; j < w->cols; j++)
                s += (double)q_value(w->type, row + (size_t)(j / 32) * bb,
                                     (int)(j % 32)) *
                     (double)x[i * w->cols + j];
            y[i * w->rows + r] = (float)s;
        }
    attn__free(copy);
}

/* ---- row dot products: portable C --------------------------------------- */

static float dot_f32_c(const float *w, const float *x, int64_t cols) {
    float s[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8)
        for (int k = 0; k < 8; k++) s[k] += w[j + k] * x[j + k];
    for (; j < cols; j++) s[0] += w[j] * x[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* sum_j q_j x_j of block p, and its d and m (m: the multiplier of the
 * block's x sum). */
static float block_c(int type, const unsigned char *p, const float *x, float *d,
                     float *m) {
    float s = 0.0f;
    *d = attn__gemv_half(p);
    if (type == ATTN_GGML_Q8_0) {
        *m = 0.0f;
        for (int j = 0; j < 32; j++) s += (float)(int8_t)p[2 + j] * x[j];
        return s;
    }
    const unsigned char *q = p + (type == ATTN_GGML_Q4_0 ? 2 : 4);
    *m = type == ATTN_GGML_Q4_0 ? -8.0f * *d : attn__gemv_half(p + 2);
    for (int j = 0; j < 16; j++)
        s += (float)(q[j] & 15) * x[j] + (float)(q[j] >> 4) * x[16 + j];
    return s;
}

static float dot_q_c(int type, const unsigned char *row, size_t bb,
                     const float *x, const float *sx, int64_t nb) {
    float acc = 0.0f, macc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        float d, m;
        const float s = block_c(type, row + (size_t)b * bb, x + 32 * b, &d, &m);
        acc += d * s;
        macc += m * sx[b];
    }
    return acc + macc;
}

#if ATTN_GEMV_X86

/* ---- AVX2 + FMA + F16C -------------------------------------------------- */

#define T2 __attribute__((target("avx2,fma,f16c")))

T2 static inline float half2(const unsigned char *p) {
    unsigned short h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

T2 static float dot_f32_avx2(const float *w, const float *x, int64_t cols) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t j = 0;
    for (; j + 32 <= cols; j += 32) {
        a0 =
            _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8),
                             _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 16),
                             _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 24),
                             _mm256_loadu_ps(x + j + 24), a3);
    }
    for (; j + 8 <= cols; j += 8)
        a0 =
            _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
    float s = attn__hsum8(
        _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < cols; j++) s += w[j] * x[j];
    return s;
}

/* 8 unsigned bytes (the low 8 of v) as floats */
T2 static inline __m256 u8f(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

T2 static inline __m256 s8f(const unsigned char *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64((const __m128i *)(const void *)p)));
}

T2 static float dot_q_avx2(int type, const unsigned char *row, size_t bb,
                           const float *x, const float *sx, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    float macc = 0.0f;
    const __m128i low = _mm_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *p = row + (size_t)b * bb;
        const float *xb = x + 32 * b;
        const float d = half2(p);
        __m256 s;
        if (type == ATTN_GGML_Q8_0) {
            s = _mm256_mul_ps(s8f(p + 2), _mm256_loadu_ps(xb));
            s = _mm256_fmadd_ps(s8f(p + 10), _mm256_loadu_ps(xb + 8), s);
            s = _mm256_fmadd_ps(s8f(p + 18), _mm256_loadu_ps(xb + 16), s);
            s = _mm256_fmadd_ps(s8f(p + 26), _mm256_loadu_ps(xb + 24), s);
        } else {
            const int q1 = type == ATTN_GGML_Q4_1;
            const __m128i v = _mm_loadu_si128(
                (const __m128i *)(const void *)(p + 2 + 2 * q1));
            const __m128i lo = _mm_and_si128(v, low);
            const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low);
            s = _mm256_mul_ps(u8f(lo), _mm256_loadu_ps(xb));
            s = _mm256_fmadd_ps(u8f(_mm_srli_si128(lo, 8)),
                                _mm256_loadu_ps(xb + 8), s);
            s = _mm256_fmadd_ps(u8f(hi), _mm256_loadu_ps(xb + 16), s);
            s = _mm256_fmadd_ps(u8f(_mm_srli_si128(hi, 8)),
                                _mm256_loadu_ps(xb + 24), s);
            macc += (q1 ? half2(p + 2) : -8.0f * d) * sx[b];
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
    }
    return attn__hsum8(acc) + macc;
}

/* ---- AVX-512F ----------------------------------------------------------- */

#define T5 __attribute__((target("avx512f,avx2,fma,f16c")))

T5 static float dot_f32_avx512(const float *w, const float *x, int64_t cols) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t j = 0;
    for (; j + 64 <= cols; j += 64) {
        a0 =
            _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 16),
                             _mm512_loadu_ps(x + j + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 32),
                             _mm512_loadu_ps(x + j + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 48),
                             _mm512_loadu_ps(x + j + 48), a3);
    }
    for (; j + 16 <= cols; j += 16)
        a0 =
            _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), a0);
    if (j < cols) {
        const __mmask16 k = (__mmask16)((1u << (cols - j)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, w + j),
                             _mm512_maskz_loadu_ps(k, x + j), a1);
    }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

T5 static inline __m512 u8f16(__m128i v) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}

T5 static float dot_q_avx512(int type, const unsigned char *row, size_t bb,
                             const float *x, const float *sx, int64_t nb) {
    __m512 acc = _mm512_setzero_ps();
    float macc = 0.0f;
    const __m128i low = _mm_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *p = row + (size_t)b * bb;
        const float *xb = x + 32 * b;
        const float d = half2(p);
        __m512 s;
        if (type == ATTN_GGML_Q8_0) {
            const __m128i v0 =
                _mm_loadu_si128((const __m128i *)(const void *)(p + 2));
            const __m128i v1 =
                _mm_loadu_si128((const __m128i *)(const void *)(p + 18));
            s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v0)),
                              _mm512_loadu_ps(xb));
            s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v1)),
                                _mm512_loadu_ps(xb + 16), s);
        } else {
            const int q1 = type == ATTN_GGML_Q4_1;
            const __m128i v = _mm_loadu_si128(
                (const __m128i *)(const void *)(p + 2 + 2 * q1));
            const __m128i lo = _mm_and_si128(v, low);
            const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low);
            s = _mm512_mul_ps(u8f16(lo), _mm512_loadu_ps(xb));
            s = _mm512_fmadd_ps(u8f16(hi), _mm512_loadu_ps(xb + 16), s);
            macc += (q1 ? half2(p + 2) : -8.0f * d) * sx[b];
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc);
    }
    return _mm512_reduce_add_ps(acc) + macc;
}

#endif /* ATTN_GEMV_X86 */

/* ---- the products ------------------------------------------------------- */

typedef float (*dot_f32_fn)(const float *, const float *, int64_t);
typedef float (*dot_q_fn)(int, const unsigned char *, size_t, const float *,
                          const float *, int64_t);

static dot_f32_fn pick_f32(void) {
#if ATTN_GEMV_X86
    const attn__isa isa = attn__isa_get();
    if (isa >= ATTN__ISA_AVX512) return dot_f32_avx512;
    if (isa >= ATTN__ISA_AVX2) return dot_f32_avx2;
#endif
    return dot_f32_c;
}

static dot_q_fn pick_q(void) {
#if ATTN_GEMV_X86
    const attn__isa isa = attn__isa_get();
    if (isa >= ATTN__ISA_AVX512) return dot_q_avx512;
    if (isa >= ATTN__ISA_AVX2) return dot_q_avx2;
#endif
    return dot_q_c;
}

void attn__gemv_f32(int64_t n, int64_t rows, int64_t cols, const float *x,
                    const float *w, float *y, int threads) {
    const dot_f32_fn dot = pick_f32();
    const int64_t chunks = (rows + CHUNK - 1) / CHUNK;
    const int th = attn__omp_threads(threads);
#pragma omp parallel for num_threads(th)                                       \
    schedule(static) if (th > 1 && chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t r1 = (c + 1) * CHUNK < rows ? (c + 1) * CHUNK : rows;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = c * CHUNK; r < r1; r++)
                y[i * rows + r] = dot(w + r * cols, x + i * cols, cols);
    }
}

int attn__gemv_q(int64_t n, const attn__qmat *w0, const float *x, float *y,
                 int threads) {
    attn__qmat w[1];
    void *copy;
    if (attn__q_readable(1, w0, 0, w, &copy)) return -1;
    const dot_q_fn dot = pick_q();
    const int64_t rows = w->rows, cols = w->cols, nb = cols / 32;
    const size_t rb = attn__q_row_bytes(w->type, cols), bb = rb / (size_t)nb;
    /* the block sums of x: Q4_0's and Q4_1's second term */
    float *sx = attn__alloc((size_t)(n * nb), sizeof(float), "block sums");
    if (!sx) {
        attn__free(copy);
        return -1;
    }
    for (int64_t b = 0; b < n * nb; b++) {
        double s = 0.0;
        for (int j = 0; j < 32; j++) s += x[32 * b + j];
        sx[b] = (float)s;
    }
    const int64_t chunks = (rows + CHUNK - 1) / CHUNK;
    const int th = attn__omp_threads(threads);
    const unsigned char *base = w->data;
#pragma omp parallel for num_threads(th)                                       \
    schedule(static) if (th > 1 && chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t r1 = (c + 1) * CHUNK < rows ? (c + 1) * CHUNK : rows;
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = c * CHUNK; r < r1; r++)
                y[i * rows + r] = dot(w->type, base + (size_t)r * rb, bb,
                                      x + i * cols, sx + i * nb, nb);
    }
    attn__free(sx);
    attn__free(copy);
    return 0;
}
