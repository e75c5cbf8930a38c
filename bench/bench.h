/* The attention benchmark behind `attn bench` (tools/attn/cmd_bench.c).
 * bench/ may print; it links the library and its internal headers (tile
 * overrides, the allocation counter). */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H

#include <stdint.h>
#include <stdio.h>

/* One benchmark case: B=1 by default, H heads, Lq = Lk = L, D = Dk = Dv.
 * The forward is always measured, the backward when L <= bwd_max_l. */
typedef struct {
    int64_t B, H, L, D;
    int causal;
    int dtype; /* attn_dtype of q, k, v: ATTN_F32 or ATTN_F16 / ATTN_BF16 */
} bench_case;

typedef struct {
    int quick;         /* a short list of cases                           */
    int json;          /* one JSON object per line instead of the table   */
    int threads;       /* 0: OpenMP's default                             */
    int long_case;     /* add L = 65536, H = 8, D = 64 (flash only)       */
    int64_t ref_max_l; /* run the reference up to this L (default 2048)   */
    int64_t bwd_max_l; /* backward cases up to this L (0: none)           */
    int64_t tile_bq, tile_bk, tile_rc; /* tile overrides (0: default)     */
    const bench_case *cases; /* explicit cases (NULL: the default list) */
    int ncases;
} bench_opts;

/* Parses "L:D[:causal][:f16|:bf16|:f32][:hN]" into c (B=1, H=8 unless
 * given). Returns 0 on success, -1 on a malformed spec. */
int bench_parse_case(const char *spec, bench_case *c);

/* Runs the benchmark, printing to out (errors to stderr). Returns 0 when
 * every case ran and passed its check against the reference, 1 if a case
 * failed its check (its figures are then not reported), 2 on other errors. */
int bench_run(const bench_opts *o, FILE *out);

/* The f32 FMA peak of `threads` cores in GFLOP/s (0 below AVX-512). */
double bench_fma_peak(int threads);

/* GFLOP/s of an n^3 product on the bf16 tile products with `threads`
 * threads (0 where the path lacks AVX512_BF16). */
double bench_bf16_gemm_gflops(int n, int threads);

#endif
