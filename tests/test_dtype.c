/* f16 and bf16 conversions: every f16 value round-trips, and f32 -> f16
 * rounding agrees with the nearest-even definition checked through the
 * exact neighbours. */
#include "attn.h"
#include "check.h"

#include <math.h>
#include <string.h>

int main(void) {
    int bad_rt = 0, bad_round = 0, bad_bf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = attn_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            if (!isnan(attn_f16_to_f32(attn_f32_to_f16(f)))) bad_rt++;
            continue;
        }
        if (attn_f32_to_f16(f) != h) bad_rt++;
    }
    /* random f32 values: the result is one of the two neighbours and the
     * nearer one (ties to even mantissa) */
    unsigned long long s = 5;
    for (int n = 0; n < 200000; n++) {
        float f = (float)(test_rand(&s) * pow(2.0, (int)(test_rand(&s) * 20)));
        uint16_t h = attn_f32_to_f16(f);
        double back = attn_f16_to_f32(h);
        uint16_t up = (uint16_t)(h + 1), dn = (uint16_t)(h - 1);
        double e = fabs(back - f);
        double eu = fabs((double)attn_f16_to_f32(up) - f);
        double ed = fabs((double)attn_f16_to_f32(dn) - f);
        if ((h & 0x7fff) != 0 && (h & 0x7fff) < 0x7bff &&
            (eu < e || ed < e || ((eu == e || ed == e) && (h & 1))))
            bad_round++;
        uint16_t b = attn_f32_to_bf16(f);
        double bb = attn_bf16_to_f32(b);
        if (fabs(bb - f) > fabs((double)f) * 0x1p-8) bad_bf++;
    }
    CHECK_MSG(bad_rt == 0, "%d f16 values do not round-trip", bad_rt);
    CHECK_MSG(bad_round == 0, "%d f32 -> f16 conversions not nearest-even",
              bad_round);
    CHECK_MSG(bad_bf == 0, "%d bf16 conversions off by more than half an ulp",
              bad_bf);
    /* the array converter agrees with the scalar ones */
    float src[4] = {1.0f / 3, -2.5f, 65504.0f, 1e-7f};
    uint16_t h[4], bf[4];
    double d[4];
    CHECK_STATUS(attn_convert(src, ATTN_F32, h, ATTN_F16, 4), ATTN_OK);
    CHECK_STATUS(attn_convert(src, ATTN_F32, bf, ATTN_BF16, 4), ATTN_OK);
    CHECK_STATUS(attn_convert(h, ATTN_F16, d, ATTN_F64, 4), ATTN_OK);
    for (int i = 0; i < 4; i++) {
        CHECK(h[i] == attn_f32_to_f16(src[i]));
        CHECK(bf[i] == attn_f32_to_bf16(src[i]));
        CHECK(d[i] == attn_f16_to_f32(h[i]));
    }
    CHECK(attn_dtype_size(ATTN_BF16) == 2 && attn_dtype_size(ATTN_I64) == 8);
    CHECK(strcmp(attn_dtype_name(ATTN_F16), "f16") == 0);
    return check_done("test_dtype");
}
