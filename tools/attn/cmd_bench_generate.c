/* attn bench-generate: tokens per second of generation with the key/value
 * cache against recomputing the whole prefix at every step, for the date
 * model and for a decoder-only model (d_model 256, 4 layers) generating
 * 256 tokens. Ratios are measured in the same run, so a busy machine
 * slows both sides alike. */
#include "cli.h"
#include "cpu.h"
#include "attn_transformer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds of the best of reps generate calls; *tokens the tokens made. */
static int timed(const char *cmd, const attn_transformer_config *m,
                 const float *p, int64_t B, int64_t Ls, const int32_t *src,
                 const int64_t *len, attn_generate_opts *o, int reps,
                 double *secs, int64_t *tokens) {
    const int64_t cap = m->max_tgt;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(B * cap));
    int64_t *n = malloc(sizeof(int64_t) * (size_t)B);
    if (!out || !n) {
        free(out);
        free(n);
        return cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    }
    *secs = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        attn_status st =
            attn_generate(m, p, B, Ls, src, len, o, out, cap, n, NULL);
        const double dt = now_s() - t0;
        if (st) {
            free(out);
            free(n);
            return cli_fail(cmd, st, "generate");
        }
        *secs = dt < *secs ? dt : *secs;
    }
    *tokens = 0;
    for (int64_t b = 0; b < B; b++) *tokens += n[b];
    free(out);
    free(n);
    return 0;
}

/* Tokens per second of the naive loop: the whole model's teacher-forced
 * forward (encoder included) over source and prefix at every step. */
static int naive(const char *cmd, const attn_transformer_config *m,
                 const float *p, int64_t B, int64_t Ls, const int32_t *src,
                 const int64_t *len, int64_t steps, double *tps) {
    size_t wsn;
    attn_status st = attn_transformer_workspace_size(m, B, Ls, steps, &wsn);
    if (st) return cli_fail(cmd, st, "workspace");
    float *ws = malloc(sizeof(float) * wsn);
    float *lg = malloc(sizeof(float) * (size_t)(B * steps * m->vocab_tgt));
    int32_t *tin = malloc(sizeof(int32_t) * (size_t)(B * steps));
    int32_t *tmp = malloc(sizeof(int32_t) * (size_t)(B * steps));
    int rc = 0;
    if (!ws || !lg || !tin || !tmp) rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    attn_layer_opts o = cli_threads_opts(1);
    const double t0 = now_s();
    for (int64_t b = 0; !rc && b < B; b++) tin[b * steps] = ATTN_GEN_BOS;
    for (int64_t t = 1; !rc && t <= steps; t++) {
        for (int64_t b = 0; b < B; b++)
            memcpy(tmp + b * t, tin + b * steps, sizeof(int32_t) * (size_t)t);
        if ((st = attn_transformer_forward(m, p, B, Ls, src, len, t, tmp, &o,
                                           lg, NULL, ws))) {
            rc = cli_fail(cmd, st, "forward");
            break;
        }
        for (int64_t b = 0; t < steps && b < B; b++) {
            const float *z = lg + (b * t + t - 1) * m->vocab_tgt;
            int64_t arg = 0;
            for (int64_t v = 1; v < m->vocab_tgt; v++)
                arg = z[v] > z[arg] ? v : arg;
            tin[b * steps + t] = (int32_t)arg;
        }
    }
    *tps = (double)(B * steps) / (now_s() - t0);
    free(ws);
    free(lg);
    free(tin);
    free(tmp);
    return rc;
}

static int row(const char *cmd, const char *name,
               const attn_transformer_config *m, const float *p, int64_t B,
               int64_t Ls, const int32_t *src, const int64_t *len,
               attn_generate_opts *o, int reps) {
    double tc, tr;
    int64_t nc, nr;
    o->recompute = 0;
    int rc = timed(cmd, m, p, B, Ls, src, len, o, reps, &tc, &nc);
    if (rc) return rc;
    o->recompute = 1;
    if ((rc = timed(cmd, m, p, B, Ls, src, len, o, reps > 1 ? 2 : 1, &tr, &nr)))
        return rc;
    double tn = 0;
    if (m->kind == ATTN_MODEL_ENCDEC &&
        (rc = naive(cmd, m, p, B, Ls, src, len, nc / B, &tn)))
        return rc;
    char nv[64] = "= recompute";
    if (tn > 0)
        snprintf(nv, sizeof nv, "%.0f (%.1fx)", tn, ((double)nc / tc) / tn);
    printf("| %s | %lld x %lld | %.0f | %.0f | %.1fx | %s |\n", name,
           (long long)B, (long long)(nc / B), (double)nc / tc, (double)nr / tr,
           ((double)nc / tc) / ((double)nr / tr), nv);
    fflush(stdout);
    return nc == nr ? 0
                    : (fprintf(stderr,
                               "attn %s: cache and recompute made "
                               "%lld and %lld tokens\n",
                               cmd, (long long)nc, (long long)nr),
                       1);
}

int cmd_bench_generate(const char *cmd, int argc, char **argv) {
    const char *model = NULL;
    int quick = 0;
    int64_t threads = 1, tokens = 256;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            printf(
                "usage: attn bench-generate [DATE_MODEL.bin] [--tokens N] "
                "[--quick] [--threads T]\n\n"
                "Tokens per second of greedy generation with the key/value "
                "cache and\nwhen recomputing the whole prefix at each step, "
                "and their ratio\n(recompute: the decoder over the prefix, the encoder's "
                "memory kept;\nwhole model: the model's forward over source "
                "and prefix each step):\n"
                "  date:    the date model (a trained checkpoint, or a fresh "
                "one of\n           the default shape), 64 dates of 10 "
                "characters\n"
                "  decoder: a decoder-only model, d_model 256, 4 layers, 4 "
                "heads,\n           F 1024, one sequence of N tokens "
                "(default 256)\n"
                "--quick: 8 dates and 64 tokens (a smoke run).\n");
            return 0;
        }
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) {
            if (cli_parse_i64(argv[++i], &threads) || threads < 0 ||
                threads > 1024)
                return cli_usage_error(cmd, "--threads takes 0..1024");
        } else if (i + 1 < argc && strcmp(argv[i], "--tokens") == 0) {
            if (cli_parse_i64(argv[++i], &tokens) || tokens < 1 ||
                tokens > 4096)
                return cli_usage_error(cmd, "--tokens takes 1..4096");
        } else if (argv[i][0] != '-' && !model)
            model = argv[i];
        else
            return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
    }
    if (quick) tokens = tokens < 64 ? tokens : 64;
    cli_train_threads(threads);
    attn_generate_opts o;
    attn_generate_opts_init(&o);
    o.threads = (int)threads;
    printf("kernels %s\n\n", attn__isa_describe());
    printf("| model | sequences x tokens | cache tokens/s | recompute "
           "tokens/s | cache / recompute | whole model each step tokens/s "
           "(cache / it) |\n|---|---|---|---|---|---|\n");
    /* the date model */
    attn_gen_train_config c;
    attn_gen_train_config_init(&c, ATTN_GEN_DATE, ATTN_MODEL_ENCDEC);
    attn_gen_train_config_check(&c);
    attn_gen_trainer *tr = NULL;
    attn_status st = model ? attn_gen_trainer_load(model, &tr)
                           : attn_gen_trainer_create(&c, &tr);
    if (st) return cli_fail(cmd, st, "date model");
    const attn_gen_train_config *dc = attn_gen_trainer_config(tr);
    const int64_t B = quick ? 8 : 64;
    int64_t Ls, Lt;
    attn_gen_batch_dims(&dc->task, dc->model.kind, &Ls, &Lt);
    int32_t *src = malloc(sizeof(int32_t) * (size_t)(B * (Ls + 2 * Lt)));
    int64_t *len = malloc(sizeof(int64_t) * (size_t)B);
    int rc = 0;
    if (!src || !len) rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    attn_rng rng;
    attn_rng_seed(&rng, 77);
    if (!rc &&
        (st = attn_gen_batch(&dc->task, dc->model.kind, &rng, B, src, len,
                             src + B * Ls, src + B * (Ls + Lt), NULL, 0)))
        rc = cli_fail(cmd, st, "batch");
    /* a fresh model would stop anywhere: let every sequence run 10 tokens */
    o.max_len = 10;
    if (!model) o.eos_id = ATTN_GEN_PAD;
    if (!rc)
        rc = row(cmd, model ? "date (trained)" : "date (fresh weights)",
                 &dc->model, attn_gen_trainer_params(tr), B, Ls, src, len, &o,
                 quick ? 1 : 3);
    attn_gen_trainer_free(tr);
    free(src);
    free(len);
    if (rc) return rc;
    /* a decoder-only model of d_model 256, 4 layers */
    attn_transformer_config m;
    attn_transformer_config_init(&m, ATTN_MODEL_DECODER);
    m.dec.num_layers = 4;
    m.dec.d_model = 256;
    m.dec.num_heads = 4;
    m.dec.dim_feedforward = 1024;
    m.vocab_tgt = 64;
    m.max_tgt = tokens + 1;
    const int64_t np = attn_transformer_param_count(&m);
    float *p = malloc(sizeof(float) * (size_t)(np > 0 ? np : 1));
    if (!p) return cli_fail(cmd, ATTN_E_NOMEM, "parameters");
    if ((st = attn_transformer_init(&m, p, 5))) {
        free(p);
        return cli_fail(cmd, st, "decoder model");
    }
    p[np - m.vocab_tgt] = -30.0f; /* head.b of id 0, the EOS here: never */
    int32_t bos = ATTN_GEN_BOS;
    int64_t one = 1;
    attn_generate_opts_init(&o);
    o.threads = (int)threads;
    o.eos_id = 0;
    o.max_len = tokens;
    char name[64];
    snprintf(name, sizeof name, "decoder-only d256 x 4 layers");
    rc = row(cmd, name, &m, p, 1, 1, &bos, &one, &o, quick ? 1 : 2);
    free(p);
    return rc;
}
