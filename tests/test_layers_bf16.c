/* The layers in bf16 (opts.impl = ATTN_IMPL_FLASH_BF16):
 *   - the linear maps, forward and backward, on bf16 products: against a
 *     double reference over the same bf16-rounded operands (the products
 *     of bf16 values are exact, so only the f32 sums differ) on odd sizes
 *     (1, 3, 17, 129), added into what dx and dW held; 1, 2 and 3 threads
 *     give the same bits;
 *   - multi-head attention (self and cross, Lq != Lk, grouped heads,
 *     masks) and the encoder and decoder stacks, forward and backward,
 *     within bf16's error of the double reference (MHA) or of f32 (the
 *     stacks), bitwise the same on 1, 2 and 3 threads, and not the f32
 *     bits (the bf16 path ran).
 * Where the CPU lacks AVX512_BF16 the requests run f32: checked to give
 * the f32 bits, and the bf16 path is reported NOT run on stderr. */
#include "../src/kernels/cpu.h"
#include "../src/layers/layers.h"
#include "attn_transformer.h"
#include "layers_ref.h"

#include <cblas.h>

static int bf16_cpu;

static double bf(double x) {
    return attn_bf16_to_f32(attn_f32_to_bf16((float)x));
}

/* A bf16-exact f32 copy of a double array (and the double rounded too). */
static float *bf_copy(double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = bf(x[i]);
    return ref_to_f32(x, n);
}

static void linear_case(int64_t n, int64_t in, int64_t out,
                        unsigned long long *rs) {
    double *x = malloc(sizeof(double) * (size_t)(n * in));
    double *w = malloc(sizeof(double) * (size_t)(out * in));
    double *b = malloc(sizeof(double) * (size_t)out);
    double *dy = malloc(sizeof(double) * (size_t)(n * out));
    double *ry = malloc(sizeof(double) * (size_t)(n * out));
    double *rdx = malloc(sizeof(double) * (size_t)(n * in));
    double *rdw = malloc(sizeof(double) * (size_t)(out * in));
    ref_fill(x, n * in, 1.0, rs);
    ref_fill(w, out * in, 1.0, rs);
    ref_fill(b, out, 0.5, rs);
    ref_fill(dy, n * out, 1.0, rs);
    float *xf = bf_copy(x, n * in), *wf = bf_copy(w, out * in);
    float *dyf = bf_copy(dy, n * out), *bff = ref_to_f32(b, out);
    ref_round(b, out);
    ref_linear(n, in, out, x, w, b, ry);
    /* dx = 0.25 + dy W, dW = -0.5 + dy^T x: added into what they held */
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < in; i++) {
            double s = 0.25;
            for (int64_t o = 0; o < out; o++)
                s += dy[r * out + o] * w[o * in + i];
            rdx[r * in + i] = s;
        }
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double s = -0.5;
            for (int64_t r = 0; r < n; r++)
                s += dy[r * out + o] * x[r * in + i];
            rdw[o * in + i] = s;
        }
    float *y[3], *dx[3], *dw[3], *db[3];
    const int was = attn__linear_bf16_scope(1);
    for (int t = 0; t < 3; t++) {
        y[t] = malloc(sizeof(float) * (size_t)(n * out));
        dx[t] = malloc(sizeof(float) * (size_t)(n * in));
        dw[t] = malloc(sizeof(float) * (size_t)(out * in));
        db[t] = calloc((size_t)out, sizeof(float));
        for (int64_t i = 0; i < n * in; i++) dx[t][i] = 0.25f;
        for (int64_t i = 0; i < out * in; i++) dw[t][i] = -0.5f;
        openblas_set_num_threads(t + 1);
        CHECK_STATUS(attn_linear_forward(n, in, out, xf, wf, bff, y[t]),
                     ATTN_OK);
        CHECK_STATUS(
            attn_linear_backward(n, in, out, xf, wf, dyf, dw[t], db[t], dx[t]),
            ATTN_OK);
    }
    attn__linear_bf16_scope(was);
    openblas_set_num_threads(2);
    const double ey = ref_max_rel(y[0], ry, n * out);
    const double ex = ref_max_rel(dx[0], rdx, n * in);
    const double ew = ref_max_rel(dw[0], rdw, out * in);
    CHECK_MSG(ey < 1e-5 && ex < 1e-5 && ew < 1e-5,
              "linear n %lld in %lld out %lld: errors y %.2e dx %.2e dW %.2e",
              (long long)n, (long long)in, (long long)out, ey, ex, ew);
    for (int t = 1; t < 3; t++)
        CHECK_MSG(
            !memcmp(y[0], y[t], sizeof(float) * (size_t)(n * out)) &&
                !memcmp(dx[0], dx[t], sizeof(float) * (size_t)(n * in)) &&
                !memcmp(dw[0], dw[t], sizeof(float) * (size_t)(out * in)) &&
                !memcmp(db[0], db[t], sizeof(float) * (size_t)out),
            "linear n %lld in %lld out %lld: %d threads differ from 1",
            (long long)n, (long long)in, (long long)out, t + 1);
    for (int t = 0; t < 3; t++) {
        free(y[t]);
        free(dx[t]);
        free(dw[t]);
        free(db[t]);
    }
    free(x), free(w), free(b), free(dy), free(ry), free(rdx), free(rdw);
    free(xf), free(wf), free(dyf), free(bff);
}

/* One MHA case: bf16 against the double reference and against f32. */
static void mha_case(int64_t E, int64_t H, int64_t Hkv, int64_t B, int64_t Lq,
                     int64_t Lk, int mask, unsigned long long *rs) {
    attn_mha_config c = {E, H, Hkv, 0, 0, 1};
    const int64_t np = attn_mha_param_count(&c);
    double *p = malloc(sizeof(double) * (size_t)np);
    double *q = malloc(sizeof(double) * (size_t)(B * Lq * E));
    double *kv = malloc(sizeof(double) * (size_t)(B * Lk * E));
    double *ro = malloc(sizeof(double) * (size_t)(B * Lq * E));
    ref_fill(p, np, 0.3, rs);
    ref_fill(q, B * Lq * E, 1.0, rs);
    ref_fill(kv, B * Lk * E, 1.0, rs);
    ref_round(p, np), ref_round(q, B * Lq * E), ref_round(kv, B * Lk * E);
    float *pf = ref_to_f32(p, np), *qf = ref_to_f32(q, B * Lq * E);
    float *kf = ref_to_f32(kv, B * Lk * E);
    mask_store ms;
    attn_layer_opts o;
    attn_sdpa_opts_init(&o);
    set_mask(&o, mask, &ms, B, H, Lq, Lk, rs);
    ref_mha(&c, p, B, Lq, Lk, q, kv, kv, &o, ro, NULL);
    size_t wsn;
    CHECK_STATUS(attn_mha_workspace_size(&c, B, Lq, Lk, &wsn), ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn);
    const size_t no = (size_t)(B * Lq * E), ng = (size_t)np;
    float *out[4], *g[4], *dq[4], *dk[4];
    float *dout = malloc(sizeof(float) * no);
    for (size_t i = 0; i < no; i++) dout[i] = (float)((int)(i % 7) - 3) * 0.1f;
    for (int t = 0; t < 4; t++) { /* 0..2: bf16 on 1..3 threads; 3: f32 */
        out[t] = malloc(sizeof(float) * no);
        g[t] = calloc(ng, sizeof(float));
        dq[t] = calloc(no, sizeof(float));
        dk[t] = calloc((size_t)(B * Lk * E), sizeof(float));
        o.impl = t < 3 ? ATTN_IMPL_FLASH_BF16 : ATTN_IMPL_FLASH;
        o.threads = t < 3 ? t + 1 : 2;
        CHECK_STATUS(attn_mha_forward(&c, pf, B, Lq, Lk, qf, kf, kf, &o, out[t],
                                      NULL, ATTN_WEIGHTS_PER_HEAD, ws),
                     ATTN_OK);
        CHECK_STATUS(attn_mha_backward(&c, pf, B, Lq, Lk, qf, kf, kf, &o, dout,
                                       ws, g[t], dq[t], dk[t], dk[t]),
                     ATTN_OK);
    }
    const double e16 = ref_max_rel(out[0], ro, (int64_t)no);
    const double e32 = ref_max_rel(out[3], ro, (int64_t)no);
    double gd = 0, gm = 1e-30;
    for (size_t i = 0; i < ng; i++) {
        if (fabs(g[0][i] - g[3][i]) > gd) gd = fabs(g[0][i] - g[3][i]);
        if (fabs(g[3][i]) > gm) gm = fabs(g[3][i]);
    }
    printf("mha E %lld H %lld/%lld B %lld Lq %lld Lk %lld mask %s: output "
           "error bf16 %.2e (f32 %.2e), gradients bf16 vs f32 %.2e\n",
           (long long)E, (long long)H, (long long)Hkv, (long long)B,
           (long long)Lq, (long long)Lk, mask_name[mask], e16, e32, gd / gm);
    CHECK_MSG(e16 < 3e-2 && gd / gm < 5e-2, "mha bf16 errors too large");
    CHECK_MSG(e32 < 1e-4, "mha f32 error %.2e", e32);
    for (int t = 1; t < 3; t++)
        CHECK_MSG(!memcmp(out[0], out[t], sizeof(float) * no) &&
                      !memcmp(g[0], g[t], sizeof(float) * ng) &&
                      !memcmp(dq[0], dq[t], sizeof(float) * no),
                  "mha bf16: %d threads differ from 1", t + 1);
    const int same = !memcmp(out[0], out[3], sizeof(float) * no) &&
                     !memcmp(g[0], g[3], sizeof(float) * ng);
    CHECK_MSG(bf16_cpu ? !same : same,
              bf16_cpu ? "mha bf16 gave the f32 bits: the bf16 path did not run"
                       : "mha bf16 fallback is not f32");
    for (int t = 0; t < 4; t++)
        free(out[t]), free(g[t]), free(dq[t]), free(dk[t]);
    free(p), free(q), free(kv), free(ro), free(pf), free(qf), free(kf);
    free(ws), free(dout);
}

/* Relative max difference of a against b. */
static double rel(const float *a, const float *b, size_t n) {
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > e) e = fabs(a[i] - b[i]);
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / m;
}

/* The encoder (enc = 1) or the decoder stack with cross-attention: bf16 on
 * 1, 2, 3 threads against f32. */
static void stack_case(int enc, unsigned long long *rs) {
    const int64_t B = 2, L = 17, Ls = 9, E = 32;
    attn_encoder_config ec;
    attn_decoder_config dc;
    attn_encoder_config_init(&ec);
    attn_decoder_config_init(&dc);
    ec.num_layers = dc.num_layers = 2;
    ec.d_model = dc.d_model = E;
    ec.num_heads = dc.num_heads = 4;
    ec.dim_feedforward = dc.dim_feedforward = 48;
    dc.cross = 1;
    /* GELU: a ReLU's kinks turn bf16's small changes of a pre-activation
     * into whole gradient terms switched on or off */
    ec.activation = dc.activation = ATTN_ACT_GELU;
    const int64_t np =
        enc ? attn_encoder_param_count(&ec) : attn_decoder_param_count(&dc);
    float *p = malloc(sizeof(float) * (size_t)np);
    CHECK_STATUS(enc ? attn_encoder_init(&ec, p, 7)
                     : attn_decoder_init(&dc, p, 7),
                 ATTN_OK);
    const size_t nx = (size_t)(B * L * E), nm = (size_t)(B * Ls * E);
    double *xd = malloc(sizeof(double) * (nx + nm));
    ref_fill(xd, (int64_t)(nx + nm), 1.0, rs);
    float *x = ref_to_f32(xd, (int64_t)(nx + nm)), *mem = x + nx;
    size_t wsn;
    CHECK_STATUS(enc ? attn_encoder_workspace_size(&ec, B, L, &wsn)
                     : attn_decoder_workspace_size(&dc, B, L, Ls, &wsn),
                 ATTN_OK);
    float *ws = malloc(sizeof(float) * wsn), *dout = malloc(sizeof(float) * nx);
    for (size_t i = 0; i < nx; i++) dout[i] = (float)((int)(i % 5) - 2) * 0.1f;
    const int64_t kl[2] = {L, 11}, ml[2] = {Ls, 5};
    float *out[4], *g[4], *dx[4];
    for (int t = 0; t < 4; t++) {
        attn_layer_opts o;
        attn_sdpa_opts_init(&o);
        o.impl = t < 3 ? ATTN_IMPL_FLASH_BF16 : ATTN_IMPL_FLASH;
        o.threads = t < 3 ? t + 1 : 2;
        out[t] = malloc(sizeof(float) * nx);
        g[t] = calloc((size_t)np, sizeof(float));
        dx[t] = calloc(nx, sizeof(float));
        if (enc) {
            o.mask.key_lengths = kl;
            CHECK_STATUS(
                attn_encoder_forward(&ec, p, B, L, x, &o, out[t], NULL, ws),
                ATTN_OK);
            CHECK_STATUS(attn_encoder_backward(&ec, p, B, L, x, &o, dout, ws,
                                               g[t], dx[t]),
                         ATTN_OK);
        } else {
            CHECK_STATUS(attn_decoder_forward(&dc, p, B, L, Ls, x, mem, ml, &o,
                                              out[t], NULL, NULL, ws),
                         ATTN_OK);
            CHECK_STATUS(attn_decoder_backward(&dc, p, B, L, Ls, x, mem, ml, &o,
                                               dout, ws, g[t], dx[t], NULL),
                         ATTN_OK);
        }
    }
    const double eo = rel(out[0], out[3], nx), eg = rel(g[0], g[3], (size_t)np);
    printf("%s stack: bf16 against f32: output %.2e, gradients %.2e\n",
           enc ? "encoder" : "decoder", eo, eg);
    CHECK_MSG(eo < 2e-2 && eg < 3e-2, "%s bf16 too far from f32",
              enc ? "encoder" : "decoder");
    for (int t = 1; t < 3; t++)
        CHECK_MSG(!memcmp(out[0], out[t], sizeof(float) * nx) &&
                      !memcmp(g[0], g[t], sizeof(float) * (size_t)np) &&
                      !memcmp(dx[0], dx[t], sizeof(float) * nx),
                  "%s bf16: %d threads differ from 1",
                  enc ? "encoder" : "decoder", t + 1);
    const int same = !memcmp(out[0], out[3], sizeof(float) * nx);
    CHECK_MSG(bf16_cpu ? !same : same, "%s: bf16 %s",
              enc ? "encoder" : "decoder",
              bf16_cpu ? "gave the f32 bits" : "fallback is not f32");
    for (int t = 0; t < 4; t++) free(out[t]), free(g[t]), free(dx[t]);
    free(p), free(xd), free(x), free(ws), free(dout);
}

int main(void) {
    bf16_cpu = attn__isa_get() >= ATTN__ISA_AVX512_BF16;
    printf("path %s: bf16 layers %s\n", attn__isa_name(attn__isa_get()),
           bf16_cpu ? "run" : "NOT run");
    if (!bf16_cpu)
        fprintf(stderr, "NOTE: this CPU has no AVX512_BF16 (or ATTN_ISA caps "
                        "it): the bf16 layer path is NOT tested here, only "
                        "its f32 fallback\n");
    unsigned long long rs = 0x5eed1234ull;
    if (bf16_cpu) { /* the linear maps' bf16 kernels need the CPU's */
        const int64_t s[][3] = {{1, 3, 17},    {3, 17, 1},     {17, 129, 3},
                                {8, 1, 1},     {129, 17, 129}, {64, 65, 257},
                                {200, 64, 300}};
        for (size_t i = 0; i < sizeof s / sizeof *s; i++)
            linear_case(s[i][0], s[i][1], s[i][2], &rs);
    }
    mha_case(32, 4, 4, 2, 17, 17, M_NONE, &rs);
    mha_case(32, 4, 2, 2, 17, 33, M_KEYLEN, &rs);
    mha_case(24, 3, 1, 3, 3, 1, M_NONE, &rs);
    mha_case(32, 4, 4, 2, 33, 33, M_CAUSAL, &rs);
    mha_case(16, 2, 2, 1, 129, 40, M_WINDOW, &rs);
    stack_case(1, &rs);
    stack_case(0, &rs);
    return check_done("test_layers_bf16");
}
