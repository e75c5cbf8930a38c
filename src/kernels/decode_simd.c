/* Vector versions of the decode kernel's inner loops (decode.h). */
#include "decode.h"

const attn__decode_ops *attn__decode_simd_ops(attn_dtype dtype,
                                              attn__vec_level level);

const attn__decode_ops *attn__decode_simd_ops(attn_dtype dtype,
                                              attn__vec_level level) {
    (void)dtype;
    (void)level;
    return NULL;
}
