/* Element types, conversions and tensor views. */
#include "internal.h"

#include <math.h>
#include <string.h>

size_t attn_dtype_size(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_F32: return 4;
    case ATTN_F16: return 2;
    case ATTN_BF16: return 2;
    case ATTN_F64: return 8;
    case ATTN_U8: return 1;
    case ATTN_I32: return 4;
    case ATTN_I64: return 8;
    case ATTN_Q8: return 0; /* a block format (attn_cache.h), not elements */
    }
    return 0;
}

const char *attn_dtype_name(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_F32: return "f32";
    case ATTN_F16: return "f16";
    case ATTN_BF16: return "bf16";
    case ATTN_F64: return "f64";
    case ATTN_U8: return "u8";
    case ATTN_I32: return "i32";
    case ATTN_I64: return "i64";
    case ATTN_Q8: return "q8";
    }
    return "?";
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float attn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* Inf or NaN: keep the payload's top bits */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: value = man * 2^-24 exactly representable in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t attn_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu >= 0x7f800000u) /* Inf / NaN */
        return sign | (absu > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (absu >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return sign | 0x7c00u;
    if (absu < 0x38800000u) { /* below the smallest normal 2^-14 */
        /* value in units of 2^-24, rounded to nearest even */
        float a = bits_f32(absu) * 0x1p24f;
        float r = nearbyintf(a); /* default rounding mode is to-nearest-even */
        return sign | (uint16_t)r;
    }
    /* normal: rebias exponent and round the 13 dropped bits to nearest even */
    uint32_t v = absu - (112u << 23);
    uint32_t rest = v & 0x1fffu;
    uint32_t half = v >> 13;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;
    return sign | (uint16_t)half;
}

float attn_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t attn_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (uint16_t)(u >> 16);
}

int attn__is_float_dtype(attn_dtype d) {
    return d == ATTN_F32 || d == ATTN_F16 || d == ATTN_BF16 || d == ATTN_F64;
}

double attn__load_one(const void *src, attn_dtype d, size_t i) {
    switch (d) {
    case ATTN_F32: return ((const float *)src)[i];
    case ATTN_F16: return attn_f16_to_f32(((const uint16_t *)src)[i]);
    case ATTN_BF16: return attn_bf16_to_f32(((const uint16_t *)src)[i]);
    case ATTN_F64: return ((const double *)src)[i];
    case ATTN_U8: return ((const uint8_t *)src)[i];
    case ATTN_I32: return ((const int32_t *)src)[i];
    case ATTN_I64: return (double)((const int64_t *)src)[i];
    case ATTN_Q8: break; /* no element view of a block format */
    }
    return 0.0;
}

attn_status attn_convert(const void *src, attn_dtype src_dtype, void *dst,
                         attn_dtype dst_dtype, size_t n) {
    if (n == 0) return ATTN_OK;
    if (!src || !dst)
        return attn__fail(ATTN_E_INVALID, "attn_convert: %s is NULL",
                          src ? "dst" : "src");
    if (!attn__is_float_dtype(src_dtype) || !attn__is_float_dtype(dst_dtype))
        return attn__fail(
            ATTN_E_DTYPE, "attn_convert: %s -> %s is not a float conversion",
            attn_dtype_name(src_dtype), attn_dtype_name(dst_dtype));
    attn__convert_to_float(src, src_dtype, dst, dst_dtype, n);
    return ATTN_OK;
}

void attn__convert_to_float(const void *src, attn_dtype src_dtype, void *dst,
                            attn_dtype dst_dtype, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = attn__load_one(src, src_dtype, i);
        switch (dst_dtype) {
        case ATTN_F32: ((float *)dst)[i] = (float)x; break;
        case ATTN_F64: ((double *)dst)[i] = x; break;
        case ATTN_F16: ((uint16_t *)dst)[i] = attn_f32_to_f16((float)x); break;
        case ATTN_BF16:
            ((uint16_t *)dst)[i] = attn_f32_to_bf16((float)x);
            break;
        default: break;
        }
    }
}

void attn__load_f32(const void *src, attn_dtype dtype, int64_t n, float *dst) {
    switch (dtype) {
    case ATTN_F32: memcpy(dst, src, (size_t)n * 4); return;
    case ATTN_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = attn_f16_to_f32(((const uint16_t *)src)[i]);
        return;
    case ATTN_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = attn_bf16_to_f32(((const uint16_t *)src)[i]);
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)attn__load_one(src, dtype, (size_t)i);
        return;
    }
}

/* a * b wrapping instead of overflowing (signed overflow is undefined):
 * the constructors cannot fail, and a view whose strides wrap has an
 * element count past int64 (or a dimension < 1), which attn_tensor_check
 * refuses. */
static int64_t wrap_mul(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)b);
}

attn_tensor attn_tensor_4d(void *data, attn_dtype dtype, int64_t d0, int64_t d1,
                           int64_t d2, int64_t d3) {
    attn_tensor t;
    t.data = data;
    t.dtype = dtype;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.shape[2] = d2;
    t.shape[3] = d3;
    t.stride[3] = 1;
    t.stride[2] = d3;
    t.stride[1] = wrap_mul(d2, d3);
    t.stride[0] = wrap_mul(d1, t.stride[1]);
    return t;
}

attn_tensor attn_tensor_bthd(void *data, attn_dtype dtype, int64_t b, int64_t l,
                             int64_t h, int64_t d) {
    attn_tensor t = attn_tensor_4d(data, dtype, b, h, l, d);
    t.stride[1] = d;                        /* heads are next to each other */
    t.stride[2] = wrap_mul(h, d);           /* then positions */
    t.stride[0] = wrap_mul(l, t.stride[2]); /* then batch entries */
    return t;
}

int64_t attn_tensor_numel(const attn_tensor *t) {
    if (!t) return 0;
    int64_t n = 1;
    for (int i = 0; i < 4; i++)
        if (t->shape[i] < 1 || !attn__mul_i64(n, t->shape[i], &n)) return 0;
    return n;
}

attn_status attn_tensor_check(const attn_tensor *t, const char *name) {
    if (!name) name = "tensor";
    if (!t) return attn__fail(ATTN_E_INVALID, "%s is NULL", name);
    if (attn_dtype_size(t->dtype) == 0)
        return attn__fail(ATTN_E_DTYPE, "%s has an unknown dtype (%d)", name,
                          (int)t->dtype);
    for (int i = 0; i < 4; i++) {
        if (t->shape[i] < 1)
            return attn__fail(
                ATTN_E_SHAPE,
                "%s has shape[%d] = %lld; every dimension must be "
                ">= 1",
                name, i, (long long)t->shape[i]);
        if (t->stride[i] < 0)
            return attn__fail(ATTN_E_SHAPE,
                              "%s has stride[%d] = %lld; strides must be >= 0",
                              name, i, (long long)t->stride[i]);
    }
    /* largest offset and the byte extent must be representable */
    int64_t last = 0;
    for (int i = 0; i < 4; i++) {
        int64_t term;
        if (!attn__mul_i64(t->shape[i] - 1, t->stride[i], &term) ||
            last > INT64_MAX - term)
            return attn__fail(ATTN_E_NOMEM,
                              "%s: shape (%lld, %lld, %lld, %lld) with its "
                              "strides overflows 64-bit offsets",
                              name, (long long)t->shape[0],
                              (long long)t->shape[1], (long long)t->shape[2],
                              (long long)t->shape[3]);
        last += term;
    }
    int64_t bytes;
    if (!attn__mul_i64(last + 1, (int64_t)attn_dtype_size(t->dtype), &bytes) ||
        (uint64_t)bytes > (uint64_t)SIZE_MAX || attn_tensor_numel(t) == 0)
        return attn__fail(ATTN_E_NOMEM,
                          "%s: shape (%lld, %lld, %lld, %lld) is too large to "
                          "address",
                          name, (long long)t->shape[0], (long long)t->shape[1],
                          (long long)t->shape[2], (long long)t->shape[3]);
    if (!t->data) return attn__fail(ATTN_E_INVALID, "%s has NULL data", name);
    return ATTN_OK;
}

double attn_tensor_get(const attn_tensor *t, int64_t i0, int64_t i1, int64_t i2,
                       int64_t i3) {
    return attn__load_one(t->data, t->dtype,
                          (size_t)attn__off(t, i0, i1, i2, i3));
}

/* 1 if n elements at p (stride st) are all finite; the largest |x| of the
 * row raises *maxabs. Branch-free over whole rows: the check runs on every
 * call of every kernel, so it must cost little next to the attention
 * itself. For IEEE bits, |x| orders as its bits without the sign, and x is
 * finite iff those bits are below the all-ones exponent. */
static int row_finite(const void *p, attn_dtype d, int64_t n, int64_t st,
                      double *maxabs) {
    double m;
    int ok;
    switch (d) {
    case ATTN_F32: {
        const uint32_t *x = p;
        uint32_t mb = 0;
        if (st == 1)
            for (int64_t i = 0; i < n; i++) {
                const uint32_t a = x[i] & 0x7fffffffu;
                mb = a > mb ? a : mb;
            }
        else
            for (int64_t i = 0; i < n; i++) {
                const uint32_t a = x[i * st] & 0x7fffffffu;
                mb = a > mb ? a : mb;
            }
        ok = mb < 0x7f800000u;
        float f;
        memcpy(&f, &mb, 4);
        m = f;
        break;
    }
    case ATTN_F16:
    case ATTN_BF16: {
        const uint16_t *x = p;
        uint16_t mb = 0;
        for (int64_t i = 0; i < n; i++) {
            const uint16_t a = (uint16_t)(x[i * st] & 0x7fffu);
            mb = a > mb ? a : mb;
        }
        ok = mb < (d == ATTN_F16 ? 0x7c00u : 0x7f80u);
        m = attn__load_one(&mb, d, 0);
        break;
    }
    default: {
        const double *x = p;
        m = 0;
        ok = 1;
        for (int64_t i = 0; i < n; i++) {
            const double a = fabs(x[i * st]);
            ok &= isfinite(a);
            m = a > m ? a : m;
        }
        break;
    }
    }
    if (ok && m > *maxabs) *maxabs = m;
    return ok;
}

attn_status attn__check_finite_max(const attn_tensor *t, const char *name,
                                   double *maxabs) {
    double m = 0;
    if (maxabs) *maxabs = 0;
    if (t->dtype != ATTN_F32 && t->dtype != ATTN_F16 && t->dtype != ATTN_BF16 &&
        t->dtype != ATTN_F64)
        return ATTN_OK;
    size_t es = attn_dtype_size(t->dtype);
    for (int64_t a = 0; a < t->shape[0]; a++)
        for (int64_t b = 0; b < t->shape[1]; b++)
            for (int64_t c = 0; c < t->shape[2]; c++) {
                const char *row = (const char *)t->data +
                                  (size_t)attn__off(t, a, b, c, 0) * es;
                if (row_finite(row, t->dtype, t->shape[3], t->stride[3], &m))
                    continue;
                for (int64_t d = 0; d < t->shape[3]; d++) {
                    double x = attn_tensor_get(t, a, b, c, d);
                    if (!isfinite(x))
                        return attn__fail(ATTN_E_NONFINITE,
                                          "%s[%lld, %lld, %lld, %lld] is %s",
                                          name, (long long)a, (long long)b,
                                          (long long)c, (long long)d,
                                          isnan(x) ? "NaN" : "Inf");
                }
            }
    if (maxabs) *maxabs = m;
    return ATTN_OK;
}

attn_status attn__check_finite(const attn_tensor *t, const char *name) {
    return attn__check_finite_max(t, name, NULL);
}

float *attn__f32_copy(const attn_tensor *t) {
    float *dst =
        attn__alloc((size_t)attn_tensor_numel(t), sizeof(float), "f32 copy");
    if (!dst) return NULL;
    float *p = dst;
    for (int64_t a = 0; a < t->shape[0]; a++)
        for (int64_t h = 0; h < t->shape[1]; h++)
            for (int64_t l = 0; l < t->shape[2]; l++)
                for (int64_t d = 0; d < t->shape[3]; d++)
                    *p++ = (float)attn_tensor_get(t, a, h, l, d);
    return dst;
}
