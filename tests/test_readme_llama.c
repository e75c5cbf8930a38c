/* The C example of docs/llama.md, compiled and run by the tests on the
 * tiny Llama fixture (tests/data/llama/llama_gqa, made by transformers).
 * The part between the markers is the page's text; the continuation it
 * prints is checked against transformers' (texts.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define main readme_main
/* ---- README example ---- */
#include <attn_pretrained.h>
#include <attn_tokenizer.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    attn_llama *m;
    if (argc < 2 || attn_llama_load(argv[1], &m) != ATTN_OK) {  /* DIR */
        fprintf(stderr, "attn: %s\n", attn_last_error());
        return 1;
    }
    const attn_bpe *tok = attn_llama_tokenizer(m);   /* tokenizer.json */
    const char *text = "The cat sat on the";
    int32_t ids[64], out[10];
    int64_t n = 0, k = 0;
    attn_status st = attn_bpe_encode(tok, text, strlen(text),
                                     ATTN_BPE_ADD_SPECIAL, ids, 64, &n);
    attn_llama_gen_opts o;
    attn_llama_gen_opts_init(&o);                    /* greedy */
    o.max_new_tokens = 10;
    if (st == ATTN_OK)
        st = attn_llama_generate(m, ids, n, &o, out, 10, &k, NULL, NULL);
    char buf[256];
    size_t len = 0;
    if (st == ATTN_OK)
        st = attn_bpe_decode(tok, out, k, 1, buf, sizeof buf, &len);
    if (st == ATTN_OK) printf("%s%.*s\n", text, (int)len, buf);
    else fprintf(stderr, "attn: %s\n", attn_last_error());
    attn_llama_free(m);
    return st != ATTN_OK;
}
/* ---- end of README example ---- */
#undef main

int main(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/llama/llama_gqa", ATTN_SOURCE_DIR);
    char *args[2] = {"readme", dir};
    return readme_main(2, args);
}
