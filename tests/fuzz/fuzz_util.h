/* Shared by the fuzz targets (tests/fuzz/fuzz_*.c): the input as a file
 * (the loaders take paths), a byte reader for inputs that are recipes, and
 * a check that aborts, so that libFuzzer (and the replay driver) report
 * the input that broke a property. */
#ifndef ATTN_FUZZ_UTIL_H
#define ATTN_FUZZ_UTIL_H

#include "attn.h"
#include "attn_layers.h"
#include "attn_train.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz property failed at %s:%d: %s (%s)\n",        \
                    __FILE__, __LINE__, #cond, attn_last_error());             \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The scratch paths handed out, removed when the process exits (the
 * replay tests run in the shared /tmp and must not leave their last input
 * there). A target names at most four. */
typedef struct {
    char path[4][256];
    int n;
} fuzz_scratch;

static inline fuzz_scratch *fuzz_scratch_paths(void) {
    static fuzz_scratch s;
    return &s;
}

static inline void fuzz_cleanup(void) {
    fuzz_scratch *s = fuzz_scratch_paths();
    for (int i = 0; i < s->n; i++) unlink(s->path[i]);
}

/* A per-process scratch path in $TMPDIR (or /tmp) named after tag. */
static inline const char *fuzz_path(const char *tag) {
    fuzz_scratch *s = fuzz_scratch_paths();
    const char *tmp = getenv("TMPDIR");
    char b[256];
    snprintf(b, sizeof b, "%s/attn_fuzz_%ld_%s", tmp && *tmp ? tmp : "/tmp",
             (long)getpid(), tag);
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->path[i], b) == 0) return s->path[i];
    FUZZ_CHECK(s->n < 4);
    if (s->n == 0) atexit(fuzz_cleanup);
    memcpy(s->path[s->n], b, sizeof b);
    return s->path[s->n++];
}

/* Writes the input to path (the loaders read files). */
static inline void fuzz_put(const char *path, const uint8_t *data,
                            size_t size) {
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(size == 0 || fwrite(data, 1, size, f) == size);
    FUZZ_CHECK(fclose(f) == 0);
}

/* The whole of path (free() it); NULL if missing. */
static inline uint8_t *fuzz_get(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *size = fread(b, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    return b;
}

/* CRC-32 (IEEE, as zlib's crc32), written apart from the library's. */
static inline uint32_t fuzz_crc32(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

/* A copy of the input whose last 4 bytes are the CRC-32 of the rest, as
 * parameter files and checkpoints end: a mutated input then gets past the
 * CRC check to the fields behind it. free() it. */
static inline uint8_t *fuzz_resealed(const uint8_t *data, size_t size) {
    uint8_t *b = malloc(size ? size : 1);
    if (size) memcpy(b, data, size);
    if (size >= 4) {
        const uint32_t c = fuzz_crc32(b, size - 4);
        for (int i = 0; i < 4; i++) b[size - 4 + i] = (uint8_t)(c >> (8 * i));
    }
    return b;
}

/* Input bytes read in order; past the end, zeros. */
typedef struct {
    const uint8_t *p;
    size_t n, pos;
} fuzz_bytes;

static inline unsigned fuzz_u8(fuzz_bytes *b) {
    return b->pos < b->n ? b->p[b->pos++] : 0u;
}
/* An integer in [lo, hi]. */
static inline int64_t fuzz_range(fuzz_bytes *b, int64_t lo, int64_t hi) {
    uint32_t v = fuzz_u8(b) | fuzz_u8(b) << 8;
    return lo + (int64_t)(v % (uint32_t)(hi - lo + 1));
}

#endif
