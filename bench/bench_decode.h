/* The decode benchmark behind `attn bench --decode`: this machine's memory
 * bandwidth (a STREAM-style read), then one decode step over a KV cache
 * per case, each checked against the reference before it is reported. */
#ifndef ATTN_BENCH_DECODE_H
#define ATTN_BENCH_DECODE_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    int quick;            /* Lk in {1024, 8192}, B = 1: a short run        */
    int json;             /* one JSON object per case                       */
    int threads;          /* 0: OpenMP's default                            */
    int64_t lq;           /* new queries per step (default 1)               */
    int64_t max_lk;       /* skip Lk above it (0: no limit)                 */
    double max_gb;        /* skip a case whose cache needs more (GB)        */
    int64_t flash_max_lk; /* time the flash forward up to this Lk          */
    const char *dtypes;   /* comma list of kv dtypes (NULL: all four)       */
    const char *batches;  /* comma list of B (NULL: 1,4)                    */
    const char *kv_heads; /* comma list of Hkv (NULL: 32,8)                */
    int64_t bandwidth_mb; /* MiB of the bandwidth read (0: bench_mem.c)   */
} bench_decode_opts;

/* Returns 0 when every case ran and passed its check, 1 if a case failed
 * its check (not reported), 2 on other errors. */
int bench_decode_run(const bench_decode_opts *o, FILE *out);

#endif
