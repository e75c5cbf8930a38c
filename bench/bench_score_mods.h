/* The score-modifier benchmark behind `attn bench --score-mods`: the flash
 * forward and forward + backward with soft-capping, ALiBi and sinks against
 * the same call without them, and packed documents against the sum of the
 * documents run one by one (checked to agree first). Ratios within one run,
 * so a loaded machine shifts both sides alike. */
#ifndef ATTN_BENCH_SCORE_MODS_H
#define ATTN_BENCH_SCORE_MODS_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    int quick;     /* L = 1024 and 4096 packed instead of 2048 and 16384 */
    int threads;   /* 0: OpenMP's default                                */
    int reps;      /* timed repetitions (best is reported), >= 1         */
    int64_t l, lp; /* override the lengths (0: the defaults); lp >= 16 */
} bench_score_mods_opts;

/* Returns 0; 1 after printing the library's message on a failure or when
 * the packed output differs from the documents run one by one. */
int bench_score_mods_run(FILE *out, const bench_score_mods_opts *o);

#endif
