/* Ring attention under mpirun: bad input (ring_bad.c), called by
 * ring_test.c's main. */
#ifndef ATTN_RING_TEST_H
#define ATTN_RING_TEST_H

/* Zigzag shards of the wrong length, heads that differ across ranks, more
 * ranks than positions, an error on one rank only, options that differ:
 * the same error on every rank, no hang (ctest's timeout). The checks
 * made and failed on this rank into *checks, *failures. */
void ring_bad_inputs(int nranks, int rank, int *checks, int *failures);

#include <stdint.h>

/* The user score_mod of the ring tests (ring_test.c): a per-head stretch
 * and a distance penalty at global positions. */
int ring_user_score(void *ctx, int64_t b, int64_t h, int64_t i, int64_t j0,
                    int64_t n, double *score, double *dscore);

#endif
