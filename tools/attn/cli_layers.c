/* Pieces shared by the layer subcommands (attn mha, additive, encoder):
 * the options they all take, loading the sequence inputs, the parameter
 * and output buffers, saving; and the OpenBLAS pool of every command
 * that takes --threads. */
#include "cli.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

static int load_seq(const char *cmd, const char *path, const char *name,
                    cli_seq *s) {
    memset(s, 0, sizeof *s);
    int rc = cli_load_tensor(cmd, path, name, &s->t);
    if (rc) return rc;
    if (s->t.rank == 4) {
        cli_tensor_free(&s->t);
        return cli_usage_error(cmd,
                               "--%s must have rank 2 (L, D) or 3 "
                               "(B, L, D); %s has rank 4",
                               name, path);
    }
    if ((rc = cli_tensor_convert(cmd, &s->t, ATTN_F32))) {
        cli_tensor_free(&s->t);
        return rc;
    }
    s->B = s->t.t.shape[0];
    s->L = s->t.t.shape[2];
    s->D = s->t.t.shape[3];
    s->x = s->t.t.data;
    return 0;
}

int cli_save_seq(const char *cmd, const char *path, float *data, int rank,
                 int nlead, const int64_t *lead, int64_t B, int64_t rows,
                 int64_t cols) {
    /* shape: [lead...] (B if rank 3) [rows] cols */
    int64_t shape[8];
    int nd = 0;
    for (int i = 0; i < nlead; i++) shape[nd++] = lead[i];
    if (rank == 3) shape[nd++] = B;
    shape[nd++] = rows;
    shape[nd++] = cols;
    return cli_save_array(cmd, path, ATTN_F32, data, nd, shape);
}

/* Exactly one of --params and --init-seed. */
static int param_check(const char *cmd, const cli_param_src *p) {
    if (!p->load == !p->seeded)
        return cli_usage_error(cmd, "give either --params FILE or "
                                    "--init-seed N");
    return 0;
}

void cli_param_help(FILE *f) {
    fprintf(
        f,
        "parameters (one of):\n"
        "  --params FILE        a parameter file (docs/params-format.md); the\n"
        "                       layer's sizes come from it\n"
        "  --init-seed N        Xavier-uniform initialization from seed N (biases\n"
        "                       0, LayerNorm gamma 1), sizes from the options\n"
        "  --save-params FILE   also write the parameters used to FILE\n");
}

void cli_layer_init(cli_layer *l, int qkv) {
    memset(l, 0, sizeof *l);
    l->qkv = qkv;
    cli_sdpa_args_init(&l->a);
}

int cli_layer_opt(cli_layer *l, const char *arg, const char *val, int *used) {
    static const char *const qkv_names[3] = {"--query", "--key", "--value"};
    *used = 1;
    for (int i = 0; i < (l->qkv ? 3 : 1); i++)
        if (strcmp(arg, l->qkv ? qkv_names[i] : "--x") == 0) {
            l->in[i] = val;
            return 0;
        }
    if (strcmp(arg, "--out") == 0)
        l->out_path = val;
    else if (strcmp(arg, "--weights") == 0)
        l->weights_path = val;
    else if (strcmp(arg, "--params") == 0)
        l->src.load = val;
    else if (strcmp(arg, "--save-params") == 0)
        l->src.save = val;
    else if (strcmp(arg, "--init-seed") == 0) {
        if (cli_parse_u64(val, &l->src.seed)) return 1;
        l->src.seeded = 1;
    } else
        *used = 0;
    return 0;
}

/* A bad value of arg: a shared option (own = 0) or the command's own. */
static int bad_value(const char *cmd, const cli_layer_own *o, int own,
                     const char *arg, const char *val) {
    if (o->msgs == CLI_MSG_BAD_VALUE)
        return cli_usage_error(cmd, "bad value '%s' for %s", val, arg);
    return cli_usage_error(cmd,
                           own ? "%s takes a positive integer, not '%s'"
                               : "%s takes a number, not '%s'",
                           arg, val);
}

int cli_layer_parse(const char *cmd, cli_layer *l, int argc, char **argv,
                    const cli_layer_own *own) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (own->flag(own->ctx, arg)) continue;
        if (i + 1 >= argc)
            return cli_usage_error(cmd,
                                   "unknown argument or missing value: "
                                   "'%s'",
                                   arg);
        const char *val = argv[i + 1];
        int used, r;
        if (cli_layer_opt(l, arg, val, &used))
            return bad_value(cmd, own, 0, arg, val);
        if (!used && (r = own->opt(own->ctx, arg, val)) != 0) {
            if (r < 0)
                return cli_usage_error(cmd, "unknown argument '%s'", arg);
            return bad_value(cmd, own, 1, arg, val);
        }
        i++;
    }
    return 0;
}

int cli_layer_check(const char *cmd, const cli_layer *l, const char *need,
                    int have) {
    if (!l->in[0] || !l->out_path)
        return cli_usage_error(cmd, "%s and --out are required",
                               l->qkv ? "--query" : "--x");
    int rc = param_check(cmd, &l->src);
    if (rc) return rc;
    const char *in_names[4 + CLI_SDPA_NFILES] = {
        l->qkv ? "--query" : "--x", "--key", "--value", "--params"};
    const char *ins[4 + CLI_SDPA_NFILES] = {l->in[0], l->in[1], l->in[2],
                                            l->src.load};
    for (int i = 0; i < CLI_SDPA_NFILES; i++)
        in_names[4 + i] = l->a.file_opt[i], ins[4 + i] = l->a.files[i];
    const char *out_names[3] = {"--out", "--weights", "--save-params"};
    const char *outs[3] = {l->out_path, l->weights_path, l->src.save};
    if ((rc = cli_distinct_outputs(cmd, in_names, ins, 4 + CLI_SDPA_NFILES,
                                   out_names, outs, 3)))
        return rc;
    if (need && l->src.seeded && !have)
        return cli_usage_error(cmd, "--init-seed needs %s", need);
    return 0;
}

int cli_layer_load(const char *cmd, cli_layer *l) {
    const char *qp = l->in[0], *kp = l->in[1], *vp = l->in[2];
    int rc;
    if ((rc = load_seq(cmd, qp, l->qkv ? "query" : "x", &l->q)) ||
        (kp && (rc = load_seq(cmd, kp, "key", &l->k))) ||
        (vp && (rc = load_seq(cmd, vp, "value", &l->v))))
        return rc;
    const cli_seq *q = &l->q, *K = kp ? &l->k : q, *V = vp ? &l->v : K;
    l->K = K;
    l->V = V;
    if (K->B != q->B || V->B != q->B || K->L != V->L ||
        K->t.rank != q->t.rank || V->t.rank != q->t.rank)
        return cli_usage_error(cmd,
                               "query, key and value must share the "
                               "rank and batch, and key and value the length");
    return 0;
}

int cli_layer_alloc_params(const char *cmd, cli_layer *l, int64_t n) {
    l->prm = malloc(sizeof(float) * (size_t)n);
    if (!l->prm) return cli_fail(cmd, ATTN_E_NOMEM, "initialization");
    return 0;
}

int cli_layer_alloc(const char *cmd, cli_layer *l, size_t wsn, int64_t nout,
                    int64_t nw) {
    l->ws = malloc(sizeof(float) * wsn);
    l->out = malloc(sizeof(float) * (size_t)nout);
    if (l->weights_path) l->w = malloc(sizeof(float) * (size_t)nw);
    if (!l->ws || !l->out || (l->weights_path && !l->w))
        return cli_fail(cmd, ATTN_E_NOMEM, "allocation");
    return 0;
}

void cli_layer_free(cli_layer *l) {
    if (l->loaded)
        attn_params_free(l->prm);
    else
        free(l->prm);
    free(l->ws);
    free(l->out);
    free(l->w);
    cli_tensor_free(&l->q.t);
    cli_tensor_free(&l->k.t);
    cli_tensor_free(&l->v.t);
    cli_sdpa_args_free(&l->a);
}

void cli_train_threads(int64_t threads) {
    /* OpenMP takes the count from the options, and the layers keep BLAS on
     * the calling thread for a count of 1; only a larger count must reach
     * OpenBLAS's process-wide pool. */
    if (threads > 1) openblas_set_num_threads((int)threads);
}
