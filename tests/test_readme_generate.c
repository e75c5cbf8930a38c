/* The C example of docs/generation.md, verbatim between
 * the markers (tests/cli_readme.py checks that), compiled and run: a few
 * training steps of the date model, then beam search through the cache. */
#include "attn_transformer.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

static int example(char *text, size_t cap) {
    /* README BEGIN */
    attn_gen_train_config tc;
    attn_gen_train_config_init(&tc, ATTN_GEN_DATE, ATTN_MODEL_ENCDEC);
    tc.steps = 20;                         /* the default (1000) reaches 99% */
    attn_gen_trainer *tr;
    if (attn_gen_trainer_create(&tc, &tr)) return 1;
    for (int64_t s = 0; s < tc.steps; s++) attn_gen_trainer_step(tr, NULL);
    const attn_gen_train_config *c = attn_gen_trainer_config(tr);

    int32_t src[64], out[16];
    int64_t n, len;
    double score;
    attn_gen_input(&c->task, c->model.kind, "march 3, 2026", src, 64, &n);
    attn_generate_opts go;
    attn_generate_opts_init(&go);          /* greedy, with the KV cache */
    go.beam = 4;                           /* or go.sample = 1; go.top_p = 0.9 */
    attn_status st = attn_generate(&c->model, attn_gen_trainer_params(tr), 1, n,
                                   src, &n, &go, out, 16, &len, &score);
    if (st) fprintf(stderr, "%s\n", attn_last_error());
    attn_gen_decode(&c->task, ATTN_SIDE_TARGET, out, len, text, cap);
    attn_gen_trainer_free(tr);
    /* README END */
    return st != ATTN_OK;
}

int main(void) {
    char text[32] = "unset";
    CHECK(example(text, sizeof text) == 0);
    CHECK(strlen(text) <= 11 && strcmp(text, "unset") != 0);
    for (const char *p = text; *p; p++) CHECK((*p >= '0' && *p <= '9') || *p == '-');
    printf("generated after 20 steps: '%s'\n", text);
    return check_done("test_readme_generate");
}
