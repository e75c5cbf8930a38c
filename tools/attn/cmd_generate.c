/* attn generate: a generation model's output for given inputs (greedy,
 * sampling or beam search, with the key/value cache); and attn eval for
 * generation models (exact match on fresh examples). */
#include "cli.h"
#include "attn_transformer.h"

#include <float.h>
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

/* The options of attn generate (inputs[] holds argc entries). */
static int parse_generate(const char *cmd, int argc, char **argv,
                          const char **model, const char **inputs, int *nin,
                          int *json, int64_t *threads, attn_generate_opts *o) {
    const cli_opt opts[] = {
        CLI_LIST("--input", inputs, nin),
        CLI_FLAG("--sample", &o->sample),
        CLI_FLAG("--json", json),
        CLI_FLAG("--no-cache", &o->recompute),
        CLI_I64("--beam", &o->beam, 1, 64),
        CLI_F64("--length-penalty", &o->length_penalty, -DBL_MAX, DBL_MAX, 0),
        CLI_F64("--temperature", &o->temperature, 0, DBL_MAX, 1),
        CLI_I64("--top-k", &o->top_k, 0, INT64_MAX),
        CLI_F64("--top-p", &o->top_p, 0, 1, 1),
        CLI_U64("--seed", &o->seed),
        CLI_I64("--max-len", &o->max_len, 1, INT64_MAX),
        CLI_I64("--threads", threads, 0, 1024)};
    int rc = cli_parse_args(cmd, argc, argv, opts, sizeof opts / sizeof opts[0],
                            model, 1);
    if (!rc && !*model) rc = cli_usage_error(cmd, "MODEL.bin is required");
    if (!rc && *nin == 0)
        rc = cli_usage_error(cmd, "give at least one --input TEXT");
    if (!rc && o->sample && o->beam > 1)
        rc = cli_usage_error(cmd, "--sample and --beam %lld do not combine",
                             (long long)o->beam);
    return rc;
}

/* The outputs, a line each or (json) one JSON object. */
static void print_outputs(const attn_gen_train_config *c, const char *model,
                          const attn_generate_opts *o, int json,
                          const char *const *inputs, int nin,
                          const int32_t *out, int64_t Lt, const int64_t *olen,
                          const double *score) {
    const attn_transformer_config *m = &c->model;
    const attn_gen_side side =
        m->kind == ATTN_MODEL_ENCDEC ? ATTN_SIDE_TARGET : ATTN_SIDE_JOINT;
    if (json) {
        printf("{\"model\": ");
        json_str(stdout, model);
        printf(", \"task\": \"%s\", \"kind\": \"%s\", \"decoding\": \"%s\", "
               "\"beam\": %lld, \"outputs\": [",
               attn_gen_task_name(c->task.kind), attn_model_kind_name(m->kind),
               o->sample     ? "sample"
               : o->beam > 1 ? "beam"
                             : "greedy",
               (long long)o->beam);
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
}

/* The inputs encoded into src (nin x Lsmax), repacked to the batch's own
 * width *Ls and padded. */
static int encode_inputs(const char *cmd, const attn_gen_train_config *c,
                         const char *const *inputs, int nin, int64_t Lsmax,
                         int32_t *src, int64_t *len, int64_t *Ls) {
    *Ls = 1;
    for (int b = 0; b < nin; b++) {
        attn_status st = attn_gen_input(&c->task, c->model.kind, inputs[b],
                                        src + b * Lsmax, Lsmax, &len[b]);
        if (st) {
            char what[64];
            snprintf(what, sizeof what, "input %d", b + 1);
            return cli_fail(cmd, st, what);
        }
        *Ls = len[b] > *Ls ? len[b] : *Ls;
    }
    for (int b = 1; b < nin; b++)
        memmove(src + b * *Ls, src + b * Lsmax, sizeof(int32_t) * (size_t)*Ls);
    for (int b = 0; b < nin; b++)
        for (int64_t i = len[b]; i < *Ls; i++) src[b * *Ls + i] = ATTN_GEN_PAD;
    return 0;
}

/* Generates the outputs of the inputs with the model of tr and prints
 * them. */
static int run_generate(const char *cmd, attn_gen_trainer *tr,
                        const char *model, const char *const *inputs, int nin,
                        int json, const attn_generate_opts *o) {
    const attn_gen_train_config *c = attn_gen_trainer_config(tr);
    const attn_transformer_config *m = &c->model;
    int64_t Lsmax, Lt, Ls;
    attn_gen_batch_dims(&c->task, m->kind, &Lsmax, &Lt);
    int32_t *src = calloc((size_t)(nin * Lsmax), sizeof(int32_t));
    int32_t *out = calloc((size_t)(nin * Lt), sizeof(int32_t));
    int64_t *len = calloc((size_t)nin, sizeof(int64_t));
    int64_t *olen = calloc((size_t)nin, sizeof(int64_t));
    double *score = calloc((size_t)nin, sizeof(double));
    attn_status st;
    int rc = 0;
    if (!src || !out || !len || !olen || !score)
        rc = cli_fail(cmd, ATTN_E_NOMEM, "buffers");
    if (!rc) rc = encode_inputs(cmd, c, inputs, nin, Lsmax, src, len, &Ls);
    if (!rc && (st = attn_generate(m, attn_gen_trainer_params(tr), nin, Ls, src,
                                   len, o, out, Lt, olen, score)))
        rc = cli_fail(cmd, st, "generation");
    if (!rc)
        print_outputs(c, model, o, json, inputs, nin, out, Lt, olen, score);
    free(src);
    free(out);
    free(len);
    free(olen);
    free(score);
    return rc;
}

int cmd_generate(const char *cmd, int argc, char **argv) {
    if (argc > 1 && cli_is_llama_dir(argv[1]))
        return cli_llama_generate(cmd, argc, argv);
    if (cli_help_asked(argc, argv, help)) return 0;
    const char *model = NULL;
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs) return cli_fail(cmd, ATTN_E_NOMEM, "inputs");
    int nin = 0, json = 0;
    attn_generate_opts o;
    attn_generate_opts_init(&o);
    o.length_penalty = 0.6;
    int64_t threads = 1;
    int rc = parse_generate(cmd, argc, argv, &model, inputs, &nin, &json,
                            &threads, &o);
    attn_gen_trainer *tr = NULL;
    if (!rc) {
        o.threads = (int)threads;
        cli_train_threads(threads);
        rc = cli_gen_load(cmd, model, &tr);
    }
    if (!rc) rc = run_generate(cmd, tr, model, inputs, nin, json, &o);
    attn_gen_trainer_free(tr);
    free(inputs);
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

int cmd_eval_gen(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, eval_help)) return 0;
    const char *model = NULL, *task = NULL;
    int64_t count = 1000, beam = 1, threads = 1;
    uint64_t seed = 12345;
    const cli_opt opts[] = {CLI_I64("--count", &count, 1, INT64_MAX),
                            CLI_U64("--seed", &seed),
                            CLI_I64("--beam", &beam, 1, 64),
                            CLI_I64("--threads", &threads, 0, 1024)};
    const char *pos[2] = {NULL, NULL};
    if (cli_parse_args(cmd, argc, argv, opts, sizeof opts / sizeof opts[0], pos,
                       2))
        return 2;
    model = pos[0];
    task = pos[1];
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
