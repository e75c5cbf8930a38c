/* The ceilings attn bench measures besides OpenBLAS's sgemm: the f32 FMA
 * peak of the cores (independent FMA chains, no memory) and a bf16 GEMM
 * (n^3 on the bf16 tile products, rows split over the threads). */
#include "bench.h"
#include "cpu.h"
#include "tile_bf16.h"

#include "attn.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BENCH_X86 1
#else
#define BENCH_X86 0
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if BENCH_X86
/* 16 chains of zmm FMAs on one thread, in bursts of about 0.1 ms; the best
 * burst's GFLOP/s (a shared machine's time slices fall between bursts) */
__attribute__((target("avx512f"))) static double fma_burst_best(void) {
    __m512 a[16];
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    const long n = 1000;
    double best = INFINITY;
    for (int rep = 0; rep < 1000; rep++) {
        double t0 = now();
        for (long it = 0; it < n; it++)
            for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
        double t = now() - t0;
        if (t < best) best = t;
    }
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    volatile float sink = s;
    (void)sink;
    return 2.0 * 16 * 16 * (double)n / best * 1e-9;
}
#endif

double bench_fma_peak(int threads) {
#if BENCH_X86
    if (attn__isa_cpu() < ATTN__ISA_AVX512) return 0.0;
    double sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += fma_burst_best();
    return sum;
#else
    (void)threads;
    return 0.0;
#endif
}

double bench_bf16_gemm_gflops(int n, int threads) {
    if (attn__isa_get() < ATTN__ISA_AVX512_BF16) return 0.0;
    const size_t nn = (size_t)n * (size_t)n;
    uint16_t *a = malloc(nn * 2), *b = malloc(nn * 2),
             *p = malloc(attn__bf16_pack_elems(n, n) * 2);
    float *c = malloc(nn * sizeof(float));
    double best = INFINITY;
    if (a && b && p && c) {
        unsigned long long s = 7;
        for (size_t i = 0; i < nn; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            a[i] = attn_f32_to_bf16((float)(s >> 40) * 0x1p-24f - 0.5f);
            b[i] = a[(i * 7919) % nn];
        }
        attn__bf16_pack_nt(n, n, b, n, p);
        for (int r = 0; r < 5; r++) {
            double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
            for (int i = 0; i < n; i += 64)
                attn__bf16_nt(n - i < 64 ? n - i : 64, 0, n, n, 1.0f,
                              a + (size_t)i * n, n, p, c + (size_t)i * n, n);
            double t = now() - t0;
            if (t < best) best = t;
        }
    }
    free(a);
    free(b);
    free(p);
    free(c);
    return isfinite(best) ? 2.0 * n * (double)n * n / best * 1e-9 : 0.0;
}
