/* attn show: a weights file as a coloured map in the terminal. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_show_help(void) {
    printf(
        "usage: attn show W.npy [--tokens \"t0 t1 ...\"] [--x-tokens ..] [--y-tokens ..]\n"
        "                 [--map B,H] [--color true|256|plain] [--width N]\n"
        "                 [--half-blocks on|off|auto] [--title T] [--axes NAMES]\n"
        "                 [mask options]\n"
        "\n"
        "Prints the map W[B, H] (default 0,0; the first line names it when W holds\n"
        "more than one) with Unicode blocks: one cell is two\n"
        "columns with a label per row and the key labels over the columns (longer\n"
        "than one character: column numbers and a legend of the keys), or,\n"
        "for maps over 40 tokens, a half block per cell (two rows a line). Wider\n"
        "maps are averaged in blocks to fit. A scale line closes the picture.\n"
        "W is (Lq, Lk), (batch, Lq, Lk), (batch, head, Lq, Lk) or (layer, batch,\n"
        "head, Lq, Lk) as attn encoder --weights writes (then --map L,B,H).\n"
        "  --tokens     labels of both axes (when Lq == Lk), whitespace-separated\n"
        "  --x-tokens   key labels, --y-tokens query labels\n"
        "  --color      true (24-bit), 256 (xterm palette) or plain (shades, no\n"
        "               escapes). Default: plain if NO_COLOR is set or the\n"
        "               output is not a terminal, true if COLORTERM is truecolor\n"
        "               or 24bit, else 256\n"
        "  --width      terminal columns (default: COLUMNS, else 80)\n" CLI_AXES_HELP
        "Mask options (--causal, --window, --mask, ...) grey out masked cells.\n"
        "\n");
    cli_args_help(stdout, CLI_OPTS_MASK);
    printf(
        "\nexample:\n  attn show w.npy --tokens \"The cat sat\" --color 256\n");
}

int cmd_show(const char *cmd, int argc, char **argv) {
    cli_sdpa_args a;
    cli_tensor w;
    cli_labels lb;
    char *buf = NULL;
    memset(&w, 0, sizeof w);
    cli_labels_init(&lb, "--x-tokens", "--y-tokens");
    cli_sdpa_args_init(&a);
    a.kinds = CLI_OPTS_MASK;
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &a);
    if (rc) goto done;

    attn_term_opts o;
    attn_term_opts_init(&o);
    const char *nc = getenv("NO_COLOR"), *ct = getenv("COLORTERM");
    /* no escapes into a file or a pipe, nor when NO_COLOR asks */
    if ((nc && nc[0]) || !isatty(STDOUT_FILENO))
        o.color = ATTN_TERM_PLAIN;
    else if (ct && (strcmp(ct, "truecolor") == 0 || strcmp(ct, "24bit") == 0))
        o.color = ATTN_TERM_TRUECOLOR;
    else
        o.color = ATTN_TERM_256;
    const char *cols = getenv("COLUMNS");
    int64_t width;
    if (cols && cli_parse_i64(cols, &width) == 0 && width >= 20 &&
        width <= 4096)
        o.width = (int)width;
    const char *path = NULL, *axes = NULL;
    char title[400];
    int64_t mb = 0, mh = 0, map[3] = {0, 0, 0};
    int map_n = 0;
    const char *arg, *val;
    for (int i = 0;
         cli_viz_next(cmd, argc, argv, &i, NULL, &path, &arg, &val, &rc);) {
        if (cli_labels_opt(cmd, &lb, arg, val, &rc)) {
        } else if (strcmp(arg, "--map") == 0)
            rc = cli_parse_map(cmd, val, map, &map_n);
        else if (strcmp(arg, "--title") == 0)
            o.title = val;
        else if (strcmp(arg, "--axes") == 0)
            axes = val;
        else if (strcmp(arg, "--color") == 0) {
            if (strcmp(val, "true") == 0)
                o.color = ATTN_TERM_TRUECOLOR;
            else if (strcmp(val, "256") == 0)
                o.color = ATTN_TERM_256;
            else if (strcmp(val, "plain") == 0)
                o.color = ATTN_TERM_PLAIN;
            else
                rc = cli_usage_error(
                    cmd, "--color is true, 256 or plain, not '%s'", val);
        } else if (strcmp(arg, "--width") == 0) {
            if (cli_parse_i64(val, &width) || width < 20 || width > 4096)
                rc = cli_usage_error(cmd, "--width wants 20..4096, got '%s'",
                                     val);
            else
                o.width = (int)width;
        } else if (strcmp(arg, "--half-blocks") == 0) {
            rc = cli_on_off_auto(cmd, arg, val, &o.half_blocks);
        } else {
            rc = cli_usage_error(cmd, "unknown option '%s'", arg);
        }
        if (rc) goto done;
    }
    if (rc) goto done;
    if ((rc = cli_load_weights(cmd, path, axes, &w))) goto done;
    const attn_tensor *W = &w.t;
    if (!map_n) map_n = w.rank == 5 ? 3 : 2;
    if ((rc = cli_check_map(cmd, &w, map, map_n, &mb, &mh))) goto done;
    if (W->shape[0] * W->shape[1] > 1) {
        /* which of the maps this is, and how to pick another */
        char name[96], names[96], shape[160];
        cli_map_name(&w, mb, mh, name, sizeof name);
        cli_axes_str(&w, names, sizeof names);
        cli_shape_str(shape, sizeof shape, w.npy.ndim, w.npy.shape);
        snprintf(title, sizeof title,
                 "%s%s%s of %lld maps, %s %s; --map %s picks another",
                 o.title ? o.title : "", o.title ? ": " : "", name,
                 (long long)(W->shape[0] * W->shape[1]), names, shape,
                 w.rank == 5 ? "L,B,H" : "B,H");
        o.title = title;
    }
    if ((rc = cli_labels_bind(cmd, &lb, &a, W, &o.x_labels, &o.y_labels)))
        goto done;
    o.mask = &a.opts.mask;
    size_t len = 0;
    attn_status st = attn_term_render(W, mb, mh, &o, NULL, 0, &len);
    if (st) {
        rc = cli_fail(cmd, st, "rendering");
        goto done;
    }
    buf = malloc(len + 1);
    if (!buf) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        rc = 1;
        goto done;
    }
    st = attn_term_render(W, mb, mh, &o, buf, len + 1, &len);
    if (st) {
        rc = cli_fail(cmd, st, "rendering");
        goto done;
    }
    fwrite(buf, 1, len, stdout);
done:
    free(buf);
    cli_labels_free(&lb);
    cli_tensor_free(&w);
    cli_sdpa_args_free(&a);
    return rc;
}
