/* attn attend for generation models: the generated output of one input
 * and its cross-attention maps (target characters x source characters,
 * per layer and head, .npy and PNG), one alignment picture with character
 * labels, and the field alignment score of the date task (the mean
 * cross-attention weight an output character of the year, month or day
 * puts on the source characters of the same field). */
#include "cli.h"
#include "attn_transformer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void help(void) {
    printf(
        "usage: attn attend MODEL.bin --input TEXT --out DIR [--count N]\n"
        "                   [--threads T]     (encoder-decoder generation models)\n"
        "\n"
        "Generates the output for TEXT (greedy), runs the decoder over it once\n"
        "more with teacher forcing and writes its cross-attention (row: the\n"
        "decoder position that emits an output character, column: a source\n"
        "character):\n"
        "  DIR/cross_weights.npy            (layers, 1, heads, out + 1, in) f32:\n"
        "                                   (layer, batch, head, query, key)\n"
        "  DIR/cross_layer<l>_head<h>.npy   (out + 1, in)\n"
        "  DIR/cross_layer<l>_head<h>.png   each map, with character labels\n"
        "  DIR/cross_attention.png          every map: a row per layer\n"
        "  DIR/alignment.png                the best-aligned head, labelled\n"
        "For the date task it also prints, per layer and head, the mean weight\n"
        "that output characters of the year, month and day put on the source\n"
        "characters of the same field, over N fresh dates (--count, 200).\n");
}

/* Same-field weight per (layer, head) over count fresh examples;
 * score[M * Hc] overwritten. Returns 0 or an exit status. */
int cli_gen_alignment(const char *cmd, const attn_gen_train_config *c,
                      const float *params, int64_t count, int threads,
                      double *score) {
    const attn_transformer_config *m = &c->model;
    const int64_t M = m->dec.num_layers, Hc = attn_decoder_cross_heads(&m->dec);
    int64_t Ls, Lt;
    attn_gen_batch_dims(&c->task, m->kind, &Ls, &Lt);
    const int64_t B = count < 100 ? count : 100, V = m->vocab_tgt;
    size_t wsn;
    attn_status st = attn_transformer_workspace_size(m, B, Ls, Lt, &wsn);
    if (st) return cli_fail(cmd, st, "workspace");
    int32_t *src = calloc((size_t)(B * (Ls + Lt)), sizeof(int32_t));
    int64_t *len = calloc((size_t)B, sizeof(int64_t));
    uint8_t *sf = calloc((size_t)(B * (Ls + Lt)), 1);
    float *ws = malloc(sizeof(float) * wsn);
    float *logits = malloc(sizeof(float) * (size_t)(B * Lt * V));
    float *w = malloc(sizeof(float) * (size_t)(M * B * Hc * Lt * Ls));
    double *mass = calloc((size_t)(M * Hc), sizeof(double));
    int rc = 0;
    if (!src || !len || !sf || !ws || !logits || !w || !mass) {
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
        goto done;
    }
    int32_t *tin = src + B * Ls;
    uint8_t *tf = sf + B * Ls;
    attn_rng rng;
    attn_rng_seed(&rng, 0xA119A11ull);
    attn_layer_opts o = cli_threads_opts(threads);
    int64_t rows = 0;
    for (int64_t done = 0; done < count; done += B) {
        const int64_t n = count - done < B ? count - done : B;
        for (int64_t b = 0; b < n; b++) {
            char s[64], y[64];
            int64_t ns, ny;
            attn_gen_sample_fields(&c->task, &rng, s, sizeof s, y, sizeof y,
                                   sf + b * Ls, tf + b * Lt);
            attn_gen_encode(&c->task, ATTN_SIDE_SOURCE, s, src + b * Ls, Ls,
                            &ns);
            for (int64_t i = ns; i < Ls; i++) src[b * Ls + i] = ATTN_GEN_PAD;
            tin[b * Lt] = ATTN_GEN_BOS;
            attn_gen_encode(&c->task, ATTN_SIDE_TARGET, y, tin + b * Lt + 1,
                            Lt - 1, &ny);
            len[b] = ns;
        }
        if ((st = attn_transformer_forward(m, params, n, Ls, src, len, Lt, tin,
                                           &o, logits, w, ws))) {
            rc = cli_fail(cmd, st, "forward");
            goto done;
        }
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < Lt - 1; i++) {
                const int f = tf[b * Lt + i];
                if (!f) continue;
                rows++;
                for (int64_t l = 0; l < M; l++)
                    for (int64_t h = 0; h < Hc; h++) {
                        const float *r =
                            w + ((((l * n + b) * Hc + h) * Lt) + i) * Ls;
                        double s = 0;
                        for (int64_t j = 0; j < len[b]; j++)
                            if (sf[b * Ls + j] == f) s += r[j];
                        mass[l * Hc + h] += s;
                    }
            }
    }
    for (int64_t k = 0; k < M * Hc; k++)
        score[k] = rows ? mass[k] / (double)rows : 0;
done:
    free(src);
    free(len);
    free(sf);
    free(ws);
    free(logits);
    free(w);
    free(mass);
    return rc;
}

/* The visible label of a character (a space as an open box). */
static void char_label(char c, char *buf, size_t n) {
    if (c == ' ')
        snprintf(buf, n, "\xe2\x90\xa3");
    else
        snprintf(buf, n, "%c", c);
}

/* The output of one input and the decoder's cross-attention over it. */
typedef struct {
    int64_t Ls, Lt, n; /* source length, decoder rows, output tokens */
    int32_t *src;      /* [Lsmax + 2 Ltmax]: source, output, fed rows */
    char text[128];    /* the output */
    float *w;          /* (M, Hc, Lt, Ls) */
    char **lab;        /* Ls source, then Lt output labels */
    int64_t nlab;
} gen_maps;

static void gen_maps_free(gen_maps *g) {
    if (g->lab)
        for (int64_t i = 0; i < g->nlab; i++) free(g->lab[i]);
    free(g->lab);
    free(g->src);
    free(g->w);
}

/* Generates the output of input (greedy), then runs the decoder once more
 * over it with teacher forcing for its cross-attention weights. */
static int generate_maps(const char *cmd, const attn_gen_train_config *c,
                         const float *params, const char *input, int threads,
                         gen_maps *g) {
    const attn_transformer_config *m = &c->model;
    const int64_t M = m->dec.num_layers, Hc = attn_decoder_cross_heads(&m->dec);
    int64_t Lsmax, Ltmax;
    attn_gen_batch_dims(&c->task, m->kind, &Lsmax, &Ltmax);
    g->src = calloc((size_t)(Lsmax + 2 * Ltmax), sizeof(int32_t));
    g->nlab = Lsmax + Ltmax;
    g->lab = calloc((size_t)g->nlab, sizeof(char *));
    if (!g->src || !g->lab) return cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    attn_status st =
        attn_gen_input(&c->task, m->kind, input, g->src, Lsmax, &g->Ls);
    if (st) return cli_fail(cmd, st, "input");
    int32_t *gen = g->src + Lsmax, *tin = gen + Ltmax;
    attn_generate_opts go;
    attn_generate_opts_init(&go);
    go.threads = threads;
    if ((st = attn_generate(m, params, 1, g->Ls, g->src, &g->Ls, &go, gen,
                            Ltmax, &g->n, NULL)))
        return cli_fail(cmd, st, "generation");
    attn_gen_decode(&c->task, ATTN_SIDE_TARGET, gen, g->n, g->text,
                    sizeof g->text);
    printf("input:  %s\noutput: %s\n", input, g->text);
    /* BOS and the output; its last token is not fed when the output ran to
     * the model's length without EOS */
    const int64_t Lt = g->Lt = g->n < m->max_tgt ? g->n + 1 : g->n;
    tin[0] = ATTN_GEN_BOS;
    memcpy(tin + 1, gen, sizeof(int32_t) * (size_t)(Lt - 1));
    size_t wsn;
    if ((st = attn_transformer_workspace_size(m, 1, g->Ls, Lt, &wsn)))
        return cli_fail(cmd, st, "workspace");
    g->w = malloc(sizeof(float) * (size_t)(M * Hc * Lt * g->Ls));
    float *logits = malloc(sizeof(float) * (size_t)(Lt * m->vocab_tgt));
    float *ws = malloc(sizeof(float) * wsn);
    int rc = 0;
    if (!g->w || !logits || !ws) rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    attn_layer_opts o = cli_threads_opts(threads);
    if (!rc &&
        (st = attn_transformer_forward(m, params, 1, g->Ls, g->src, &g->Ls, Lt,
                                       tin, &o, logits, g->w, ws)))
        rc = cli_fail(cmd, st, "forward");
    free(logits);
    free(ws);
    return rc;
}

/* Labels: source characters (columns, lower case), output characters
 * (rows, EOS after the output). */
static int make_labels(const char *cmd, const char *input, gen_maps *g) {
    for (int64_t j = 0; j < g->Ls + g->Lt; j++)
        if (!(g->lab[j] = malloc(8)))
            return cli_fail(cmd, ATTN_E_NOMEM, "labels");
    for (int64_t j = 0; j < g->Ls; j++)
        char_label(input[j] >= 'A' && input[j] <= 'Z' ? (char)(input[j] + 32)
                                                      : input[j],
                   g->lab[j], 8);
    for (int64_t i = 0; i < g->Lt; i++) {
        if (i < g->n)
            char_label(g->text[i], g->lab[g->Ls + i], 8);
        else
            snprintf(g->lab[g->Ls + i], 8, "EOS");
    }
    return 0;
}

/* DIR/cross_weights.npy, a .npy and a .png per head, and the grid of every
 * map. */
static int write_maps(const char *cmd, const char *out, const gen_maps *g,
                      int64_t M, int64_t Hc, attn_heatmap_opts *ho) {
    const int64_t Lt = g->Lt, Ls = g->Ls;
    char path[4096], title[320];
    /* (layer, batch, head, Lt, Ls) with batch 1: the rank names the axes */
    int64_t shape[5] = {M, 1, Hc, Lt, Ls};
    snprintf(path, sizeof path, "%s/cross_weights.npy", out);
    int rc = cli_save_array(cmd, path, ATTN_F32, g->w, 5, shape);
    attn_tensor W = attn_tensor_4d(g->w, ATTN_F32, M, Hc, Lt, Ls);
    attn_status st;
    for (int64_t l = 0; l < M && !rc; l++)
        for (int64_t h = 0; h < Hc && !rc; h++) {
            int64_t s2[2] = {Lt, Ls};
            snprintf(path, sizeof path, "%s/cross_layer%lld_head%lld.npy", out,
                     (long long)l, (long long)h);
            if ((rc = cli_save_array(cmd, path, ATTN_F32,
                                     g->w + (l * Hc + h) * Lt * Ls, 2, s2)))
                break;
            snprintf(title, sizeof title,
                     "cross-attention, layer %lld head %lld", (long long)l,
                     (long long)h);
            ho->title = title;
            snprintf(path, sizeof path, "%s/cross_layer%lld_head%lld.png", out,
                     (long long)l, (long long)h);
            if ((st = attn_heatmap_write(path, &W, l, h, ho)))
                rc = cli_fail(cmd, st, path);
        }
    if (rc) return rc;
    ho->title = "cross-attention of every layer (rows) and head (columns)";
    snprintf(path, sizeof path, "%s/cross_attention.png", out);
    if ((st = cli_layer_grid_write(path, &W, ho)))
        return cli_fail(cmd, st, path);
    return 0;
}

/* The date task's same-field weights per layer and head, printed, and the
 * best head (*best = layer * Hc + head). */
static int date_alignment(const char *cmd, const attn_gen_train_config *c,
                          const float *params, int64_t count, int threads,
                          int64_t *best, double *best_score) {
    const attn_transformer_config *m = &c->model;
    const int64_t M = m->dec.num_layers, Hc = attn_decoder_cross_heads(&m->dec);
    double *score = calloc((size_t)(M * Hc), sizeof(double));
    if (!score) return cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    int rc = cli_gen_alignment(cmd, c, params, count, threads, score);
    if (rc) {
        free(score);
        return rc;
    }
    printf("same-field cross-attention weight over %lld fresh dates "
           "(year, month, day characters):\n",
           (long long)count);
    for (int64_t l = 0; l < M; l++) {
        double avg = 0;
        printf("  layer %lld:", (long long)l);
        for (int64_t h = 0; h < Hc; h++) {
            printf(" head %lld %.3f", (long long)h, score[l * Hc + h]);
            avg += score[l * Hc + h] / (double)Hc;
        }
        printf("  (head average %.3f)\n", avg);
    }
    *best = 0;
    for (int64_t k = 1; k < M * Hc; k++)
        if (score[k] > score[*best]) *best = k;
    *best_score = score[*best];
    printf("best head: layer %lld head %lld, %.3f\n", (long long)(*best / Hc),
           (long long)(*best % Hc), *best_score);
    free(score);
    return 0;
}

/* DIR/alignment.png: the best-aligned head (date: by the same-field
 * weight; else the last head), labelled. */
static int write_alignment(const char *cmd, const char *out,
                           const attn_gen_train_config *c, const float *params,
                           const char *input, int64_t count, int threads,
                           const gen_maps *g, attn_heatmap_opts *ho) {
    const attn_transformer_config *m = &c->model;
    const int64_t M = m->dec.num_layers, Hc = attn_decoder_cross_heads(&m->dec);
    int64_t best = M * Hc - 1;
    char path[4096], title[320];
    if (c->task.kind == ATTN_GEN_DATE) {
        double sc = 0;
        int rc = date_alignment(cmd, c, params, count, threads, &best, &sc);
        if (rc) return rc;
        snprintf(title, sizeof title,
                 "\"%.40s\" -> %.40s: layer %lld head %lld "
                 "(same-field weight %.2f)",
                 input, g->text, (long long)(best / Hc), (long long)(best % Hc),
                 sc);
    } else {
        snprintf(title, sizeof title,
                 "\"%.40s\" -> %.40s: layer %lld head %lld", input, g->text,
                 (long long)(best / Hc), (long long)(best % Hc));
    }
    ho->title = title;
    ho->annotate = 1;
    attn_tensor W = attn_tensor_4d(g->w, ATTN_F32, M, Hc, g->Lt, g->Ls);
    snprintf(path, sizeof path, "%s/alignment.png", out);
    attn_status st = attn_heatmap_write(path, &W, best / Hc, best % Hc, ho);
    if (st) return cli_fail(cmd, st, path);
    printf("wrote %s/cross_weights.npy, per-head .npy and .png, "
           "cross_attention.png and alignment.png\n",
           out);
    return 0;
}

int cmd_attend_gen(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, help)) return 0;
    const char *model = NULL, *input = NULL, *out = NULL;
    int64_t threads = 1, count = 200;
    const cli_opt opts[] = {CLI_STR("--input", &input), CLI_STR("--out", &out),
                            CLI_I64("--count", &count, 1, INT64_MAX),
                            CLI_I64("--threads", &threads, 0, 1024)};
    if (cli_parse_args(cmd, argc, argv, opts, sizeof opts / sizeof opts[0],
                       &model, 1))
        return 2;
    if (!model || !input || !out)
        return cli_usage_error(cmd, "MODEL.bin, --input TEXT and --out DIR are "
                                    "required");
    if (cli_check_out_dir(cmd, "--out", out)) return 1;
    cli_train_threads(threads);
    attn_gen_trainer *tr;
    attn_status st = attn_gen_trainer_load(model, &tr);
    if (st) return cli_fail(cmd, st, "model");
    const attn_gen_train_config *c = attn_gen_trainer_config(tr);
    const attn_transformer_config *m = &c->model;
    const float *params = attn_gen_trainer_params(tr);
    if (m->kind != ATTN_MODEL_ENCDEC) {
        fprintf(stderr,
                "attn attend: %s is a decoder-only model: it has no "
                "cross-attention to show\n",
                model);
        attn_gen_trainer_free(tr);
        return 1;
    }
    gen_maps g;
    memset(&g, 0, sizeof g);
    int rc = generate_maps(cmd, c, params, input, (int)threads, &g);
    if (!rc && mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn attend: cannot create %s\n", out);
        rc = 1;
    }
    if (!rc) rc = make_labels(cmd, input, &g);
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.x_labels = (const char *const *)g.lab;
    ho.y_labels = (const char *const *)g.lab + g.Ls;
    ho.x_title = "source character";
    ho.y_title = "output character";
    ho.annotate = 0;
    const int64_t M = m->dec.num_layers, Hc = attn_decoder_cross_heads(&m->dec);
    if (!rc) rc = write_maps(cmd, out, &g, M, Hc, &ho);
    if (!rc)
        rc = write_alignment(cmd, out, c, params, input, count, (int)threads,
                             &g, &ho);
    gen_maps_free(&g);
    attn_gen_trainer_free(tr);
    return rc;
}
