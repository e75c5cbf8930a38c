/* Matrix-vector products on block-format weights with x quantized per
 * block of 32 values (gemv.h: attn__gemv_qx): integer dot products,
 * AVX512_VNNI, AVX2 and portable C.
 *
 * Each block of x becomes a scale e = max |x_j| / 127 and two signed
 * bytes per value, x_j ~ e (p_j + r_j / 256): p_j = round(x_j / e) and r_j
 * the rounded remainder in 256ths of e, so x keeps about 16 bits against
 * its block's largest value (the error is at most e / 512 per value). A
 * weight block with scale d and, for Q4_1, minimum m then dots as
 *   sum_j (d q_j + m) x_j = d e / 256 * sum_j q_j (256 p_j + r_j)
 *                           + m * (x's block sum, as quantized),
 * the first sum exact in 32-bit integers; Q4_0's values d (q_j - 8) are
 * the case m = -8 d. One byte per value (x to 8 bits, as llama.cpp's
 * Q8_0/Q8_1 activations) would halve the integer work, but its error
 * (e / 2 per value) changes SmolLM2's greedy continuations against
 * transformers (2 of 8 prompts in the fixture, from the 7th new token:
 * docs/smollm2.md); 16 bits keep them. The integer sums run 64 byte
 * products per instruction (vpdpbusd) where widening the 4-bit values to
 * f32 runs 16 (gemv.c), which is compute-bound at decode's sizes (bench:
 * attn bench --gemv). */
#include "gemv.h"

#include "attn_gguf.h"
#include "cpu.h"
#include "internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include "hsum.h"
#define ATTN_X8_X86 1
#else
#define ATTN_X8_X86 0
#endif

/* Rows a thread takes at a time (as gemv.c): whole groups of the packed
 * layout's 4 rows. */
#define CHUNK 16

/* Bytes of x for one step of 4 blocks in the packed kernel's order: p of
 * values 0..15 of the 4 blocks (16 bytes each), p of values 16..31, then
 * r the same; and 32 floats: the 4 blocks' e, then their sums, each
 * repeated 4 times (lane 4 k + r meets row r's block k). */
enum { XP_BYTES = 256, XP_FLOATS = 32 };

/* The quantized x of one product: per block of 32 values its bytes p and
 * r, and in e the scale (e / 256 of the comment above) and the block's
 * sum as quantized, side by side. */
typedef struct {
    const int8_t *p, *r;
    const float *e;
    const int16_t *w; /* 256 p + r: Q8_0's products take x as words */
} xq;

static int clamp127(long v) { return v > 127 ? 127 : v < -127 ? -127 : (int)v; }

void attn__quantize_x16(int64_t nb, const float *x, int8_t *p, int8_t *r,
                        float *e) {
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        int finite = 1; /* fmaxf would pass over a NaN */
        for (int j = 0; j < 32; j++) {
            finite &= fabsf(xb[j]) <= FLT_MAX;
            amax = fmaxf(amax, fabsf(xb[j]));
        }
        if (!finite || amax == 0.0f) {
            /* zeros stay zeros; NaN or Inf anywhere makes the block NaN */
            memset(p + 32 * b, 0, 32);
            memset(r + 32 * b, 0, 32);
            e[2 * b] = e[2 * b + 1] = finite ? 0.0f : NAN;
            continue;
        }
        const float inv = 127.0f / amax;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            const float t = xb[j] * inv; /* |t| <= 127 */
            const float hi = rintf(t);
            const int a = clamp127(lrintf(hi)),
                      c = clamp127(lrintf((t - hi) * 256.0f));
            p[32 * b + j] = (int8_t)a;
            r[32 * b + j] = (int8_t)c;
            sum += 256 * a + c;
        }
        e[2 * b] = amax / (127.0f * 256.0f);
        e[2 * b + 1] = e[2 * b] * (float)sum;
    }
}

/* The block's minimum multiplier m (0 for Q8_0) and where its values
 * start. */
static int q_off(int type) {
    return type == ATTN_GGML_Q8_0 ? 2 : type == ATTN_GGML_Q4_0 ? 2 : 4;
}

/* The value j of a block as stored (0..15, or -128..127 for Q8_0). */
static int q_int(int type, const unsigned char *blk, int j) {
    const unsigned char *q = blk + q_off(type);
    if (type == ATTN_GGML_Q8_0) return (int8_t)q[j];
    return j < 16 ? q[j] & 15 : q[j - 16] >> 4;
}

/* sum_j q_j (256 p_j + r_j) of one weight block */
static int32_t block_isum(int type, const unsigned char *blk, const int8_t *p,
                          const int8_t *r) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += q_int(type, blk, j) * (256 * p[j] + r[j]);
    return s;
}

static float block_min(int type, const unsigned char *blk, float d) {
    return type == ATTN_GGML_Q4_1   ? attn__gemv_half(blk + 2)
           : type == ATTN_GGML_Q4_0 ? -8.0f * d
                                    : 0.0f;
}

/* ---- the reference: double sums over the same quantized x ------------- */

void attn__gemv_qx_ref(int64_t n, const attn__qmat *w0, const float *x,
                       float *y) {
    attn__qmat w[1];
    void *copy;
    if (attn__q_readable(1, w0, 0, w, &copy)) return;
    const int64_t nb = w->cols / 32;
    const size_t rb = attn__q_row_bytes(w->type, w->cols), bb = rb / (size_t)nb;
    int8_t p[32], rr[32];
    float e[2];
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < w->rows; r++) {
            const unsigned char *row =
                (const unsigned char *)w->data + (size_t)r * rb;
            double s = 0.0;
            for (int64_t b = 0; b < nb; b++) {
                attn__quantize_x16(1, x + i * w->cols + 32 * b, p, rr, e);
                const unsigned char *blk = row + (size_t)b * bb;
                const double d = attn__gemv_half(blk),
                             m = block_min(w->type, blk, (float)d);
                for (int j = 0; j < 32; j++)
                    s += (d * q_int(w->type, blk, j) + m) *
                         ((double)e[0] * (256.0 * p[j] + rr[j]));
            }
            y[i * w->rows + r] = (float)s;
        }
    attn__free(copy);
}

/* ---- row dot products: portable C --------------------------------------- */

static float dot_c(int type, const unsigned char *row, size_t bb, xq x,
                   int64_t nb) {
    float acc = 0.0f, macc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *blk = row + (size_t)b * bb;
        const float d = attn__gemv_half(blk);
        acc += d * x.e[2 * b] *
               (float)block_isum(type, blk, x.p + 32 * b, x.r + 32 * b);
        macc += block_min(type, blk, d) * x.e[2 * b + 1];
    }
    return acc + macc;
}

#if ATTN_X8_X86

static inline float half_x(const unsigned char *p)
    __attribute__((target("f16c")));
static inline float half_x(const unsigned char *p) {
    unsigned short h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ---- AVX2: vpmaddubsw + vpmaddwd ---------------------------------------- */

#define T2 __attribute__((target("avx2,fma,f16c")))

/* block_min with the F16C conversion */
T2 static inline float block_min_x(int type, const unsigned char *blk,
                                   float d) {
    return type == ATTN_GGML_Q4_1 ? half_x(blk + 2) : -8.0f * d;
}

/* The 32 values of a 4-bit block as bytes 0..15, in x's order: the low
 * nibbles (values 0..15), then the high ones (16..31). */
T2 static inline __m256i nibbles2(const unsigned char *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
    const __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(v),
                                              _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(w, _mm256_set1_epi8(15));
}

/* 8 lanes of 32-bit sums of u_j s_j: maddubs' 16-bit pair sums stay
 * below 2^15 (|u| <= 128, |s| <= 127), so nothing saturates. */
T2 static inline __m256i dot_us2(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* 8 lanes summing to sum_j q_j (256 p_j + r_j) for one block */
T2 static inline __m256i block_is2(int q8, const unsigned char *q,
                                   const int8_t *p8, const int8_t *r8) {
    __m256i px = _mm256_loadu_si256((const __m256i *)(const void *)p8);
    __m256i rx = _mm256_loadu_si256((const __m256i *)(const void *)r8);
    __m256i w;
    if (q8) { /* signed weights: |w| times x's bytes with w's sign */
        w = _mm256_loadu_si256((const __m256i *)(const void *)q);
        px = _mm256_sign_epi8(px, w);
        rx = _mm256_sign_epi8(rx, w);
        w = _mm256_abs_epi8(w);
    } else {
        w = nibbles2(q);
    }
    return _mm256_add_epi32(_mm256_slli_epi32(dot_us2(w, px), 8),
                            dot_us2(w, rx));
}

T2 static float dot_avx2(int type, const unsigned char *row, size_t bb, xq x,
                         int64_t nb) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float macc = 0.0f;
    const int off = q_off(type), q8 = type == ATTN_GGML_Q8_0;
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *blk = row + (size_t)b * bb;
        const __m256i is = block_is2(q8, blk + off, x.p + 32 * b, x.r + 32 * b);
        const float d = half_x(blk);
        const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(is),
                                       _mm256_set1_ps(d * x.e[2 * b]));
        if (b & 1)
            acc1 = _mm256_add_ps(acc1, f);
        else
            acc0 = _mm256_add_ps(acc0, f);
        if (!q8) macc += block_min_x(type, blk, d) * x.e[2 * b + 1];
    }
    return attn__hsum8(_mm256_add_ps(acc0, acc1)) + macc;
}

/* ---- AVX-512 with VNNI: vpdpbusd, two blocks per instruction ------------ */

#define T5                                                                     \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,"     \
                          "f16c")))

/* attn__quantize_x16 16 values a step: the same operations in the same
 * roundings (rint and the conversions in the current rounding mode, the
 * maximum and the integer sum exact in any order), so the same bytes;
 * w16, if not NULL, gets 256 p + r per value. */
T5 static void quantize_avx512(int64_t nb, const float *x, int8_t *p, int8_t *r,
                               int16_t *w16, float *e) {
    const __m512 big = _mm512_set1_ps(FLT_MAX), k256 = _mm512_set1_ps(256.0f);
    const __m512i hi7 = _mm512_set1_epi32(127), lo7 = _mm512_set1_epi32(-127);
    for (int64_t b = 0; b < nb; b++) {
        const __m512 x0 = _mm512_loadu_ps(x + 32 * b),
                     x1 = _mm512_loadu_ps(x + 32 * b + 16);
        const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
        const int finite = (_mm512_cmp_ps_mask(a0, big, _CMP_LE_OQ) &
                            _mm512_cmp_ps_mask(a1, big, _CMP_LE_OQ)) == 0xffff;
        const float amax =
            finite ? _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) : 0.0f;
        if (!finite || amax == 0.0f) {
            memset(p + 32 * b, 0, 32);
            memset(r + 32 * b, 0, 32);
            if (w16) memset(w16 + 32 * b, 0, 64);
            e[2 * b] = e[2 * b + 1] = finite ? 0.0f : NAN;
            continue;
        }
        const __m512 inv = _mm512_set1_ps(127.0f / amax);
        __m512i sum = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512 t = _mm512_mul_ps(h ? x1 : x0, inv);
            const __m512 hi = _mm512_roundscale_ps(t, _MM_FROUND_CUR_DIRECTION);
            const __m512i a = _mm512_max_epi32(
                              _mm512_min_epi32(_mm512_cvtps_epi32(hi), hi7),
                              lo7),
                          c = _mm512_max_epi32(
                              _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(
                                                   _mm512_sub_ps(t, hi), k256)),
                                               hi7),
                              lo7);
            const __m512i v = _mm512_add_epi32(_mm512_slli_epi32(a, 8), c);
            sum = _mm512_add_epi32(sum, v);
            const int64_t o = 32 * b + 16 * h;
            _mm_storeu_si128((__m128i *)(void *)(p + o),
                             _mm512_cvtepi32_epi8(a));
            _mm_storeu_si128((__m128i *)(void *)(r + o),
                             _mm512_cvtepi32_epi8(c));
            if (w16)
                _mm256_storeu_si256((__m256i *)(void *)(w16 + o),
                                    _mm512_cvtepi32_epi16(v));
        }
        e[2 * b] = amax / (127.0f * 256.0f);
        e[2 * b + 1] = e[2 * b] * (float)_mm512_reduce_add_epi32(sum);
    }
}

/* 16 lanes, the first 8 summing to block b0's sum_j q_j (256 p_j + r_j),
 * the last 8 to block b1's, lane k holding values 4k .. 4k + 3 (x's bytes
 * of the two blocks at p8, r8, its words at w16). Q8_0's signed weights
 * take words (vpdpwssd: one instruction a block, no sign fix-up); the
 * 4-bit ones bytes, two vpdpbusd for both blocks. */
T5 static inline __m512i pair_is(int q8, const unsigned char *q0,
                                 const unsigned char *q1, const int8_t *p8,
                                 const int8_t *r8, const int16_t *w16) {
    if (q8) { /* signed bytes widened to words against x's words: lane
               * pairs summed into the byte products' four-value lanes */
        const __m512i s0 = _mm512_dpwssd_epi32(
                          _mm512_setzero_si512(),
                          _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                              (const __m256i *)(const void *)q0)),
                          _mm512_loadu_si512((const void *)w16)),
                      s1 = _mm512_dpwssd_epi32(
                          _mm512_setzero_si512(),
                          _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                              (const __m256i *)(const void *)q1)),
                          _mm512_loadu_si512((const void *)(w16 + 32)));
        const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                             20, 22, 24, 26, 28, 30);
        return _mm512_add_epi32(
            _mm512_permutex2var_epi32(s0, ev, s1),
            _mm512_permutex2var_epi32(
                s0, _mm512_add_epi32(ev, _mm512_set1_epi32(1)), s1));
    }
    const __m512i px = _mm512_loadu_si512((const void *)p8),
                  rx = _mm512_loadu_si512((const void *)r8),
                  w = _mm512_inserti64x4(_mm512_castsi256_si512(nibbles2(q0)),
                                         nibbles2(q1), 1);
    return _mm512_dpbusd_epi32(
        _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, px),
                          8),
        w, rx);
}

/* Four blocks a step: their scales (and minimums) converted together,
 * d and m of block k meeting x's e and block sum in lanes 2k, 2k + 1;
 * a pair's two scales spread over its 16 lanes by one permutation. A last
 * pair (576 values: 18 blocks) goes the same way, an odd last block
 * alone. */
T5 static float dot_vnni(int type, const unsigned char *row, size_t bb, xq x,
                         int64_t nb) {
    __m512 acc = _mm512_setzero_ps();
    __m256 macc = _mm256_setzero_ps();
    const int off = q_off(type), q8 = type == ATTN_GGML_Q8_0,
              q40 = type == ATTN_GGML_Q4_0;
    const __m512i lo = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2,
                                         2, 2, 2),
                  hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const unsigned char *b0 = row + (size_t)b * bb, *b1 = b0 + bb,
                            *b2 = b1 + bb, *b3 = b2 + bb;
        int32_t h[4];
        memcpy(&h[0], b0, 4);
        memcpy(&h[1], b1, 4);
        memcpy(&h[2], b2, 4);
        memcpy(&h[3], b3, 4);
        /* d0 m0 d1 m1 d2 m2 d3 m3 (Q8_0: the odd lanes unused) */
        __m256 dm =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
        if (q40)
            dm = _mm256_mask_mul_ps(dm, 0xaa, _mm256_moveldup_ps(dm),
                                    _mm256_set1_ps(-8.0f));
        const __m256 sc = _mm256_mul_ps(dm, _mm256_loadu_ps(x.e + 2 * b));
        if (!q8) macc = _mm256_mask_add_ps(macc, 0xaa, macc, sc);
        const __m512 s512 = _mm512_castps256_ps512(sc);
        const __m512i i01 = pair_is(q8, b0 + off, b1 + off, x.p + 32 * b,
                                    x.r + 32 * b, x.w + 32 * b),
                      i23 = pair_is(q8, b2 + off, b3 + off, x.p + 32 * b + 64,
                                    x.r + 32 * b + 64, x.w + 32 * b + 64);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i01),
                              _mm512_permutexvar_ps(lo, s512), acc);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i23),
                              _mm512_permutexvar_ps(hi, s512), acc);
    }
    if (b + 2 <= nb) { /* d0 m0 d1 m1 */
        const unsigned char *b0 = row + (size_t)b * bb, *b1 = b0 + bb;
        int32_t h[2];
        memcpy(&h[0], b0, 4);
        memcpy(&h[1], b1, 4);
        __m128 dm =
            _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)h));
        if (q40)
            dm = _mm_mask_mul_ps(dm, 0xa, _mm_moveldup_ps(dm),
                                 _mm_set1_ps(-8.0f));
        const __m128 sc = _mm_mul_ps(dm, _mm_loadu_ps(x.e + 2 * b));
        if (!q8)
            macc =
                _mm256_mask_add_ps(macc, 0xa, macc, _mm256_castps128_ps256(sc));
        acc = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(pair_is(q8, b0 + off, b1 + off, x.p + 32 * b,
                                       x.r + 32 * b, x.w + 32 * b)),
            _mm512_permutexvar_ps(lo, _mm512_castps128_ps512(sc)), acc);
        b += 2;
    }
    float s = _mm512_reduce_add_ps(acc) + attn__hsum8(macc), m = 0.0f;
    if (b < nb) { /* an odd last block */
        const unsigned char *blk = row + (size_t)b * bb;
        const float d = half_x(blk);
        s += d * x.e[2 * b] *
             attn__hsum8(_mm256_cvtepi32_ps(
                 block_is2(q8, blk + off, x.p + 32 * b, x.r + 32 * b)));
        if (!q8) m += block_min_x(type, blk, d) * x.e[2 * b + 1];
    }
    return s + m;
}

/* ---- AVX-512 with VNNI on the packed layout (gemv_pack.c) --------------- */

/* The 16 lanes of four rows' 32-bit sums t[0..3] (block k in lanes
 * 4 k .. 4 k + 3 of each) as one vector: row r's sum of block k in lane
 * 4 k + r. */
T5 static inline __m512i rows4(const __m512i *t) {
    const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(t[0], t[1]),
                                       _mm512_unpackhi_epi32(t[0], t[1])),
                  b = _mm512_add_epi32(_mm512_unpacklo_epi32(t[2], t[3]),
                                       _mm512_unpackhi_epi32(t[2], t[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b),
                            _mm512_unpackhi_epi64(a, b));
}

/* y[0..3] = the four rows of group g (nb blocks each) dotted with x. The
 * 4-bit values take x's signed bytes on vpdpbusd as they are; Q8_0's
 * signed values take x's bytes plus 128 (p ^ 0x80) as the unsigned side,
 * 128 times the values' sum (one more vpdpbusd) taken back off. */
T5 static void group_vnni(int type, const unsigned char *g, int64_t nb,
                          const unsigned char *xb, const float *xf, float *y) {
    const int q8 = type == ATTN_GGML_Q8_0, q41 = type == ATTN_GGML_Q4_1;
    const size_t bb = q8 ? 34 : q41 ? 20 : 18, qb = q8 ? 32 : 16;
    const __m512i low = _mm512_set1_epi8(15), k80 = _mm512_set1_epi8(-128);
    __m512 acc = _mm512_setzero_ps(), macc = _mm512_setzero_ps();
    for (int64_t s = 0; 4 * s < nb; s++) {
        const int64_t kb = nb - 4 * s < 4 ? nb - 4 * s : 4;
        const __mmask64 qm =
            kb == 4 ? ~(__mmask64)0 : ((__mmask64)1 << (16 * kb)) - 1;
        const __mmask16 hm = (__mmask16)((1u << (4 * kb)) - 1);
        const unsigned char *t = g + (size_t)s * 16 * bb,
                            *x = xb + s * XP_BYTES;
        const float *xs = xf + s * XP_FLOATS;
        __m512i plo = _mm512_loadu_si512((const void *)x),
                phi = _mm512_loadu_si512((const void *)(x + 64)),
                rlo = _mm512_loadu_si512((const void *)(x + 128)),
                rhi = _mm512_loadu_si512((const void *)(x + 192));
        __m512i sum[4];
        if (q8) {
            plo = _mm512_xor_si512(plo, k80);
            phi = _mm512_xor_si512(phi, k80);
            rlo = _mm512_xor_si512(rlo, k80);
            rhi = _mm512_xor_si512(rhi, k80);
        }
        for (int r = 0; r < 4; r++) {
            const unsigned char *q = t + (size_t)(r * kb) * qb;
            __m512i lo = _mm512_maskz_loadu_epi8(qm, q), hi;
            if (q8) {
                hi = _mm512_maskz_loadu_epi8(qm, q + kb * 16);
            } else {
                hi = _mm512_and_si512(_mm512_srli_epi16(lo, 4), low);
                lo = _mm512_and_si512(lo, low);
            }
            const __m512i z = _mm512_setzero_si512();
            __m512i ap, ar;
            if (q8) { /* x's bytes unsigned, the values signed */
                const __m512i c = _mm512_dpbusd_epi32(
                    _mm512_dpbusd_epi32(z, k80, lo), k80, hi);
                ap = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, plo, lo), phi,
                                         hi);
                ar = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, rlo, lo), rhi,
                                         hi);
                ap = _mm512_sub_epi32(ap, c);
                ar = _mm512_sub_epi32(ar, c);
            } else {
                ap = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo, plo), hi,
                                         phi);
                ar = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo, rlo), hi,
                                         rhi);
            }
            sum[r] = _mm512_add_epi32(_mm512_slli_epi32(ap, 8), ar);
        }
        const unsigned char *sc = t + 4 * (size_t)kb * qb;
        const __m512 d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(hm, sc)),
                     e = _mm512_loadu_ps(xs);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(rows4(sum)),
                              _mm512_mul_ps(d, e), acc);
        if (q41)
            macc = _mm512_fmadd_ps(
                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(hm, sc + 8 * kb)),
                _mm512_loadu_ps(xs + 16), macc);
        else if (!q8)
            macc = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(-8.0f)),
                                   _mm512_loadu_ps(xs + 16), macc);
    }
    /* row r: lanes r, r + 4, r + 8, r + 12 */
    const __m512 v = _mm512_add_ps(acc, macc);
    const __m256 h = _mm256_add_ps(
        _mm512_castps512_ps256(v),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    _mm_storeu_ps(
        y, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}
#endif /* ATTN_X8_X86 */

/* ---- the product -------------------------------------------------------- */

typedef float (*dot_fn)(int, const unsigned char *, size_t, xq, int64_t);

static dot_fn pick(void) {
#if ATTN_X8_X86
    const attn__isa isa = attn__isa_get();
    if (attn__isa_vnni()) return dot_vnni;
    if (isa >= ATTN__ISA_AVX2) return dot_avx2;
#endif
    return dot_c;
}

void attn__quantize_x16_fast(int64_t nb, const float *x, int8_t *p, int8_t *r,
                             int16_t *w16, float *e) {
#if ATTN_X8_X86
    if (attn__isa_get() >= ATTN__ISA_AVX512) {
        quantize_avx512(nb, x, p, r, w16, e);
        return;
    }
#endif
    attn__quantize_x16(nb, x, p, r, e);
    for (int64_t j = 0; w16 && j < 32 * nb; j++)
        w16[j] = (int16_t)(256 * p[j] + r[j]);
}

const char *attn__gemv_qx_path(void) {
#if ATTN_X8_X86
    const dot_fn f = pick();
    if (f == dot_vnni) return "avx512_vnni";
    if (f == dot_avx2) return "avx2";
#endif
    return "c";
}

/* x (n, nb blocks) as quantized (p, r, e) in the packed kernel's order:
 * xb (n, steps, XP_BYTES), xf (n, steps, XP_FLOATS), a last step's
 * missing blocks zero. */
static void x_packed(int64_t n, int64_t nb, const int8_t *p, const int8_t *r,
                     const float *e, unsigned char *xb, float *xf) {
    const int64_t steps = (nb + 3) / 4;
    memset(xb, 0, (size_t)(n * steps * XP_BYTES));
    memset(xf, 0, sizeof(float) * (size_t)(n * steps * XP_FLOATS));
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t at = i * nb + b, s = i * steps + b / 4, k = b % 4;
            unsigned char *o = xb + s * XP_BYTES + 16 * k;
            memcpy(o, p + 32 * at, 16);
            memcpy(o + 64, p + 32 * at + 16, 16);
            memcpy(o + 128, r + 32 * at, 16);
            memcpy(o + 192, r + 32 * at + 16, 16);
            for (int j = 0; j < 4; j++) {
                xf[s * XP_FLOATS + 4 * k + j] = e[2 * at];
                xf[s * XP_FLOATS + 16 + 4 * k + j] = e[2 * at + 1];
            }
        }
}

/* Rows r0 .. r1 of matrix w (r0 a multiple of 4) against row i of x:
 * packed groups of 4 rows through group_vnni, other rows through dot. */
static void rows_of(dot_fn dot, const attn__qmat *w, int64_t r0, int64_t r1,
                    const xq *xi, const unsigned char *xb, const float *xf,
                    float *y) {
    const int64_t nb = w->cols / 32;
    const size_t rb = attn__q_row_bytes(w->type, w->cols), bb = rb / (size_t)nb;
    const unsigned char *base = w->data;
    int64_t row = r0;
#if ATTN_X8_X86
    if (w->packed) {
        const int64_t top = w->rows / 4 * 4 < r1 ? w->rows / 4 * 4 : r1;
        for (; row < top; row += 4)
            group_vnni(w->type, base + (size_t)row * rb, nb, xb, xf, y + row);
    }
#else
    (void)xb;
    (void)xf;
#endif
    for (; row < r1; row++)
        y[row] = dot(w->type, base + (size_t)row * rb, bb, *xi, nb);
}

int attn__gemv_qx_many(int64_t n, int k, const attn__qmat *w0, const float *x,
                       float *const *y, int threads) {
    const dot_fn dot = pick();
    const int64_t cols = w0[0].cols, nb = cols / 32, steps = (nb + 3) / 4;
    int packed_ok = 0, any_packed = 0;
#if ATTN_X8_X86
    packed_ok = dot == dot_vnni;
#endif
    attn__qmat w[ATTN__GEMV_MANY];
    void *copies;
    if (attn__q_readable(k, w0, packed_ok, w, &copies)) return -1;
    int64_t first[ATTN__GEMV_MANY + 1]; /* matrix m's first chunk */
    first[0] = 0;
    for (int m = 0; m < k; m++) {
        first[m + 1] = first[m] + (w[m].rows + CHUNK - 1) / CHUNK;
        any_packed |= w[m].packed;
    }
    /* e pairs, p and r bytes, words; the packed kernel's x */
    const size_t xpk =
        any_packed ? (size_t)(steps * (XP_BYTES + 4 * XP_FLOATS)) : 0;
    float *e = attn__alloc(
        (size_t)n, (size_t)nb * (2 * sizeof(float) + 128) + xpk, "quantized x");
    if (!e) {
        attn__free(copies);
        return -1;
    }
    int8_t *p = (int8_t *)(e + 2 * n * nb), *r = p + n * nb * 32;
    int16_t *xw = (int16_t *)(void *)(r + n * nb * 32);
    float *xf = (float *)(void *)(xw + n * nb * 32);
    unsigned char *xb = (unsigned char *)(xf + n * steps * XP_FLOATS);
    attn__quantize_x16_fast(n * nb, x, p, r, xw, e);
    if (any_packed) x_packed(n, nb, p, r, e, xb, xf);
    const int64_t chunks = first[k];
    const int th = attn__omp_threads(threads);
#pragma omp parallel for num_threads(th)                                       \
    schedule(static) if (th > 1 && chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        int m = 0;
        while (c >= first[m + 1]) m++;
        const int64_t rows = w[m].rows, r0 = (c - first[m]) * CHUNK,
                      r1 = r0 + CHUNK < rows ? r0 + CHUNK : rows;
        for (int64_t i = 0; i < n; i++) {
            const xq xi = {p + i * nb * 32, r + i * nb * 32, e + 2 * i * nb,
                           xw + i * nb * 32};
            rows_of(dot, &w[m], r0, r1, &xi, xb + i * steps * XP_BYTES,
                    xf + i * steps * XP_FLOATS, y[m] + i * rows);
        }
    }
    attn__free(e);
    attn__free(copies);
    return 0;
}

int attn__gemv_qx(int64_t n, const attn__qmat *w, const float *x, float *y,
                  int threads) {
    return attn__gemv_qx_many(n, 1, w, x, &y, threads);
}

int attn__gemv_q_many(int64_t n, int k, const attn__qmat *w, const float *x,
                      float *const *y, int threads) {
#if ATTN_X8_X86
    if (pick() == dot_vnni) return attn__gemv_qx_many(n, k, w, x, y, threads);
#endif
    for (int m = 0; m < k; m++)
        if (attn__gemv_q(n, &w[m], x, y[m], threads)) return -1;
    return 0;
}
