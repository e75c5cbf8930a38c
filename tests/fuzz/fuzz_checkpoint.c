/* The checkpoint loader (src/train/checkpoint.c) on arbitrary bytes.
 * Properties: no sanitizer report, no allocation the file's size does not
 * justify (libFuzzer's -rss_limit_mb / -malloc_limit_mb catch those); a
 * checkpoint it accepts re-saves to the same bytes. */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = fuzz_path("in.ckpt"), *out = fuzz_path("out.ckpt");
    fuzz_put(in, data, size);
    attn_trainer *t = NULL;
    if (attn_trainer_load(in, &t) != ATTN_OK) {
        FUZZ_CHECK(t == NULL);
        return 0;
    }
    FUZZ_CHECK(attn_trainer_save(t, out) == ATTN_OK);
    attn_trainer_free(t);
    size_t n = 0;
    uint8_t *b = fuzz_get(out, &n);
    FUZZ_CHECK(b != NULL && n == size && memcmp(b, data, size) == 0);
    free(b);
    unlink(out);
    return 0;
}
