/* The decode kernel's inner loops (decode.h): portable scalar versions for
 * every storage dtype; decode_simd.c adds the AVX2 and AVX-512 ones. The
 * scalar loops accumulate each dot product in one f32 sum, in order. */
#include "attn_cache.h"
#include "decode.h"

#include <string.h>

#define elem attn__decode_elem

static inline void dot_any(attn_dtype dt, const float *q, int64_t nr,
                           int64_t ldq, const unsigned char *k, size_t rowb,
                           const float *ks, int64_t nb, int64_t nk, int64_t D,
                           float *s, int64_t lds) {
    for (int64_t j = 0; j < nk; j++) {
        const unsigned char *row = k + (size_t)j * rowb;
        const float *sc = ks ? ks + j * nb : NULL;
        for (int64_t r = 0; r < nr; r++) {
            const float *qr = q + r * ldq;
            float acc = 0.0f;
            for (int64_t d = 0; d < D; d++) acc += qr[d] * elem(dt, row, sc, d);
            s[r * lds + j] = acc;
        }
    }
}

static inline void acc_any(attn_dtype dt, const float *p, int64_t nr,
                           int64_t ldp, const unsigned char *v, size_t rowb,
                           const float *vs, int64_t nb, int64_t nk, int64_t Dv,
                           float *o, int64_t ldo) {
    for (int64_t j = 0; j < nk; j++) {
        const unsigned char *row = v + (size_t)j * rowb;
        const float *sc = vs ? vs + j * nb : NULL;
        for (int64_t r = 0; r < nr; r++) {
            const float w = p[r * ldp + j];
            if (w == 0.0f) continue; /* masked keys (exp(-inf) = 0) */
            float *orow = o + r * ldo;
            for (int64_t d = 0; d < Dv; d++)
                orow[d] += w * elem(dt, row, sc, d);
        }
    }
}

/* One pair of functions per dtype, so the switch in elem() folds away. */
#define SCALAR_OPS(name, DT)                                                   \
    static void dot_##name(const float *q, int64_t nr, int64_t ldq,            \
                           const unsigned char *k, size_t rowb,                \
                           const float *ks, int64_t nb, int64_t nk, int64_t D, \
                           float *s, int64_t lds) {                            \
        dot_any(DT, q, nr, ldq, k, rowb, ks, nb, nk, D, s, lds);               \
    }                                                                          \
    static void acc_##name(const float *p, int64_t nr, int64_t ldp,            \
                           const unsigned char *v, size_t rowb,                \
                           const float *vs, int64_t nb, int64_t nk,            \
                           int64_t Dv, float *o, int64_t ldo) {                \
        acc_any(DT, p, nr, ldp, v, rowb, vs, nb, nk, Dv, o, ldo);              \
    }                                                                          \
    static const attn__decode_ops ops_##name = {dot_##name, acc_##name};

SCALAR_OPS(f32, ATTN_F32)
SCALAR_OPS(f16, ATTN_F16)
SCALAR_OPS(bf16, ATTN_BF16)
SCALAR_OPS(q8, ATTN_Q8)

const attn__decode_ops *attn__decode_ops_get(attn_dtype dtype,
                                             attn__vec_level level) {
    for (int l = (int)level; l > (int)ATTN__VEC_SCALAR; l--) {
        const attn__decode_ops *ops =
            attn__decode_simd_ops(dtype, (attn__vec_level)l);
        if (ops) return ops;
    }
    switch (dtype) {
    case ATTN_F16: return &ops_f16;
    case ATTN_BF16: return &ops_bf16;
    case ATTN_Q8: return &ops_q8;
    default: return &ops_f32;
    }
}
