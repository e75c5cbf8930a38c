/* The BLAS single-thread guard, OpenBLAS's choice of kernels and the
 * layers' sgemm: oneDNN's when the library is built with it, else
 * OpenBLAS's (see blas.h). */
#include "blas.h"
#include "cpu.h"
#include "internal.h"

#include <cblas.h>
#include <omp.h>
#ifdef ATTN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int attn__blas_single_begin(void) {
    int saved = openblas_get_num_threads();
    if (saved != 1) openblas_set_num_threads(1);
    return saved;
}

void attn__blas_single_end(int saved) {
    if (saved != 1 && saved > 0) openblas_set_num_threads(saved);
}

const char *attn__blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

/* OpenBLAS cores whose sgemm kernels use AVX-512, and those using at
 * least AVX2 + FMA (names as openblas_get_corename gives them). */
static int core_in(const char *core, const char *const *list) {
    for (; *list; list++)
        if (strcasecmp(core, *list) == 0) return 1;
    return 0;
}
static const char *const cores_avx512[] = {"SkylakeX", "Cooperlake",
                                           "SapphireRapids", NULL};
static const char *const cores_avx2[] = {
    "Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", NULL};

const char *attn__blas_core_hint(void) {
    const attn__isa isa = attn__isa_get();
    const char *core = attn__blas_core();
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= ATTN__ISA_AVX512 && __builtin_cpu_supports("avx512dq"))
        return core_in(core, cores_avx512) ? NULL : "SkylakeX";
#endif
    if (isa >= ATTN__ISA_AVX2)
        return core_in(core, cores_avx2) ? NULL : "Haswell";
    return NULL;
}

const char *attn__blas_describe(void) {
    static char line[160];
    const char *env = getenv("OPENBLAS_CORETYPE"),
               *hint = attn__blas_core_hint();
    char esc[40];
    attn__escape(env ? env : "", esc, sizeof esc);
    snprintf(line, sizeof line,
             "OpenBLAS core %s (OPENBLAS_CORETYPE %s%s%s)%s%s%s",
             attn__blas_core(), env ? "'" : "unset", env ? esc : "",
             env ? "'" : "", hint ? ": below this CPU (OPENBLAS_CORETYPE=" : "",
             hint ? hint : "", hint ? " fits it)" : "");
    return line;
}

/* ---- the layers' sgemm ------------------------------------------------- */

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
