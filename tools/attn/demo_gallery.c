/* The picture half of attn demo: every experiment of the tutorials drawn
 * into a directory, with an index.html that links each picture. Fixed
 * seeds; part 8 is timed on the spot (demo_speed.c), part 10 trained on the
 * spot (demo_train.c). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define M_PI_VALUE 3.14159265358979323846

/* ---- seeded numbers --------------------------------------------------- */

static double uni(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static double normal(uint64_t *s) {
    double u = uni(s), v = uni(s);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2 * log(u)) * cos(2 * M_PI_VALUE * v);
}

/* ---- (3) cross-sentence attention -------------------------------------- */

static int cross_sentence(const char *cmd, demo_gallery *g) {
    gallery_section(g, "3. Cross-sentence attention");
    const char *vocab[9] = {"the", "cat",    "sat", "on",    "mat",
                            "dog", "played", "in",  "garden"};
    const int s1[6] = {0, 1, 2, 3, 0, 4}, s2[6] = {0, 5, 6, 7, 0, 8};
    const char *w1[6], *w2[6];
    enum { D = 4 };
    float emb[9 * D], q[6 * D], k[6 * D], o[6 * D], w[36];
    uint64_t s = 42;
    for (int i = 0; i < 9 * D; i++) emb[i] = (float)normal(&s);
    for (int t = 0; t < 6; t++) {
        w1[t] = vocab[s1[t]];
        w2[t] = vocab[s2[t]];
        for (int d = 0; d < D; d++) {
            q[t * D + d] = emb[s1[t] * D + d];
            k[t * D + d] = emb[s2[t] * D + d];
        }
    }
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, 6, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, 6, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, 6, D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 6, 6);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    attn_status st = attn_sdpa_forward(&Q, &K, &K, &opts, &O, &W, NULL);
    if (st) return cli_fail(cmd, st, "cross-sentence attention");
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.title =
        "\"The cat sat on the mat\" attends to \"The dog played in the garden\"";
    ho.x_labels = w2;
    ho.y_labels = w1;
    ho.x_title = "key: sentence 2";
    ho.y_title = "query: sentence 1";
    if ((st = attn_heatmap_write(gallery_path(g, "03_cross_sentence.png"), &W,
                                 0, 0, &ho)))
        return cli_fail(cmd, st, "drawing");
    printf("(3) cross-sentence attention, random 4-d embeddings (seed 42): "
           "\"the\" (row 0) gives \"the\" (columns 0, 4) %.3f + %.3f\n",
           w[0], w[4]);
    gallery_add(
        g, "03_cross_sentence.png",
        "Random 4-d word embeddings (seed 42), Q from sentence 1, K = V "
        "from sentence 2. The same word (\"the\") has the same "
        "embedding in both, so it scores high against itself.");
    return 0;
}

/* ---- (4) scaled vs unscaled --------------------------------------------- */

static int scaled_unscaled(const char *cmd, demo_gallery *g) {
    gallery_section(g, "4. Scaled vs unscaled attention at d = 64");
    enum { L = 5, D = 64 };
    float q[L * D], k[L * D], o[L * D], w[2 * L * L];
    uint64_t s = 42;
    for (int i = 0; i < L * D; i++) q[i] = (float)normal(&s);
    for (int i = 0; i < L * D; i++) k[i] = (float)normal(&s);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, L, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, L, D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 2, 1, L, L);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    attn_tensor W0 = attn_tensor_4d(w, ATTN_F32, 1, 1, L, L);
    attn_tensor W1 = attn_tensor_4d(w + L * L, ATTN_F32, 1, 1, L, L);
    attn_status st = attn_sdpa_forward(&Q, &K, &K, &opts, &O, &W0, NULL);
    opts.scale = 1.0;
    if (!st) st = attn_sdpa_forward(&Q, &K, &K, &opts, &O, &W1, NULL);
    if (st) return cli_fail(cmd, st, "scaled vs unscaled attention");
    attn_stats per[2], all;
    if ((st = attn_stats_compute(&W, NULL, per, &all)))
        return cli_fail(cmd, st, "statistics");
    char t0[96], t1[96];
    snprintf(t0, sizeof t0, "scaled 1/sqrt(64): entropy %.3f",
             per[0].entropy_mean);
    snprintf(t1, sizeof t1, "unscaled: entropy %.3f", per[1].entropy_mean);
    attn_panel p[2] = {{&W, 0, 0, t0, NULL}, {&W, 1, 0, t1, NULL}};
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.title = "The same Q, K (d = 64, seed 42) with and without the scale";
    ho.annotate = 1;
    if ((st = attn_figure_write(gallery_path(g, "04_scaled_vs_unscaled.png"), p,
                                2, 2, &ho)))
        return cli_fail(cmd, st, "drawing");
    printf("(4) scaled vs unscaled, d = 64: mean normalized entropy %.3f vs "
           "%.3f, largest weight %.3f vs %.3f\n",
           per[0].entropy_mean, per[1].entropy_mean, per[0].max_weight,
           per[1].max_weight);
    char cap[400];
    snprintf(cap, sizeof cap,
             "One colour scale for both. Unscaled dot products "
             "of 64-d vectors have a spread of about 8, so the softmax "
             "saturates to nearly one-hot rows (mean normalized entropy %.3f "
             "against %.3f when scaled).",
             per[1].entropy_mean, per[0].entropy_mean);
    gallery_add(g, "04_scaled_vs_unscaled.png", cap);
    return 0;
}

/* ---- (5) multi-head ------------------------------------------------------ */

/* The C multi-head attention layer (d_model 512, 8 heads of 64, Xavier-
 * uniform weights from a fixed seed) on a sentence: word embeddings drawn
 * from a seed (the same word, the same vector) plus sinusoidal positions. */
static int multi_head(const char *cmd, demo_gallery *g) {
    gallery_section(g, "5. Multi-head attention, d_model 512, 8 heads");
    enum { L = 10, DM = 512, H = 8 };
    static const char *const tok[L] = {"the", "cat",     "sat", "on",  "the",
                                       "mat", "because", "it",  "was", "tired"};
    const attn_mha_config mc = {DM, H, 0, 0, 0, 1};
    const int64_t np = attn_mha_param_count(&mc);
    size_t wsn = 0;
    attn_status st = attn_mha_workspace_size(&mc, 1, L, L, &wsn);
    if (st) return cli_fail(cmd, st, "multi-head attention");
    float *x =
        malloc(sizeof(float) * ((size_t)(2 * L * DM + H * L * L + np) + wsn));
    if (!x) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        return 1;
    }
    float *y = x + L * DM, *w = y + L * DM, *params = w + H * L * L;
    float *ws = params + np;
    for (int t = 0; t < L;
         t++) { /* seed from the word: equal words, equal rows */
        uint64_t s = 0x9E3779B97F4A7C15ull;
        for (const char *c = tok[t]; *c; c++)
            s = (s ^ (uint64_t)(unsigned char)*c) * 0x100000001B3ull;
        for (int d = 0; d < DM; d++) x[t * DM + d] = (float)normal(&s);
    }
    attn_layer_opts opts;
    attn_sdpa_opts_init(&opts);
    int rc = 0;
    if ((st = attn_add_positional_encoding(1, L, DM, x)) ||
        (st = attn_mha_init(&mc, params, 7)) ||
        (st = attn_mha_forward(&mc, params, 1, L, L, x, x, x, &opts, y, w,
                               ATTN_WEIGHTS_PER_HEAD, ws))) {
        rc = cli_fail(cmd, st, "multi-head attention");
        goto done;
    }
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, H, L, L);
    attn_stats per[H], all;
    if ((st = attn_stats_compute(&W, NULL, per, &all))) {
        rc = cli_fail(cmd, st, "statistics");
        goto done;
    }
    printf("(5) multi-head attention layer (attn_mha_forward; d_model 512, 8 "
           "heads, Xavier init seed 7) on \"the cat sat on the mat because "
           "it was tired\": weights (1, 8, 10, 10); mean normalized entropy "
           "per head");
    for (int h = 0; h < H; h++) printf(" %.2f", per[h].entropy_mean);
    printf("\n");
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.title =
        "multi-head attention: 8 heads of 64 (d_model 512, untrained, seed 7)";
    ho.x_labels = tok;
    ho.y_labels = tok;
    st = attn_heatmap_grid_write(gallery_path(g, "05_heads.png"), &W, &ho);
    if ((rc = gallery_wrote(
             cmd, g, st, "drawing", "05_heads.png",
             "attn_mha_forward with d_model 512 and 8 "
             "heads, Xavier-uniform weights from seed 7, on the word "
             "embeddings (random per word, seeded) plus sinusoidal "
             "positions of a 10-word sentence. One map per head, one colour "
             "scale: the layer is untrained, yet each head's projections "
             "make different words look alike.")))
        goto done;
    attn_html_opts hopt = {
        "multi-head attention, 8 heads, d_model 512 (untrained)", tok, tok,
        "batch"};
    st = attn_html_write(gallery_path(g, "05_heads_viewer.html"), &W, &hopt);
    rc = gallery_wrote(cmd, g, st, "writing the viewer", "05_heads_viewer.html",
                       "The same 8 heads in the interactive viewer: pick a "
                       "head, hover a word to isolate its lines.");
done:
    free(x);
    return rc;
}

/* ---- (6) masks --------------------------------------------------------- */

static int masks(const char *cmd, demo_gallery *g) {
    gallery_section(g, "6. Masks: each drawn as the mask and as the weights");
    enum { L = 16, D = 16 };
    static float q[L * D], k[L * D], v[L * D], o[L * D], w[L * L], keep[L * L];
    uint64_t s = 3;
    for (int i = 0; i < L * D; i++) {
        q[i] = (float)normal(&s);
        k[i] = (float)normal(&s);
        v[i] = (float)normal(&s);
    }
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, L, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, L, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, L, D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, L, L);
    attn_tensor M = attn_tensor_4d(keep, ATTN_F32, 1, 1, L, L);
    static const uint8_t layout[4 * 4] = {1, 0, 0, 0, 1, 1, 0, 0,
                                          1, 0, 1, 0, 1, 0, 0, 1};
    const int64_t klen[1] = {11};
    const char *names[5] = {"padding", "look-ahead", "local window",
                            "block-sparse", "random blocks"};
    const char *files[5] = {"06_mask_padding.png", "06_mask_lookahead.png",
                            "06_mask_window.png", "06_mask_block_sparse.png",
                            "06_mask_random_blocks.png"};
    const char *what[5] = {
        "key lengths = 11 of 16: the last 5 keys are padding",
        "causal, top-left: query i sees keys 0..i",
        "window (2, 2): query i sees keys i-2 .. i+2",
        "blocks of 4: a global first block column and the diagonal",
        "blocks of 4, each kept with p = 0.5 (seed 9)"};
    printf("(6) masks (L = 16), visible pairs of %d:\n", L * L);
    for (int kind = 0; kind < 5; kind++) {
        attn_sdpa_opts opts;
        attn_sdpa_opts_init(&opts);
        attn_mask *m = &opts.mask;
        switch (kind) {
        case 0: m->key_lengths = klen; break;
        case 1: m->causal = 1; break;
        case 2:
            m->window_left = 2;
            m->window_right = 2;
            break;
        case 3:
            m->block_size = 4;
            m->layout = layout;
            m->layout_heads = 1;
            break;
        default:
            m->random_block = 4;
            m->random_keep_p = 0.5;
            m->random_seed = 9;
            break;
        }
        attn_status st = attn_sdpa_forward(&Q, &K, &V, &opts, &O, &W, NULL);
        if (st) return cli_fail(cmd, st, names[kind]);
        int64_t visible = 0;
        for (int i = 0; i < L; i++)
            for (int j = 0; j < L; j++) {
                keep[i * L + j] = (float)attn_mask_visible(m, 0, 0, i, j, L, L);
                visible += keep[i * L + j] != 0;
            }
        char t[128];
        snprintf(t, sizeof t, "%s mask: %s", names[kind], what[kind]);
        attn_panel p[2] = {{&M, 0, 0, "mask (1 = attend)", NULL},
                           {&W, 0, 0, "weights (masked: grey)", m}};
        attn_heatmap_opts ho;
        attn_heatmap_opts_init(&ho);
        ho.title = t;
        ho.vmin = 0;
        ho.vmax = 1;
        if ((st =
                 attn_figure_write(gallery_path(g, files[kind]), p, 2, 2, &ho)))
            return cli_fail(cmd, st, "drawing");
        printf("   %-14s %lld\n", names[kind], (long long)visible);
        char cap[320];
        snprintf(cap, sizeof cap,
                 "%s mask, %s. %lld of %d pairs visible; "
                 "masked weights are exactly 0.",
                 names[kind], what[kind], (long long)visible, L * L);
        gallery_add(g, files[kind], cap);
    }
    return 0;
}

/* ---- (7) geometry ----------------------------------------------------- */

static int geometry(const char *cmd, demo_gallery *g) {
    gallery_section(g, "7. The geometry of a dot product");
    const double a[2] = {2, 1}, b[2] = {1, 3};
    attn_status st = attn_geometry_write(gallery_path(g, "07_dot_product.png"),
                                         a, b, "v1", "v2");
    if (st) return cli_fail(cmd, st, "drawing");
    printf("(7) dot product of v1 = (2, 1) and v2 = (1, 3): %g, cosine %.3f\n",
           a[0] * b[0] + a[1] * b[1], 5 / (sqrt(5.0) * sqrt(10.0)));
    gallery_add(g, "07_dot_product.png",
                "a . b = |a| |b| cos(theta): large when "
                "the vectors point the same way, 0 when orthogonal, negative "
                "when opposed. Attention scores are these, scaled.");
    return 0;
}

/* ---- (9) memory: reference vs flash, and a long map from weight tiles -- */

static double peak_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0; /* kilobytes on Linux */
}

enum { LONG_D = 64, LONG_MEM_L = 4096, LONG_MAP_L = 16384 };

/* n positions of LONG_D features on sine codes of many wavelengths plus
 * noise (seed 5): neighbours look alike, far positions less, with stripes
 * where codes come back in phase. Amplitude 1 keeps the scores moderate
 * (3 made every row one-hot on the diagonal). The first rows do not depend
 * on n. */
static void long_positions(float *x, int64_t n) {
    uint64_t s = 5;
    for (int64_t t = 0; t < n; t++)
        for (int d = 0; d < LONG_D; d++) {
            double f = exp(-(double)(d / 2) / 4.0) * 0.05 * (double)t;
            x[t * LONG_D + d] =
                (float)((d % 2 ? cos(f) : sin(f)) + 0.3 * normal(&s));
        }
}

/* The inputs of the long-sequence parts: n positions (n x LONG_D), room
 * for the output (n x LONG_D) and lse (n) after them, and causal options;
 * NULL after the message. */
static float *long_inputs(const char *cmd, int64_t n, attn_sdpa_opts *opts) {
    float *x = malloc(sizeof(float) * (size_t)(n * LONG_D * 2 + n));
    if (!x) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        return NULL;
    }
    long_positions(x, n);
    attn_sdpa_opts_init(opts);
    opts->mask.causal = 1;
    return x;
}

/* The process's peak resident size only grows, so the memory part runs
 * before anything large (the speed table of part 8): peak[0] before,
 * peak[1] after the flash kernel, peak[2] after the reference with its
 * L x L weights, each run's growth its own. */
static int long_memory(const char *cmd, double peak[3]) {
    const int64_t L = LONG_MEM_L, D = LONG_D;
    attn_sdpa_opts opts;
    float *x = long_inputs(cmd, L, &opts);
    if (!x) return 1;
    float *o = x + L * D, *lse = o + L * D;
    int rc = 0;
    attn_status st;
    attn_tensor X = attn_tensor_4d(x, ATTN_F32, 1, 1, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, L, D);
    peak[0] = peak_mib();
    opts.impl = ATTN_IMPL_FLASH;
    if ((st = attn_sdpa_forward(&X, &X, &X, &opts, &O, NULL, lse))) {
        rc = cli_fail(cmd, st, "flash attention");
        goto done;
    }
    peak[1] = peak_mib();
    float *w = malloc(sizeof(float) * (size_t)(L * L));
    if (!w) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        rc = 1;
        goto done;
    }
    for (int64_t i = 0; i < L * L; i++) w[i] = 0; /* touch: resident */
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, L, L);
    opts.impl = ATTN_IMPL_REF;
    st = attn_sdpa_forward(&X, &X, &X, &opts, &O, &W, NULL);
    free(w);
    if (st) {
        rc = cli_fail(cmd, st, "reference attention");
        goto done;
    }
    peak[2] = peak_mib();
done:
    free(x);
    return rc;
}

static int long_sequence(const char *cmd, demo_gallery *g,
                         const double peak[3]) {
    gallery_section(
        g, "9. Memory: the reference vs the flash kernel on a long sequence");
    const int64_t L = LONG_MEM_L, LL = LONG_MAP_L, D = LONG_D;
    const double p0 = peak[0], p1 = peak[1], p2 = peak[2];
    attn_sdpa_opts opts;
    float *x = long_inputs(cmd, LL, &opts);
    if (!x) return 1;
    float *o = x + LL * D, *lse = o + LL * D;
    int rc = 0;
    attn_status st;
    attn_tensor X, O;
    printf("(9) causal self-attention, L = %lld, d = 64: peak memory grew by "
           "%.1f MiB for flash, %.1f MiB for the reference with its weights "
           "(the L x L matrix alone is %.0f MiB)\n",
           (long long)L, p1 - p0, p2 - p1, (double)(L * L * 4) / (1 << 20));
    char note[400];
    snprintf(
        note, sizeof note,
        "Causal self-attention at L = %lld, d = 64: the "
        "process's peak resident memory grew by %.1f MiB during the flash "
        "kernel and by %.1f MiB during the reference with its weights "
        "(the L x L matrix alone is %.0f MiB). Below, L = %lld: the map is "
        "averaged from weight tiles streamed by the flash kernel, never "
        "held whole (it would take %.0f MiB).",
        (long long)L, p1 - p0, p2 - p1, (double)(L * L * 4) / (1 << 20),
        (long long)LL, (double)(LL * LL * 4) / (1 << 20));
    gallery_note(g, note);

    /* the long map: tiles into block averages */
    X = attn_tensor_4d(x, ATTN_F32, 1, 1, LL, D);
    O = attn_tensor_4d(o, ATTN_F32, 1, 1, LL, D);
    opts.impl = ATTN_IMPL_AUTO;
    attn_blockavg *acc = NULL;
    float *map = NULL;
    uint8_t *keep = NULL, *vis = NULL;
    st = attn_sdpa_forward(&X, &X, &X, &opts, &O, NULL, lse);
    if (!st) st = attn_blockavg_create(LL, LL, 0, 0, 512, &acc);
    if (!st)
        st =
            attn_sdpa_weight_tiles(&X, &X, lse, &opts, attn_blockavg_tile, acc);
    int64_t rows = 0, cols = 0, br = 0, bc = 0;
    double vmax = 0, vtop = 0;
    if (!st) {
        attn_blockavg_size(acc, &rows, &cols, &br, &bc);
        map = malloc(sizeof(float) * (size_t)(rows * cols));
        keep = malloc((size_t)(rows * cols));
        vis = malloc((size_t)(rows * cols));
        if (!map || !keep || !vis) st = ATTN_E_NOMEM;
    }
    if (!st) st = attn_blockavg_result(acc, map, keep);
    if (!st) st = attn_blockavg_visible(acc, &opts.mask, 1, 1, vis);
    if (!st) {
        for (int64_t i = 0; i < rows * cols; i++) keep[i] &= vis[i];
        attn_tensor M = attn_tensor_4d(map, ATTN_F32, 1, 1, rows, cols);
        attn_tensor K = attn_tensor_4d(keep, ATTN_U8, 1, 1, rows, cols);
        attn_mask unseen;
        attn_mask_init(&unseen);
        unseen.keep = &K;
        attn_heatmap_opts ho;
        attn_heatmap_opts_init(&ho);
        char title[128];
        snprintf(title, sizeof title,
                 "causal attention over %lld positions "
                 "(blocks of %lld x %lld)",
                 (long long)LL, (long long)br, (long long)bc);
        ho.title = title;
        ho.mask = &unseen;
        ho.x_extent = LL;
        ho.y_extent = LL;
        /* the first blocks (queries that see a handful of keys) would set
         * the scale and leave the rest one colour: clip at a percentile */
        vmax = cli_percentile(map, keep, rows * cols, 0.99, &vtop);
        if (vmax > 0) {
            ho.vmin = 0;
            ho.vmax = vmax;
        }
        st = attn_heatmap_write(gallery_path(g, "09_long_sequence.png"), &M, 0,
                                0, &ho);
    }
    attn_blockavg_free(acc);
    free(map);
    free(keep);
    free(vis);
    if (st) {
        rc = cli_fail(cmd, st, "the long sequence");
        goto done;
    }
    printf("   L = %lld drawn from streamed weight tiles: a %lld x %lld map of "
           "blocks of %lld x %lld positions\n",
           (long long)LL, (long long)rows, (long long)cols, (long long)br,
           (long long)bc);
    char cap[400];
    snprintf(cap, sizeof cap,
             "16384 positions, causal: block averages of the "
             "weight tiles the flash kernel streams (the same as attn heatmap "
             "--q Q.npy --k K.npy). Grey: blocks the mask removes. The colour "
             "scale stops at the 99th percentile of the blocks (%.2g; the "
             "largest, near the first queries, is %.2g).",
             vmax, vtop);
    gallery_add(g, "09_long_sequence.png", cap);
done:
    free(x);
    return rc;
}

int gallery_run(const char *cmd, demo_gallery *g) {
    int rc;
    double peak[3];
    if ((rc = long_memory(cmd, peak)) || (rc = cross_sentence(cmd, g)) ||
        (rc = scaled_unscaled(cmd, g)) || (rc = multi_head(cmd, g)) ||
        (rc = masks(cmd, g)) || (rc = geometry(cmd, g)))
        return rc;
    if ((rc = gallery_speed(cmd, g)) || (rc = long_sequence(cmd, g, peak)))
        return rc;
    if ((rc = gallery_reversal(cmd, g))) return rc;
    return gallery_dates(cmd, g);
}
