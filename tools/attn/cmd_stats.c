/* attn stats: diagnostics of attention weights with a verdict. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cmd_stats_help(void) {
    printf(
        "usage: attn stats W.npy [--strict] [--axes NAMES] [mask options]\n"
        "\n"
        "Reports, per map (named by the file's axes: layer, batch, head) and overall:\n"
        "  rows      query rows (and how many see no key under the mask)\n"
        "  sum dev   largest |row sum - 1| (0 expected for a row that sees no key)\n"
        "  entropy   min / mean / max over rows of the entropy of the row divided\n"
        "            by log(visible keys): 0 = one-hot, 1 = uniform\n"
        "  max w     the largest weight\n"
        "  leak      weight on masked positions (count, total, largest)\n"
        "  nan/inf   non-finite weights\n"
        "and a verdict in plain words: too uniform (mean entropy >= 0.95), too\n"
        "concentrated (<= 0.01: a saturated, one-hot softmax), masked leakage, not\n"
        "normalized, non-finite. A sharp map (<= 0.10) is said to be sharp, not\n"
        "faulted: tasks that copy or align positions want one.\n"
        "Give the mask the weights were made with to see leakage.\n"
        "  --strict   exit with status 3 when the verdict finds anything\n"
        "W is (Lq, Lk), (batch, Lq, Lk), (batch, head, Lq, Lk) or, as attn encoder\n"
        "--weights writes, (layer, batch, head, Lq, Lk).\n" CLI_AXES_HELP "\n");
    cli_args_help(stdout, CLI_OPTS_MASK);
    printf("\nexample:\n  attn stats w.npy --causal top-left\n");
}

static void row(const char *name, const attn_stats *s) {
    char ent[64];
    if (s->entropy_rows)
        snprintf(ent, sizeof ent, "%.3f %.3f %.3f", s->entropy_min,
                 s->entropy_mean, s->entropy_max);
    else
        snprintf(ent, sizeof ent, "%-17s", "n/a");
    printf("%-26s %6lld %5lld  %9.2e  %s  %7.4f  %5lld %9.3g  %lld/%lld\n",
           name, (long long)s->rows, (long long)s->rows_empty,
           s->row_sum_dev_max, ent, s->max_weight, (long long)s->leak_count,
           s->leak_total, (long long)s->nan_count, (long long)s->inf_count);
}

int cmd_stats(const char *cmd, int argc, char **argv) {
    cli_sdpa_args a;
    cli_tensor w;
    attn_stats *per = NULL;
    memset(&w, 0, sizeof w);
    cli_sdpa_args_init(&a);
    a.kinds = CLI_OPTS_MASK;
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &a);
    if (rc) goto done;
    const char *path = NULL, *axes = NULL;
    int strict = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--strict") == 0) {
            strict = 1;
        } else if (strcmp(argv[i], "--axes") == 0) {
            if (i + 1 >= argc) {
                rc = cli_usage_error(cmd, "--axes needs a value");
                goto done;
            }
            axes = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = cli_usage_error(cmd, "unknown option '%s'", argv[i]);
            goto done;
        } else if (path) {
            rc = cli_usage_error(cmd, "one weights file, got '%s' and '%s'",
                                 path, argv[i]);
            goto done;
        } else {
            path = argv[i];
        }
    }
    if ((rc = cli_load_weights(cmd, path, axes, &w))) goto done;
    const attn_tensor *W = &w.t;
    if ((rc = cli_sdpa_args_bind(cmd, &a, W->shape[0], W->shape[1], W->shape[2],
                                 W->shape[3])))
        goto done;
    int64_t maps = W->shape[0] * W->shape[1];
    per = malloc(sizeof *per * (size_t)maps);
    if (!per) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        rc = 1;
        goto done;
    }
    attn_stats all;
    attn_status st = attn_stats_compute(W, &a.opts.mask, per, &all);
    if (st) {
        rc = cli_fail(cmd, st, "computing the statistics");
        goto done;
    }
    const attn_npy *f = &w.npy;
    printf("weights %s: (", path);
    for (int i = 0; i < f->ndim; i++)
        printf("%s%lld", i ? ", " : "", (long long)f->shape[i]);
    char names[96];
    cli_axes_str(&w, names, sizeof names);
    printf(") %s\n\n", names);
    printf("%-26s %6s %5s  %9s  %-17s  %7s  %5s %9s  %s\n", "map", "rows",
           "empty", "sum dev", "entropy min/mean/max", "max w", "leaks",
           "leak sum", "nan/inf");
    if (maps > 1)
        for (int64_t n = 0; n < W->shape[0]; n++)
            for (int64_t h = 0; h < W->shape[1]; h++) {
                char name[64];
                cli_map_name(&w, n, h, name, sizeof name);
                row(name, &per[n * W->shape[1] + h]);
            }
    row("overall", &all);
    size_t need = 0;
    attn_stats_verdict(&all, NULL, 0, &need);
    char *text = malloc(need + 1);
    if (text) {
        attn_stats_verdict(&all, text, need + 1, NULL);
        printf("\nverdict: %s\n", text);
        free(text);
    }
    if (maps > 1)
        for (int64_t i = 0; i < maps; i++)
            if (per[i].verdict && per[i].verdict != all.verdict) {
                char name[64];
                cli_map_name(&w, i / W->shape[1], i % W->shape[1], name,
                             sizeof name);
                printf("  (map %s differs: ", name);
                attn_stats_verdict(&per[i], NULL, 0, &need);
                text = malloc(need + 1);
                if (text) {
                    attn_stats_verdict(&per[i], text, need + 1, NULL);
                    printf("%s)\n", text);
                    free(text);
                }
            }
    if (strict && all.verdict) rc = 3;
done:
    free(per);
    cli_tensor_free(&w);
    cli_sdpa_args_free(&a);
    return rc;
}
