/* The BLAS single-thread guard and OpenBLAS's choice of kernels (see
 * blas.h); the layers' sgemm is in sgemm.c. */
#include "blas.h"
#include "cpu.h"
#include "internal.h"

#include <cblas.h>
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
