/* The WordPiece tokenizer of BERT: basic tokenization (clean, CJK split,
 * accents stripped and lower-cased through the generated per-character map
 * of wordpiece_tables.c, whitespace and punctuation split), then greedy
 * longest-match-first pieces looked up in an open-addressing hash of the
 * vocabulary. Every step is per character, so one pass over the text
 * suffices; words are cut as soon as they end. */
#include "wordpiece.h"
#include "../io/binfile.h"
#include "../io/json.h"
#include "attn_pretrained.h"

#include <string.h>

/* The largest WordPiece vocabularies in use are a few MB (250k tokens);
 * past this a file is not one, and reading it is refused before anything
 * is allocated for it. */
#define WP_MAX_VOCAB_BYTES ((size_t)64 << 20)

struct attn_wordpiece {
    attn_wordpiece_opts o;
    char *text;    /* the vocabulary's tokens, NUL-separated       */
    uint32_t *tok; /* tok[id]: offset of token id in text          */
    int64_t n;
    int32_t *slot; /* hash slots: id or -1                         */
    uint64_t mask;
    int32_t unk, cls, sep;
    int32_t
        special[5]; /* ids of [PAD] [UNK] [CLS] [SEP] [MASK], -1 if absent */
};

/* The special tokens are matched in the raw text before anything else,
 * as tokenizers does with its added tokens. */
static const char *const specials[5] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                        "[MASK]"};

void attn_wordpiece_opts_init(attn_wordpiece_opts *o) {
    if (!o) return;
    o->lowercase = 1;
    o->strip_accents = -1;
    o->chinese_chars = 1;
    o->max_chars_per_word = 100;
}

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* id of the n bytes at s, or -1. */
static int32_t lookup(const attn_wordpiece *wp, const char *s, size_t n) {
    for (uint64_t i = hash(s, n) & wp->mask;; i = (i + 1) & wp->mask) {
        int32_t id = wp->slot[i];
        if (id < 0) return -1;
        const char *t = wp->text + wp->tok[id];
        if (strncmp(t, s, n) == 0 && t[n] == '\0') return id;
    }
}

void attn_wordpiece_free(attn_wordpiece *wp) {
    if (!wp) return;
    ATTN__FREE_ALL(wp->text, wp->tok, wp->slot, wp);
}

/* The next line of text[*at..size) without its line end and trailing
 * blanks: its start in *start, its length returned; *at moves past it. */
static size_t next_line(const char *text, size_t size, size_t *at,
                        size_t *start) {
    const char *p = text + *at;
    const char *nl = memchr(p, '\n', size - *at);
    const char *e = nl ? nl : text + size;
    *start = *at;
    *at = nl ? (size_t)(nl - text) + 1 : size;
    while (e > p && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
    return (size_t)(e - p);
}

static attn_status build(attn_wordpiece *wp, const char *path, size_t size) {
    /* a first pass that allocates nothing: the lines, a NUL, the special
     * tokens; a file that is not a vocabulary is refused here, before the
     * tables are sized by its line count */
    static const char *const need[3] = {"[UNK]", "[CLS]", "[SEP]"};
    int has[3] = {0, 0, 0};
    int64_t lines = 0, nonempty = 0;
    for (size_t at = 0, start; at < size;) {
        const size_t len = next_line(wp->text, size, &at, &start);
        const char *p = wp->text + start;
        lines++;
        nonempty += len > 0;
        if (memchr(p, '\0', len)) {
            char eb[64];
            return attn__fail(ATTN_E_FORMAT,
                              "%s: line %lld ('%s') holds a NUL "
                              "byte",
                              path, (long long)lines,
                              attn__escape_bytes(p, strlen(p), eb, sizeof eb));
        }
        for (int k = 0; k < 3; k++)
            has[k] |= len == strlen(need[k]) && memcmp(p, need[k], len) == 0;
    }
    if (lines < 1 || lines > 0x7ffffffe)
        return attn__fail(ATTN_E_FORMAT, "%s: %lld lines: not a vocabulary",
                          path, (long long)lines);
    for (int k = 0; k < 3; k++)
        if (!has[k])
            return attn__fail(ATTN_E_FORMAT,
                              "%s: the vocabulary has no %s "
                              "token",
                              path, need[k]);
    wp->tok = attn__alloc((size_t)lines, sizeof *wp->tok, "vocabulary");
    /* empty lines keep their ids but take no hash slot: no piece is empty */
    uint64_t cap = 16;
    while (cap < (uint64_t)nonempty + (uint64_t)nonempty / 2) cap *= 2;
    wp->slot = attn__alloc((size_t)cap, sizeof *wp->slot, "vocabulary hash");
    if (!wp->tok || !wp->slot) return ATTN_E_NOMEM;
    wp->mask = cap - 1;
    for (uint64_t i = 0; i < cap; i++) wp->slot[i] = -1;
    size_t at = 0;
    for (int64_t id = 0; id < lines; id++) {
        size_t start;
        const size_t len = next_line(wp->text, size, &at, &start);
        char *p = wp->text + start;
        p[len] = '\0';
        wp->tok[id] = (uint32_t)start;
        wp->n = id + 1;
        if (!len) continue;
        uint64_t i = hash(p, len) & wp->mask;
        for (;; i = (i + 1) & wp->mask) {
            int32_t o = wp->slot[i];
            if (o < 0 || strcmp(wp->text + wp->tok[o], p) == 0) break;
        }
        wp->slot[i] = (int32_t)id; /* a repeated token keeps its last id */
    }
    int32_t *dst[3] = {&wp->unk, &wp->cls, &wp->sep};
    for (int k = 0; k < 3; k++) *dst[k] = lookup(wp, need[k], strlen(need[k]));
    for (int k = 0; k < 5; k++)
        wp->special[k] = lookup(wp, specials[k], strlen(specials[k]));
    return ATTN_OK;
}

attn_status attn_wordpiece_load(const char *path,
                                const attn_wordpiece_opts *opts,
                                attn_wordpiece **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_E_INVALID, "vocab_path is NULL");
    attn_wordpiece_opts o;
    attn_wordpiece_opts_init(&o);
    if (opts) o = *opts;
    if (o.max_chars_per_word == 0) o.max_chars_per_word = 100;
    if (o.strip_accents < 0) o.strip_accents = o.lowercase != 0;
    if (o.max_chars_per_word < 1 || o.max_chars_per_word > 1000000)
        return attn__fail(ATTN_E_INVALID,
                          "max_chars_per_word is %lld (1 .. "
                          "1000000)",
                          (long long)o.max_chars_per_word);
    if ((o.lowercase != 0) != (o.strip_accents != 0))
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "lowercase %d with strip_accents "
                          "%d: attn lower-cases and strips accents together or "
                          "not at all",
                          o.lowercase, o.strip_accents);
    attn_wordpiece *wp = attn__alloc(1, sizeof *wp, "tokenizer");
    if (!wp) return ATTN_E_NOMEM;
    memset(wp, 0, sizeof *wp);
    wp->o = o;
    size_t size = 0;
    unsigned char *text = NULL;
    attn_status st = attn__read_file_max(
        path, 0, WP_MAX_VOCAB_BYTES, "a WordPiece vocabulary", &text, &size);
    wp->text = (char *)text;
    if (!st) st = build(wp, path, size);
    if (st) {
        attn_wordpiece_free(wp);
        return st;
    }
    *out = wp;
    return ATTN_OK;
}

int64_t attn_wordpiece_vocab_size(const attn_wordpiece *wp) {
    return wp ? wp->n : 0;
}

const char *attn_wordpiece_token(const attn_wordpiece *wp, int64_t id) {
    return wp && id >= 0 && id < wp->n ? wp->text + wp->tok[id] : NULL;
}

attn_status attn_wordpiece_id(const attn_wordpiece *wp, const char *token,
                              int32_t *id) {
    ATTN__NONNULL("wp, token, id", wp, token, id);
    *id = lookup(wp, token, strlen(token));
    if (*id >= 0) return ATTN_OK;
    char eb[96];
    return attn__fail(ATTN_E_INVALID, "token '%s' is not in the vocabulary",
                      attn__escape_bytes(token, strlen(token), eb, sizeof eb));
}

/* ---- basic tokenization ------------------------------------------------ */

/* Next code point of s[0..n) (n > 0); bytes that are not UTF-8 are
 * U+FFFD, one byte at a time. */
static uint32_t next_cp(const unsigned char *s, size_t n, size_t *used) {
    uint32_t cp;
    *used = attn__utf8_next(s, n, &cp);
    if (*used) return cp;
    *used = 1;
    return 0xfffd;
}

static int cls_of(uint32_t cp) {
    return attn__cp_run_class(attn__wp_runs, attn__wp_nruns, cp);
}

static const attn__wp_map *map_of(uint32_t cp) {
    return attn__cp_find(attn__wp_maps, attn__wp_nmaps, sizeof *attn__wp_maps,
                         cp);
}

/* The normalized form of cp as UTF-8 into out (at most 16 bytes). */
static size_t normalize(const attn_wordpiece *wp, uint32_t cp, char *out) {
    if (!wp->o.lowercase) return attn__put_utf8(out, cp);
    if (cp >= 0xac00 && cp <= 0xd7a3) { /* Hangul syllable: NFD is L V (T) */
        uint32_t s = cp - 0xac00, t = s % 28;
        size_t k = attn__put_utf8(out, 0x1100 + s / 588);
        k += attn__put_utf8(out + k, 0x1161 + (s % 588) / 28);
        if (t) k += attn__put_utf8(out + k, 0x11a7 + t);
        return k;
    }
    const attn__wp_map *m = map_of(cp);
    if (!m) return attn__put_utf8(out, cp);
    memcpy(out, m->utf8, m->len);
    return m->len;
}

/* The word being built and the ids being written. */
typedef struct {
    const attn_wordpiece *wp;
    char *w; /* the word's bytes (cap wcap), "##" room in front */
    size_t wlen, wcap;
    int64_t nchars; /* characters of the word, counted past wcap too   */
    int32_t *ids;
    int64_t cap, n;
    char *cand; /* scratch: "##" + a piece                        */
} wp_run;

static void emit(wp_run *r, int32_t id) {
    if (r->ids && r->n < r->cap) r->ids[r->n] = id;
    r->n++;
}

/* Cuts the current word into pieces. */
static void flush(wp_run *r) {
    if (r->nchars == 0) return;
    const attn_wordpiece *wp = r->wp;
    if (r->nchars > wp->o.max_chars_per_word || r->wlen > r->wcap) {
        emit(r, wp->unk);
        r->wlen = 0;
        r->nchars = 0;
        return;
    }
    int64_t first = r->n;
    size_t start = 0;
    while (start < r->wlen) {
        size_t end = r->wlen;
        int32_t id = -1;
        while (end > start) {
            size_t k = 0;
            if (start > 0) r->cand[k++] = '#', r->cand[k++] = '#';
            memcpy(r->cand + k, r->w + start, end - start);
            id = lookup(wp, r->cand, k + end - start);
            if (id >= 0) break;
            do end--; /* back to the previous character boundary */
            while (end > start && ((unsigned char)r->w[end] & 0xc0) == 0x80);
        }
        if (id < 0) { /* no piece fits: the whole word is unknown */
            r->n = first;
            emit(r, wp->unk);
            break;
        }
        emit(r, id);
        start = end;
    }
    r->wlen = 0;
    r->nchars = 0;
}

static void add_char(wp_run *r, const char *u, size_t k) {
    if (r->wlen + k <= r->wcap) memcpy(r->w + r->wlen, u, k);
    r->wlen += k;
    r->nchars++;
}

/* Adds the normalized bytes u[0..k) to the word, splitting at whitespace
 * and around punctuation (which the map may in principle produce). */
static void add_normalized(wp_run *r, const char *u, size_t k) {
    size_t i = 0;
    while (i < k) {
        size_t used;
        uint32_t cp = next_cp((const unsigned char *)u + i, k - i, &used);
        int c = cls_of(cp);
        if (c == ATTN__WP_SPACE) {
            flush(r);
        } else if (c == ATTN__WP_PUNCT) {
            flush(r);
            add_char(r, u + i, used);
            flush(r);
        } else if (c != ATTN__WP_REMOVE) {
            add_char(r, u + i, used);
        }
        i += used;
    }
}

attn_status attn_wordpiece_tokenize(const attn_wordpiece *wp, const char *text,
                                    int32_t *ids, int64_t cap, int64_t *n) {
    ATTN__NONNULL("wp, text, n", wp, text, n);
    if (cap < 0 || (cap > 0 && !ids))
        return attn__fail(ATTN_E_INVALID, "ids is NULL with cap %lld",
                          (long long)cap);
    wp_run r;
    memset(&r, 0, sizeof r);
    r.wp = wp;
    r.ids = ids;
    r.cap = cap;
    r.wcap = (size_t)wp->o.max_chars_per_word * 16 +
             16; /* 16 bytes a char at most */
    r.w = attn__alloc(r.wcap, 1, "word");
    r.cand = attn__alloc(r.wcap + 2, 1, "word piece");
    if (!r.w || !r.cand) {
        attn__free(r.w);
        attn__free(r.cand);
        return ATTN_E_NOMEM;
    }
    const unsigned char *s = (const unsigned char *)text;
    size_t len = strlen(text);
    for (size_t i = 0; i < len;) {
        size_t used;
        int special = -1;
        for (int k = 0; k < 5 && s[i] == '[' && special < 0; k++)
            if (wp->special[k] >= 0 && strncmp((const char *)s + i, specials[k],
                                               strlen(specials[k])) == 0)
                special = k;
        if (special >= 0) {
            flush(&r);
            emit(&r, wp->special[special]);
            i += strlen(specials[special]);
            continue;
        }
        uint32_t cp = next_cp(s + i, len - i, &used);
        i += used;
        int c = cls_of(cp);
        if (c == ATTN__WP_REMOVE) continue;
        if (c == ATTN__WP_SPACE) {
            flush(&r);
            continue;
        }
        char u[16];
        size_t k = normalize(wp, cp, u);
        if (c == ATTN__WP_CJK && wp->o.chinese_chars) {
            flush(&r);
            add_normalized(&r, u, k);
            flush(&r);
        } else {
            add_normalized(&r, u, k);
        }
    }
    flush(&r);
    attn__free(r.w);
    attn__free(r.cand);
    *n = r.n;
    return ATTN_OK;
}

attn_status attn_wordpiece_encode(const attn_wordpiece *wp, const char *a,
                                  const char *b, int64_t max_len, int32_t *ids,
                                  int32_t *type_ids, int64_t cap, int64_t *n) {
    ATTN__NONNULL("wp, a, n", wp, a, n);
    if (cap < 0 || (cap > 0 && !ids))
        return attn__fail(ATTN_E_INVALID, "ids is NULL with cap %lld",
                          (long long)cap);
    const int64_t specials = b ? 3 : 2;
    if (max_len < 0 || (max_len > 0 && max_len <= specials))
        return attn__fail(ATTN_E_INVALID,
                          "max_len %lld leaves no room for a "
                          "word piece beside %lld special tokens",
                          (long long)max_len, (long long)specials);
    int64_t na = 0, nb = 0;
    attn_status st = attn_wordpiece_tokenize(wp, a, NULL, 0, &na);
    if (!st && b) st = attn_wordpiece_tokenize(wp, b, NULL, 0, &nb);
    if (st) return st;
    int32_t *pa = attn__alloc((size_t)(na + nb + 1), sizeof *pa, "word pieces");
    if (!pa) return ATTN_E_NOMEM;
    int32_t *pb = pa + na;
    attn_wordpiece_tokenize(wp, a, pa, na, &na);
    if (b) attn_wordpiece_tokenize(wp, b, pb, nb, &nb);
    if (max_len > 0 && na + nb > max_len - specials) {
        const int64_t room = max_len - specials;
        if (!b) {
            na = room;
        } else { /* the shorter keeps min(its length, room / 2) */
            int64_t *lng = na >= nb ? &na : &nb, *sht = na >= nb ? &nb : &na;
            if (*sht > room / 2) *sht = room / 2;
            *lng = room - *sht;
        }
    }
    int64_t k = 0;
#define PUT(id, type)                                                          \
    do {                                                                       \
        if (k < cap) {                                                         \
            ids[k] = (id);                                                     \
            if (type_ids) type_ids[k] = (type);                                \
        }                                                                      \
        k++;                                                                   \
    } while (0)
    PUT(wp->cls, 0);
    for (int64_t i = 0; i < na; i++) PUT(pa[i], 0);
    PUT(wp->sep, 0);
    if (b) {
        for (int64_t i = 0; i < nb; i++) PUT(pb[i], 1);
        PUT(wp->sep, 1);
    }
#undef PUT
    attn__free(pa);
    *n = k;
    return ATTN_OK;
}
