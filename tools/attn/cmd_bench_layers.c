/* attn bench-layers: additive vs dot-product attention layers. */
#include "cli.h"
#include "bench_layers.h"

#include <string.h>

int cli_bench_opt(const char *cmd, int argc, char **argv, int *i, int *quick,
                  int *threads, int *reps) {
    const char *a = argv[*i];
    if (strcmp(a, "--quick") == 0) return *quick = 1, 0;
    const int thr = strcmp(a, "--threads") == 0;
    if (*i + 1 >= argc || (!thr && strcmp(a, "--reps") != 0)) return -1;
    int64_t t;
    if (cli_parse_i64(argv[++*i], &t) ||
        (thr ? t < 0 || t > 4096 : t < 1 || t > 1000))
        return cli_usage_error(cmd, thr ? "--threads takes 0..4096"
                                        : "--reps takes 1..1000");
    *(thr ? threads : reps) = (int)t;
    return 0;
}

int cmd_bench_layers(const char *cmd, int argc, char **argv) {
    bench_layers_opts o = {0, 0, 3};
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            printf(
                "usage: attn bench-layers [--quick] [--threads T] [--reps N]\n"
                "       (also: attn bench --layers ...)\n\n"
                "Times multi-head attention (d_model 512, 8 heads) against\n"
                "additive attention (A = 256) and an encoder layer of each kind\n"
                "(dim_feedforward 2048) on B = 32, L = 100 and 512: forward,\n"
                "forward + backward (best of N, default 3) and the workspace\n"
                "kept for backward. --quick uses B = 2 (a smoke run).\n");
            return 0;
        }
        const int r =
            cli_bench_opt(cmd, argc, argv, &i, &o.quick, &o.threads, &o.reps);
        if (r > 0) return r;
        if (r < 0)
            return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
    }
    return bench_layers_run(stdout, &o);
}
