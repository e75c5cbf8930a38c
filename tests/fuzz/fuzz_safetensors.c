/* libFuzzer target: the safetensors reader on arbitrary bytes. A file it
 * accepts is walked whole (every tensor got, found by name and, when it
 * is floating, converted), so an accepted lie about offsets would show as
 * an out-of-bounds read under ASan.
 *
 * `make fuzz` runs it with the other targets (tests/fuzz/README.md);
 * without libFuzzer, tests/fuzz/replay_main.c runs the same function on
 * the seed corpus (CTest fuzz_replay_safetensors). */
#include "attn_pretrained.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The library's allocation counter (internal; the target links the static
 * library): a header may cost memory in proportion to its size, no more. */
size_t attn__alloc_peak(void);
size_t attn__alloc_current(void);
void attn__alloc_peak_reset(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_safetensors *st = NULL;
    attn__alloc_peak_reset();
    const size_t before = attn__alloc_current();
    const attn_status status = attn_safetensors_parse(data, size, "fuzz", &st);
    /* 24 bytes a header byte: the tree of a hostile header (a value per
     * two bytes) must not be what a tree of 80-byte nodes was */
    if (attn__alloc_peak() > before + 24 * size + 65536) {
        fprintf(stderr, "safetensors: %zu bytes allocated for %zu bytes\n",
                attn__alloc_peak() - before, size);
        abort();
    }
    if (status != ATTN_OK) {
        if (st) abort();                    /* a failure must leave no object */
        if (!attn_last_error()[0]) abort(); /* ... and must say why */
        return 0;
    }
    int64_t n = attn_safetensors_count(st);
    for (int64_t i = 0; i < n; i++) {
        attn_st_tensor t, u;
        if (attn_safetensors_get(st, i, &t)) abort();
        if (attn_safetensors_find(st, t.name, &u) || u.data != t.data) abort();
        if ((const uint8_t *)t.data < data ||
            (const uint8_t *)t.data + t.nbytes > data + size)
            abort();
        if (t.dtype == ATTN_F32 || t.dtype == ATTN_F16 ||
            t.dtype == ATTN_BF16 || t.dtype == ATTN_F64) {
            if (t.numel > (1 << 20)) continue; /* keep each run fast */
            float *f = malloc(sizeof(float) * (size_t)(t.numel + 1));
            if (!f) continue;
            if (attn_st_tensor_to_f32(&t, f, t.numel)) abort();
            free(f);
        }
    }
    attn_safetensors_close(st);
    return 0;
}
