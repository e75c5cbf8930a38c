/* Parameter blocks and files: Xavier init from a seed, bitwise save/load
 * round trips of the three layers and of a caller's own kind, and refusal
 * (ATTN_E_FORMAT) of truncated, bit-flipped, wrong-version, wrong-kind and
 * self-inconsistent files. The CRC is checked against an independent
 * implementation (with zlib's check value). */
#include "attn.h"
#include "attn_layers.h"
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void init_checks(void) {
    attn_mha_config c = {12, 3, 1, 5, 7, 1};
    int64_t n = attn_mha_param_count(&c);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    CHECK_STATUS(attn_mha_init(&c, a, 42), ATTN_OK);
    CHECK_STATUS(attn_mha_init(&c, b, 42), ATTN_OK);
    CHECK(memcmp(a, b, sizeof(float) * n) == 0);
    CHECK_STATUS(attn_mha_init(&c, b, 43), ATTN_OK);
    CHECK(memcmp(a, b, sizeof(float) * n) != 0);
    attn_param_slice sl[8];
    int64_t ns;
    CHECK_STATUS(attn_mha_param_slices(&c, "p.", 0, sl, 8, &ns), ATTN_OK);
    CHECK(ns == 8 && strcmp(sl[1].name, "p.w_k") == 0);
    CHECK(sl[1].shape[0] == 4 && sl[1].shape[1] == 5); /* Hkv * hd = 1 * 4 */
    for (int64_t s = 0; s < ns; s++) {
        int64_t m = sl[s].shape[0] * sl[s].shape[1];
        double bound = sqrt(6.0 / (double)(sl[s].shape[0] + sl[s].shape[1]));
        double mx = 0, mean = 0;
        for (int64_t i = 0; i < m; i++) {
            mx = fmax(mx, fabs(a[sl[s].offset + i]));
            mean += a[sl[s].offset + i];
        }
        if (sl[s].init == ATTN_INIT_ZERO)
            CHECK(mx == 0);
        else {
            CHECK_MSG(mx <= bound && mx > 0.7 * bound, "%s: max %g, bound %g",
                      sl[s].name, mx, bound);
            CHECK_MSG(fabs(mean / m) < 0.2 * bound, "%s mean %g", sl[s].name,
                      mean / m);
        }
    }
    attn_encoder_config e;
    attn_encoder_config_init(&e);
    e.d_model = 8;
    e.num_heads = 2;
    e.dim_feedforward = 5;
    e.final_norm = 1;
    float *p = malloc(sizeof(float) * attn_encoder_param_count(&e));
    CHECK_STATUS(attn_encoder_init(&e, p, 1), ATTN_OK);
    attn_encoder_layer_params lp;
    attn_encoder_layer_view(&e, p, 0, &lp);
    CHECK(lp.ln1_gamma[3] == 1.0f && lp.ln2_beta[0] == 0.0f &&
          lp.b_1[4] == 0.0f);
    float *g, *bb;
    attn_encoder_final_norm_view(&e, p, &g, &bb);
    CHECK(g[7] == 1.0f && bb[7] == 0.0f);
    free(a);
    free(b);
    free(p);
}

static void round_trips(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/additive.bin", dir);
    attn_additive_config ac = {5, 3, 4, 6, 1, 0}, ac2;
    int64_t n = attn_additive_param_count(&ac);
    float *p = malloc(sizeof(float) * n), *q = NULL;
    attn_additive_init(&ac, p, 3);
    p[n - 1] = -0.0f; /* bitwise, sign of zero included */
    CHECK_STATUS(attn_additive_save(path, &ac, p), ATTN_OK);
    CHECK_STATUS(attn_additive_load(path, &ac2, &q), ATTN_OK);
    CHECK(q && ac.query_dim == ac2.query_dim && ac.key_dim == ac2.key_dim &&
          ac.value_dim == ac2.value_dim && ac.attn_dim == ac2.attn_dim &&
          ac.bias == ac2.bias &&
          ac.context_from_keys == ac2.context_from_keys &&
          memcmp(p, q, sizeof(float) * n) == 0);
    attn_params_free(q);
    /* the wrong typed loader refuses it */
    attn_mha_config mc;
    float *r = NULL;
    CHECK_STATUS(attn_mha_load(path, &mc, &r), ATTN_E_FORMAT);
    CHECK(r == NULL);
    free(p);

    snprintf(path, sizeof path, "%s/mha.bin", dir);
    attn_mha_config m = {8, 4, 2, 3, 5, 1}, m2;
    n = attn_mha_param_count(&m);
    p = malloc(sizeof(float) * n);
    attn_mha_init(&m, p, 4);
    CHECK_STATUS(attn_mha_save(path, &m, p), ATTN_OK);
    CHECK_STATUS(attn_mha_load(path, &m2, &q), ATTN_OK);
    CHECK(q && m.d_model == m2.d_model && m.num_heads == m2.num_heads &&
          m.num_kv_heads == m2.num_kv_heads && m.kdim == m2.kdim &&
          m.vdim == m2.vdim && m.bias == m2.bias &&
          memcmp(p, q, sizeof(float) * n) == 0);
    attn_params_free(q);
    free(p);

    snprintf(path, sizeof path, "%s/encoder.bin", dir);
    attn_encoder_config e, e2;
    attn_encoder_config_init(&e);
    e.num_layers = 2;
    e.d_model = 6;
    e.dim_feedforward = 5;
    e.num_heads = 3;
    e.attention = ATTN_ATTENTION_ADDITIVE;
    e.additive_dim = 4;
    e.norm_first = 1;
    e.final_norm = 1;
    e.activation = ATTN_ACT_GELU;
    e.layer_norm_eps = 1e-6;
    n = attn_encoder_param_count(&e);
    p = malloc(sizeof(float) * n);
    attn_encoder_init(&e, p, 5);
    CHECK_STATUS(attn_encoder_save(path, &e, p), ATTN_OK);
    CHECK_STATUS(attn_encoder_load(path, &e2, &q), ATTN_OK);
    CHECK(q && e.num_layers == e2.num_layers && e.d_model == e2.d_model &&
          e.num_heads == e2.num_heads &&
          e.dim_feedforward == e2.dim_feedforward &&
          e.attention == e2.attention && e.additive_dim == e2.additive_dim &&
          e.activation == e2.activation && e.norm_first == e2.norm_first &&
          e.final_norm == e2.final_norm &&
          e.layer_norm_eps == e2.layer_norm_eps &&
          memcmp(p, q, sizeof(float) * n) == 0);
    attn_params_free(q);

    /* the file's CRC is the standard CRC-32 of everything before it */
    size_t sz = 0;
    unsigned char *img = (unsigned char *)check_slurp(path, &sz);
    if (!img || sz < 64) {
        CHECK(0);
        return;
    }
    CHECK(crc_bitwise((const unsigned char *)"123456789", 9) == 0xCBF43926u);
    uint32_t stored = img[sz - 4] | img[sz - 3] << 8 | img[sz - 2] << 16 |
                      (uint32_t)img[sz - 1] << 24;
    CHECK(stored == crc_bitwise(img, sz - 4));
    CHECK(memcmp(img, "ATTNPRM", 8) == 0 && img[8] == 1);

    /* truncations */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);
    size_t cuts[] = {0, 4, 8, 12, 30, 40, 100, sz / 2, sz - 5, sz - 4, sz - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        check_spit(bad, img, cuts[i]);
        q = NULL;
        CHECK_STATUS(attn_encoder_load(bad, &e2, &q), ATTN_E_FORMAT);
        CHECK(q == NULL);
    }
    /* bit flips anywhere, CRC included */
    unsigned long long st = 77;
    for (int t = 0; t < 40; t++) {
        size_t at =
            t < 4 ? sz - 1 - (size_t)t
                  : (size_t)((test_rand(&st) * 0.5 + 0.5) * (double)sz) % sz;
        img[at] ^= (unsigned char)(1u << (t % 8));
        check_spit(bad, img, sz);
        CHECK_STATUS(attn_encoder_load(bad, &e2, &q), ATTN_E_FORMAT);
        img[at] ^= (unsigned char)(1u << (t % 8));
    }
    /* another version with a valid CRC */
    img[8] = 2;
    uint32_t c = crc_bitwise(img, sz - 4);
    for (int i = 0; i < 4; i++) img[sz - 4 + i] = (unsigned char)(c >> (8 * i));
    check_spit(bad, img, sz);
    CHECK_STATUS(attn_encoder_load(bad, &e2, &q), ATTN_E_FORMAT);
    CHECK(strstr(attn_last_error(), "version 2") != NULL);
    /* a file that is intact but whose slices disagree with its config */
    attn_params_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.kind, sizeof h.kind, "mha");
    h.config_len = 6;
    int64_t cfgv[6] = {8, 4, 2, 3, 5, 0}; /* bias 0: fewer slices than saved */
    memcpy(h.config, cfgv, sizeof cfgv);
    attn_param_slice sl[8];
    int64_t ns;
    attn_mha_param_slices(&m, "", 0, sl, 8, &ns);
    float *mp = calloc((size_t)attn_mha_param_count(&m), sizeof(float));
    CHECK_STATUS(
        attn_params_save(bad, &h, sl, ns, mp, attn_mha_param_count(&m)),
        ATTN_OK);
    CHECK_STATUS(attn_mha_load(bad, &m2, &q), ATTN_E_FORMAT);
    free(mp);
    /* a caller's own kind through the generic calls */
    snprintf(h.kind, sizeof h.kind, "model");
    h.config_len = 2;
    h.config[0] = 7;
    h.config[1] = -3;
    attn_param_slice own[2] = {{"embed", 0, {3, 2}, ATTN_INIT_XAVIER},
                               {"head.b", 6, {2, 1}, ATTN_INIT_ZERO}};
    float blk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_STATUS(attn_params_save(bad, &h, own, 2, blk, 8), ATTN_OK);
    attn_params_header h2;
    attn_param_slice *sl2;
    int64_t ns2, cnt;
    float *b2;
    CHECK_STATUS(attn_params_load(bad, &h2, &sl2, &ns2, &b2, &cnt), ATTN_OK);
    CHECK(strcmp(h2.kind, "model") == 0 && h2.config_len == 2 &&
          h2.config[1] == -3);
    CHECK(ns2 == 2 && strcmp(sl2[1].name, "head.b") == 0 && sl2[1].offset == 6);
    CHECK(cnt == 8 && memcmp(b2, blk, sizeof blk) == 0);
    attn_params_free(sl2);
    attn_params_free(b2);
    /* a slice outside the block is refused when saving */
    own[1].offset = 7;
    CHECK_STATUS(attn_params_save(bad, &h, own, 2, blk, 8), ATTN_E_INVALID);
    snprintf(bad, sizeof bad, "%s/missing/none.bin", dir);
    CHECK_STATUS(attn_encoder_load(bad, &e2, &q), ATTN_E_IO);
    CHECK_STATUS(attn_encoder_save(bad, &e, p), ATTN_E_IO);
    /* a folder is not a file: an I/O error saying so (it was "out of
     * memory" after trying to allocate ftell's 2^63 bytes) */
    CHECK_STATUS(attn_encoder_load(dir, &e2, &q), ATTN_E_IO);
    CHECK(strstr(attn_last_error(), "not a regular file") != NULL);
    free(img);
    free(p);
}

int main(void) {
    char dir[] = "/tmp/attn_params_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    init_checks();
    round_trips(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_done("test_params");
}
