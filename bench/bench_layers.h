/* Additive vs dot-product attention layers: time and memory side by side.
 * Called by `attn bench-layers`; prints a Markdown table to out. */
#ifndef ATTN_BENCH_LAYERS_H
#define ATTN_BENCH_LAYERS_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    int quick;   /* 1: small B for a smoke run (tests)               */
    int threads; /* 0: OpenMP's default                              */
    int reps;    /* timed repetitions (best is reported), >= 1       */
} bench_layers_opts;

/* Returns 0, or 1 after printing the library's message on a failure. */
int bench_layers_run(FILE *out, const bench_layers_opts *o);

/* One row of the table, for callers that lay it out themselves (attn demo):
 * kinds 0..BENCH_LAYERS_KINDS-1 alternate dot-product (even) and additive
 * (odd): the attention cores, the layers with projections, encoder layers;
 * B sequences of L tokens, d_model 512. Returns an attn_status (the
 * library's message in attn_last_error()). */
enum { BENCH_LAYERS_KINDS = 6 };
typedef struct {
    double fwd, fwdbwd; /* seconds, best of o->reps after one warm-up */
    size_t ws_bytes;    /* workspace kept for backward                  */
} bench_layers_result;
const char *bench_layers_name(int kind);
int bench_layers_measure(int kind, int64_t B, int64_t L,
                         const bench_layers_opts *o, bench_layers_result *r);

#endif
