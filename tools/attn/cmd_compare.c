/* attn compare: two weight files side by side in numbers (and a picture). */
#include "cli.h"

#include <string.h>

void cmd_compare_help(void) {
    printf(
        "usage: attn compare A.npy B.npy [-o diff.png|svg|pdf]\n"
        "\n"
        "Compares two weight tensors of the same shape and prints:\n"
        "  max |A - B| and mean |A - B| over all elements;\n"
        "  the mean and largest KL(A || B) of a row, sum_j A log(A / B) (natural\n"
        "  log; A is the teacher, B the student, as in distillation). A row where\n"
        "  B is 0 but A is not has an infinite KL.\n"
        "With -o, draws A - B (every map in a grid) in a blue-white-red colour map\n"
        "symmetric around 0.\n"
        "\nexample:\n  attn compare w_ref.npy w_flash.npy -o diff.png\n");
}

int cmd_compare(const char *cmd, int argc, char **argv) {
    const char *pa = NULL, *pb = NULL, *out = NULL;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--out") == 0) {
            if (i + 1 >= argc)
                return cli_usage_error(cmd, "%s needs a path", argv[i]);
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!pa) {
            pa = argv[i];
        } else if (!pb) {
            pb = argv[i];
        } else {
            return cli_usage_error(cmd, "two weight files, got a third '%s'",
                                   argv[i]);
        }
    }
    if (!pb) return cli_usage_error(cmd, "needs two weight files");
    cli_tensor a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    {
        const char *in_names[2] = {"A", "B"}, *out_names[1] = {"-o"};
        const char *ins[2] = {pa, pb}, *outs[1] = {out};
        if ((rc = cli_distinct_outputs(cmd, in_names, ins, 2, out_names, outs,
                                       1)))
            return rc;
    }
    /* any weights file the project writes, rank 5 included */
    if ((rc = cli_load_weights(cmd, pa, NULL, &a)) ||
        (rc = cli_load_weights(cmd, pb, NULL, &b)))
        goto done;
    /* the files' own shapes, not their 4-d views, in the message */
    int same = a.npy.ndim == b.npy.ndim;
    for (int i = 0; same && i < a.npy.ndim; i++)
        same = a.npy.shape[i] == b.npy.shape[i];
    if (!same) {
        char sa[160], sb[160], na[96], nb[96];
        cli_shape_str(sa, sizeof sa, a.npy.ndim, a.npy.shape);
        cli_shape_str(sb, sizeof sb, b.npy.ndim, b.npy.shape);
        cli_axes_str(&a, na, sizeof na);
        cli_axes_str(&b, nb, sizeof nb);
        fprintf(stderr,
                "attn %s: A has shape %s %s but B has %s %s: compare needs "
                "two weight files of one shape\n",
                cmd, sa, na, sb, nb);
        rc = 1;
        goto done;
    }
    attn_compare_result r;
    attn_status st = attn_compare_weights(&a.t, &b.t, &r);
    if (st) {
        rc = cli_fail(cmd, st, "comparing");
        goto done;
    }
    char sa[160], na[96];
    cli_shape_str(sa, sizeof sa, a.npy.ndim, a.npy.shape);
    cli_axes_str(&a, na, sizeof na);
    printf("A %s, B %s: shape %s %s\n", pa, pb, sa, na);
    printf("max |A - B|   %.6g\n", r.max_abs);
    printf("mean |A - B|  %.6g\n", r.mean_abs);
    printf("KL(A || B)    mean %.6g, max %.6g over %lld rows\n", r.mean_kl,
           r.max_kl, (long long)r.rows);
    if (r.nonfinite)
        printf("skipped %lld non-finite elements\n", (long long)r.nonfinite);
    if (out) {
        attn_heatmap_opts o;
        attn_heatmap_opts_init(&o);
        o.title = "A - B";
        st = attn_diff_write(out, &a.t, &b.t, &o);
        rc = cli_wrote(cmd, st, "drawing the difference", out);
    }
done:
    cli_tensor_free(&a);
    cli_tensor_free(&b);
    return rc;
}
