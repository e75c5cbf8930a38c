/* How the flash kernels cut the work: the tile sizes (and the overrides
 * that tuning runs set) and the bands a partially visible tile is split
 * into. Forward, backward and the weight pass all tile through here, so
 * their scores come from the very same sgemm calls. */
#include "flash.h"

int64_t attn__flash_bq_override = 0, attn__flash_bk_override = 0,
        attn__flash_rc_override = 0;

int64_t attn__flash_split_rows(const attn__sdpa_dims *d) {
    (void)d;
    return attn__flash_rc_override > 0 ? attn__flash_rc_override : 32;
}

/* Tile sizes, measured on the 2-core AMD EPYC (Zen 4, 1 MiB L2 per core,
 * OpenBLAS 0.3.21 Cooperlake kernels, sgemm 1024^3: 95 GFLOP/s on one
 * core, 190 on two) with B=1, H=8, f32, 2 threads, best of 4 interleaved
 * runs (GFLOP/s; the machine was shared, so +-10%):
 *
 *   tiles (bq x bk / band)   L=1024 d=64  L=4096 d=64  L=1024 d=128  L=4096 d=128
 *   128 x 256                    151          147          168           102*
 *   256 x 256                    158          164          173           119*
 *   256 x 512                    154          167          173           104*
 *   causal, L=2048 d=64:  128x128: 124, 256x256 unsplit: 129,
 *                         256x256 in bands of 64 rows: 136, of 32: 137
 *   (* a busy moment of the shared machine)
 *   causal, 256x256, bands of 64 vs 32 rows (ms, best of 40):
 *     L=512 d=64 2.39 / 2.12, d=128 4.20 / 3.61; L=1024 d=64 7.64 / 7.22,
 *     d=128 15.1 / 15.1; L=2048 d=64 28.7 / 28.5 (full mask: 3.60, 7.37,
 *     13.8, 32.5, 54.9 ms)
 *
 * Larger query tiles amortize the packing of K and V by OpenBLAS, larger
 * key tiles that of Q; 256 x 256 keeps S (256 KiB) and the O accumulator in
 * the 1 MiB L2. Beyond that the gain is flat. Partial tiles are cut into
 * bands of 32 rows (attn__flash_split_tile), which recovers most of the
 * diagonal's waste for causal masks. With wide heads (Dk + Dv > 256) the
 * query tile halves so that Q, O, K and V still fit in L2. */
void attn__flash_tile_sizes(const attn__sdpa_dims *d, int64_t *bq,
                            int64_t *bk) {
    int64_t q = d->Dk + d->Dv > 256 ? 128 : 256, k = 256;
    if (attn__flash_bq_override > 0) q = attn__flash_bq_override;
    if (attn__flash_bk_override > 0) k = attn__flash_bk_override;
    *bq = q < d->Lq ? q : d->Lq;
    *bk = k < d->Lk ? k : d->Lk;
}

/* ---- splitting a partial tile ------------------------------------------ */

int64_t attn__flash_split_tile(const attn_mask *m, const attn__sdpa_dims *d,
                               int64_t b, int64_t h, int64_t i0, int64_t ni,
                               int64_t j0, int64_t nj, attn__tile_class cls,
                               attn__flash_block *out) {
    int linear = m->causal || m->window_left >= 0 || m->window_right >= 0 ||
                 m->key_lengths || m->query_lengths || m->doc_q ||
                 (m->mask_mod && m->block_mask);
    if (cls != ATTN__TILE_PARTIAL || !linear) {
        out[0].r0 = i0;
        out[0].nr = ni;
        out[0].c0 = j0;
        out[0].nc = nj;
        out[0].cls = cls;
        return cls == ATTN__TILE_EMPTY ? 0 : 1;
    }
    int64_t lq, lk, rc = attn__flash_split_rows(d), n = 0;
    attn__lengths(m, b, d->Lq, d->Lk, &lq, &lk);
    for (int64_t r0 = i0; r0 < i0 + ni; r0 += rc) {
        int64_t r1 = r0 + rc < i0 + ni ? r0 + rc : i0 + ni;
        if (r1 > lq) r1 = lq; /* rows past the query length see nothing */
        if (r1 <= r0) break;
        /* the hull of the rows' visible ranges: the bounds never decrease
         * with the row, so the first row gives the lowest column and the
         * last row the highest */
        int64_t lo, hi, unused;
        attn__mask_row_range(m, b, r0, d->Lq, d->Lk, &lo, &unused);
        attn__mask_row_range(m, b, r1 - 1, d->Lq, d->Lk, &unused, &hi);
        if (lo < j0) lo = j0;
        if (hi > j0 + nj) hi = j0 + nj;
        /* documents: from the first row's document to the last row's */
        attn__doc_hull(m, b, r0, r1, d->Lq, d->Lk, &lo, &hi);
        /* a block mask: from the band's first non-empty block column to
         * its last */
        attn__block_mask_hull(m, b, h, r0, r1, &lo, &hi);
        if (hi <= lo) continue;
        attn__tile_class c =
            attn__mask_classify(m, b, h, r0, r1, lo, hi, d->Lq, d->Lk);
        if (c == ATTN__TILE_EMPTY) continue;
        out[n].r0 = r0;
        out[n].nr = r1 - r0;
        out[n].c0 = lo;
        out[n].nc = hi - lo;
        out[n].cls = c;
        n++;
    }
    return n;
}
