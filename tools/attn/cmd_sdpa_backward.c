/* attn sdpa-backward: gradients of scaled dot-product attention on .npy
 * files. It runs the forward (for out and lse) with the same options, then
 * the backward into zeroed gradients. */
#include "cli.h"
#include "cli_ring.h"

#include <stdlib.h>
#include <string.h>

void cmd_sdpa_backward_help(void) {
    printf(
        "usage: attn sdpa-backward --q Q.npy --k K.npy --v V.npy --dout DO.npy\n"
        "                          --dq DQ.npy --dk DK.npy --dv DV.npy\n"
        "                          [--dbias DB.npy] [--dsinks DS.npy]\n"
        "                          [--compute-dtype T]\n"
        "                          [attention options]\n"
        "\n"
        "Gradients of O = softmax(scale * Q K^T + bias, masked) V given dO, the\n"
        "gradient of a loss with respect to O. The forward is run first with the\n"
        "same options (the same --seed gives the same dropout mask).\n"
        "\n"
        "Ranks as in attn sdpa: (L, D), (B, L, D) or (B, H, L, D); K and V may\n"
        "have fewer heads than Q (grouped queries: dK and dV sum over the group).\n"
        "  --dout  DO  like O   (.., Lq, Dv), read as f32 (f64 with f64 compute)\n"
        "  --dq    DQ  like Q   (.., Lq, Dk)  f32\n"
        "  --dk    DK  like K   (.., Lk, Dk)  f32\n"
        "  --dv    DV  like V   (.., Lk, Dv)  f32\n"
        "  --dbias DB  like the --bias file, summed over the axes it broadcasts\n"
        "  --dsinks DS gradient of the --sinks logits, (H,) f64\n"
        "  --compute-dtype f32|f16|bf16|f64\n"
        "              convert Q, K, V to this dtype first; f64 needs --impl ref\n"
        "              and writes f64 gradients\n"
        "\n");
    cli_sdpa_args_help(stdout);
    printf(
        "\n"
        "example:\n"
        "  attn sdpa-backward --q q.npy --k k.npy --v v.npy --dout do.npy \\\n"
        "      --dq dq.npy --dk dk.npy --dv dv.npy --causal top-left \\\n"
        "      --dropout 0.1 --seed 7\n");
}

int cmd_sdpa_backward(const char *cmd, int argc, char **argv) {
    cli_sdpa_args a;
    cli_tensor q = {0}, k = {0}, v = {0}, dout = {0};
    attn_tensor out = {0}, dq = {0}, dk = {0}, dv = {0}, db = {0};
    float *lse = NULL;
    double *dsinks = NULL;
    const char *ring;
    int rc = cli_ring_sdpa_args(cmd, &argc, argv, &a, &ring);
    if (rc) goto done;

    const char *qp = NULL, *kp = NULL, *vp = NULL, *dop = NULL, *dqp = NULL,
               *dkp = NULL, *dvp = NULL, *dbp = NULL, *cd = NULL, *dsp = NULL;
    const cli_path_opt opts[] = {
        {"--q", &qp},      {"--k", &kp},      {"--v", &vp},
        {"--dout", &dop},  {"--dq", &dqp},    {"--dk", &dkp},
        {"--dv", &dvp},    {"--dbias", &dbp}, {"--compute-dtype", &cd},
        {"--dsinks", &dsp}};
    if ((rc = cli_parse_paths(cmd, argc, argv, opts,
                              sizeof opts / sizeof opts[0])))
        goto done;
    const char *const need[] = {"--q",  "--k",  "--v", "--dout",
                                "--dq", "--dk", "--dv"};
    const char *const have[] = {qp, kp, vp, dop, dqp, dkp, dvp};
    if ((rc = cli_require(cmd, need, have, 7))) goto done;
    {
        const char *in_names[4 + CLI_SDPA_NFILES] = {"--q", "--k", "--v",
                                                     "--dout"};
        const char *ins[4 + CLI_SDPA_NFILES] = {qp, kp, vp, dop};
        for (int i = 0; i < CLI_SDPA_NFILES; i++)
            in_names[4 + i] = a.file_opt[i], ins[4 + i] = a.files[i];
        const char *out_names[5] = {"--dq", "--dk", "--dv", "--dbias",
                                    "--dsinks"};
        const char *outs[5] = {dqp, dkp, dvp, dbp, dsp};
        if ((rc = cli_distinct_outputs(cmd, in_names, ins, 4 + CLI_SDPA_NFILES,
                                       out_names, outs, 5)))
            goto done;
    }
    if (dbp && !a.opts.mask.bias) {
        rc = cli_usage_error(cmd, "--dbias needs --bias");
        goto done;
    }
    if (dsp && !a.sinks.data) {
        rc = cli_usage_error(cmd, "--dsinks needs --sinks");
        goto done;
    }
    /* gradients in the inputs' dtype (promoted with --compute-dtype) */
    attn_dtype compute, fdt;
    {
        const char *paths[3] = {qp, kp, vp};
        cli_tensor *qkv[3] = {&q, &k, &v};
        if ((rc = cli_sdpa_inputs(cmd, cd, a.opts.impl, paths, qkv, &compute,
                                  &fdt)) ||
            (rc = cli_load_tensor(cmd, dop, "dout", &dout)))
            goto done;
    }
    /* out, dout and the gradients: f64 for f64 compute, else f32 */
    const attn_dtype gdt = compute == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    if ((rc = cli_tensor_convert(cmd, &dout, gdt))) goto done;

    const int64_t B = q.t.shape[0], H = q.t.shape[1], Lq = q.t.shape[2];
    const int64_t Dk = q.t.shape[3], Hkv = k.t.shape[1], Lk = k.t.shape[2];
    const int64_t Dv = v.t.shape[3];
    if ((rc = cli_sdpa_args_bind(cmd, &a, B, H, Lq, Lk))) goto done;
    if (ring) {
        if (dbp || gdt == ATTN_F64) {
            rc = cli_usage_error(cmd, "--ring computes in f32 without a bias: "
                                      "no --dbias, no f64");
            goto done;
        }
        rc = cli_ring_backward(cmd, ring, fdt, &q, &k, &v, &dout, &a.opts, dqp,
                               dkp, dvp, dsp);
        goto done;
    }
    if ((rc = cli_alloc_tensor(cmd, "out", gdt, B, H, Lq, Dv, &out)) ||
        (rc = cli_alloc_tensor(cmd, "dq", gdt, B, H, Lq, Dk, &dq)) ||
        (rc = cli_alloc_tensor(cmd, "dk", gdt, B, Hkv, Lk, Dk, &dk)) ||
        (rc = cli_alloc_tensor(cmd, "dv", gdt, B, Hkv, Lk, Dv, &dv)))
        goto done;
    if (dbp) {
        const attn_tensor *bt = a.opts.mask.bias;
        if ((rc =
                 cli_alloc_tensor(cmd, "dbias", gdt, bt->shape[0], bt->shape[1],
                                  bt->shape[2], bt->shape[3], &db)))
            goto done;
    }
    attn_tensor l;
    if ((rc = cli_alloc_tensor(cmd, "lse", ATTN_F32, B, H, Lq, 1, &l)))
        goto done;
    lse = l.data;
    if (dsp) {
        dsinks = calloc((size_t)H, sizeof(double));
        if (!dsinks) {
            rc = cli_fail(cmd, ATTN_E_NOMEM, "dsinks");
            goto done;
        }
        a.opts.mask.sinks_grad = dsinks;
    }
    attn_status st =
        attn_sdpa_forward(&q.t, &k.t, &v.t, &a.opts, &out, NULL, lse);
    if (st) {
        rc = cli_fail(cmd, st, "forward");
        goto done;
    }
    st = attn_sdpa_backward(&q.t, &k.t, &v.t, &out, lse, &dout.t, &a.opts, &dq,
                            &dk, &dv, dbp ? &db : NULL);
    if (st) {
        rc = cli_fail(cmd, st, "backward");
        goto done;
    }
    if ((rc = cli_save_like_as(cmd, dqp, gdt, dq.data, 4, dq.shape, q.rank,
                               fdt)) ||
        (rc = cli_save_like_as(cmd, dkp, gdt, dk.data, 4, dk.shape, k.rank,
                               fdt)) ||
        (rc = cli_save_like_as(cmd, dvp, gdt, dv.data, 4, dv.shape, v.rank,
                               fdt)))
        goto done;
    if (dbp) /* the bias file's own shape: the same elements, row-major */
        rc = cli_save_array(cmd, dbp, gdt, db.data, a.bias.ndim, a.bias.shape);
    if (!rc && dsp) {
        int64_t nh = H;
        rc = cli_save_array(cmd, dsp, ATTN_F64, dsinks, 1, &nh);
    }
done:
    free(dsinks);
    free(out.data);
    free(dq.data);
    free(dk.data);
    free(dv.data);
    free(db.data);
    free(lse);
    cli_tensor_free(&q);
    cli_tensor_free(&k);
    cli_tensor_free(&v);
    cli_tensor_free(&dout);
    cli_sdpa_args_free(&a);
    return rc;
}
