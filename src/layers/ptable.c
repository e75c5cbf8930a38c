/* Parameter tables: one layer's parameters as rows (name, shape, init,
 * view field). A layer kind builds its table from its config once; the
 * count, the views of parameters and of gradients, the slice table, the
 * init and the typed files all read the same rows. Layouts nest: an
 * encoder layer's table holds the attention's rows under "attn.", their
 * view fields shifted to where the attention's struct sits in the
 * layer's. */
#include "layers.h"

#include <string.h>

void attn__ptab_add(attn__ptab *t, const char *sub, const char *name,
                    int64_t rows, int64_t cols, attn_init_kind init,
                    size_t view) {
    if (t->n >= ATTN__PTAB_MAX) {
        t->n = ATTN__PTAB_MAX + 1; /* a table outgrew the bound: count 0 */
        return;
    }
    attn__prow *r = &t->r[t->n++];
    snprintf(r->name, sizeof r->name, "%s%s", sub, name);
    r->rows = rows;
    r->cols = cols;
    r->init = init;
    r->view = view;
}

void attn__ptab_ln(attn__ptab *t, const char *ln, int64_t E, size_t gamma,
                   size_t beta) {
    char name[32];
    snprintf(name, sizeof name, "%s_gamma", ln);
    attn__ptab_add(t, "", name, E, 1, ATTN_INIT_ONE, gamma);
    snprintf(name, sizeof name, "%s_beta", ln);
    attn__ptab_add(t, "", name, E, 1, ATTN_INIT_ZERO, beta);
}

int64_t attn__ptab_count(const attn__ptab *t) {
    if (t->n > ATTN__PTAB_MAX) return 0;
    int64_t sum = 0, e;
    for (int i = 0; i < t->n; i++)
        if (!attn__mul_i64(t->r[i].rows, t->r[i].cols, &e) ||
            e > INT64_MAX / 4 - sum)
            return 0;
        else
            sum += e;
    return sum;
}

void attn__ptab_view(const attn__ptab *t, float *block, void *view) {
    int64_t offset = 0;
    for (int i = 0; i < t->n && i < ATTN__PTAB_MAX; i++) {
        float **field = (float **)(void *)((char *)view + t->r[i].view);
        *field = block + offset;
        offset += t->r[i].rows * t->r[i].cols;
    }
}

void attn__ptab_slices(const attn__ptab *t, const char *prefix,
                       int64_t *offset, attn_param_slice *slices, int64_t cap,
                       int64_t *n) {
    for (int i = 0; i < t->n && i < ATTN__PTAB_MAX; i++)
        attn__slice_add(slices, cap, n, prefix, t->r[i].name, offset,
                        t->r[i].rows, t->r[i].cols, t->r[i].init);
}

attn_status attn__stack_slices(const attn__ptab *layer, int64_t num_layers,
                               int final_norm, int64_t E, const char *prefix,
                               int cut, int norm_cut, int64_t offset, attn_param_slice *slices,
                               int64_t cap, int64_t *count) {
    ATTN__NEED(count);
    const char *px = prefix ? prefix : "";
    int64_t n = 0;
    char pre[96]; /* names longer than ATTN_SLICE_NAME_MAX - 1 are cut */
    for (int64_t l = 0; l < num_layers; l++) {
        snprintf(pre, sizeof pre, "%.*slayers.%lld.", cut, px, (long long)l);
        attn__ptab_slices(layer, pre, &offset, slices, cap, &n);
    }
    if (final_norm) {
        attn__ptab t = {0};
        attn__ptab_ln(&t, "norm", E, 0, 0);
        snprintf(pre, sizeof pre, "%.*s", norm_cut, px);
        attn__ptab_slices(&t, pre, &offset, slices, cap, &n);
    }
    *count = n;
    return ATTN_OK;
}

void attn__ffn_ptab(attn__ptab *t, int64_t E, int64_t F, int64_t F1,
                    const size_t off[4]) {
    attn__ptab_add(t, "", "w_1", F1, E, ATTN_INIT_XAVIER, off[0]);
    attn__ptab_add(t, "", "b_1", F1, 1, ATTN_INIT_ZERO, off[1]);
    attn__ptab_add(t, "", "w_2", E, F, ATTN_INIT_XAVIER, off[2]);
    attn__ptab_add(t, "", "b_2", E, 1, ATTN_INIT_ZERO, off[3]);
}

attn_status attn__ptab_slices_to(const attn__ptab *t, const char *prefix,
                                 int64_t offset, attn_param_slice *slices,
                                 int64_t cap, int64_t *count) {
    ATTN__NEED(count);
    *count = 0;
    attn__ptab_slices(t, prefix, &offset, slices, cap, count);
    return ATTN_OK;
}

attn_status attn__ptab_view_to(const attn__ptab *t, float *block, void *view,
                               size_t size) {
    ATTN__NEED(block);
    ATTN__NEED(view);
    memset(view, 0, size);
    attn__ptab_view(t, block, view);
    return ATTN_OK;
}

attn_status attn__stack_per_layer(const char *who, const attn__ptab *t,
                                  int64_t num_layers, int64_t *per_layer) {
    int64_t l = attn__ptab_count(t), n;
    if (!l || !attn__mul_i64(l, num_layers, &n) || n > INT64_MAX / 2)
        return attn__fail(ATTN_E_NOMEM, "%s parameter count overflows", who);
    *per_layer = l;
    return ATTN_OK;
}

attn_status attn__stack_layer_view(const attn__ptab *t, int64_t per_layer,
                                   int64_t num_layers, float *block,
                                   int64_t layer, void *view, size_t size) {
    ATTN__NEED(block);
    ATTN__NEED(view);
    if (layer < 0 || layer >= num_layers)
        return attn__fail(ATTN_E_INVALID, "layer %lld is outside [0, %lld)",
                          (long long)layer, (long long)num_layers);
    return attn__ptab_view_to(t, block + layer * per_layer, view, size);
}

attn_status attn__stack_final_view(int64_t per_layer, int64_t num_layers,
                                   int final_norm, int64_t E, float *block,
                                   float **gamma, float **beta) {
    ATTN__NEED(block);
    ATTN__NEED(gamma);
    ATTN__NEED(beta);
    float *x = block + num_layers * per_layer;
    *gamma = final_norm ? x : NULL;
    *beta = final_norm ? x + E : NULL;
    return ATTN_OK;
}
