/* Byte-level BPE: encoding and decoding (the tables are built by
 * bpe_build.c). Encoding scans the text once: added tokens through a trie
 * (checked only at bytes that start one), words through hand-written
 * matchers of the pre-tokenizers' patterns, and each word's merges through
 * a min-heap of (rank, position) over a linked list of symbols, so a word
 * of m bytes costs O(m log m) whatever its length. Words seen before in the
 * same call come from a cache. */
#include "bpe.h"

#include <string.h>

/* ---- characters --------------------------------------------------------- */

static int cls_of_cp(uint32_t cp) {
    return attn__cp_run_class(attn__bpe_runs, attn__bpe_nruns, cp);
}

static inline int ascii_cls(unsigned c) {
    if ((c | 32) >= 'a' && (c | 32) <= 'z') return ATTN__BPE_LETTER;
    if (c >= '0' && c <= '9') return ATTN__BPE_NUMBER;
    if (c == ' ' || (c >= 9 && c <= 13)) return ATTN__BPE_SPACE;
    return ATTN__BPE_OTHER;
}

/* The character at s[i] (i < end): its length (1 for a byte that does not
 * start valid UTF-8, which is then OTHER), code point and class. */
static inline size_t char_at(const unsigned char *s, size_t i, size_t end,
                             uint32_t *cpo, int *cls) {
    const unsigned c = s[i];
    if (c < 0x80) {
        *cpo = c;
        *cls = ascii_cls(c);
        return 1;
    }
    const size_t k = attn__utf8_next(s + i, end - i, cpo);
    if (!k) {
        *cpo = 0xffffffffu;
        *cls = ATTN__BPE_OTHER;
        return 1;
    }
    *cls = cls_of_cp(*cpo);
    return k;
}

static inline int cls_at(const unsigned char *s, size_t i, size_t end) {
    uint32_t cp;
    int c;
    char_at(s, i, end, &cp, &c);
    return c;
}

/* End of the run of class c that starts at i. */
static size_t run_of(const unsigned char *s, size_t i, size_t end, int c) {
    while (i < end) {
        uint32_t cp;
        int k;
        size_t n = char_at(s, i, end, &cp, &k);
        if (k != c) break;
        i += n;
    }
    return i;
}

/* Start of the last character of the whitespace run [i, e). */
static size_t last_char(const unsigned char *s, size_t i, size_t e) {
    size_t p = e - 1;
    while (p > i && (s[p] & 0xc0) == 0x80) p--;
    return p;
}

/* ---- the patterns ------------------------------------------------------- */

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
 * \s+(?!\S)|\s+ ; the piece that starts at i ends at the return value. */
static size_t gpt2_piece(const unsigned char *s, size_t i, size_t end) {
    uint32_t cp;
    int c;
    char_at(s, i, end, &cp, &c);
    if (cp == '\'' && i + 1 < end) {
        unsigned a = s[i + 1], b = i + 2 < end ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
            (a == 'l' && b == 'l'))
            return i + 3;
    }
    if (cp == ' ' && i + 1 < end) { /* " ?" before a letter, digit, other */
        int c2 = cls_at(s, i + 1, end);
        if (c2 != ATTN__BPE_SPACE) return run_of(s, i + 1, end, c2);
    }
    if (c != ATTN__BPE_SPACE) return run_of(s, i, end, c);
    size_t e = run_of(s, i, end, ATTN__BPE_SPACE);
    if (e == end) return e;
    size_t last = last_char(s, i, e); /* \s+(?!\S) leaves the last one */
    return last > i ? last : e;
}

static inline unsigned lower_ascii(unsigned c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Llama 3 (maxdig 3) and Qwen2 (maxdig 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxdig}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t llama_piece(const unsigned char *s, size_t i, size_t end,
                          int maxdig) {
    uint32_t cp;
    int c;
    size_t k = char_at(s, i, end, &cp, &c);
    if (cp == '\'' && i + 1 < end) {
        unsigned a = lower_ascii(s[i + 1]);
        unsigned b = i + 2 < end ? lower_ascii(s[i + 2]) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
            (a == 'l' && b == 'l'))
            return i + 3;
        /* ' then U+017F (long s), which folds to s, is a contraction */
        if (a == 0xc5 && b == 0xbf) return i + 3;
    }
    if (c == ATTN__BPE_LETTER) return run_of(s, i, end, c);
    if (cp != '\r' && cp != '\n' && c != ATTN__BPE_NUMBER && i + k < end &&
        cls_at(s, i + k, end) == ATTN__BPE_LETTER)
        return run_of(s, i + k, end, ATTN__BPE_LETTER);
    if (c == ATTN__BPE_NUMBER) {
        size_t j = i;
        for (int d = 0; d < maxdig && j < end; d++) {
            int cj;
            size_t n = char_at(s, j, end, &cp, &cj);
            if (cj != ATTN__BPE_NUMBER) break;
            j += n;
        }
        return j;
    }
    size_t j = i;
    if (cp == ' ' && i + 1 < end && cls_at(s, i + 1, end) == ATTN__BPE_OTHER)
        j = i + 1;
    if (j < end && cls_at(s, j, end) == ATTN__BPE_OTHER) {
        j = run_of(s, j, end, ATTN__BPE_OTHER);
        while (j < end && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    size_t e = run_of(s, i, end, ATTN__BPE_SPACE); /* c is SPACE */
    for (size_t p = e; p > i; p--) /* \s*[\r\n]+: to the last newline */
        if (s[p - 1] == '\r' || s[p - 1] == '\n') return p;
    if (e == end) return e;
    size_t last = last_char(s, i, e);
    return last > i ? last : e;
}

/* ---- one call's state --------------------------------------------------- */

#define CACHE_SLOTS_MAX 65536 /* slots: a power of two, about len / 64 */
#define CACHE_MAX_WORD 48
#define CACHE_ARENA ((size_t)8 << 20)

typedef struct {
    uint64_t h;
    uint32_t off, klen, nids; /* key at arena[off], then nids int32s     */
} cache_slot;

typedef struct {
    const attn_bpe *t;
    int32_t *ids;
    int64_t cap, n;
    attn_status st;
    /* symbols of the word being merged */
    int32_t *sym, *prev, *next, *wout; /* wout: the word's ids        */
    uint64_t *heap;
    size_t scap;
    char *scratch; /* byte-level form of a word; a segment with a space */
    size_t xcap;
    cache_slot *cache;
    char *carena;
    size_t cused, ccap, nslots;
} enc;

static void emit(enc *r, int32_t id) {
    if (r->ids && r->n < r->cap) r->ids[r->n] = id;
    r->n++;
}

static int grow(enc *r, size_t m) {
    if (m <= r->scap) return 1;
    size_t c = r->scap ? r->scap : 64;
    while (c < m) c *= 2;
    attn__free(r->sym);
    attn__free(r->prev);
    attn__free(r->next);
    attn__free(r->heap);
    attn__free(r->wout);
    r->sym = attn__alloc(c, sizeof *r->sym, "word symbols");
    r->wout = attn__alloc(c, sizeof *r->wout, "word ids");
    r->prev = attn__alloc(c, sizeof *r->prev, "word symbols");
    r->next = attn__alloc(c, sizeof *r->next, "word symbols");
    r->heap = attn__alloc(c, 3 * sizeof *r->heap, "merge heap");
    r->scap = c;
    if (r->sym && r->prev && r->next && r->heap && r->wout) return 1;
    r->scap = 0;
    r->st = ATTN_E_NOMEM;
    return 0;
}

static int scratch(enc *r, size_t m) {
    if (m <= r->xcap) return 1;
    size_t c = r->xcap ? r->xcap : 256;
    while (c < m) c *= 2;
    attn__free(r->scratch);
    if (!(r->scratch = attn__alloc(c, 1, "word"))) {
        r->xcap = 0;
        r->st = ATTN_E_NOMEM;
        return 0;
    }
    r->xcap = c;
    return 1;
}

/* ---- merges ------------------------------------------------------------- */

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

static void push_pair(enc *r, size_t *hn, int32_t pos) {
    int32_t nx = r->next[pos];
    if (nx < 0) return;
    const attn__bpe_merge *m =
        attn__bpe_find_merge(r->t, r->sym[pos], r->sym[nx]);
    if (m)
        heap_push(r->heap, hn,
                  (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)pos);
}

/* The byte-level form of w (each byte as its alphabet character). */
static size_t to_byte_level(const unsigned char *w, size_t m, char *o) {
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        k += attn__put_utf8(o + k, attn__bpe_byte_cp(w[i]));
    return k;
}

/* Merges the word w[0..m) (m >= 1): its ids at r->wout, their count
 * returned (at most m). */
static size_t bpe_word(enc *r, const unsigned char *w, size_t m) {
    const attn_bpe *t = r->t;
    if (!grow(r, m)) return 0;
    if (t->ignore_merges && m > 1) {
        if (!scratch(r, 2 * m)) return 0;
        size_t k = to_byte_level(w, m, r->scratch);
        int32_t id = attn__bpe_vocab_id(t, r->scratch, k);
        if (id >= 0) {
            r->wout[0] = id;
            return 1;
        }
    }
    int32_t ns = 0;
    for (size_t i = 0; i < m; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) {
            if (t->unk < 0) continue; /* dropped, as without an unk token */
            if (t->fuse_unk && ns > 0 && r->sym[ns - 1] == t->unk) continue;
            id = t->unk;
        }
        r->sym[ns++] = id;
    }
    for (int32_t k = 0; k < ns; k++) {
        r->prev[k] = k - 1;
        r->next[k] = k + 1 < ns ? k + 1 : -1;
    }
    size_t hn = 0;
    for (int32_t k = 0; k + 1 < ns; k++) push_pair(r, &hn, k);
    while (hn > 0) {
        uint64_t top = heap_pop(r->heap, &hn);
        int32_t pos = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
        int32_t nx = r->next[pos];
        if (r->sym[pos] < 0 || nx < 0) continue;
        const attn__bpe_merge *mg =
            attn__bpe_find_merge(t, r->sym[pos], r->sym[nx]);
        if (!mg || mg->rank != rank) continue; /* the pair has changed */
        r->sym[pos] = mg->id;
        r->sym[nx] = -1;
        int32_t nn = r->next[nx];
        r->next[pos] = nn;
        if (nn >= 0) r->prev[nn] = pos;
        if (r->prev[pos] >= 0) push_pair(r, &hn, r->prev[pos]);
        push_pair(r, &hn, pos);
    }
    size_t n = 0;
    for (int32_t k = ns ? 0 : -1; k >= 0; k = r->next[k])
        r->wout[n++] = r->sym[k];
    return n;
}

/* Emits the ids of word w[0..m), merged once per call for short words. */
static void word(enc *r, const unsigned char *w, size_t m) {
    if (m == 0) return;
    uint64_t h = 0;
    cache_slot *c = NULL;
    if (m <= CACHE_MAX_WORD && r->cache) {
        h = attn__bpe_hash((const char *)w, m);
        c = &r->cache[h & (r->nslots - 1)];
        if (c->klen == m && c->h == h &&
            memcmp(r->carena + c->off, w, m) == 0) {
            const char *v = r->carena + c->off + m;
            for (uint32_t i = 0; i < c->nids; i++) {
                int32_t id;
                memcpy(&id, v + 4 * i, 4);
                emit(r, id);
            }
            return;
        }
    }
    size_t nids = bpe_word(r, w, m);
    for (size_t i = 0; i < nids; i++) emit(r, r->wout[i]);
    if (!c || r->st) return;
    size_t need = m + 4 * nids;
    if (need > r->ccap) return;
    if (r->cused + need > r->ccap) { /* full: start over */
        memset(r->cache, 0, sizeof *r->cache * r->nslots);
        r->cused = 0;
    }
    memcpy(r->carena + r->cused, w, m);
    memcpy(r->carena + r->cused + m, r->wout, 4 * nids);
    c->h = h;
    c->off = (uint32_t)r->cused;
    c->klen = (uint32_t)m;
    c->nids = (uint32_t)nids;
    r->cused += need;
}

/* ---- segments between added tokens -------------------------------------- */

static void pieces(enc *r, const unsigned char *s, size_t end) {
    const int pre = r->t->pre;
    size_t i = 0, stop = 0; /* smollm: the next digit at or after i */
    while (i < end && !r->st) {
        size_t e;
        if (pre == ATTN__PRE_GPT2) {
            e = gpt2_piece(s, i, end);
        } else if (pre == ATTN__PRE_SMOLLM) {
            uint32_t cp;
            int c;
            size_t k = char_at(s, i, end, &cp, &c);
            if (c == ATTN__BPE_NUMBER) { /* every digit alone, and the    */
                e = i + k;               /* pattern sees no text past one */
            } else {
                if (stop <= i) {
                    stop = i + k;
                    while (stop < end) {
                        size_t n = char_at(s, stop, end, &cp, &c);
                        if (c == ATTN__BPE_NUMBER) break;
                        stop += n;
                    }
                }
                e = gpt2_piece(s, i, stop);
            }
        } else if (pre == ATTN__PRE_LLAMA3) {
            e = llama_piece(s, i, end, 3);
        } else if (pre == ATTN__PRE_QWEN2) {
            e = llama_piece(s, i, end, 1);
        } else {
            e = end;
        }
        word(r, s + i, e - i);
        i = e;
    }
}

/* The text between two added tokens: normalized (NFC) when the tokenizer
 * says so, a space put in front when it says so, then cut into words. */
static void segment(enc *r, const unsigned char *s, size_t len) {
    if (len == 0) return;
    const int nfc = r->t->nfc && attn__bpe_nfc_maybe(s, len);
    const int space = r->t->add_prefix_space;
    if (!nfc && !(space && s[0] != ' ')) {
        pieces(r, s, len);
        return;
    }
    char *b = attn__alloc((nfc ? attn__bpe_nfc_cap(len) : len) + 1, 1, "text");
    uint32_t *cps = nfc ? attn__alloc(2 * len + 4, sizeof *cps, "text") : NULL;
    if (!b || (nfc && !cps)) {
        attn__free(b);
        attn__free(cps);
        r->st = ATTN_E_NOMEM;
        return;
    }
    if (nfc) {
        len = attn__bpe_nfc_apply(s, len, b + 1, cps);
    } else {
        memcpy(b + 1, s, len);
    }
    attn__free(cps);
    if (len == SIZE_MAX) {
        attn__free(b);
        r->st = ATTN_E_NOMEM;
        return;
    }
    const int put = space && len > 0 && b[1] != ' ';
    b[0] = ' ';
    pieces(r, (const unsigned char *)b + 1 - put, len + (size_t)put);
    attn__free(b);
}

static int is_ws(const unsigned char *s, size_t i, size_t end, size_t *k) {
    uint32_t cp;
    int c;
    *k = char_at(s, i, end, &cp, &c);
    return c == ATTN__BPE_SPACE;
}

/* The longest added token at s[i..len) allowed by flags: its trie node
 * and end, or -1. */
static int32_t added_at(const attn_bpe *t, const unsigned char *s, size_t i,
                        size_t len, unsigned flags, size_t *end) {
    int32_t nd = 0, best = -1;
    for (size_t j = i; j < len; j++) {
        nd = attn__bpe_child(t, nd, s[j]);
        if (nd < 0) break;
        const attn__bpe_node *x = &t->node[nd];
        if (x->id >= 0 && (!x->special || (flags & ATTN_BPE_PARSE_SPECIAL))) {
            best = nd;
            *end = j + 1;
        }
    }
    return best;
}

attn_status attn_bpe_encode(const attn_bpe *t, const char *text, size_t len,
                            unsigned flags, int32_t *ids, int64_t cap,
                            int64_t *n) {
    if (!t || (!text && len) || !n)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          !t   ? "t"
                          : !n ? "n"
                               : "text");
    if (cap < 0 || (cap > 0 && !ids))
        return attn__fail(ATTN_E_INVALID, "ids is NULL with cap %lld",
                          (long long)cap);
    if (flags & ~(ATTN_BPE_PARSE_SPECIAL | ATTN_BPE_ADD_SPECIAL))
        return attn__fail(ATTN_E_INVALID, "unknown flags 0x%x", flags);
    enc r;
    memset(&r, 0, sizeof r);
    r.t = t;
    r.ids = ids;
    r.cap = cap;
    if (len > 256) { /* a cache pays for itself on longer texts */
        r.ccap = len < CACHE_ARENA / 8 ? 8 * len : CACHE_ARENA;
        r.nslots = 256;
        while (r.nslots < CACHE_SLOTS_MAX && r.nslots * 64 < len) r.nslots *= 2;
        r.cache = attn__alloc(r.nslots, sizeof *r.cache, "word cache");
        r.carena = attn__alloc(r.ccap, 1, "word cache");
        if (!r.cache || !r.carena) {
            attn__free(r.cache);
            attn__free(r.carena);
            return ATTN_E_NOMEM;
        }
        memset(r.cache, 0, sizeof *r.cache * r.nslots);
    }
    if (flags & ATTN_BPE_ADD_SPECIAL)
        for (int k = 0; k < t->nprefix; k++) emit(&r, t->prefix[k]);
    const unsigned char *s = (const unsigned char *)text;
    size_t seg = 0; /* start of the text not yet encoded */
    for (size_t i = 0; i < len && !r.st;) {
        size_t e = 0, k;
        int32_t nd = t->first[s[i]] ? added_at(t, s, i, len, flags, &e) : -1;
        if (nd < 0) {
            i++;
            continue;
        }
        size_t b = i;
        if (t->node[nd].lstrip) /* whitespace before it is part of it */
            while (b > seg) {
                size_t p = last_char(s, seg, b);
                if (!is_ws(s, p, b, &k) || p + k != b) break;
                b = p;
            }
        if (t->node[nd].rstrip)
            while (e < len && is_ws(s, e, len, &k)) e += k;
        segment(&r, s + seg, b - seg);
        emit(&r, t->node[nd].id);
        seg = i = e;
    }
    if (!r.st) segment(&r, s + seg, len - seg);
    if (flags & ATTN_BPE_ADD_SPECIAL)
        for (int k = 0; k < t->nsuffix; k++) emit(&r, t->suffix[k]);
    attn__free(r.sym);
    attn__free(r.prev);
    attn__free(r.next);
    attn__free(r.heap);
    attn__free(r.wout);
    attn__free(r.scratch);
    attn__free(r.cache);
    attn__free(r.carena);
    if (r.st) return r.st;
    *n = r.n;
    return ATTN_OK;
}

/* ---- decoding ----------------------------------------------------------- */

void attn_bpe_stream_init(attn_bpe_stream *s) {
    if (s) memset(s, 0, sizeof *s);
}

size_t attn_bpe_stream_max(const attn_bpe *t) {
    return t ? 3 * ((size_t)t->max_blen + 4) : 0;
}

/* Bytes a valid sequence starting with lead c has (0: c cannot start one),
 * and the range its second byte must be in. */
static int lead_len(unsigned c, unsigned *lo, unsigned *hi) {
    *lo = 0x80, *hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) {
        if (c == 0xe0) *lo = 0xa0;
        if (c == 0xed) *hi = 0x9f; /* no surrogates */
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (c == 0xf0) *lo = 0x90;
        if (c == 0xf4) *hi = 0x8f;
        return 4;
    }
    return 0;
}

static size_t put_fffd(char *o) {
    memcpy(o, "\xef\xbf\xbd", 3);
    return 3;
}

/* The held bytes are the start of a valid sequence, short of its end. */
static int stream_ok(const attn_bpe_stream *s) {
    if (s->n_held == 0) return 1;
    if (s->n_held < 0 || s->n_held > 3) return 0;
    unsigned lo, hi;
    int need = lead_len(s->held[0], &lo, &hi);
    if (need < 2 || s->n_held >= need) return 0;
    for (int i = 1; i < s->n_held; i++) {
        if (s->held[i] < lo || s->held[i] > hi) return 0;
        lo = 0x80, hi = 0xbf;
    }
    return 1;
}

/* Feeds byte c to the stream; writes completed text at o. */
static size_t feed(attn_bpe_stream *s, unsigned c, char *o) {
    size_t w = 0;
    unsigned lo, hi;
    for (;;) {
        if (s->n_held == 0) {
            int need = lead_len(c, &lo, &hi);
            if (need == 1) {
                o[w++] = (char)c;
            } else if (need == 0) {
                w += put_fffd(o + w);
            } else {
                s->held[0] = (unsigned char)c;
                s->n_held = 1;
            }
            return w;
        }
        int need = lead_len(s->held[0], &lo, &hi);
        if (s->n_held > 1) lo = 0x80, hi = 0xbf;
        if (c >= lo && c <= hi) {
            s->held[s->n_held++] = (unsigned char)c;
            if (s->n_held == need) {
                memcpy(o + w, s->held, (size_t)need);
                w += (size_t)need;
                s->n_held = 0;
            }
            return w;
        }
        /* the held bytes are a maximal invalid start: one U+FFFD, and c
         * is read again on its own */
        w += put_fffd(o + w);
        s->n_held = 0;
    }
}

attn_status attn_bpe_stream_next(const attn_bpe *t, attn_bpe_stream *s,
                                 int32_t id, int skip_special, char *out,
                                 size_t cap, size_t *len) {
    ATTN__NONNULL("t, s, out, len", t, s, out, len);
    if (id < 0 || id >= t->n)
        return attn__fail(ATTN_E_INVALID, "id %lld is outside [0, %lld)",
                          (long long)id, (long long)t->n);
    if (cap < attn_bpe_stream_max(t))
        return attn__fail(ATTN_E_INVALID,
                          "cap %zu is below attn_bpe_stream_max (%zu)", cap,
                          attn_bpe_stream_max(t));
    if (!stream_ok(s))
        return attn__fail(ATTN_E_INVALID,
                          "the stream state is not one attn_bpe_stream_init "
                          "or attn_bpe_stream_next left");
    const attn__bpe_tok *k = &t->tok[id];
    size_t w = 0;
    if (!(skip_special && k->special))
        for (uint32_t i = 0; i < k->blen; i++)
            w += feed(s, (unsigned char)k->bytes[i], out + w);
    *len = w;
    return ATTN_OK;
}

attn_status attn_bpe_stream_end(attn_bpe_stream *s, char *out, size_t cap,
                                size_t *len) {
    ATTN__NONNULL("s, out, len", s, out, len);
    if (cap < 3) return attn__fail(ATTN_E_INVALID, "cap %zu is below 3", cap);
    if (!stream_ok(s))
        return attn__fail(ATTN_E_INVALID,
                          "the stream state is not one attn_bpe_stream_init "
                          "or attn_bpe_stream_next left");
    *len = s->n_held ? put_fffd(out) : 0;
    s->n_held = 0;
    return ATTN_OK;
}

attn_status attn_bpe_decode(const attn_bpe *t, const int32_t *ids, int64_t n,
                            int skip_special, char *out, size_t cap,
                            size_t *len) {
    if (!t || (!ids && n) || !len || (!out && cap))
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          !t            ? "t"
                          : !len        ? "len"
                          : !out && cap ? "out"
                                        : "ids");
    if (n < 0) return attn__fail(ATTN_E_INVALID, "n is %lld", (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n)
            return attn__fail(ATTN_E_INVALID,
                              "ids[%lld] = %d is outside [0, %lld)",
                              (long long)i, ids[i], (long long)t->n);
    char *piece = attn__alloc(attn_bpe_stream_max(t), 1, "decoded piece");
    if (!piece) return ATTN_E_NOMEM;
    attn_bpe_stream s;
    attn_bpe_stream_init(&s);
    size_t total = 0, k;
    /* two passes: the length, then the text if it fits */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && cap <= total) break;
        size_t w = 0;
        for (int64_t i = 0; i <= n; i++) {
            if (i < n)
                attn_bpe_stream_next(t, &s, ids[i], skip_special, piece,
                                     attn_bpe_stream_max(t), &k);
            else
                attn_bpe_stream_end(&s, piece, 3, &k);
            if (pass == 1) memcpy(out + w, piece, k);
            w += k;
        }
        if (pass == 1) out[w] = '\0';
        total = w;
    }
    attn__free(piece);
    *len = total;
    return ATTN_OK;
}
