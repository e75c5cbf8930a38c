/* The WordPiece vocabulary reader (src/models/wordpiece.c) on arbitrary
 * bytes as vocab.txt. Properties: no sanitizer report; the allocation
 * stays in proportion to the file (a few bytes a line, whatever the lines
 * are); a vocabulary it accepts has [UNK], [CLS] and [SEP], gives every id
 * a token whose id lookup agrees, and tokenizes its own tokens and a text
 * made of the input into ids inside the vocabulary. */
#include "attn_pretrained.h"
#include "fuzz_util.h"

/* The library's allocation counter (internal; the target links the static
 * library). */
size_t attn__alloc_peak(void);
size_t attn__alloc_current(void);
void attn__alloc_peak_reset(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = fuzz_path("vocab.txt");
    fuzz_put(in, data, size);
    attn__alloc_peak_reset();
    const size_t before = attn__alloc_current();
    attn_wordpiece *wp = NULL;
    attn_status st = attn_wordpiece_load(in, NULL, &wp);
    /* the text, 4 bytes a line for the ids, a hash slot under 12 bytes a
     * non-empty line (at least 2 bytes with its newline) */
    FUZZ_CHECK(attn__alloc_peak() <= before + 12 * size + 65536);
    if (st) {
        FUZZ_CHECK(wp == NULL && attn_last_error()[0] != '\0');
        return 0;
    }
    const int64_t n = attn_wordpiece_vocab_size(wp);
    FUZZ_CHECK(n >= 3);
    int32_t id;
    FUZZ_CHECK(attn_wordpiece_id(wp, "[UNK]", &id) == ATTN_OK);
    FUZZ_CHECK(attn_wordpiece_id(wp, "[CLS]", &id) == ATTN_OK);
    FUZZ_CHECK(attn_wordpiece_id(wp, "[SEP]", &id) == ATTN_OK);
    for (int64_t i = 0; i < n && i < 4096; i++) {
        const char *t = attn_wordpiece_token(wp, i);
        FUZZ_CHECK(t != NULL);
        if (!t[0]) continue; /* an empty line keeps its id, never matched */
        FUZZ_CHECK(attn_wordpiece_id(wp, t, &id) == ATTN_OK);
        /* a repeated token answers its last id */
        FUZZ_CHECK(id >= i && strcmp(attn_wordpiece_token(wp, id), t) == 0);
    }
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    for (size_t i = 0; i < size; i++) text[i] = data[i] ? (char)data[i] : ' ';
    text[size] = '\0';
    int32_t ids[256];
    int64_t got = 0;
    FUZZ_CHECK(attn_wordpiece_tokenize(wp, text, ids, 256, &got) == ATTN_OK);
    for (int64_t i = 0; i < got && i < 256; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < n);
    free(text);
    attn_wordpiece_free(wp);
    return 0;
}
