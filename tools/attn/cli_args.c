/* The option loop of the subcommands: one table of options (name, kind,
 * where the value goes, its range) read by one loop, so every command
 * answers a missing value, a bad value or an unknown option alike. */
#include "cli.h"

#include <math.h>
#include <string.h>

static const cli_opt *find_opt(const cli_opt *opts, size_t n, const char *a) {
    for (size_t j = 0; j < n; j++)
        if (strcmp(a, opts[j].name) == 0) return &opts[j];
    return NULL;
}

/* 1 if v is not a value of o (the number, or out of o's range). */
static int set_value(const cli_opt *o, const char *v) {
    int64_t i = 0;
    double d = 0;
    switch (o->kind) {
    case CLI_OPT_STR: *(const char **)o->slot = v; return 0;
    case CLI_OPT_LIST: ((const char **)o->slot)[(*o->count)++] = v; return 0;
    case CLI_OPT_U64: return cli_parse_u64(v, (uint64_t *)o->slot);
    case CLI_OPT_F64:
        if (cli_parse_double(v, &d) || !isfinite(d) || d > o->hi ||
            (o->open_lo ? !(d > o->lo) : !(d >= o->lo)))
            return 1;
        *(double *)o->slot = d;
        return 0;
    default: break;
    }
    if (cli_parse_i64(v, &i) || (double)i < o->lo || (double)i > o->hi)
        return 1;
    if (o->kind == CLI_OPT_INT)
        *(int *)o->slot = (int)i;
    else
        *(int64_t *)o->slot = i;
    return 0;
}

int cli_parse_args(const char *cmd, int argc, char **argv, const cli_opt *opts,
                   size_t n, const char **pos, int npos) {
    int k = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-') {
            if (k >= npos)
                return cli_usage_error(cmd, "unexpected argument '%s'",
                                       cli_esc(a));
            pos[k++] = a;
            continue;
        }
        const cli_opt *o = find_opt(opts, n, a);
        if (!o) return cli_usage_error(cmd, "unknown option '%s'", cli_esc(a));
        if (o->kind == CLI_OPT_FLAG) {
            *(int *)o->slot = 1;
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        const char *v = argv[++i];
        if (set_value(o, v))
            return cli_usage_error(cmd, "bad value '%s' for %s", cli_esc(v), a);
    }
    return 0;
}
