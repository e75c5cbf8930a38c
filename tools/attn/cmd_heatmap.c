/* attn heatmap: attention weights as a picture (PNG, SVG or PDF). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
"usage: attn heatmap W.npy -o out.png [--tokens ..] [--x-tokens ..]\n"
"                    [--y-tokens ..] [--title T] [--annotate on|off|auto]\n"
"                    [--map B,H | --grid] [--cmap viridis|diverging]\n"
"                    [--vmin V --vmax V] [--max-cells N] [mask options]\n"
"\n"
"Draws the map W[B, H] (default 0,0), or with --grid every map (one row\n"
"per batch entry or layer, one column per head, one colour scale). The\n"
"extension of -o picks the format: .png, .svg or .pdf.\n"
"W is rank 2 (Lq, Lk), 3 (B, Lq, Lk) or 4 (B, H, Lq, Lk).\n"
"  --tokens       labels of both axes (when Lq == Lk), whitespace-separated\n"
"  --x-tokens     key labels (columns), --y-tokens query labels (rows)\n"
"  --annotate     values in the cells: auto (maps up to 12 x 12), on, off\n"
"  --max-cells N  longest axis drawn (default 512); longer axes are\n"
"                 averaged in blocks\n"
"  --vmin/--vmax  colour scale (default: 0 .. the largest weight)\n"
"  --x-title/--y-title  axis titles (default key, query)\n"
"Mask options (--causal, --window, --mask, ...) draw masked cells grey.\n"
"\n");
    cli_sdpa_args_help(stdout);
    printf("\nexamples:\n"
"  attn heatmap w.npy --tokens \"The cat sat\" --title self-attention -o w.png\n"
"  attn heatmap w.npy --grid -o heads.svg\n");
}

int cmd_heatmap(int argc, char **argv) {
    const char *cmd = "heatmap";
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
    cli_sdpa_args a;
    cli_tensor w;
    cli_tokens tx, ty, tb;
    memset(&w, 0, sizeof w);
    memset(&tx, 0, sizeof tx);
    memset(&ty, 0, sizeof ty);
    memset(&tb, 0, sizeof tb);
    cli_sdpa_args_init(&a);
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &a);
    if (rc) goto done;

    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    const char *path = NULL, *out = NULL;
    int64_t mb = 0, mh = 0, grid = 0, have_vmin = 0, have_vmax = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (arg[0] != '-' || arg[1] == '\0') {
            if (path) {
                rc = cli_usage_error(cmd, "one weights file, got '%s' and '%s'", path, arg);
                goto done;
            }
            path = arg;
            continue;
        }
        if (strcmp(arg, "--grid") == 0) {
            grid = 1;
            continue;
        }
        if (!val) {
            rc = cli_usage_error(cmd, "%s needs a value", arg);
            goto done;
        }
        i++;
        int64_t n;
        if (strcmp(arg, "-o") == 0 || strcmp(arg, "--out") == 0) out = val;
        else if (strcmp(arg, "--tokens") == 0) rc = cli_tokens_parse(cmd, arg, val, &tb);
        else if (strcmp(arg, "--x-tokens") == 0) rc = cli_tokens_parse(cmd, arg, val, &tx);
        else if (strcmp(arg, "--y-tokens") == 0) rc = cli_tokens_parse(cmd, arg, val, &ty);
        else if (strcmp(arg, "--map") == 0) rc = cli_parse_map(cmd, val, &mb, &mh);
        else if (strcmp(arg, "--title") == 0) o.title = val;
        else if (strcmp(arg, "--x-title") == 0) o.x_title = val;
        else if (strcmp(arg, "--y-title") == 0) o.y_title = val;
        else if (strcmp(arg, "--annotate") == 0) {
            if (strcmp(val, "on") == 0) o.annotate = 1;
            else if (strcmp(val, "off") == 0) o.annotate = 0;
            else if (strcmp(val, "auto") == 0) o.annotate = -1;
            else rc = cli_usage_error(cmd, "--annotate is on, off or auto, not '%s'", val);
        } else if (strcmp(arg, "--cmap") == 0) {
            if (strcmp(val, "viridis") == 0) o.cmap = ATTN_CMAP_VIRIDIS;
            else if (strcmp(val, "diverging") == 0) o.cmap = ATTN_CMAP_DIVERGING;
            else rc = cli_usage_error(cmd, "--cmap is viridis or diverging, not '%s'", val);
        } else if (strcmp(arg, "--vmin") == 0) {
            if (cli_parse_double(val, &o.vmin)) rc = cli_usage_error(cmd, "--vmin '%s' is not a number", val);
            have_vmin = 1;
        } else if (strcmp(arg, "--vmax") == 0) {
            if (cli_parse_double(val, &o.vmax)) rc = cli_usage_error(cmd, "--vmax '%s' is not a number", val);
            have_vmax = 1;
        } else if (strcmp(arg, "--max-cells") == 0) {
            if (cli_parse_i64(val, &n) || n < 8 || n > 4096)
                rc = cli_usage_error(cmd, "--max-cells wants 8..4096, got '%s'", val);
            else o.max_cells = (int)n;
        } else {
            rc = cli_usage_error(cmd, "unknown option '%s'", arg);
        }
        if (rc) goto done;
    }
    if (!path || !out) {
        rc = cli_usage_error(cmd, "missing %s", path ? "-o out.png" : "the weights file");
        goto done;
    }
    if (have_vmin != have_vmax || (have_vmin && !(o.vmin < o.vmax))) {
        rc = cli_usage_error(cmd, "--vmin and --vmax go together, with vmin < vmax");
        goto done;
    }
    if ((rc = cli_load_weights(cmd, path, &w))) goto done;
    const attn_tensor *W = &w.t;
    if (!grid && (rc = cli_check_map(cmd, W, mb, mh))) goto done;
    const cli_tokens *x = tx.v ? &tx : &tb, *y = ty.v ? &ty : &tb;
    if ((rc = cli_tokens_expect(cmd, tx.v ? "--x-tokens" : "--tokens", x, W->shape[3], "keys")) ||
        (rc = cli_tokens_expect(cmd, ty.v ? "--y-tokens" : "--tokens", y, W->shape[2], "queries")))
        goto done;
    o.x_labels = (const char *const *)x->v;
    o.y_labels = (const char *const *)y->v;
    if ((rc = cli_sdpa_args_bind(cmd, &a, W->shape[0], W->shape[1], W->shape[2],
                                 W->shape[3])))
        goto done;
    o.mask = &a.opts.mask;
    attn_status st = grid ? attn_heatmap_grid_write(out, W, &o)
                          : attn_heatmap_write(out, W, mb, mh, &o);
    if (st) {
        rc = cli_fail(cmd, st, "drawing");
        goto done;
    }
    printf("wrote %s\n", out);
done:
    cli_tokens_free(&tx);
    cli_tokens_free(&ty);
    cli_tokens_free(&tb);
    cli_tensor_free(&w);
    cli_sdpa_args_free(&a);
    return rc;
}
