/* The decoding matrix-vector products (src/kernels/gemv.c) on every
 * instruction-set path this CPU has: f32 and the block formats Q8_0, Q4_0
 * and Q4_1 against the plain references (double sums), the block formats
 * also against the GGUF reader's dequantization followed by the f32
 * product, on odd shapes and 1..7 rows of x; and the same bits on 1, 2
 * and 3 threads. */
#include "attn.h"
#include "attn_gguf.h"
#include "check.h"
#include "../src/kernels/cpu.h"
#include "../src/kernels/gemv.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float uniform(void) { return (float)next_u32() / 4294967296.0f; }

/* |got - want| within a few roundings of the sum of |terms| */
static int close_to(float got, float want, double scale, int64_t cols) {
    return fabs((double)got - (double)want) <=
           1e-6 * (double)(cols + 8) * scale + 1e-30;
}

static void test_f32(attn__isa isa) {
    static const int64_t dims[] = {1, 3, 17, 129, 576};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            for (int64_t n = 1; n <= 7; n += 3) {
                const int64_t rows = dims[a], cols = dims[b];
                float *w = malloc(sizeof(float) * (size_t)(rows * cols));
                float *x = malloc(sizeof(float) * (size_t)(n * cols));
                float *ref = malloc(sizeof(float) * (size_t)(n * rows));
                float *y[3];
                for (int t = 0; t < 3; t++)
                    y[t] = malloc(sizeof(float) * (size_t)(n * rows));
                for (int64_t i = 0; i < rows * cols; i++)
                    w[i] = uniform() * 2 - 1;
                for (int64_t i = 0; i < n * cols; i++) x[i] = uniform() * 4 - 2;
                attn__gemv_f32_ref(n, rows, cols, x, w, ref);
                for (int t = 0; t < 3; t++)
                    attn__gemv_f32(n, rows, cols, x, w, y[t], t + 1);
                int bad = 0, diff = 0;
                for (int64_t i = 0; i < n * rows; i++) {
                    bad += !close_to(y[0][i], ref[i], 2.0, cols);
                    diff += memcmp(&y[0][i], &y[1][i], 4) != 0 ||
                            memcmp(&y[0][i], &y[2][i], 4) != 0;
                }
                CHECK_MSG(!bad, "%s f32 n=%lld rows=%lld cols=%lld: %d off",
                          attn__isa_name(isa), (long long)n, (long long)rows,
                          (long long)cols, bad);
                CHECK_MSG(!diff, "%s f32 rows=%lld cols=%lld: threads differ",
                          attn__isa_name(isa), (long long)rows,
                          (long long)cols);
                free(w);
                free(x);
                free(ref);
                for (int t = 0; t < 3; t++) free(y[t]);
            }
}

/* An IEEE half of v (normal range, rounded toward zero: exactness of the
 * scale does not matter here). */
static void put_half(unsigned char *p, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    const uint32_t s = u >> 31, e = u >> 23 & 255, f = u & 0x7fffff;
    uint16_t h = (uint16_t)(s << 15);
    if (v != 0.0f) h |= (uint16_t)((e - 112) << 10 | f >> 13);
    p[0] = (unsigned char)h;
    p[1] = (unsigned char)(h >> 8);
}

static void fill_blocks(int type, unsigned char *buf, size_t nbytes) {
    const size_t bb = type == ATTN_GGML_Q8_0   ? 34
                      : type == ATTN_GGML_Q4_0 ? 18
                                               : 20;
    for (size_t i = 0; i < nbytes; i++) buf[i] = (unsigned char)next_u32();
    for (size_t at = 0; at < nbytes; at += bb) {
        put_half(buf + at, (uniform() + 0.01f) * 0.05f);
        if (type == ATTN_GGML_Q4_1)
            put_half(buf + at + 2, -(uniform() * 0.4f + 0.001f));
    }
}

static void test_q(attn__isa isa, int type) {
    static const int64_t rdims[] = {1, 3, 17, 129};
    static const int64_t cdims[] = {32, 96, 576, 1536};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int64_t n = 1; n <= 7; n += 2) {
                const int64_t rows = rdims[a], cols = cdims[b];
                const size_t rb = attn__q_row_bytes(type, cols);
                unsigned char *q = malloc(rb * (size_t)rows);
                fill_blocks(type, q, rb * (size_t)rows);
                const attn__qmat W = {type, rows, cols, q, 0};
                float *x = malloc(sizeof(float) * (size_t)(n * cols));
                float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
                float *ref = malloc(sizeof(float) * (size_t)(n * rows));
                float *deq = malloc(sizeof(float) * (size_t)(n * rows));
                float *y[3];
                for (int t = 0; t < 3; t++)
                    y[t] = malloc(sizeof(float) * (size_t)(n * rows));
                for (int64_t i = 0; i < n * cols; i++) x[i] = uniform() * 4 - 2;
                /* the reader's dequantization, then the f32 product */
                attn_gguf_tensor t;
                memset(&t, 0, sizeof t);
                t.name = "w";
                t.type = type;
                t.type_name = "q";
                t.ndim = 2;
                t.shape[0] = rows;
                t.shape[1] = cols;
                t.numel = rows * cols;
                t.data = q;
                t.nbytes = rb * (size_t)rows;
                CHECK(attn_gguf_tensor_to_f32(&t, wf, rows * cols) == ATTN_OK);
                attn__gemv_f32_ref(n, rows, cols, x, wf, deq);
                attn__gemv_q_ref(n, &W, x, ref);
                for (int k = 0; k < 3; k++)
                    CHECK(attn__gemv_q(n, &W, x, y[k], k + 1) == 0);
                double scale = 0.0;
                for (int64_t i = 0; i < rows * cols; i++)
                    scale = fmax(scale, fabs(wf[i]));
                int bad = 0, bad_deq = 0, diff = 0;
                for (int64_t i = 0; i < n * rows; i++) {
                    bad += !close_to(y[0][i], ref[i], 2.0 * scale, cols);
                    /* the reference and the reader agree to the last bits */
                    bad_deq += !close_to(ref[i], deq[i], 0.1 * scale, cols);
                    diff += memcmp(&y[0][i], &y[1][i], 4) != 0 ||
                            memcmp(&y[0][i], &y[2][i], 4) != 0;
                }
                CHECK_MSG(!bad && !bad_deq,
                          "%s type %d n=%lld rows=%lld cols=%lld: %d off the "
                          "reference, %d reference off the reader",
                          attn__isa_name(isa), type, (long long)n,
                          (long long)rows, (long long)cols, bad, bad_deq);
                CHECK_MSG(!diff,
                          "%s type %d rows=%lld cols=%lld: threads "
                          "differ",
                          attn__isa_name(isa), type, (long long)rows,
                          (long long)cols);
                free(q);
                free(x);
                free(wf);
                free(ref);
                free(deq);
                for (int k = 0; k < 3; k++) free(y[k]);
            }
}

/* attn__gemv_qx (x quantized to two bytes per value): against its double
 * reference on the same quantized x within f32 roundings of the sum of
 * |terms|, against the f32-x reference within x's quantization error
 * (at most 1/512 of a block's largest |x| per value), NaN in x giving
 * NaN in every output, and the same bits on 1, 2 and 3 threads. */
static void test_qx(attn__isa isa, int type) {
    static const int64_t rdims[] = {1, 3, 17, 129};
    static const int64_t cdims[] = {32, 64, 96, 160, 576, 1536};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 6; b++)
            for (int64_t n = 1; n <= 3; n += 2) {
                const int64_t rows = rdims[a], cols = cdims[b];
                const size_t rb = attn__q_row_bytes(type, cols);
                unsigned char *q = malloc(rb * (size_t)rows);
                fill_blocks(type, q, rb * (size_t)rows);
                const attn__qmat W = {type, rows, cols, q, 0};
                float *x = malloc(sizeof(float) * (size_t)(n * cols));
                float *ref = malloc(sizeof(float) * (size_t)(n * rows));
                float *exact = malloc(sizeof(float) * (size_t)(n * rows));
                float *y[3];
                for (int t = 0; t < 3; t++)
                    y[t] = malloc(sizeof(float) * (size_t)(n * rows));
                for (int64_t i = 0; i < n * cols; i++)
                    x[i] = (uniform() * 4 - 2) * (i % 7 == 3 ? 10.0f : 1.0f);
                if (cols == 96) x[37] = 0.0f; /* a block with zeros */
                attn__gemv_qx_ref(n, &W, x, ref);
                attn__gemv_q_ref(n, &W, x, exact);
                for (int k = 0; k < 3; k++)
                    CHECK(attn__gemv_qx(n, &W, x, y[k], k + 1) == 0);
                /* bounds of |w| (fill_blocks' scales) and of |x| */
                const double ws =
                    type == ATTN_GGML_Q8_0 ? 128 * 0.0505 : 15 * 0.0505 + 0.401;
                double xs = 0.0;
                for (int64_t i = 0; i < n * cols; i++)
                    xs = fmax(xs, fabs(x[i]));
                int bad = 0, bad_q = 0, diff = 0;
                for (int64_t i = 0; i < n * rows; i++) {
                    bad += !close_to(y[0][i], ref[i], ws * xs, cols);
                    bad_q += !(fabs((double)ref[i] - exact[i]) <=
                               (double)cols * ws * xs / 60000.0);
                    diff += memcmp(&y[0][i], &y[1][i], 4) != 0 ||
                            memcmp(&y[0][i], &y[2][i], 4) != 0;
                }
                CHECK_MSG(!bad && !bad_q,
                          "%s (%s) type %d n=%lld rows=%lld cols=%lld: %d off "
                          "the reference, %d beyond x's quantization",
                          attn__isa_name(isa), attn__gemv_qx_path(), type,
                          (long long)n, (long long)rows, (long long)cols, bad,
                          bad_q);
                CHECK_MSG(!diff,
                          "%s qx type %d rows=%lld cols=%lld: threads "
                          "differ",
                          attn__isa_name(isa), type, (long long)rows,
                          (long long)cols);
                /* two matrices in one call: the bits of separate calls */
                {
                    const attn__qmat two[2] = {W, {type, 1, cols, q, 0}};
                    float *ym[2] = {y[1], y[2]};
                    CHECK(attn__gemv_qx_many(n, 2, two, x, ym, 2) == 0);
                    CHECK_MSG(!memcmp(y[1], y[0],
                                      sizeof(float) * (size_t)(n * rows)) &&
                                  !memcmp(y[2], y[0], sizeof(float)) &&
                                  (n == 1 || !memcmp(y[2] + 1, y[0] + rows,
                                                     sizeof(float))),
                              "qx type %d rows=%lld cols=%lld: many differs",
                              type, (long long)rows, (long long)cols);
                }
                /* the decoder's entry: the integer kernel with VNNI, the
                 * widening one elsewhere */
                {
                    const int vnni =
                        !strcmp(attn__gemv_qx_path(), "avx512_vnni");
                    float *ym[1] = {y[1]};
                    CHECK(attn__gemv_q_many(n, 1, &W, x, ym, 2) == 0);
                    if (!vnni) CHECK(attn__gemv_q(n, &W, x, y[2], 1) == 0);
                    CHECK_MSG(!memcmp(y[1], vnni ? y[0] : y[2],
                                      sizeof(float) * (size_t)(n * rows)),
                              "qx type %d: the decoder's entry differs", type);
                }
                /* a NaN in x: every output of its row NaN, no trap */
                x[cols - 1] = NAN;
                CHECK(attn__gemv_qx(1, &W, x, y[0], 2) == 0);
                int nan = 0;
                for (int64_t r = 0; r < rows; r++) nan += isnan(y[0][r]) != 0;
                CHECK_MSG(nan == rows,
                          "qx type %d: NaN in x gave %d of %lld "
                          "NaN outputs",
                          type, nan, (long long)rows);
                free(q);
                free(x);
                free(ref);
                free(exact);
                for (int k = 0; k < 3; k++) free(y[k]);
            }
}

/* The packed layout (attn__q_pack): unpacking gives the bytes back; the
 * products on a packed matrix against the double reference on the plain
 * one (AVX512_VNNI reads it four rows at a time; other paths unpack it
 * and give the plain matrix's bits), the same bits on 1, 2 and 3 threads,
 * the last rows % 4 rows and other matrices of one call as the plain
 * kernel gives them, and a NaN in x NaN in every output. Shapes: groups
 * with and without rows left over, steps of 4 blocks with 1, 2 or 3 left
 * over. */
static void test_packed(attn__isa isa, int type) {
    static const int64_t rdims[] = {1, 3, 4, 17, 130};
    static const int64_t cdims[] = {32, 64, 96, 128, 160, 576, 1536};
    const int vnni = !strcmp(attn__gemv_qx_path(), "avx512_vnni");
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 7; b++)
            for (int64_t n = 1; n <= 3; n += 2) {
                const int64_t rows = rdims[a], cols = cdims[b];
                const size_t bytes =
                    attn__q_row_bytes(type, cols) * (size_t)rows;
                unsigned char *q = malloc(bytes), *qp = malloc(bytes),
                              *back = malloc(bytes);
                fill_blocks(type, q, bytes);
                const attn__qmat W = {type, rows, cols, q, 0};
                attn__q_pack(&W, qp);
                const attn__qmat P = {type, rows, cols, qp, 1};
                attn__q_unpack(&P, back);
                CHECK_MSG(!memcmp(back, q, bytes),
                          "type %d rows=%lld cols=%lld: unpack differs", type,
                          (long long)rows, (long long)cols);
                const size_t ny = sizeof(float) * (size_t)(n * rows);
                float *x = malloc(sizeof(float) * (size_t)(n * cols));
                float *ref = malloc(ny), *plain = malloc(ny), *y[3];
                for (int t = 0; t < 3; t++) y[t] = malloc(ny);
                for (int64_t i = 0; i < n * cols; i++)
                    x[i] = (uniform() * 4 - 2) * (i % 7 == 3 ? 10.0f : 1.0f);
                attn__gemv_qx_ref(n, &W, x, ref);
                attn__gemv_qx_ref(n, &P, x, plain);
                CHECK(!memcmp(ref, plain, ny));
                CHECK(attn__gemv_qx(n, &W, x, plain, 2) == 0);
                for (int t = 0; t < 3; t++)
                    CHECK(attn__gemv_qx(n, &P, x, y[t], t + 1) == 0);
                const double ws =
                    type == ATTN_GGML_Q8_0 ? 128 * 0.0505 : 15 * 0.0505 + 0.401;
                double xs = 0.0;
                for (int64_t i = 0; i < n * cols; i++)
                    xs = fmax(xs, fabs(x[i]));
                int bad = 0, diff = 0, tail = 0;
                for (int64_t i = 0; i < n * rows; i++) {
                    bad += !close_to(y[0][i], ref[i], ws * xs, cols);
                    diff += memcmp(&y[0][i], &y[1][i], 4) != 0 ||
                            memcmp(&y[0][i], &y[2][i], 4) != 0;
                    /* rows past the last group, and every row where the
                     * packed layout is unpacked: the plain kernel's bits */
                    if (!vnni || i % rows >= rows / 4 * 4)
                        tail += memcmp(&y[0][i], &plain[i], 4) != 0;
                }
                CHECK_MSG(!bad && !diff && !tail,
                          "%s (%s) packed type %d n=%lld rows=%lld cols=%lld: "
                          "%d off the reference, %d differ by threads, %d "
                          "off the plain kernel",
                          attn__isa_name(isa), attn__gemv_qx_path(), type,
                          (long long)n, (long long)rows, (long long)cols, bad,
                          diff, tail);
                /* packed and plain matrices in one call: each its own bits */
                {
                    const attn__qmat two[2] = {W, P};
                    float *ym[2] = {y[1], y[2]};
                    CHECK(attn__gemv_qx_many(n, 2, two, x, ym, 3) == 0);
                    CHECK_MSG(!memcmp(y[1], plain, ny) &&
                                  !memcmp(y[2], y[0], ny),
                              "packed type %d rows=%lld cols=%lld: many "
                              "differs",
                              type, (long long)rows, (long long)cols);
                }
                /* the widening kernel: a packed matrix unpacked */
                CHECK(attn__gemv_q(n, &W, x, y[1], 2) == 0);
                CHECK(attn__gemv_q(n, &P, x, y[2], 3) == 0);
                CHECK_MSG(!memcmp(y[1], y[2], ny),
                          "packed type %d: the widening kernel differs", type);
                x[cols / 2] = NAN;
                CHECK(attn__gemv_qx(1, &P, x, y[0], 2) == 0);
                int nan = 0;
                for (int64_t r = 0; r < rows; r++) nan += isnan(y[0][r]) != 0;
                CHECK_MSG(nan == rows,
                          "packed type %d: NaN in x gave %d of "
                          "%lld NaN outputs",
                          type, nan, (long long)rows);
                free(q);
                free(qp);
                free(back);
                free(x);
                free(ref);
                free(plain);
                for (int t = 0; t < 3; t++) free(y[t]);
            }
}

/* attn__quantize_x16_fast: the bytes and scales of the plain
 * attn__quantize_x16 on this path, with w16 = 256 p + r, on blocks of
 * random values, zeros, halves (rint's ties), a NaN and an infinity. */
static void test_quantize(attn__isa isa) {
    enum { NB = 9 };
    float x[NB * 32];
    int8_t p0[NB * 32], r0[NB * 32], p1[NB * 32], r1[NB * 32];
    int16_t w[NB * 32];
    float e0[2 * NB], e1[2 * NB];
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < NB * 32; i++)
            x[i] = (uniform() * 4 - 2) * (i % 5 == 1 ? 100.0f : 1.0f);
        for (int i = 32; i < 64; i++) x[i] = 0.0f;
        for (int i = 64; i < 96; i++) x[i] = (float)(i % 9) * 0.5f - 2.0f;
        x[96] = 127.0f; /* 127 / 127 ... exactly: hi and the remainder */
        x[97] = 63.5f;  /* t = 63.5: a tie */
        x[128 + rep % 32] = NAN;
        x[160 + rep % 32] = rep % 2 ? INFINITY : -INFINITY;
        attn__quantize_x16(NB, x, p0, r0, e0);
        attn__quantize_x16_fast(NB, x, p1, r1, w, e1);
        int bad = memcmp(p0, p1, sizeof p0) != 0 ||
                  memcmp(r0, r1, sizeof r0) != 0 ||
                  memcmp(e0, e1, sizeof e0) != 0;
        for (int i = 0; i < NB * 32; i++) bad += w[i] != 256 * p0[i] + r0[i];
        CHECK_MSG(!bad, "%s: the fast quantizer differs (rep %d)",
                  attn__isa_name(isa), rep);
    }
}

int main(void) {
    CHECK(attn__q_row_bytes(ATTN_GGML_Q4_1, 576) == 18 * 20);
    CHECK(attn__q_row_bytes(ATTN_GGML_Q8_0, 64) == 68);
    CHECK(attn__q_row_bytes(ATTN_GGML_Q4_0, 33) == 0);
    CHECK(attn__q_row_bytes(ATTN_GGML_F32, 64) == 0);
    const attn__isa top = attn__isa_cpu();
    static const attn__isa paths[] = {ATTN__ISA_SCALAR, ATTN__ISA_AVX2,
                                      ATTN__ISA_AVX512};
    for (int p = 0; p < 3; p++) {
        if (paths[p] > top) continue;
        attn__isa_set_max(paths[p]);
        printf("path %s (8-bit x kernel: %s)\n",
               attn__isa_name(attn__isa_get()), attn__gemv_qx_path());
        test_quantize(paths[p]);
        test_f32(paths[p]);
        test_q(paths[p], ATTN_GGML_Q8_0);
        test_q(paths[p], ATTN_GGML_Q4_0);
        test_q(paths[p], ATTN_GGML_Q4_1);
        test_qx(paths[p], ATTN_GGML_Q8_0);
        test_qx(paths[p], ATTN_GGML_Q4_0);
        test_qx(paths[p], ATTN_GGML_Q4_1);
        test_packed(paths[p], ATTN_GGML_Q8_0);
        test_packed(paths[p], ATTN_GGML_Q4_0);
        test_packed(paths[p], ATTN_GGML_Q4_1);
    }
    attn__isa_set_max(ATTN__ISA_AMX);
    return check_done("test_gemv");
}
