/* Llama-family models (tests/data/llama/, made by transformers itself with
 * tests/make_llama_fixtures.py): the logits of every prompt within 1e-4 of
 * transformers' (relative to the largest), greedy continuations equal to
 * its generate(), bitwise the same on 1, 2 and 3 threads, seeded sampling
 * the same on any thread count; folders that must be refused (another
 * model_type, an unknown rope type, a missing or extra tensor). */
#include "attn_pretrained.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const cases[] = {"llama_gqa", "llama_mqa_tied_llama3",
                                    "mistral_window_linear", "qwen2_bias_tied"};

static int load_npy(const char *dir, const char *name, int k, attn_npy *a) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s_%d.npy", dir, name, k);
    return attn_npy_read(path, a) == ATTN_OK;
}

static void run_model(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/llama/%s", ATTN_SOURCE_DIR, name);
    attn_llama *m = NULL;
    CHECK_STATUS(attn_llama_load(dir, &m), ATTN_OK);
    if (!m) return;
    const attn_llama_config *c = attn_llama_get_config(m);
    const int64_t V = c->vocab_size;
    for (int k = 0; k < 3; k++) {
        attn_npy p, lg, gr;
        if (!load_npy(dir, "prompt", k, &p)) break;
        CHECK(load_npy(dir, "logits", k, &lg) &&
              load_npy(dir, "greedy", k, &gr));
        attn_npy_convert(&p, ATTN_I64);
        attn_npy_convert(&gr, ATTN_I64);
        attn_npy_convert(&lg, ATTN_F32);
        const int64_t L = p.shape[0];
        int32_t ids[256];
        for (int64_t i = 0; i < L; i++)
            ids[i] = (int32_t)((int64_t *)p.data)[i];
        float *z[3];
        for (int t = 0; t < 3; t++) {
            z[t] = malloc(sizeof(float) * L * V);
            CHECK_STATUS(attn_llama_forward(m, 1, L, ids, t + 1, z[t], NULL),
                         ATTN_OK);
        }
        const float *want = lg.data;
        double mx = 0, err = 0;
        for (int64_t i = 0; i < L * V; i++) {
            mx = fmax(mx, fabs(want[i]));
            err = fmax(err, fabs(z[0][i] - want[i]));
        }
        if (getenv("ATTN_VERBOSE"))
            printf("%s prompt %d: max error %.3g of %.3g\n", name, k, err, mx);
        CHECK_MSG(err <= 1e-4 * mx, "%s prompt %d: logits off by %g of %g",
                  name, k, err, mx);
        CHECK_MSG(memcmp(z[0], z[1], sizeof(float) * L * V) == 0 &&
                      memcmp(z[0], z[2], sizeof(float) * L * V) == 0,
                  "%s: 1, 2 and 3 threads differ", name);
        /* greedy: transformers' generate returns prompt + new ids */
        attn_llama_gen_opts o;
        attn_llama_gen_opts_init(&o);
        o.max_new_tokens = 10;
        int32_t out[16];
        int64_t n = 0;
        CHECK_STATUS(
            attn_llama_generate(m, ids, L, &o, out, 16, &n, NULL, NULL),
            ATTN_OK);
        const int64_t *g = gr.data;
        int same = n == gr.shape[0] - L;
        for (int64_t i = 0; same && i < n; i++) same = out[i] == g[L + i];
        CHECK_MSG(same,
                  "%s prompt %d: greedy continuation differs (%lld vs "
                  "%lld ids)",
                  name, k, (long long)n, (long long)(gr.shape[0] - L));
        /* sampling: the same ids on 1 and 3 threads, others for another seed */
        o.do_sample = 1;
        o.temperature = 0.8;
        o.top_k = 20;
        o.top_p = 0.9;
        o.seed = 7;
        o.eos_token_id = -1;
        int32_t s1[16], s3[16];
        int64_t n1 = 0, n3 = 0;
        o.threads = 1;
        CHECK_STATUS(
            attn_llama_generate(m, ids, L, &o, s1, 16, &n1, NULL, NULL),
            ATTN_OK);
        o.threads = 3;
        CHECK_STATUS(
            attn_llama_generate(m, ids, L, &o, s3, 16, &n3, NULL, NULL),
            ATTN_OK);
        CHECK(n1 == 10 && n3 == 10 && memcmp(s1, s3, sizeof s1[0] * 10) == 0);
        for (int t = 0; t < 3; t++) free(z[t]);
        attn_npy_free(&p);
        attn_npy_free(&lg);
        attn_npy_free(&gr);
    }
    int32_t bad = (int32_t)V;
    float zz[1];
    CHECK_STATUS(attn_llama_forward(m, 1, 1, &bad, 0, zz, NULL),
                 ATTN_E_INVALID);
    attn_llama_free(m);
}

/* A copy of a fixture folder with config.json replaced by a sed-like edit
 * of one key's text, then loaded. */
static attn_status load_edited(const char *name, const char *from,
                               const char *to, const char *drop_file) {
    char src[1024], tmp[] = "/tmp/attn_llama_XXXXXX", cmd[8192];
    snprintf(src, sizeof src, "%s/tests/data/llama/%s", ATTN_SOURCE_DIR, name);
    if (!mkdtemp(tmp)) return ATTN_E_IO;
    int w = snprintf(cmd, sizeof cmd,
                     "cp %s/* %s/ && sed -i 's/%s/%s/' %s/config.json", src,
                     tmp, from, to, tmp);
    if (drop_file && w > 0 && (size_t)w < sizeof cmd)
        snprintf(cmd + w, sizeof cmd - (size_t)w, " && rm %s/%s", tmp,
                 drop_file);
    attn_status st = ATTN_E_IO;
    if (system(cmd) == 0) {
        attn_llama *m = NULL;
        st = attn_llama_load(tmp, &m);
        attn_llama_free(m);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return st;
}

static void refusals(void) {
    CHECK_STATUS(load_edited("llama_gqa", "\"llama\"", "\"gemma\"", NULL),
                 ATTN_E_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "gemma") != NULL);
    CHECK_STATUS(
        load_edited("llama_mqa_tied_llama3", "\"llama3\"", "\"yarn\"", NULL),
        ATTN_E_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "yarn") != NULL);
    /* untied: the head is then missing */
    CHECK_STATUS(load_edited("llama_mqa_tied_llama3",
                             "\"tie_word_embeddings\": true",
                             "\"tie_word_embeddings\": false", NULL),
                 ATTN_E_FORMAT);
    CHECK(strstr(attn_last_error(), "lm_head.weight") != NULL);
    /* a qwen2 checkpoint read as llama: its biases are not llama's */
    CHECK_STATUS(load_edited("qwen2_bias_tied", "\"qwen2\"", "\"llama\"", NULL),
                 ATTN_E_FORMAT);
    CHECK(strstr(attn_last_error(), "bias") != NULL);
    /* a shard missing */
    CHECK_STATUS(load_edited("mistral_window_linear", "x", "x",
                             "model-00002-of-00005.safetensors"),
                 ATTN_E_IO);
    attn_llama *m = NULL;
    CHECK_STATUS(attn_llama_load("/nonexistent/folder", &m), ATTN_E_IO);
    CHECK(m == NULL);
    CHECK_STATUS(attn_llama_load(NULL, &m), ATTN_E_INVALID);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_model(cases[i]);
    refusals();
    return check_done("test_llama");
}
