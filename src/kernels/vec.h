/* Vectorized row helpers of the flash kernels: exp, max, sums, scaling.
 *
 * Each helper has a portable scalar version and an AVX2+FMA version (and,
 * where it pays, an AVX-512 one); attn__vec_get() follows the process's
 * instruction-set path (cpu.h), so one binary runs everywhere.
 * Results are deterministic for a given level: lanes are reduced in a fixed
 * order, so the same row gives the same bits on any thread.
 *
 * exp semantics (all levels): exp(-inf) = 0 exactly, exp(0) = 1 exactly,
 * results below FLT_MIN (x < -87.34) flush to 0, x > 88.72 gives +inf. In
 * between the vector exp is within a few ulp of libm (tests/test_vec.c). */
#ifndef ATTN_VEC_H
#define ATTN_VEC_H

#include "cpu.h"

#include <stdint.h>

typedef enum {
    ATTN__VEC_SCALAR = 0,
    ATTN__VEC_AVX2 = 1,  /* AVX2 + FMA                                  */
    ATTN__VEC_AVX512 = 2 /* AVX-512F (+ the AVX2 ones for the rest)     */
} attn__vec_level;

typedef struct {
    attn__vec_level level;
    /* y[i] = exp(x[i]); x and y may be the same array */
    void (*exp)(const float *x, float *y, int64_t n);
    /* max of x[0..n) (-inf for n == 0) */
    float (*max)(const float *x, int64_t n);
    /* x[i] = exp(x[i] - m) in place, returns the sum of the new x. m must be
     * finite; x[i] = -inf gives 0. */
    float (*exp_sub_sum)(float *x, int64_t n, float m);
    /* x[i] *= a */
    void (*scale)(float *x, int64_t n, float a);
    /* soft-capping in place: x[i] = cap * tanh(x[i] / cap), and, when capd
     * is not NULL, capd[i] = 1 - tanh^2 (the cap's slope, for backward).
     * cap > 0, x finite. tanh is a rational function (attn__vec_tanh1),
     * within 4e-7 of tanh and never beyond +-1. */
    void (*softcap)(float *x, int64_t n, float cap, float *capd);
} attn__vec_ops;

/* y[i] = bf16(exp(a x[i] - m)) (rounded to nearest even), returns the
 * f32 sum of the unrounded exps, lanes reduced in a fixed order. a > 0, m
 * finite. AVX512_BF16 only: the bf16 flash forward's fused softmax step. */
float attn__vec_exp_bf16(const float *x, int64_t n, float a, float m,
                         uint16_t *y);

/* The scalar tanh of the soft-cap op, for tests and scalar callers. */
float attn__vec_tanh1(float y);

/* The level of the process's path (attn__isa_get, at most AVX-512). */
attn__vec_level attn__vec_best(void);

/* The table of a level (a level the CPU lacks gives the scalar table). */
const attn__vec_ops *attn__vec_table(attn__vec_level level);

/* The table of attn__vec_best(): what the kernels use. */
static inline const attn__vec_ops *attn__vec_get(void) {
    return attn__vec_table(attn__vec_best());
}

/* Caps the process's path at this level (attn__isa_set_max; AVX-512, the
 * top level, lifts the cap): tests run the kernels on the scalar and AVX2
 * paths of an AVX-512 machine with it. Not thread-safe: call it while no
 * kernel runs. */
void attn__vec_set_max_level(attn__vec_level level);

#endif /* ATTN_VEC_H */
