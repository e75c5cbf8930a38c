/* libFuzzer target: a Llama-family model from arbitrary GGUF bytes (the
 * loader's metadata, name table, shapes, un-permutation, kept quantized
 * rows and tokenizer on top of the GGUF reader). A model it accepts runs
 * one forward pass of up to 3 ids. Memory must stay in proportion to the
 * input: the loader checks the metadata's model against the values the
 * file holds before it allocates.
 *
 * `make fuzz` runs it with the other targets (tests/fuzz/README.md);
 * without libFuzzer, tests/fuzz/replay_main.c runs the same function on
 * the seed corpus (CTest fuzz_replay_llama_gguf). */
#include "attn_gguf.h"
#include "attn_pretrained.h"
#include "../../src/models/llama.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

size_t attn__alloc_peak(void);
size_t attn__alloc_current(void);
void attn__alloc_peak_reset(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn__alloc_peak_reset();
    attn_gguf *g = NULL;
    if (attn_gguf_parse(data, size, "fuzz", &g) != ATTN_OK) return 0;
    attn_llama *m = attn__alloc(1, sizeof *m, "model"); /* as the loader */
    if (!m) abort();
    memset(m, 0, sizeof *m);
    attn_status st = attn__llama_from_gguf(m, g, "fuzz");
    attn_gguf_close(g);
    /* the model's floats, its quantized copy and the tokenizer: a fixed
     * multiple of the file (4-bit values are 8 to a byte or more) */
    if (attn__alloc_peak() > 64 * size + (8u << 20)) {
        fprintf(stderr, "peak %zu bytes for a %zu-byte input\n",
                attn__alloc_peak(), size);
        abort();
    }
    if (st == ATTN_OK) {
        const attn_llama_config *c = attn_llama_get_config(m);
        int32_t ids[3] = {0, (int32_t)(c->vocab_size - 1), 0};
        const int64_t L = c->max_position < 3 ? c->max_position : 3;
        if (c->vocab_size <= 4096 && c->hidden_size <= 256) {
            float *z = malloc(sizeof(float) * (size_t)(L * c->vocab_size));
            if (!z) abort();
            if (attn_llama_forward(m, 1, L, ids, 1, z, NULL) == ATTN_E_INVALID)
                abort();
            free(z);
        }
    }
    attn_llama_free(m);
    return 0;
}
