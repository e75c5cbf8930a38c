/* The byte-level BPE tokenizer: against Hugging Face tokenizers on the
 * fixtures of tests/data/bpe/ (five small tokenizers in the layouts of
 * GPT-2, Llama 3, Qwen2 and SmolLM2, made by tests/gen_bpe_fixtures.py):
 * every test string's ids with and without the post-processor's tokens,
 * its decoding, random ids decoded with and without special tokens, the
 * streaming decoder token by token; then the GGUF-style constructor, the
 * flags, and tokenizers refused or malformed, each with its message. */
#include "attn_tokenizer.h"
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXIDS 4096

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = '\0';
    fclose(f);
    return b;
}

/* hex ("-" for empty) -> bytes; returns the length */
static size_t unhex(const char *h, char *out) {
    size_t n = 0;
    if (h[0] == '-') return 0;
    for (; h[0] && h[1] && h[0] != '\n'; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (char)v;
    }
    out[n] = '\0';
    return n;
}

static int64_t parse_ids(const char *s, int32_t *ids) {
    int64_t n = 0;
    char *e;
    for (;;) {
        long v = strtol(s, &e, 10);
        if (e == s) break;
        ids[n++] = (int32_t)v;
        s = e;
    }
    return n;
}

static int same_ids(const int32_t *a, int64_t na, const int32_t *b,
                    int64_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, sizeof *a * (size_t)na) == 0);
}

static void print_ids(const char *what, const int32_t *a, int64_t n) {
    fprintf(stderr, "  %s:", what);
    for (int64_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", a[i]);
    fputc('\n', stderr);
}

/* The streaming decoder, one id at a time, equals the whole decode. */
static int stream_equals(const attn_bpe *t, const int32_t *ids, int64_t n,
                         int skip, const char *want, size_t wlen) {
    char *buf = malloc(wlen + 64), *piece = malloc(attn_bpe_stream_max(t));
    attn_bpe_stream s;
    attn_bpe_stream_init(&s);
    size_t w = 0, k;
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        ok = attn_bpe_stream_next(t, &s, ids[i], skip, piece,
                                  attn_bpe_stream_max(t), &k) == ATTN_OK &&
             w + k <= wlen;
        if (ok) memcpy(buf + w, piece, k), w += k;
    }
    ok =
        ok && attn_bpe_stream_end(&s, piece, 3, &k) == ATTN_OK && w + k == wlen;
    if (ok) memcpy(buf + w, piece, k);
    ok = ok && memcmp(buf, want, wlen) == 0;
    free(buf);
    free(piece);
    return ok;
}

static void check_decode(const attn_bpe *t, const int32_t *ids, int64_t n,
                         int skip, const char *want, size_t wlen, int line) {
    size_t len = 0;
    char *out = malloc(wlen + 2);
    CHECK_STATUS(attn_bpe_decode(t, ids, n, skip, NULL, 0, &len), ATTN_OK);
    CHECK_MSG(len == wlen, "line %d: decoded length %zu, wanted %zu", line, len,
              wlen);
    if (len == wlen) {
        CHECK_STATUS(attn_bpe_decode(t, ids, n, skip, out, wlen + 1, &len),
                     ATTN_OK);
        CHECK_MSG(memcmp(out, want, wlen) == 0 && out[wlen] == '\0',
                  "line %d: decoded text differs", line);
    }
    CHECK_MSG(stream_equals(t, ids, n, skip, want, wlen),
              "line %d: the stream differs from the decode", line);
    free(out);
}

/* t against the records of tests/data/bpe/NAME.expected. */
static void against(const attn_bpe *t, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/bpe/%s.expected",
             ATTN_SOURCE_DIR, name);
    size_t size;
    char *exp = slurp(path, &size);
    CHECK_MSG(exp != NULL, "%s is missing", path);
    if (!exp) return;
    static char text[1 << 16], want[1 << 16];
    static int32_t ids[MAXIDS], ref[MAXIDS], plain[MAXIDS];
    size_t tlen = 0;
    int64_t nref = 0, nplain = 0, nstr = 0, bad = 0;
    int line = 0;
    for (char *p = exp; *p; line++) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        char kind = p[0];
        const char *arg = p + 2;
        if (kind == 'S') {
            tlen = unhex(arg, text);
            nstr++;
        } else if (kind == 'I' || kind == 'B' || kind == 'R') {
            nref = parse_ids(arg, ref);
            if (kind == 'I') nplain = parse_ids(arg, plain);
            if (kind != 'R') {
                unsigned fl = ATTN_BPE_PARSE_SPECIAL |
                              (kind == 'B' ? ATTN_BPE_ADD_SPECIAL : 0);
                int64_t n = -1, count = -1;
                CHECK_STATUS(
                    attn_bpe_encode(t, text, tlen, fl, ids, MAXIDS, &n),
                    ATTN_OK);
                CHECK_STATUS(
                    attn_bpe_encode(t, text, tlen, fl, NULL, 0, &count),
                    ATTN_OK);
                CHECK(count == n);
                /* NFC at most doubles the bytes (qwen2 has it) */
                CHECK(n <= (int64_t)tlen * (strcmp(name, "qwen2") ? 1 : 2) + 4);
                if (!same_ids(ids, n, ref, nref)) {
                    bad++;
                    CHECK_MSG(0, "%s line %d (%c): ids differ for '%s'", name,
                              line + 1, kind, text);
                    print_ids("attn", ids, n);
                    print_ids("HF  ", ref, nref);
                }
            }
        } else if (kind == 'D' || kind == 'T' || kind == 'K') {
            size_t wl = unhex(arg, want);
            if (kind == 'D')
                check_decode(t, plain, nplain, 0, want, wl, line + 1);
            else
                check_decode(t, ref, nref, kind == 'K', want, wl, line + 1);
        }
        p = nl ? nl + 1 : p + strlen(p);
    }
    CHECK(nstr >= 300);
    printf("%s: %lld strings, %lld differ\n", name, (long long)nstr,
           (long long)bad);
    free(exp);
}

static void fixture(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/bpe/%s.json", ATTN_SOURCE_DIR,
             name);
    attn_bpe *t = NULL;
    CHECK_STATUS(attn_bpe_load(path, &t), ATTN_OK);
    if (!t) return;
    against(t, name);
    attn_bpe_free(t);
}

/* SmolLM2's tokenizer from its GGUF metadata (tests/data/bpe/
 * smollm2_vocab.txt, written by tests/gen_bpe_smollm2.py): with its own
 * pre-tokenizer "smollm" it equals the tokenizer SmolLM2 ships; with
 * "gpt2" it equals what transformers makes of the GGUF file. */
static void smollm2(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/bpe/smollm2_vocab.txt",
             ATTN_SOURCE_DIR);
    size_t size;
    char *text = slurp(path, &size);
    CHECK_MSG(text != NULL, "%s is missing", path);
    if (!text) return;
    attn_bpe_vocab v;
    attn_bpe_vocab_init(&v);
    char pre[64] = "";
    long long bos, eos, nt = 0, nm = 0;
    int add_bos, used = 0;
    CHECK(sscanf(text,
                 "pre %63s\nbos %lld\neos %lld\nadd_bos %d\ntokens %lld\n%n",
                 pre, &bos, &eos, &add_bos, &nt, &used) == 5);
    const char **tokens = calloc((size_t)nt + 1, sizeof *tokens);
    int32_t *types = calloc((size_t)nt + 1, sizeof *types);
    char *p = text + used;
    for (long long i = 0; i < nt; i++) {
        char *nl = strchr(p, '\n');
        *nl = '\0';
        types[i] = (int32_t)strtol(p, &p, 10);
        tokens[i] = p + 1;
        p = nl + 1;
    }
    CHECK(sscanf(p, "merges %lld\n%n", &nm, &used) == 1);
    const char **merges = calloc((size_t)nm + 1, sizeof *merges);
    p += used;
    for (long long i = 0; i < nm; i++) {
        char *nl = strchr(p, '\n');
        *nl = '\0';
        merges[i] = p;
        p = nl + 1;
    }
    CHECK(nt == 49152 && nm == 48900 && strcmp(pre, "smollm") == 0);
    v.n_tokens = nt;
    v.tokens = tokens;
    v.token_types = types;
    v.n_merges = nm;
    v.merges = merges;
    v.pre = pre;
    v.bos_id = bos;
    v.eos_id = eos;
    v.add_bos = add_bos;
    attn_bpe *t = NULL;
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_OK);
    if (t) against(t, "smollm2");
    attn_bpe_free(t);
    v.pre = "gpt2";
    t = NULL;
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_OK);
    if (t) against(t, "smollm2_transformers");
    attn_bpe_free(t);
    free(tokens);
    free(types);
    free(merges);
    free(text);
}

/* The GGUF form: the header's example, control and user-defined tokens,
 * bos / eos, the pre-tokenizer names, and its refusals. */
static void from_vocab(void) {
    const char *tokens[] = {"a",
                            "b",
                            "ab",
                            "\xc4\xa0",
                            "\xc4\xa0"
                            "ab",
                            "<|end|>",
                            "<s>",
                            "[u]",
                            "1",
                            "\xc4\xa0"
                            "1"};
    const int32_t types[] = {1, 1, 1, 1, 1, 3, 3, 4, 1, 1};
    const char *merges[] = {"a b", "\xc4\xa0 ab", "\xc4\xa0 1"};
    attn_bpe_vocab v;
    attn_bpe_vocab_init(&v);
    v.n_tokens = 10;
    v.tokens = tokens;
    v.token_types = types;
    v.n_merges = 3;
    v.merges = merges;
    v.pre = "gpt2";
    v.bos_id = 6;
    v.add_bos = 1;
    attn_bpe *t = NULL;
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_OK);
    if (!t) return;
    int32_t ids[16];
    int64_t n;
    CHECK_STATUS(attn_bpe_encode(t, "ab ab<|end|>", 12,
                                 ATTN_BPE_PARSE_SPECIAL | ATTN_BPE_ADD_SPECIAL,
                                 ids, 16, &n),
                 ATTN_OK);
    CHECK(n == 4 && ids[0] == 6 && ids[1] == 2 && ids[2] == 4 && ids[3] == 5);
    /* special tokens as text when not parsed; user-defined ones always */
    CHECK_STATUS(attn_bpe_encode(t, "ab<|end|>[u]", 12, 0, ids, 16, &n),
                 ATTN_OK);
    CHECK(n == 2 && ids[0] == 2 && ids[1] == 7); /* '<', '|' have no id */
    CHECK_STATUS(attn_bpe_encode(t, "ab<|end|>[u]", 12, ATTN_BPE_PARSE_SPECIAL,
                                 ids, 16, &n),
                 ATTN_OK);
    CHECK(n == 3 && ids[0] == 2 && ids[1] == 5 && ids[2] == 7);
    CHECK(attn_bpe_is_special(t, 5) && !attn_bpe_is_special(t, 7));
    int32_t id;
    CHECK_STATUS(attn_bpe_id(t, "<|end|>", &id), ATTN_OK);
    CHECK(id == 5);
    CHECK_STATUS(attn_bpe_id(t, "zz", &id), ATTN_E_INVALID);
    /* gpt2 keeps " 1" together; smollm cuts digits out alone */
    CHECK_STATUS(attn_bpe_encode(t, "a 1", 3, 0, ids, 16, &n), ATTN_OK);
    CHECK(n == 2 && ids[1] == 9);
    attn_bpe_free(t);
    v.pre = "smollm";
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_OK);
    CHECK_STATUS(attn_bpe_encode(t, "a 1", 3, 0, ids, 16, &n), ATTN_OK);
    CHECK(n == 3 && ids[1] == 3 && ids[2] == 8);
    char out[64];
    size_t len;
    const int32_t dec[] = {6, 0, 4, 5};
    CHECK_STATUS(attn_bpe_decode(t, dec, 4, 1, out, sizeof out, &len), ATTN_OK);
    CHECK(len == 4 && strcmp(out, "a ab") == 0);
    CHECK_STATUS(attn_bpe_decode(t, dec, 4, 0, out, sizeof out, &len), ATTN_OK);
    CHECK(strcmp(out, "<s>a ab<|end|>") == 0);
    const int32_t bad_id[] = {0, 10};
    CHECK_STATUS(attn_bpe_decode(t, bad_id, 2, 0, out, sizeof out, &len),
                 ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "10") != NULL);
    CHECK_STATUS(attn_bpe_encode(t, "a", 1, 8u, ids, 16, &n), ATTN_E_INVALID);
    attn_bpe_free(t);
    v.pre = "deepseek-llm";
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_E_UNSUPPORTED);
    CHECK(t == NULL && strstr(attn_last_error(), "deepseek-llm") != NULL);
    v.pre = "gpt2";
    const char *bad_merges[] = {"a b", "b a"};
    v.merges = bad_merges;
    v.n_merges = 2;
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_E_FORMAT);
    CHECK(strstr(attn_last_error(), "concatenation") != NULL);
    const char *no_space[] = {"ab"};
    v.merges = no_space;
    v.n_merges = 1;
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_E_FORMAT);
    v.merges = merges;
    v.n_merges = 3;
    const char *not_utf8[] = {"a", "\xff"};
    v.tokens = not_utf8;
    v.n_tokens = 2;
    v.token_types = NULL;
    v.add_bos = 0;
    v.n_merges = 0;
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_E_FORMAT);
    CHECK(strstr(attn_last_error(), "\\xff") != NULL);
}

/* The streaming decoder holds bytes until a character is whole, and
 * replaces invalid sequences as from_utf8_lossy does. */
static void streaming(void) {
    /* the alphabet's characters for bytes 0xE2 0x82 0xAC (the euro sign),
     * 0xF0, 0x9F, and 0xC3 then a byte that cannot follow it */
    const char *tokens[] = {"\xc3\xa2", "\xc4\xa4", "\xc2\xac", "\xc3\xb0",
                            "\xc5\x81", "\xc3\x83", "A"};
    attn_bpe_vocab v;
    attn_bpe_vocab_init(&v);
    v.n_tokens = 7;
    v.tokens = tokens;
    v.pre = "gpt2";
    attn_bpe *t = NULL;
    CHECK_STATUS(attn_bpe_from_vocab(&v, &t), ATTN_OK);
    if (!t) return;
    attn_bpe_stream s;
    attn_bpe_stream_init(&s);
    char out[256];
    size_t k;
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 0, 0, out, sizeof out, &k),
                 ATTN_OK);
    CHECK(k == 0);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 1, 0, out, sizeof out, &k),
                 ATTN_OK);
    CHECK(k == 0);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 2, 0, out, sizeof out, &k),
                 ATTN_OK);
    CHECK(k == 3 && memcmp(out, "\xe2\x82\xac", 3) == 0);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 5, 0, out, sizeof out, &k),
                 ATTN_OK);
    CHECK(k == 0);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 6, 0, out, sizeof out, &k),
                 ATTN_OK);
    CHECK(k == 4 && memcmp(out,
                           "\xef\xbf\xbd"
                           "A",
                           4) == 0);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 3, 0, out, sizeof out, &k),
                 ATTN_OK);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 4, 0, out, sizeof out, &k),
                 ATTN_OK);
    CHECK(k == 0);
    CHECK_STATUS(attn_bpe_stream_end(&s, out, sizeof out, &k), ATTN_OK);
    CHECK(k == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 0, 0, out, 2, &k), ATTN_E_INVALID);
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 7, 0, out, sizeof out, &k),
                 ATTN_E_INVALID);
    /* a state no stream can reach is refused, not trusted */
    s.n_held = 2;
    s.held[0] = 'A';
    CHECK_STATUS(attn_bpe_stream_next(t, &s, 0, 0, out, sizeof out, &k),
                 ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "stream state") != NULL);
    s.held[0] = 0xf0;
    s.held[1] = 0x80; /* F0 must be followed by 90..BF */
    CHECK_STATUS(attn_bpe_stream_end(&s, out, sizeof out, &k), ATTN_E_INVALID);
    s.held[1] = 0x90;
    CHECK_STATUS(attn_bpe_stream_end(&s, out, sizeof out, &k), ATTN_OK);
    CHECK(k == 3 && s.n_held == 0);
    attn_bpe_free(t);
}

static void refused(const char *json, attn_status want, const char *needle) {
    attn_bpe *t = (attn_bpe *)1;
    CHECK_STATUS(attn_bpe_parse(json, strlen(json), "test.json", &t), want);
    CHECK(t == NULL);
    CHECK_MSG(strstr(attn_last_error(), needle) != NULL, "'%s' lacks '%s'",
              attn_last_error(), needle);
}

#define MODEL(extra)                                                           \
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": "  \
    "2}, \"merges\": [\"a b\"]" extra "}"
#define BL "{\"type\": \"ByteLevel\"}"

static void json_cases(void) {
    const char *ok =
        "{" MODEL("") ", \"pre_tokenizer\": " BL ", \"decoder\": " BL "}";
    attn_bpe *t = NULL;
    CHECK_STATUS(attn_bpe_parse(ok, strlen(ok), "ok", &t), ATTN_OK);
    int32_t ids[8];
    int64_t n;
    /* add_prefix_space defaults to true; there is no space in the vocab */
    CHECK_STATUS(attn_bpe_encode(t, "ab", 2, 0, ids, 8, &n), ATTN_OK);
    CHECK(n == 1 && ids[0] == 2);
    attn_bpe_free(t);
    refused("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
            ATTN_E_UNSUPPORTED, "WordPiece");
    refused("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
            ATTN_E_UNSUPPORTED, "Unigram");
    refused("{" MODEL(", \"byte_fallback\": true") "}", ATTN_E_UNSUPPORTED,
            "byte_fallback");
    refused("{" MODEL("") ", \"normalizer\": {\"type\": \"NFKC\"}}",
            ATTN_E_UNSUPPORTED, "NFKC");
    refused("{" MODEL("") ", \"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
            ATTN_E_UNSUPPORTED, "Metaspace");
    refused(
        "{" MODEL(
            "") ", \"pre_tokenizer\": {\"type\": \"Sequence\", "
                "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                "\"\\\\d+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
                "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                "\"use_regex\": false}]}}",
        ATTN_E_UNSUPPORTED, "\\x5cd+");
    refused("{" MODEL("") ", \"pre_tokenizer\": " BL
                          ", \"decoder\": {\"type\": \"Metaspace\"}}",
            ATTN_E_UNSUPPORTED, "decoder");
    refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
            "\"merges\": [\"a b\"]}, \"pre_tokenizer\": " BL
            ", \"decoder\": " BL "}",
            ATTN_E_FORMAT, "concatenation");
    refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, "
            "\"merges\": []}, \"pre_tokenizer\": " BL ", \"decoder\": " BL "}",
            ATTN_E_FORMAT, "two tokens");
    refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 3000000000}, "
            "\"merges\": []}}",
            ATTN_E_FORMAT, "'a'");
    refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999}, "
            "\"merges\": []}, \"pre_tokenizer\": " BL ", \"decoder\": " BL "}",
            ATTN_E_FORMAT, "sparse");
    refused(
        "{" MODEL("") ", \"pre_tokenizer\": " BL ", \"decoder\": " BL
                      ", \"added_tokens\": [{\"id\": 5, \"content\": \"x\", "
                      "\"single_word\": true}]}",
        ATTN_E_UNSUPPORTED, "single_word");
    refused(
        "{" MODEL(
            "") ", \"pre_tokenizer\": " BL ", \"decoder\": " BL
                ", \"post_processor\": {\"type\": \"TemplateProcessing\", "
                "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}, {\"Sequence\": "
                "{\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": "
                "[77]}}}}",
        ATTN_E_FORMAT, "77");
    refused("{\"model\": ", ATTN_E_FORMAT, "malformed JSON");
    refused("[1, 2, 3]", ATTN_E_FORMAT, "not a JSON object");
    /* many tiny values: refused before the parser allocates for them */
    size_t big = 1 << 20;
    char *many = malloc(big + 1);
    many[0] = '[';
    for (size_t i = 1; i < big; i++) many[i] = (i & 1) ? '0' : ',';
    many[big - 1] = ']';
    many[big] = '\0';
    refused(many, ATTN_E_FORMAT, "too many");
    free(many);
    CHECK_STATUS(attn_bpe_load("/nonexistent/tokenizer.json", &t), ATTN_E_IO);
    CHECK(t == NULL);
}

int main(void) {
    const char *names[] = {"gpt2", "gpt2p", "llama3", "qwen2", "smollm"};
    for (int i = 0; i < 5; i++) fixture(names[i]);
    smollm2();
    from_vocab();
    streaming();
    json_cases();
    return check_done("test_bpe");
}
