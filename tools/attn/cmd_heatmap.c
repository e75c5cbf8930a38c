/* attn heatmap: attention weights as a picture (PNG, SVG or PDF). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cmd_heatmap_help(void) {
    printf(
        "usage: attn heatmap W.npy -o out.png [--tokens ..] [--x-tokens ..]\n"
        "                    [--y-tokens ..] [--title T] [--annotate on|off|auto]\n"
        "                    [--map B,H | --grid] [--cmap viridis|diverging]\n"
        "                    [--vmin V --vmax V] [--max-cells N] [--axes NAMES]\n"
        "                    [mask options]\n"
        "       attn heatmap --q Q.npy --k K.npy [--v V.npy] -o out.png [--map B,H]\n"
        "                    [--max-cells N] [--title T] [--save-blocks B.npy]\n"
        "                    [--vmin V --vmax V] [mask options]\n"
        "\n"
        "Draws the map W[B, H] (default 0,0), or with --grid every map (one row\n"
        "per batch entry, or layer and batch, one column per head, one colour\n"
        "scale, each titled by its axes). The\n"
        "extension of -o picks the format: .png, .svg or .pdf.\n"
        "W is (Lq, Lk), (batch, Lq, Lk), (batch, head, Lq, Lk) or (layer, batch,\n"
        "head, Lq, Lk) as attn encoder --weights writes (then --map L,B,H).\n"
        "  --tokens       labels of both axes (when Lq == Lk), whitespace-separated\n"
        "  --x-tokens     key labels (columns), --y-tokens query labels (rows)\n"
        "  --annotate     values in the cells: auto (maps up to 12 x 12), on, off\n"
        "  --max-cells N  longest axis drawn (default 512); longer axes are\n"
        "                 averaged in blocks\n"
        "  --vmin/--vmax  colour scale (default: 0 .. the largest weight; with\n"
        "                 --q/--k: 0 .. the 99th percentile of the blocks, so that\n"
        "                 a few sharp rows do not leave the rest one colour; the\n"
        "                 colour bar says so)\n"
        "  --x-title/--y-title  axis titles (default key, query)\n" CLI_AXES_HELP
        "Mask options (--causal, --window, --mask, ...) draw masked cells grey;\n"
        "--scale and --threads are for the --q/--k form.\n"
        "\n"
        "With --q and --k (long sequences, e.g. L = 16384), the weights are never\n"
        "held: the flash kernel streams normalized weight tiles into block\n"
        "averages of at most --max-cells a side, and the map of those blocks is\n"
        "drawn (blocks the mask removes entirely are grey). Memory: the inputs,\n"
        "one output of (B, H, Lq, Dv) and max-cells^2 sums, never Lq x Lk.\n"
        "V defaults to K (only its shape matters for the weights). --save-blocks\n"
        "writes the block averages (rows, cols) as f32 .npy.\n"
        "\n");
    cli_args_help(stdout, CLI_OPTS_MASK | CLI_OPTS_SCALE | CLI_OPTS_THREADS);
    printf(
        "\nexamples:\n"
        "  attn heatmap w.npy --tokens \"The cat sat\" --title self-attention -o w.png\n"
        "  attn heatmap w.npy --grid -o heads.svg\n");
}

/* Long sequences: weights streamed as tiles into block averages. */
static int from_qk(const char *cmd, const char *qp, const char *kp,
                   const char *vp, const char *out, const char *save,
                   int64_t mb, int64_t mh, cli_sdpa_args *a,
                   attn_heatmap_opts *o) {
    cli_tensor q, k, v;
    attn_tensor O = {0};
    float *lse = NULL, *map = NULL;
    uint8_t *seen = NULL;
    attn_blockavg *acc = NULL;
    memset(&q, 0, sizeof q);
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    int rc;
    if ((rc = cli_load_tensor(cmd, qp, "q", &q)) ||
        (rc = cli_load_tensor(cmd, kp, "k", &k)) ||
        (vp && (rc = cli_load_tensor(cmd, vp, "v", &v))))
        goto done;
    {
        const char *names[3] = {"--q", "--k", "--v"};
        const cli_tensor *in[3] = {&q, &k, &v};
        if ((rc = cli_same_dtype(cmd, names, in, vp ? 3 : 2))) goto done;
    }
    /* the flash kernel takes f32 (f16 as is) */
    cli_tensor *all[3] = {&q, &k, &v};
    for (int i = 0; i < 3; i++)
        if (all[i]->npy.data && all[i]->t.dtype == ATTN_F64 &&
            (rc = cli_tensor_convert(cmd, all[i], ATTN_F32)))
            goto done;
    const attn_tensor *Q = &q.t, *K = &k.t, *V = vp ? &v.t : &k.t;
    int64_t B = Q->shape[0], H = Q->shape[1], Lq = Q->shape[2],
            Lk = K->shape[2];
    if (mb >= B || mh >= H) {
        rc = cli_usage_error(cmd,
                             "--map %lld,%lld is outside q's (B, H) = "
                             "(%lld, %lld)",
                             (long long)mb, (long long)mh, (long long)B,
                             (long long)H);
        goto done;
    }
    if ((rc = cli_sdpa_args_bind(cmd, a, B, H, Lq, Lk))) goto done;
    if ((rc =
             cli_alloc_tensor(cmd, "out", ATTN_F32, B, H, Lq, V->shape[3], &O)))
        goto done;
    int64_t nl = B * H * Lq;
    lse = malloc(sizeof(float) * (size_t)nl);
    if (!lse) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        rc = 1;
        goto done;
    }
    attn_status st = attn_sdpa_forward(Q, K, V, &a->opts, &O, NULL, lse);
    if (!st) st = attn_blockavg_create(Lq, Lk, mb, mh, o->max_cells, &acc);
    if (!st)
        st = attn_sdpa_weight_tiles(Q, K, lse, &a->opts, attn_blockavg_tile,
                                    acc);
    if (st) {
        rc = cli_fail(cmd, st, "streaming the weights");
        goto done;
    }
    int64_t rows, cols, br, bc;
    attn_blockavg_size(acc, &rows, &cols, &br, &bc);
    map = malloc(sizeof(float) * (size_t)(rows * cols));
    seen = malloc((size_t)(rows * cols));
    if (!map || !seen) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        rc = 1;
        goto done;
    }
    attn_blockavg_result(acc, map, seen);
    /* blocks the mask removes entirely are drawn as masked */
    uint8_t *vis = malloc((size_t)(rows * cols));
    if (!vis) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        rc = 1;
        goto done;
    }
    st = attn_blockavg_visible(acc, &a->opts.mask, B, H, vis);
    for (int64_t i = 0; i < rows * cols; i++) seen[i] &= vis[i];
    free(vis);
    if (st) {
        rc = cli_fail(cmd, st, "the mask's blocks");
        goto done;
    }
    if (save) {
        const int64_t shape[2] = {rows, cols};
        if ((rc = cli_save_array(cmd, save, ATTN_F32, map, 2, shape)))
            goto done;
    }
    attn_tensor M = attn_tensor_4d(map, ATTN_F32, 1, 1, rows, cols);
    attn_tensor S = attn_tensor_4d(seen, ATTN_U8, 1, 1, rows, cols);
    attn_mask unseen;
    attn_mask_init(&unseen);
    unseen.keep = &S;
    char title[160];
    snprintf(title, sizeof title,
             "attention weights, Lq = %lld, Lk = %lld "
             "(blocks of %lld x %lld)",
             (long long)Lq, (long long)Lk, (long long)br, (long long)bc);
    /* a copy: the title, mask and colour bar label are this function's
     * locals */
    attn_heatmap_opts ho = *o;
    if (!ho.title) ho.title = title;
    /* robust scale unless --vmin/--vmax: the first queries of a causal map
     * see a handful of keys, their weights would set the scale */
    char cbl[160];
    if (!(ho.vmin < ho.vmax)) {
        double top = 0,
               p99 = cli_percentile(map, seen, rows * cols, 0.99, &top);
        if (p99 > 0 && p99 < top) {
            ho.vmin = 0;
            ho.vmax = p99;
            snprintf(cbl, sizeof cbl,
                     "clipped at the 99th percentile, %.3g "
                     "(largest %.3g)",
                     p99, top);
            ho.colorbar_label = cbl;
        }
    }
    ho.mask = &unseen;
    ho.x_extent = Lk;
    ho.y_extent = Lq;
    ho.annotate = 0;
    if ((st = attn_heatmap_write(out, &M, 0, 0, &ho))) {
        rc = cli_fail(cmd, st, "drawing");
        goto done;
    }
    printf("wrote %s: map (%lld, %lld) of %lld x %lld weights as a %lld x %lld "
           "map of blocks of %lld x %lld\n",
           out, (long long)mb, (long long)mh, (long long)Lq, (long long)Lk,
           (long long)rows, (long long)cols, (long long)br, (long long)bc);
done:
    attn_blockavg_free(acc);
    free(map);
    free(seen);
    free(lse);
    free(O.data);
    cli_tensor_free(&q);
    cli_tensor_free(&k);
    cli_tensor_free(&v);
    return rc;
}

/* Every map in a grid, one row per batch entry (or layer and batch), one
 * column per head, each titled by the file's own axes. */
static attn_status draw_grid(const char *out, const cli_tensor *w,
                             const attn_heatmap_opts *o) {
    const attn_tensor *W = &w->t;
    int64_t N = W->shape[0], H = W->shape[1];
    if (N > 4096 / H)
        return attn_figure_write(out, NULL, 0, 1, o); /* its message */
    int n = (int)(N * H);
    attn_panel *p = malloc(sizeof *p * (size_t)n);
    char *titles = malloc((size_t)n * 64);
    if (!p || !titles) {
        free(p);
        free(titles);
        return ATTN_E_NOMEM;
    }
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < H; j++) {
            char *t = titles + (i * H + j) * 64;
            const char *hname = NULL;
            for (int k = 0; k < w->naxes; k++)
                if (w->view[k] == 1) hname = w->axis[k];
            if (N == 1 && hname && w->rank != 5)
                snprintf(t, 64, "%s %lld", hname, (long long)j);
            else
                cli_map_name(w, i, j, t, 64);
            p[i * H + j] = (attn_panel){W, i, j, t, NULL};
        }
    /* as attn_heatmap_grid_write: more than 4 heads of one map wrap */
    int ncols = N == 1 && H > 4 ? (int)((H + 1) / 2) : (int)H;
    attn_status st = attn_figure_write(out, p, n, ncols, o);
    free(p);
    free(titles);
    return st;
}

static int check_range(const char *cmd, const attn_heatmap_opts *o,
                       int64_t have_vmin, int64_t have_vmax) {
    if (have_vmin != have_vmax || (have_vmin && !(o->vmin < o->vmax)))
        return cli_usage_error(cmd, "--vmin and --vmax go together, with "
                                    "vmin < vmax");
    return 0;
}

/* The picture's options (titles, annotation, colour map, range, cells);
 * 0 when arg is none of them. */
static int style_opt(const char *cmd, const char *arg, const char *val,
                     attn_heatmap_opts *o, int64_t *have_vmin,
                     int64_t *have_vmax, int *rc) {
    int64_t n;
    if (strcmp(arg, "--title") == 0)
        o->title = val;
    else if (strcmp(arg, "--x-title") == 0)
        o->x_title = val;
    else if (strcmp(arg, "--y-title") == 0)
        o->y_title = val;
    else if (strcmp(arg, "--annotate") == 0) {
        *rc = cli_on_off_auto(cmd, arg, val, &o->annotate);
    } else if (strcmp(arg, "--cmap") == 0) {
        static const cli_choice cmaps[] = {{"viridis", ATTN_CMAP_VIRIDIS},
                                           {"diverging", ATTN_CMAP_DIVERGING},
                                           {NULL, 0}};
        int k;
        if (cli_pick(cmaps, val, &k))
            *rc = cli_usage_error(
                cmd, "--cmap is viridis or diverging, not '%s'", val);
        else
            o->cmap = (attn_colormap)k;
    } else if (strcmp(arg, "--vmin") == 0) {
        if (cli_parse_double(val, &o->vmin))
            *rc = cli_usage_error(cmd, "--vmin '%s' is not a number", val);
        *have_vmin = 1;
    } else if (strcmp(arg, "--vmax") == 0) {
        if (cli_parse_double(val, &o->vmax))
            *rc = cli_usage_error(cmd, "--vmax '%s' is not a number", val);
        *have_vmax = 1;
    } else if (strcmp(arg, "--max-cells") == 0) {
        if (cli_parse_i64(val, &n) || n < 8 || n > 4096)
            *rc = cli_usage_error(cmd, "--max-cells wants 8..4096, got '%s'",
                                  val);
        else
            o->max_cells = (int)n;
    } else {
        return 0;
    }
    return 1;
}

int cmd_heatmap(const char *cmd, int argc, char **argv) {
    cli_sdpa_args a;
    cli_tensor w;
    cli_labels lb;
    memset(&w, 0, sizeof w);
    cli_labels_init(&lb, "--x-tokens", "--y-tokens");
    cli_sdpa_args_init(&a);
    a.kinds = CLI_OPTS_MASK | CLI_OPTS_SCALE | CLI_OPTS_THREADS;
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &a);
    if (rc) goto done;

    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    const char *path = NULL, *out = NULL, *qp = NULL, *kp = NULL, *vp = NULL,
               *save = NULL, *axes = NULL;
    int64_t mb = 0, mh = 0, grid = 0, have_vmin = 0, have_vmax = 0;
    int64_t map[3] = {0, 0, 0};
    int map_n = 0;
    const char *arg, *val;
    static const char *const flags[] = {"--grid", NULL};
    for (int i = 0;
         cli_viz_next(cmd, argc, argv, &i, flags, &path, &arg, &val, &rc);) {
        if (strcmp(arg, "--grid") == 0)
            grid = 1;
        else if (strcmp(arg, "-o") == 0 || strcmp(arg, "--out") == 0)
            out = val;
        else if (strcmp(arg, "--q") == 0)
            qp = val;
        else if (strcmp(arg, "--k") == 0)
            kp = val;
        else if (strcmp(arg, "--v") == 0)
            vp = val;
        else if (strcmp(arg, "--save-blocks") == 0)
            save = val;
        else if (strcmp(arg, "--axes") == 0)
            axes = val;
        else if (cli_labels_opt(cmd, &lb, arg, val, &rc)) {
        } else if (strcmp(arg, "--map") == 0)
            rc = cli_parse_map(cmd, val, map, &map_n);
        else if (style_opt(cmd, arg, val, &o, &have_vmin, &have_vmax, &rc)) {
        } else {
            rc = cli_usage_error(cmd, "unknown option '%s'", arg);
        }
        if (rc) goto done;
    }
    if (rc) goto done;
    {
        const char *in_names[4 + CLI_SDPA_NFILES] = {"the weights file", "--q",
                                                     "--k", "--v"};
        const char *ins[4 + CLI_SDPA_NFILES] = {path, qp, kp, vp};
        for (int i = 0; i < CLI_SDPA_NFILES; i++)
            in_names[4 + i] = a.file_opt[i], ins[4 + i] = a.files[i];
        const char *out_names[2] = {"-o", "--save-blocks"},
                   *outs[2] = {out, save};
        if ((rc = cli_distinct_outputs(cmd, in_names, ins, 4 + CLI_SDPA_NFILES,
                                       out_names, outs, 2)))
            goto done;
    }
    if (save && !qp) {
        rc = cli_usage_error(cmd, "--save-blocks belongs to the --q/--k form");
        goto done;
    }
    if (qp || kp || vp) {
        if (!qp || !kp || path || grid || axes || lb.x.v || lb.y.v ||
            lb.both.v) {
            rc = cli_usage_error(
                cmd, "the long-sequence form takes --q and --k "
                     "(and --v), no weights file, --grid, --axes or tokens");
            goto done;
        }
        if (!out) {
            rc = cli_usage_error(cmd, "missing -o out.png");
            goto done;
        }
        if ((rc = check_range(cmd, &o, have_vmin, have_vmax))) goto done;
        if (map_n == 3) {
            rc = cli_usage_error(cmd, "--map takes B,H with --q and --k");
            goto done;
        }
        mb = map[0];
        mh = map[1];
        rc = from_qk(cmd, qp, kp, vp, out, save, mb, mh, &a, &o);
        goto done;
    }
    if (!path || !out) {
        rc = cli_usage_error(cmd, "missing %s",
                             path ? "-o out.png" : "the weights file");
        goto done;
    }
    if ((rc = check_range(cmd, &o, have_vmin, have_vmax))) goto done;
    if ((rc = cli_load_weights(cmd, path, axes, &w))) goto done;
    const attn_tensor *W = &w.t;
    if (!map_n) map_n = w.rank == 5 ? 3 : 2;
    if (!grid && (rc = cli_check_map(cmd, &w, map, map_n, &mb, &mh))) goto done;
    if ((rc = cli_labels_bind(cmd, &lb, &a, W, &o.x_labels, &o.y_labels)))
        goto done;
    o.mask = &a.opts.mask;
    attn_status st =
        grid ? draw_grid(out, &w, &o) : attn_heatmap_write(out, W, mb, mh, &o);
    rc = cli_wrote(cmd, st, "drawing", out);
done:
    cli_labels_free(&lb);
    cli_tensor_free(&w);
    cli_sdpa_args_free(&a);
    return rc;
}
