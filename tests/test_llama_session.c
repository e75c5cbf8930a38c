/* Generation sessions of Llama-family models (tests/data/llama/): a
 * conversation fed and generated in turns through one session gives the
 * same bits on 1, 2 and 3 threads, and the ids of a fresh session fed the
 * whole conversation at once, with logits within 1e-5 of the largest (a
 * prompt goes in one pass, products over all its positions, a generated
 * token in a step of its own: the sums are cut differently); its logits
 * agree with
 * attn_llama_forward over the whole conversation; attn_llama_generate is
 * a session used once; reset forgets; a conversation past max_len, an
 * empty one and bad ids are refused with nothing changed. */
#include "attn_pretrained.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cases[] = {"llama_gqa", "llama_mqa_tied_llama3",
                                    "mistral_window_linear", "qwen2_bias_tied"};

enum { CAP = 64, NEW1 = 5, NEW2 = 6 };

typedef struct {
    int32_t ids[CAP]; /* the whole conversation */
    int64_t n;
    int64_t g2_at, g2_n; /* where the second answer starts, its length */
    float *z2, *z3;      /* logits after the second and third prompts  */
} convo;

static void opts_of(attn_llama_gen_opts *o, int sample, int64_t max_new) {
    attn_llama_gen_opts_init(o);
    o->max_new_tokens = max_new;
    o->eos_token_id = -1;
    if (sample) {
        o->do_sample = 1;
        o->temperature = 0.9;
        o->top_k = 30;
        o->top_p = 0.95;
        o->seed = 11;
    }
}

static void add(convo *c, const int32_t *ids, int64_t n) {
    memcpy(c->ids + c->n, ids, sizeof(int32_t) * (size_t)n);
    c->n += n;
}

/* Three prompts, a greedy and a sampled answer, in turns. */
static void turns(const attn_llama *m, int threads, convo *c) {
    const int64_t V = attn_llama_get_config(m)->vocab_size;
    memset(c->ids, 0, sizeof c->ids);
    c->n = 0;
    c->z2 = malloc(sizeof(float) * (size_t)V);
    c->z3 = malloc(sizeof(float) * (size_t)V);
    attn_llama_session *s = NULL;
    CHECK_STATUS(attn_llama_session_create(m, CAP, threads, &s), ATTN_OK);
    if (!s) return;
    int32_t p1[7], p2[4], p3[3], g[16];
    for (int i = 0; i < 7; i++) p1[i] = (int32_t)((i * 37 + 5) % V);
    for (int i = 0; i < 4; i++) p2[i] = (int32_t)((i * 53 + 2) % V);
    for (int i = 0; i < 3; i++) p3[i] = (int32_t)((i * 11 + 9) % V);
    attn_llama_gen_opts o;
    int64_t n = 0;
    CHECK_STATUS(attn_llama_session_feed(s, p1, 7, NULL), ATTN_OK);
    add(c, p1, 7);
    opts_of(&o, 0, NEW1);
    CHECK_STATUS(attn_llama_session_generate(s, &o, g, 16, &n, NULL, NULL),
                 ATTN_OK);
    CHECK(n == NEW1);
    add(c, g, n);
    CHECK(attn_llama_session_length(s) == c->n);
    CHECK_STATUS(attn_llama_session_feed(s, p2, 4, c->z2), ATTN_OK);
    add(c, p2, 4);
    opts_of(&o, 1, NEW2);
    CHECK_STATUS(attn_llama_session_generate(s, &o, g, 16, &n, NULL, NULL),
                 ATTN_OK);
    CHECK(n == NEW2);
    c->g2_at = c->n;
    c->g2_n = n;
    add(c, g, n);
    CHECK_STATUS(attn_llama_session_feed(s, p3, 3, c->z3), ATTN_OK);
    add(c, p3, 3);
    CHECK(attn_llama_session_length(s) == c->n);
    attn_llama_session_free(s);
}

/* |a - b| at most 1e-5 of the largest |b| (n values). */
static int close_to(const float *a, const float *b, int64_t n) {
    double mx = 0, err = 0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(b[i]));
        err = fmax(err, fabs(a[i] - b[i]));
    }
    return err <= 1e-5 * mx;
}

static void run_model(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/llama/%s", ATTN_SOURCE_DIR, name);
    attn_llama *m = NULL;
    CHECK_STATUS(attn_llama_load(dir, &m), ATTN_OK);
    if (!m) return;
    const int64_t V = attn_llama_get_config(m)->vocab_size;
    const size_t zb = sizeof(float) * (size_t)V;
    convo c[3];
    for (int t = 0; t < 3; t++) turns(m, t + 1, &c[t]);
    for (int t = 1; t < 3; t++)
        CHECK_MSG(c[t].n == c[0].n &&
                      memcmp(c[t].ids, c[0].ids, sizeof c[0].ids) == 0 &&
                      memcmp(c[t].z2, c[0].z2, zb) == 0 &&
                      memcmp(c[t].z3, c[0].z3, zb) == 0,
                  "%s: %d threads differ from 1", name, t + 1);
    /* from scratch: the conversation up to the second answer, then on */
    attn_llama_session *s = NULL;
    CHECK_STATUS(attn_llama_session_create(m, CAP, 2, &s), ATTN_OK);
    float *z = malloc(zb);
    int32_t g[16];
    int64_t n = 0;
    attn_llama_gen_opts o;
    opts_of(&o, 1, NEW2);
    CHECK_STATUS(attn_llama_session_feed(s, c[0].ids, c[0].g2_at, z), ATTN_OK);
    CHECK_MSG(close_to(z, c[0].z2, V),
              "%s: logits after the second "
              "prompt differ from the whole conversation's",
              name);
    CHECK_STATUS(attn_llama_session_generate(s, &o, g, 16, &n, NULL, NULL),
                 ATTN_OK);
    CHECK_MSG(n == c[0].g2_n &&
                  memcmp(g, c[0].ids + c[0].g2_at, sizeof g[0] * n) == 0,
              "%s: the sampled answer differs from the whole conversation's",
              name);
    /* reset, then the whole conversation in one feed */
    CHECK_STATUS(attn_llama_session_reset(s), ATTN_OK);
    CHECK(attn_llama_session_length(s) == 0);
    CHECK_STATUS(attn_llama_session_feed(s, c[0].ids, c[0].n, z), ATTN_OK);
    CHECK_MSG(close_to(z, c[0].z3, V),
              "%s: logits after reset and the "
              "whole conversation differ",
              name);
    /* against the forward pass over the whole conversation */
    float *all = malloc(zb * (size_t)c[0].n);
    CHECK_STATUS(attn_llama_forward(m, 1, c[0].n, c[0].ids, 0, all, NULL),
                 ATTN_OK);
    double mx = 0, err = 0;
    const float *last = all + (c[0].n - 1) * V;
    for (int64_t i = 0; i < V; i++) {
        mx = fmax(mx, fabs(last[i]));
        err = fmax(err, fabs(last[i] - c[0].z3[i]));
    }
    CHECK_MSG(err <= 1e-5 * mx,
              "%s: session logits off the forward's by %g "
              "of %g",
              name, err, mx);
    /* attn_llama_generate: the first answer again */
    opts_of(&o, 0, NEW1);
    CHECK_STATUS(attn_llama_generate(m, c[0].ids, 7, &o, g, 16, &n, NULL, NULL),
                 ATTN_OK);
    CHECK(n == NEW1 && memcmp(g, c[0].ids + 7, sizeof g[0] * NEW1) == 0);
    /* refusals leave the conversation as it was */
    const int64_t len = attn_llama_session_length(s);
    int32_t bad[2] = {1, (int32_t)V};
    CHECK_STATUS(attn_llama_session_feed(s, bad, 2, NULL), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "ids[1]") != NULL);
    CHECK_STATUS(attn_llama_session_feed(s, c[0].ids, CAP - len + 1, NULL),
                 ATTN_E_SHAPE);
    opts_of(&o, 0, CAP - len + 1);
    CHECK_STATUS(attn_llama_session_generate(s, &o, g, CAP, &n, NULL, NULL),
                 ATTN_E_SHAPE);
    CHECK(attn_llama_session_length(s) == len);
    CHECK_STATUS(attn_llama_session_feed(s, c[0].ids, 0, NULL), ATTN_E_SHAPE);
    CHECK_STATUS(attn_llama_session_reset(s), ATTN_OK);
    opts_of(&o, 0, 2);
    CHECK_STATUS(attn_llama_session_generate(s, &o, g, 16, &n, NULL, NULL),
                 ATTN_E_INVALID);
    CHECK(n == 0);
    attn_llama_session_free(s);
    attn_llama_session *s2 = NULL;
    CHECK_STATUS(attn_llama_session_create(
                     m, attn_llama_get_config(m)->max_position + 1, 1, &s2),
                 ATTN_E_SHAPE);
    CHECK(s2 == NULL);
    CHECK_STATUS(attn_llama_session_create(m, 0, 1, &s2), ATTN_E_SHAPE);
    free(all);
    free(z);
    for (int t = 0; t < 3; t++) {
        free(c[t].z2);
        free(c[t].z3);
    }
    attn_llama_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_model(cases[i]);
    CHECK_STATUS(attn_llama_session_create(NULL, 8, 1, NULL), ATTN_E_INVALID);
    attn_llama_session_free(NULL);
    return check_done("test_llama_session");
}
