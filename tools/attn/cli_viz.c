/* Shared pieces of the picture and diagnostics subcommands (show, html,
 * heatmap, stats, compare, demo): token lists, map selection, weights. */
#include "cli.h"

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
        return cli_usage_error(cmd, "%s has %lld tokens but the weights have "
                               "%lld %s", opt, (long long)t->n, (long long)n,
                               axis);
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
    cli_tokens_free(t); /* given twice: the last list counts */
    *rc = cli_tokens_parse(cmd, arg, val, t);
    return 1;
}

int cli_labels_axis(const char *cmd, const cli_labels *l, int x, int64_t n,
                    const char *axis, const char *const **labels) {
    const cli_tokens *own = x ? &l->x : &l->y;
    const cli_tokens *t = own->v ? own : &l->both;
    int rc = cli_tokens_expect(cmd, own->v ? (x ? l->xopt : l->yopt)
                                           : "--tokens", t, n, axis);
    if (!rc) *labels = (const char *const *)t->v;
    return rc;
}

void cli_labels_free(cli_labels *l) {
    cli_tokens_free(&l->x);
    cli_tokens_free(&l->y);
    cli_tokens_free(&l->both);
}

int cli_weights_arg(const char *cmd, const char *arg, const char **path) {
    if (*path)
        return cli_usage_error(cmd, "one weights file, got '%s' and '%s'",
                               *path, arg);
    *path = arg;
    return 0;
}

int cli_parse_map(const char *cmd, const char *s, int64_t *b, int64_t *h) {
    char tmp[64];
    const char *comma = strchr(s, ',');
    if (!comma || (size_t)(comma - s) >= sizeof tmp)
        return cli_usage_error(cmd, "--map wants B,H (e.g. 0,3), got '%s'", s);
    memcpy(tmp, s, (size_t)(comma - s));
    tmp[comma - s] = '\0';
    if (cli_parse_i64(tmp, b) || cli_parse_i64(comma + 1, h) || *b < 0 || *h < 0)
        return cli_usage_error(cmd, "--map wants two indices >= 0, got '%s'", s);
    return 0;
}

int cli_load_weights(const char *cmd, const char *path, cli_tensor *w) {
    return cli_load_tensor(cmd, path, "weights", w);
}

int cli_check_map(const char *cmd, const attn_tensor *w, int64_t b, int64_t h) {
    if (b >= w->shape[0] || h >= w->shape[1])
        return cli_usage_error(cmd, "--map %lld,%lld is outside the weights' "
                               "(B, H) = (%lld, %lld)", (long long)b,
                               (long long)h, (long long)w->shape[0],
                               (long long)w->shape[1]);
    return 0;
}
