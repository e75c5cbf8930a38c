/* The demo gallery's part 8: additive vs dot-product attention timed on
 * the spot, on a shape small enough for the demo (the full-size table is
 * `attn bench --layers`, in docs/layers.md). */
#include "cli.h"
#include "bench_layers.h"

#include <omp.h>

static const int64_t speed_L[2] = {100, 256};

int gallery_speed(const char *cmd, demo_gallery *g) {
    gallery_section(g, "8. Additive vs dot-product attention: speed");
    /* --quick (the sanitizer tests): the same code on less work */
    const int SPEED_B = g->quick ? 2 : 4, SPEED_REPS = g->quick ? 1 : 5;
    bench_layers_opts o = {0, 0, SPEED_REPS};
    char note[640];
    snprintf(note, sizeof note,
             "Measured just now by attn demo: B = %d, L = "
             "%lld and %lld, d_model 512, self-attention; 8 heads of 64 for "
             "dot-product, A = 256 for additive; encoder layers with "
             "dim_feedforward 2048; best of %d after a warm-up, %d threads. "
             "A reduced shape so that the demo stays short: docs/layers.md has "
             "the full-size table (B = 32, L = 100 and 512), made by "
             "attn bench --layers. Small shapes on a busy machine are noisy: "
             "compare within a row pair.",
             SPEED_B, (long long)speed_L[0], (long long)speed_L[1], SPEED_REPS,
             omp_get_max_threads());
    gallery_note(g, note);
    gallery_table_row(g, "layer\tL\tforward ms\tfwd+bwd ms\tworkspace MiB\t"
                         "additive / dot (fwd, fwd+bwd)");
    printf("(8) additive vs dot-product (B = %d, d_model 512, best of %d; the "
           "docs/layers.md has B = 32):\n   %-33s %5s %11s %11s %9s  %s\n",
           SPEED_B, SPEED_REPS, "layer", "L", "forward ms", "fwd+bwd ms",
           "ws MiB", "additive / dot");
    for (int li = 0; li < 2; li++) {
        bench_layers_result r[BENCH_LAYERS_KINDS];
        for (int k = 0; k < BENCH_LAYERS_KINDS; k++) {
            attn_status st = (attn_status)bench_layers_measure(
                k, SPEED_B, speed_L[li], &o, &r[k]);
            if (st) return cli_fail(cmd, st, bench_layers_name(k));
            char ratio[64] = "";
            if (k % 2 == 1) /* additive against the dot-product row above */
                snprintf(ratio, sizeof ratio, "%.2fx, %.2fx",
                         r[k].fwd / r[k - 1].fwd,
                         r[k].fwdbwd / r[k - 1].fwdbwd);
            const double mib = (double)r[k].ws_bytes / 1048576.0;
            char row[256];
            snprintf(row, sizeof row, "%s\t%lld\t%.1f\t%.1f\t%.1f\t%s",
                     bench_layers_name(k), (long long)speed_L[li],
                     1e3 * r[k].fwd, 1e3 * r[k].fwdbwd, mib, ratio);
            gallery_table_row(g, row);
            printf("   %-33s %5lld %11.1f %11.1f %9.1f  %s\n",
                   bench_layers_name(k), (long long)speed_L[li], 1e3 * r[k].fwd,
                   1e3 * r[k].fwdbwd, mib, ratio);
        }
    }
    return 0;
}
