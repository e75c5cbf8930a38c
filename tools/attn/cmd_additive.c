/* attn additive: additive (Bahdanau) attention on .npy files. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cmd_additive_help(void) {
    printf(
        "usage: attn additive --query Q.npy [--key K.npy] [--value V.npy] --out O.npy\n"
        "                     (--params P.bin | --init-seed N --attn-dim A) [options]\n"
        "\n"
        "score(i, j) = scale * v . tanh(W_q q_i + b_q + W_k k_j + b_k) (+ mask),\n"
        "weights = softmax over visible keys, out_i = sum_j weights_ij value_j\n"
        "(or the projected keys W_k k_j + b_k with --context-keys).\n"
        "query is (Lq, Dq) or (B, Lq, Dq); key (.., Lk, Dk) and\n"
        "value (.., Lk, Dv) default to the query (self-attention).\n"
        "  --out O.npy          (.., Lq, Dv) f32 ((.., Lq, A) with --context-keys)\n"
        "  --weights W.npy      (.., Lq, Lk) f32, after dropout\n"
        "  --attn-dim A         hidden size of the score network (--init-seed)\n"
        "  --no-bias            no b_q, b_k (with --init-seed)\n"
        "  --context-keys       context from the projected keys (with --init-seed)\n");
    cli_param_help(stdout);
    printf(
        "\nmasks are over (B, 1, Lq, Lk)\n"
        "  --scale S            multiplier of the scores (> 0); default 1\n");
    cli_args_help(stdout, CLI_OPTS_ALL & ~CLI_OPTS_SCALE);
    printf(
        "\nexample:\n"
        "  attn additive --query q.npy --key k.npy --value v.npy --out o.npy \\\n"
        "                --init-seed 1 --attn-dim 64 --weights w.npy\n");
}

/* The options of attn additive beside the shared ones. */
typedef struct {
    int64_t adim;
    int ctxkeys, nobias;
} additive_args;

static int additive_flag(void *ctx, const char *arg) {
    additive_args *m = ctx;
    if (strcmp(arg, "--context-keys") == 0) return m->ctxkeys = 1;
    if (strcmp(arg, "--no-bias") == 0) return m->nobias = 1;
    return 0;
}

static int additive_opt(void *ctx, const char *arg, const char *val) {
    additive_args *m = ctx;
    const cli_opt opt = CLI_I64("--attn-dim", &m->adim, 1, INT64_MAX);
    return cli_opt_set(&opt, 1, arg, val);
}

int cmd_additive(const char *cmd, int argc, char **argv) {
    cli_layer l;
    cli_layer_init(&l, 1);
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &l.a);
    if (rc) goto done;
    additive_args m = {0, 0, 0};
    const cli_layer_own own = {additive_flag, additive_opt, &m, CLI_MSG_TAKES};
    if ((rc = cli_layer_parse(cmd, &l, argc, argv, &own))) goto done;
    const int64_t adim = m.adim;
    const int ctxkeys = m.ctxkeys, nobias = m.nobias;
    if ((rc = cli_layer_check(cmd, &l, "--attn-dim", adim != 0))) goto done;
    if ((rc = cli_layer_load(cmd, &l))) goto done;
    const cli_seq *q = &l.q, *K = l.K, *V = l.V;
    attn_additive_config c;
    attn_status st;
    if (l.src.load) {
        if ((st = attn_additive_load(l.src.load, &c, &l.prm))) {
            rc = cli_fail(cmd, st, "loading parameters");
            goto done;
        }
        l.loaded = 1;
        if (c.query_dim != q->D || c.key_dim != K->D ||
            (!c.context_from_keys && c.value_dim != V->D)) {
            rc = cli_usage_error(cmd,
                                 "%s is for Dq=%lld Dk=%lld Dv=%lld but "
                                 "the inputs have %lld, %lld, %lld features",
                                 l.src.load, (long long)c.query_dim,
                                 (long long)c.key_dim, (long long)c.value_dim,
                                 (long long)q->D, (long long)K->D,
                                 (long long)V->D);
            goto done;
        }
    } else {
        c = (attn_additive_config){q->D, K->D,    ctxkeys ? 0 : V->D,
                                   adim, !nobias, ctxkeys};
        int64_t n = attn_additive_param_count(&c);
        if (!n) {
            rc = cli_fail(cmd, ATTN_E_INVALID, "configuration");
            goto done;
        }
        if ((rc = cli_layer_alloc_params(cmd, &l, n))) goto done;
        if ((st = attn_additive_init(&c, l.prm, l.src.seed))) {
            rc = cli_fail(cmd, st, "initialization");
            goto done;
        }
    }
    if (l.src.save && (st = attn_additive_save(l.src.save, &c, l.prm))) {
        rc = cli_fail(cmd, st, "saving parameters");
        goto done;
    }
    const int64_t B = q->B, Lq = q->L, Lk = K->L,
                  Dc = attn_additive_out_dim(&c);
    if ((rc = cli_sdpa_args_bind(cmd, &l.a, B, 1, Lq, Lk))) goto done;
    size_t wsn;
    if ((st = attn_additive_workspace_size(&c, B, Lq, Lk, &wsn))) {
        rc = cli_fail(cmd, st, "workspace");
        goto done;
    }
    if ((rc = cli_layer_alloc(cmd, &l, wsn, B * Lq * Dc, B * Lq * Lk)))
        goto done;
    st = attn_additive_forward(&c, l.prm, B, Lq, Lk, q->x, K->x,
                               c.context_from_keys ? NULL : V->x, &l.a.opts,
                               l.out, l.w, l.ws);
    if (st) {
        rc = cli_fail(cmd, st, "additive attention");
        goto done;
    }
    const char *wp = l.weights_path;
    if ((rc = cli_save_seq(cmd, l.out_path, l.out, q->t.rank, 0, NULL, B, Lq,
                           Dc)))
        goto done;
    if (wp) rc = cli_save_seq(cmd, wp, l.w, q->t.rank, 0, NULL, B, Lq, Lk);
done:
    cli_layer_free(&l);
    return rc;
}
