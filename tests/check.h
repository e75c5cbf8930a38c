/* A small test harness: CHECK records a failure and goes on; each test
 * program returns the number of failures (0 = pass) from check_done(). */
#ifndef ATTN_TEST_CHECK_H
#define ATTN_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond)                                                            \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            check_failures++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        check_count++;                                                         \
        if (!(cond)) {                                                         \
            check_failures++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                  \
    do {                                                                       \
        double check_a_ = (a), check_b_ = (b);                                 \
        check_count++;                                                         \
        if (!(fabs(check_a_ - check_b_) <= (tol))) {                           \
            check_failures++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s = %.9g, %s = %.9g (tol %g)\n",     \
                    __FILE__, __LINE__, #a, check_a_, #b, check_b_,            \
                    (double)(tol));                                            \
        }                                                                      \
    } while (0)

/* Status check that prints the library's message on mismatch. */
#define CHECK_STATUS(expr, want)                                               \
    do {                                                                       \
        attn_status check_st_ = (expr);                                        \
        check_count++;                                                         \
        if (check_st_ != (want)) {                                             \
            check_failures++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s gave %s (%s), wanted %s\n",        \
                    __FILE__, __LINE__, #expr, attn_strerror(check_st_),       \
                    attn_last_error(), attn_strerror(want));                   \
        }                                                                      \
    } while (0)

static inline int check_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

/* The whole of a file, NUL-terminated (for text), its length in *n; NULL
 * (with a message) if it cannot be read. free() it. */
static inline char *check_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    char *s =
        len >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)len + 1) : NULL;
    if (s) {
        *n = fread(s, 1, (size_t)len, f);
        s[*n] = 0;
    }
    fclose(f);
    return s;
}

/* Writes n bytes to path (e.g. a damaged copy of a file). */
static inline void check_spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(b, 1, n, f);
        fclose(f);
    }
}

/* Deterministic uniform numbers in [-1, 1) for tests (xorshift64*). */
static inline double test_rand(unsigned long long *state) {
    unsigned long long x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return (double)((x * 2685821657736338717ull) >> 11) * 0x1p-52 - 1.0;
}

#endif
