/* Llama-family folders (Llama, Mistral, Qwen2 as transformers saves them)
 * and GGUF files in the command: attn generate DIR (text streamed as it is produced,
 * tokens/s at the end), attn attend DIR (every layer's causal heads as
 * pictures, and per head the weight on the first token, on the previous
 * token and on the token after an earlier copy of the current one), attn
 * model info DIR. */
#include "cli.h"
#include "attn_gguf.h"
#include "attn_pretrained.h"
#include "attn_tokenizer.h"

#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* A GGUF file by its first bytes (the loader checks the rest). */
static int is_gguf(const char *path) {
    struct stat sb;
    if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4] = {0};
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(magic, "GGUF", 4) == 0;
}

/* A Llama-family folder, or a GGUF file (which attn_llama_load reads). */
int cli_is_llama_dir(const char *dir) {
    struct stat sb;
    if (is_gguf(dir)) return 1;
    if (!dir || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "model_type": "llama" (the loader reads the file properly) */
    const char *p = strstr(buf, "\"model_type\"");
    if (!p) return 0;
    p = strchr(p + 12, '"');
    if (!p) return 0;
    return strncmp(p, "\"llama\"", 7) == 0 ||
           strncmp(p, "\"mistral\"", 9) == 0 || strncmp(p, "\"qwen2\"", 7) == 0;
}

static void gen_help(void) {
    printf(
        "usage: attn generate DIR|FILE (--prompt TEXT | --ids I,J,..) [--max-new-tokens 32]\n"
        "                     [--sample] [--temperature 1] [--top-k 0] [--top-p 1]\n"
        "                     [--seed 0] [--threads 0]\n"
        "\n"
        "Continues a prompt with the Llama-family model in DIR (config.json with\n"
        "model_type llama, mistral or qwen2, model.safetensors, tokenizer.json)\n"
        "or in a GGUF FILE (architecture llama; special tokens such as\n"
        "<|im_start|> in TEXT are the tokenizer's):\n"
        "greedy by default, or sampled with temperature, top-k and top-p from\n"
        "--seed (the same text on any thread count). The text is written as it is\n"
        "produced (ids when the folder has no tokenizer.json); generation stops\n"
        "at the end-of-sequence token. The speed is printed at the end.\n");
}

double cli_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cli_llama_on_token(void *user, int32_t id) {
    cli_streamer *s = user;
    if (!s->tok) {
        printf(" %d", (int)id);
    } else {
        size_t len = 0;
        if (attn_bpe_stream_next(s->tok, &s->st, id, 1, s->buf, s->cap, &len) ==
            ATTN_OK)
            fwrite(s->buf, 1, len, stdout);
    }
    fflush(stdout);
    return 0;
}

/* The prompt's ids: --ids, or --prompt through the folder's tokenizer. */
static int prompt_ids(const char *cmd, const attn_llama *m, const char *text,
                      const char *list, int32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    if (list) {
        int64_t k = 1;
        for (const char *c = list; *c; c++) k += *c == ',';
        if (!(*ids = malloc(sizeof(int32_t) * (size_t)k)))
            return cli_fail(cmd, ATTN_E_NOMEM, "ids");
        const char *p = list;
        for (int64_t i = 0; i < k; i++) {
            char tmp[32];
            size_t w = strcspn(p, ",");
            int64_t v;
            if (w == 0 || w >= sizeof tmp)
                return cli_usage_error(cmd, "--ids: entry %lld is not an id",
                                       (long long)i);
            memcpy(tmp, p, w);
            tmp[w] = '\0';
            if (cli_parse_i64(tmp, &v) || v < 0 || v > INT32_MAX)
                return cli_usage_error(cmd, "--ids: '%s' is not an id",
                                       cli_esc(tmp));
            (*ids)[i] = (int32_t)v;
            p += w + (p[w] == ',');
        }
        *n = k;
        return 0;
    }
    const attn_bpe *tok = attn_llama_tokenizer(m);
    if (!tok)
        return cli_usage_error(cmd, "the folder has no tokenizer.json: give "
                                    "the prompt as --ids");
    /* special tokens written in the text are theirs, as transformers'
     * tokenizers read them */
    const unsigned flags = ATTN_BPE_ADD_SPECIAL | ATTN_BPE_PARSE_SPECIAL;
    size_t len = strlen(text);
    int64_t need = 0;
    attn_status st = attn_bpe_encode(tok, text, len, flags, NULL, 0, &need);
    if (!st && need < 1)
        return cli_usage_error(cmd, "the prompt encodes to no token");
    if (!st && !(*ids = malloc(sizeof(int32_t) * (size_t)need)))
        st = ATTN_E_NOMEM;
    if (!st) st = attn_bpe_encode(tok, text, len, flags, *ids, need, n);
    return st ? cli_fail(cmd, st, "encoding the prompt") : 0;
}

/* A model (a folder or a GGUF file) and a prompt's ids. */
typedef struct {
    attn_llama *m;
    int32_t *ids;
    int64_t n;
    const char *label; /* the prompt as given, for the output */
} llama_prompt;

/* The arguments DIR (or FILE), one of --prompt TEXT or --ids I,J,.. and
 * the command's own options own[0 .. nown - 1]: the model loaded and the
 * prompt encoded into *p; nothing to free on failure. */
static int load_prompt(const char *cmd, int argc, char **argv,
                       const cli_opt *own, size_t nown, llama_prompt *p) {
    const char *dir = NULL, *text = NULL, *list = NULL;
    cli_opt opts[CLI_LLAMA_GEN_NOPTS + 2] = {CLI_STR("--prompt", &text),
                                             CLI_STR("--ids", &list)};
    memcpy(opts + 2, own, nown * sizeof *own);
    int rc = cli_parse_args(cmd, argc, argv, opts, nown + 2, &dir, 1);
    if (rc) return rc;
    if (!dir || (!text && !list) || (text && list))
        return cli_usage_error(cmd,
                               "need DIR (or FILE) and one of --prompt TEXT or "
                               "--ids I,J,..");
    attn_status st = attn_llama_load(dir, &p->m);
    if (st) return cli_fail(cmd, st, "load");
    p->ids = NULL, p->n = 0, p->label = text ? text : list;
    rc = prompt_ids(cmd, p->m, text, list, &p->ids, &p->n);
    if (rc) {
        free(p->ids);
        attn_llama_free(p->m);
    }
    return rc;
}

void cli_llama_gen_table(attn_llama_gen_opts *o, cli_opt *t) {
    const cli_opt rows[CLI_LLAMA_GEN_NOPTS] = {
        CLI_I64("--max-new-tokens", &o->max_new_tokens, 1, 1 << 24),
        CLI_FLAG("--sample", &o->do_sample),
        CLI_F64("--temperature", &o->temperature, 0, DBL_MAX, 1),
        CLI_I64("--top-k", &o->top_k, 0, INT64_MAX),
        CLI_F64("--top-p", &o->top_p, 0, 1, 1),
        CLI_U64("--seed", &o->seed),
        CLI_INT("--threads", &o->threads, 0, 1024)};
    memcpy(t, rows, sizeof rows);
}

/* Writes the prompt, streams the generated text and prints the speed. */
static int run_generate(const char *cmd, attn_llama *m, const int32_t *ids,
                        int64_t n, const char *shown,
                        const attn_llama_gen_opts *o) {
    int32_t *out = NULL;
    int64_t nout = 0;
    cli_streamer s;
    memset(&s, 0, sizeof s);
    s.tok = attn_llama_tokenizer(m);
    s.cap = s.tok ? attn_bpe_stream_max(s.tok) + 8 : 0;
    int rc = 0;
    if (!(out = malloc(sizeof(int32_t) * (size_t)o->max_new_tokens)) ||
        (s.cap && !(s.buf = malloc(s.cap))))
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    if (!rc) {
        attn_bpe_stream_init(&s.st);
        fputs(shown, stdout);
        fflush(stdout);
        double t0 = cli_now_s();
        attn_status st =
            attn_llama_generate(m, ids, n, o, out, o->max_new_tokens, &nout,
                                cli_llama_on_token, &s);
        double dt = cli_now_s() - t0;
        size_t len = 0;
        if (s.tok && attn_bpe_stream_end(&s.st, s.buf, s.cap, &len) == ATTN_OK)
            fwrite(s.buf, 1, len, stdout);
        printf("\n");
        if (st)
            rc = cli_fail(cmd, st, "generate");
        else
            fprintf(stderr,
                    "%lld prompt tokens, %lld new in %.3f s: %.1f tokens/s "
                    "(the prompt in one pass, then one token a step)\n",
                    (long long)n, (long long)nout, dt,
                    dt > 0 ? (double)(n + nout) / dt : 0.0);
    }
    free(out);
    free(s.buf);
    return rc;
}

int cli_llama_generate(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, gen_help)) return 0;
    attn_llama_gen_opts o;
    attn_llama_gen_opts_init(&o);
    cli_opt own[CLI_LLAMA_GEN_NOPTS];
    cli_llama_gen_table(&o, own);
    llama_prompt p;
    int rc = load_prompt(cmd, argc, argv, own, CLI_LLAMA_GEN_NOPTS, &p);
    if (rc) return rc;
    rc = run_generate(cmd, p.m, p.ids, p.n, p.label, &o);
    free(p.ids);
    attn_llama_free(p.m);
    return rc;
}

static void attend_help(void) {
    printf(
        "usage: attn attend DIR|FILE (--prompt TEXT | --ids I,J,..) [--out attend-out]\n"
        "                   [--threads 0]\n"
        "\n"
        "Every layer's causal attention heads of the Llama-family model in DIR\n"
        "(or in a GGUF FILE)\n"
        "over the prompt: OUT/layer<l>.png (a grid of the heads),\n"
        "OUT/attention.html (the viewer), OUT/weights.npy (layers, heads, n, n),\n"
        "OUT/tokens.txt; and per head the mean weight on the first token (an\n"
        "attention sink), on the previous token, and, over the rows whose token\n"
        "appeared before, on the token after that earlier copy (induction).\n");
}

/* Mean weights of one head (n x n, causal): on token 0 and on i - 1 over
 * rows i >= 1, and on j + 1 for the latest earlier j with ids[j] ==
 * ids[i] (-1 when no row repeats a token). */
static void head_stats(const float *w, const int32_t *ids, int64_t n,
                       double *first, double *prev, double *ind) {
    double f = 0, p = 0, s = 0;
    int64_t rows = 0, reps = 0;
    for (int64_t i = 1; i < n; i++) {
        f += w[i * n];
        p += w[i * n + i - 1];
        rows++;
        for (int64_t j = i - 1; j >= 0; j--)
            if (ids[j] == ids[i]) {
                s += w[i * n + j + 1];
                reps++;
                break;
            }
    }
    *first = rows ? f / (double)rows : 0;
    *prev = rows ? p / (double)rows : 0;
    *ind = reps ? s / (double)reps : -1;
}

/* OUT/tokens.txt: a line per token, its id and its label. */
static int write_tokens(const char *cmd, const char *out, const int32_t *ids,
                        const char **labels, int64_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokens.txt", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "attn %s: cannot write %s\n", cmd, cli_esc(path));
        return 1;
    }
    for (int64_t i = 0; i < n; i++)
        fprintf(f, "%d\t%s\n", (int)ids[i], labels[i]);
    fclose(f);
    return 0;
}

/* Per head: the weight on the first token, the previous one, and the one
 * after an earlier copy of the current token. */
static void print_head_stats(const float *w, const int32_t *ids, int64_t N,
                             int64_t H, int64_t n, const char *out) {
    printf("%lld tokens; per head, mean weight on the first token, on the "
           "previous token, and on the token after an earlier copy of "
           "the current one (induction; - when no token repeats):\n",
           (long long)n);
    for (int64_t l = 0; l < N; l++)
        for (int64_t h = 0; h < H; h++) {
            double fi, pv, in;
            head_stats(w + (l * H + h) * n * n, ids, n, &fi, &pv, &in);
            printf("  layer %lld head %2lld  first %.2f  previous %.2f  "
                   "induction ",
                   (long long)l, (long long)h, fi, pv);
            if (in < 0)
                printf("-\n");
            else
                printf("%.2f\n", in);
        }
    printf("wrote %s/{tokens.txt, weights.npy, layer<l>.png, "
           "attention.html}\n",
           out);
}

/* The forward pass over the prompt with every layer's weights, and what
 * attend writes of them. */
static int run_attend(const char *cmd, attn_llama *m, const int32_t *ids,
                      int64_t n, const char *out, const char *shown,
                      int threads) {
    const attn_llama_config *c = attn_llama_get_config(m);
    const int64_t N = c->num_layers, H = c->num_heads, V = c->vocab_size;
    float *w = NULL, *z = NULL;
    const char **labels = NULL;
    char *names = NULL;
    attn_status st;
    int rc = 0;
    if (n > 2048)
        return cli_usage_error(cmd,
                               "the prompt has %lld tokens; attend draws "
                               "at most 2048",
                               (long long)n);
    if (!(w = malloc(sizeof(float) * (size_t)(N * H * n * n))) ||
        !(z = malloc(sizeof(float) * (size_t)(n * V))) ||
        !(labels = malloc(sizeof *labels * (size_t)n)) ||
        !(names = malloc((size_t)n * 24)))
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    if (!rc && (st = attn_llama_forward(m, 1, n, ids, threads, z, w)))
        rc = cli_fail(cmd, st, "forward");
    if (!rc && mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn %s: cannot create %s: %s\n", cmd, cli_esc(out),
                strerror(errno));
        rc = 1;
    }
    const attn_bpe *tok = attn_llama_tokenizer(m);
    for (int64_t i = 0; !rc && i < n; i++) {
        const char *t = tok ? attn_bpe_token(tok, ids[i]) : NULL;
        snprintf(names + i * 24, 24, "%s", t ? t : "");
        if (!t) snprintf(names + i * 24, 24, "%d", (int)ids[i]);
        labels[i] = names + i * 24;
    }
    if (!rc) rc = write_tokens(cmd, out, ids, labels, n);
    int64_t shape[4] = {N, H, n, n};
    char path[4096];
    if (!rc) {
        snprintf(path, sizeof path, "%s/weights.npy", out);
        rc = cli_save_array(cmd, path, ATTN_F32, w, 4, shape);
    }
    if (!rc) rc = cli_attend_pictures(cmd, out, w, labels, N, H, n, shown);
    if (!rc) print_head_stats(w, ids, N, H, n, out);
    free(w);
    free(z);
    free(labels);
    free(names);
    return rc;
}

int cli_llama_attend(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, attend_help)) return 0;
    const char *out = "attend-out";
    int threads = 0;
    const cli_opt own[] = {CLI_STR("--out", &out),
                           CLI_INT("--threads", &threads, 0, 1024)};
    llama_prompt p;
    int rc = load_prompt(cmd, argc, argv, own, 2, &p);
    if (!rc) {
        rc = run_attend(cmd, p.m, p.ids, p.n, out, p.label, threads);
        free(p.ids);
        attn_llama_free(p.m);
    }
    return rc;
}

/* "weights stored as Q4_1 x 210, F32 x 61, ...": the GGUF file's tensor
 * types in the order they first come. */
static void print_gguf_types(const char *path) {
    attn_gguf *g;
    printf("  weights stored as");
    if (attn_gguf_open(path, &g) != ATTN_OK) return;
    const int64_t nt = attn_gguf_tensor_count(g);
    int done[64] = {0};
    for (int64_t i = 0; i < nt; i++) {
        attn_gguf_tensor t;
        attn_gguf_tensor_get(g, i, &t);
        if (t.type < 0 || t.type >= 64 || done[t.type]) continue;
        done[t.type] = 1;
        int64_t k = 0;
        for (int64_t j = 0; j < nt; j++) {
            attn_gguf_tensor u;
            attn_gguf_tensor_get(g, j, &u);
            k += u.type == t.type;
        }
        printf("%s %s x %lld", i ? "," : "", t.type_name, (long long)k);
    }
    printf(" (GGUF tensors)");
    attn_gguf_close(g);
}

int cli_llama_info(const char *dir) {
    const char *cmd = "model";
    attn_llama *m;
    attn_status st = attn_llama_load(dir, &m);
    if (st) return cli_fail(cmd, st, "load");
    const attn_llama_config *c = attn_llama_get_config(m);
    const attn_rope *r = &c->rope;
    printf("model %s\n", cli_esc(dir));
    printf("  %s decoder-only: %lld layers, hidden %lld, %lld heads of %lld "
           "(%lld key/value heads%s), SwiGLU feed-forward %lld, pre-norm "
           "RMSNorm eps %g\n",
           c->model_type, (long long)c->num_layers, (long long)c->hidden_size,
           (long long)c->num_heads, (long long)(c->hidden_size / c->num_heads),
           (long long)c->num_kv_heads,
           c->num_kv_heads == 1             ? ": multi-query"
           : c->num_kv_heads < c->num_heads ? ": grouped-query"
                                            : "",
           (long long)c->intermediate_size, c->rms_norm_eps);
    printf("  rotary positions: neox halves, theta %g, scaling %s", r->theta,
           r->scaling == ATTN_ROPE_SCALING_LINEAR   ? "linear"
           : r->scaling == ATTN_ROPE_SCALING_LLAMA3 ? "llama3"
                                                    : "none");
    if (r->scaling == ATTN_ROPE_SCALING_LINEAR)
        printf(" (factor %g)", r->factor);
    if (r->scaling == ATTN_ROPE_SCALING_LLAMA3)
        printf(" (factor %g, low %g, high %g, original %g positions)",
               r->factor, r->low_freq_factor, r->high_freq_factor,
               r->original_max_position);
    printf("; %lld positions\n", (long long)c->max_position);
    if (c->sliding_window)
        printf("  sliding window: %lld keys\n", (long long)c->sliding_window);
    printf("  q/k/v biases: %s; output head: %s\n",
           c->attention_bias ? "yes" : "no",
           c->tie_word_embeddings ? "tied to the embeddings" : "its own");
    const attn_bpe *tok = attn_llama_tokenizer(m);
    const int gguf = is_gguf(dir);
    printf("  vocabulary %lld; tokenizer: %s; bos %lld, eos %lld\n",
           (long long)c->vocab_size,
           !tok   ? "none (ids only)"
           : gguf ? "byte-level BPE (GGUF metadata)"
                  : "byte-level BPE (tokenizer.json)",
           (long long)c->bos_token_id, (long long)c->eos_token_id);
    if (attn_llama_chat_template(m))
        printf("  chat template: %zu bytes\n",
               strlen(attn_llama_chat_template(m)));
    if (gguf)
        print_gguf_types(dir);
    else
        printf("  weights stored as %s", attn_dtype_name(c->stored_dtype));
    printf(" (run in f32); parameters: %lld\n",
           (long long)attn_llama_param_count(m));
    attn_llama_free(m);
    return 0;
}
