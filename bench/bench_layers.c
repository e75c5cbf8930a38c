/* The tutorial's comparison, measured: B = 32, L in {100, 512},
 * d_model = 512; multi-head attention with 8 heads against additive
 * attention with A = 256 (both self-attention with their projections),
 * then one encoder layer (dim_feedforward 2048) of each kind. Forward and
 * forward + backward wall time (best of reps) and the workspace each keeps
 * for backward. */
#include "bench_layers.h"
#include "blas.h"
#include "cpu.h"

#include "attn.h"
#include "attn_layers.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef bench_layers_result result;

enum { K_CORE_DOT, K_CORE_ADD, K_MHA, K_ADD, K_ENC_DOT, K_ENC_ADD, K_COUNT };

static const char *const names[K_COUNT] = {"core: dot-product SDPA (8 x 64)",
                                           "core: additive scores (A = 256)",
                                           "multi-head (dot, 8 heads)",
                                           "additive (A = 256)",
                                           "encoder layer, dot",
                                           "encoder layer, additive"};

const char *bench_layers_name(int kind) {
    return kind >= 0 && kind < K_COUNT ? names[kind] : "?";
}

/* The attention cores alone: SDPA on projected shapes (B, 8, L, 64), and
 * additive attention whose inputs have 1 feature (projections negligible,
 * the same L x L x 256 tanh work and 512-wide context). */
static int core_dot(int64_t B, int64_t L, const bench_layers_opts *o,
                    result *r) {
    const size_t n = (size_t)(B * L * 512);
    float *q = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
    float *dq = calloc(n * 3, sizeof(float)),
          *lse = malloc(sizeof(float) * (size_t)(B * 8 * L));
    attn_status st = ATTN_OK;
    if (!q || !out || !dq || !lse) {
        st = ATTN_E_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        q[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    attn_tensor Q = attn_tensor_bthd(q, ATTN_F32, B, L, 8, 64);
    attn_tensor O = attn_tensor_bthd(out, ATTN_F32, B, L, 8, 64);
    attn_tensor G[3];
    for (int i = 0; i < 3; i++)
        G[i] = attn_tensor_bthd(dq + (size_t)i * n, ATTN_F32, B, L, 8, 64);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.threads = o->threads;
    r->fwd = r->fwdbwd = 1e30;
    r->ws_bytes = sizeof(float) * (size_t)(B * 8 * L); /* lse */
    for (int rep = 0; rep <= o->reps; rep++)
        for (int back = 0; back < 2; back++) {
            double t0 = now();
            if ((st = attn_sdpa_forward(&Q, &Q, &Q, &opts, &O, NULL, lse)))
                goto out;
            if (back && (st = attn_sdpa_backward(&Q, &Q, &Q, &O, lse, &Q, &opts,
                                                 &G[0], &G[1], &G[2], NULL)))
                goto out;
            double t = now() - t0;
            double *slot = back ? &r->fwdbwd : &r->fwd;
            if (rep > 0 && t < *slot) *slot = t;
        }
out:
    free(q);
    free(out);
    free(dq);
    free(lse);
    return st;
}

int bench_layers_measure(int kind, int64_t B, int64_t L,
                         const bench_layers_opts *o, result *r) {
    const int64_t E = 512;
    if (kind < 0 || kind >= K_COUNT) return ATTN_E_INVALID;
    if (kind == K_CORE_DOT) return core_dot(B, L, o, r);
    attn_mha_config mc = {E, 8, 0, 0, 0, 1};
    attn_additive_config ac = {E, E, E, 256, 1, 0};
    if (kind == K_CORE_ADD) ac.query_dim = ac.key_dim = 1;
    attn_encoder_config ec;
    attn_encoder_config_init(&ec);
    ec.attention =
        kind == K_ENC_ADD ? ATTN_ATTENTION_ADDITIVE : ATTN_ATTENTION_DOT;
    ec.additive_dim = 256;
    const int add = kind == K_ADD || kind == K_CORE_ADD;
    int64_t np = kind == K_MHA ? attn_mha_param_count(&mc)
                 : add         ? attn_additive_param_count(&ac)
                               : attn_encoder_param_count(&ec);
    size_t wsn = 0;
    attn_status st = kind == K_MHA ? attn_mha_workspace_size(&mc, B, L, L, &wsn)
                     : add ? attn_additive_workspace_size(&ac, B, L, L, &wsn)
                           : attn_encoder_workspace_size(&ec, B, L, &wsn);
    if (st) return st;
    const size_t n = (size_t)(B * L * E);
    float *p = malloc(sizeof(float) * (size_t)np),
          *g = calloc((size_t)np, sizeof(float));
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    float *dx = calloc(n, sizeof(float)), *ws = malloc(sizeof(float) * wsn);
    if (!p || !g || !x || !y || !dx || !ws) {
        st = ATTN_E_NOMEM;
        goto out;
    }
    float *x1 = kind == K_CORE_ADD ? x + n / 2 : x; /* (B, L, 1) inputs */
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1p-53 - 0.5);
    }
    st = kind == K_MHA ? attn_mha_init(&mc, p, 1)
         : add         ? attn_additive_init(&ac, p, 1)
                       : attn_encoder_init(&ec, p, 1);
    if (st) goto out;
    attn_layer_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.threads = o->threads;
    r->fwd = r->fwdbwd = 1e30;
    r->ws_bytes = wsn * sizeof(float);
    for (int rep = 0; rep <= o->reps; rep++) { /* rep 0 warms up */
        for (int back = 0; back < 2; back++) {
            double t0 = now();
            st = kind == K_MHA ? attn_mha_forward(&mc, p, B, L, L, x, x, x,
                                                  &opts, y, NULL, 0, ws)
                 : add ? attn_additive_forward(&ac, p, B, L, L, x1, x1, x,
                                               &opts, y, NULL, ws)
                       : attn_encoder_forward(&ec, p, B, L, x, &opts, y, NULL,
                                              ws);
            if (st) goto out;
            if (back)
                st = kind == K_MHA
                         ? attn_mha_backward(&mc, p, B, L, L, x, x, x, &opts, y,
                                             ws, g, dx, dx, dx)
                     : add ? attn_additive_backward(&ac, p, B, L, L, x1, x1, x,
                                                    &opts, y, ws, g, dx, dx, dx)
                           : attn_encoder_backward(&ec, p, B, L, x, &opts, y,
                                                   ws, g, dx);
            if (st) goto out;
            double t = now() - t0;
            if (rep > 0) {
                double *slot = back ? &r->fwdbwd : &r->fwd;
                if (t < *slot) *slot = t;
            }
        }
    }
out:
    free(p);
    free(g);
    free(x);
    free(y);
    free(dx);
    free(ws);
    return st;
}

int bench_layers_run(FILE *f, const bench_layers_opts *o) {
    const int64_t B = o->quick ? 2 : 32;
    const int64_t Ls[2] = {100, 512};
    fprintf(f,
            "B = %lld, d_model = 512, self-attention with projections; "
            "best of %d; %d threads (0 = default); kernels %s; %s\n\n",
            (long long)B, o->reps, o->threads, attn__isa_describe(),
            attn__blas_describe());
    fprintf(f, "| layer | L | forward ms | fwd+bwd ms | workspace MiB | "
               "additive / dot (fwd, fwd+bwd) |\n");
    fprintf(f, "| --- | --- | --- | --- | --- | --- |\n");
    for (int li = 0; li < 2; li++) {
        result r[K_COUNT];
        for (int k = 0; k < K_COUNT; k++) {
            attn_status st =
                (attn_status)bench_layers_measure(k, B, Ls[li], o, &r[k]);
            if (st) {
                fprintf(stderr, "attn bench-layers: %s: %s\n",
                        attn_strerror(st), attn_last_error());
                return 1;
            }
            char ratio[64] = "";
            if (k % 2 == 1) /* additive against the dot-product row above */
                snprintf(ratio, sizeof ratio, "%.2fx, %.2fx",
                         r[k].fwd / r[k - 1].fwd,
                         r[k].fwdbwd / r[k - 1].fwdbwd);
            fprintf(f, "| %s | %lld | %.1f | %.1f | %.1f | %s |\n", names[k],
                    (long long)Ls[li], 1e3 * r[k].fwd, 1e3 * r[k].fwdbwd,
                    (double)r[k].ws_bytes / 1048576.0, ratio);
            fflush(f);
        }
    }
    return 0;
}
