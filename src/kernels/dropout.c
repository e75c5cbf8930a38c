/* Dropout decisions from a counter-based generator (Philox4x32-10), keyed by
 * (seed, b, h, i, j): the same decision in every kernel, forward and
 * backward, whatever the tiling or thread count. */
#include "kernels.h"

#include <math.h>

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void attn__philox4x32(uint64_t seed, const uint32_t ctr[4], uint32_t out[4]) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint32_t attn__dropout_threshold(double p) {
    if (!(p > 0.0)) return 0;
    double t = ceil(p * 4294967296.0);
    return t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
}

int attn_dropout_kept(uint64_t seed, double p, int64_t b, int64_t h, int64_t i,
                      int64_t j) {
    if (!(p > 0.0)) return 1;
    /* one Philox call yields the decisions of 4 neighbouring keys */
    uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)h,
                       (uint32_t)b};
    uint32_t out[4];
    attn__philox4x32(seed, ctr, out);
    return out[j & 3] >= attn__dropout_threshold(p);
}
