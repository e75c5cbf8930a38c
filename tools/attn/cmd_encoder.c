/* attn encoder: a stack of Transformer encoder layers on .npy files. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
"usage: attn encoder --x X.npy --out O.npy\n"
"                    (--params P.bin | --init-seed N [layer options]) [options]\n"
"\n"
"Post-norm layer (the default): x = LN1(x + SA(x)); x = LN2(x + FFN(x)).\n"
"Pre-norm (--norm-first): x = x + SA(LN1(x)); x = x + FFN(LN2(x)).\n"
"FFN(x) = W_2 act(W_1 x + b_1) + b_2. SA is multi-head dot-product\n"
"attention, or additive attention followed by W_o (--attention additive).\n"
"x is (L, E) or (B, L, E).\n"
"  --out O.npy          (.., L, E) f32\n"
"  --weights W.npy      every layer's weights (N, B, Hw, L, L) f32 (Hw = H\n"
"                       for dot, 1 for additive; B dropped for rank 2)\n"
"  --positions          add the sinusoidal positional encoding to x first\n"
"layer options (with --init-seed; a parameter file carries its own):\n"
"  --layers N (1)  --heads H (8)  --kv-heads G  --ff F (2048)\n"
"  --attention dot|additive (dot)  --additive-dim A (E / 2)\n"
"  --activation relu|gelu (relu)  --norm-first  --final-norm  --eps X (1e-5)\n");
    cli_param_help(stdout);
    printf("\nmasks are over (B, Hw, L, L); --dropout applies to every dropout\n"
           "site of the layers\n");
    cli_sdpa_args_help(stdout);
    printf(
"\nexample:\n"
"  attn encoder --x x.npy --out y.npy --init-seed 1 --layers 2 --heads 4 \\\n"
"               --ff 128 --key-lengths lens.npy --save-params enc.bin\n");
}

int cmd_encoder(int argc, char **argv) {
    const char *cmd = "encoder";
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
    cli_sdpa_args a;
    cli_seq x;
    memset(&x, 0, sizeof x);
    float *prm = NULL, *ws = NULL, *out = NULL, *w = NULL;
    int loaded = 0;
    cli_sdpa_args_init(&a);
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &a);
    if (rc) goto done;
    const char *xp = NULL, *op = NULL, *wp = NULL;
    cli_param_src src = {0};
    attn_encoder_config c;
    attn_encoder_config_init(&c);
    int positions = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--positions") == 0) { positions = 1; continue; }
        if (strcmp(argv[i], "--norm-first") == 0) { c.norm_first = 1; continue; }
        if (strcmp(argv[i], "--final-norm") == 0) { c.final_norm = 1; continue; }
        if (i + 1 >= argc) {
            rc = cli_usage_error(cmd, "unknown argument or missing value: '%s'", argv[i]);
            goto done;
        }
        const char *o = argv[i], *val = argv[i + 1];
        int used, bad = 0;
        if (cli_param_opt(o, val, &src, &used)) bad = 1;
        else if (used) {}
        else if (strcmp(o, "--x") == 0) xp = val;
        else if (strcmp(o, "--out") == 0) op = val;
        else if (strcmp(o, "--weights") == 0) wp = val;
        else if (strcmp(o, "--layers") == 0) bad = cli_parse_i64(val, &c.num_layers);
        else if (strcmp(o, "--heads") == 0) bad = cli_parse_i64(val, &c.num_heads);
        else if (strcmp(o, "--kv-heads") == 0) bad = cli_parse_i64(val, &c.num_kv_heads);
        else if (strcmp(o, "--ff") == 0) bad = cli_parse_i64(val, &c.dim_feedforward);
        else if (strcmp(o, "--additive-dim") == 0) bad = cli_parse_i64(val, &c.additive_dim);
        else if (strcmp(o, "--eps") == 0) bad = cli_parse_double(val, &c.layer_norm_eps);
        else if (strcmp(o, "--attention") == 0) {
            if (strcmp(val, "dot") == 0) c.attention = ATTN_ATTENTION_DOT;
            else if (strcmp(val, "additive") == 0) c.attention = ATTN_ATTENTION_ADDITIVE;
            else bad = 1;
        } else if (strcmp(o, "--activation") == 0) {
            if (strcmp(val, "relu") == 0) c.activation = ATTN_ACT_RELU;
            else if (strcmp(val, "gelu") == 0) c.activation = ATTN_ACT_GELU;
            else bad = 1;
        } else {
            rc = cli_usage_error(cmd, "unknown argument '%s'", o);
            goto done;
        }
        if (bad) {
            rc = cli_usage_error(cmd, "bad value '%s' for %s", val, o);
            goto done;
        }
        i++;
    }
    if (!xp || !op) {
        rc = cli_usage_error(cmd, "--x and --out are required");
        goto done;
    }
    if ((rc = cli_param_check(cmd, &src))) goto done;
    if ((rc = cli_load_seq(cmd, xp, "x", &x))) goto done;
    attn_status st;
    if (src.load) {
        if ((st = attn_encoder_load(src.load, &c, &prm))) {
            rc = cli_fail(cmd, st, "loading parameters");
            goto done;
        }
        loaded = 1;
        if (c.d_model != x.D) {
            rc = cli_usage_error(cmd, "%s is for d_model %lld but x has %lld "
                                 "features", src.load, (long long)c.d_model,
                                 (long long)x.D);
            goto done;
        }
    } else {
        c.d_model = x.D;
        int64_t n = attn_encoder_param_count(&c);
        if (!n) {
            st = attn_encoder_workspace_size(&c, 1, 1, &(size_t){0});
            rc = cli_fail(cmd, st ? st : ATTN_E_NOMEM, "configuration");
            goto done;
        }
        prm = malloc(sizeof(float) * (size_t)n);
        if (!prm || (st = attn_encoder_init(&c, prm, src.seed))) {
            rc = cli_fail(cmd, prm ? st : ATTN_E_NOMEM, "initialization");
            goto done;
        }
    }
    if (src.save && (st = attn_encoder_save(src.save, &c, prm))) {
        rc = cli_fail(cmd, st, "saving parameters");
        goto done;
    }
    const int64_t B = x.B, L = x.L, E = c.d_model, Hw = attn_encoder_weight_heads(&c);
    if ((rc = cli_sdpa_args_bind(cmd, &a, B, Hw, L, L))) goto done;
    if (positions && (st = attn_add_positional_encoding(B, L, E, x.x))) {
        rc = cli_fail(cmd, st, "positions");
        goto done;
    }
    size_t wsn;
    if ((st = attn_encoder_workspace_size(&c, B, L, &wsn))) {
        rc = cli_fail(cmd, st, "workspace");
        goto done;
    }
    ws = malloc(sizeof(float) * wsn);
    out = malloc(sizeof(float) * (size_t)(B * L * E));
    if (wp) w = malloc(sizeof(float) * (size_t)(c.num_layers * B * Hw * L * L));
    if (!ws || !out || (wp && !w)) {
        rc = cli_fail(cmd, ATTN_E_NOMEM, "allocation");
        goto done;
    }
    if ((st = attn_encoder_forward(&c, prm, B, L, x.x, &a.opts, out, w, ws))) {
        rc = cli_fail(cmd, st, "encoder");
        goto done;
    }
    if ((rc = cli_save_seq(cmd, op, out, x.t.rank, 0, NULL, B, L, E))) goto done;
    if (wp) {
        int64_t lead[2] = {c.num_layers, 0};
        if (x.t.rank == 3) {
            int64_t sh[5] = {c.num_layers, B, Hw, L, L};
            rc = cli_save_array(cmd, wp, ATTN_F32, w, 5, sh);
        } else {
            int64_t sh[4] = {lead[0], Hw, L, L};
            rc = cli_save_array(cmd, wp, ATTN_F32, w, 4, sh);
        }
    }
done:
    if (loaded) attn_params_free(prm);
    else free(prm);
    free(ws);
    free(out);
    free(w);
    cli_seq_free(&x);
    cli_sdpa_args_free(&a);
    return rc;
}
