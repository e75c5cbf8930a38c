/* Bad input through the API: each status class provoked on purpose, each
 * with its status and a message naming the argument and the numbers. */
#include "attn.h"
#include "attn_pretrained.h"
#include "attn_train.h"
#include "attn_transformer.h"
#include "sdpa_test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Runs forward and checks the status and that the message contains want. */
#define EXPECT(expr, status, want)                                             \
    do {                                                                       \
        attn_clear_error();                                                    \
        CHECK_STATUS(expr, status);                                            \
        CHECK_MSG(strstr(attn_last_error(), want) != NULL,                     \
                  "message '%s' lacks '%s'", attn_last_error(), want);         \
    } while (0)

int main(void) {
    test_qkv t;
    test_qkv_make(&t, 2, 4, 2, 5, 6, 8, 3, 1);
    float o[2 * 4 * 5 * 3];
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 2, 4, 5, 3);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);

    /* the good call works */
    CHECK_STATUS(attn_sdpa_forward(&t.Q, &t.K, &t.V, &opts, &O, NULL, NULL),
                 ATTN_OK);

    /* ATTN_E_INVALID */
    EXPECT(attn_sdpa_forward(NULL, &t.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_INVALID, "q is NULL");
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, NULL, &O, NULL, NULL),
           ATTN_E_INVALID, "opts");
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &opts, NULL, NULL, NULL),
           ATTN_E_INVALID, "out");
    attn_tensor nd = t.Q;
    nd.data = NULL;
    EXPECT(attn_sdpa_forward(&nd, &t.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_INVALID, "q has NULL data");
    attn_sdpa_opts bad = opts;
    bad.scale = -1;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &bad, &O, NULL, NULL),
           ATTN_E_INVALID, "scale is -1");
    bad = opts;
    bad.dropout_p = 1.0;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &bad, &O, NULL, NULL),
           ATTN_E_INVALID, "dropout_p is 1");
    bad = opts;
    bad.mask.block_size = 4;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &bad, &O, NULL, NULL),
           ATTN_E_INVALID, "layout is NULL");
    bad = opts;
    bad.mask.random_block = 2;
    bad.mask.random_keep_p = 1.5;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &bad, &O, NULL, NULL),
           ATTN_E_INVALID, "random_keep_p is 1.5");

    /* a check of several pointers names the first NULL one, by the name
     * the documentation gives it */
    float lg[2] = {0, 0};
    int32_t tg[1] = {0};
    double loss;
    EXPECT(attn_cross_entropy(1, 2, lg, NULL, -1, &loss, NULL, NULL, NULL),
           ATTN_E_INVALID, "targets is NULL");
    EXPECT(attn_cross_entropy(1, 2, lg, tg, -1, NULL, NULL, NULL, NULL),
           ATTN_E_INVALID, "loss is NULL");
    attn_st_tensor stt;
    EXPECT(attn_safetensors_find(NULL, "w", &stt), ATTN_E_INVALID,
           "st is NULL");

    /* token ids and lengths are checked before anything runs, each named */
    attn_transformer_config tc;
    attn_transformer_config_init(&tc, ATTN_MODEL_ENCDEC);
    tc.vocab_src = tc.vocab_tgt = 5;
    tc.max_src = tc.max_tgt = 4;
    size_t tws = 0;
    CHECK_STATUS(attn_transformer_workspace_size(&tc, 1, 3, 2, &tws), ATTN_OK);
    float *tp =
        calloc((size_t)attn_transformer_param_count(&tc), sizeof(float));
    float *tw = calloc(tws, sizeof(float));
    float *tl = calloc(2 * 5, sizeof(float));
    int32_t sid[3] = {1, 2, 3}, tgt[2] = {0, 7};
    int64_t slen[1] = {4};
    attn_layer_opts lo;
    attn_sdpa_opts_init(&lo);
    EXPECT(attn_transformer_forward(&tc, tp, 1, 3, sid, NULL, 2, tgt, &lo, tl,
                                    NULL, tw),
           ATTN_E_INVALID, "tgt[1] is 7; ids are 0..4");
    tgt[1] = 1;
    EXPECT(attn_transformer_forward(&tc, tp, 1, 3, sid, slen, 2, tgt, &lo, tl,
                                    NULL, tw),
           ATTN_E_SHAPE, "src_lengths[0] is 4; it must be in [1, 3]");
    free(tp);
    free(tw);
    free(tl);

    /* ATTN_E_SHAPE */
    test_qkv w;
    test_qkv_make(&w, 2, 4, 2, 5, 6, 32, 3, 2);
    EXPECT(attn_sdpa_forward(&t.Q, &w.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_SHAPE, "k has 32 features but q has 8");
    test_qkv g;
    test_qkv_make(&g, 2, 4, 3, 5, 6, 8, 3, 3);
    EXPECT(attn_sdpa_forward(&t.Q, &g.K, &g.V, &opts, &O, NULL, NULL),
           ATTN_E_SHAPE, "q has 4 heads, not a multiple of the 3 heads");
    attn_tensor z = t.Q;
    z.shape[2] = 0;
    EXPECT(attn_sdpa_forward(&z, &t.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_SHAPE, "q has shape[2] = 0");
    attn_tensor Ob = attn_tensor_4d(o, ATTN_F32, 2, 4, 5, 2);
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &opts, &Ob, NULL, NULL),
           ATTN_E_SHAPE, "out has shape (2, 4, 5, 2) but (2, 4, 5, 3)");
    int64_t kl[2] = {3, 7};
    bad = opts;
    bad.mask.key_lengths = kl;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &bad, &O, NULL, NULL),
           ATTN_E_SHAPE, "key_lengths[1] = 7 is outside [0, 6]");
    uint8_t keep[6];
    attn_tensor Kp = attn_tensor_4d(keep, ATTN_U8, 1, 1, 2, 6);
    bad = opts;
    bad.mask.keep = &Kp;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &bad, &O, NULL, NULL),
           ATTN_E_SHAPE, "2 entries on the query axis");

    /* ATTN_E_DTYPE */
    attn_tensor qd = t.Q;
    qd.dtype = ATTN_U8;
    EXPECT(attn_sdpa_forward(&qd, &t.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_DTYPE, "q has dtype u8");
    attn_tensor kd = t.K;
    kd.dtype = ATTN_F16;
    EXPECT(attn_sdpa_forward(&t.Q, &kd, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_DTYPE, "k is f16");

    /* ATTN_E_UNSUPPORTED: f64 outside the reference */
    double q64[8] = {0}, o64[8];
    attn_tensor Q64 = attn_tensor_4d(q64, ATTN_F64, 1, 1, 1, 8);
    attn_tensor O64 = attn_tensor_4d(o64, ATTN_F64, 1, 1, 1, 8);
    EXPECT(attn_sdpa_forward(&Q64, &Q64, &Q64, &opts, &O64, NULL, NULL),
           ATTN_E_UNSUPPORTED, "reference");
    bad = opts;
    bad.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q64, &Q64, &Q64, &bad, &O64, NULL, NULL),
                 ATTN_OK);

    /* ATTN_E_NOMEM: sizes whose products overflow */
    attn_tensor huge = t.Q;
    huge.shape[0] = INT64_C(1) << 40;
    huge.shape[2] = INT64_C(1) << 40;
    huge.stride[0] = INT64_C(1) << 40;
    EXPECT(attn_sdpa_forward(&huge, &t.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_NOMEM, "overflows");
    CHECK(attn_tensor_numel(&huge) == 0);
    /* the constructors' strides overflow too (UB before they wrapped):
     * the check refuses such views instead */
    const int64_t big = INT64_C(1) << 40;
    attn_tensor h4 = attn_tensor_4d(t.q, ATTN_F32, 1, big, big, big);
    EXPECT(attn_tensor_check(&h4, "h4"), ATTN_E_NOMEM, "h4");
    attn_tensor hb = attn_tensor_bthd(t.q, ATTN_F32, 1, big, big, big);
    EXPECT(attn_tensor_check(&hb, "hb"), ATTN_E_NOMEM, "hb");

    /* ATTN_E_NONFINITE */
    t.q[17] = NAN;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_NONFINITE, "is NaN");
    t.q[17] = 0.5f;
    t.v[4] = INFINITY;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &opts, &O, NULL, NULL),
           ATTN_E_NONFINITE, "v[0, 0, 1, 1] is Inf");
    t.v[4] = 0.5f;
    float bias[6] = {0, 1, INFINITY, 0, 0, 0};
    attn_tensor Bi = attn_tensor_4d(bias, ATTN_F32, 1, 1, 1, 6);
    bad = opts;
    bad.mask.bias = &Bi;
    EXPECT(attn_sdpa_forward(&t.Q, &t.K, &t.V, &bad, &O, NULL, NULL),
           ATTN_E_NONFINITE, "+inf");

    /* every status has a name, and unknown ones do not crash */
    for (int s = 0; s < ATTN_STATUS_COUNT; s++)
        CHECK(strlen(attn_strerror((attn_status)s)) > 0);
    CHECK(strcmp(attn_strerror((attn_status)99), "unknown status") == 0);
    /* conversion helpers */
    CHECK(attn_f16_to_f32(attn_f32_to_f16(1.5f)) == 1.5f);
    CHECK(attn_f32_to_f16(70000.0f) == 0x7c00);
    CHECK(attn_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(attn_bf16_to_f32(attn_f32_to_bf16(3.0f)) == 3.0f);
    CHECK(isnan(attn_bf16_to_f32(attn_f32_to_bf16(NAN))));
    CHECK(isnan(attn_f16_to_f32(attn_f32_to_f16(NAN))));
    float src[3] = {1, 2, 3};
    uint8_t dst[3];
    CHECK_STATUS(attn_convert(src, ATTN_F32, dst, ATTN_U8, 3), ATTN_E_DTYPE);
    CHECK_STATUS(attn_convert(NULL, ATTN_F32, dst, ATTN_F16, 3),
                 ATTN_E_INVALID);

    test_qkv_free(&t);
    test_qkv_free(&w);
    test_qkv_free(&g);
    return check_done("test_errors");
}
