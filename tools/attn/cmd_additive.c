/* attn additive: additive (Bahdanau) attention on .npy files. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
"usage: attn additive --query Q.npy [--key K.npy] [--value V.npy] --out O.npy\n"
"                     (--params P.bin | --init-seed N --attn-dim A) [options]\n"
"\n"
"score(i, j) = scale * v . tanh(W_q q_i + b_q + W_k k_j + b_k) (+ mask),\n"
"weights = softmax over visible keys, out_i = sum_j weights_ij value_j\n"
"(or the projected keys W_k k_j + b_k with --context-keys). scale\n"
"defaults to 1. query is (Lq, Dq) or (B, Lq, Dq); key (.., Lk, Dk) and\n"
"value (.., Lk, Dv) default to the query (self-attention).\n"
"  --out O.npy          (.., Lq, Dv) f32 ((.., Lq, A) with --context-keys)\n"
"  --weights W.npy      (.., Lq, Lk) f32, after dropout\n"
"  --attn-dim A         hidden size of the score network (--init-seed)\n"
"  --no-bias            no b_q, b_k (with --init-seed)\n"
"  --context-keys       context from the projected keys (with --init-seed)\n");
    cli_param_help(stdout);
    printf("\nmasks are over (B, 1, Lq, Lk)\n");
    cli_sdpa_args_help(stdout);
    printf(
"\nexample:\n"
"  attn additive --query q.npy --key k.npy --value v.npy --out o.npy \\\n"
"                --init-seed 1 --attn-dim 64 --weights w.npy\n");
}

int cmd_additive(int argc, char **argv) {
    const char *cmd = "additive";
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
    cli_sdpa_args a;
    cli_seq q, k, v;
    memset(&q, 0, sizeof q);
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    float *prm = NULL, *ws = NULL, *out = NULL, *w = NULL;
    int loaded = 0;
    cli_sdpa_args_init(&a);
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &a);
    if (rc) goto done;
    const char *qp = NULL, *kp = NULL, *vp = NULL, *op = NULL, *wp = NULL;
    cli_param_src src = {0};
    int64_t adim = 0;
    int ctxkeys = 0, nobias = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--context-keys") == 0) { ctxkeys = 1; continue; }
        if (strcmp(argv[i], "--no-bias") == 0) { nobias = 1; continue; }
        if (i + 1 >= argc) {
            rc = cli_usage_error(cmd, "unknown argument or missing value: '%s'", argv[i]);
            goto done;
        }
        const char *val = argv[i + 1];
        int used;
        if (cli_param_opt(argv[i], val, &src, &used)) {
            rc = cli_usage_error(cmd, "%s takes a number, not '%s'", argv[i], val);
            goto done;
        }
        if (used) {}
        else if (strcmp(argv[i], "--query") == 0) qp = val;
        else if (strcmp(argv[i], "--key") == 0) kp = val;
        else if (strcmp(argv[i], "--value") == 0) vp = val;
        else if (strcmp(argv[i], "--out") == 0) op = val;
        else if (strcmp(argv[i], "--weights") == 0) wp = val;
        else if (strcmp(argv[i], "--attn-dim") == 0) {
            int64_t *dst = &adim;
            if (cli_parse_i64(val, dst) || *dst < 1) {
                rc = cli_usage_error(cmd, "%s takes a positive integer, not '%s'", argv[i], val);
                goto done;
            }
        } else {
            rc = cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
            goto done;
        }
        i++;
    }
    if (!qp || !op) {
        rc = cli_usage_error(cmd, "--query and --out are required");
        goto done;
    }
    if ((rc = cli_param_check(cmd, &src))) goto done;
    if (src.seeded && !adim) {
        rc = cli_usage_error(cmd, "--init-seed needs --attn-dim");
        goto done;
    }
    if ((rc = cli_load_seq(cmd, qp, "query", &q)) ||
        (kp && (rc = cli_load_seq(cmd, kp, "key", &k))) ||
        (vp && (rc = cli_load_seq(cmd, vp, "value", &v))))
        goto done;
    const cli_seq *K = kp ? &k : &q, *V = vp ? &v : K;
    if (K->B != q.B || V->B != q.B || K->L != V->L || K->t.rank != q.t.rank ||
        V->t.rank != q.t.rank) {
        rc = cli_usage_error(cmd, "query, key and value must share the rank and "
                             "batch, and key and value the length");
        goto done;
    }
    attn_additive_config c;
    attn_status st;
    if (src.load) {
        if ((st = attn_additive_load(src.load, &c, &prm))) {
            rc = cli_fail(cmd, st, "loading parameters");
            goto done;
        }
        loaded = 1;
        if (c.query_dim != q.D || c.key_dim != K->D ||
            (!c.context_from_keys && c.value_dim != V->D)) {
            rc = cli_usage_error(cmd, "%s is for Dq=%lld Dk=%lld Dv=%lld but "
                                 "the inputs have %lld, %lld, %lld features",
                                 src.load, (long long)c.query_dim,
                                 (long long)c.key_dim, (long long)c.value_dim,
                                 (long long)q.D, (long long)K->D,
                                 (long long)V->D);
            goto done;
        }
    } else {
        c = (attn_additive_config){q.D, K->D, ctxkeys ? 0 : V->D, adim, !nobias,
                                   ctxkeys};
        int64_t n = attn_additive_param_count(&c);
        if (!n) {
            rc = cli_fail(cmd, ATTN_E_INVALID, "configuration");
            goto done;
        }
        prm = malloc(sizeof(float) * (size_t)n);
        if (!prm || (st = attn_additive_init(&c, prm, src.seed))) {
            rc = cli_fail(cmd, prm ? st : ATTN_E_NOMEM, "initialization");
            goto done;
        }
    }
    if (src.save && (st = attn_additive_save(src.save, &c, prm))) {
        rc = cli_fail(cmd, st, "saving parameters");
        goto done;
    }
    const int64_t B = q.B, Lq = q.L, Lk = K->L, Dc = attn_additive_out_dim(&c);
    if ((rc = cli_sdpa_args_bind(cmd, &a, B, 1, Lq, Lk))) goto done;
    size_t wsn;
    if ((st = attn_additive_workspace_size(&c, B, Lq, Lk, &wsn))) {
        rc = cli_fail(cmd, st, "workspace");
        goto done;
    }
    ws = malloc(sizeof(float) * wsn);
    out = malloc(sizeof(float) * (size_t)(B * Lq * Dc));
    if (wp) w = malloc(sizeof(float) * (size_t)(B * Lq * Lk));
    if (!ws || !out || (wp && !w)) {
        rc = cli_fail(cmd, ATTN_E_NOMEM, "allocation");
        goto done;
    }
    st = attn_additive_forward(&c, prm, B, Lq, Lk, q.x, K->x,
                               c.context_from_keys ? NULL : V->x, &a.opts, out,
                               w, ws);
    if (st) {
        rc = cli_fail(cmd, st, "additive attention");
        goto done;
    }
    if ((rc = cli_save_seq(cmd, op, out, q.t.rank, 0, NULL, B, Lq, Dc)))
        goto done;
    if (wp) rc = cli_save_seq(cmd, wp, w, q.t.rank, 0, NULL, B, Lq, Lk);
done:
    if (loaded) attn_params_free(prm);
    else free(prm);
    free(ws);
    free(out);
    free(w);
    cli_seq_free(&q);
    cli_seq_free(&k);
    cli_seq_free(&v);
    cli_sdpa_args_free(&a);
    return rc;
}
