/* Sequence layouts of ring attention: which positions each rank holds, and
 * copying a rank's rows out of (and back into) a full tensor. No MPI here;
 * the ring (ring.c, ring_bwd.c) and the CLI use the same answers. */
#include "dist.h"

#include <string.h>

/* Size of chunk c when L is cut into n chunks as evenly as possible. */
static int64_t chunk_len(int64_t L, int64_t n, int64_t c) {
    return L / n + (c < L % n ? 1 : 0);
}

/* Start of chunk c of that cut. */
static int64_t chunk_start(int64_t L, int64_t n, int64_t c) {
    int64_t extra = c < L % n ? c : L % n;
    return c * (L / n) + extra;
}

attn_status attn_ring_runs(attn_ring_layout layout, int64_t L, int P, int rank,
                           int64_t start[2], int64_t len[2], int *n) {
    if (!start || !len || !n)
        return attn__fail(ATTN_E_INVALID, "ring runs: an output is NULL");
    if (layout != ATTN_RING_CONTIGUOUS && layout != ATTN_RING_ZIGZAG)
        return attn__fail(ATTN_E_INVALID,
                          "ring layout is %d: use "
                          "ATTN_RING_CONTIGUOUS or ATTN_RING_ZIGZAG",
                          (int)layout);
    if (P < 1 || rank < 0 || rank >= P)
        return attn__fail(ATTN_E_INVALID, "ring: rank %d of %d ranks", rank, P);
    if (layout == ATTN_RING_CONTIGUOUS) {
        if (L < P)
            return attn__fail(ATTN_E_SHAPE,
                              "ring: %d ranks for a sequence of %lld positions "
                              "(each rank needs at least one)",
                              P, (long long)L);
        start[0] = chunk_start(L, P, rank);
        len[0] = chunk_len(L, P, rank);
        *n = 1;
        return ATTN_OK;
    }
    if (L < 2 * (int64_t)P)
        return attn__fail(ATTN_E_SHAPE,
                          "ring zigzag: %d ranks cut a sequence into %d chunks "
                          "but it has %lld positions",
                          P, 2 * P, (long long)L);
    const int64_t c0 = rank, c1 = 2 * (int64_t)P - 1 - rank;
    start[0] = chunk_start(L, 2 * P, c0);
    len[0] = chunk_len(L, 2 * P, c0);
    start[1] = chunk_start(L, 2 * P, c1);
    len[1] = chunk_len(L, 2 * P, c1);
    *n = 2;
    return ATTN_OK;
}

attn_status attn_ring_shard_length(attn_ring_layout layout, int64_t L, int P,
                                   int rank, int64_t *rows) {
    int64_t s[2], l[2];
    int n;
    if (!rows)
        return attn__fail(ATTN_E_INVALID, "ring shard length: rows is NULL");
    attn_status st = attn_ring_runs(layout, L, P, rank, s, l, &n);
    if (st) return st;
    *rows = n == 2 ? l[0] + l[1] : l[0];
    return ATTN_OK;
}

/* Copies row (b, h, i) of src into row (b, h, j) of dst, converting. */
static void copy_row(const attn_tensor *src, int64_t b, int64_t h, int64_t i,
                     attn_tensor *dst, int64_t j) {
    const int64_t D = src->shape[3];
    for (int64_t c = 0; c < D; c++) {
        double x = attn_tensor_get(src, b, h, i, c);
        char *p = (char *)dst->data + attn__off(dst, b, h, j, c) *
                                          (int64_t)attn_dtype_size(dst->dtype);
        attn__convert_to_float(&x, ATTN_F64, p, dst->dtype, 1);
    }
}

/* Shared checks and the copy of shard/unshard (to_full selects the way). */
static attn_status shard_copy(attn_ring_layout layout, int P, int rank,
                              const attn_tensor *full, const attn_tensor *shard,
                              int to_full, const char *who) {
    attn_status st;
    if ((st = attn_tensor_check(full, "full")) ||
        (st = attn_tensor_check(shard, "shard")))
        return st;
    if (!attn__is_float_dtype(full->dtype) ||
        !attn__is_float_dtype(shard->dtype))
        return attn__fail(ATTN_E_DTYPE,
                          "%s: full is %s and shard is %s; both "
                          "must be f32, f16, bf16 or f64",
                          who, attn_dtype_name(full->dtype),
                          attn_dtype_name(shard->dtype));
    int64_t s[2], l[2], rows;
    int n;
    if ((st = attn_ring_runs(layout, full->shape[2], P, rank, s, l, &n)))
        return st;
    rows = n == 2 ? l[0] + l[1] : l[0];
    if (shard->shape[0] != full->shape[0] ||
        shard->shape[1] != full->shape[1] || shard->shape[2] != rows ||
        shard->shape[3] != full->shape[3])
        return attn__fail(
            ATTN_E_SHAPE,
            "%s: shard has shape (%lld, %lld, %lld, %lld) but rank "
            "%d of %d holds (%lld, %lld, %lld, %lld) of full",
            who, (long long)shard->shape[0], (long long)shard->shape[1],
            (long long)shard->shape[2], (long long)shard->shape[3], rank, P,
            (long long)full->shape[0], (long long)full->shape[1],
            (long long)rows, (long long)full->shape[3]);
    const attn_tensor *dst = to_full ? full : shard;
    for (int a = 0; a < 4; a++)
        if (dst->stride[a] == 0 && dst->shape[a] > 1)
            return attn__fail(ATTN_E_SHAPE,
                              "%s: the %s has stride 0 on axis "
                              "%d: an output cannot broadcast",
                              who, to_full ? "full tensor" : "shard", a);
    for (int64_t b = 0; b < full->shape[0]; b++)
        for (int64_t h = 0; h < full->shape[1]; h++) {
            int64_t j = 0;
            for (int x = 0; x < n; x++)
                for (int64_t i = s[x]; i < s[x] + l[x]; i++, j++) {
                    if (to_full)
                        copy_row(shard, b, h, j, (attn_tensor *)full, i);
                    else
                        copy_row(full, b, h, i, (attn_tensor *)shard, j);
                }
        }
    return ATTN_OK;
}

attn_status attn_ring_shard(attn_ring_layout layout, int P, int rank,
                            const attn_tensor *full, attn_tensor *shard) {
    return shard_copy(layout, P, rank, full, shard, 0, "ring shard");
}

attn_status attn_ring_unshard(attn_ring_layout layout, int P, int rank,
                              const attn_tensor *shard, attn_tensor *full) {
    return shard_copy(layout, P, rank, full, shard, 1, "ring unshard");
}
