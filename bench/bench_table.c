/* attn bench's table: the ceilings it is measured against, a row per
 * measurement (GFLOP/s, share of the ceilings, speedup over the
 * reference, error), or the same as JSON lines. */
#include "bench_table.h"

#include "attn.h"
#include "blas.h"
#include "cpu.h"
#include "flash.h"
#include "internal.h"

#include <string.h>

/* Visible pairs of one head: L^2, or L (L + 1) / 2 under a causal mask. */
static double pairs(const bench_case *c) {
    double L = (double)c->L;
    return c->causal ? L * (L + 1) / 2 : L * L;
}

void bench_row(const bench_runner *r, const bench_case *c, const char *impl,
               double ms, size_t extra, double speedup, double err,
               double bwd_ratio) {
    double fl =
        (bwd_ratio > 0 ? 2.5 : 1.0) * 4.0 * c->B * c->H * c->D * pairs(c);
    double gf = fl / (ms * 1e-3) * 1e-9;
    if (r->o->json) {
        fprintf(
            r->out,
            "{\"impl\": \"%s\", \"B\": %lld, \"H\": %lld, \"Lq\": %lld, "
            "\"Lk\": %lld, \"D\": %lld, \"causal\": %s, \"dtype\": \"%s\", "
            "\"threads\": %d, \"ms\": %.3f, \"gflops\": %.2f, "
            "\"ceiling_gflops\": %.2f, \"ratio\": %.3f, \"extra_bytes\": %zu, "
            "\"ceiling_bf16_gflops\": %.2f, \"ratio_bf16\": %.3f, "
            "\"fma_peak_gflops\": %.2f",
            bwd_ratio > 0 && !strcmp(impl, "bwd") ? "flash_bwd" : impl,
            (long long)c->B, (long long)c->H, (long long)c->L, (long long)c->L,
            (long long)c->D, c->causal ? "true" : "false",
            attn_dtype_name((attn_dtype)c->dtype), r->threads, ms, gf,
            r->ceiling, gf / r->ceiling, extra, r->ceil_bf16,
            r->ceil_bf16 > 0 ? gf / r->ceil_bf16 : 0.0, r->peak);
        if (speedup > 0) fprintf(r->out, ", \"speedup\": %.1f", speedup);
        if (err >= 0)
            fprintf(r->out,
                    bwd_ratio > 0 ? ", \"max_rel_err\": %.3g"
                                  : ", \"max_err\": %.3g",
                    err);
        if (bwd_ratio > 0)
            fprintf(r->out, ", \"bwd_fwd_ratio\": %.3f", bwd_ratio);
        fprintf(r->out, "}\n");
    } else {
        char sp[32] = "", er[32] = "", bf[32] = "", c16[32] = "";
        if (r->ceil_bf16 > 0)
            snprintf(c16, sizeof c16, "%.1f%%", 100.0 * gf / r->ceil_bf16);
        if (speedup > 0) snprintf(sp, sizeof sp, "%.1fx", speedup);
        if (err >= 0) snprintf(er, sizeof er, "%.1e", err);
        if (bwd_ratio > 0) snprintf(bf, sizeof bf, "%.2f", bwd_ratio);
        fprintf(
            r->out,
            "%6lld %4lld %-6s %-4s %-5s %10.2f %8.1f %6.1f%% %7s %8s %10.2f "
            "%9s %7s\n",
            (long long)c->L, (long long)c->D, c->causal ? "causal" : "full",
            attn_dtype_name((attn_dtype)c->dtype), impl, ms, gf,
            100.0 * gf / r->ceiling, c16, sp, (double)extra / 1048576.0, er,
            bf);
    }
    fflush(r->out);
}

void bench_print_head(const bench_runner *r, double g1, double g2) {
    FILE *out = r->out;
    const double gt = r->ceiling;
    if (r->o->json) {
        fprintf(out,
                "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, \"K\": 1024, "
                "\"threads\": 1, \"gflops\": %.2f}\n",
                g1);
        fprintf(out,
                "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, \"K\": 1024, "
                "\"threads\": 2, \"gflops\": %.2f}\n",
                g2);
        if (r->threads > 2)
            fprintf(out,
                    "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, "
                    "\"K\": 1024, \"threads\": %d, \"gflops\": %.2f}\n",
                    r->threads, gt);
        fprintf(out,
                "{\"impl\": \"gemm_bf16\", \"M\": 1024, \"N\": 1024, "
                "\"K\": 1024, \"threads\": %d, \"gflops\": %.2f}\n"
                "{\"impl\": \"fma_peak\", \"threads\": %d, \"gflops\": "
                "%.2f, \"isa\": \"%s\"}\n",
                r->threads, r->ceil_bf16, r->threads, r->peak,
                attn__isa_name(attn__isa_get()));
    } else {
        int64_t bq = 0, bk = 0;
        attn__sdpa_dims d = {1, 1, 1, 1 << 20, 1 << 20, 64, 64, 1, 0.125};
        attn__flash_tile_sizes(&d, &bq, &bk);
        fprintf(out,
                "attn bench: %d thread%s, kernels %s, %s, flash tiles "
                "%lldx%lld (bands of %lld rows; D=64)\n",
                r->threads, r->threads == 1 ? "" : "s", attn__isa_describe(),
                attn__blas_describe(), (long long)bq, (long long)bk,
                (long long)attn__flash_split_rows(&d));
        fprintf(out,
                "sgemm 1024^3 (the ceiling): 1 thread %.1f GFLOP/s, "
                "2 threads %.1f GFLOP/s",
                g1, g2);
        if (r->threads > 2)
            fprintf(out, ", %d threads %.1f GFLOP/s", r->threads, gt);
        if (r->ceil_bf16 > 0)
            fprintf(out,
                    "\nbf16 GEMM 1024^3 on the bf16 tile products (column "
                    "bf16 c): %.1f GFLOP/s on %d thread%s",
                    r->ceil_bf16, r->threads, r->threads == 1 ? "" : "s");
        else
            fprintf(out, "\nbf16 GEMM: none (the path lacks AVX512_BF16)");
        if (r->peak > 0)
            fprintf(out, "\nf32 FMA peak of %d core%s: %.1f GFLOP/s",
                    r->threads, r->threads == 1 ? "" : "s", r->peak);
        fprintf(out,
                "\nB=1 H=8; GFLOP/s = 4 B H D x visible pairs / time (bwd: "
                "2.5x that); %% of the %d-thread sgemm ceiling; bwd rows: "
                "backward up to L=%lld, max err relative to the largest "
                "gradient\n\n",
                r->threads, (long long)r->o->bwd_max_l);
        fprintf(out,
                "%6s %4s %-6s %-4s %-5s %10s %8s %7s %7s %8s %10s %9s %7s\n",
                "L", "D", "mask", "type", "impl", "ms", "GFLOP/s", "ceil",
                "bf16 c", "speedup", "extra MiB", "max err", "bwd/fwd");
    }
}

void bench_print_end(const bench_runner *r, double again) {
    FILE *out = r->out;
    const double gt = r->ceiling;
    if (r->o->json)
        fprintf(out,
                "{\"impl\": \"sgemm\", \"M\": 1024, \"N\": 1024, "
                "\"K\": 1024, \"threads\": %d, \"gflops\": %.2f, "
                "\"when\": \"end\"}\n",
                r->threads, again);
    else
        fprintf(out,
                "\nsgemm 1024^3 again at the end: %.1f GFLOP/s on %d "
                "thread%s (start: %.1f)\n",
                again, r->threads, r->threads == 1 ? "" : "s", gt);
}
