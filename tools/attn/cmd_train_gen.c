/* attn train for generation models: `attn train date`, or any task with
 * --model encdec|decoder. Trains an encoder-decoder or a decoder-only
 * Transformer with teacher forcing and saves a checkpoint (which attn
 * generate, attn eval, attn attend and --resume read). */
#include "cli.h"
#include "binfile.h"
#include "attn_transformer.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void help(void) {
    attn_gen_train_config d, a;
    attn_gen_train_config_init(&d, ATTN_GEN_DATE, ATTN_MODEL_ENCDEC);
    attn_gen_train_config_init(&a, ATTN_GEN_ADD, ATTN_MODEL_DECODER);
    printf(
        "usage: attn train date|reverse|sort|add --model encdec|decoder --save M.bin\n"
        "                  [options]      (date: --model encdec is the default)\n"
        "       attn train --resume CKPT --save MODEL.bin [--steps N] [--threads T]\n"
        "                  [--dtype f32|bf16]\n"
        "\n"
        "Trains a Transformer that generates: an encoder-decoder (source and target\n"
        "embeddings, encoder and decoder stacks, cross-attention) or a decoder-only\n"
        "causal model, on a generation task, with teacher forcing, label smoothing\n"
        "and AdamW; saves a checkpoint (atomic, CRC32; a resumed run is bitwise the\n"
        "uninterrupted one) and prints the exact-match accuracy of greedy decoding\n"
        "on fresh examples.\n"
        "\n"
        "tasks (characters in, characters out):\n"
        "  date     'tue 3 march 2026', '03/03/26', 'march 3, 2026', '3.3.2026',\n"
        "           ... (12 formats) -> '2026-03-03'\n"
        "  reverse  '31415' -> '51413'      (--length N digits, default 1..10)\n"
        "  sort     '31415' -> '11345'\n"
        "  add      '123+456' -> '579'      (decoder-only: '123+456=' -> '579')\n"
        "\n"
        "model:\n"
        "  --model encdec|decoder                                     [encdec]\n"
        "  --layers N        encoder and decoder layers                [%lld]\n"
        "  --enc-layers N, --dec-layers N\n"
        "  --heads H                                                   [%lld]\n"
        "  --d-model D                                                 [%lld]\n"
        "  --ff F            feed-forward width                        [%lld]\n"
        "  --cross dot|additive   cross-attention                      [dot]\n"
        "  --post-norm       post-norm layers (default pre-norm + final norms)\n"
        "  --share-embeddings     one table for source and target (same vocabulary\n"
        "                    needed: reverse, sort)\n"
        "  --tie-output      the output projection is the target embedding\n"
        "  --dropout P                                                 [0]\n"
        "task:\n"
        "  --length N        most digits (reverse, sort; add: per operand)\n"
        "  --min-len N       fewest digits                             [1]\n"
        "training:\n"
        "  --steps N                          [%lld; add --model decoder: %lld]\n"
        "  --batch B                                                   [%lld]\n"
        "  --lr LR                            [%g; add --model decoder: %g]\n"
        "  --warmup N                                                  [%lld]\n"
        "  --label-smoothing S                                         [0]\n"
        "  --seed S                                                    [%llu]\n"
        "  --threads T       threads of the kernels and BLAS           [1]\n"
        "  --dtype f32|bf16  the products (linear maps, attention): bf16 is mixed\n"
        "                    precision, f32 weights and optimizer state [f32]\n"
        "  --save-every N    also checkpoint every N steps             [500]\n"
        "  --until STEP      stop at STEP (the schedule spans --steps)\n"
        "  --eval N          fresh examples for the final exact match  [1000]\n"
        "\n"
        "example:\n"
        "  attn train date --save date.bin && attn generate date.bin --input "
        "'march 3, 2026'\n",
        (long long)d.model.dec.num_layers, (long long)d.model.dec.num_heads,
        (long long)d.model.dec.d_model, (long long)d.model.dec.dim_feedforward,
        (long long)d.steps, (long long)a.steps, (long long)d.batch, d.optim.lr,
        a.optim.lr, (long long)d.optim.warmup, (unsigned long long)d.seed);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_gen_checkpoint(const char *path) {
    FILE *f;
    uint64_t size;
    /* not a regular file (a FIFO would hang fopen): the loader says why */
    if (attn__fopen_input(path, &f, &size)) return 0;
    char m[8];
    const int ok = fread(m, 1, 8, f) == 8 && memcmp(m, "ATTNGENM", 8) == 0;
    fclose(f);
    return ok;
}

int cli_train_gen_wanted(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 || strcmp(argv[i], "date") == 0)
            return 1;
        if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc)
            return cli_gen_checkpoint(argv[i + 1]);
    }
    return 0;
}

/* The settings of a new run: -1 (0 for the flags) = default. */
typedef struct {
    cli_train_args c; /* the options shared with attn train */
    int64_t enc_layers, dec_layers;
    double smoothing;
    int share, tie, cross, kind;
} gen_args;

static const cli_choice model_kinds[] = {
    {"encdec", ATTN_MODEL_ENCDEC}, {"decoder", ATTN_MODEL_DECODER}, {NULL, 0}};

static int parse(const char *cmd, int argc, char **argv, gen_args *g) {
    g->enc_layers = g->dec_layers = -1;
    g->smoothing = -1;
    g->share = g->tie = 0;
    g->cross = g->kind = -1;
    const cli_opt run[] = {
        CLI_FLAG("--share-embeddings", &g->share),
        CLI_FLAG("--tie-output", &g->tie),
        CLI_CHOICE("--model", &g->kind, model_kinds),
        CLI_CHOICE("--cross", &g->cross, cli_attention_types),
        CLI_I64("--enc-layers", &g->enc_layers, 1, INT64_MAX),
        CLI_I64("--dec-layers", &g->dec_layers, 1, INT64_MAX),
        CLI_F64("--label-smoothing", &g->smoothing, 0, 1, CLI_OPEN_HI)};
    return cli_train_parse(cmd, argc, argv, &g->c, run,
                           sizeof run / sizeof run[0], NULL, 0,
                           "date, reverse, sort, add");
}

static int configure(const char *cmd, const gen_args *g,
                     attn_gen_train_config *c) {
    attn_gen_kind task;
    if (attn_gen_task_parse(g->c.task, &task))
        return cli_usage_error(cmd, "%s", attn_last_error());
    const attn_model_kind kind =
        g->kind >= 0 ? (attn_model_kind)g->kind : ATTN_MODEL_ENCDEC;
    attn_gen_train_config_init(c, task, kind);
    attn_transformer_config *m = &c->model;
    if (g->c.length > 0) c->task.max_len = g->c.length;
    if (g->c.min_len > 0) c->task.min_len = g->c.min_len;
    if (g->c.layers > 0) m->enc.num_layers = m->dec.num_layers = g->c.layers;
    if (g->enc_layers > 0) m->enc.num_layers = g->enc_layers;
    if (g->dec_layers > 0) m->dec.num_layers = g->dec_layers;
    if (g->c.heads > 0) m->enc.num_heads = m->dec.num_heads = g->c.heads;
    if (g->c.dmodel > 0) m->enc.d_model = m->dec.d_model = g->c.dmodel;
    if (g->c.ff > 0) m->enc.dim_feedforward = m->dec.dim_feedforward = g->c.ff;
    if (g->cross >= 0) m->dec.cross_attention = (attn_attention_type)g->cross;
    if (g->c.post_norm) {
        m->enc.norm_first = m->enc.final_norm = 0;
        m->dec.norm_first = m->dec.final_norm = 0;
    }
    m->share_embeddings = g->share;
    m->tie_output = g->tie;
    if (g->smoothing >= 0) c->label_smoothing = g->smoothing;
    cli_train_apply(&g->c, &c->optim, &c->batch, &c->steps, &c->dropout,
                    &c->seed, &c->threads, &c->dtype);
    return 0;
}

int cli_gen_eval(const char *cmd, const attn_gen_trainer *tr, int64_t count,
                 uint64_t seed, const attn_generate_opts *o) {
    const attn_gen_train_config *c = attn_gen_trainer_config(tr);
    attn_gen_eval_result r;
    attn_status st = attn_gen_evaluate(&c->model, attn_gen_trainer_params(tr),
                                       &c->task, count, seed, o, &r);
    if (st) return cli_fail(cmd, st, "evaluation");
    printf("exact match: %.4f\ncharacters: %.4f\n", r.exact_match,
           r.chars_correct);
    return 0;
}

int cmd_train_gen(const char *cmd, int argc, char **argv) {
    if (cli_help_asked(argc, argv, help)) return 0;
    gen_args g;
    int rc = parse(cmd, argc, argv, &g);
    if (rc) return rc;
    attn_gen_trainer *tr = NULL;
    attn_status st;
    if (g.c.resume) {
        if ((st = attn_gen_trainer_load(g.c.resume, &tr)))
            return cli_fail(cmd, st, "resume");
        if (g.c.steps >= 0 && g.c.steps != attn_gen_trainer_config(tr)->steps)
            attn_gen_trainer_set_steps(tr, g.c.steps);
        attn_gen_trainer_set_threads(tr, (int)g.c.threads);
        attn_gen_trainer_set_dtype(tr, (attn_dtype)g.c.dtype);
    } else {
        attn_gen_train_config c;
        if ((rc = configure(cmd, &g, &c))) return rc;
        if ((st = attn_gen_trainer_create(&c, &tr)))
            return cli_fail(cmd, st, "configuration");
    }
    cli_train_threads(g.c.threads);
    const attn_gen_train_config *c = attn_gen_trainer_config(tr);
    const attn_transformer_config *m = &c->model;
    const int ed = m->kind == ATTN_MODEL_ENCDEC;
    const int64_t total = c->steps;
    const int64_t stop =
        g.c.until >= 0 && g.c.until < total ? g.c.until : total;
    fprintf(stderr,
            "train %s (%s): %lld+%lld layers, d_model %lld, %s "
            "cross-attention, %lld parameters; %lld steps of %lld, lr %g, seed "
            "%llu%s\n",
            attn_gen_task_name(c->task.kind), attn_model_kind_name(m->kind),
            ed ? (long long)m->enc.num_layers : 0LL,
            (long long)m->dec.num_layers, (long long)m->dec.d_model,
            !ed                                            ? "no"
            : m->dec.cross_attention == ATTN_ATTENTION_DOT ? "dot"
                                                           : "additive",
            (long long)attn_transformer_param_count(m), (long long)total,
            (long long)c->batch, c->optim.lr, (unsigned long long)c->seed,
            g.c.resume ? " (resumed)" : "");
    const double t0 = now_s();
    const int64_t start = attn_gen_trainer_steps_done(tr);
    const int64_t every = total >= 20 ? total / 20 : 1;
    attn_train_stats s;
    memset(&s, 0, sizeof s);
    double win_loss = 0, win_seq = 0;
    int64_t win_n = 0, tokens = 0;
    while (attn_gen_trainer_steps_done(tr) < stop) {
        if ((st = attn_gen_trainer_step(tr, &s))) {
            rc = cli_fail(cmd, st, "step");
            break;
        }
        win_loss += s.loss, win_seq += s.seq_acc, win_n++;
        tokens += s.tokens;
        if (s.step % every == 0 || s.step == stop) {
            /* target tokens a second and the time left at this pace */
            const double el = now_s() - t0;
            const double eta =
                el / (double)(s.step - start) * (double)(stop - s.step);
            fprintf(stderr,
                    "step %lld/%lld loss %.4f teacher-forced seq %.3f "
                    "lr %.2e %.0f tok/s elapsed %.1fs ETA %.0fs\n",
                    (long long)s.step, (long long)total,
                    win_loss / (double)win_n, win_seq / (double)win_n, s.lr,
                    el > 0 ? (double)tokens / el : 0.0, el, eta);
            win_loss = win_seq = 0, win_n = 0;
        }
        if (g.c.save_every > 0 && s.step % g.c.save_every == 0 &&
            s.step != stop && (st = attn_gen_trainer_save(tr, g.c.save))) {
            rc = cli_fail(cmd, st, "checkpoint");
            break;
        }
    }
    const double train_s = now_s() - t0;
    if (!rc && (st = attn_gen_trainer_save(tr, g.c.save)))
        rc = cli_fail(cmd, st, "save");
    if (!rc) {
        printf("trained %lld steps in %.1f s; saved %s\n",
               (long long)(attn_gen_trainer_steps_done(tr) - start), train_s,
               g.c.save);
        if (g.c.eval_n > 0) {
            attn_generate_opts o;
            attn_generate_opts_init(&o);
            o.threads = (int)g.c.threads;
            rc = cli_gen_eval(cmd, tr, g.c.eval_n, 12345, &o);
        }
    }
    attn_gen_trainer_free(tr);
    return rc;
}
