/* Block averages of streamed weight tiles: the heatmap of a long sequence
 * without its L x L matrix. The kernel computes the tiles; this file only
 * sums what it is handed. */
#include "viz_internal.h"

#include <string.h>

struct attn_blockavg {
    int64_t Lq, Lk, b, h;
    int64_t fr, fc;     /* positions per block along rows / columns */
    int64_t rows, cols; /* blocks */
    double *sum;
    int64_t *count;
};

attn_status attn_blockavg_create(int64_t Lq, int64_t Lk, int64_t b, int64_t h,
                                 int64_t max_cells, attn_blockavg **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (Lq < 1 || Lk < 1 || max_cells < 1 || b < 0 || h < 0)
        return attn__fail(
            ATTN_E_INVALID,
            "blockavg needs Lq, Lk, max_cells "
            ">= 1 and b, h >= 0 (got %lld, %lld, %lld, %lld, %lld)",
            (long long)Lq, (long long)Lk, (long long)max_cells, (long long)b,
            (long long)h);
    const int64_t fr = attn__viz_block(Lq, max_cells),
                  fc = attn__viz_block(Lk, max_cells);
    const int64_t rows = attn__viz_ceil_div(Lq, fr),
                  cols = attn__viz_ceil_div(Lk, fc);
    int64_t cells;
    if (!attn__mul_i64(rows, cols, &cells) ||
        (uint64_t)cells > SIZE_MAX / sizeof(double))
        return attn__fail(ATTN_E_NOMEM,
                          "blockavg map of %lld x %lld blocks "
                          "overflows",
                          (long long)rows, (long long)cols);
    const size_t n = (size_t)cells;
    attn_blockavg *a = attn__alloc(1, sizeof *a, "blockavg");
    if (!a) return ATTN_E_NOMEM;
    *a = (attn_blockavg){Lq, Lk, b, h, fr, fc, rows, cols, NULL, NULL};
    a->sum = attn__alloc(n, sizeof(double), "block sums");
    a->count = attn__alloc(n, sizeof(int64_t), "block counts");
    if (!a->sum || !a->count) {
        attn_blockavg_free(a);
        return ATTN_E_NOMEM;
    }
    memset(a->sum, 0, n * sizeof(double));
    memset(a->count, 0, n * sizeof(int64_t));
    *out = a;
    return ATTN_OK;
}

void attn_blockavg_free(attn_blockavg *a) {
    if (!a) return;
    attn__free(a->sum);
    attn__free(a->count);
    attn__free(a);
}

int attn_blockavg_tile(void *user, int64_t b, int64_t h, int64_t q0, int64_t nq,
                       int64_t k0, int64_t nk, const float *w, int64_t ldw) {
    attn_blockavg *a = user;
    if (!a || !w || b != a->b || h != a->h) return 0;
    /* clip the tile to the map: a tile never writes outside the blocks */
    if (q0 < 0 || k0 < 0 || nq < 1 || nk < 1 || ldw < nk) return 0;
    if (q0 + nq > a->Lq) nq = a->Lq - q0;
    if (k0 + nk > a->Lk) nk = a->Lk - k0;
    for (int64_t r = 0; r < nq; r++) {
        const float *row = w + r * ldw;
        int64_t br = (q0 + r) / a->fr;
        double *srow = a->sum + br * a->cols;
        int64_t *crow = a->count + br * a->cols;
        /* one run of columns per block */
        for (int64_t c = 0; c < nk;) {
            int64_t bc = (k0 + c) / a->fc;
            int64_t end = (bc + 1) * a->fc - k0;
            if (end > nk) end = nk;
            double s = 0;
            for (int64_t j = c; j < end; j++) s += row[j];
            srow[bc] += s;
            crow[bc] += end - c;
            c = end;
        }
    }
    return 0;
}

attn_status attn_blockavg_size(const attn_blockavg *a, int64_t *rows,
                               int64_t *cols, int64_t *block_rows,
                               int64_t *block_cols) {
    if (!a) return attn__fail(ATTN_E_INVALID, "accumulator is NULL");
    if (rows) *rows = a->rows;
    if (cols) *cols = a->cols;
    if (block_rows) *block_rows = a->fr;
    if (block_cols) *block_cols = a->fc;
    return ATTN_OK;
}

attn_status attn_blockavg_result(const attn_blockavg *a, float *map,
                                 uint8_t *seen) {
    if (!a || !map)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          a ? "map" : "accumulator");
    for (int64_t i = 0; i < a->rows * a->cols; i++) {
        map[i] = a->count[i] ? (float)(a->sum[i] / (double)a->count[i]) : 0.0f;
        if (seen) seen[i] = a->count[i] > 0;
    }
    return ATTN_OK;
}

attn_status attn_blockavg_visible(const attn_blockavg *a, const attn_mask *mask,
                                  int64_t B, int64_t H, uint8_t *visible) {
    if (!a || !visible)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          a ? "visible" : "accumulator");
    if (!mask) {
        memset(visible, 1, (size_t)(a->rows * a->cols));
        return ATTN_OK;
    }
    if (a->b >= B || a->h >= H)
        return attn__fail(ATTN_E_SHAPE,
                          "the accumulator's map (%lld, %lld) is "
                          "outside (B, H) = (%lld, %lld)",
                          (long long)a->b, (long long)a->h, (long long)B,
                          (long long)H);
    attn_status st = attn_mask_check(mask, B, H, a->Lq, a->Lk);
    if (st != ATTN_OK) return st;
    for (int64_t r = 0; r < a->rows; r++)
        for (int64_t c = 0; c < a->cols; c++) {
            int any = 0;
            /* stops at the first visible pair: only fully masked blocks
             * are scanned to the end */
            for (int64_t i = r * a->fr;
                 !any && i < a->Lq && i < (r + 1) * a->fr; i++)
                for (int64_t j = c * a->fc; j < a->Lk && j < (c + 1) * a->fc;
                     j++)
                    if (attn_mask_visible(mask, a->b, a->h, i, j, a->Lq,
                                          a->Lk)) {
                        any = 1;
                        break;
                    }
            visible[r * a->cols + c] = (uint8_t)any;
        }
    return ATTN_OK;
}
