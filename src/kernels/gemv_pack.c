/* The packed layout of block-format weights (gemv.h: attn__q_pack).
 *
 * Row after row, a block's scale sits in front of its values, so a kernel
 * that dots one row at a time loads and converts each block's scale (and
 * Q4_1's minimum) apart and spreads it over the lanes of its products. The
 * AVX512_VNNI kernel (gemv_x8.c) dots four rows against four blocks of x
 * at once instead: the four rows' sums of one block land in one 128-bit
 * lane, so the 16 scales of such a step are one load and one conversion
 * when they lie side by side. Each group of 4 rows is stored as its steps
 * of kb = 4 blocks (the last step of a row the nb % 4 left), each step:
 *   the values: row 0's kb blocks, row 1's, row 2's, row 3's (16 bytes a
 *     4-bit block, as stored; Q8_0: bytes 0..15 of the kb blocks, then
 *     bytes 16..31, so that both halves meet x as the 4-bit ones do);
 *   the kb * 4 scales as halves, block k of row r at 4 k + r;
 *   Q4_1: the kb * 4 minimums the same way.
 * That is 4 kb block sizes: a group takes the bytes of its 4 rows. The
 * rows % 4 last rows follow as stored. */
#include "gemv.h"

#include "attn_gguf.h"
#include "cpu.h"
#include "internal.h"

#include <string.h>

/* Where (row r, block b)'s parts lie in a packed matrix of rows rows, nb
 * blocks of bb bytes per row: *q its values (Q8_0: *q2 the second half),
 * *d its scale, *m its minimum (Q4_1). Rows past the last group: as
 * stored. */
static void locate(int type, int64_t rows, int64_t nb, size_t bb, int64_t r,
                   int64_t b, size_t *q, size_t *q2, size_t *d, size_t *m) {
    const size_t rb = (size_t)nb * bb;
    const int64_t groups = rows / 4;
    if (r >= 4 * groups) {
        const size_t at = (size_t)r * rb + (size_t)b * bb;
        *d = at;
        *m = at + 2;
        *q = at + (type == ATTN_GGML_Q4_1 ? 4 : 2);
        *q2 = *q + 16;
        return;
    }
    const int64_t s = b / 4, k = b % 4, rr = r % 4;
    const int64_t kb = nb - 4 * s < 4 ? nb - 4 * s : 4;
    const size_t qb = type == ATTN_GGML_Q8_0 ? 32 : 16;
    const size_t tile = (size_t)(r / 4) * 4 * rb + (size_t)s * 16 * bb;
    const size_t scales = tile + 4 * (size_t)kb * qb;
    *q = tile + (size_t)(rr * kb) * qb + (size_t)k * 16;
    *q2 = *q + (size_t)kb * 16;
    *d = scales + (size_t)(4 * k + rr) * 2;
    *m = scales + 8 * (size_t)kb + (size_t)(4 * k + rr) * 2;
}

/* Moves every block of w between the two layouts: to packed (pack 1) or
 * back. */
static void move_blocks(const attn__qmat *w, unsigned char *dst, int pack) {
    const int64_t nb = w->cols / 32;
    const size_t bb = attn__q_row_bytes(w->type, w->cols) / (size_t)nb;
    const unsigned char *src = w->data;
    const int q8 = w->type == ATTN_GGML_Q8_0, q41 = w->type == ATTN_GGML_Q4_1;
    for (int64_t r = 0; r < w->rows; r++)
        for (int64_t b = 0; b < nb; b++) {
            size_t q, q2, d, m;
            locate(w->type, w->rows, nb, bb, r, b, &q, &q2, &d, &m);
            const size_t at = (size_t)r * nb * bb + (size_t)b * bb;
            const size_t off = q41 ? 4 : 2;
            /* (packed offset, plain offset, bytes) of each part */
            const size_t parts[4][3] = {{d, at, 2},
                                        {m, at + 2, q41 ? 2 : 0},
                                        {q, at + off, 16},
                                        {q2, at + off + 16, q8 ? 16 : 0}};
            for (int i = 0; i < 4; i++)
                if (parts[i][2])
                    memcpy(dst + parts[i][pack ? 0 : 1],
                           src + parts[i][pack ? 1 : 0], parts[i][2]);
        }
}

void attn__q_pack(const attn__qmat *w, void *dst) { move_blocks(w, dst, 1); }

void attn__q_unpack(const attn__qmat *w, void *dst) { move_blocks(w, dst, 0); }

/* The matrices of w as dot reads them: packed ones unpacked into copies
 * (*buf, to free) where this path's kernel does not read the packed
 * layout. Returns 0, or -1 when a copy cannot be allocated. */
int attn__q_readable(int k, const attn__qmat *w, int packed_ok, attn__qmat *out,
                     void **buf) {
    size_t bytes = 0;
    for (int m = 0; m < k; m++) {
        out[m] = w[m];
        if (w[m].packed && !packed_ok)
            bytes +=
                attn__q_row_bytes(w[m].type, w[m].cols) * (size_t)w[m].rows;
    }
    *buf = NULL;
    if (!bytes) return 0;
    unsigned char *c = *buf = attn__alloc(bytes, 1, "unpacked weights");
    if (!c) return -1;
    for (int m = 0; m < k; m++)
        if (w[m].packed && !packed_ok) {
            attn__q_unpack(&w[m], c);
            out[m].data = c;
            out[m].packed = 0;
            c += attn__q_row_bytes(w[m].type, w[m].cols) * (size_t)w[m].rows;
        }
    return 0;
}

int attn__q_pack_wanted(void) { return attn__isa_vnni(); }
