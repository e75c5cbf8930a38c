/* attn bench --gemv (bench_gemv.h). */
#include "bench_gemv.h"

#include "attn_gguf.h"
#include "cpu.h"
#include "../src/kernels/gemv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Random blocks with scales of a trained model's size (1e-3 .. 3e-2). */
static void fill_blocks(int type, unsigned char *q, size_t nbytes,
                        uint64_t *s) {
    const size_t bb = attn__q_row_bytes(type, 32);
    for (size_t i = 0; i < nbytes; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        q[i] = (unsigned char)(*s >> 56);
    }
    for (size_t at = 0; at + bb <= nbytes; at += bb) {
        q[at + 1] = 0x14 | (q[at + 1] & 0x83); /* exponent 2^-10 .. 2^-6 */
        if (type == ATTN_GGML_Q4_1) q[at + 3] = 0x94 | (q[at + 3] & 0x03);
    }
}

typedef int (*kernel)(int64_t, const attn__qmat *, const float *, float *, int);

/* Best of reps calls, ms. */
static double time_ms(kernel k, const attn__qmat *w, const float *x, float *y,
                      int threads, int reps) {
    double best = 1e30;
    k(1, w, x, y, threads);
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        k(1, w, x, y, threads);
        const double t = now_s() - t0;
        if (t < best) best = t;
    }
    return 1e3 * best;
}

int bench_gemv_run(int threads, int reps, FILE *out) {
    static const struct {
        const char *what;
        int64_t rows, cols;
        int type;
    } cases[] = {
        {"q, o", 576, 576, ATTN_GGML_Q4_1},
        {"k, v", 192, 576, ATTN_GGML_Q4_1},
        {"gate, up", 1536, 576, ATTN_GGML_Q4_1},
        {"down", 576, 1536, ATTN_GGML_Q4_1},
        {"head", 49152, 576, ATTN_GGML_Q8_0},
    };
    if (reps <= 0) reps = 200;
    uint64_t seed = 7;
    const attn__isa top = attn__isa_cpu();
    fprintf(out,
            "gemv on SmolLM2-135M's shapes, 1 row of x, %d thread(s), best of "
            "%d, W warm in the cache\n"
            "%-12s %-9s %-6s %-12s %9s %9s %9s %8s %9s %8s\n",
            threads, reps, "path", "matrix", "type", "rows x cols", "f32 x ms",
            "8-bit ms", "GB/s 8b", "speedup", "packed ms", "speedup");
    for (int isa = ATTN__ISA_SCALAR; isa <= ATTN__ISA_AVX512; isa++) {
        if (isa > (int)top) break;
        attn__isa_set_max((attn__isa)isa);
        double tot_f = 0.0, tot_i = 0.0, tot_p = 0.0;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const size_t rb = attn__q_row_bytes(cases[c].type, cases[c].cols);
            const size_t nbytes = rb * (size_t)cases[c].rows;
            unsigned char *q = malloc(nbytes), *qp = malloc(nbytes);
            float *x = malloc(sizeof(float) * (size_t)cases[c].cols);
            float *y = malloc(sizeof(float) * (size_t)cases[c].rows);
            if (!q || !qp || !x || !y) {
                free(q);
                free(qp);
                free(x);
                free(y);
                return 2;
            }
            fill_blocks(cases[c].type, q, nbytes, &seed);
            for (int64_t j = 0; j < cases[c].cols; j++)
                x[j] = (float)((j * 7919) % 201 - 100) / 50.0f;
            const attn__qmat w = {cases[c].type, cases[c].rows, cases[c].cols,
                                  q, 0};
            const int r = cases[c].rows > 10000 ? reps / 10 + 1 : reps;
            const double tf = time_ms(attn__gemv_q, &w, x, y, threads, r);
            const double ti = time_ms(attn__gemv_qx, &w, x, y, threads, r);
            /* the layout a model loaded on this path keeps */
            attn__q_pack(&w, qp);
            const attn__qmat wp = {w.type, w.rows, w.cols, qp, 1};
            const double tp = time_ms(attn__gemv_qx, &wp, x, y, threads, r);
            /* a layer holds q, o, k, v, gate, up and down once each */
            const double per = c == 0 || c == 1 || c == 2 ? 2.0 : 1.0;
            tot_f += per * (c == 4 ? 0.0 : tf);
            tot_i += per * (c == 4 ? 0.0 : ti);
            tot_p += per * (c == 4 ? 0.0 : tp);
            fprintf(out,
                    "%-12s %-9s %-6s %5lld x %-5lld %9.4f %9.4f %9.2f %7.2fx "
                    "%9.4f %7.2fx\n",
                    isa == ATTN__ISA_AVX512 ? attn__gemv_qx_path()
                                            : attn__isa_name((attn__isa)isa),
                    cases[c].what,
                    cases[c].type == ATTN_GGML_Q8_0 ? "Q8_0" : "Q4_1",
                    (long long)cases[c].rows, (long long)cases[c].cols, tf, ti,
                    (double)nbytes / (ti * 1e6), tf / ti, tp, tf / tp);
            free(q);
            free(qp);
            free(x);
            free(y);
        }
        fprintf(out,
                "%-12s %-9s %-6s %-12s %9.4f %9.4f %9s %7.2fx %9.4f %7.2fx\n",
                attn__isa_name((attn__isa)isa), "layer", "Q4_1", "(7 maps)",
                tot_f, tot_i, "", tot_f / tot_i, tot_p, tot_f / tot_p);
    }
    attn__isa_set_max(ATTN__ISA_AMX);
    return 0;
}
