/* attn train: trains a small Transformer on a toy task and saves it as a
 * checkpoint (which attn eval, attn attend and --resume read). */
#include "cli.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void help(void) {
    attn_train_config d;
    attn_train_config_init(&d, ATTN_TASK_REVERSE);
    printf(
        "usage: attn train TASK --save MODEL.bin [options]\n"
        "       attn train --resume CKPT --save MODEL.bin [--steps N] [--threads T]\n"
        "                  [--dtype f32|bf16]\n"
        "\n"
        "Trains an encoder (embedding + sinusoidal positions, N layers, a linear\n"
        "head per position) on TASK with AdamW and saves a checkpoint (model,\n"
        "optimizer state, step, RNG) to MODEL.bin, atomically. The same seed gives\n"
        "bitwise the same model on any thread count; a resumed run is bitwise the\n"
        "uninterrupted one.\n"
        "\n"
        "tasks (token ids: symbols 0..V-1, PAD = V, '+' = V+1):\n"
        "  reverse  output the input reversed       (default length 16, V 10)\n"
        "  copy     output the input                (default length 16, V 10)\n"
        "  sort     output the input sorted         (default length 16, V 10)\n"
        "  add      a_0..a_{n-1} + b_0..b_{n-1} -> the digits of a + b, least\n"
        "           significant first, read at positions 0..n (default n = 3)\n"
        "\n"
        "task:\n"
        "  --vocab V          symbols (add: the base)                  [10]\n"
        "  --length N         sequence length (add: digits per number) [16 / 3]\n"
        "  --min-len N        shortest length: lengths vary in [N, --length], padded\n"
        "                     and masked                               [= length]\n"
        "model:\n"
        "  --layers N         encoder layers                           [%lld]\n"
        "  --heads H          attention heads (dot)                    [%lld]\n"
        "  --d-model D        model width                              [%lld]\n"
        "  --ff F             feed-forward width                       [%lld]\n"
        "  --attention dot|additive                                    [dot]\n"
        "  --post-norm        post-norm layers (default pre-norm + final norm)\n"
        "  --dropout P        dropout in training                      [0]\n"
        "training:\n"
        "  --steps N          optimizer steps                          [%lld; add %d]\n"
        "  --batch B          sequences per step                       [%lld]\n"
        "  --lr LR            peak learning rate (AdamW)               [%g]\n"
        "  --warmup N         linear warmup steps, then cosine decay   [%lld,\n"
        "                     at most a fifth of --steps]\n"
        "  --weight-decay W                                            [%g]\n"
        "  --clip C           global gradient-norm limit (0: none)     [%g]\n"
        "  --seed S                                                    [%llu]\n"
        "  --threads T        threads of the kernels and BLAS          [1]\n"
        "  --dtype f32|bf16   the products of the linear maps and of attention,\n"
        "                     forward and backward: bf16 is mixed precision (bf16\n"
        "                     operands, f32 sums; f32 weights, AdamW moments and\n"
        "                     loss; checkpoints stay f32). Needs AVX512_BF16, else\n"
        "                     f32 with a note                          [f32]\n"
        "  --resume CKPT      continue the run saved in CKPT (its task and model)\n"
        "  --save-every N     also checkpoint every N steps            [500]\n"
        "  --until STEP       stop at STEP (the schedule still spans --steps): a\n"
        "                     later --resume gives bitwise the uninterrupted run\n"
        "  --eval-every N     accuracy on 1000 fresh sequences every N steps [0]\n"
        "  --eval N           fresh sequences evaluated at the end (0: none) [1000]\n"
        "  --stop-at ACC      with --eval-every: stop once the token accuracy on\n"
        "                     fresh data reaches ACC (e.g. 0.99)\n"
        "\n"
        "Progress (step, loss, accuracy, tokens/s, ETA) is a bar on a terminal and\n"
        "plain lines otherwise. NaN/Inf in the loss or the gradients stops training\n"
        "with an error (exit 1); the last checkpoint stays as it was.\n"
        "\n"
        "Generation models (encoder-decoder, decoder-only; the date task):\n"
        "  attn train date --help\n"
        "\n"
        "example:\n"
        "  attn train reverse --save reverse.bin && attn eval reverse.bin reverse\n",
        (long long)d.model.enc.num_layers, (long long)d.model.enc.num_heads,
        (long long)d.model.enc.d_model, (long long)d.model.enc.dim_feedforward,
        (long long)d.steps, 2000, (long long)d.batch, d.optim.lr,
        (long long)d.optim.warmup, d.optim.weight_decay, d.optim.clip_norm,
        (unsigned long long)d.seed);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_time(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e7)
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

/* Everything the command line sets; -1 = default. */
typedef struct {
    cli_train_args c; /* the options attn train shares with generation */
    int64_t vocab, eval_every;
    double wd, clip, stop_at;
    int attention;
} train_args;

/* Parses argv into *t; returns -1 to go on, else the exit status. */
static int parse_args(const char *cmd, int argc, char **argv, train_args *t) {
    t->vocab = -1, t->eval_every = 0;
    t->wd = t->clip = t->stop_at = -1;
    t->attention = -1;
    const cli_opt run[] = {
        CLI_I64("--vocab", &t->vocab, 2, INT64_MAX),
        CLI_F64("--weight-decay", &t->wd, 0, DBL_MAX, 0),
        CLI_F64("--clip", &t->clip, 0, DBL_MAX, 0),
        CLI_CHOICE("--attention", &t->attention, cli_attention_types)};
    const cli_opt other[] = {
        CLI_I64("--eval-every", &t->eval_every, 0, INT64_MAX),
        CLI_F64("--stop-at", &t->stop_at, 0, 1, CLI_OPEN_LO)};
    int rc = cli_train_parse(cmd, argc, argv, &t->c, run, 4, other, 2,
                             "reverse, copy, sort, add");
    return rc ? rc : -1;
}

/* The task's defaults with the command line's settings on top. */
static void apply_args(const train_args *t, attn_train_config *c) {
    if (t->vocab > 0) c->task.vocab = t->vocab;
    if (t->c.length > 0) c->task.max_len = c->task.min_len = t->c.length;
    if (t->c.min_len > 0) c->task.min_len = t->c.min_len;
    if (t->c.layers > 0) c->model.enc.num_layers = t->c.layers;
    if (t->c.heads > 0) c->model.enc.num_heads = t->c.heads;
    if (t->c.dmodel > 0) c->model.enc.d_model = t->c.dmodel;
    if (t->c.ff > 0) c->model.enc.dim_feedforward = t->c.ff;
    if (t->attention >= 0)
        c->model.enc.attention = (attn_attention_type)t->attention;
    if (t->c.post_norm)
        c->model.enc.norm_first = 0, c->model.enc.final_norm = 0;
    if (t->wd >= 0) c->optim.weight_decay = t->wd;
    if (t->clip >= 0) c->optim.clip_norm = t->clip;
    cli_train_apply(&t->c, &c->optim, &c->batch, &c->steps, &c->dropout,
                    &c->seed, &c->threads, &c->dtype);
}

/* The trainer of a resumed run or of a new one into *out; returns the
 * exit status of a failure, or -1. */
static int open_trainer(const char *cmd, const train_args *t,
                        attn_trainer **out) {
    attn_trainer *tr = NULL;
    attn_status st;
    if (t->c.resume) {
        if ((st = attn_trainer_load(t->c.resume, &tr)))
            return cli_fail(cmd, st, "resume");
        if (t->c.steps >= 0 && t->c.steps != attn_trainer_config(tr)->steps)
            attn_trainer_set_steps(tr, t->c.steps);
        attn_trainer_set_threads(tr, (int)t->c.threads);
        attn_trainer_set_dtype(tr, (attn_dtype)t->c.dtype);
        *out = tr;
        return -1;
    }
    attn_task_kind kind;
    if ((st = attn_task_parse(t->c.task, &kind)))
        return cli_usage_error(cmd, "%s", attn_last_error());
    attn_train_config c;
    attn_train_config_init(&c, kind);
    apply_args(t, &c);
    if ((st = attn_trainer_create(&c, &tr)))
        return cli_fail(cmd, st, "configuration");
    *out = tr;
    return -1;
}

static void print_run(const attn_trainer *tr, int resumed) {
    const attn_train_config *c = attn_trainer_config(tr);
    fprintf(
        stderr,
        "train %s: %lld layer%s, d_model %lld, %s attention, "
        "%lld parameters; %lld steps of %lld sequences, lr %g, seed %llu%s\n",
        attn_task_name(c->task.kind), (long long)c->model.enc.num_layers,
        c->model.enc.num_layers == 1 ? "" : "s",
        (long long)c->model.enc.d_model,
        c->model.enc.attention == ATTN_ATTENTION_DOT ? "dot" : "additive",
        (long long)attn_model_param_count(&c->model), (long long)c->steps,
        (long long)c->batch, c->optim.lr, (unsigned long long)c->seed,
        resumed ? " (resumed)" : "");
    if (c->dtype == ATTN_BF16)
        fprintf(stderr,
                attn_trainer_dtype(tr) == ATTN_BF16
                    ? "mixed precision: bf16 products (AVX512_BF16), f32 "
                      "weights and optimizer state\n"
                    : "note: this CPU has no AVX512_BF16 (or ATTN_ISA caps "
                      "it): the products run in f32\n");
    if (resumed)
        fprintf(stderr, "resumed at step %lld\n",
                (long long)attn_trainer_steps_done(tr));
}

/* Progress of the loop: a bar redrawn on a terminal, else plain lines
 * (about 20 of them), each the mean over the steps since the last one. */
typedef struct {
    int tty;
    int64_t total, stop, start, every, tokens, win_n;
    double t0, eval_s, last_draw, win_loss, win_acc, win_seq;
} progress;

static void progress_step(progress *p, const attn_train_stats *s) {
    p->tokens += s->tokens;
    p->win_loss += s->loss, p->win_acc += s->token_acc,
        p->win_seq += s->seq_acc;
    p->win_n++;
    const double el = now_s() - p->t0 - p->eval_s;
    const int64_t done = s->step - p->start;
    const double eta = el / (double)done * (double)(p->stop - s->step);
    char eta_s[32];
    fmt_time(eta, eta_s, sizeof eta_s);
    const int last = s->step == p->stop;
    const double n = (double)p->win_n;
    if (p->tty && (el - p->last_draw > 0.1 || last)) {
        int w = 24,
            fill = (int)((double)w * (double)s->step / (double)p->total);
        char bar[32];
        for (int k = 0; k < w; k++) bar[k] = k < fill ? '#' : '.';
        bar[w] = '\0';
        fprintf(stderr,
                "\r[%s] step %lld/%lld loss %.4f acc %.4f seq %.3f "
                "%.0f tok/s ETA %s   ",
                bar, (long long)s->step, (long long)p->total, p->win_loss / n,
                p->win_acc / n, p->win_seq / n, (double)p->tokens / el, eta_s);
        p->last_draw = el;
        p->win_loss = p->win_acc = p->win_seq = 0, p->win_n = 0;
        if (last) fputc('\n', stderr);
    } else if (!p->tty && (s->step % p->every == 0 || last)) {
        fprintf(stderr,
                "step %lld/%lld loss %.4f acc %.4f seq %.3f lr "
                "%.2e %.0f tok/s elapsed %.1fs ETA %s\n",
                (long long)s->step, (long long)p->total, p->win_loss / n,
                p->win_acc / n, p->win_seq / n, s->lr, (double)p->tokens / el,
                el, eta_s);
        p->win_loss = p->win_acc = p->win_seq = 0, p->win_n = 0;
    }
}

/* The evaluation of --eval-every after step s; sets *stop when
 * --stop-at is reached. Returns the exit status (0: go on). */
static int eval_step(const char *cmd, const train_args *t, progress *p,
                     const attn_trainer *tr, const attn_train_stats *s,
                     int *stop) {
    const attn_train_config *c = attn_trainer_config(tr);
    const double el = now_s() - p->t0 - p->eval_s;
    const double e0 = now_s();
    attn_eval_result r;
    attn_status st = attn_model_evaluate(&c->model, attn_trainer_params(tr),
                                         &c->task, 1000, 12345, c->threads, &r);
    if (st) return cli_fail(cmd, st, "evaluation");
    p->eval_s += now_s() - e0;
    fprintf(stderr,
            "%seval step %lld: token accuracy %.4f sequence "
            "accuracy %.4f (trained %.1fs)\n",
            p->tty ? "\n" : "", (long long)s->step, r.token_acc, r.seq_acc, el);
    if (t->stop_at > 0 && r.token_acc >= t->stop_at) {
        fprintf(stderr,
                "reached token accuracy %.4f >= %g at step "
                "%lld\n",
                r.token_acc, t->stop_at, (long long)s->step);
        *stop = 1;
    }
    return 0;
}

/* The steps up to --until (or the end), with progress, evaluations and
 * checkpoints. Returns the exit status. */
static int train_loop(const char *cmd, const train_args *t, attn_trainer *tr,
                      progress *p) {
    attn_train_stats s;
    memset(&s, 0, sizeof s);
    while (attn_trainer_steps_done(tr) < p->stop) {
        attn_status st = attn_trainer_step(tr, &s);
        if (st) {
            if (p->tty) fputc('\n', stderr);
            return cli_fail(cmd, st, "step");
        }
        progress_step(p, &s);
        if (t->eval_every > 0 && s.step % t->eval_every == 0) {
            int stop = 0, rc = eval_step(cmd, t, p, tr, &s, &stop);
            if (rc) return rc;
            if (stop) break;
        }
        if (t->c.save_every > 0 && s.step % t->c.save_every == 0 &&
            s.step != p->stop && (st = attn_trainer_save(tr, t->c.save)))
            return cli_fail(cmd, st, "checkpoint");
    }
    return 0;
}

/* Saves the model and reports the run and the final evaluation. */
static int finish(const char *cmd, const train_args *t, attn_trainer *tr,
                  const progress *p) {
    const attn_train_config *c = attn_trainer_config(tr);
    const double train_s = now_s() - p->t0 - p->eval_s;
    attn_status st = attn_trainer_save(tr, t->c.save);
    if (st) return cli_fail(cmd, st, "save");
    printf("trained %lld steps in %.1f s (%.0f tokens/s); saved %s\n",
           (long long)(attn_trainer_steps_done(tr) - p->start), train_s,
           train_s > 0 ? (double)p->tokens / train_s : 0.0, t->c.save);
    if (t->c.eval_n > 0) {
        attn_eval_result r;
        if ((st = attn_model_evaluate(&c->model, attn_trainer_params(tr),
                                      &c->task, t->c.eval_n, 12345, c->threads,
                                      &r)))
            return cli_fail(cmd, st, "evaluation");
        printf("token accuracy: %.4f\nsequence accuracy: %.4f\n", r.token_acc,
               r.seq_acc);
    }
    return 0;
}

int cmd_train(const char *cmd, int argc, char **argv) {
    /* date, --model encdec|decoder, or resuming a generation checkpoint */
    if (cli_train_gen_wanted(argc, argv)) return cmd_train_gen(cmd, argc, argv);
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
    train_args t;
    int rc = parse_args(cmd, argc, argv, &t);
    if (rc >= 0) return rc;
    attn_trainer *tr = NULL;
    if ((rc = open_trainer(cmd, &t, &tr)) >= 0) return rc;
    cli_train_threads(t.c.threads);
    print_run(tr, t.c.resume != NULL);

    progress p;
    memset(&p, 0, sizeof p);
    p.tty = isatty(2);
    p.total = attn_trainer_config(tr)->steps;
    /* --until stops early with the schedule of the full run intact, so that
     * a later --resume continues exactly where it left off */
    p.stop = t.c.until >= 0 && t.c.until < p.total ? t.c.until : p.total;
    p.start = attn_trainer_steps_done(tr);
    p.every = p.total >= 20 ? p.total / 20 : 1; /* plain lines */
    p.t0 = now_s();
    rc = train_loop(cmd, &t, tr, &p);
    if (!rc) rc = finish(cmd, &t, tr, &p);
    attn_trainer_free(tr);
    return rc;
}
