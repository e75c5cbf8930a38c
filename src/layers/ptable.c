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

void attn__ptab_slices(const attn__ptab *t, const char *prefix, int64_t *offset,
                       attn_param_slice *slices, int64_t cap, int64_t *n) {
    for (int i = 0; i < t->n && i < ATTN__PTAB_MAX; i++)
        attn__slice_add(slices, cap, n, prefix, t->r[i].name, offset,
                        t->r[i].rows, t->r[i].cols, t->r[i].init);
}

void attn__ffn_ptab(attn__ptab *t, int64_t E, int64_t F, int64_t F1,
                    const size_t off[4]) {
    attn__ptab_add(t, "", "w_1", F1, E, ATTN_INIT_XAVIER, off[0]);
    attn__ptab_add(t, "", "b_1", F1, 1, ATTN_INIT_ZERO, off[1]);
    attn__ptab_add(t, "", "w_2", E, F, ATTN_INIT_XAVIER, off[2]);
    attn__ptab_add(t, "", "b_2", E, 1, ATTN_INIT_ZERO, off[3]);
}

attn_status attn__ptab_view_to(const attn__ptab *t, float *block, void *view,
                               size_t size) {
    ATTN__NEED(block);
    ATTN__NEED(view);
    memset(view, 0, size);
    attn__ptab_view(t, block, view);
    return ATTN_OK;
}

/* ---- single layers ---------------------------------------------------- */

/* The checked config's table; ATTN_E_NOMEM when its count overflows. */
static attn_status kind_table(const attn__layer_kind *k, const void *c,
                              attn__ptab *t) {
    attn_status st = k->check(c);
    if (st) return st;
    t->n = 0;
    k->table(c, t);
    if (!attn__ptab_count(t))
        return attn__fail(ATTN_E_NOMEM, "%s parameter count overflows", k->who);
    return ATTN_OK;
}

int64_t attn__kind_count(const attn__layer_kind *k, const void *c) {
    attn__ptab t;
    return kind_table(k, c, &t) ? 0 : attn__ptab_count(&t);
}

attn_status attn__kind_view(const attn__layer_kind *k, const void *c,
                            float *block, void *view, size_t size) {
    attn__ptab t;
    attn_status st = kind_table(k, c, &t);
    return st ? st : attn__ptab_view_to(&t, block, view, size);
}

attn_status attn__kind_slices(const attn__layer_kind *k, const void *c,
                              const char *prefix, int64_t offset,
                              attn_param_slice *slices, int64_t cap,
                              int64_t *count) {
    attn__ptab t;
    attn_status st = kind_table(k, c, &t);
    if (st) return st;
    ATTN__NEED(count);
    *count = 0;
    attn__ptab_slices(&t, prefix, &offset, slices, cap, count);
    return ATTN_OK;
}

/* ---- stacks of layers ------------------------------------------------- */

static int64_t cfg_i64(const void *c, size_t off) {
    int64_t v;
    memcpy(&v, (const char *)c + off, sizeof v);
    return v;
}

/* The checked config's layer table and the floats of one layer. */
static attn_status stack_table(const attn__stack_kind *k, const void *c,
                               attn__ptab *t, int64_t *per_layer) {
    attn_status st = k->check(c);
    if (st) return st;
    k->layer(c, t);
    int64_t l = attn__ptab_count(t), n;
    if (!l || !attn__mul_i64(l, cfg_i64(c, k->num_layers), &n) ||
        n > INT64_MAX / 2)
        return attn__fail(ATTN_E_NOMEM, "%s parameter count overflows", k->who);
    *per_layer = l;
    return ATTN_OK;
}

/* stack_table, then block checked. */
static attn_status stack_open(const attn__stack_kind *k, const void *c,
                              const float *block, attn__ptab *t,
                              int64_t *per_layer) {
    attn_status st = stack_table(k, c, t, per_layer);
    if (st) return st;
    ATTN__NEED(block);
    return ATTN_OK;
}

static int final_norm_of(const attn__stack_kind *k, const void *c) {
    int v;
    memcpy(&v, (const char *)c + k->final_norm, sizeof v);
    return v;
}

int64_t attn__stack_count(const attn__stack_kind *k, const void *c) {
    attn__ptab t;
    int64_t l;
    if (stack_table(k, c, &t, &l)) return 0;
    return l * cfg_i64(c, k->num_layers) +
           (final_norm_of(k, c) ? 2 * cfg_i64(c, k->d_model) : 0);
}

attn_status attn__stack_view(const attn__stack_kind *k, const void *c,
                             float *block, int64_t layer, void *view,
                             size_t size) {
    attn__ptab t;
    int64_t l;
    attn_status st = stack_open(k, c, block, &t, &l);
    if (st) return st;
    ATTN__NEED(view);
    const int64_t L = cfg_i64(c, k->num_layers);
    if (layer < 0 || layer >= L)
        return attn__fail(ATTN_E_INVALID, "layer %lld is outside [0, %lld)",
                          (long long)layer, (long long)L);
    return attn__ptab_view_to(&t, block + layer * l, view, size);
}

attn_status attn__stack_norm_view(const attn__stack_kind *k, const void *c,
                                  float *block, float **gamma, float **beta) {
    attn__ptab t;
    int64_t l;
    attn_status st = stack_open(k, c, block, &t, &l);
    if (st) return st;
    ATTN__NEED(gamma);
    ATTN__NEED(beta);
    float *x = block + cfg_i64(c, k->num_layers) * l;
    const int fn = final_norm_of(k, c);
    *gamma = fn ? x : NULL;
    *beta = fn ? x + cfg_i64(c, k->d_model) : NULL;
    return ATTN_OK;
}

attn_status attn__stack_slices(const attn__stack_kind *k, const void *c,
                               const char *prefix, int64_t offset,
                               attn_param_slice *slices, int64_t cap,
                               int64_t *count) {
    attn__ptab t;
    int64_t l;
    attn_status st = stack_table(k, c, &t, &l);
    if (st) return st;
    ATTN__NEED(count);
    const char *px = prefix ? prefix : "";
    int64_t n = 0;
    char pre[96]; /* names longer than ATTN_SLICE_NAME_MAX - 1 are cut */
    for (int64_t i = 0; i < cfg_i64(c, k->num_layers); i++) {
        snprintf(pre, sizeof pre, "%.*slayers.%lld.", k->cut, px, (long long)i);
        attn__ptab_slices(&t, pre, &offset, slices, cap, &n);
    }
    if (final_norm_of(k, c)) {
        attn__ptab norm = {0};
        attn__ptab_ln(&norm, "norm", cfg_i64(c, k->d_model), 0, 0);
        snprintf(pre, sizeof pre, "%.*s", k->norm_cut, px);
        attn__ptab_slices(&norm, pre, &offset, slices, cap, &n);
    }
    *count = n;
    return ATTN_OK;
}
