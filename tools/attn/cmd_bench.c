/* attn bench: the attention benchmark (bench/bench.c) from the command line. */
#include "cli.h"
#include "cli_ring.h"

#include "bench.h"
#include "bench_gemv.h"
#include "bench_score_mods.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
        "usage: attn bench [--quick] [--json] [--threads N] [--cases SPEC,...]\n"
        "                  [--long] [--ref-max L] [--backward-max L]\n"
        "                  [--tiles BQxBK[/RC]]\n"
        "\n"
        "Measures this machine's cblas_sgemm on 1024^3 with 1 and 2 threads (the\n"
        "ceiling), then for each case the reference and the flash kernel: time,\n"
        "GFLOP/s (4 B H D x visible query-key pairs), the ratio to the ceiling at\n"
        "the run's thread count, the speedup over the reference and the peak extra\n"
        "memory the library allocated. Each case is first checked against the\n"
        "reference (sampled rows beyond --ref-max); a wrong kernel is not reported\n"
        "and the command exits 1.\n"
        "\n"
        "Cases up to --backward-max (default 4096) also time the flash backward\n"
        "(row 'bwd'): FLOPs 2.5x the forward's, the backward/forward time ratio in\n"
        "column bwd/fwd, its extra memory. It is first checked against the reference\n"
        "backward: dO kept on three blocks of 16 query rows, dQ of those rows and dK,\n"
        "dV of heads 0 and H-1 compared (max error relative to the largest gradient\n"
        "<= 1e-5); a wrong backward is not reported and the command exits 1.\n"
        "bf16 cases on a path with AVX512_BF16 add rows 'fl16' and 'bw16': the\n"
        "forward and backward on bf16 tile products (ATTN_IMPL_FLASH_BF16),\n"
        "checked to bf16's tolerance (forward: 4e-3 of the reference; backward:\n"
        "3e-2 of the largest gradient of the f32 products' backward).\n"
        "\n"
        "Default cases: B=1, H=8, L in {512, 1024, 2048, 4096, 16384}, D in {64, 128},\n"
        "full and causal, f32 and f16; the reference up to L=2048.\n"
        "\n"
        "  --quick          L in {1024, 4096} only (f16 at D=64 only)\n"
        "  --json           one JSON object per line (keys impl, B, H, Lq, Lk, D,\n"
        "                   causal, dtype, threads, ms, gflops, ceiling_gflops,\n"
        "                   ratio, extra_bytes, speedup, max_err; backward lines:\n"
        "                   impl flash_bwd or flash_bf16_bwd, max_rel_err,\n"
        "                   bwd_fwd_ratio)\n"
        "  --threads N      threads of the kernels (default: OpenMP's, OMP_NUM_THREADS)\n"
        "  --cases LIST     comma-separated cases L:D[:causal][:f16|:bf16|:f32][:hN]\n"
        "                   e.g. 1024:64,4096:128:causal:f16\n"
        "  --long           add L=65536, H=8, D=64 (flash only; shows extra memory)\n"
        "  --ref-max L      run the reference up to this L (default 2048)\n"
        "  --backward-max L time the backward for cases up to this L (default 4096:\n"
        "                   the default run takes ~3 minutes; 0: forward only, ~2)\n"
        "  --tiles BQxBK[/RC]\n"
        "                   flash tile sizes and the row band of partial tiles\n"
        "                   (tuning; default: the built-in ones)\n"
        "  --model DIR      instead: sentences/s of a pretrained model (attn\n"
        "                   bench --model DIR --help)\n"
        "  --layers         instead: additive vs dot-product layers (attn\n"
        "                   bench-layers; takes --quick, --threads N, --reps N)\n"
        "  --score-mods     instead: soft-capping, ALiBi, sinks and user score/mask\n"
        "                   functions against plain causal attention, packed\n"
        "                   documents against the documents\n"
        "                   one by one (takes --quick, --threads N, --reps N,\n"
        "                   --lengths L,LP)\n"
        "  --gemv           instead: the decoding matrix-vector products on\n"
        "                   SmolLM2-135M's shapes, f32 x against 8-bit x,\n"
        "                   W row after row and packed (takes --threads N)\n"
        "  --decode         instead: a decode step over a KV cache against the\n"
        "                   memory bandwidth (attn bench --decode --help)\n"
        "  --ring contiguous|zigzag\n"
        "                   instead, under mpirun -np P: the ring forward (and\n"
        "                   backward): per-step compute and wait, the K/V transfer\n"
        "                   alone, overlap, balance, efficiency against one process\n"
        "                   with P threads; takes --L N --H N --D N --causal\n"
        "                   --threads N (per rank) --backward --no-single --reps N\n");
}

int cmd_bench(const char *cmd, int argc, char **argv) {
    bench_opts o = {.ref_max_l = 2048, .bwd_max_l = 4096};
    bench_case cases[64];
    const char *ring = NULL;
    int rrc = cli_ring_take(cmd, &argc, argv, &ring);
    if (rrc) return rrc;
    if (ring) return cli_ring_bench(ring, argc, argv);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--model") == 0) /* tools/attn/cmd_pretrained.c */
            return cli_bench_model(cmd, argc, argv);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--layers") == 0) { /* bench/bench_layers.c */
            for (int j = i; j + 1 < argc; j++) argv[j] = argv[j + 1];
            return cmd_bench_layers("bench-layers", argc - 1, argv);
        } else if (strcmp(argv[i], "--score-mods") == 0) {
            /* bench/bench_score_mods.c */
            bench_score_mods_opts so = {0, 0, 3, 0, 0};
            for (int j = 1; j < argc; j++) {
                if (j == i) continue;
                const int r = cli_bench_opt(cmd, argc, argv, &j, &so.quick,
                                            &so.threads, &so.reps);
                if (r > 0) return r;
                if (r == 0) continue;
                if (j + 1 < argc && strcmp(argv[j], "--lengths") == 0) {
                    /* L,LP: the lengths of the two tables (tests) */
                    char *e;
                    long long a = strtoll(argv[++j], &e, 10), c2 = 0;
                    if (*e == ',') c2 = strtoll(e + 1, &e, 10);
                    if (*e || a < 1 || a > 65536 || c2 < 16 || c2 > 65536)
                        return cli_usage_error(cmd,
                                               "--lengths takes L,LP with "
                                               "1 <= L and 16 <= LP <= 65536");
                    so.l = a;
                    so.lp = c2;
                } else
                    return cli_usage_error(cmd,
                                           "--score-mods takes --quick, "
                                           "--threads N, --reps N, not '%s'",
                                           argv[j]);
            }
            return bench_score_mods_run(stdout, &so);
        } else if (strcmp(argv[i], "--gemv") == 0) { /* bench/bench_gemv.c */
            long th = 0;
            for (int j = 1; j < argc; j++) {
                char *e = NULL;
                if (j != i && strcmp(argv[j], "--threads") == 0 &&
                    j + 1 < argc &&
                    ((th = strtol(argv[j + 1], &e, 10)),
                     !*e && th >= 1 && th <= 1024)) {
                    j++;
                    continue;
                }
                if (j != i)
                    return cli_usage_error(cmd,
                                           "--gemv takes --threads N, not "
                                           "'%s'",
                                           argv[j]);
            }
            return bench_gemv_run((int)th, 0, stdout);
        } else if (strcmp(argv[i], "--decode") ==
                   0) { /* bench/bench_decode.c */
            for (int j = i; j + 1 < argc; j++) argv[j] = argv[j + 1];
            return cmd_bench_decode("bench --decode", argc - 1, argv);
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            help();
            return 0;
        } else if (strcmp(a, "--quick") == 0) {
            o.quick = 1;
        } else if (strcmp(a, "--json") == 0) {
            o.json = 1;
        } else if (strcmp(a, "--long") == 0) {
            o.long_case = 1;
        } else if (strcmp(a, "--threads") == 0 || strcmp(a, "--ref-max") == 0 ||
                   strcmp(a, "--backward-max") == 0) {
            char *end;
            if (!val) return cli_usage_error(cmd, "%s needs a value", a);
            long long v = strtoll(val, &end, 10);
            if (*end || v < (a[2] == 't' ? 1 : 0) || v > (1ll << 24))
                return cli_usage_error(cmd, "%s: bad value '%s'", a, val);
            if (a[2] == 't')
                o.threads = (int)v;
            else if (a[2] == 'r')
                o.ref_max_l = v;
            else
                o.bwd_max_l = v;
            i++;
        } else if (strcmp(a, "--tiles") == 0) {
            long long bq, bk, rc = 0;
            char x, y;
            int got =
                val ? sscanf(val, "%lld%c%lld%c%lld", &bq, &x, &bk, &y, &rc)
                    : 0;
            if ((got != 3 && got != 5) || x != 'x' || (got == 5 && y != '/') ||
                bq < 1 || bk < 1 || bq > 65536 || bk > 65536 ||
                (got == 5 && (rc < 1 || rc > 65536)))
                return cli_usage_error(cmd, "--tiles wants BQxBK or BQxBK/RC, "
                                            "e.g. 256x256/64");
            o.tile_bq = bq;
            o.tile_bk = bk;
            o.tile_rc = rc;
            i++;
        } else if (strcmp(a, "--cases") == 0) {
            if (!val) return cli_usage_error(cmd, "--cases needs a list");
            char *list = strdup(val), *save = NULL;
            if (!list) return cli_usage_error(cmd, "out of memory");
            for (char *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                if (o.ncases >= 64) {
                    free(list);
                    return cli_usage_error(cmd, "at most 64 cases");
                }
                if (bench_parse_case(t, &cases[o.ncases]) != 0) {
                    int r = cli_usage_error(
                        cmd, "bad case '%s' (want L:D[:causal][:f16])", t);
                    free(list);
                    return r;
                }
                o.ncases++;
            }
            free(list);
            o.cases = cases;
            i++;
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        }
    }
    int rc = bench_run(&o, stdout);
    return rc == 0 ? 0 : 1;
}
