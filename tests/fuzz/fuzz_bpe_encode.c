/* libFuzzer target: encoding arbitrary text. The first input byte picks
 * the pre-tokenizer (gpt2, smollm, llama-bpe, qwen2), ignore_merges and
 * the flags, or (with its top bit) the same vocabulary as a tokenizer.json
 * with Qwen2's NFC normalizer; the rest is the text. The tokenizer, made once per choice,
 * has every byte and a few hundred merges built from the byte alphabet
 * and control / user-defined tokens, so that:
 *  - counting and writing give the same ids, all in the vocabulary, at
 *    most one a byte (plus the BOS);
 *  - decoding them gives the text back when it is UTF-8 (added tokens
 *    decode to themselves), and the stream equals the whole decode;
 *  - with NFC, decoding gives the normalized text, which encodes to the
 *    same ids again (NFC is idempotent). */
#include "attn_tokenizer.h"
#include "fuzz_util.h"

#define NTOK 700

static char *tok[NTOK + 8];
static char *mrg[NTOK];

static size_t put_cp(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static unsigned byte_cp(unsigned b) {
    int p = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    if (p) return b;
    unsigned k = 0;
    for (unsigned c = 0; c < b; c++)
        k += !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae);
    return 256 + k;
}

static attn_bpe *make(int pre, int ign) {
    static const char *const pres[4] = {"gpt2", "smollm", "llama-bpe", "qwen2"};
    static int ready;
    static int64_t nt, nm;
    static int32_t types[NTOK + 8];
    if (!ready) {
        for (unsigned b = 0; b < 256; b++) {
            tok[nt] = calloc(4, 1);
            put_cp(tok[nt], byte_cp(b));
            types[nt++] = 1;
        }
        /* merges of common text first, then pseudo-random pairs */
        static const char *const words[] = {"Ġthe", "Ġa", "in", "er",
                                            "on",   "Ġ1", "23", "'s",
                                            "ĊĊ",   "ĠĠ", "Ã©", "ä¸"};
        uint32_t x = 12345;
        for (int k = 0; nt < NTOK - 4; k++) {
            const char *a, *b;
            char wa[8], wb[64];
            if (k < 12) {
                const char *w = words[k];
                size_t l1 = ((unsigned char)w[0] >= 0x80) ? 2 : 1;
                memcpy(wa, w, l1);
                wa[l1] = 0;
                snprintf(wb, sizeof wb, "%s", w + l1);
                a = wa, b = wb;
                /* b must be a token: only single characters are certain */
                if (strlen(wb) > 2) continue;
            } else {
                x = x * 1103515245u + 12345u;
                a = tok[(x >> 8) % (uint32_t)nt];
                x = x * 1103515245u + 12345u;
                b = tok[(x >> 8) % (uint32_t)nt];
                if (strlen(a) + strlen(b) > 24) continue;
            }
            char *ab = malloc(strlen(a) + strlen(b) + 1);
            snprintf(ab, strlen(a) + strlen(b) + 1, "%s%s", a, b);
            int dup = 0;
            for (int64_t i = 0; i < nt && !dup; i++) dup = !strcmp(tok[i], ab);
            if (dup) {
                free(ab);
                continue;
            }
            mrg[nm] = malloc(strlen(a) + strlen(b) + 2);
            snprintf(mrg[nm], strlen(a) + strlen(b) + 2, "%s %s", a, b);
            nm++;
            tok[nt] = ab;
            types[nt++] = 1;
        }
        static const char *const added[4] = {"<|endoftext|>", "<|im_start|>",
                                             "<|im_end|>", "[[user]]"};
        for (int k = 0; k < 4; k++) {
            tok[nt] = strdup(added[k]);
            types[nt++] = k < 3 ? 3 : 4;
        }
        ready = 1;
    }
    attn_bpe_vocab v;
    attn_bpe_vocab_init(&v);
    v.n_tokens = nt;
    v.tokens = (const char *const *)tok;
    v.token_types = types;
    v.n_merges = nm;
    v.merges = (const char *const *)mrg;
    v.pre = pres[pre];
    v.bos_id = nt - 4;
    v.add_bos = 1;
    v.ignore_merges = ign;
    attn_bpe *t = NULL;
    FUZZ_CHECK(attn_bpe_from_vocab(&v, &t) == ATTN_OK);
    return t;
}

/* s as a JSON string (quotes and backslashes escaped) at o. */
static size_t json_str(char *o, const char *s) {
    size_t k = 0;
    o[k++] = '"';
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') o[k++] = '\\';
        o[k++] = *s;
    }
    o[k++] = '"';
    return k;
}

/* The vocabulary of make() as a tokenizer.json with NFC (make runs first). */
static attn_bpe *make_nfc(void) {
    int64_t nt = 0, nm = 0;
    while (tok[nt]) nt++;
    while (mrg[nm]) nm++;
    size_t cap = 4096;
    for (int64_t i = 0; i < nt; i++) cap += 2 * strlen(tok[i]) + 32;
    for (int64_t i = 0; i < nm; i++) cap += 2 * strlen(mrg[i]) + 8;
    char *j = malloc(cap);
    size_t k = 0;
    k += (size_t)sprintf(j + k, "{\"normalizer\": {\"type\": \"NFC\"}, "
                                "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int64_t i = 0; i < nt - 4; i++) {
        k += json_str(j + k, tok[i]);
        k += (size_t)sprintf(j + k, ": %lld%s", (long long)i,
                             i + 5 < nt ? ", " : "");
    }
    k += (size_t)sprintf(j + k, "}, \"merges\": [");
    for (int64_t i = 0; i < nm; i++) {
        k += json_str(j + k, mrg[i]);
        if (i + 1 < nm) j[k++] = ',';
    }
    k += (size_t)sprintf(j + k, "]}, \"added_tokens\": [");
    for (int64_t i = nt - 4; i < nt; i++) {
        k += (size_t)sprintf(j + k,
                             "{\"id\": %lld, \"content\": ", (long long)i);
        k += json_str(j + k, tok[i]);
        k += (size_t)sprintf(j + k, ", \"special\": %s}%s",
                             i < nt - 1 ? "true" : "false",
                             i + 1 < nt ? ", " : "");
    }
    k += (size_t)sprintf(
        j + k,
        "], \"pre_tokenizer\": {\"type\": \"Sequence\", "
        "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
        "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
        "\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": "
        "false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
        "\"use_regex\": false}]}, \"decoder\": {\"type\": \"ByteLevel\"}}");
    FUZZ_CHECK(k < cap);
    attn_bpe *t = NULL;
    FUZZ_CHECK(attn_bpe_parse(j, k, "nfc", &t) == ATTN_OK);
    free(j);
    return t;
}

static int is_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xc2 && c <= 0xdf ? 2
                   : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4
                                            : 0;
        if (!k || n - i < k) return 0;
        unsigned cp = k == 1 ? c : c & (0x7fu >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        if ((k == 3 && cp < 0x800) ||
            (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k;
    }
    return 1;
}

/* NFC: encode, decode, encode again gives the same ids. */
static void nfc_case(const attn_bpe *t, const char *text, size_t len,
                     unsigned flags) {
    int64_t n = -1, m = -1;
    FUZZ_CHECK(attn_bpe_encode(t, text, len, flags, NULL, 0, &n) == ATTN_OK);
    FUZZ_CHECK(n >= 0 && n <= 2 * (int64_t)len + 4);
    int32_t *ids = malloc(sizeof *ids * (size_t)(2 * n + 8));
    FUZZ_CHECK(attn_bpe_encode(t, text, len, flags, ids, n, &m) == ATTN_OK);
    FUZZ_CHECK(m == n);
    size_t tl = 0, k;
    FUZZ_CHECK(attn_bpe_decode(t, ids, n, 0, NULL, 0, &tl) == ATTN_OK);
    char *out = malloc(tl + 1);
    FUZZ_CHECK(attn_bpe_decode(t, ids, n, 0, out, tl + 1, &k) == ATTN_OK);
    if (is_utf8((const uint8_t *)text, len)) {
        int32_t *again = ids + n;
        FUZZ_CHECK(attn_bpe_encode(t, out, tl, flags, again, n + 8, &m) ==
                   ATTN_OK);
        FUZZ_CHECK(m == n && memcmp(again, ids, sizeof *ids * (size_t)n) == 0);
    }
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static attn_bpe *cache[8], *nfc;
    if (size < 1) return 0;
    int pick = data[0] & 7;
    unsigned flags = (data[0] >> 3) & 3;
    if (!cache[pick]) cache[pick] = make(pick & 3, pick >> 2);
    const attn_bpe *t = cache[pick];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 0x80) {
        if (!nfc) nfc = make_nfc();
        nfc_case(nfc, text, len, flags & ATTN_BPE_PARSE_SPECIAL);
        return 0;
    }
    int64_t n = -1, m = -1, v = attn_bpe_vocab_size(t);
    FUZZ_CHECK(attn_bpe_encode(t, text, len, flags, NULL, 0, &n) == ATTN_OK);
    FUZZ_CHECK(n >= 0 && n <= (int64_t)len + 1);
    int32_t *ids = malloc(sizeof *ids * (size_t)(n + 1));
    FUZZ_CHECK(attn_bpe_encode(t, text, len, flags, ids, n, &m) == ATTN_OK);
    FUZZ_CHECK(m == n);
    for (int64_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < v);
    const int skip = (flags & ATTN_BPE_ADD_SPECIAL) != 0; /* drops the BOS */
    size_t tl = 0, k;
    FUZZ_CHECK(attn_bpe_decode(t, ids, n, skip, NULL, 0, &tl) == ATTN_OK);
    char *out = malloc(tl + 1), *piece = malloc(attn_bpe_stream_max(t));
    FUZZ_CHECK(attn_bpe_decode(t, ids, n, skip, out, tl + 1, &k) == ATTN_OK);
    /* without ATTN_BPE_PARSE_SPECIAL special tokens are text; skipping
     * removes only what the encoder made special */
    if (is_utf8((const uint8_t *)text, len) &&
        (!skip || (flags & ATTN_BPE_PARSE_SPECIAL) == 0 ||
         !memchr(text, '<', len)))
        FUZZ_CHECK(tl == len && memcmp(out, text, len) == 0);
    attn_bpe_stream s;
    attn_bpe_stream_init(&s);
    size_t w = 0;
    for (int64_t i = 0; i <= n; i++) {
        if (i < n)
            FUZZ_CHECK(attn_bpe_stream_next(t, &s, ids[i], skip, piece,
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
    return 0;
}
