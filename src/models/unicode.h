/* Internal: lookups in the generated code point tables that the
 * tokenizers share (bpe_tables.c, wordpiece_tables.c, written by
 * gen_bpe_tables.py and gen_wordpiece_tables.py through unicode_gen.py).
 * Not installed. */
#ifndef ATTN_UNICODE_H
#define ATTN_UNICODE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Runs of code points: [start, next run's start) has class cls. */
typedef struct {
    uint32_t start;
    uint8_t cls;
} attn__cp_run;

/* The class of cp in the n runs (sorted by start, the first at 0): that
 * of the last run with start <= cp. */
static inline int attn__cp_run_class(const attn__cp_run *runs, int n,
                                     uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (runs[mid].start <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return runs[lo].cls;
}

/* The entry for cp in a table of n entries of size bytes, sorted by their
 * first member, a uint32_t code point; NULL when cp has none. */
static inline const void *attn__cp_find(const void *table, int n, size_t size,
                                        uint32_t cp) {
    const unsigned char *t = table;
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        uint32_t at;
        memcpy(&at, t + (size_t)mid * size, sizeof at);
        if (at == cp) return t + (size_t)mid * size;
        if (at < cp)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

#endif
