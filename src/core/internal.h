/* The ground floor of the library's internals: messages and failures,
 * overflow-checked sizes, aligned allocation, element access and dtype
 * conversion. Every source file includes it; it includes nothing of src/.
 * The mask's internals are in mask.h, the kernels' in kernels/kernels.h.
 * Not installed. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn.h"

#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>

/* The ring library (libattn_dist, src/dist/) is built apart from libattn
 * and calls a few of its internal functions (the flash kernel at an offset,
 * the argument check, messages, allocation). Those are exported from
 * libattn.so on purpose, marked ATTN__RING_API, so that a ring program
 * links with `-lattn_dist -lattn` against the shared library as well as the
 * static one. They are not the public API and carry no promise to
 * programs; test exported_symbols allows exactly these. */
#define ATTN__RING_API __attribute__((visibility("default")))

/* Records a detail message for this thread and returns status, so that
 * callers can write `return attn__fail(ATTN_E_SHAPE, "k has %d ...", n);`. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
ATTN__RING_API attn_status
attn__fail(attn_status status, const char *fmt, ...);

/* Copies in to out (cap bytes, NUL-terminated, cut at a whole character)
 * with control bytes, DEL and bytes that are not valid UTF-8 written as
 * \xNN; valid UTF-8 is kept. Returns the length written. attn__fail
 * passes every message through it. */
size_t attn__escape(const char *in, char *out, size_t cap);

/* The UTF-8 character at s[0 .. avail) (avail >= 1): its length 1..4 with
 * its code point in *cp, or 0 when s does not start valid UTF-8 (a stray
 * or cut-short sequence, an overlong form, a surrogate, a code point past
 * U+10FFFF). A NUL byte ends a sequence, so a NUL-terminated string may
 * pass avail SIZE_MAX. */
static inline size_t attn__utf8_next(const unsigned char *s, size_t avail,
                                     uint32_t *cp) {
    const unsigned c = s[0];
    size_t n;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, v = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, v = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, v = c & 0x07;
    else
        return 0;
    if (avail < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) ||
        (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

/* 1 if the NUL-terminated s is valid UTF-8 (as attn__escape judges it). */
int attn__utf8_valid(const char *s);

/* Internal invariant (never a caller mistake): abort with file and line. */
#define ATTN_ASSERT(cond)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "attn: internal error %s:%d: %s\n", __FILE__,      \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Overflow-checked products: return 0 and leave *out untouched on overflow
 * or negative operands. */
static inline int attn__mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static inline int attn__mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Allocation of n elements of size sz, 64-byte aligned, NULL on overflow or
 * failure (with the message set). Free with attn__free. */
ATTN__RING_API void *attn__alloc(size_t n, size_t sz, const char *what);
ATTN__RING_API void attn__free(void *p);

/* attn__free on each of n pointers (NULL ones skipped). ATTN__FREE_ALL
 * releases an object's buffers and the object itself in one call. */
void attn__free_each(void *const *p, size_t n);
#define ATTN__FREE_ALL(...)                                                    \
    attn__free_each((void *const[]){__VA_ARGS__},                              \
                    sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

/* ATTN_E_INVALID "<name> is NULL" for the first NULL of n pointers, named
 * in order by the comma-separated names; ATTN_OK when none is NULL.
 * ATTN__NONNULL returns that failure from the calling function. */
attn_status attn__nonnull(const char *names, const void *const *p, size_t n);
#define ATTN__NONNULL(names, ...)                                              \
    do {                                                                       \
        attn_status nonnull_st_ = attn__nonnull(                               \
            names, (const void *const[]){__VA_ARGS__},                         \
            sizeof((const void *const[]){__VA_ARGS__}) / sizeof(void *));      \
        if (nonnull_st_) return nonnull_st_;                                   \
    } while (0)

/* The index of name among the n names, or -1. */
int attn__name_index(const char *const *names, int n, const char *name);

/* Token ids and sequence lengths as the models take them: ATTN_E_INVALID
 * "name[i] is x; ids are 0..vocab-1" unless each of the n ids is in
 * [0, vocab); ATTN_E_SHAPE "name[b] is x; it must be in [1, <bound>L]"
 * unless each of the B lengths (NULL: none given) is in [1, L], bound
 * naming L in the message ("" or e.g. "Ls = "). */
attn_status attn__ids_check(const int32_t *ids, int64_t n, int64_t vocab,
                            const char *name);
attn_status attn__lengths_check(const int64_t *lengths, int64_t B, int64_t L,
                                const char *name, const char *bound);

/* Bytes held through attn__alloc now, and the most held since the last
 * attn__alloc_peak_reset (0 where the C library cannot tell block sizes).
 * The benchmark measures a kernel's extra memory with them. */
size_t attn__alloc_current(void);
size_t attn__alloc_peak(void);
void attn__alloc_peak_reset(void);

/* Element offset of (i0, i1, i2, i3) in a view. */
static inline int64_t attn__off(const attn_tensor *t, int64_t i0, int64_t i1,
                                int64_t i2, int64_t i3) {
    return i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] +
           i3 * t->stride[3];
}

/* Loads n contiguous elements of a floating dtype (f32, f16, bf16, f64) at
 * src into f32 dst. */
void attn__load_f32(const void *src, attn_dtype dtype, int64_t n, float *dst);

/* 1 for f32, f16, bf16 and f64. */
ATTN__RING_API int attn__is_float_dtype(attn_dtype d);

/* A contiguous f32 copy of t (any dtype and strides; attn__free), or NULL
 * when out of memory. */
ATTN__RING_API float *attn__f32_copy(const attn_tensor *t);

/* Team size for an OpenMP loop: threads, or the OpenMP default when 0
 * (1 without OpenMP). */
static inline int attn__omp_threads(int threads) {
#ifdef _OPENMP
    return threads > 0 ? threads : omp_get_max_threads();
#else
    return threads > 0 ? threads : 1;
#endif
}

/* Element i of a contiguous array of any dtype, as double. */
double attn__load_one(const void *src, attn_dtype d, size_t i);

/* n elements of any dtype at src into a float dtype (f32, f16, bf16, f64)
 * at dst, unchecked: attn_convert validates, then calls this. */
ATTN__RING_API void attn__convert_to_float(const void *src,
                                           attn_dtype src_dtype, void *dst,
                                           attn_dtype dst_dtype, size_t n);

/* Checks a tensor for NaN/Inf (ATTN_E_NONFINITE with the first position). */
ATTN__RING_API attn_status attn__check_finite(const attn_tensor *t,
                                              const char *name);
/* The same, also giving the largest |element| in *maxabs (0 if none). */
attn_status attn__check_finite_max(const attn_tensor *t, const char *name,
                                   double *maxabs);

/* The splitmix64 finalizer: a well-mixed 64-bit hash of z. The random block
 * pattern, the training RNG's seeding and its stream seeds all use it. */
static inline uint64_t attn__splitmix64_final(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif /* ATTN_INTERNAL_H */
