/* attn attend: runs a trained model on one input, prints its prediction
 * and writes the attention maps of every layer and head. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void help(void) {
    printf(
        "usage: attn attend MODEL.bin --input \"3 1 4 1 5\" [--out DIR] [--print]\n"
        "                   [--threads T]\n"
        "         a model of attn train reverse|sort|copy|add|... (an encoder)\n"
        "       attn attend MODEL.bin --input TEXT --out DIR [--count N]\n"
        "                   [--threads T]\n"
        "         a generation model of attn train date|... (encoder-decoder):\n"
        "         its output and cross-attention\n"
        "       attn attend DIR --text TEXT [--text-b TEXT] [--out OUT]\n"
        "                   [--threads T]\n"
        "         a pretrained BERT-family model folder (config.json,\n"
        "         model.safetensors, vocab.txt): every layer's and head's maps\n"
        "The form follows the model; attn attend MODEL.bin --help (or DIR --help)\n"
        "details the form of that model. The first form:\n"
        "\n"
        "Runs the model saved by attn train on one sequence and prints the input,\n"
        "the prediction, the expected answer and, for every layer and head, the\n"
        "key each query attends to most. Tokens are symbols 0..V-1 separated by\n"
        "spaces; for add, write the digits least significant first around '+'\n"
        "(\"3 2 1 + 6 5 4\" is 123 + 456; the sum comes out least significant\n"
        "first too, its last digit at the '+').\n"
        "\n"
        "  --out DIR      write DIR/weights.npy (layers, 1, heads, n, n) and\n"
        "                 DIR/layer<l>_head<h>.npy (n, n), f32, row = query; and\n"
        "                 the pictures DIR/attention.png (every map: a row per\n"
        "                 layer, a column per head) and DIR/layer<l>_head<h>.png\n"
        "  --print        print every map as a matrix\n"
        "  --threads T    threads of the kernels and BLAS               [1]\n");
}

/* Parses "3 1 4 + 5" into ids (SEP = vocab + 1 for '+'). */
static int parse_input(const char *cmd, const char *s, int64_t vocab,
                       int64_t maxn, int32_t *ids, int64_t *n) {
    *n = 0;
    while (*s) {
        while (isspace((unsigned char)*s) || *s == ',') s++;
        if (!*s) break;
        if (*n >= maxn)
            return cli_usage_error(cmd,
                                   "--input has more than %lld tokens, "
                                   "the model's length",
                                   (long long)maxn);
        if (*s == '+') {
            ids[(*n)++] = (int32_t)(vocab + 1);
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v >= vocab)
            return cli_usage_error(cmd,
                                   "--input token '%.*s' is not a symbol "
                                   "0..%lld or '+'",
                                   (int)strcspn(s, " ,"), s,
                                   (long long)vocab - 1);
        ids[(*n)++] = (int32_t)v;
        s = end;
    }
    if (*n == 0) return cli_usage_error(cmd, "--input is empty");
    return 0;
}

static void print_tokens(const char *title, const int32_t *t, int64_t n,
                         int64_t vocab) {
    printf("%-11s", title);
    for (int64_t i = 0; i < n; i++) {
        if (t[i] == ATTN_IGNORE_INDEX)
            printf(" .");
        else if (t[i] == vocab + 1)
            printf(" +");
        else
            printf(" %d", t[i]);
    }
    printf("\n");
}

/* Digits least significant first as an ordinary number ("7 8 9" is 987);
 * returns 0 if a token is not a digit. */
static int number_of(const int32_t *t, int64_t n, int64_t vocab,
                     unsigned long long *out) {
    unsigned long long v = 0;
    for (int64_t i = n - 1; i >= 0; i--) {
        if (t[i] < 0 || t[i] >= vocab ||
            v > (~0ull - (unsigned long long)t[i]) / (unsigned long long)vocab)
            return 0;
        v = v * (unsigned long long)vocab + (unsigned long long)t[i];
    }
    *out = v;
    return 1;
}

/* add: "987 + 45 = 1032 (the model says 1032)" in ordinary digits (base
 * vocab, which is 10 by default). */
static void print_sum(const int32_t *ids, const int32_t *pred,
                      const int32_t *expect, int64_t n, int64_t vocab) {
    int64_t d = (n - 1) / 2;
    if (n != 2 * d + 1 || ids[d] != vocab + 1) return;
    unsigned long long a, b, want, got;
    if (!number_of(ids, d, vocab, &a) ||
        !number_of(ids + d + 1, d, vocab, &b) ||
        !number_of(expect, d + 1, vocab, &want))
        return;
    int have = number_of(pred, d + 1, vocab, &got);
    printf("in ordinary digits%s: %llu + %llu = %llu; the model says ",
           vocab == 10 ? "" : " (base of the vocabulary)", a, b, want);
    if (have)
        printf("%llu (%s)\n", got, got == want ? "right" : "wrong");
    else
        printf("no number\n");
}

/* Heatmaps of every map, labelled with the input tokens (columns) and the
 * input and predicted token of each query (rows). */
static int pictures(const char *cmd, const char *dir,
                    const attn_train_config *c, float *w, const int32_t *ids,
                    const int32_t *pred, int64_t n, int64_t N, int64_t Hw) {
    char(*xl)[16] = malloc(sizeof *xl * (size_t)(2 * n));
    const char **xp = malloc(sizeof *xp * (size_t)(2 * n));
    if (!xl || !xp) {
        free(xl);
        free(xp);
        return cli_fail(cmd, ATTN_E_NOMEM, "labels");
    }
    const int64_t V = c->task.vocab;
    for (int64_t i = 0; i < n; i++) {
        char tok[12];
        if (ids[i] == V + 1)
            snprintf(tok, sizeof tok, "+");
        else
            snprintf(tok, sizeof tok, "%d", ids[i]);
        snprintf(xl[i], 16, "%s", tok);
        if (pred[i] == ATTN_IGNORE_INDEX)
            snprintf(xl[n + i], 16, "%s", tok);
        else
            snprintf(xl[n + i], 16, "%s\xe2\x86\x92%d", tok, pred[i]); /* → */
        xp[i] = xl[i];
        xp[n + i] = xl[n + i];
    }
    char title[160], path[4096];
    snprintf(title, sizeof title,
             "%s: attention of every layer (rows) and "
             "head (columns)",
             attn_task_name(c->task.kind));
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.title = title;
    ho.x_labels = xp;
    ho.y_labels = xp + n;
    ho.x_title = "key (input token)";
    ho.y_title = "query (input \xe2\x86\x92 prediction)";
    ho.annotate = 0;
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, N, Hw, n, n);
    int rc = 0;
    snprintf(path, sizeof path, "%s/attention.png", dir);
    /* one row per layer, one column per head, titled so */
    attn_status st = cli_layer_grid_write(path, &W, &ho);
    if (st) rc = cli_fail(cmd, st, path);
    for (int64_t l = 0; l < N && !rc; l++)
        for (int64_t h = 0; h < Hw && !rc; h++) {
            snprintf(title, sizeof title, "%s: layer %lld head %lld",
                     attn_task_name(c->task.kind), (long long)l, (long long)h);
            snprintf(path, sizeof path, "%s/layer%lld_head%lld.png", dir,
                     (long long)l, (long long)h);
            if ((st = attn_heatmap_write(path, &W, l, h, &ho)))
                rc = cli_fail(cmd, st, path);
        }
    free(xl);
    free(xp);
    return rc;
}

/* The argmax of each row of logits (n x V) where expect has an answer. */
static void predict(const float *logits, const int32_t *expect, int64_t n,
                    int64_t V, int32_t *pred, int64_t *right, int64_t *total) {
    *right = *total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (expect[i] == ATTN_IGNORE_INDEX) {
            pred[i] = ATTN_IGNORE_INDEX;
            continue;
        }
        int64_t arg = 0;
        for (int64_t k = 1; k < V; k++)
            if (logits[i * V + k] > logits[i * V + arg]) arg = k;
        pred[i] = (int32_t)arg;
        (*total)++;
        *right += pred[i] == expect[i];
    }
}

/* The input, prediction and answer, and a warning for a length the model
 * never saw. */
static void print_prediction(const char *cmd, const attn_train_config *c,
                             const int32_t *ids, const int32_t *pred,
                             const int32_t *expect, int64_t n, int64_t right,
                             int64_t total) {
    printf("task %s, %lld tokens\n", attn_task_name(c->task.kind),
           (long long)n);
    print_tokens("input:", ids, n, c->task.vocab);
    print_tokens("prediction:", pred, n, c->task.vocab);
    print_tokens("expected:", expect, n, c->task.vocab);
    printf("%lld of %lld right\n", (long long)right, (long long)total);
    if (c->task.kind == ATTN_TASK_ADD)
        print_sum(ids, pred, expect, n, c->task.vocab);
    /* a length the model never saw: its positions (and for add, its
     * digit alignment) are untrained, the answer is likely wrong */
    int64_t len = n;
    if (c->task.kind == ATTN_TASK_ADD) len = (n - 1) / 2;
    if (len < c->task.min_len || len > c->task.max_len)
        fprintf(stderr,
                "attn %s: warning: the model was trained on %s of "
                "%lld..%lld %s; this input has %lld, so the answer above may "
                "well be wrong\n",
                cmd, attn_task_name(c->task.kind), (long long)c->task.min_len,
                (long long)c->task.max_len,
                c->task.kind == ATTN_TASK_ADD ? "digits per number" : "tokens",
                (long long)len);
}

/* Per layer and head, the most attended key of each query (and with
 * --print, the whole map). */
static void print_heads(const float *w, int64_t N, int64_t Hw, int64_t n,
                        int print) {
    for (int64_t l = 0; l < N; l++)
        for (int64_t h = 0; h < Hw; h++) {
            const float *wm = w + (l * Hw + h) * n * n;
            printf("layer %lld head %lld, most attended key per query:",
                   (long long)l, (long long)h);
            for (int64_t i = 0; i < n; i++) {
                int64_t arg = 0;
                for (int64_t j = 1; j < n; j++)
                    if (wm[i * n + j] > wm[i * n + arg]) arg = j;
                printf(" %lld", (long long)arg);
            }
            printf("\n");
            if (print) {
                char title[64];
                snprintf(title, sizeof title, "layer %lld head %lld",
                         (long long)l, (long long)h);
                cli_print_matrix(stdout, title, wm, n, n, n, 2);
            }
        }
}

/* --out DIR: weights.npy, a .npy per map and the pictures. */
static int write_out(const char *cmd, const char *out,
                     const attn_train_config *c, float *w, const int32_t *ids,
                     const int32_t *pred, int64_t n, int64_t N, int64_t Hw) {
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn %s: cannot create %s: %s\n", cmd, cli_esc(out),
                strerror(errno));
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/weights.npy", out);
    /* (layer, batch, head, query, key) as attn encoder --weights, so
     * that heatmap, stats and show name the axes alike */
    const int64_t shape5[5] = {N, 1, Hw, n, n}, *shape = shape5 + 1;
    int rc = cli_save_array(cmd, path, ATTN_F32, w, 5, shape5);
    for (int64_t l = 0; l < N && !rc; l++)
        for (int64_t h = 0; h < Hw && !rc; h++) {
            snprintf(path, sizeof path, "%s/layer%lld_head%lld.npy", out,
                     (long long)l, (long long)h);
            rc = cli_save_array(cmd, path, ATTN_F32, w + (l * Hw + h) * n * n,
                                2, shape + 2);
        }
    if (!rc) rc = pictures(cmd, out, c, w, ids, pred, n, N, Hw);
    if (!rc)
        printf("wrote %s/weights.npy, attention.png and %lld maps "
               "layer<l>_head<h>.npy/.png\n",
               out, (long long)(N * Hw));
    return rc;
}

/* Runs the model of tr on input and prints (and writes) what it saw. */
static int run_attend(const char *cmd, attn_trainer *tr, const char *input,
                      const char *out, int threads, int print) {
    const attn_train_config *c = attn_trainer_config(tr);
    const attn_model_config *m = &c->model;
    const int64_t Lmax = m->max_len, V = m->vocab_out;
    const int64_t N = m->enc.num_layers,
                  Hw = attn_encoder_weight_heads(&m->enc);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(3 * Lmax));
    float *logits = NULL, *w = NULL, *work = NULL;
    attn_status st;
    int64_t n = 0, right, total;
    size_t ws = 0;
    if (!ids) return cli_fail(cmd, ATTN_E_NOMEM, "input");
    int32_t *expect = ids + Lmax, *pred = ids + 2 * Lmax;
    int rc = parse_input(cmd, input, c->task.vocab, Lmax, ids, &n);
    if (!rc && (st = attn_task_solve(&c->task, ids, n, expect)))
        rc = cli_fail(cmd, st, "input");
    if (!rc && (st = attn_model_workspace_size(m, 1, n, &ws)))
        rc = cli_fail(cmd, st, "workspace");
    if (!rc && (!(logits = malloc(sizeof(float) * (size_t)(n * V))) ||
                !(w = malloc(sizeof(float) * (size_t)(N * Hw * n * n))) ||
                !(work = malloc(sizeof(float) * ws))))
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    attn_layer_opts o = cli_threads_opts(threads);
    if (!rc && (st = attn_model_forward(m, attn_trainer_params(tr), 1, n, ids,
                                        NULL, &o, logits, w, work)))
        rc = cli_fail(cmd, st, "forward");
    if (!rc) {
        predict(logits, expect, n, V, pred, &right, &total);
        print_prediction(cmd, c, ids, pred, expect, n, right, total);
        print_heads(w, N, Hw, n, print);
        if (out) rc = write_out(cmd, out, c, w, ids, pred, n, N, Hw);
    }
    free(ids);
    free(logits);
    free(w);
    free(work);
    return rc;
}

int cmd_attend(const char *cmd, int argc, char **argv) {
    if (argc > 1 && argv[1][0] != '-' && cli_gen_checkpoint(argv[1]))
        return cmd_attend_gen(cmd, argc, argv);
    if (argc > 1 && cli_is_llama_dir(argv[1]))
        return cli_llama_attend(cmd, argc, argv);
    /* a folder is a pretrained model (cmd_pretrained.c) */
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (argv[i][0] != '-' && stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode))
            return cli_attend_pretrained(cmd, argc, argv);
        if (argv[i][0] == '-' && argv[i][1] == '-' && !cli_is_help(argv[i]))
            i++;
    }
    if (cli_help_asked(argc, argv, help)) return 0;
    const char *model = NULL, *input = NULL, *out = NULL;
    int threads = 1, print = 0;
    const cli_opt opts[] = {CLI_FLAG("--print", &print),
                            CLI_STR("--input", &input), CLI_STR("--out", &out),
                            CLI_INT("--threads", &threads, 0, 1024)};
    if (cli_parse_args(cmd, argc, argv, opts, sizeof opts / sizeof opts[0],
                       &model, 1))
        return 2;
    if (!model) return cli_usage_error(cmd, "need MODEL.bin");
    if (!input) return cli_usage_error(cmd, "need --input \"TOKENS\"");
    if (out && cli_check_out_dir(cmd, "--out", out)) return 1;
    attn_trainer *tr;
    attn_status st = attn_trainer_load(model, &tr);
    if (st) return cli_fail(cmd, st, "load");
    cli_train_threads(threads);
    int rc = run_attend(cmd, tr, input, out, threads, print);
    attn_trainer_free(tr);
    return rc;
}
