/* The training RNG: xoshiro256** seeded through splitmix64. Its state is
 * four words, saved in checkpoints so a resumed run draws the same data. */
#include "attn_train.h"
#include "internal.h"

static uint64_t splitmix64(uint64_t *x) {
    return attn__splitmix64_final(*x += 0x9E3779B97F4A7C15ull);
}

void attn_rng_seed(attn_rng *rng, uint64_t seed) {
    if (!rng) return;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
    /* splitmix64 never gives four zeros from one seed, but be safe: the
     * all-zero state is xoshiro's only fixed point */
    if (!(rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3])) rng->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t attn_rng_next(attn_rng *rng) {
    uint64_t *s = rng->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t attn_rng_below(attn_rng *rng, uint64_t n) {
    if (n <= 1) return 0;
    /* rejection of the top partial range keeps every value equally likely */
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = attn_rng_next(rng);
    while (r >= limit);
    return r % n;
}
