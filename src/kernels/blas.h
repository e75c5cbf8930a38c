/* OpenBLAS as the kernels and layers use it (blas.c): the int dimensions
 * cblas takes and the single-thread guard around parallel regions. Layers
 * and training include this, not flash.h. Not installed. */
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

#endif /* ATTN_BLAS_H */
