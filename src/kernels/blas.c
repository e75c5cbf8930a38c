/* The BLAS single-thread guard, OpenBLAS's choice of kernels and the
 * layers' sgemm: oneDNN's when its library loads, else OpenBLAS's (see
 * blas.h). */
#include "blas.h"
#include "cpu.h"
#include "internal.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
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

/* oneDNN's C entry points as libdnnl.so.2 exports them (dnnl.h; the
 * library is opened at run time, so that neither the build nor a program
 * linking libattn needs it). */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float,
                             const float *, int64_t, const float *, int64_t,
                             float, float *, int64_t);
typedef int (*dnnl_isa_fn)(int);
typedef struct {
    int major, minor, patch;
    const char *hash;
    unsigned cpu_runtime, gpu_runtime;
} dnnl_version_t;
typedef const dnnl_version_t *(*dnnl_version_fn)(void);

/* dnnl_cpu_isa_t: the caps that match attn's AVX2 and AVX-512 paths. */
enum { DNNL_ISA_SSE41 = 0x1, DNNL_ISA_AVX2 = 0x7, DNNL_ISA_AVX512 = 0x27 };

static dnnl_sgemm_fn dnnl_sgemm_p;
static char gemm_line[128];
static atomic_int gemm_ready; /* 0: not yet, 1: being made, 2: ready */

/* oneDNN takes its instruction set from the CPU; ATTN_ISA's cap (the
 * lower paths compared on one machine) caps it too, before its first
 * product. */
static void gemm_load(void) {
    const char *e = getenv("ATTN_SGEMM");
    const int want_blas = e && strcmp(e, "openblas") == 0;
    void *h = want_blas ? NULL : dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    dnnl_sgemm_fn f = h ? (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm") : NULL;
    dnnl_isa_fn cap = h ? (dnnl_isa_fn)dlsym(h, "dnnl_set_max_cpu_isa") : NULL;
    dnnl_version_fn ver = h ? (dnnl_version_fn)dlsym(h, "dnnl_version") : NULL;
    const attn__isa isa = attn__isa_get();
    const char *capped = isa < ATTN__ISA_AVX2     ? "sse41"
                         : isa < ATTN__ISA_AVX512 ? "avx2"
                         : isa < attn__isa_cpu()  ? "avx512_core"
                                                  : NULL;
    if (f && cap && capped)
        cap(isa < ATTN__ISA_AVX2     ? DNNL_ISA_SSE41
            : isa < ATTN__ISA_AVX512 ? DNNL_ISA_AVX2
                                     : DNNL_ISA_AVX512);
    if (f) {
        const dnnl_version_t *v = ver ? ver() : NULL;
        snprintf(gemm_line, sizeof gemm_line,
                 "oneDNN %d.%d.%d (libdnnl.so.2%s%s)", v ? v->major : 0,
                 v ? v->minor : 0, v ? v->patch : 0,
                 capped ? ", capped at " : "", capped ? capped : "");
        dnnl_sgemm_p = f;
    } else {
        snprintf(gemm_line, sizeof gemm_line, "OpenBLAS (%s)",
                 want_blas ? "ATTN_SGEMM=openblas" : "libdnnl.so.2 not found");
        if (h) dlclose(h);
    }
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
    return dnnl_sgemm_p != NULL;
}

void attn__sgemm(int ta, int tb, int m, int n, int k, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    gemm_init();
    if (dnnl_sgemm_p) {
        /* one thread: this task's team size is what oneDNN reads */
        const int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        dnnl_sgemm_p(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b,
                     ldb, beta, c, ldc);
        omp_set_num_threads(saved);
        return;
    }
    const int saved = attn__blas_single_begin();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
                beta, c, ldc);
    attn__blas_single_end(saved);
}
