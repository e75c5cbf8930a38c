/* attn eval: accuracy of a trained model on fresh sequences of a task. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
        "usage: attn eval MODEL.bin TASK [--count N] [--seed S] [--min-len N]\n"
        "                 [--threads T]\n"
        "\n"
        "Runs the model saved by attn train on N fresh sequences of TASK (drawn\n"
        "from a stream separate from training's) and prints\n"
        "  token accuracy: 0.9962       targets predicted right\n"
        "  sequence accuracy: 0.9410    sequences with every target right (for add:\n"
        "                               the whole sum)\n"
        "For reverse it also prints, for every layer and head, the mean attention\n"
        "weight that query i puts on its mirrored key n-1-i.\n"
        "\n"
        "  --count N      sequences                                  [1000]\n"
        "  --seed S       seed of the fresh data                      [12345]\n"
        "  --min-len N    evaluate lengths N..the trained length (the task's own\n"
        "                 range by default)\n"
        "  --threads T    threads of the kernels and BLAS             [1]\n");
}

/* Mean weight on the mirrored key, per (layer, head), over count fresh
 * reversal sequences. */
static int mirror_report(const char *cmd, const attn_train_config *c,
                         const float *params, const attn_task *task,
                         int64_t count, uint64_t seed, int threads) {
    const attn_model_config *m = &c->model;
    const int64_t N = m->enc.num_layers,
                  Hw = attn_encoder_weight_heads(&m->enc);
    const int64_t L = attn_task_seq_len(task), B = count < 200 ? count : 200;
    size_t ws;
    attn_status st = attn_model_workspace_size(m, B, L, &ws);
    if (st) return cli_fail(cmd, st, "workspace");
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(2 * B * L));
    int64_t *len = malloc(sizeof(int64_t) * (size_t)B);
    float *logits = malloc(sizeof(float) * (size_t)(B * L * m->vocab_out));
    float *w = malloc(sizeof(float) * (size_t)(N * B * Hw * L * L));
    float *work = malloc(sizeof(float) * ws);
    double *sum = calloc((size_t)(N * Hw), sizeof(double));
    int rc = 0;
    if (!tok || !len || !logits || !w || !work || !sum) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        rc = 1;
        goto done;
    }
    attn_rng rng;
    attn_rng_seed(&rng, seed ^ 0x6D6972726F72ull); /* "mirror" */
    attn_layer_opts o = cli_threads_opts(threads);
    int64_t rows = 0;
    for (int64_t done = 0; done < count; done += B) {
        const int64_t b_n = count - done < B ? count - done : B;
        if ((st = attn_task_batch(task, &rng, b_n, tok, tok + B * L, len)) ||
            (st = attn_model_forward(m, params, b_n, L, tok, len, &o, logits, w,
                                     work))) {
            rc = cli_fail(cmd, st, "mirror attention");
            goto done;
        }
        for (int64_t l = 0; l < N; l++)
            for (int64_t b = 0; b < b_n; b++)
                for (int64_t h = 0; h < Hw; h++) {
                    const float *wm = w + (((l * b_n + b) * Hw + h) * L) * L;
                    for (int64_t i = 0; i < len[b]; i++)
                        sum[l * Hw + h] += wm[i * L + (len[b] - 1 - i)];
                }
        for (int64_t b = 0; b < b_n; b++) rows += len[b];
    }
    double best = 0;
    for (int64_t l = 0; l < N; l++)
        for (int64_t h = 0; h < Hw; h++) {
            double v = sum[l * Hw + h] / (double)rows;
            if (v > best) best = v;
            printf("mirror attention, layer %lld head %lld: %.4f\n",
                   (long long)l, (long long)h, v);
        }
    printf("mirror attention, best head: %.4f\n", best);
done:
    free(tok);
    free(len);
    free(logits);
    free(w);
    free(work);
    free(sum);
    return rc;
}

int cmd_eval(const char *cmd, int argc, char **argv) {
    if (argc > 1 && argv[1][0] != '-' && cli_gen_checkpoint(argv[1]))
        return cmd_eval_gen(cmd, argc, argv);
    if (cli_help_asked(argc, argv, help)) return 0;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    int64_t count = 1000, threads = 1, min_len = -1;
    uint64_t seed = 12345;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-') {
            if (npos == 2)
                return cli_usage_error(cmd, "unexpected argument '%s'", a);
            pos[npos++] = a;
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        int bad;
        if (strcmp(a, "--count") == 0)
            bad = cli_parse_i64(v, &count) || count < 1;
        else if (strcmp(a, "--seed") == 0)
            bad = cli_parse_u64(v, &seed);
        else if (strcmp(a, "--min-len") == 0)
            bad = cli_parse_i64(v, &min_len) || min_len < 1;
        else if (strcmp(a, "--threads") == 0)
            bad = cli_parse_i64(v, &threads) || threads < 0 || threads > 1024;
        else
            return cli_usage_error(cmd, "unknown option '%s'", a);
        if (bad) return cli_usage_error(cmd, "bad value '%s' for %s", v, a);
    }
    if (npos < 2) return cli_usage_error(cmd, "need MODEL.bin and TASK");
    attn_task_kind kind;
    attn_status st = attn_task_parse(pos[1], &kind);
    if (st) return cli_usage_error(cmd, "%s", attn_last_error());
    attn_trainer *tr;
    if ((st = attn_trainer_load(pos[0], &tr))) return cli_fail(cmd, st, "load");
    cli_train_threads(threads);
    const attn_train_config *c = attn_trainer_config(tr);
    attn_task task = c->task; /* the trained vocabulary and lengths */
    task.kind = kind;
    if (kind != c->task.kind &&
        (kind == ATTN_TASK_ADD || c->task.kind == ATTN_TASK_ADD)) {
        /* add reads two numbers and a '+': another input format */
        const char *trained = attn_task_name(c->task.kind); /* static text */
        attn_trainer_free(tr);
        return cli_usage_error(cmd,
                               "the model was trained on %s, and %s has "
                               "another input format (%s); evaluate it on %s, "
                               "or train one with attn train %s",
                               trained, pos[1],
                               kind == ATTN_TASK_ADD
                                   ? "two numbers and a '+'"
                                   : "one sequence of symbols",
                               trained, pos[1]);
    }
    if (kind != c->task.kind)
        fprintf(stderr, "note: the model was trained on %s\n",
                attn_task_name(c->task.kind));
    if (min_len > 0) {
        if (min_len > task.max_len)
            return attn_trainer_free(tr),
                   cli_usage_error(cmd,
                                   "--min-len %lld "
                                   "exceeds the trained length %lld",
                                   (long long)min_len, (long long)task.max_len);
        task.min_len = min_len;
    }
    attn_eval_result r;
    int rc = 0;
    if ((st = attn_model_evaluate(&c->model, attn_trainer_params(tr), &task,
                                  count, seed, (int)threads, &r))) {
        rc = cli_fail(cmd, st, "evaluation");
    } else {
        printf("%s on %lld fresh sequences (%lld target tokens)\n",
               attn_task_name(kind), (long long)r.sequences,
               (long long)r.tokens);
        printf("token accuracy: %.4f\nsequence accuracy: %.4f\nloss: %.4f\n",
               r.token_acc, r.seq_acc, r.loss);
        if (kind == ATTN_TASK_REVERSE)
            rc = mirror_report(cmd, c, attn_trainer_params(tr), &task, count,
                               seed, (int)threads);
    }
    attn_trainer_free(tr);
    return rc;
}
