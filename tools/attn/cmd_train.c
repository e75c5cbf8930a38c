/* attn train: trains a small Transformer on a toy task and saves it as a
 * checkpoint (which attn eval, attn attend and --resume read). */
#include "cli.h"

#include <cblas.h>
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

void cli_train_threads(int64_t threads) {
    /* OpenMP takes the count from the options, and the layers keep BLAS on
     * the calling thread for a count of 1; only a larger count must reach
     * OpenBLAS's process-wide pool. */
    if (threads > 1) openblas_set_num_threads((int)threads);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_time(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

/* Options that define a new run (refused with --resume). */
typedef struct {
    const char *name;
    int set;
} run_opt;

int cmd_train(int argc, char **argv) {
    const char *cmd = "train";
    /* date, --model encdec|decoder, or resuming a generation checkpoint */
    if (cli_train_gen_wanted(argc, argv)) return cmd_train_gen(argc, argv);
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
    const char *task_name = NULL, *save = NULL, *resume = NULL;
    const char *run_opt_seen = NULL;
    int64_t layers = -1, heads = -1, dmodel = -1, ff = -1, steps = -1;
    int64_t batch = -1, warmup = -1, vocab = -1, length = -1, min_len = -1;
    int64_t save_every = 500, eval_every = 0, eval_n = 1000, threads = 1;
    int64_t until = -1;
    double lr = -1, wd = -1, clip = -1, dropout = -1, stop_at = -1;
    uint64_t seed = 0;
    int seed_set = 0, post_norm = 0, attention = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-') {
            if (task_name)
                return cli_usage_error(cmd, "unexpected argument '%s'", a);
            task_name = a;
            continue;
        }
        if (strcmp(a, "--post-norm") == 0) {
            post_norm = 1;
            run_opt_seen = a;
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        int bad = 0, run = 1;
        if (strcmp(a, "--save") == 0) save = v, run = 0;
        else if (strcmp(a, "--resume") == 0) resume = v, run = 0;
        else if (strcmp(a, "--layers") == 0) bad = cli_parse_i64(v, &layers) || layers < 1;
        else if (strcmp(a, "--heads") == 0) bad = cli_parse_i64(v, &heads) || heads < 1;
        else if (strcmp(a, "--d-model") == 0) bad = cli_parse_i64(v, &dmodel) || dmodel < 1;
        else if (strcmp(a, "--ff") == 0) bad = cli_parse_i64(v, &ff) || ff < 1;
        else if (strcmp(a, "--steps") == 0) bad = cli_parse_i64(v, &steps) || steps < 0, run = 0;
        else if (strcmp(a, "--batch") == 0) bad = cli_parse_i64(v, &batch) || batch < 1;
        else if (strcmp(a, "--warmup") == 0) bad = cli_parse_i64(v, &warmup) || warmup < 0;
        else if (strcmp(a, "--vocab") == 0) bad = cli_parse_i64(v, &vocab) || vocab < 2;
        else if (strcmp(a, "--length") == 0) bad = cli_parse_i64(v, &length) || length < 1;
        else if (strcmp(a, "--min-len") == 0) bad = cli_parse_i64(v, &min_len) || min_len < 1;
        else if (strcmp(a, "--save-every") == 0) bad = cli_parse_i64(v, &save_every) || save_every < 0, run = 0;
        else if (strcmp(a, "--eval-every") == 0) bad = cli_parse_i64(v, &eval_every) || eval_every < 0, run = 0;
        else if (strcmp(a, "--eval") == 0) bad = cli_parse_i64(v, &eval_n) || eval_n < 0, run = 0;
        else if (strcmp(a, "--threads") == 0) bad = cli_parse_i64(v, &threads) || threads < 0 || threads > 1024, run = 0;
        else if (strcmp(a, "--lr") == 0) bad = cli_parse_double(v, &lr) || !(lr > 0) || isinf(lr);
        else if (strcmp(a, "--weight-decay") == 0) bad = cli_parse_double(v, &wd) || !(wd >= 0) || isinf(wd);
        else if (strcmp(a, "--clip") == 0) bad = cli_parse_double(v, &clip) || !(clip >= 0) || isinf(clip);
        else if (strcmp(a, "--until") == 0) bad = cli_parse_i64(v, &until) || until < 0, run = 0;
        else if (strcmp(a, "--stop-at") == 0) bad = cli_parse_double(v, &stop_at) || !(stop_at > 0 && stop_at <= 1), run = 0;
        else if (strcmp(a, "--dropout") == 0) bad = cli_parse_double(v, &dropout) || !(dropout >= 0 && dropout < 1);
        else if (strcmp(a, "--seed") == 0) bad = cli_parse_u64(v, &seed), seed_set = 1;
        else if (strcmp(a, "--attention") == 0) {
            if (strcmp(v, "dot") == 0) attention = ATTN_ATTENTION_DOT;
            else if (strcmp(v, "additive") == 0) attention = ATTN_ATTENTION_ADDITIVE;
            else bad = 1;
        } else return cli_usage_error(cmd, "unknown option '%s'", a);
        if (bad) return cli_usage_error(cmd, "bad value '%s' for %s", v, a);
        if (run) run_opt_seen = a;
    }
    if (!save) return cli_usage_error(cmd, "--save MODEL.bin is required");
    if (resume && (task_name || run_opt_seen))
        return cli_usage_error(cmd, "--resume continues the saved run with its "
                               "own task and settings; %s cannot change them",
                               task_name ? "a task" : run_opt_seen);
    if (!resume && !task_name)
        return cli_usage_error(cmd, "which task? (reverse, copy, sort, add)");

    attn_trainer *tr = NULL;
    attn_status st;
    if (resume) {
        if ((st = attn_trainer_load(resume, &tr)))
            return cli_fail(cmd, st, "resume");
        if (steps >= 0 && steps != attn_trainer_config(tr)->steps)
            attn_trainer_set_steps(tr, steps);
        attn_trainer_set_threads(tr, (int)threads);
    } else {
        attn_task_kind kind;
        if ((st = attn_task_parse(task_name, &kind)))
            return cli_usage_error(cmd, "%s", attn_last_error());
        attn_train_config c;
        attn_train_config_init(&c, kind);
        if (vocab > 0) c.task.vocab = vocab;
        if (length > 0) c.task.max_len = c.task.min_len = length;
        if (min_len > 0) c.task.min_len = min_len;
        if (layers > 0) c.model.enc.num_layers = layers;
        if (heads > 0) c.model.enc.num_heads = heads;
        if (dmodel > 0) c.model.enc.d_model = dmodel;
        if (ff > 0) c.model.enc.dim_feedforward = ff;
        if (attention >= 0) c.model.enc.attention = (attn_attention_type)attention;
        if (post_norm) c.model.enc.norm_first = 0, c.model.enc.final_norm = 0;
        if (dropout >= 0) c.dropout = dropout;
        if (batch > 0) c.batch = batch;
        if (lr > 0) {
            c.optim.min_lr *= lr / c.optim.lr;
            c.optim.lr = lr;
        }
        if (warmup >= 0) c.optim.warmup = warmup;
        if (wd >= 0) c.optim.weight_decay = wd;
        if (clip >= 0) c.optim.clip_norm = clip;
        if (steps >= 0) {
            c.steps = c.optim.decay_steps = steps;
            /* a short run keeps a fifth of its steps for warmup at most */
            if (warmup < 0 && c.optim.warmup > steps / 5)
                c.optim.warmup = steps / 5;
        }
        if (seed_set) c.seed = seed;
        c.threads = (int)threads;
        if ((st = attn_trainer_create(&c, &tr)))
            return cli_fail(cmd, st, "configuration");
    }
    cli_train_threads(threads);

    const attn_train_config *c = attn_trainer_config(tr);
    const int64_t total = c->steps;
    /* --until stops early with the schedule of the full run intact, so that
     * a later --resume continues exactly where it left off */
    const int64_t stop = until >= 0 && until < total ? until : total;
    const int tty = isatty(2);
    fprintf(stderr, "train %s: %lld layer%s, d_model %lld, %s attention, "
            "%lld parameters; %lld steps of %lld sequences, lr %g, seed %llu%s\n",
            attn_task_name(c->task.kind), (long long)c->model.enc.num_layers,
            c->model.enc.num_layers == 1 ? "" : "s",
            (long long)c->model.enc.d_model,
            c->model.enc.attention == ATTN_ATTENTION_DOT ? "dot" : "additive",
            (long long)attn_model_param_count(&c->model), (long long)total,
            (long long)c->batch, c->optim.lr, (unsigned long long)c->seed,
            resume ? " (resumed)" : "");
    if (resume)
        fprintf(stderr, "resumed at step %lld\n",
                (long long)attn_trainer_steps_done(tr));

    int rc = 0;
    const double t0 = now_s();
    double eval_s = 0; /* time spent evaluating, not training */
    double last_draw = 0, win_loss = 0, win_acc = 0, win_seq = 0;
    int64_t win_n = 0, tokens = 0, start = attn_trainer_steps_done(tr);
    const int64_t every = total >= 20 ? total / 20 : 1; /* plain lines */
    attn_train_stats s;
    memset(&s, 0, sizeof s);
    while (attn_trainer_steps_done(tr) < stop) {
        if ((st = attn_trainer_step(tr, &s))) {
            if (tty) fputc('\n', stderr);
            rc = cli_fail(cmd, st, "step");
            break;
        }
        tokens += s.tokens;
        win_loss += s.loss, win_acc += s.token_acc, win_seq += s.seq_acc;
        win_n++;
        const double el = now_s() - t0 - eval_s;
        const int64_t done = s.step - start;
        const double eta = el / (double)done * (double)(stop - s.step);
        char eta_s[32];
        fmt_time(eta, eta_s, sizeof eta_s);
        const int last = s.step == stop;
        if (tty && (el - last_draw > 0.1 || last)) {
            int w = 24, fill = (int)((double)w * (double)s.step / (double)total);
            char bar[32];
            for (int k = 0; k < w; k++) bar[k] = k < fill ? '#' : '.';
            bar[w] = '\0';
            fprintf(stderr, "\r[%s] step %lld/%lld loss %.4f acc %.4f seq %.3f "
                    "%.0f tok/s ETA %s   ", bar, (long long)s.step,
                    (long long)total, win_loss / (double)win_n,
                    win_acc / (double)win_n, win_seq / (double)win_n,
                    (double)tokens / el, eta_s);
            last_draw = el;
            win_loss = win_acc = win_seq = 0, win_n = 0;
            if (last) fputc('\n', stderr);
        } else if (!tty && (s.step % every == 0 || last)) {
            fprintf(stderr, "step %lld/%lld loss %.4f acc %.4f seq %.3f lr "
                    "%.2e %.0f tok/s elapsed %.1fs ETA %s\n",
                    (long long)s.step, (long long)total,
                    win_loss / (double)win_n, win_acc / (double)win_n,
                    win_seq / (double)win_n, s.lr, (double)tokens / el, el,
                    eta_s);
            win_loss = win_acc = win_seq = 0, win_n = 0;
        }
        if (eval_every > 0 && s.step % eval_every == 0) {
            const double e0 = now_s();
            attn_eval_result r;
            if ((st = attn_model_evaluate(&c->model, attn_trainer_params(tr),
                                          &c->task, 1000, 12345, c->threads,
                                          &r))) {
                rc = cli_fail(cmd, st, "evaluation");
                break;
            }
            eval_s += now_s() - e0;
            fprintf(stderr, "%seval step %lld: token accuracy %.4f sequence "
                    "accuracy %.4f (trained %.1fs)\n", tty ? "\n" : "",
                    (long long)s.step, r.token_acc, r.seq_acc, el);
            if (stop_at > 0 && r.token_acc >= stop_at) {
                fprintf(stderr, "reached token accuracy %.4f >= %g at step "
                        "%lld\n", r.token_acc, stop_at, (long long)s.step);
                break;
            }
        }
        if (save_every > 0 && s.step % save_every == 0 && !last &&
            (st = attn_trainer_save(tr, save))) {
            rc = cli_fail(cmd, st, "checkpoint");
            break;
        }
    }
    const double train_s = now_s() - t0 - eval_s;
    if (!rc) {
        if ((st = attn_trainer_save(tr, save))) rc = cli_fail(cmd, st, "save");
    }
    if (!rc) {
        printf("trained %lld steps in %.1f s (%.0f tokens/s); saved %s\n",
               (long long)(attn_trainer_steps_done(tr) - start), train_s,
               train_s > 0 ? (double)tokens / train_s : 0.0, save);
        if (eval_n > 0) {
            attn_eval_result r;
            if ((st = attn_model_evaluate(&c->model, attn_trainer_params(tr),
                                          &c->task, eval_n, 12345, c->threads,
                                          &r)))
                rc = cli_fail(cmd, st, "evaluation");
            else
                printf("token accuracy: %.4f\nsequence accuracy: %.4f\n",
                       r.token_acc, r.seq_acc);
        }
    }
    attn_trainer_free(tr);
    return rc;
}
