/* Additive vs dot-product attention layers: time and memory side by side.
 * Called by `attn bench-layers`; prints a Markdown table to out. */
#ifndef ATTN_BENCH_LAYERS_H
#define ATTN_BENCH_LAYERS_H

#include <stdio.h>

typedef struct {
    int quick;   /* 1: small B for a smoke run (tests)               */
    int threads; /* 0: OpenMP's default                              */
    int reps;    /* timed repetitions (best is reported), >= 1       */
} bench_layers_opts;

/* Returns 0, or 1 after printing the library's message on a failure. */
int bench_layers_run(FILE *out, const bench_layers_opts *o);

#endif
