/* attn bench --decode: one decode step over a KV cache against this
 * machine's memory bandwidth (bench/bench_decode.c). */
#include "cli.h"

#include "bench_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
        "usage: attn bench --decode [--quick] [--json] [--threads N] [--lq N]\n"
        "                  [--max-lk L] [--max-gb G] [--flash-max-lk L]\n"
        "                  [--batch LIST] [--kv-heads LIST] [--kv-dtypes LIST]\n"
        "\n"
        "Measures this machine's memory bandwidth (the best of three read\n"
        "methods with 1 and 2 threads over max(1 GiB, 4x the last-level cache)),\n"
        "then for B in {1, 4}, H = 32, Hkv in {32, 8}, D = 128,\n"
        "Lk in {1024, 8192, 32768, 131072} and the cache dtypes f32, f16, bf16, q8\n"
        "one decode step (Lq new queries per entry, bottom-right causal) over a\n"
        "full cache: ms per step (best of several, the cache read from memory each\n"
        "time), GB/s of K/V bytes read, the ratio to the bandwidth at the run's\n"
        "thread count, and the flash forward on the same call (K/V as tensors of\n"
        "the cache's dtype, f32 for q8). Each case is first checked against the\n"
        "reference; a wrong one is not reported and the command exits 1. Then the\n"
        "ratios of the targets: q8 / f16 and Hkv 8 / Hkv 32 step times.\n"
        "\n"
        "  --quick          B = 1 and Lk in {1024, 8192} only\n"
        "  --json           one JSON object per line: first the bandwidth (impl\n"
        "                   stream), then per case impl decode, B, H, Hkv, Lq, Lk, D,\n"
        "                   kv_dtype, threads, ms, gbps, bandwidth_gbps, ratio,\n"
        "                   kv_bytes, flash_ms (null when not timed), max_err\n"
        "  --threads N      threads of the kernels (default: OpenMP's)\n"
        "  --lq N           new queries per step (default 1)\n"
        "  --max-lk L       skip cases with Lk above L\n"
        "  --max-gb G       skip a cache (and the flash copy) above G GB (default 6)\n"
        "  --flash-max-lk L time the flash forward up to this Lk (default 32768)\n"
        "  --batch LIST     batch sizes, e.g. 1,4\n"
        "  --kv-heads LIST  KV heads (divisors of 32), e.g. 32,8\n"
        "  --kv-dtypes LIST cache dtypes among f32,f16,bf16,q8\n"
        "  --bandwidth-mb N size of the bandwidth read in MiB (default: the larger\n"
        "                   of 1024 and 4x the last-level cache; the read between\n"
        "                   steps, 2x that cache, shrinks with it: for quick tests)\n");
}

int cmd_bench_decode(const char *cmd, int argc, char **argv) {
    bench_decode_opts o = {.lq = 1, .max_gb = 6.0, .flash_max_lk = 32768};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (cli_is_help(a)) {
            help();
            return 0;
        } else if (strcmp(a, "--quick") == 0) {
            o.quick = 1;
        } else if (strcmp(a, "--json") == 0) {
            o.json = 1;
        } else if (strcmp(a, "--threads") == 0 || strcmp(a, "--lq") == 0 ||
                   strcmp(a, "--max-lk") == 0 ||
                   strcmp(a, "--flash-max-lk") == 0) {
            if (!val || cli_parse_i64(val, &x) || x < 0 || x > (1ll << 30) ||
                (x < 1 && (a[2] == 't' || a[2] == 'l')))
                return cli_usage_error(cmd, "%s needs a count, not '%s'", a,
                                       val ? val : "");
            if (a[2] == 't') {
                if (x > 4096)
                    return cli_usage_error(cmd, "--threads takes 1..4096");
                o.threads = (int)x;
            } else if (a[2] == 'l') {
                if (x > 4096) return cli_usage_error(cmd, "--lq takes 1..4096");
                o.lq = x;
            } else if (a[2] == 'm') {
                o.max_lk = x;
            } else {
                o.flash_max_lk = x;
            }
            i++;
        } else if (strcmp(a, "--bandwidth-mb") == 0) {
            if (!val || cli_parse_i64(val, &x) || x < 1 || x > (1 << 20))
                return cli_usage_error(cmd, "--bandwidth-mb takes 1..1048576");
            o.bandwidth_mb = x;
            i++;
        } else if (strcmp(a, "--max-gb") == 0) {
            char *end;
            double g = val ? strtod(val, &end) : 0.0;
            if (!val || *end || !(g > 0.0 && g < 1e6))
                return cli_usage_error(cmd,
                                       "--max-gb needs a positive size in GB");
            o.max_gb = g;
            i++;
        } else if (strcmp(a, "--batch") == 0 || strcmp(a, "--kv-heads") == 0 ||
                   strcmp(a, "--kv-dtypes") == 0) {
            if (!val) return cli_usage_error(cmd, "%s needs a list", a);
            if (a[2] == 'b')
                o.batches = val;
            else if (a[5] == 'h')
                o.kv_heads = val;
            else
                o.dtypes = val;
            i++;
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
    }
    return bench_decode_run(&o, stdout);
}
