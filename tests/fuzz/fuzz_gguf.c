/* libFuzzer target: the GGUF reader on arbitrary bytes. A file it accepts
 * is walked whole (every metadata entry got and found by key, every array
 * element read, every tensor got, found by name and, when attn reads its
 * type, converted), so an accepted lie about a length or an offset would
 * show as an out-of-bounds read under ASan. Memory must stay in
 * proportion to the input.
 *
 * `make fuzz` runs it with the other targets (tests/fuzz/README.md);
 * without libFuzzer, tests/fuzz/replay_main.c runs the same function on
 * the seed corpus (CTest fuzz_replay_gguf). */
#include "attn_gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

size_t attn__alloc_peak(void);
size_t attn__alloc_current(void);
void attn__alloc_peak_reset(void);

static volatile uint8_t last_byte;

/* Reads the last byte of a string, so that a length past the input shows. */
static void touch(const char *s, size_t len) {
    if (len) last_byte = ((const uint8_t *)s)[len - 1];
}

static void walk_meta(const attn_gguf *g) {
    int64_t n = attn_gguf_meta_count(g);
    for (int64_t i = 0; i < n; i++) {
        attn_gguf_value v, w;
        if (attn_gguf_meta_get(g, i, &v)) abort();
        if (attn_gguf_meta_find(g, v.key, &w) || w.type != v.type) abort();
        if (v.type == ATTN_GGUF_STRING) touch(v.str, v.len);
        if (v.type != ATTN_GGUF_ARRAY) continue;
        uint64_t m = v.count < 4096 ? v.count : 4096;
        for (uint64_t k = 0; k < m; k++) {
            const char *s;
            size_t len;
            int64_t x;
            double f;
            if (v.elem_type == ATTN_GGUF_STRING) {
                if (attn_gguf_array_string(g, &v, k, &s, &len)) abort();
                touch(s, len);
            } else if (v.elem_type == ATTN_GGUF_FLOAT32 ||
                       v.elem_type == ATTN_GGUF_FLOAT64) {
                if (attn_gguf_array_float(g, &v, k, &f)) abort();
            } else if (attn_gguf_array_int(g, &v, k, &x)) {
                abort();
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_gguf *g = NULL;
    attn__alloc_peak_reset();
    const size_t before = attn__alloc_current();
    const attn_status status = attn_gguf_parse(data, size, "fuzz", &g);
    /* records of 96 bytes per entry of at least 13 bytes, name copies, and
     * 8 bytes per string-array element of at least 8: within 8x */
    if (attn__alloc_peak() > before + 8 * size + 65536) {
        fprintf(stderr, "gguf: %zu bytes allocated for %zu bytes\n",
                attn__alloc_peak() - before, size);
        abort();
    }
    if (status != ATTN_OK) {
        if (g) abort();
        if (!attn_last_error()[0]) abort();
        return 0;
    }
    walk_meta(g);
    int64_t n = attn_gguf_tensor_count(g);
    for (int64_t i = 0; i < n; i++) {
        attn_gguf_tensor t, u;
        if (attn_gguf_tensor_get(g, i, &t)) abort();
        if (attn_gguf_find_tensor(g, t.name, &u) || u.data != t.data) abort();
        if ((const uint8_t *)t.data < data ||
            (const uint8_t *)t.data + t.nbytes > data + size)
            abort();
        if (t.numel > (1 << 20)) continue; /* keep each run fast */
        float *f = malloc(sizeof(float) * (size_t)(t.numel + 1));
        if (!f) continue;
        attn_status st = attn_gguf_tensor_to_f32(&t, f, t.numel);
        if (st != ATTN_OK && st != ATTN_E_UNSUPPORTED && st != ATTN_E_NONFINITE)
            abort();
        free(f);
    }
    attn_gguf_close(g);
    return 0;
}
