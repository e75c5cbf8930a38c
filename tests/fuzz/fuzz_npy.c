/* The .npy reader (src/io/npy.c) on arbitrary bytes. Properties: no
 * sanitizer report; a file it accepts has a sane shape and, written back
 * and read again, the same dtype, shape and bytes; every conversion either
 * succeeds or fails with a status. */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = fuzz_path("in.npy"), *out = fuzz_path("out.npy");
    fuzz_put(in, data, size);
    attn_npy a;
    attn_status st = attn_npy_read(in, &a);
    if (st) {
        FUZZ_CHECK(a.data == NULL && attn_last_error()[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(a.ndim >= 0 && a.ndim <= ATTN_NPY_MAX_DIMS);
    size_t numel = 1;
    for (int i = 0; i < a.ndim; i++) {
        FUZZ_CHECK(a.shape[i] >= 0);
        numel *= (size_t)a.shape[i];
    }
    FUZZ_CHECK(numel * attn_dtype_size(a.dtype) <= size);
    FUZZ_CHECK(attn_npy_write(out, &a) == ATTN_OK);
    attn_npy b;
    FUZZ_CHECK(attn_npy_read(out, &b) == ATTN_OK);
    FUZZ_CHECK(b.dtype == a.dtype && b.ndim == a.ndim);
    for (int i = 0; i < a.ndim; i++) FUZZ_CHECK(b.shape[i] == a.shape[i]);
    FUZZ_CHECK(numel == 0 ||
               memcmp(a.data, b.data, numel * attn_dtype_size(a.dtype)) == 0);
    attn_npy_free(&b);
    static const attn_dtype to[] = {ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_F64,
                                    ATTN_U8,  ATTN_I32, ATTN_I64};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        FUZZ_CHECK(attn_npy_read(out, &b) == ATTN_OK);
        st = attn_npy_convert(&b, to[i]);
        FUZZ_CHECK(st == ATTN_OK ? b.dtype == to[i] : b.dtype == a.dtype);
        attn_npy_free(&b);
    }
    attn_npy_free(&a);
    unlink(out);
    return 0;
}
