/* attn sdpa: scaled dot-product attention on .npy files. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf(
"usage: attn sdpa --q Q.npy --k K.npy --v V.npy --out O.npy\n"
"                 [--weights W.npy] [--lse LSE.npy] [--compute-dtype T]\n"
"                 [attention options]\n"
"\n"
"O = softmax(scale * Q K^T + bias, masked) V.\n"
"\n"
"Rank conventions (each file independently):\n"
"  rank 2  (L, D)        one sequence: B = H = 1\n"
"  rank 3  (B, L, D)     a batch, one head\n"
"  rank 4  (B, H, L, D)  batch and heads; K and V may have fewer heads\n"
"                        (Hkv) than Q when H %% Hkv == 0 (grouped queries)\n"
"Q is (.., Lq, Dk), K (.., Lk, Dk), V (.., Lk, Dv). Outputs follow Q's rank:\n"
"  --out      O         (.., Lq, Dv)  f32\n"
"  --weights  W         (.., Lq, Lk)  f32, the weights after dropout\n"
"  --lse      LSE       (.., Lq)      f32, log-sum-exp of each scaled,\n"
"                                     biased, masked score row (-inf when\n"
"                                     a row sees no key)\n"
"Inputs are <f4, <f2 or <f8 (read as f32). <f2 inputs are used as f16.\n"
"  --compute-dtype f32|f16|bf16|f64\n"
"                       convert Q, K, V to this dtype before the call (the\n"
"                       f16 and bf16 kernels from f32 files); f64 needs\n"
"                       --impl ref and writes f64 outputs\n"
"\n");
    cli_sdpa_args_help(stdout);
    printf(
"\n"
"example:\n"
"  attn sdpa --q q.npy --k k.npy --v v.npy --out o.npy --causal top-left \\\n"
"            --key-lengths lens.npy --weights w.npy\n");
}

static int parse_dtype(const char *v, attn_dtype *dt) {
    static const struct {
        const char *name;
        attn_dtype dt;
    } t[] = {{"f32", ATTN_F32}, {"f16", ATTN_F16}, {"bf16", ATTN_BF16},
             {"f64", ATTN_F64}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(v, t[i].name) == 0) {
            *dt = t[i].dt;
            return 0;
        }
    return 1;
}

int cmd_sdpa(int argc, char **argv) {
    const char *cmd = "sdpa";
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            help();
            return 0;
        }
    cli_sdpa_args a;
    cli_tensor q, k, v;
    attn_tensor out = {0}, weights = {0};
    float *lse = NULL;
    memset(&q, 0, sizeof q);
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    cli_sdpa_args_init(&a);
    int rc = cli_sdpa_args_parse(cmd, &argc, argv, &a);
    if (rc) goto done;

    const char *qp = NULL, *kp = NULL, *vp = NULL, *op = NULL, *wp = NULL,
               *lp = NULL, *cd = NULL;
    for (int i = 1; i < argc; i += 2) {
        const char **slot = NULL;
        if (strcmp(argv[i], "--q") == 0) slot = &qp;
        else if (strcmp(argv[i], "--k") == 0) slot = &kp;
        else if (strcmp(argv[i], "--v") == 0) slot = &vp;
        else if (strcmp(argv[i], "--out") == 0) slot = &op;
        else if (strcmp(argv[i], "--weights") == 0) slot = &wp;
        else if (strcmp(argv[i], "--lse") == 0) slot = &lp;
        else if (strcmp(argv[i], "--compute-dtype") == 0) slot = &cd;
        if (!slot) {
            rc = cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
            goto done;
        }
        if (i + 1 >= argc) {
            rc = cli_usage_error(cmd, "%s needs a value", argv[i]);
            goto done;
        }
        *slot = argv[i + 1];
    }
    if (!qp || !kp || !vp || !op) {
        rc = cli_usage_error(cmd, "--q, --k, --v and --out are required");
        goto done;
    }
    attn_dtype compute = ATTN_F32;
    if (cd && parse_dtype(cd, &compute)) {
        rc = cli_usage_error(cmd, "--compute-dtype takes f32, f16, bf16 or "
                             "f64, not '%s'", cd);
        goto done;
    }
    if ((rc = cli_load_tensor(cmd, qp, "q", &q)) ||
        (rc = cli_load_tensor(cmd, kp, "k", &k)) ||
        (rc = cli_load_tensor(cmd, vp, "v", &v)))
        goto done;
    /* without --compute-dtype, f64 files are read as f32 (any kernel) */
    cli_tensor *in[3] = {&q, &k, &v};
    for (int i = 0; i < 3; i++) {
        attn_dtype to = cd ? compute
                           : (in[i]->t.dtype == ATTN_F64 ? ATTN_F32
                                                         : in[i]->t.dtype);
        if ((rc = cli_tensor_convert(cmd, in[i], to))) goto done;
    }

    const int64_t B = q.t.shape[0], H = q.t.shape[1], Lq = q.t.shape[2];
    const int64_t Lk = k.t.shape[2], Dv = v.t.shape[3];
    if ((rc = cli_sdpa_args_bind(cmd, &a, B, H, Lq, Lk))) goto done;
    attn_dtype odt = compute == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    if ((rc = cli_alloc_tensor(cmd, "out", odt, B, H, Lq, Dv, &out)) ||
        (wp && (rc = cli_alloc_tensor(cmd, "weights", odt, B, H, Lq, Lk,
                                      &weights))))
        goto done;
    if (lp) {
        attn_tensor l;
        if ((rc = cli_alloc_tensor(cmd, "lse", ATTN_F32, B, H, Lq, 1, &l)))
            goto done;
        lse = l.data;
    }
    attn_status st = attn_sdpa_forward(&q.t, &k.t, &v.t, &a.opts, &out,
                                       wp ? &weights : NULL, lse);
    if (st) {
        rc = cli_fail(cmd, st, "attention");
        goto done;
    }
    if ((rc = cli_save_like(cmd, op, odt, out.data, 4, out.shape, q.rank)))
        goto done;
    if (wp && (rc = cli_save_like(cmd, wp, odt, weights.data, 4,
                                  weights.shape, q.rank)))
        goto done;
    if (lp) {
        const int64_t ls[3] = {B, H, Lq};
        rc = cli_save_like(cmd, lp, ATTN_F32, lse, 3, ls, q.rank);
    }
done:
    free(out.data);
    free(weights.data);
    free(lse);
    cli_tensor_free(&q);
    cli_tensor_free(&k);
    cli_tensor_free(&v);
    cli_sdpa_args_free(&a);
    return rc;
}
