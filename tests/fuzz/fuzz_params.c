/* The parameter-file loaders (src/layers/params.c) on arbitrary bytes.
 * Properties: no sanitizer report; what the typed loaders accept re-saves
 * to the same bytes (every field was range-checked, nothing cut). Each
 * input is tried as it is and with its closing CRC made right. */
#include "fuzz_util.h"

static void same_bytes(const char *path, const uint8_t *data, size_t size) {
    size_t n = 0;
    uint8_t *b = fuzz_get(path, &n);
    FUZZ_CHECK(b != NULL && n == size && memcmp(b, data, size) == 0);
    free(b);
}

static void one(const uint8_t *data, size_t size) {
    const char *in = fuzz_path("in.prm"), *out = fuzz_path("out.prm");
    fuzz_put(in, data, size);
    attn_params_header h;
    attn_param_slice *sl = NULL;
    int64_t ns = 0, count = 0;
    float *block = NULL;
    if (attn_params_load(in, &h, &sl, &ns, &block, &count) == ATTN_OK) {
        FUZZ_CHECK(ns >= 0 && count >= 1 && block != NULL);
        for (int64_t i = 0; i < ns; i++)
            FUZZ_CHECK(sl[i].offset >= 0 &&
                       sl[i].offset + sl[i].shape[0] * sl[i].shape[1] <= count);
        FUZZ_CHECK(attn_params_save(out, &h, sl, ns, block, count) == ATTN_OK);
        same_bytes(out, data, size);
        attn_params_free(sl);
        attn_params_free(block);
    }
    float *p = NULL;
    attn_mha_config m;
    if (attn_mha_load(in, &m, &p) == ATTN_OK) {
        FUZZ_CHECK(attn_mha_save(out, &m, p) == ATTN_OK);
        same_bytes(out, data, size);
        attn_params_free(p);
    }
    attn_additive_config a;
    if (attn_additive_load(in, &a, &p) == ATTN_OK) {
        FUZZ_CHECK(attn_additive_save(out, &a, p) == ATTN_OK);
        same_bytes(out, data, size);
        attn_params_free(p);
    }
    attn_encoder_config e;
    if (attn_encoder_load(in, &e, &p) == ATTN_OK) {
        FUZZ_CHECK(attn_encoder_save(out, &e, p) == ATTN_OK);
        same_bytes(out, data, size);
        attn_params_free(p);
    }
    unlink(out);
}

/* The input as it is (mostly stopped by the CRC), then with its CRC made
 * right (so the fields behind it are what is fuzzed). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(data, size);
    uint8_t *sealed = fuzz_resealed(data, size);
    if (size >= 4 && memcmp(sealed, data, size) != 0) one(sealed, size);
    free(sealed);
    return 0;
}
