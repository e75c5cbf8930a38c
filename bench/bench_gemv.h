/* The decoding matrix-vector products on SmolLM2-135M's shapes (`attn
 * bench --gemv`): the block-format kernel that widens W's values to f32
 * against the one on 8-bit x (integer dot products), on W row after row
 * and on W packed (attn__q_pack: the layout a model loaded with
 * AVX512_VNNI keeps; other paths unpack it into a copy first), on every
 * instruction-set path this CPU has, W warm in the cache. */
#ifndef ATTN_BENCH_GEMV_H
#define ATTN_BENCH_GEMV_H

#include <stdio.h>

/* threads 0: OpenMP's default; reps 0: a default. Returns 0, or 2 when it
 * cannot allocate. */
int bench_gemv_run(int threads, int reps, FILE *out);

#endif
