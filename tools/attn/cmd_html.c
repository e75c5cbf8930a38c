/* attn html: an interactive, self-contained HTML viewer of weights. */
#include "cli.h"

#include <string.h>

void cmd_html_help(void) {
    printf(
        "usage: attn html W.npy -o view.html [--tokens \"t0 t1 ...\"]\n"
        "                 [--x-tokens ..] [--y-tokens ..] [--title T] [--batch N]\n"
        "                 [--axes NAMES]\n"
        "\n"
        "Writes one HTML file with everything inline (no network, no external\n"
        "scripts): query tokens on the left, key tokens on the right, one line per\n"
        "pair whose opacity is the weight; hover a token to keep only its lines;\n"
        "selectors of the first axis (batch entry or layer) and the head; the\n"
        "heatmap beside it (hover a cell for its value). A link may open a view:\n"
        "view.html#layer=1&head=2&focus=q3 (#batch=1 for batch entries).\n"
        "W is rank 2 (Lq, Lk), 3 (batch, Lq, Lk), 4 (batch, head, Lq, Lk) or\n"
        "5 (layer, batch, head, Lq, Lk) as attn encoder --weights writes, of which\n"
        "--batch N (default 0) is shown; up to 1024 tokens a side.\n"
        "  --tokens    labels of both sides (when Lq == Lk), whitespace-separated\n"
        "  --x-tokens  key labels, --y-tokens query labels (as heatmap and show)\n" CLI_AXES_HELP
        "\nexample:\n  attn html w.npy --tokens \"The cat sat on the mat\" -o view.html\n");
}

int cmd_html(const char *cmd, int argc, char **argv) {
    cli_tensor w;
    cli_labels lb;
    memset(&w, 0, sizeof w);
    cli_labels_init(&lb, "--x-tokens", "--y-tokens");
    const char *path = NULL, *out = NULL;
    attn_html_opts o = {NULL, NULL, NULL, NULL};
    const char *axes = NULL;
    int rc = 0;
    int64_t batch = 0;
    int batch_set = 0;
    const char *arg, *val;
    for (int i = 0;
         cli_viz_next(cmd, argc, argv, &i, NULL, &path, &arg, &val, &rc);) {
        if (strcmp(arg, "-o") == 0 || strcmp(arg, "--out") == 0)
            out = val;
        else if (cli_labels_opt(cmd, &lb, arg, val, &rc)) {
        }
        /* the names of the first version */
        else if (strcmp(arg, "--q-tokens") == 0) {
            cli_tokens_free(&lb.y); /* main refuses repeats */
            rc = cli_tokens_parse(cmd, arg, val, &lb.y);
        } else if (strcmp(arg, "--k-tokens") == 0) {
            cli_tokens_free(&lb.x);
            rc = cli_tokens_parse(cmd, arg, val, &lb.x);
        } else if (strcmp(arg, "--batch") == 0) {
            if (cli_parse_i64(val, &batch) || batch < 0)
                rc = cli_usage_error(
                    cmd, "--batch wants an index >= 0, got '%s'", val);
            batch_set = 1;
        } else if (strcmp(arg, "--title") == 0)
            o.title = val;
        else if (strcmp(arg, "--axes") == 0)
            axes = val;
        else
            rc = cli_usage_error(cmd, "unknown option '%s'", arg);
        if (rc) goto done;
    }
    if (rc) goto done;
    if (!path || !out) {
        rc = cli_usage_error(cmd, "missing %s",
                             path ? "-o view.html" : "the weights file");
        goto done;
    }
    {
        const char *in_names[1] = {"the weights file"}, *out_names[1] = {"-o"};
        const char *ins[1] = {path}, *outs[1] = {out};
        if ((rc = cli_distinct_outputs(cmd, in_names, ins, 1, out_names, outs,
                                       1)))
            goto done;
    }
    if ((rc = cli_load_weights(cmd, path, axes, &w))) goto done;
    /* the first picker names the view's first axis: the layer of rank-5
     * weights (one batch entry shown), else the file's own name for it */
    o.first_axis = w.rank == 5 ? "layer" : "batch";
    for (int k = 0; k < w.naxes && w.rank != 5; k++)
        if (w.view[k] == 0) o.first_axis = w.axis[k];
    if (batch_set && w.rank != 5) {
        rc = cli_usage_error(cmd,
                             "--batch picks a batch entry of rank-5 "
                             "(layer, batch, head, Lq, Lk) weights; these "
                             "have rank %d",
                             w.rank);
        goto done;
    }
    if (w.rank == 5) {
        /* one batch entry: (layer, head, Lq, Lk), a strided view */
        if (batch >= w.batch) {
            rc = cli_usage_error(cmd,
                                 "--batch %lld is outside the weights' "
                                 "%lld batch entries",
                                 (long long)batch, (long long)w.batch);
            goto done;
        }
        attn_tensor *t = &w.t;
        int64_t map = t->shape[1] * t->shape[2] * t->shape[3];
        t->data =
            (char *)t->data + (size_t)(batch * map) * attn_dtype_size(t->dtype);
        t->shape[0] = w.layers;
        t->stride[0] = w.batch * map;
    }
    int64_t Lq = w.t.shape[2], Lk = w.t.shape[3];
    if ((rc = cli_labels_axis(cmd, &lb, 0, Lq, "queries", &o.q_tokens)) ||
        (rc = cli_labels_axis(cmd, &lb, 1, Lk, "keys", &o.k_tokens)))
        goto done;
    attn_status st = attn_html_write(out, &w.t, &o);
    if (st) {
        rc = cli_fail(cmd, st, "writing the viewer");
        goto done;
    }
    int batch_axis = strcmp(o.first_axis, "batch") == 0;
    printf("wrote %s (%lld %s%s x %lld head%s, %lld x %lld tokens)\n", out,
           (long long)w.t.shape[0], o.first_axis,
           w.t.shape[0] == 1 ? ""
           : batch_axis      ? " entries"
                             : "s",
           (long long)w.t.shape[1], w.t.shape[1] == 1 ? "" : "s", (long long)Lq,
           (long long)Lk);
done:
    cli_labels_free(&lb);
    cli_tensor_free(&w);
    return rc;
}
