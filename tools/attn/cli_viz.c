/* Shared pieces of the picture and diagnostics subcommands (show, html,
 * heatmap, stats, compare, demo): token lists, map selection, weights. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int cli_tokens_parse(const char *cmd, const char *opt, const char *s,
                     cli_tokens *t) {
    memset(t, 0, sizeof *t);
    size_t len = strlen(s);
    t->buf = malloc(len + 1);
    t->v = malloc(sizeof(char *) * (len / 2 + 2));
    if (!t->buf || !t->v) {
        cli_tokens_free(t);
        fprintf(stderr, "attn %s: out of memory reading %s\n", cmd, opt);
        return 1;
    }
    memcpy(t->buf, s, len + 1);
    for (char *p = t->buf; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') *p++ = '\0';
        if (!*p) break;
        t->v[t->n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    }
    if (t->n == 0) {
        cli_tokens_free(t);
        return cli_usage_error(cmd, "%s is empty", opt);
    }
    return 0;
}

int cli_tokens_expect(const char *cmd, const char *opt, const cli_tokens *t,
                      int64_t n, const char *axis) {
    if (t->v && t->n != n)
        return cli_usage_error(cmd,
                               "%s has %lld tokens but the weights have "
                               "%lld %s",
                               opt, (long long)t->n, (long long)n, axis);
    return 0;
}

void cli_tokens_free(cli_tokens *t) {
    free(t->buf);
    free(t->v);
    memset(t, 0, sizeof *t);
}

void cli_labels_init(cli_labels *l, const char *xopt, const char *yopt) {
    memset(l, 0, sizeof *l);
    l->xopt = xopt;
    l->yopt = yopt;
}

int cli_labels_opt(const char *cmd, cli_labels *l, const char *arg,
                   const char *val, int *rc) {
    cli_tokens *t = strcmp(arg, "--tokens") == 0 ? &l->both
                    : strcmp(arg, l->xopt) == 0  ? &l->x
                    : strcmp(arg, l->yopt) == 0  ? &l->y
                                                 : NULL;
    if (!t) return 0;
    cli_tokens_free(t); /* main refuses repeats; kept for safety */
    *rc = cli_tokens_parse(cmd, arg, val, t);
    return 1;
}

int cli_labels_axis(const char *cmd, const cli_labels *l, int x, int64_t n,
                    const char *axis, const char *const **labels) {
    const cli_tokens *own = x ? &l->x : &l->y;
    const cli_tokens *t = own->v ? own : &l->both;
    int rc = cli_tokens_expect(
        cmd, own->v ? (x ? l->xopt : l->yopt) : "--tokens", t, n, axis);
    if (!rc) *labels = (const char *const *)t->v;
    return rc;
}

int cli_labels_bind(const char *cmd, const cli_labels *l, cli_sdpa_args *a,
                    const attn_tensor *W, const char *const **x_labels,
                    const char *const **y_labels) {
    int rc = cli_labels_axis(cmd, l, 1, W->shape[3], "keys", x_labels);
    if (!rc) rc = cli_labels_axis(cmd, l, 0, W->shape[2], "queries", y_labels);
    if (!rc)
        rc = cli_sdpa_args_bind(cmd, a, W->shape[0], W->shape[1], W->shape[2],
                                W->shape[3]);
    return rc;
}

void cli_labels_free(cli_labels *l) {
    cli_tokens_free(&l->x);
    cli_tokens_free(&l->y);
    cli_tokens_free(&l->both);
}

int cli_viz_next(const char *cmd, int argc, char **argv, int *i,
                 const char *const *flags, const char **path, const char **arg,
                 const char **val, int *rc) {
    *rc = 0;
    for (++*i; *i < argc; ++*i) {
        const char *a = argv[*i];
        if (a[0] != '-' || a[1] == '\0') {
            if (*path) {
                *rc = cli_usage_error(
                    cmd, "one weights file, got '%s' and '%s'", *path, a);
                return 0;
            }
            *path = a;
            continue;
        }
        *arg = a;
        *val = NULL;
        for (int f = 0; flags && flags[f]; f++)
            if (strcmp(a, flags[f]) == 0) return 1;
        if (*i + 1 >= argc) {
            *rc = cli_usage_error(cmd, "%s needs a value", a);
            return 0;
        }
        *val = argv[++*i];
        return 1;
    }
    return 0;
}

int cli_parse_map(const char *cmd, const char *s, int64_t m[3], int *count) {
    char tmp[96];
    if (strlen(s) >= sizeof tmp)
        return cli_usage_error(cmd,
                               "--map wants B,H (or L,B,H), got a value "
                               "of %zu characters",
                               strlen(s));
    strcpy(tmp, s);
    int n = 0;
    for (char *p = tmp;; n++) {
        char *c = strchr(p, ',');
        if (c) *c = '\0';
        if (n == 3 || cli_parse_i64(p, &m[n]) || m[n] < 0)
            return cli_usage_error(cmd,
                                   "--map wants B,H (e.g. 0,3) or, for "
                                   "(layer, batch, head, Lq, Lk) weights, "
                                   "L,B,H: indices >= 0, got '%s'",
                                   s);
        if (!c) break;
        p = c + 1;
    }
    if (n + 1 < 2)
        return cli_usage_error(cmd, "--map wants B,H (e.g. 0,3), got '%s'", s);
    *count = n + 1;
    return 0;
}

/* A float weights file of rank 2..5 as a 4-d view (N, H, Lq, Lk); rank 5
 * (layer, batch, head, Lq, Lk), as attn encoder --weights writes, folds
 * its first two axes into N = layer * batch + b (the file is C order). */
/* The file of cli_load_weights, before --axes. */
static int load_weights_file(const char *cmd, const char *path, cli_tensor *w) {
    memset(w, 0, sizeof *w);
    if (!path) return cli_usage_error(cmd, "missing the weights file");
    attn_status st = attn_npy_read(path, &w->npy);
    if (st) return cli_fail(cmd, st, "reading the weights");
    const attn_npy *a = &w->npy;
    attn_dtype dt = a->dtype;
    if (dt != ATTN_F32 && dt != ATTN_F16 && dt != ATTN_F64) {
        char d[32];
        fprintf(stderr,
                "attn %s: the weights (%s) have dtype %s; a float "
                "array (<f4, <f2 or <f8) is needed\n",
                cmd, cli_esc(path), cli_npy_descr(path, d, sizeof d));
        cli_tensor_free(w);
        return 1;
    }
    int ok = a->ndim >= 2 && a->ndim <= 5;
    for (int i = 0; ok && i < a->ndim; i++) ok = a->shape[i] >= 1;
    if (!ok) {
        char sh[160];
        size_t n = (size_t)snprintf(sh, sizeof sh, "(");
        for (int i = 0; i < a->ndim && n < sizeof sh; i++)
            n += (size_t)snprintf(sh + n, sizeof sh - n, "%s%lld",
                                  i ? ", " : "", (long long)a->shape[i]);
        if (n < sizeof sh) snprintf(sh + n, sizeof sh - n, ")");
        cli_tensor_free(w);
        return cli_usage_error(cmd,
                               "the weights have shape %s: (Lq, Lk), "
                               "(batch, Lq, Lk), (batch, head, Lq, Lk) or "
                               "(layer, batch, head, Lq, Lk) with every extent "
                               ">= 1 is needed",
                               sh);
    }
    int64_t s4[4] = {1, 1, a->shape[a->ndim - 2], a->shape[a->ndim - 1]};
    if (a->ndim == 3) s4[0] = a->shape[0];
    if (a->ndim == 4) s4[0] = a->shape[0], s4[1] = a->shape[1];
    if (a->ndim == 5) {
        if (a->shape[0] > INT64_MAX / a->shape[1]) {
            cli_tensor_free(w);
            return cli_usage_error(cmd, "the weights have too many maps");
        }
        s4[0] = a->shape[0] * a->shape[1];
        s4[1] = a->shape[2];
        w->layers = a->shape[0];
        w->batch = a->shape[1];
    }
    w->rank = a->ndim;
    w->t = attn_tensor_4d(a->data, dt, s4[0], s4[1], s4[2], s4[3]);
    /* the rank's names: (batch), (batch, head), (layer, batch, head) */
    static const char *const names[3][3] = {
        {"batch"}, {"batch", "head"}, {"layer", "batch", "head"}};
    static const int views[3][3] = {{0}, {0, 1}, {0, 0, 1}};
    w->naxes = a->ndim - 2;
    for (int k = 0; k < w->naxes; k++) {
        w->axis[k] = names[w->naxes - 1][k];
        w->view[k] = views[w->naxes - 1][k];
    }
    return 0;
}

static int axis_known(const char *s) {
    return strcmp(s, "layer") == 0 || strcmp(s, "batch") == 0 ||
           strcmp(s, "head") == 0;
}

int cli_weights_axes(const char *cmd, cli_tensor *w, const char *s) {
    if (!s) return 0;
    char tmp[64];
    const char *v[4];
    int n = 0;
    if (strlen(s) >= sizeof tmp)
        return cli_usage_error(cmd, "--axes '%s' is too long", cli_esc(s));
    strcpy(tmp, s);
    for (char *p = tmp; n < 4;) {
        char *c = strchr(p, ',');
        if (c) *c = '\0';
        v[n++] = p;
        if (!c) break;
        p = c + 1;
    }
    for (int k = 0; k < n; k++) {
        int dup = 0;
        for (int j = 0; j < k; j++) dup |= strcmp(v[j], v[k]) == 0;
        if (!axis_known(v[k]) || dup)
            return cli_usage_error(cmd,
                                   "--axes wants distinct names among layer, "
                                   "batch and head, comma-separated, got '%s'",
                                   cli_esc(s));
    }
    if (n != w->naxes) {
        char sh[160];
        cli_shape_str(sh, sizeof sh, w->npy.ndim, w->npy.shape);
        return cli_usage_error(cmd,
                               "--axes names %d ax%s but the weights %s have "
                               "%d before (Lq, Lk)",
                               n, n == 1 ? "is" : "es", sh, w->naxes);
    }
    attn_tensor *t = &w->t;
    if (n == 3) {
        if (strcmp(v[0], "layer") || strcmp(v[1], "batch") ||
            strcmp(v[2], "head"))
            return cli_usage_error(cmd, "--axes of rank-5 weights is "
                                        "layer,batch,head");
    } else if (n == 1 && strcmp(v[0], "head") == 0) {
        /* (head, Lq, Lk): the heads of one map */
        t->shape[1] = t->shape[0];
        t->stride[1] = t->stride[0];
        t->shape[0] = 1;
        w->view[0] = 1;
    } else if (n == 2 && strcmp(v[0], "head") == 0) {
        /* (head, X, Lq, Lk): head on the view's axis 1 */
        int64_t e = t->shape[0], st = t->stride[0];
        t->shape[0] = t->shape[1];
        t->stride[0] = t->stride[1];
        t->shape[1] = e;
        t->stride[1] = st;
        w->view[0] = 1;
        w->view[1] = 0;
    } else {
        for (int k = 0; k < n; k++) w->view[k] = k;
    }
    for (int k = 0; k < n; k++)
        w->axis[k] = strcmp(v[k], "layer") == 0   ? "layer"
                     : strcmp(v[k], "batch") == 0 ? "batch"
                                                  : "head";
    return 0;
}

void cli_axes_str(const cli_tensor *w, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int k = 0; k < w->naxes && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s, ", w->axis[k]);
    if (n < cap) snprintf(buf + n, cap - n, "query, key)");
}

void cli_map_name(const cli_tensor *w, int64_t n, int64_t h, char *buf,
                  size_t cap) {
    if (w->rank == 5 && w->batch == 1) {
        snprintf(buf, cap, "layer %lld head %lld", (long long)n, (long long)h);
        return;
    }
    if (w->rank == 5) {
        snprintf(buf, cap, "layer %lld batch %lld head %lld",
                 (long long)(n / w->batch), (long long)(n % w->batch),
                 (long long)h);
        return;
    }
    /* the file's axes in their order, each with its index in the view */
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < w->naxes && at < cap; k++)
        at +=
            (size_t)snprintf(buf + at, cap - at, "%s%s %lld", k ? " " : "",
                             w->axis[k], (long long)(w->view[k] == 0 ? n : h));
    if (!w->naxes) snprintf(buf, cap, "map");
}

int cli_check_map(const char *cmd, const cli_tensor *w, const int64_t m[3],
                  int count, int64_t *b, int64_t *h) {
    const attn_tensor *t = &w->t;
    if (w->rank == 5) {
        if (count != 3 || m[0] >= w->layers || m[1] >= w->batch ||
            m[2] >= t->shape[1])
            return cli_usage_error(cmd,
                                   "--map takes L,B,H for weights of "
                                   "(layer, batch, head) = (%lld, %lld, %lld)",
                                   (long long)w->layers, (long long)w->batch,
                                   (long long)t->shape[1]);
        *b = m[0] * w->batch + m[1];
        *h = m[2];
        return 0;
    }
    if (count != 2 || m[0] >= t->shape[0] || m[1] >= t->shape[1]) {
        /* the view's two axes by the names the file's axes gave them */
        const char *n0 = "-", *n1 = "-";
        for (int k = 0; k < w->naxes; k++) {
            if (w->view[k] == 0) n0 = w->axis[k];
            if (w->view[k] == 1) n1 = w->axis[k];
        }
        return cli_usage_error(cmd,
                               "--map takes two indices inside the weights' "
                               "(%s, %s) = (%lld, %lld)",
                               n0, n1, (long long)t->shape[0],
                               (long long)t->shape[1]);
    }
    *b = m[0];
    *h = m[1];
    return 0;
}

attn_status cli_layer_grid_write(const char *path, const attn_tensor *W,
                                 const attn_heatmap_opts *o) {
    const int64_t N = W->shape[0], H = W->shape[1];
    if (N < 1 || H < 1 || N > 4096 / H)
        return attn_heatmap_grid_write(path, W, o); /* its message */
    attn_panel *pan = malloc(sizeof *pan * (size_t)(N * H));
    char(*pt)[64] = malloc(sizeof *pt * (size_t)(N * H));
    attn_status st = pan && pt ? ATTN_OK : ATTN_E_NOMEM;
    for (int64_t i = 0; !st && i < N * H; i++) {
        snprintf(pt[i], sizeof pt[i], "layer %lld, head %lld",
                 (long long)(i / H), (long long)(i % H));
        pan[i] = (attn_panel){W, i / H, i % H, pt[i], NULL};
    }
    if (!st) st = attn_figure_write(path, pan, (int)(N * H), (int)H, o);
    free(pan);
    free(pt);
    return st;
}

int cli_load_weights(const char *cmd, const char *path, const char *axes,
                     cli_tensor *w) {
    int rc = load_weights_file(cmd, path, w);
    return rc ? rc : cli_weights_axes(cmd, w, axes);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double cli_percentile(const float *v, const uint8_t *keep, int64_t n, double q,
                      double *top) {
    float *s = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    int64_t m = 0;
    *top = 0;
    if (!s) return 0;
    for (int64_t i = 0; i < n; i++)
        if (keep[i] && isfinite(v[i])) s[m++] = v[i];
    double r = 0;
    if (m > 0) {
        qsort(s, (size_t)m, sizeof(float), cmp_float);
        r = s[(int64_t)(q * (double)(m - 1))];
        *top = s[m - 1];
    }
    free(s);
    return r;
}
