/* attn sdpa: scaled dot-product attention on .npy files. */
#include "cli.h"
#include "cli_ring.h"

#include <stdlib.h>
#include <string.h>

void cmd_sdpa_help(void) {
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
        "  --ring contiguous|zigzag\n"
        "                       under mpirun -np P: ring attention across P processes\n"
        "                       (every rank reads the inputs; rank 0 writes the\n"
        "                       outputs). Causal, window, key/query lengths, dropout;\n"
        "                       zigzag balances causal work. Needs attn built with MPI.\n"
        "\n"
        "example:\n"
        "  attn sdpa --q q.npy --k k.npy --v v.npy --out o.npy --causal top-left \\\n"
        "            --key-lengths lens.npy --weights w.npy\n");
}

int cmd_sdpa(const char *cmd, int argc, char **argv) {
    cli_sdpa_args a;
    cli_tensor q = {0}, k = {0}, v = {0};
    attn_tensor out = {0}, weights = {0};
    float *lse = NULL;
    const char *ring;
    int rc = cli_ring_sdpa_args(cmd, &argc, argv, &a, &ring);
    if (rc) goto done;

    const char *qp = NULL, *kp = NULL, *vp = NULL, *op = NULL, *wp = NULL,
               *lp = NULL, *cd = NULL;
    const cli_path_opt opts[] = {{"--q", &qp},
                                 {"--k", &kp},
                                 {"--v", &vp},
                                 {"--out", &op},
                                 {"--weights", &wp},
                                 {"--lse", &lp},
                                 {"--compute-dtype", &cd}};
    if ((rc = cli_parse_paths(cmd, argc, argv, opts,
                              sizeof opts / sizeof opts[0])))
        goto done;
    const char *const need[] = {"--q", "--k", "--v", "--out"};
    const char *const have[] = {qp, kp, vp, op};
    if ((rc = cli_require(cmd, need, have, 4))) goto done;
    {
        const char *in_names[3 + CLI_SDPA_NFILES] = {"--q", "--k", "--v"},
                                 *ins[3 + CLI_SDPA_NFILES] = {qp, kp, vp};
        for (int i = 0; i < CLI_SDPA_NFILES; i++)
            in_names[3 + i] = a.file_opt[i], ins[3 + i] = a.files[i];
        const char *out_names[3] = {"--out", "--weights", "--lse"};
        const char *outs[3] = {op, wp, lp};
        if ((rc = cli_distinct_outputs(cmd, in_names, ins, 3 + CLI_SDPA_NFILES,
                                       out_names, outs, 3)))
            goto done;
    }
    /* out and weights in the inputs' dtype (promoted with --compute-dtype) */
    attn_dtype compute, fdt;
    {
        const char *paths[3] = {qp, kp, vp};
        cli_tensor *qkv[3] = {&q, &k, &v};
        if ((rc = cli_sdpa_inputs(cmd, cd, a.opts.impl, paths, qkv, &compute,
                                  &fdt)))
            goto done;
    }

    const int64_t B = q.t.shape[0], H = q.t.shape[1], Lq = q.t.shape[2];
    const int64_t Lk = k.t.shape[2], Dv = v.t.shape[3];
    if ((rc = cli_sdpa_args_bind(cmd, &a, B, H, Lq, Lk))) goto done;
    if (ring) {
        if (wp || compute == ATTN_F64) {
            rc = cli_usage_error(cmd, "--ring computes O and lse in f32: no "
                                      "--weights (Lq x Lk), no f64");
            goto done;
        }
        rc = cli_ring_sdpa(cmd, ring, &q, &k, &v, &a.opts, op, lp, fdt);
        goto done;
    }
    attn_dtype odt = compute == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    if ((rc = cli_alloc_tensor(cmd, "out", odt, B, H, Lq, Dv, &out)) ||
        (wp &&
         (rc = cli_alloc_tensor(cmd, "weights", odt, B, H, Lq, Lk, &weights))))
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
    if ((rc = cli_save_like_as(cmd, op, odt, out.data, 4, out.shape, q.rank,
                               fdt)))
        goto done;
    if (wp && (rc = cli_save_like_as(cmd, wp, odt, weights.data, 4,
                                     weights.shape, q.rank, fdt)))
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
