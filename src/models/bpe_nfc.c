/* Unicode NFC for the tokenizers whose tokenizer.json asks for it (Qwen2):
 * full canonical decomposition (the generated tables, Hangul by
 * arithmetic), canonical ordering of combining marks (a stable sort by
 * class within each run of non-starters), then canonical composition of
 * each unblocked pair, as Unicode's UAX #15 defines them. Bytes that are
 * not UTF-8 pass through untouched as starters that compose with nothing. */
#include "bpe.h"

#include <string.h>

#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)
#define RAW 0x110000u /* RAW + b: the byte b that is not UTF-8 */

static int ccc(uint32_t cp) {
    if (cp < 0x300 || cp >= RAW) return 0;
    return attn__cp_run_class(attn__bpe_ccc, attn__bpe_nccc, cp);
}

static const attn__bpe_decomp *decomp(uint32_t cp) {
    return attn__cp_find(attn__bpe_nfd, attn__bpe_nnfd, sizeof *attn__bpe_nfd,
                         cp);
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 &&
        b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    int lo = 0, hi = attn__bpe_nnfc - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const attn__bpe_pair3 *p = &attn__bpe_nfc[mid];
        if (p->a == a && p->b == b) return p->c;
        if (p->a < a || (p->a == a && p->b < b))
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return 0;
}

/* Stable sort of k non-starters by combining class: insertion for short
 * runs (the usual one or two marks), counting sort for long ones, so that
 * a hostile run of marks costs O(k). */
static int sort_run(uint32_t *x, size_t k) {
    if (k < 2) return 1;
    if (k <= 16) {
        for (size_t i = 1; i < k; i++) {
            uint32_t v = x[i];
            int c = ccc(v);
            size_t j = i;
            while (j > 0 && ccc(x[j - 1]) > c) {
                x[j] = x[j - 1];
                j--;
            }
            x[j] = v;
        }
        return 1;
    }
    uint32_t *tmp = attn__alloc(k, sizeof *tmp, "combining marks");
    if (!tmp) return 0;
    size_t start[257] = {0};
    for (size_t i = 0; i < k; i++) start[ccc(x[i]) + 1]++;
    for (int c = 0; c < 256; c++) start[c + 1] += start[c];
    for (size_t i = 0; i < k; i++) tmp[start[ccc(x[i])]++] = x[i];
    memcpy(x, tmp, k * sizeof *x);
    attn__free(tmp);
    return 1;
}

int attn__bpe_nfc_maybe(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0xcc) return 1; /* U+0300 and above start with 0xCC+ */
    return 0;
}

size_t attn__bpe_nfc_cap(size_t n) { return 4 * (2 * n + 4); }

/* Next code point of s[0..n) (n > 0), RAW + byte for one not UTF-8. */
static uint32_t next_cp(const unsigned char *s, size_t n, size_t *used) {
    uint32_t cp;
    *used = attn__utf8_next(s, n, &cp);
    if (*used) return cp;
    *used = 1;
    return RAW + s[0];
}

size_t attn__bpe_nfc_apply(const unsigned char *s, size_t n, char *out,
                           uint32_t *buf) {
    /* decompose: at most 2 code points a byte (checked by the generator) */
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t cp = next_cp(s + i, n - i, &used);
        i += used;
        if (cp >= SBASE && cp < SBASE + SCOUNT) {
            uint32_t x = cp - SBASE;
            buf[m++] = LBASE + x / NCOUNT;
            buf[m++] = VBASE + (x % NCOUNT) / TCOUNT;
            if (x % TCOUNT) buf[m++] = TBASE + x % TCOUNT;
            continue;
        }
        const attn__bpe_decomp *d = cp >= 0xc0 && cp < RAW ? decomp(cp) : NULL;
        if (!d) {
            buf[m++] = cp;
            continue;
        }
        for (int k = 0; k < d->len; k++)
            buf[m++] = attn__bpe_nfd_pool[d->off + k];
    }
    /* canonical order: a stable sort by class of each run of non-starters */
    for (size_t i = 0; i < m;) {
        if (ccc(buf[i]) == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < m && ccc(buf[j]) != 0) j++;
        if (!sort_run(buf + i, j - i)) return SIZE_MAX;
        i = j;
    }
    /* compose */
    size_t w = 0;
    if (m > 0) {
        size_t starter = 0;
        int last = ccc(buf[0]) ? 256 : 0;
        w = 1;
        for (size_t i = 1; i < m; i++) {
            uint32_t ch = buf[i];
            int c = ccc(ch);
            uint32_t comp =
                buf[starter] < RAW && ch < RAW ? compose(buf[starter], ch) : 0;
            if (comp && (last < c || last == 0)) {
                buf[starter] = comp;
                continue;
            }
            if (c == 0) starter = w;
            last = c;
            buf[w++] = ch;
        }
    }
    size_t o = 0;
    for (size_t i = 0; i < w; i++) {
        if (buf[i] >= RAW)
            out[o++] = (char)(buf[i] - RAW);
        else
            o += attn__put_utf8(out + o, buf[i]);
    }
    return o;
}
