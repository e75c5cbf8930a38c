/* OpenBLAS as the kernels and layers use it (blas.c): the int dimensions
 * cblas takes and the single-thread guard around parallel regions; and the
 * layers' sgemm (sgemm.c). Layers and training include this, not flash.h.
 * Not installed. */
#ifndef ATTN_BLAS_H
#define ATTN_BLAS_H

#include <stdint.h>

/* int fits a BLAS dimension (cblas takes int). */
static inline int attn__blas_ok(int64_t n) { return n >= 0 && n <= 0x7fffffff; }

/* Debian's libopenblas0-pthread runs its own thread pool; inside our
 * OpenMP region each call must stay on its caller's thread (both for speed
 * and because the pool would serialize concurrent callers). begin sets
 * OpenBLAS to one thread and returns the previous count; end restores it.
 * We keep the pthread build rather than switching to libopenblas0-openmp:
 * every call the kernels make is single-threaded either way (measured: the
 * tile products run at 90-99 GFLOP/s per core, the 1024^3 sgemm at 95), so
 * the variant would change nothing here and would change the BLAS of every
 * other user of the machine. The setting is process-wide: two user threads
 * calling attn at once may race on the restore (never on results). */
int attn__blas_single_begin(void);
void attn__blas_single_end(int saved);

/* OpenBLAS's kernels. Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) takes some
 * virtual Xeons, whose cpuid model it does not know, for a Prescott and
 * runs its SSE3 sgemm kernels: measured 8.5 GFLOP/s on 2 threads against
 * 30-43 with its AVX-512 (SkylakeX) kernels on the same machine. OpenBLAS
 * reads OPENBLAS_CORETYPE once, when it is loaded, so a process can only
 * set it and start again (the CLI does; the Python package sets it before
 * loading the library). */
const char *attn__blas_core(void); /* openblas_get_corename()            */
/* The core to ask for ("SkylakeX", "Haswell") when OpenBLAS's own choice
 * uses narrower vectors than the kernel path attn__isa_get() takes; NULL
 * when its choice is right. */
const char *attn__blas_core_hint(void);
/* One line for `attn version` and the bench headers (static storage). */
const char *attn__blas_describe(void);

/* C (m, n) = op(A) op(B) + beta C, row-major, on the calling thread
 * (ta, tb: 1 for the transpose): oneDNN's dnnl_sgemm when the library is
 * built with it (ATTN_WITH_DNNL; measured on a prompt's products, 512 rows
 * against SmolLM2's weights: 1.1-2x OpenBLAS's sgemm on one thread of an
 * AVX-512 Xeon), else OpenBLAS's. The environment variable
 * ATTN_SGEMM=openblas keeps OpenBLAS (to compare), for the packed linear
 * maps too. Each library's bits depend on the shape and the CPU only: the
 * caller cuts a product into blocks by its shape, never by the thread
 * count. */
void attn__sgemm(int ta, int tb, int m, int n, int k, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
/* 1 when the linear maps run on oneDNN. The first call sets oneDNN's
 * instruction-set cap from ATTN_ISA, so it comes before any other oneDNN
 * call. */
int attn__sgemm_onednn(void);
/* "oneDNN 2.6.3" or "OpenBLAS (why)" (static storage). */
const char *attn__sgemm_describe(void);

#endif /* ATTN_BLAS_H */
