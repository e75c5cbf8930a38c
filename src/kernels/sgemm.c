/* The layers' sgemm (blas.h): oneDNN's when the library is built with it,
 * else OpenBLAS's. A file of its own so that a static link pulls oneDNN in
 * only with the layers. */
#include "blas.h"
#include "cpu.h"

#include <cblas.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef ATTN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static int use_dnnl;
static char gemm_line[128];
static atomic_int gemm_ready; /* 0: not yet, 1: being made, 2: ready */

/* ATTN_SGEMM=openblas keeps every linear map on OpenBLAS. oneDNN takes its
 * instruction set from the CPU; ATTN_ISA's cap (the lower paths compared
 * on one machine) caps it too, which oneDNN accepts only before its first
 * kernel: attn__sgemm_onednn() runs this before any oneDNN call. */
static void gemm_load(void) {
    const char *e = getenv("ATTN_SGEMM");
    const int want_blas = e && strcmp(e, "openblas") == 0;
#ifdef ATTN_HAVE_DNNL
    if (!want_blas) {
        const attn__isa isa = attn__isa_get();
        const char *capped = isa < ATTN__ISA_AVX2     ? "sse41"
                             : isa < ATTN__ISA_AVX512 ? "avx2"
                             : isa < attn__isa_cpu()  ? "avx512_core"
                                                      : NULL;
        if (capped)
            dnnl_set_max_cpu_isa(isa < ATTN__ISA_AVX2 ? dnnl_cpu_isa_sse41
                                 : isa < ATTN__ISA_AVX512
                                     ? dnnl_cpu_isa_avx2
                                     : dnnl_cpu_isa_avx512_core);
        const dnnl_version_t *v = dnnl_version();
        snprintf(gemm_line, sizeof gemm_line, "oneDNN %d.%d.%d%s%s%s", v->major,
                 v->minor, v->patch, capped ? " (capped at " : "",
                 capped ? capped : "", capped ? ")" : "");
        use_dnnl = 1;
        return;
    }
#endif
    snprintf(gemm_line, sizeof gemm_line, "OpenBLAS (%s)",
             want_blas ? "ATTN_SGEMM=openblas" : "built without oneDNN");
}

static void gemm_init(void) {
    if (atomic_load_explicit(&gemm_ready, memory_order_acquire) == 2) return;
    int expect = 0;
    if (atomic_compare_exchange_strong(&gemm_ready, &expect, 1)) {
        gemm_load();
        atomic_store_explicit(&gemm_ready, 2, memory_order_release);
    } else {
        while (atomic_load_explicit(&gemm_ready, memory_order_acquire) != 2) {
        }
    }
}

const char *attn__sgemm_describe(void) {
    gemm_init();
    return gemm_line;
}

int attn__sgemm_onednn(void) {
    gemm_init();
    return use_dnnl;
}

void attn__sgemm(int ta, int tb, int m, int n, int k, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
#ifdef ATTN_HAVE_DNNL
    if (attn__sgemm_onednn()) {
        /* one thread: this task's team size is what oneDNN reads */
        const int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b,
                   ldb, beta, c, ldc);
        omp_set_num_threads(saved);
        return;
    }
#endif
    const int saved = attn__blas_single_begin();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
                beta, c, ldc);
    attn__blas_single_end(saved);
}
