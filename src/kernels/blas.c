/* The BLAS single-thread guard (see blas.h). */
#include "blas.h"

#include <cblas.h>

int attn__blas_single_begin(void) {
    int saved = openblas_get_num_threads();
    if (saved != 1) openblas_set_num_threads(1);
    return saved;
}

void attn__blas_single_end(int saved) {
    if (saved != 1 && saved > 0) openblas_set_num_threads(saved);
}
