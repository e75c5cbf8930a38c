/* The option loop of the subcommands: one table of options (name, kind,
 * where the value goes, its range) read by one loop, so every command
 * answers a missing value, a bad value or an unknown option alike. */
#include "cli.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const cli_opt *find_opt(const cli_opt *opts, size_t n, const char *a) {
    for (size_t j = 0; j < n; j++)
        if (strcmp(a, opts[j].name) == 0) return &opts[j];
    return NULL;
}

int cli_pick(const cli_choice *choices, const char *v, int *out) {
    for (const cli_choice *c = choices; c->name; c++)
        if (strcmp(v, c->name) == 0) {
            *out = c->value;
            return 0;
        }
    return 1;
}

/* 1 if v is not a value of o (the number, or out of o's range). */
static int set_value(const cli_opt *o, const char *v) {
    int64_t i = 0;
    double d = 0;
    switch (o->kind) {
    case CLI_OPT_STR: *(const char **)o->slot = v; return 0;
    case CLI_OPT_LIST: ((const char **)o->slot)[(*o->count)++] = v; return 0;
    case CLI_OPT_U64: return cli_parse_u64(v, (uint64_t *)o->slot);
    case CLI_OPT_CHOICE: return cli_pick(o->choices, v, (int *)o->slot);
    case CLI_OPT_F64:
        if (cli_parse_double(v, &d) || !isfinite(d) ||
            ((o->open & CLI_OPEN_HI) ? !(d < o->hi) : d > o->hi) ||
            ((o->open & CLI_OPEN_LO) ? !(d > o->lo) : !(d >= o->lo)))
            return 1;
        *(double *)o->slot = d;
        return 0;
    default: break;
    }
    if (cli_parse_i64(v, &i) || (double)i < o->lo || (double)i > o->hi)
        return 1;
    if (o->kind == CLI_OPT_INT)
        *(int *)o->slot = (int)i;
    else
        *(int64_t *)o->slot = i;
    return 0;
}

int cli_opt_set(const cli_opt *opts, size_t n, const char *arg,
                const char *val) {
    const cli_opt *o = find_opt(opts, n, arg);
    return o ? set_value(o, val) : -1;
}

int cli_parse_args(const char *cmd, int argc, char **argv, const cli_opt *opts,
                   size_t n, const char **pos, int npos) {
    int k = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-') {
            if (k >= npos)
                return cli_usage_error(cmd, "unexpected argument '%s'",
                                       cli_esc(a));
            pos[k++] = a;
            continue;
        }
        const cli_opt *o = find_opt(opts, n, a);
        if (!o) return cli_usage_error(cmd, "unknown option '%s'", cli_esc(a));
        if (o->kind == CLI_OPT_FLAG) {
            *(int *)o->slot = 1;
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        if (set_value(o, v))
            return cli_usage_error(cmd, "bad value '%s' for %s", cli_esc(v), a);
    }
    return 0;
}

const char *cli_last_given(int argc, char **argv, const cli_opt *opts, size_t n,
                           size_t lo, size_t hi) {
    const char *last = NULL;
    for (int i = 1; i < argc; i++) {
        const cli_opt *o = find_opt(opts, n, argv[i]);
        if (!o) continue; /* a positional argument */
        if ((size_t)(o - opts) >= lo && (size_t)(o - opts) < hi) last = argv[i];
        if (o->kind != CLI_OPT_FLAG) i++; /* its value */
    }
    return last;
}

const cli_choice cli_attention_types[] = {{"dot", ATTN_ATTENTION_DOT},
                                          {"additive", ATTN_ATTENTION_ADDITIVE},
                                          {NULL, 0}};

static const cli_choice train_dtypes[] = {
    {"f32", ATTN_F32}, {"bf16", ATTN_BF16}, {NULL, 0}};

int cli_train_parse(const char *cmd, int argc, char **argv, cli_train_args *t,
                    const cli_opt *run, size_t nrun, const cli_opt *other,
                    size_t nother, const char *tasks) {
    memset(t, 0, sizeof *t);
    t->layers = t->heads = t->dmodel = t->ff = t->steps = t->batch = -1;
    t->warmup = t->length = t->min_len = t->until = -1;
    t->save_every = 500, t->eval_n = 1000, t->threads = 1;
    t->lr = t->dropout = -1;
    t->dtype = ATTN_F32;
    /* the rows that define a new run first, the seed last of them */
    const cli_opt shared_run[] = {
        CLI_FLAG("--post-norm", &t->post_norm),
        CLI_I64("--layers", &t->layers, 1, INT64_MAX),
        CLI_I64("--heads", &t->heads, 1, INT64_MAX),
        CLI_I64("--d-model", &t->dmodel, 1, INT64_MAX),
        CLI_I64("--ff", &t->ff, 1, INT64_MAX),
        CLI_I64("--batch", &t->batch, 1, INT64_MAX),
        CLI_I64("--warmup", &t->warmup, 0, INT64_MAX),
        CLI_I64("--length", &t->length, 1, INT64_MAX),
        CLI_I64("--min-len", &t->min_len, 1, INT64_MAX),
        CLI_F64("--lr", &t->lr, 0, DBL_MAX, CLI_OPEN_LO),
        CLI_F64("--dropout", &t->dropout, 0, 1, CLI_OPEN_HI),
        CLI_U64("--seed", &t->seed)};
    const cli_opt shared_other[] = {
        CLI_STR("--save", &t->save),
        CLI_STR("--resume", &t->resume),
        CLI_I64("--steps", &t->steps, 0, INT64_MAX),
        CLI_I64("--save-every", &t->save_every, 0, INT64_MAX),
        CLI_I64("--until", &t->until, 0, INT64_MAX),
        CLI_I64("--eval", &t->eval_n, 0, INT64_MAX),
        CLI_I64("--threads", &t->threads, 0, 1024),
        CLI_CHOICE("--dtype", &t->dtype, train_dtypes)};
    const size_t ns = sizeof shared_run / sizeof shared_run[0];
    const size_t no = sizeof shared_other / sizeof shared_other[0];
    cli_opt opts[48];
    const size_t n = ns + nrun + no + nother;
    if (n > sizeof opts / sizeof opts[0])
        return cli_fail(cmd, ATTN_E_INVALID, "options");
    memcpy(opts, shared_run, sizeof shared_run);
    if (nrun) memcpy(opts + ns, run, nrun * sizeof *run);
    memcpy(opts + ns + nrun, shared_other, sizeof shared_other);
    if (nother) memcpy(opts + ns + nrun + no, other, nother * sizeof *other);
    int rc = cli_parse_args(cmd, argc, argv, opts, n, &t->task, 1);
    if (rc) return rc;
    t->run_opt = cli_last_given(argc, argv, opts, n, 0, ns + nrun);
    t->seed_set = cli_last_given(argc, argv, opts, n, ns - 1, ns) != NULL;
    if (!t->save) return cli_usage_error(cmd, "--save MODEL.bin is required");
    if (t->resume && (t->task || t->run_opt))
        return cli_usage_error(cmd,
                               "--resume continues the saved run with its "
                               "own task and settings; %s cannot change them",
                               t->task ? "a task" : t->run_opt);
    if (!t->resume && !t->task)
        return cli_usage_error(cmd, "which task? (%s)", tasks);
    /* a run is lost if its output cannot be written: check it first */
    const char *name = "--save";
    return cli_check_outputs(cmd, &name, &t->save, 1);
}

void cli_train_apply(const cli_train_args *t, attn_adamw_config *optim,
                     int64_t *batch, int64_t *steps, double *dropout,
                     uint64_t *seed, int *threads, attn_dtype *dtype) {
    if (t->dropout >= 0) *dropout = t->dropout;
    if (t->batch > 0) *batch = t->batch;
    if (t->lr > 0) {
        optim->min_lr *= t->lr / optim->lr;
        optim->lr = t->lr;
    }
    if (t->warmup >= 0) optim->warmup = t->warmup;
    if (t->steps >= 0) {
        *steps = optim->decay_steps = t->steps;
        /* a short run keeps a fifth of its steps for warmup at most */
        if (t->warmup < 0 && optim->warmup > t->steps / 5)
            optim->warmup = t->steps / 5;
    }
    if (t->seed_set) *seed = t->seed;
    *threads = (int)t->threads;
    *dtype = (attn_dtype)t->dtype;
}

attn_layer_opts cli_threads_opts(int threads) {
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    o.threads = threads;
    return o;
}
