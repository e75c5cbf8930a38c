/* The flash forward with bf16 tile products (ATTN_IMPL_FLASH_BF16) on
 * bf16 inputs: on every case of bf16_cases.h (odd sizes, Lq != Lk,
 * causal and padding masks, grouped heads, long rows)
 *   - the error against the float64 reference on the same bf16 inputs is
 *     within 2x PyTorch's bf16 SDPA error on those inputs (the committed
 *     fixture tests/data/torch_bf16_sdpa_errors.txt, made by
 *     tests/torch_bf16_errors.py) and within the bf16 rounding bound of
 *     the weights (2 x 2^-9 max|v| + 1e-6);
 *   - 1, 2 and 3 threads give the same bits;
 *   - it really is the bf16 path: its output differs from FLASH's (f32
 *     products), which stays within f32 rounding.
 * Where the CPU lacks AVX512_BF16 FLASH_BF16 runs FLASH: checked to give
 * FLASH's bits, and the bf16 path is reported NOT run on stderr. */
#include "../src/kernels/cpu.h"
#include "attn.h"
#include "check.h"
#include "bf16_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run(const bf16_case *c, int bf16_path, int *fixture_missing) {
    unsigned long long st = c->seed;
    const int64_t nq = c->B * c->H * c->Lq * c->D,
                  nk = c->B * c->Hkv * c->Lk * c->D;
    uint16_t *q = bf16_gen(nq, c->amp, &st), *k = bf16_gen(nk, c->amp, &st),
             *v = bf16_gen(nk, 1.0, &st);
    attn_tensor Q = attn_tensor_4d(q, ATTN_BF16, c->B, c->H, c->Lq, c->D);
    attn_tensor K = attn_tensor_4d(k, ATTN_BF16, c->B, c->Hkv, c->Lk, c->D);
    attn_tensor V = attn_tensor_4d(v, ATTN_BF16, c->B, c->Hkv, c->Lk, c->D);
    uint8_t *keep = NULL;
    attn_tensor Keep;
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    o.mask.causal = c->mask == BF16_CAUSAL;
    if (c->mask == BF16_PAD) {
        keep = malloc((size_t)(c->B * c->Lk));
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t j = 0; j < c->Lk; j++)
                keep[b * c->Lk + j] = j < c->Lk - 7 * b - 3;
        Keep = attn_tensor_4d(keep, ATTN_U8, c->B, 1, 1, c->Lk);
        o.mask.keep = &Keep;
    }
    const int64_t no = c->B * c->H * c->Lq * c->D;
    double *ref = malloc(sizeof(double) * (size_t)no);
    float *out[3], *f32 = malloc(sizeof(float) * (size_t)no);
    attn_tensor R = attn_tensor_4d(ref, ATTN_F64, c->B, c->H, c->Lq, c->D);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &R, NULL, NULL), ATTN_OK);
    attn_tensor F = attn_tensor_4d(f32, ATTN_F32, c->B, c->H, c->Lq, c->D);
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &F, NULL, NULL), ATTN_OK);
    o.impl = ATTN_IMPL_FLASH_BF16;
    for (int t = 0; t < 3; t++) {
        out[t] = malloc(sizeof(float) * (size_t)no);
        attn_tensor O =
            attn_tensor_4d(out[t], ATTN_F32, c->B, c->H, c->Lq, c->D);
        o.threads = t + 1;
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O, NULL, NULL),
                     ATTN_OK);
    }
    double err = 0, e32 = 0, vmax = 0;
    for (int64_t i = 0; i < no; i++) {
        double e = fabs(out[0][i] - ref[i]), e2 = fabs(f32[i] - ref[i]);
        if (!(e <= err)) err = e;
        if (!(e2 <= e32)) e32 = e2;
    }
    for (int64_t i = 0; i < nk; i++) {
        double a = fabs(attn_bf16_to_f32(v[i]));
        if (a > vmax) vmax = a;
    }
    const int same = !memcmp(out[0], out[1], sizeof(float) * (size_t)no) &&
                     !memcmp(out[0], out[2], sizeof(float) * (size_t)no);
    CHECK_MSG(same, "%s: thread counts give different bits", c->name);
    CHECK_MSG(e32 <= 1e-5, "%s: FLASH error %g", c->name, e32);
    if (bf16_path) {
        const double bound = 2.0 * 0x1p-9 * vmax + 1e-6,
                     te = bf16_torch_err(c->name);
        CHECK_MSG(err <= bound, "%s: bf16 error %g > bound %g", c->name, err,
                  bound);
        if (te >= 0)
            CHECK_MSG(err <= 2.0 * te, "%s: bf16 error %g > 2 x PyTorch's %g",
                      c->name, err, te);
        else
            *fixture_missing = 1;
        CHECK_MSG(memcmp(out[0], f32, sizeof(float) * (size_t)no) != 0 ||
                      no == 0 || c->Lk == 1,
                  "%s: FLASH_BF16 gave FLASH's bits: not the bf16 path",
                  c->name);
        printf("%-12s bf16 err %.3g (PyTorch %s%.3g), f32 err %.3g\n", c->name,
               err, te >= 0 ? "" : "n/a ", te, e32);
    } else {
        CHECK_MSG(!memcmp(out[0], f32, sizeof(float) * (size_t)no),
                  "%s: FLASH_BF16 without AVX512_BF16 differs from FLASH",
                  c->name);
    }
    for (int t = 0; t < 3; t++) free(out[t]);
    free(f32);
    free(ref);
    free(q);
    free(k);
    free(v);
    free(keep);
}

int main(void) {
    const int bf16 = attn__isa_get() >= ATTN__ISA_AVX512_BF16;
    int missing = 0;
    printf("path %s: bf16 tile products %s\n", attn__isa_name(attn__isa_get()),
           bf16 ? "run" : "NOT run");
    for (int i = 0; i < BF16_NCASES; i++) run(&bf16_cases[i], bf16, &missing);
    if (!bf16)
        fprintf(stderr,
                "*** the bf16 tile products NOT run: this process's path is "
                "%s (AVX512_BF16 needed); FLASH_BF16 checked to be FLASH ***\n",
                attn__isa_name(attn__isa_get()));
    CHECK_MSG(!missing, "tests/data/torch_bf16_sdpa_errors.txt lacks cases "
                        "(make it again with tests/torch_bf16_errors.py)");
    return check_done("test_flash_bf16");
}
