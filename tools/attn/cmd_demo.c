/* attn demo: the tutorial examples, run and printed. Each example is one
 * function so that a later gallery can reuse them. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void help(void) {
    printf(
        "usage: attn demo [--out DIR] [--quick]\n"
        "\n"
        "Runs the tutorial examples of scaled dot-product attention and prints\n"
        "what they show:\n"
        "  1. random Q, K, V of shape (64, 5, 64): the output shape and how far the\n"
        "     weight rows are from summing to 1;\n"
        "  2. the 3-token example: its weights and output;\n"
        "  3. a look-ahead mask combined with a padding mask from token ids.\n"
        "Then it draws the gallery of the tutorials' experiments into DIR (default\n"
        "demo-out), with fixed seeds, and an index.html that links every picture:\n"
        "  (1) the (64, 5, 64) run; (2) the 3-token example, annotated; (3) cross-\n"
        "  sentence attention with word labels; (4) scaled vs unscaled at d = 64\n"
        "  with their entropies; (5) the multi-head attention layer (d_model 512,\n"
        "  8 heads) on a sentence, one map per head and in the interactive viewer;\n"
        "  (6) padding, look-ahead, window, block-sparse and random masks, as masks\n"
        "  and as weights; (7) the dot-product geometry; (8) additive vs dot-product\n"
        "  speed, timed on B = 4, L = 100 and 256 (the full table: attn bench\n"
        "  --layers); (9) memory of the reference vs the flash kernel, and a map of\n"
        "  16384 positions; (10) a sequence-reversal model trained on the spot and\n"
        "  its learned attention. About 20 s on 2 cores.\n"
        "The 3-token example's inputs and results are also written there as .npy\n"
        "files, with the attn sdpa command that reproduces them.\n"
        "--quick times part 8 once on B = 2 (a smoke run, for slow builds).\n");
}

/* Deterministic uniform numbers in [0, 1) (xorshift64*). */
static double demo_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static int demo_batch(const char *cmd, demo_gallery *g) {
    enum { B = 64, L = 5, D = 64 };
    printf("== 1. A batch of %d sequences: Q, K, V of shape (%d, %d, %d)\n\n",
           B, B, L, D);
    float *q =
        malloc(sizeof(float) * B * L * D * 3 + sizeof(float) * B * L * (D + L));
    if (!q) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        return 1;
    }
    float *k = q + B * L * D, *v = k + B * L * D, *o = v + B * L * D;
    float *w = o + B * L * D;
    uint64_t s = 2024;
    for (int i = 0; i < 3 * B * L * D; i++) q[i] = (float)demo_rand(&s);
    /* a rank-3 array (B, L, D) is (B, 1, L, D): one head */
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, 1, L, D);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, 1, L, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, 1, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, 1, L, D);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, B, 1, L, L);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    attn_status st = attn_sdpa_forward(&Q, &K, &V, &opts, &O, &W, NULL);
    if (st) {
        free(q);
        return cli_fail(cmd, st, "attention");
    }
    double worst = 0;
    for (int r = 0; r < B * L; r++) {
        double sum = 0;
        for (int j = 0; j < L; j++) sum += w[r * L + j];
        if (fabs(sum - 1) > worst) worst = fabs(sum - 1);
    }
    printf("output shape: (%d, %d, %d)\n", B, L, D);
    printf("weights shape: (%d, %d, %d); every row sums to 1 within %.2g\n", B,
           L, L, worst);
    cli_print_matrix(stdout, "weights of sequence 0", w, L, L, L, 4);
    printf("\n");
    gallery_section(g,
                    "1. A batch of 64 sequences: Q, K, V of shape (64, 5, 64)");
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.title = "weights of sequence 0 of 64 (uniform random Q, K, V)";
    st =
        attn_heatmap_write(gallery_path(g, "01_batch_seq0.png"), &W, 0, 0, &ho);
    free(q);
    if (st) return cli_fail(cmd, st, "drawing");
    char cap[256];
    snprintf(cap, sizeof cap,
             "Output (64, 5, 64), weights (64, 5, 5); rows "
             "sum to 1 within %.2g. Positive random vectors look alike, so "
             "the rows are nearly uniform.",
             worst);
    gallery_add(g, "01_batch_seq0.png", cap);
    printf("\n");
    return 0;
}

static int save(const char *cmd, const char *dir, const char *name,
                const float *data, int64_t rows, int64_t cols) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const int64_t shape[2] = {rows, cols};
    return cli_save_array(cmd, path, ATTN_F32, (void *)data, 2, shape);
}

static int demo_three_token(const char *cmd, const char *dir, demo_gallery *g) {
    printf("== 2. Three tokens: Q, K of dimension 3, V of dimension 2, "
           "scale 1/sqrt(3)\n\n");
    float q[9] = {1, 0, 1, 0, 1, 1, 1, 1, 0};
    float k[9] = {1, 1, 0, 0, 1, 1, 0, 0, 1};
    float v[6] = {0, 1, 2, 0, 1, 2};
    float o[6], w[9], lse[3];
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, 3, 3);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, 3, 3);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, 3, 2);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, 3, 2);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 3);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.scale = 1.0 / sqrt(3.0);
    attn_status st = attn_sdpa_forward(&Q, &K, &V, &opts, &O, &W, lse);
    if (st) return cli_fail(cmd, st, "attention");
    cli_print_matrix(stdout, "Q", q, 3, 3, 3, 0);
    cli_print_matrix(stdout, "K", k, 3, 3, 3, 0);
    cli_print_matrix(stdout, "V", v, 3, 2, 2, 0);
    cli_print_matrix(stdout, "weights = softmax(Q K^T / sqrt(3))", w, 3, 3, 3,
                     6);
    cli_print_matrix(stdout, "output = weights V", o, 3, 2, 2, 6);
    printf("Token 0 scores every key alike (1, 1, 1), so it averages V. "
           "Token 1 matches\nkey 1 best (score 2) and leans towards its value "
           "(2, 0).\n\n");
    gallery_section(g, "2. Three tokens, annotated");
    const char *tok[3] = {"token 0", "token 1", "token 2"};
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.title = "softmax(Q K^T / sqrt(3))";
    ho.x_labels = tok;
    ho.y_labels = tok;
    if ((st = attn_heatmap_write(gallery_path(g, "02_three_tokens.png"), &W, 0,
                                 0, &ho)) ||
        (st = attn_heatmap_write(gallery_path(g, "02_three_tokens.svg"), &W, 0,
                                 0, &ho)))
        return cli_fail(cmd, st, "drawing");
    gallery_add(g, "02_three_tokens.png",
                "The tutorial's 3-token example with "
                "its values: token 0 scores every key alike; token 1 prefers "
                "key 1 (score 2).");
    gallery_add(g, "02_three_tokens.svg",
                "The same as SVG (vector; the labels "
                "are searchable text).");
    printf("\n");
    if (dir) {
        int rc;
        if ((rc = save(cmd, dir, "q.npy", q, 3, 3)) ||
            (rc = save(cmd, dir, "k.npy", k, 3, 3)) ||
            (rc = save(cmd, dir, "v.npy", v, 3, 2)) ||
            (rc = save(cmd, dir, "out.npy", o, 3, 2)) ||
            (rc = save(cmd, dir, "weights.npy", w, 3, 3)))
            return rc;
        printf("wrote %s/{q,k,v,out,weights}.npy; the same from the command "
               "line:\n  attn sdpa --q %s/q.npy --k %s/k.npy --v %s/v.npy "
               "--out o.npy --weights w.npy\n\n",
               dir, dir, dir, dir);
    }
    return 0;
}

static int demo_lookahead_padding(const char *cmd) {
    enum { B = 2, L = 5, D = 4 };
    printf("== 3. Look-ahead and padding: two sentences of token ids, 0 = "
           "padding\n\n");
    const int64_t ids[B * L] = {5, 7, 2, 0, 0, 3, 8, 6, 4, 0};
    const int64_t lengths[B] = {3, 4};
    for (int b = 0; b < B; b++) {
        printf("  sentence %d: ", b);
        for (int j = 0; j < L; j++)
            printf("%s%lld", j ? " " : "", (long long)ids[b * L + j]);
        printf("\n");
    }
    printf("\n");
    /* the tutorial's way: two masks from the builders, combined by AND */
    uint8_t pad[B * L], ahead[L * L], keep[B * L * L];
    attn_status st;
    if ((st = attn_mask_padding_from_ids(ids, B, L, 0, pad)) ||
        (st = attn_mask_lookahead(L, L, ahead)))
        return cli_fail(cmd, st, "building the masks");
    cli_print_mask(stdout, "look-ahead mask", ahead, L, L, L);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++)
            for (int j = 0; j < L; j++)
                keep[(b * L + i) * L + j] = ahead[i * L + j] & pad[b * L + j];

    /* embeddings: a fixed function of the token id */
    float x[B * L * D];
    for (int t = 0; t < B * L; t++)
        for (int d = 0; d < D; d++)
            x[t * D + d] = (float)sin(0.7 * (double)ids[t] * (d + 1) + d);
    float w1[B * L * L], w2[B * L * L], w3[B * L * L], o[B * L * D];
    attn_tensor X = attn_tensor_4d(x, ATTN_F32, B, 1, L, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, 1, L, D);
    attn_tensor Kp = attn_tensor_4d(keep, ATTN_U8, B, 1, L, L);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.mask.keep = &Kp;
    attn_tensor W = attn_tensor_4d(w1, ATTN_F32, B, 1, L, L);
    if ((st = attn_sdpa_forward(&X, &X, &X, &opts, &O, &W, NULL)))
        return cli_fail(cmd, st, "attention");
    for (int b = 0; b < B; b++) {
        char title[96];
        snprintf(title, sizeof title, "combined mask of sentence %d", b);
        cli_print_mask(stdout, title, keep + b * L * L, L, L, L);
        snprintf(title, sizeof title, "weights of sentence %d", b);
        cli_print_matrix(stdout, title, w1 + b * L * L, L, L, L, 4);
    }
    printf("Masked weights are exactly 0: no token sees a later one or a "
           "padding token.\n");

    /* the same from the mask descriptor: causal + key lengths, no tensor */
    attn_sdpa_opts_init(&opts);
    opts.mask.causal = 1;
    opts.mask.key_lengths = lengths;
    W = attn_tensor_4d(w2, ATTN_F32, B, 1, L, L);
    if ((st = attn_sdpa_forward(&X, &X, &X, &opts, &O, &W, NULL)))
        return cli_fail(cmd, st, "attention");
    double diff = 0;
    for (int i = 0; i < B * L * L; i++)
        if (fabs(w1[i] - w2[i]) > diff) diff = fabs(w1[i] - w2[i]);
    printf("With --causal top-left and --key-lengths (3, 4) instead of the "
           "mask tensor,\nthe weights differ by at most %g.\n",
           diff);

    /* padding queries too: their rows see no key and become exactly 0 */
    opts.mask.query_lengths = lengths;
    W = attn_tensor_4d(w3, ATTN_F32, B, 1, L, L);
    if ((st = attn_sdpa_forward(&X, &X, &X, &opts, &O, &W, NULL)))
        return cli_fail(cmd, st, "attention");
    cli_print_matrix(stdout, "weights of sentence 0 with --query-lengths too",
                     w3, L, L, L, 4);
    printf("Rows of padding queries see no key: weights and output are 0 "
           "(not NaN).\n");
    return 0;
}

int cmd_demo(const char *cmd, int argc, char **argv) {
    const char *dir = "demo-out";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
        }
    }
    if (cli_check_out_dir(cmd, "--out", dir)) return 1;
    if (dir && mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn demo: cannot create %s: %s\n", dir,
                strerror(errno));
        return 1;
    }
    demo_gallery *g = malloc(sizeof *g);
    if (!g) {
        fprintf(stderr, "attn demo: out of memory\n");
        return 1;
    }
    gallery_init(g, dir);
    g->quick = quick;
    int rc;
    if ((rc = demo_batch(cmd, g)) || (rc = demo_three_token(cmd, dir, g)) ||
        (rc = demo_lookahead_padding(cmd)))
        goto done;
    printf("\n== The gallery of the tutorials' experiments\n\n");
    if ((rc = gallery_run(cmd, g)) || (rc = gallery_write_index(cmd, g)))
        goto done;
    printf("\nGallery: %d pictures and pages in %s/; open %s/index.html\n",
           g->nitems, dir, dir);
done:
    free(g);
    return rc;
}
