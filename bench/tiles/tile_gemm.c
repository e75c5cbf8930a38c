/* The flash kernels' tile products on their real shapes, one thread, each
 * implementation checked against a double-precision product first, then
 * timed interleaved (best of REPS single calls) and printed as GFLOP/s, as a
 * fraction of this core's FMA peak (measured here) and against OpenBLAS:
 *
 *   scores  S = Q K^T   m x n x k = 256 x 256 x D, bands of 32 rows and
 *                       the forward's chunks of 16 rows
 *   output  O += P V    m x n x k = 256 x D x 256, 32 and 16 rows
 *
 * Every implementation runs on one thread (oneDNN's sgemm would otherwise
 * take all of OpenMP's). attn's products of 32 and 16 rows use a key tile
 * packed beforehand, as the flash kernels pack a key tile once for all its
 * rows; on the 256-row shapes they pack it in the call, as the libraries do.
 *
 * Implementations: OpenBLAS cblas_sgemm (single thread), oneDNN's
 * dnnl_sgemm (its own runtime ISA dispatch), LIBXSMM's JIT kernels
 * (libxsmm_smmdispatch, column-major: C^T = B^T A^T) and attn's AVX-512
 * micro-kernels (src/kernels/tile.c); on bf16-rounded copies of the
 * operands, attn's bf16 products (src/kernels/tile_bf16.c: vdpbf16ps, or
 * AMX tiles where the CPU has them) and oneDNN's bf16 matmul primitive
 * (created once per shape, as a flash kernel would reuse it; the row names
 * the implementation oneDNN chose, and it repacks the plain bf16 weights in
 * every call where attn packs them beforehand). Built as `attn_tile_gemm`
 * when CMake finds libdnnl and libxsmm (make deps installs them); run
 * build/attn_tile_gemm [reps]. */
#include "../../src/kernels/cpu.h"
#include "../../src/kernels/tile.h"
#include "../../src/kernels/tile_bf16.h"
#include "attn.h"

#include <cblas.h>
#include <immintrin.h>
#include <libxsmm.h>
#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OPENBLAS, DNNL, XSMM, OWN, OWN_BF16, DNNL_BF16, NIMPL };
static const char *const names[NIMPL] = {
    "openblas", "onednn", "libxsmm", "attn avx512", "attn bf16", "onednn bf16"};

typedef struct {
    const char *what;
    int nt; /* 1: C = alpha A B^T (B is n x k); 0: C += A B (B is k x n) */
    int m, n, k;
} shape;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 16 independent chains of zmm FMAs, in bursts of about 0.2 ms (best of
 * 2000, so that a shared machine's time slices do not count): this core's
 * f32 FMA peak. */
__attribute__((target("avx512f"))) static double fma_peak(void) {
    __m512 a[16];
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    const long n = 2000;
    double best = 1e30;
    for (int rep = 0; rep < 2000; rep++) {
        double t0 = now();
        for (long it = 0; it < n; it++)
            for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
        double t = now() - t0;
        if (t < best) best = t;
    }
    float s = 0;
    for (int i = 0; i < 16; i++) s += _mm512_reduce_add_ps(a[i]);
    if (s == 12345.0f) printf(" ");
    return 2.0 * 16 * 16 * (double)n / best * 1e-9;
}

typedef struct {
    libxsmm_smmfunction xk;
    float *pack;
    attn__tile_bt bt; /* B packed once (the 32- and 16-row shapes) */
    /* bf16 copies: A (rows padded to even), B packed once (as the flash
     * kernel packs a key tile once for all its blocks) */
    uint16_t *ab, *bp;
    int ldab, bf16;
    /* oneDNN's bf16 matmul on ab and the plain bf16 B, into C */
    dnnl_stream_t stream;
    dnnl_primitive_t mm;
    dnnl_memory_t mem[3];
    const char *mm_impl;
} impl_state;

/* The bf16 matmul primitive for shape s: src A (m x k, rows of ldab), weights
 * B (k x n: bb, which is n x k for Q K^T and described transposed by its
 * strides), dst C f32 (m x n), with Q K^T's scale as an output scale and
 * P V's accumulation as a sum post-op. 0 (no primitive) on any failure. */
static int onednn_bf16_prepare(impl_state *st, const shape *s,
                               dnnl_engine_t eng, uint16_t *bb, float *C) {
    const dnnl_dims_t da = {s->m, s->k}, sa = {st->ldab, 1};
    const dnnl_dims_t db = {s->k, s->n},
                      sb = {s->nt ? 1 : s->n, s->nt ? s->k : 1};
    const dnnl_dims_t dc = {s->m, s->n}, sc = {s->n, 1};
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    const float scale = 0.125f;
    int ok = dnnl_memory_desc_init_by_strides(&md[0], 2, da, dnnl_bf16, sa) ==
                 dnnl_success &&
             dnnl_memory_desc_init_by_strides(&md[1], 2, db, dnnl_bf16, sb) ==
                 dnnl_success &&
             dnnl_memory_desc_init_by_strides(&md[2], 2, dc, dnnl_f32, sc) ==
                 dnnl_success &&
             dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]) ==
                 dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && s->nt)
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale) ==
             dnnl_success;
    else if (ok)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok &&
         dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL) ==
             dnnl_success &&
         dnnl_primitive_create(&st->mm, pd) == dnnl_success;
    void *const handle[3] = {st->ab, bb, C};
    for (int i = 0; ok && i < 3; i++)
        ok = dnnl_memory_create(&st->mem[i], &md[i], eng, handle[i]) ==
             dnnl_success;
    if (ok) {
        /* the primitive owns its descriptor; this string lives as long */
        const_dnnl_primitive_desc_t own = NULL;
        ok = dnnl_primitive_get_primitive_desc(st->mm, &own) == dnnl_success &&
             dnnl_primitive_desc_query(own, dnnl_query_impl_info_str, 0,
                                       (void *)&st->mm_impl) == dnnl_success;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok && st->mm_impl;
}

static void onednn_bf16_release(impl_state *st) {
    for (int i = 0; i < 3; i++)
        if (st->mem[i]) dnnl_memory_destroy(st->mem[i]);
    if (st->mm) dnnl_primitive_destroy(st->mm);
}

static int run(int impl, const shape *s, const float *A, const float *B,
               float *C, const impl_state *st) {
    const float alpha = s->nt ? 0.125f : 1.0f, beta = s->nt ? 0.0f : 1.0f;
    const int lda = s->k, ldb = s->nt ? s->k : s->n, ldc = s->n;
    switch (impl) {
    case OPENBLAS:
        cblas_sgemm(CblasRowMajor, CblasNoTrans,
                    s->nt ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, alpha,
                    A, lda, B, ldb, beta, C, ldc);
        return 1;
    case DNNL:
        return dnnl_sgemm('N', s->nt ? 'T' : 'N', s->m, s->n, s->k, alpha, A,
                          lda, B, ldb, beta, C, ldc) == dnnl_success;
    case XSMM:
        if (!st->xk) return 0;
        /* column-major: C^T (n x m) = op(B) A^T */
        st->xk(B, A, C);
        return 1;
    case DNNL_BF16: {
        if (!st->mm_impl) return 0;
        const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, st->mem[0]},
                                         {DNNL_ARG_WEIGHTS, st->mem[1]},
                                         {DNNL_ARG_DST, st->mem[2]}};
        return dnnl_primitive_execute(st->mm, st->stream, 3, args) ==
                   dnnl_success &&
               dnnl_stream_wait(st->stream) == dnnl_success;
    }
    case OWN_BF16:
        if (!st->bf16) return 0;
        if (s->nt)
            attn__bf16_nt(s->m, 0, s->n, s->k, alpha, st->ab, st->ldab, st->bp,
                          C, ldc);
        else
            attn__bf16_nn_acc(s->m, s->n, s->k, 0, (s->k + 1) / 2, st->ab,
                              st->ldab, st->bp, C, ldc, alpha);
        return 1;
    default:
        if (s->nt && s->m <= 32 && st->bt.packed) {
            attn__tile_nt(s->m, 0, s->n, alpha, A, lda, &st->bt, C, ldc);
            return 1;
        }
        if (s->nt)
            return attn__tile_nt_avx512(s->m, s->n, s->k, alpha, A, lda, B, ldb,
                                        C, ldc, st->pack);
        return attn__tile_acc_avx512(0, s->m, s->n, s->k, 1.0f, A, lda, B, ldb,
                                     C, ldc);
    }
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 300;
    if (reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: attn_tile_gemm [reps (1..100000)]\n");
        return 2;
    }
    openblas_set_num_threads(1);
    omp_set_num_threads(1);
    dnnl_set_max_cpu_isa(dnnl_cpu_isa_all);
    libxsmm_init();
    dnnl_engine_t eng = NULL;
    dnnl_stream_t stream = NULL;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) !=
            dnnl_success)
        stream = NULL; /* no oneDNN bf16 row */
    const double peak = attn__isa_cpu() >= ATTN__ISA_AVX512 ? fma_peak() : 0.0;
    printf("tile products, 1 thread; CPU path %s; f32 FMA peak of one core "
           "%.1f GFLOP/s (measured); OpenBLAS kernels: %s\n\n",
           attn__isa_name(attn__isa_cpu()), peak, openblas_get_corename());
    printf("| product | m x n x k | impl | GFLOP/s | of peak | / openblas "
           "| max rel err |\n| --- | --- | --- | ---: | ---: | ---: | ---: "
           "|\n");
    const shape shapes[] = {{"S = Q K^T", 1, 256, 256, 64},
                            {"S = Q K^T", 1, 256, 256, 128},
                            {"S = Q K^T band", 1, 32, 256, 64},
                            {"S = Q K^T chunk", 1, 16, 256, 64},
                            {"S = Q K^T chunk", 1, 16, 256, 128},
                            {"O += P V", 0, 256, 64, 256},
                            {"O += P V", 0, 256, 128, 256},
                            {"O += P V band", 0, 32, 64, 256},
                            {"O += P V chunk", 0, 16, 64, 256},
                            {"O += P V chunk", 0, 16, 128, 256}};
    int bad = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        const size_t na = (size_t)s->m * s->k, nb = (size_t)s->n * s->k,
                     nc = (size_t)s->m * s->n;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4),
              *C0 = malloc(nc * 4);
        double *R = malloc(nc * sizeof(double));
        impl_state st;
        memset(&st, 0, sizeof st);
        st.stream = stream;
        st.pack =
            aligned_alloc(64, attn__tile_nt_pack_floats(s->n, s->k) * 4 + 64);
        unsigned long long seed = 12345 + si;
        for (size_t i = 0; i < na + nb + nc; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            float v =
                (float)((double)(seed >> 40) / (double)(1ULL << 24)) - 0.5f;
            if (i < na)
                A[i] = v;
            else if (i < na + nb)
                B[i - na] = v;
            else
                C0[i - na - nb] = v;
        }
        if (s->nt) attn__tile_bt_prepare(&st.bt, s->n, s->k, B, s->k, st.pack);
        st.bf16 = attn__isa_cpu() >= ATTN__ISA_AVX512_BF16;
        st.ldab = (s->k + 1) & ~1;
        st.ab = calloc((size_t)s->m * st.ldab, 2);
        uint16_t *bb = malloc(nb * 2);
        st.bp = malloc(attn__bf16_pack_elems(s->nt ? s->n : s->n, s->k) * 2);
        for (int i = 0; i < s->m; i++)
            for (int x = 0; x < s->k; x++)
                st.ab[(size_t)i * st.ldab + x] =
                    attn_f32_to_bf16(A[(size_t)i * s->k + x]);
        for (size_t i = 0; i < nb; i++) bb[i] = attn_f32_to_bf16(B[i]);
        if (s->nt)
            attn__bf16_pack_nt(s->n, s->k, bb, s->k, st.bp);
        else
            attn__bf16_pack_nn(s->k, s->n, bb, s->n, st.bp);
        if (stream && !onednn_bf16_prepare(&st, s, eng, bb, C))
            st.mm_impl = NULL;
        const libxsmm_blasint m = s->n, n = s->m, k = s->k;
        const libxsmm_blasint lda = s->nt ? s->k : s->n, ldb = s->k, ldc = s->n;
        const float alpha = s->nt ? 0.125f : 1.0f, beta = s->nt ? 0.f : 1.f;
        const int flags = s->nt ? LIBXSMM_GEMM_FLAG_TRANS_A : 0;
        const int pf = LIBXSMM_PREFETCH_NONE;
        st.xk = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta,
                                    &flags, &pf);
        double rmax = 0;
        for (int i = 0; i < s->m; i++)
            for (int j = 0; j < s->n; j++) {
                double acc = 0;
                for (int x = 0; x < s->k; x++)
                    acc += (double)A[(size_t)i * s->k + x] *
                           (s->nt ? B[(size_t)j * s->k + x]
                                  : B[(size_t)x * s->n + j]);
                R[(size_t)i * s->n + j] =
                    s->nt ? 0.125 * acc : C0[(size_t)i * s->n + j] + acc;
                if (fabs(R[(size_t)i * s->n + j]) > rmax)
                    rmax = fabs(R[(size_t)i * s->n + j]);
            }
        double best[NIMPL], err[NIMPL];
        int ok[NIMPL];
        for (int im = 0; im < NIMPL; im++) {
            memcpy(C, C0, nc * 4);
            ok[im] = run(im, s, A, B, C, &st);
            err[im] = 0;
            for (size_t i = 0; ok[im] && i < nc; i++) {
                double e = fabs(C[i] - R[i]) / rmax;
                if (!(e <= err[im])) err[im] = e;
            }
            /* bf16 operands: their rounding (2^-9 relative each) */
            if (ok[im] &&
                !(err[im] <
                  (im == OWN_BF16 || im == DNNL_BF16 ? 2e-2 : 1e-5))) {
                printf("%s %s: wrong result (err %.3g)\n", s->what, names[im],
                       err[im]);
                ok[im] = 0;
                bad = 1;
            }
            best[im] = 1e30;
        }
        for (int r = 0; r < reps; r++)
            for (int im = 0; im < NIMPL; im++) {
                if (!ok[im]) continue;
                memcpy(C, C0, nc * 4);
                const int inner = 1; /* short: a shared machine's
                                        * time slices fall between */
                double t0 = now();
                for (int x = 0; x < inner; x++) run(im, s, A, B, C, &st);
                double t = (now() - t0) / inner;
                if (t < best[im]) best[im] = t;
            }
        const double flop = 2.0 * s->m * s->n * s->k;
        for (int im = 0; im < NIMPL; im++) {
            if (!ok[im]) {
                printf("| %s | %d x %d x %d | %s | n/a | | | |\n", s->what,
                       s->m, s->n, s->k, names[im]);
                continue;
            }
            const double g = flop / best[im] * 1e-9;
            printf("| %s | %d x %d x %d | %s%s%s%s | %.1f | %.2f | %.2fx | "
                   "%.1e |\n",
                   s->what, s->m, s->n, s->k, names[im],
                   im == DNNL_BF16 ? " (" : "",
                   im == DNNL_BF16 ? st.mm_impl : "",
                   im == DNNL_BF16 ? ")" : "", g, peak > 0 ? g / peak : 0.0,
                   ok[OPENBLAS] ? best[OPENBLAS] / best[im] : 0.0, err[im]);
        }
        onednn_bf16_release(&st);
        free(A);
        free(B);
        free(C);
        free(C0);
        free(R);
        free(st.pack);
        free(st.ab);
        free(st.bp);
        free(bb);
    }
    if (stream) dnnl_stream_destroy(stream);
    if (eng) dnnl_engine_destroy(eng);
    libxsmm_finalize();
    return bad;
}
