/* The checkpoint loader (src/train/checkpoint.c) on arbitrary bytes.
 * Properties: no sanitizer report, no allocation the file's size does not
 * justify (libFuzzer's -rss_limit_mb / -malloc_limit_mb catch those); a
 * checkpoint it accepts re-saves to the same bytes. Each input is tried
 * as it is and with its closing CRC made right. */
#include "fuzz_util.h"

static void one(const uint8_t *data, size_t size) {
    const char *in = fuzz_path("in.ckpt"), *out = fuzz_path("out.ckpt");
    fuzz_put(in, data, size);
    attn_trainer *t = NULL;
    if (attn_trainer_load(in, &t) != ATTN_OK) {
        FUZZ_CHECK(t == NULL);
        return;
    }
    FUZZ_CHECK(attn_trainer_save(t, out) == ATTN_OK);
    attn_trainer_free(t);
    size_t n = 0;
    uint8_t *b = fuzz_get(out, &n);
    FUZZ_CHECK(b != NULL && n == size && memcmp(b, data, size) == 0);
    free(b);
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
