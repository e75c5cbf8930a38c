/* libFuzzer target: the tokenizer.json reader on arbitrary bytes. A
 * failure must leave no tokenizer and say why; an accepted tokenizer
 * encodes a few texts (and the input itself), in both counting and
 * writing modes, to ids inside its vocabulary, which decode (whole and
 * streamed) to the same text.
 *
 * `make fuzz` runs it with the other targets (tests/fuzz/README.md);
 * without libFuzzer, tests/fuzz/replay_main.c runs the same function on
 * the seed corpus (CTest fuzz_replay_bpe_json). */
#include "attn_tokenizer.h"
#include "fuzz_util.h"

static void use(const attn_bpe *t, const char *text, size_t len) {
    int64_t n = -1, m = -1, v = attn_bpe_vocab_size(t);
    for (unsigned fl = 0; fl < 4; fl++) {
        FUZZ_CHECK(attn_bpe_encode(t, text, len, fl, NULL, 0, &n) == ATTN_OK);
        int32_t *ids = malloc(sizeof *ids * (size_t)(n + 1));
        FUZZ_CHECK(attn_bpe_encode(t, text, len, fl, ids, n, &m) == ATTN_OK);
        FUZZ_CHECK(m == n && n <= (int64_t)len + 8);
        for (int64_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < v);
        size_t tl = 0, k;
        FUZZ_CHECK(attn_bpe_decode(t, ids, n, 0, NULL, 0, &tl) == ATTN_OK);
        char *out = malloc(tl + 1), *piece = malloc(attn_bpe_stream_max(t));
        FUZZ_CHECK(attn_bpe_decode(t, ids, n, 0, out, tl + 1, &k) == ATTN_OK);
        FUZZ_CHECK(k == tl && out[tl] == '\0');
        attn_bpe_stream s;
        attn_bpe_stream_init(&s);
        size_t w = 0;
        for (int64_t i = 0; i <= n; i++) {
            if (i < n)
                FUZZ_CHECK(attn_bpe_stream_next(t, &s, ids[i], 0, piece,
                                                attn_bpe_stream_max(t),
                                                &k) == ATTN_OK);
            else
                FUZZ_CHECK(attn_bpe_stream_end(&s, piece, 3, &k) == ATTN_OK);
            FUZZ_CHECK(w + k <= tl && memcmp(out + w, piece, k) == 0);
            w += k;
        }
        FUZZ_CHECK(w == tl);
        free(out);
        free(piece);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_bpe *t = (attn_bpe *)&size;
    if (attn_bpe_parse((const char *)data, size, "fuzz", &t) != ATTN_OK) {
        FUZZ_CHECK(t == NULL);
        FUZZ_CHECK(attn_last_error()[0] != '\0');
        return 0;
    }
    static const char *const texts[] = {
        "Hello, world! It's 2024: 12345 apples.\n\n  \tdone",
        "<|endoftext|>x<|im_start|>  caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
        "\xf0\x9f\x98\x80\xff\xfe 'S 'll"};
    for (int i = 0; i < 2; i++) use(t, texts[i], strlen(texts[i]));
    use(t, (const char *)data, size < 512 ? size : 512);
    int64_t v = attn_bpe_vocab_size(t);
    for (int64_t id = 0; id < v && id < 4096; id++) {
        const char *s = attn_bpe_token(t, id);
        int32_t back;
        if (s) FUZZ_CHECK(attn_bpe_id(t, s, &back) == ATTN_OK);
    }
    attn_bpe_free(t);
    return 0;
}
