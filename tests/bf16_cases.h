/* The bf16 accuracy cases shared by tests/test_flash_bf16.c and
 * tests/torch_bf16_errors.py (which must list the same cases and draw the
 * same inputs): shapes, masks and the input generator.
 *
 * Inputs: q, k, v (B, H|Hkv, L, D) in this order, each value
 * test_rand(&state) (check.h: xorshift64*, uniform in [-1, 1)) times amp,
 * rounded to bf16 (nearest even), state starting at seed. Keep masks (kind
 * PAD): key j of batch b visible when j < Lk - 7 b - 3; rows see at least
 * one key. The tests' helpers below need check.h (included first). */
#ifndef ATTN_BF16_CASES_H
#define ATTN_BF16_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BF16_NONE = 0, BF16_CAUSAL = 1, BF16_PAD = 2 };

typedef struct {
    const char *name;
    int64_t B, H, Hkv, Lq, Lk, D;
    int mask;
    double amp;
    unsigned long long seed;
} bf16_case;

static const bf16_case bf16_cases[] = {
    {"one", 1, 2, 2, 1, 1, 1, BF16_NONE, 1.0, 11},
    {"odd", 1, 2, 2, 17, 33, 7, BF16_NONE, 1.0, 12},
    {"odd_causal", 2, 3, 3, 129, 65, 17, BF16_CAUSAL, 1.0, 13},
    {"gqa_causal", 1, 4, 2, 300, 257, 64, BF16_CAUSAL, 1.0, 14},
    {"long_row", 1, 2, 1, 3, 3000, 128, BF16_NONE, 1.0, 15},
    {"pad", 2, 2, 2, 129, 200, 64, BF16_PAD, 1.0, 16},
    {"d128", 1, 2, 2, 256, 256, 128, BF16_NONE, 2.0, 17},
    {"sharp", 1, 2, 2, 200, 300, 64, BF16_CAUSAL, 4.0, 18},
    {"d3_gqa", 1, 6, 2, 65, 129, 3, BF16_PAD, 1.0, 19},
};

#define BF16_NCASES ((int)(sizeof bf16_cases / sizeof bf16_cases[0]))

/* PyTorch's error of a case from the fixture; -1 when absent. */
static double bf16_torch_err(const char *name) {
    FILE *f =
        fopen(ATTN_SOURCE_DIR "/tests/data/torch_bf16_sdpa_errors.txt", "r");
    if (!f) return -1;
    char line[256], nm[64];
    double e, found = -1;
    while (fgets(line, sizeof line, f))
        if (line[0] != '#' && sscanf(line, "%63s %lf", nm, &e) == 2 &&
            !strcmp(nm, name))
            found = e;
    fclose(f);
    return found;
}

static uint16_t *bf16_gen(int64_t n, double amp, unsigned long long *st) {
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = attn_f32_to_bf16((float)(test_rand(st) * amp));
    return x;
}

#endif
