/* attn mha: a multi-head attention layer on .npy files. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cmd_mha_help(void) {
    printf(
        "usage: attn mha --query Q.npy [--key K.npy] [--value V.npy] --out O.npy\n"
        "                (--params P.bin | --init-seed N --heads H) [options]\n"
        "\n"
        "out = concat_h(softmax(scale Q_h K_h^T + mask) V_h) W_o^T + b_o with\n"
        "Q = query W_q^T + b_q, K = key W_k^T + b_k, V = value W_v^T + b_v.\n"
        "query is (Lq, E) or (B, Lq, E); key (.., Lk, kdim) and value (.., Lk, vdim)\n"
        "default to the query (self-attention).\n"
        "  --out O.npy          (.., Lq, E) f32\n"
        "  --weights W.npy      per head (B, H, Lq, Lk) (B = 1 for rank 2)\n"
        "  --average-weights    write the mean over heads instead (.., Lq, Lk)\n"
        "  --heads H            heads (with --init-seed); E %% H == 0\n"
        "  --kv-heads G         key/value heads (grouped queries), H %% G == 0\n"
        "  --no-bias            no projection biases (with --init-seed)\n");
    cli_param_help(stdout);
    printf("\nmasks are over (B, H, Lq, Lk)\n");
    cli_sdpa_args_help(stdout);
    printf("\nexample:\n"
           "  attn mha --query x.npy --out y.npy --init-seed 1 --heads 8 \\\n"
           "           --weights w.npy --save-params mha.bin\n");
}

/* The options of attn mha beside the shared ones. */
typedef struct {
    int64_t heads, kv;
    int average, nobias;
} mha_args;

static int mha_flag(void *ctx, const char *arg) {
    mha_args *m = ctx;
    if (strcmp(arg, "--average-weights") == 0) return m->average = 1;
    if (strcmp(arg, "--no-bias") == 0) return m->nobias = 1;
    return 0;
}

static int mha_opt(void *ctx, const char *arg, const char *val) {
    mha_args *m = ctx;
    const cli_opt opts[] = {CLI_I64("--heads", &m->heads, 1, INT64_MAX),
                            CLI_I64("--kv-heads", &m->kv, 1, INT64_MAX)};
    return cli_opt_set(opts, 2, arg, val);
}

int cmd_mha(const char *cmd, int argc, char **argv) {
    cli_layer l;
    cli_layer_init(&l, 1);
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &l.a);
    if (rc) goto done;
    mha_args m = {0, 0, 0, 0};
    const cli_layer_own own = {mha_flag, mha_opt, &m, CLI_MSG_TAKES};
    if ((rc = cli_layer_parse(cmd, &l, argc, argv, &own))) goto done;
    const int64_t heads = m.heads, kv = m.kv;
    const int average = m.average, nobias = m.nobias;
    if ((rc = cli_layer_check(cmd, &l, "--heads", heads != 0))) goto done;
    if ((rc = cli_layer_load(cmd, &l))) goto done;
    const cli_seq *q = &l.q, *K = l.K, *V = l.V;
    attn_mha_config c;
    attn_status st;
    if (l.src.load) {
        if ((st = attn_mha_load(l.src.load, &c, &l.prm))) {
            rc = cli_fail(cmd, st, "loading parameters");
            goto done;
        }
        l.loaded = 1;
        int64_t kd = c.kdim ? c.kdim : c.d_model,
                vd = c.vdim ? c.vdim : c.d_model;
        if (c.d_model != q->D || kd != K->D || vd != V->D) {
            rc = cli_usage_error(cmd,
                                 "%s is for E=%lld kdim=%lld vdim=%lld but "
                                 "the inputs have %lld, %lld, %lld features",
                                 l.src.load, (long long)c.d_model,
                                 (long long)kd, (long long)vd, (long long)q->D,
                                 (long long)K->D, (long long)V->D);
            goto done;
        }
    } else {
        c = (attn_mha_config){
            q->D,   heads, kv, K->D == q->D ? 0 : K->D, V->D == q->D ? 0 : V->D,
            !nobias};
        int64_t n = attn_mha_param_count(&c);
        if (!n) {
            rc = cli_fail(cmd, ATTN_E_INVALID, "configuration");
            goto done;
        }
        if ((rc = cli_layer_alloc_params(cmd, &l, n))) goto done;
        if ((st = attn_mha_init(&c, l.prm, l.src.seed))) {
            rc = cli_fail(cmd, st, "initialization");
            goto done;
        }
    }
    if (l.src.save && (st = attn_mha_save(l.src.save, &c, l.prm))) {
        rc = cli_fail(cmd, st, "saving parameters");
        goto done;
    }
    const int64_t B = q->B, Lq = q->L, Lk = K->L, H = c.num_heads;
    if ((rc = cli_sdpa_args_bind(cmd, &l.a, B, H, Lq, Lk))) goto done;
    size_t wsn;
    if ((st = attn_mha_workspace_size(&c, B, Lq, Lk, &wsn))) {
        rc = cli_fail(cmd, st, "workspace");
        goto done;
    }
    if ((rc = cli_layer_alloc(cmd, &l, wsn, B * Lq * c.d_model,
                              B * H * Lq * Lk)))
        goto done;
    st = attn_mha_forward(
        &c, l.prm, B, Lq, Lk, q->x, K->x, V->x, &l.a.opts, l.out, l.w,
        average ? ATTN_WEIGHTS_AVERAGED : ATTN_WEIGHTS_PER_HEAD, l.ws);
    if (st) {
        rc = cli_fail(cmd, st, "multi-head attention");
        goto done;
    }
    const char *wp = l.weights_path;
    if ((rc = cli_save_seq(cmd, l.out_path, l.out, q->t.rank, 0, NULL, B, Lq,
                           c.d_model)))
        goto done;
    if (wp && average)
        rc = cli_save_seq(cmd, wp, l.w, q->t.rank, 0, NULL, B, Lq, Lk);
    else if (wp) {
        /* per head: (B, H, Lq, Lk), B = 1 for rank-2 inputs, so that the
         * file's rank names its axes for stats, heatmap and html */
        const int64_t sh[4] = {B, H, Lq, Lk};
        rc = cli_save_array(cmd, wp, ATTN_F32, l.w, 4, sh);
    }
done:
    cli_layer_free(&l);
    return rc;
}
