/* The JSON parser of safetensors headers and model configs (src/io/json.c)
 * on arbitrary bytes, without limits and with a reader's limits.
 * Properties: no sanitizer report; a failure says why; the tree of an
 * accepted text is well formed (children and siblings inside the node
 * array, counts that match, strings inside the arena); the allocation
 * stays in proportion to the text (40-byte nodes, a value per two bytes at
 * most), and within a reader's limits the tree never passes them. */
#include "fuzz_util.h"
#include "json.h"

size_t attn__alloc_peak(void);
size_t attn__alloc_current(void);
void attn__alloc_peak_reset(void);

/* Checks node i and below; returns the values counted. */
static int64_t walk(const attn__json *j, int64_t i, int depth,
                    const attn__json_limits *lim) {
    FUZZ_CHECK(i >= 0 && i < j->n);
    const attn__json_node *v = &j->nodes[i];
    FUZZ_CHECK(depth <= (lim && lim->max_depth ? lim->max_depth : 64));
    if (v->kind == ATTN__JSON_STR) FUZZ_CHECK(v->str >= j->arena);
    if (v->kind != ATTN__JSON_ARR && v->kind != ATTN__JSON_OBJ) return 1;
    int64_t k = 0, total = 1;
    for (int64_t c = v->child; c >= 0; c = j->nodes[c].next, k++) {
        FUZZ_CHECK(c > i && c < j->n);
        FUZZ_CHECK((v->kind == ATTN__JSON_OBJ) == (j->nodes[c].key != NULL));
        total += walk(j, c, depth + 1, lim);
    }
    FUZZ_CHECK(k == v->count);
    if (lim && lim->max_array && v->kind == ATTN__JSON_ARR)
        FUZZ_CHECK(k <= lim->max_array);
    return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* none, a safetensors header's, a config's */
    const attn__json_limits lims[3] = {{0, 0, 0}, {0, 8, 3}, {65536, 0, 0}};
    for (int l = 0; l < 3; l++) {
        const attn__json_limits *lim = l ? &lims[l] : NULL;
        attn__alloc_peak_reset();
        const size_t before = attn__alloc_current();
        attn__json j;
        attn_status st =
            attn__json_parse_lim((const char *)data, size, "fuzz", lim, &j);
        /* 40-byte nodes, at most a value per two bytes, old and new
         * arrays held at once while growing, and the arena: 41 bytes a
         * byte at most (80-byte nodes made it 120) */
        FUZZ_CHECK(attn__alloc_peak() <= before + 48 * size + 65536);
        if (st) {
            FUZZ_CHECK(j.nodes == NULL && attn_last_error()[0] != '\0');
            continue;
        }
        FUZZ_CHECK(walk(&j, 0, 0, lim) == j.n);
        if (lim && lim->max_nodes) FUZZ_CHECK(j.n <= lim->max_nodes);
        attn__json_free(&j);
    }
    return 0;
}
