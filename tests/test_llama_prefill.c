/* The decoder's generation mode on the Llama-family fixtures
 * (tests/data/llama/): a prompt entered in one pass (attn__dec_prefill,
 * whole or in pieces) gives the logits of the full forward
 * (attn_llama_forward) and of the position-by-position steps within float
 * tolerance, and steps after it continue at the right positions; steps
 * whose linear maps read Q8_0 blocks (the fixture's weights rounded to
 * Q8_0 where their width allows, the f32 copy holding the same rounded
 * values) match the f32 steps on those values. Each on 1 and 3 threads. */
#include "attn_gguf.h"
#include "attn_pretrained.h"
#include "check.h"
#include "../src/models/llama.h"
#include "../src/transformer/transformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cases[] = {"llama_gqa", "llama_mqa_tied_llama3",
                                    "mistral_window_linear", "qwen2_bias_tied"};

/* The logits (V) of the state's output h. */
static void head(const attn_llama *m, const float *h, float *z) {
    CHECK_STATUS(attn_linear_forward(1, m->cfg.hidden_size, m->cfg.vocab_size,
                                     h, m->head, NULL, z),
                 ATTN_OK);
}

/* max |a - b| over max |b| */
static double rel(const float *a, const float *b, int64_t n) {
    double mx = 0, err = 0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(b[i]));
        err = fmax(err, fabs((double)a[i] - b[i]));
    }
    return err / (mx > 0 ? mx : 1);
}

static void embed(const attn_llama *m, const int32_t *ids, int64_t n,
                  float *x) {
    const int64_t E = m->cfg.hidden_size;
    for (int64_t t = 0; t < n; t++)
        memcpy(x + t * E, m->embed + (int64_t)ids[t] * E,
               sizeof(float) * (size_t)E);
}

/* Rounds the E-wide rows of w (rows, cols) to Q8_0 blocks in q and writes
 * the blocks' values back into w. */
static void to_q8(float *w, int64_t rows, int64_t cols, unsigned char *q) {
    for (int64_t b = 0; b < rows * cols / 32; b++) {
        float *v = w + 32 * b;
        unsigned char *p = q + 34 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        /* a scale that is a power of two fits a half exactly */
        int e;
        frexpf(amax > 0 ? amax / 127.0f : 1.0f, &e);
        const float d = ldexpf(1.0f, e);
        const int he = e + 15; /* the half exponent field of 2^e */
        const unsigned h = (unsigned)(he < 1 ? 1 : he) << 10;
        p[0] = (unsigned char)h;
        p[1] = (unsigned char)(h >> 8);
        for (int j = 0; j < 32; j++) {
            const long qi = lroundf(v[j] / d);
            p[2 + j] = (unsigned char)(int8_t)qi;
            v[j] = (float)qi * d;
        }
    }
}

static void run_case(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/llama/%s", ATTN_SOURCE_DIR, name);
    attn_llama *m = NULL;
    CHECK_STATUS(attn_llama_load(dir, &m), ATTN_OK);
    if (!m) return;
    const int64_t V = m->cfg.vocab_size, E = m->cfg.hidden_size, L = 10;
    int32_t ids[10];
    for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)((t * 7919 + 3) % V);
    float *full = malloc(sizeof(float) * (size_t)(L * V));
    float *x = malloc(sizeof(float) * (size_t)(L * E));
    float *z = malloc(sizeof(float) * (size_t)V);
    float *zs = malloc(sizeof(float) * (size_t)V);
    CHECK_STATUS(attn_llama_forward(m, 1, L, ids, 1, full, NULL), ATTN_OK);
    embed(m, ids, L, x);
    /* threads, prompt length, piece (0: the default) */
    static const int64_t runs[][3] = {
        {1, 1, 0}, {1, 6, 0}, {1, 6, 4}, {1, 9, 2}, {3, 6, 4}};
    for (size_t c = 0; c < sizeof runs / sizeof runs[0]; c++) {
        const int th = (int)runs[c][0];
        const int64_t Lp = runs[c][1], piece = runs[c][2];
        attn__dec_state *s = NULL, *r = NULL;
        CHECK_STATUS(attn__dec_state_create(&m->dec, m->params, 1, L, NULL, 1,
                                            NULL, th, &s),
                     ATTN_OK);
        CHECK_STATUS(attn__dec_state_create(&m->dec, m->params, 1, L, NULL, 1,
                                            NULL, th, &r),
                     ATTN_OK);
        if (!s || !r) {
            attn__dec_state_free(s);
            attn__dec_state_free(r);
            break;
        }
        const float *h, *hr = NULL;
        CHECK_STATUS(attn__dec_prefill(s, x, Lp, piece, &h), ATTN_OK);
        for (int64_t t = 0; t < Lp; t++)
            CHECK_STATUS(attn__dec_step(r, x + t * E, &hr), ATTN_OK);
        head(m, h, z);
        head(m, hr, zs);
        double e1 = rel(z, full + (Lp - 1) * V, V), e2 = rel(z, zs, V);
        CHECK_MSG(e1 <= 1e-5 && e2 <= 1e-5,
                  "%s prompt %lld piece %lld threads %d: %.3g off the "
                  "forward, %.3g off the steps",
                  name, (long long)Lp, (long long)piece, th, e1, e2);
        /* steps after the prompt pass: positions Lp.. */
        for (int64_t t = Lp; t < L; t++) {
            CHECK_STATUS(attn__dec_step(s, x + t * E, &h), ATTN_OK);
            head(m, h, z);
            e1 = rel(z, full + t * V, V);
            if (e1 > 1e-5) {
                CHECK_MSG(0, "%s step %lld after %lld: %.3g off", name,
                          (long long)t, (long long)Lp, e1);
                break;
            }
        }
        attn__dec_state_free(s);
        attn__dec_state_free(r);
    }
    free(full);
    free(x);
    free(z);
    free(zs);
    attn_llama_free(m);
}

/* Steps reading Q8_0 blocks against f32 steps on the blocks' values. */
static void run_quant(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/llama/%s", ATTN_SOURCE_DIR, name);
    attn_llama *m = NULL;
    CHECK_STATUS(attn_llama_load(dir, &m), ATTN_OK);
    if (!m) return;
    const int64_t V = m->cfg.vocab_size, E = m->cfg.hidden_size, L = 6;
    const int64_t M = m->dec.num_layers, F = m->dec.dim_feedforward;
    const int64_t KV =
        (m->dec.num_kv_heads ? m->dec.num_kv_heads : m->dec.num_heads) *
        (E / m->dec.num_heads);
    CHECK(E % 32 == 0);
    attn__qmat *qw = calloc((size_t)(M * ATTN__DEC_NQ), sizeof *qw);
    unsigned char **blocks = calloc((size_t)(M * ATTN__DEC_NQ), sizeof *blocks);
    for (int64_t l = 0; l < M; l++) {
        attn_decoder_layer_params P;
        CHECK_STATUS(attn_decoder_layer_view(&m->dec, m->params, l, &P),
                     ATTN_OK);
        float *w[ATTN__DEC_NQ] = {P.self_attn.w_q,
                                  P.self_attn.w_k,
                                  P.self_attn.w_v,
                                  P.self_attn.w_o,
                                  P.w_1,
                                  P.w_1 + F * E,
                                  P.w_2};
        const int64_t rows[ATTN__DEC_NQ] = {E, KV, KV, E, F, F, E};
        const int64_t cols[ATTN__DEC_NQ] = {E, E, E, E, E, E, F};
        for (int j = 0; j < ATTN__DEC_NQ; j++) {
            const int64_t k = l * ATTN__DEC_NQ + j;
            if (cols[j] % 32) continue; /* stays f32 (data NULL) */
            blocks[k] = malloc(attn__q_row_bytes(ATTN_GGML_Q8_0, cols[j]) *
                               (size_t)rows[j]);
            to_q8(w[j], rows[j], cols[j], blocks[k]);
            qw[k] =
                (attn__qmat){ATTN_GGML_Q8_0, rows[j], cols[j], blocks[k], 0};
        }
    }
    int32_t ids[6];
    for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)((t * 31 + 5) % V);
    float *x = malloc(sizeof(float) * (size_t)(L * E));
    float *z = malloc(sizeof(float) * (size_t)V);
    float *zq[2];
    for (int t = 0; t < 2; t++) zq[t] = malloc(sizeof(float) * (size_t)V);
    embed(m, ids, L, x);
    attn__dec_state *s = NULL, *q[2] = {NULL, NULL};
    CHECK_STATUS(
        attn__dec_state_create(&m->dec, m->params, 1, L, NULL, 1, NULL, 1, &s),
        ATTN_OK);
    for (int t = 0; t < 2; t++) {
        CHECK_STATUS(attn__dec_state_create(&m->dec, m->params, 1, L, NULL, 1,
                                            NULL, 1 + 2 * t, &q[t]),
                     ATTN_OK);
        if (q[t]) attn__dec_state_set_quant(q[t], qw);
    }
    for (int64_t t = 0; s && q[0] && q[1] && t < L; t++) {
        const float *h, *hq0, *hq1;
        CHECK_STATUS(attn__dec_step(s, x + t * E, &h), ATTN_OK);
        CHECK_STATUS(attn__dec_step(q[0], x + t * E, &hq0), ATTN_OK);
        CHECK_STATUS(attn__dec_step(q[1], x + t * E, &hq1), ATTN_OK);
        head(m, h, z);
        head(m, hq0, zq[0]);
        head(m, hq1, zq[1]);
        const double e = rel(zq[0], z, V);
        /* with AVX512_VNNI the layers' products round x to about 16 bits
         * per block of 32 (gemv_x8.c: 2e-4 is the fixture's bound against
         * transformers); elsewhere x stays f32 */
        const double tol =
            strcmp(attn__gemv_qx_path(), "avx512_vnni") ? 1e-5 : 2e-4;
        CHECK_MSG(e <= tol, "%s quantized step %lld: %.3g off", name,
                  (long long)t, e);
        CHECK_MSG(!memcmp(zq[0], zq[1], sizeof(float) * (size_t)V),
                  "%s quantized step %lld: 1 and 3 threads differ", name,
                  (long long)t);
    }
    attn__dec_state_free(s);
    for (int t = 0; t < 2; t++) {
        attn__dec_state_free(q[t]);
        free(zq[t]);
    }
    for (int64_t k = 0; k < M * ATTN__DEC_NQ; k++) free(blocks[k]);
    free(blocks);
    free(qw);
    free(x);
    free(z);
    attn_llama_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(cases[i]);
        run_quant(cases[i]);
    }
    return check_done("test_llama_prefill");
}
