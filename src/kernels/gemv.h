/* Matrix-vector products for decoding: y (n, rows) = x (n, cols) W^T for
 * a few rows of x, W (rows, cols) stored as f32 or in the GGUF block
 * formats Q8_0, Q4_0 and Q4_1 (dequantized inside the dot product, never
 * into memory). They stream W once at the memory's pace: each chunk of W's
 * rows is read from memory once and used for every row of x while it is in
 * the cache. Threads split W's rows; every output is one row's dot
 * product in a fixed order (cpu.h's path decides the order, the thread
 * count never does), so the bits are the same on any thread count.
 * Internal: not installed. */
#ifndef ATTN_GEMV_H
#define ATTN_GEMV_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix in one of the block formats (ATTN_GGML_Q8_0, _Q4_0,
 * _Q4_1 of attn_gguf.h): rows of cols values (cols a multiple of 32), each
 * row cols / 32 blocks, row after row; or, packed set, the same bytes in
 * attn__q_pack's layout. */
typedef struct {
    int type;
    int64_t rows, cols;
    const void *data;
    int packed;
} attn__qmat;

/* Bytes of one row of cols values in format type (0: not a block format
 * this file reads, or cols not a multiple of 32). */
size_t attn__q_row_bytes(int type, int64_t cols);

/* The packed layout (gemv_pack.c) that the AVX512_VNNI kernel reads four
 * rows at a time: per group of 4 rows and step of up to 4 blocks, the
 * four rows' values, then the steps' scales (and Q4_1's minimums) side
 * by side; the rows % 4 last rows as stored. The same size as the
 * row-after-row layout. dst = w's data packed (w->packed 0; dst not
 * w->data), or unpacked (w->packed 1). */
void attn__q_pack(const attn__qmat *w, void *dst);
void attn__q_unpack(const attn__qmat *w, void *dst);

/* Whether this path's kernel reads the packed layout (AVX512_VNNI):
 * elsewhere a packed matrix is unpacked into a copy for each product. */
int attn__q_pack_wanted(void);

/* out[0 .. k) = w[0 .. k), the packed ones unpacked into copies (*buf:
 * free it) unless packed_ok. Returns 0, or -1 when the copies cannot be
 * allocated. */
int attn__q_readable(int k, const attn__qmat *w, int packed_ok, attn__qmat *out,
                     void **buf);

/* The IEEE half at p (little-endian) as a float: the portable paths'
 * block scales. */
float attn__gemv_half(const unsigned char *p);

/* y[i * rows + r] = sum_j w[r * cols + j] x[i * cols + j], i < n. threads
 * 0: OpenMP's default team. Sizes are the caller's to check. */
void attn__gemv_f32(int64_t n, int64_t rows, int64_t cols, const float *x,
                    const float *w, float *y, int threads);

/* The same for a block-format W (attn__q_row_bytes(w->type, w->cols) != 0).
 * Returns 0, or -1 when its small workspace cannot be allocated. */
int attn__gemv_q(int64_t n, const attn__qmat *w, const float *x, float *y,
                 int threads);

/* The same with x quantized per block of 32 values to a scale and two
 * bytes per value (about 16 bits against the block's largest value;
 * gemv_x8.c): integer dot products, faster. Returns 0, or -1 when its
 * workspace (x's bytes) cannot be allocated. */
int attn__gemv_qx(int64_t n, const attn__qmat *w, const float *x, float *y,
                  int threads);

/* attn__gemv_qx for k <= ATTN__GEMV_MANY matrices w[0 .. k) of the same
 * cols on the same x (the decoding step's Q, K and V maps; its gate and
 * up maps): x quantized once, one parallel region over all their rows,
 * y[m] (n, w[m].rows). The same bits as k calls of attn__gemv_qx. */
#define ATTN__GEMV_MANY 4
int attn__gemv_qx_many(int64_t n, int k, const attn__qmat *w, const float *x,
                       float *const *y, int threads);

/* The decoding steps' products on the blocks: the faster of the two
 * kernels on this path (attn bench --gemv): attn__gemv_qx_many with
 * AVX512_VNNI; elsewhere (AVX2: level; portable C: the integer sums are
 * slower) attn__gemv_q on each matrix, x kept in f32. */
int attn__gemv_q_many(int64_t n, int k, const attn__qmat *w, const float *x,
                      float *const *y, int threads);

/* nb blocks of 32 values of x as attn__gemv_qx quantizes them: x_j ~
 * e[2b] (256 p_j + r_j) with bytes p, r (nb, 32), and e[2b + 1] the
 * block's sum as quantized (e: nb pairs). */
void attn__quantize_x16(int64_t nb, const float *x, int8_t *p, int8_t *r,
                        float *e);

/* attn__quantize_x16 on this path's vector unit (the same bytes), and
 * w16 (nb, 32), if not NULL, = 256 p + r per value. */
void attn__quantize_x16_fast(int64_t nb, const float *x, int8_t *p, int8_t *r,
                             int16_t *w16, float *e);

/* The kernel attn__gemv_qx runs on this path: "avx512_vnni", "avx2", "c". */
const char *attn__gemv_qx_path(void);

/* Plain references (double sums; W's values dequantized as the format
 * defines them): what the tests compare the kernels against. */
void attn__gemv_f32_ref(int64_t n, int64_t rows, int64_t cols, const float *x,
                        const float *w, float *y);
void attn__gemv_q_ref(int64_t n, const attn__qmat *w, const float *x, float *y);
/* attn__gemv_qx's value in double: W's values times x as quantized. */
void attn__gemv_qx_ref(int64_t n, const attn__qmat *w, const float *x,
                       float *y);

#endif /* ATTN_GEMV_H */
