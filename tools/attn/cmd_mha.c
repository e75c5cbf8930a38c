/* attn mha: a multi-head attention layer on .npy files. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
"usage: attn mha --query Q.npy [--key K.npy] [--value V.npy] --out O.npy\n"
"                (--params P.bin | --init-seed N --heads H) [options]\n"
"\n"
"out = concat_h(softmax(scale Q_h K_h^T + mask) V_h) W_o^T + b_o with\n"
"Q = query W_q^T + b_q, K = key W_k^T + b_k, V = value W_v^T + b_v.\n"
"query is (Lq, E) or (B, Lq, E); key (.., Lk, kdim) and value (.., Lk, vdim)\n"
"default to the query (self-attention).\n"
"  --out O.npy          (.., Lq, E) f32\n"
"  --weights W.npy      per head (B, H, Lq, Lk) ((H, Lq, Lk) for rank 2)\n"
"  --average-weights    write the mean over heads instead (.., Lq, Lk)\n"
"  --heads H            heads (with --init-seed); E %% H == 0\n"
"  --kv-heads G         key/value heads (grouped queries), H %% G == 0\n"
"  --no-bias            no projection biases (with --init-seed)\n");
    cli_param_help(stdout);
    printf("\nmasks are over (B, H, Lq, Lk)\n");
    cli_sdpa_args_help(stdout);
    printf(
"\nexample:\n"
"  attn mha --query x.npy --out y.npy --init-seed 1 --heads 8 \\\n"
"           --weights w.npy --save-params mha.bin\n");
}

int cmd_mha(int argc, char **argv) {
    const char *cmd = "mha";
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
    int64_t heads = 0, kv = 0;
    int average = 0, nobias = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--average-weights") == 0) { average = 1; continue; }
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
        else if (strcmp(argv[i], "--heads") == 0 || strcmp(argv[i], "--kv-heads") == 0) {
            int64_t *dst = argv[i][2] == 'h' ? &heads : &kv;
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
    if (src.seeded && !heads) {
        rc = cli_usage_error(cmd, "--init-seed needs --heads");
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
    attn_mha_config c;
    attn_status st;
    if (src.load) {
        if ((st = attn_mha_load(src.load, &c, &prm))) {
            rc = cli_fail(cmd, st, "loading parameters");
            goto done;
        }
        loaded = 1;
        int64_t kd = c.kdim ? c.kdim : c.d_model, vd = c.vdim ? c.vdim : c.d_model;
        if (c.d_model != q.D || kd != K->D || vd != V->D) {
            rc = cli_usage_error(cmd, "%s is for E=%lld kdim=%lld vdim=%lld but "
                                 "the inputs have %lld, %lld, %lld features",
                                 src.load, (long long)c.d_model, (long long)kd,
                                 (long long)vd, (long long)q.D, (long long)K->D,
                                 (long long)V->D);
            goto done;
        }
    } else {
        c = (attn_mha_config){q.D, heads, kv, K->D == q.D ? 0 : K->D,
                              V->D == q.D ? 0 : V->D, !nobias};
        int64_t n = attn_mha_param_count(&c);
        if (!n) {
            rc = cli_fail(cmd, ATTN_E_INVALID, "configuration");
            goto done;
        }
        prm = malloc(sizeof(float) * (size_t)n);
        if (!prm || (st = attn_mha_init(&c, prm, src.seed))) {
            rc = cli_fail(cmd, prm ? st : ATTN_E_NOMEM, "initialization");
            goto done;
        }
    }
    if (src.save && (st = attn_mha_save(src.save, &c, prm))) {
        rc = cli_fail(cmd, st, "saving parameters");
        goto done;
    }
    const int64_t B = q.B, Lq = q.L, Lk = K->L, H = c.num_heads;
    if ((rc = cli_sdpa_args_bind(cmd, &a, B, H, Lq, Lk))) goto done;
    size_t wsn;
    if ((st = attn_mha_workspace_size(&c, B, Lq, Lk, &wsn))) {
        rc = cli_fail(cmd, st, "workspace");
        goto done;
    }
    ws = malloc(sizeof(float) * wsn);
    out = malloc(sizeof(float) * (size_t)(B * Lq * c.d_model));
    if (wp) w = malloc(sizeof(float) * (size_t)(B * H * Lq * Lk));
    if (!ws || !out || (wp && !w)) {
        rc = cli_fail(cmd, ATTN_E_NOMEM, "allocation");
        goto done;
    }
    st = attn_mha_forward(&c, prm, B, Lq, Lk, q.x, K->x, V->x, &a.opts, out, w,
                          average ? ATTN_WEIGHTS_AVERAGED : ATTN_WEIGHTS_PER_HEAD, ws);
    if (st) {
        rc = cli_fail(cmd, st, "multi-head attention");
        goto done;
    }
    if ((rc = cli_save_seq(cmd, op, out, q.t.rank, 0, NULL, B, Lq, c.d_model)))
        goto done;
    if (wp) {
        int64_t lead[2] = {Lq, Lk};
        if (average)
            rc = cli_save_seq(cmd, wp, w, q.t.rank, 0, NULL, B, Lq, Lk);
        else if (q.t.rank == 3) {
            int64_t sh[4] = {B, H, Lq, Lk};
            rc = cli_save_array(cmd, wp, ATTN_F32, w, 4, sh);
        } else {
            int64_t sh[3] = {H, lead[0], lead[1]};
            rc = cli_save_array(cmd, wp, ATTN_F32, w, 3, sh);
        }
    }
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
