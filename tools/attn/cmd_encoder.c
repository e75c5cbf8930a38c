/* attn encoder: a stack of Transformer encoder layers on .npy files. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cmd_encoder_help(void) {
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
        "                       for dot, 1 for additive; B = 1 for rank 2)\n"
        "  --positions          add the sinusoidal positional encoding to x first\n"
        "layer options (with --init-seed; a parameter file carries its own):\n"
        "  --layers N (1)  --heads H (8)  --kv-heads G  --ff F (2048)\n"
        "  --attention dot|additive (dot)  --additive-dim A (E / 2)\n"
        "  --activation relu|gelu (relu)  --norm-first  --final-norm  --eps X (1e-5)\n");
    cli_param_help(stdout);
    printf(
        "\nmasks are over (B, Hw, L, L); --dropout applies to every dropout\n"
        "site of the layers\n");
    cli_sdpa_args_help(stdout);
    printf(
        "\nexample:\n"
        "  attn encoder --x x.npy --out y.npy --init-seed 1 --layers 2 --heads 4 \\\n"
        "               --ff 128 --key-lengths lens.npy --save-params enc.bin\n");
}

/* The options of attn encoder beside the shared ones: the config. */
typedef struct {
    attn_encoder_config *c;
    int positions;
    int heads_given; /* --heads or --kv-heads: a warning with additive */
} encoder_args;

static int encoder_flag(void *ctx, const char *arg) {
    encoder_args *m = ctx;
    if (strcmp(arg, "--positions") == 0) return m->positions = 1;
    if (strcmp(arg, "--norm-first") == 0) return m->c->norm_first = 1;
    if (strcmp(arg, "--final-norm") == 0) return m->c->final_norm = 1;
    return 0;
}

static const cli_choice activations[] = {
    {"relu", ATTN_ACT_RELU}, {"gelu", ATTN_ACT_GELU}, {NULL, 0}};

static int encoder_opt(void *ctx, const char *o, const char *val) {
    encoder_args *m = ctx;
    attn_encoder_config *c = m->c;
    if (strcmp(o, "--heads") == 0 || strcmp(o, "--kv-heads") == 0)
        m->heads_given = 1;
    /* any integer: the library checks the configuration */
    const cli_opt ints[] = {
        CLI_I64("--layers", &c->num_layers, INT64_MIN, INT64_MAX),
        CLI_I64("--heads", &c->num_heads, INT64_MIN, INT64_MAX),
        CLI_I64("--kv-heads", &c->num_kv_heads, INT64_MIN, INT64_MAX),
        CLI_I64("--ff", &c->dim_feedforward, INT64_MIN, INT64_MAX),
        CLI_I64("--additive-dim", &c->additive_dim, INT64_MIN, INT64_MAX)};
    const int r = cli_opt_set(ints, sizeof ints / sizeof ints[0], o, val);
    if (r >= 0) return r;
    if (strcmp(o, "--eps") == 0)
        return cli_parse_double(val, &c->layer_norm_eps) != 0;
    int k, bad;
    if (strcmp(o, "--attention") == 0) {
        if (!(bad = cli_pick(cli_attention_types, val, &k)))
            c->attention = (attn_attention_type)k;
        return bad;
    }
    if (strcmp(o, "--activation") == 0) {
        if (!(bad = cli_pick(activations, val, &k)))
            c->activation = (attn_activation)k;
        return bad;
    }
    return -1;
}

int cmd_encoder(const char *cmd, int argc, char **argv) {
    cli_layer l;
    cli_layer_init(&l, 0);
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &l.a);
    if (rc) goto done;
    attn_encoder_config c;
    attn_encoder_config_init(&c);
    encoder_args m = {&c, 0, 0};
    const cli_layer_own own = {encoder_flag, encoder_opt, &m,
                               CLI_MSG_BAD_VALUE};
    if ((rc = cli_layer_parse(cmd, &l, argc, argv, &own))) goto done;
    const int positions = m.positions;
    if ((rc = cli_layer_check(cmd, &l, NULL, 0))) goto done;
    if (m.heads_given && c.attention == ATTN_ATTENTION_ADDITIVE)
        fprintf(stderr,
                "attn %s: warning: --heads and --kv-heads have no "
                "effect with --attention additive (one score network, one "
                "map per layer)\n",
                cmd);
    if ((rc = cli_layer_load(cmd, &l))) goto done;
    const cli_seq *x = &l.q;
    attn_status st;
    if (l.src.load) {
        if ((st = attn_encoder_load(l.src.load, &c, &l.prm))) {
            rc = cli_fail(cmd, st, "loading parameters");
            goto done;
        }
        l.loaded = 1;
        if (c.d_model != x->D) {
            rc = cli_usage_error(cmd,
                                 "%s is for d_model %lld but x has %lld "
                                 "features",
                                 l.src.load, (long long)c.d_model,
                                 (long long)x->D);
            goto done;
        }
    } else {
        c.d_model = x->D;
        int64_t n = attn_encoder_param_count(&c);
        if (!n) {
            st = attn_encoder_workspace_size(&c, 1, 1, &(size_t){0});
            rc = cli_fail(cmd, st ? st : ATTN_E_NOMEM, "configuration");
            goto done;
        }
        if ((rc = cli_layer_alloc_params(cmd, &l, n))) goto done;
        if ((st = attn_encoder_init(&c, l.prm, l.src.seed))) {
            rc = cli_fail(cmd, st, "initialization");
            goto done;
        }
    }
    if (l.src.save && (st = attn_encoder_save(l.src.save, &c, l.prm))) {
        rc = cli_fail(cmd, st, "saving parameters");
        goto done;
    }
    const int64_t B = x->B, L = x->L, E = c.d_model, N = c.num_layers;
    const int64_t Hw = attn_encoder_weight_heads(&c);
    if ((rc = cli_sdpa_args_bind(cmd, &l.a, B, Hw, L, L))) goto done;
    if (positions && (st = attn_add_positional_encoding(B, L, E, x->x))) {
        rc = cli_fail(cmd, st, "positions");
        goto done;
    }
    size_t wsn;
    if ((st = attn_encoder_workspace_size(&c, B, L, &wsn))) {
        rc = cli_fail(cmd, st, "workspace");
        goto done;
    }
    if ((rc = cli_layer_alloc(cmd, &l, wsn, B * L * E, N * B * Hw * L * L)))
        goto done;
    if ((st = attn_encoder_forward(&c, l.prm, B, L, x->x, &l.a.opts, l.out, l.w,
                                   l.ws))) {
        rc = cli_fail(cmd, st, "encoder");
        goto done;
    }
    if ((rc =
             cli_save_seq(cmd, l.out_path, l.out, x->t.rank, 0, NULL, B, L, E)))
        goto done;
    if (l.weights_path) {
        /* (N, B, Hw, L, L), B = 1 for rank-2 inputs: rank 5 names the
         * axes (layer, batch, head) for stats, heatmap and html */
        const int64_t sh[5] = {N, B, Hw, L, L};
        rc = cli_save_array(cmd, l.weights_path, ATTN_F32, l.w, 5, sh);
    }
done:
    cli_layer_free(&l);
    return rc;
}
