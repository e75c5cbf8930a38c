/* attn bench-layers: additive vs dot-product attention layers. */
#include "cli.h"
#include "bench_layers.h"

#include <string.h>

int cmd_bench_layers(int argc, char **argv) {
    const char *cmd = "bench-layers";
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
        if (strcmp(argv[i], "--quick") == 0)
            o.quick = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) {
            int64_t t;
            if (cli_parse_i64(argv[++i], &t) || t < 0 || t > 4096)
                return cli_usage_error(cmd, "--threads takes 0..4096");
            o.threads = (int)t;
        } else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) {
            int64_t t;
            if (cli_parse_i64(argv[++i], &t) || t < 1 || t > 1000)
                return cli_usage_error(cmd, "--reps takes 1..1000");
            o.reps = (int)t;
        } else
            return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
    }
    return bench_layers_run(stdout, &o);
}
