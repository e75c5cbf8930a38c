/* The tutorial's comparison, measured: B = 32, L in {100, 512},
 * d_model = 512; multi-head attention with 8 heads against additive
 * attention with A = 256 (both self-attention with their projections),
 * then one encoder layer (dim_feedforward 2048) of each kind. Forward and
 * forward + backward wall time (best of reps) and the workspace each keeps
 * for backward. */
#include "bench_layers.h"

#include "attn.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    double fwd, fwdbwd; /* seconds */
    size_t ws_bytes;
} result;

enum { K_MHA, K_ADD, K_ENC_DOT, K_ENC_ADD };

static int one(int kind, int64_t B, int64_t L, const bench_layers_opts *o,
               result *r) {
    const int64_t E = 512;
    attn_mha_config mc = {E, 8, 0, 0, 0, 1};
    attn_additive_config ac = {E, E, E, 256, 1, 0};
    attn_encoder_config ec;
    attn_encoder_config_init(&ec);
    ec.attention = kind == K_ENC_ADD ? ATTN_ATTENTION_ADDITIVE : ATTN_ATTENTION_DOT;
    ec.additive_dim = 256;
    int64_t np = kind == K_MHA ? attn_mha_param_count(&mc)
                 : kind == K_ADD ? attn_additive_param_count(&ac)
                                 : attn_encoder_param_count(&ec);
    size_t wsn = 0;
    attn_status st = kind == K_MHA ? attn_mha_workspace_size(&mc, B, L, L, &wsn)
                     : kind == K_ADD ? attn_additive_workspace_size(&ac, B, L, L, &wsn)
                                     : attn_encoder_workspace_size(&ec, B, L, &wsn);
    if (st) return st;
    const size_t n = (size_t)(B * L * E);
    float *p = malloc(sizeof(float) * (size_t)np), *g = calloc((size_t)np, sizeof(float));
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    float *dx = calloc(n, sizeof(float)), *ws = malloc(sizeof(float) * wsn);
    if (!p || !g || !x || !y || !dx || !ws) {
        st = ATTN_E_NOMEM;
        goto out;
    }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1p-53 - 0.5);
    }
    st = kind == K_MHA ? attn_mha_init(&mc, p, 1)
         : kind == K_ADD ? attn_additive_init(&ac, p, 1) : attn_encoder_init(&ec, p, 1);
    if (st) goto out;
    attn_layer_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.threads = o->threads;
    r->fwd = r->fwdbwd = 1e30;
    r->ws_bytes = wsn * sizeof(float);
    for (int rep = 0; rep <= o->reps; rep++) { /* rep 0 warms up */
        for (int back = 0; back < 2; back++) {
            double t0 = now();
            st = kind == K_MHA ? attn_mha_forward(&mc, p, B, L, L, x, x, x, &opts, y, NULL, 0, ws)
                 : kind == K_ADD ? attn_additive_forward(&ac, p, B, L, L, x, x, x, &opts, y, NULL, ws)
                 : attn_encoder_forward(&ec, p, B, L, x, &opts, y, NULL, ws);
            if (st) goto out;
            if (back)
                st = kind == K_MHA ? attn_mha_backward(&mc, p, B, L, L, x, x, x, &opts, y, ws, g, dx, dx, dx)
                     : kind == K_ADD ? attn_additive_backward(&ac, p, B, L, L, x, x, x, &opts, y, ws, g, dx, dx, dx)
                     : attn_encoder_backward(&ec, p, B, L, x, &opts, y, ws, g, dx);
            if (st) goto out;
            double t = now() - t0;
            if (rep > 0) {
                double *slot = back ? &r->fwdbwd : &r->fwd;
                if (t < *slot) *slot = t;
            }
        }
    }
out:
    free(p); free(g); free(x); free(y); free(dx); free(ws);
    return st;
}

int bench_layers_run(FILE *f, const bench_layers_opts *o) {
    const int64_t B = o->quick ? 2 : 32;
    const int64_t Ls[2] = {100, 512};
    static const char *const names[4] = {
        "multi-head (dot, 8 heads)", "additive (A = 256)",
        "encoder layer, dot", "encoder layer, additive"};
    fprintf(f, "B = %lld, d_model = 512, self-attention with projections; "
               "best of %d; %d threads (0 = default)\n\n",
            (long long)B, o->reps, o->threads);
    fprintf(f, "| layer | L | forward ms | fwd+bwd ms | workspace MiB | "
               "additive / dot (fwd, fwd+bwd) |\n");
    fprintf(f, "| --- | --- | --- | --- | --- | --- |\n");
    for (int li = 0; li < 2; li++)
        for (int k = 0; k < 4; k++) {
            result r, rd;
            attn_status st = (attn_status)one(k, B, Ls[li], o, &r);
            if (st) {
                fprintf(stderr, "attn bench-layers: %s: %s\n", attn_strerror(st),
                        attn_last_error());
                return 1;
            }
            char ratio[64] = "";
            if (k == K_ADD || k == K_ENC_ADD) {
                if ((st = (attn_status)one(k - 1, B, Ls[li], o, &rd))) return 1;
                snprintf(ratio, sizeof ratio, "%.2fx, %.2fx", r.fwd / rd.fwd,
                         r.fwdbwd / rd.fwdbwd);
            }
            fprintf(f, "| %s | %lld | %.1f | %.1f | %.1f | %s |\n", names[k],
                    (long long)Ls[li], 1e3 * r.fwd, 1e3 * r.fwdbwd,
                    (double)r.ws_bytes / 1048576.0, ratio);
            fflush(f);
        }
    return 0;
}
