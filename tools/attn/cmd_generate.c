/* attn generate: a generation model's output for given inputs (greedy,
 * sampling or beam search, with the key/value cache); and attn eval for
 * generation models (exact match on fresh examples). */
#include "cli.h"
#include "attn_transformer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
        "usage: attn generate MODEL.bin --input TEXT [--input TEXT ...] [options]\n"
        "\n"
        "Generates the output of a model trained by `attn train date` (or a task\n"
        "with --model encdec|decoder) for each input, and prints each generated\n"
        "sequence on its own line. Inputs of different lengths run as one batch.\n"
        "\n"
        "  --input TEXT        a source ('march 3, 2026'; decoder-only add:\n"
        "                      '123+456=' or '123+456'), repeatable\n"
        "  --beam N            beam search of width N               [1: greedy]\n"
        "  --length-penalty A  beam score = log p / ((5 + n) / 6)^A  [0.6]\n"
        "  --sample            sample instead of taking the most likely token\n"
        "  --temperature T                                          [1]\n"
        "  --top-k K           sample among the K most likely ids   [0: all]\n"
        "  --top-p P           ... among the fewest ids of mass P   [1: all]\n"
        "  --seed S            sampling seed (each input its own stream) [0]\n"
        "  --max-len N         most generated characters            [the model's]\n"
        "  --no-cache          recompute the whole prefix at every step (slower;\n"
        "                      the same tokens)\n"
        "  --threads T                                              [1]\n"
        "  --json              one JSON object: inputs, outputs, scores\n"
        "\n"
        "Errors (exit 1): a character outside the task's vocabulary, an input\n"
        "longer than the model takes, a checkpoint that is not a generation model.\n"
        "\n"
        "example:\n"
        "  attn generate date.bin --input 'tue 3 march 2026' --input 03/03/26\n");
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The trainer (and thus config and params) of a generation checkpoint. */
int cli_gen_load(const char *cmd, const char *path, attn_gen_trainer **tr) {
    attn_status st = attn_gen_trainer_load(path, tr);
    if (st) return cli_fail(cmd, st, "model");
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *cmd = "generate";
    if (argc > 1 && cli_is_llama_dir(argv[1]))
        return cli_llama_generate(argc, argv);
    if (cli_help_asked(argc, argv, help)) return 0;
    const char *model = NULL;
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs) return cli_fail(cmd, ATTN_E_NOMEM, "inputs");
    int nin = 0, json = 0, rc = 0;
    attn_generate_opts o;
    attn_generate_opts_init(&o);
    o.length_penalty = 0.6;
    int64_t threads = 1;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-') {
            if (model) rc = cli_usage_error(cmd, "unexpected argument '%s'", a);
            model = a;
            continue;
        }
        if (strcmp(a, "--sample") == 0) {
            o.sample = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (strcmp(a, "--no-cache") == 0) {
            o.recompute = 1;
            continue;
        }
        if (i + 1 >= argc) {
            rc = cli_usage_error(cmd, "%s needs a value", a);
            break;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (strcmp(a, "--input") == 0)
            inputs[nin++] = v;
        else if (strcmp(a, "--beam") == 0)
            bad = cli_parse_i64(v, &o.beam) || o.beam < 1 || o.beam > 64;
        else if (strcmp(a, "--length-penalty") == 0)
            bad = cli_parse_double(v, &o.length_penalty) ||
                  !isfinite(o.length_penalty);
        else if (strcmp(a, "--temperature") == 0)
            bad = cli_parse_double(v, &o.temperature) || !(o.temperature > 0) ||
                  isinf(o.temperature);
        else if (strcmp(a, "--top-k") == 0)
            bad = cli_parse_i64(v, &o.top_k) || o.top_k < 0;
        else if (strcmp(a, "--top-p") == 0)
            bad =
                cli_parse_double(v, &o.top_p) || !(o.top_p > 0 && o.top_p <= 1);
        else if (strcmp(a, "--seed") == 0)
            bad = cli_parse_u64(v, &o.seed);
        else if (strcmp(a, "--max-len") == 0)
            bad = cli_parse_i64(v, &o.max_len) || o.max_len < 1;
        else if (strcmp(a, "--threads") == 0)
            bad = cli_parse_i64(v, &threads) || threads < 0 || threads > 1024;
        else
            rc = cli_usage_error(cmd, "unknown option '%s'", a);
        if (bad) rc = cli_usage_error(cmd, "bad value '%s' for %s", v, a);
    }
    if (!rc && !model) rc = cli_usage_error(cmd, "MODEL.bin is required");
    if (!rc && nin == 0)
        rc = cli_usage_error(cmd, "give at least one --input TEXT");
    if (!rc && o.sample && o.beam > 1)
        rc = cli_usage_error(cmd, "--sample and --beam %lld do not combine",
                             (long long)o.beam);
    if (rc) {
        free(inputs);
        return rc;
    }
    o.threads = (int)threads;
    cli_train_threads(threads);
    attn_gen_trainer *tr = NULL;
    if ((rc = cli_gen_load(cmd, model, &tr))) {
        free(inputs);
        return rc;
    }
    const attn_gen_train_config *c = attn_gen_trainer_config(tr);
    const attn_transformer_config *m = &c->model;
    int64_t Lsmax, Lt;
    attn_gen_batch_dims(&c->task, m->kind, &Lsmax, &Lt);
    int32_t *src = calloc((size_t)(nin * Lsmax), sizeof(int32_t));
    int32_t *out = calloc((size_t)(nin * Lt), sizeof(int32_t));
    int64_t *len = calloc((size_t)nin, sizeof(int64_t));
    int64_t *olen = calloc((size_t)nin, sizeof(int64_t));
    double *score = calloc((size_t)nin, sizeof(double));
    attn_status st = ATTN_OK;
    if (!src || !out || !len || !olen || !score) {
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
        goto done;
    }
    int64_t Ls = 1;
    for (int b = 0; b < nin; b++) {
        if ((st = attn_gen_input(&c->task, m->kind, inputs[b], src + b * Lsmax,
                                 Lsmax, &len[b]))) {
            char what[64];
            snprintf(what, sizeof what, "input %d", b + 1);
            rc = cli_fail(cmd, st, what);
            goto done;
        }
        Ls = len[b] > Ls ? len[b] : Ls;
    }
    /* repack to the batch's own width */
    for (int b = 1; b < nin; b++)
        memmove(src + b * Ls, src + b * Lsmax, sizeof(int32_t) * (size_t)Ls);
    for (int b = 0; b < nin; b++)
        for (int64_t i = len[b]; i < Ls; i++) src[b * Ls + i] = ATTN_GEN_PAD;
    if ((st = attn_generate(m, attn_gen_trainer_params(tr), nin, Ls, src, len,
                            &o, out, Lt, olen, score))) {
        rc = cli_fail(cmd, st, "generation");
        goto done;
    }
    const attn_gen_side side =
        m->kind == ATTN_MODEL_ENCDEC ? ATTN_SIDE_TARGET : ATTN_SIDE_JOINT;
    if (json) {
        printf("{\"model\": ");
        json_str(stdout, model);
        printf(", \"task\": \"%s\", \"kind\": \"%s\", \"decoding\": \"%s\", "
               "\"beam\": %lld, \"outputs\": [",
               attn_gen_task_name(c->task.kind), attn_model_kind_name(m->kind),
               o.sample     ? "sample"
               : o.beam > 1 ? "beam"
                            : "greedy",
               (long long)o.beam);
    }
    for (int b = 0; b < nin; b++) {
        char text[256];
        attn_gen_decode(&c->task, side, out + b * Lt, olen[b], text,
                        sizeof text);
        if (json) {
            printf("%s\n  {\"input\": ", b ? "," : "");
            json_str(stdout, inputs[b]);
            printf(", \"output\": ");
            json_str(stdout, text);
            printf(", \"tokens\": %lld, \"score\": %.6f}", (long long)olen[b],
                   score[b]);
        } else {
            printf("%s\n", text);
        }
    }
    if (json) printf("\n]}\n");
done:
    attn_gen_trainer_free(tr);
    free(inputs);
    free(src);
    free(out);
    free(len);
    free(olen);
    free(score);
    return rc;
}

/* ---- attn eval MODEL.bin for generation models ------------------------- */

static void eval_help(void) {
    printf(
        "usage: attn eval MODEL.bin [TASK] [--count N] [--seed S] [--beam N]\n"
        "                 [--threads T]       (generation models)\n"
        "\n"
        "Generates the answers to N fresh examples of the model's task (drawn from\n"
        "a stream separate from training's) and prints\n"
        "  exact match: 0.9950     outputs equal to the answer\n"
        "  characters: 0.9991      answer characters right, position by position\n"
        "\n"
        "  --count N   examples                                     [1000]\n"
        "  --seed S                                                 [12345]\n"
        "  --beam N    beam search of width N (length penalty 0.6)  [1: greedy]\n"
        "  --threads T                                              [1]\n");
}

int cmd_eval_gen(int argc, char **argv) {
    const char *cmd = "eval";
    if (cli_help_asked(argc, argv, eval_help)) return 0;
    const char *model = NULL, *task = NULL;
    int64_t count = 1000, beam = 1, threads = 1;
    uint64_t seed = 12345;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-') {
            if (!model)
                model = a;
            else if (!task)
                task = a;
            else
                return cli_usage_error(cmd, "unexpected argument '%s'", a);
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        int bad = 0;
        if (strcmp(a, "--count") == 0)
            bad = cli_parse_i64(v, &count) || count < 1;
        else if (strcmp(a, "--seed") == 0)
            bad = cli_parse_u64(v, &seed);
        else if (strcmp(a, "--beam") == 0)
            bad = cli_parse_i64(v, &beam) || beam < 1 || beam > 64;
        else if (strcmp(a, "--threads") == 0)
            bad = cli_parse_i64(v, &threads) || threads < 0 || threads > 1024;
        else
            return cli_usage_error(cmd, "unknown option '%s'", a);
        if (bad) return cli_usage_error(cmd, "bad value '%s' for %s", v, a);
    }
    if (!model) return cli_usage_error(cmd, "MODEL.bin is required");
    cli_train_threads(threads);
    attn_gen_trainer *tr;
    int rc = cli_gen_load(cmd, model, &tr);
    if (rc) return rc;
    const attn_gen_train_config *c = attn_gen_trainer_config(tr);
    if (task && strcmp(task, attn_gen_task_name(c->task.kind)) != 0) {
        fprintf(stderr, "attn eval: %s was trained on %s, not %s\n", model,
                attn_gen_task_name(c->task.kind), task);
        attn_gen_trainer_free(tr);
        return 1;
    }
    attn_generate_opts o;
    attn_generate_opts_init(&o);
    o.beam = beam;
    o.length_penalty = beam > 1 ? 0.6 : 0;
    o.threads = (int)threads;
    rc = cli_gen_eval(cmd, tr, count, seed, &o);
    attn_gen_trainer_free(tr);
    return rc;
}
