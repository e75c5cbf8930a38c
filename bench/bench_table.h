/* The printing of attn bench's table (bench_table.c): the ceilings at the
 * start, a row per measurement, the ceiling again at the end; as a table
 * or as one JSON object per line. */
#ifndef ATTN_BENCH_TABLE_H
#define ATTN_BENCH_TABLE_H

#include "bench.h"

#include <stddef.h>

/* What every row is measured against. */
typedef struct {
    const bench_opts *o;
    FILE *out;
    int threads;
    double ceiling;   /* sgemm GFLOP/s at the run's thread count */
    double ceil_bf16; /* bf16 GEMM GFLOP/s (0: no bf16 path) */
    double peak;      /* f32 FMA peak of the run's threads (0: unknown) */
} bench_runner;
/* The sgemm, bf16 GEMM and FMA ceilings (g1, g2: sgemm on 1 and 2
 * threads; r->ceiling on the run's threads) and the table's head. */
void bench_print_head(const bench_runner *r, double g1, double g2);

/* One row. bwd_ratio > 0 marks a backward row (2.5x the forward's FLOPs,
 * its time over the forward's, err relative to the largest gradient);
 * speedup > 0 and err >= 0 are printed when given. */
void bench_row(const bench_runner *r, const bench_case *c, const char *impl,
               double ms, size_t extra, double speedup, double err,
               double bwd_ratio);

/* The sgemm ceiling measured again at the end (again GFLOP/s). */
void bench_print_end(const bench_runner *r, double again);

#endif
