/* The options every attention subcommand shares (mask, score modifiers,
 * dropout, kernel, threads): their help, parsing, the files they name
 * and their binding to the shapes of q and k. Split from cli_io.c. */
#include "cli.h"
#include "opts_desc.h"
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the shared SDPA options ----------------------------------------- */

void cli_sdpa_args_init(cli_sdpa_args *a) {
    memset(a, 0, sizeof *a);
    attn_sdpa_opts_init(&a->opts);
    attn_rope_init(&a->rope);
}

void cli_sdpa_args_free(cli_sdpa_args *a) {
    attn_npy_free(&a->key_lengths);
    attn_npy_free(&a->query_lengths);
    attn_npy_free(&a->mask);
    attn_npy_free(&a->bias);
    attn_npy_free(&a->layout);
    attn_npy_free(&a->sinks);
    attn_npy_free(&a->alibi_slopes);
    attn_npy_free(&a->doc_q);
    attn_npy_free(&a->doc_k);
    free(a->doc_buf);
    free(a->doc_paths);
    free(a->cu[0]);
    free(a->cu[1]);
    free(a->rope_pos);
    memset(a, 0, sizeof *a);
}

void cli_sdpa_args_help(FILE *f) { cli_args_help(f, CLI_OPTS_ALL); }

/* The option rows (opts_desc.h) are CLI_OPTS_* by kind. */
_Static_assert(CLI_OPTS_SCALE == ATTN__OPT_SCALE &&
                   CLI_OPTS_THREADS == ATTN__OPT_THREADS &&
                   CLI_OPTS_KERNEL == ATTN__OPT_KERNEL &&
                   CLI_OPTS_MASK == ATTN__OPT_MASK,
               "the command's option kinds are the descriptor's");

/* The flag of a row's "--flag VALUE" into buf; 0 when the row has none. */
static int row_flag(const attn__opt_desc *d, char *buf, size_t cap) {
    if (!d->cli) return 0;
    size_t n = strcspn(d->cli, " ");
    if (n >= cap) return 0;
    memcpy(buf, d->cli, n);
    buf[n] = '\0';
    return 1;
}

void cli_args_help(FILE *f, unsigned kinds) {
    if ((kinds & CLI_OPTS_KERNEL) && (kinds & CLI_OPTS_SCALE))
        fprintf(f,
                "attention options (shared by every attention subcommand):\n");
    else if (kinds & CLI_OPTS_KERNEL)
        fprintf(f, "attention options:\n");
    else
        fprintf(f, "mask options (the mask the weights were made with):\n");
    int n;
    const attn__opt_desc *rows = attn__sdpa_opt_descs(&n);
    for (int r = 0; r < n; r++) {
        const attn__opt_desc *d = &rows[r];
        if (!d->cli || !(kinds & d->where)) continue;
        /* "  --flag VALUE" then the help at column 23, or below it */
        const char *h = d->help;
        if (strlen(d->cli) <= 20) {
            size_t len = strcspn(h, "\n");
            fprintf(f, "  %-20s %.*s\n", d->cli, (int)len, h);
            h += len + (h[len] == '\n');
        } else {
            fprintf(f, "  %s\n", d->cli);
        }
        while (*h) {
            size_t len = strcspn(h, "\n");
            fprintf(f, "%23s%.*s\n", "", (int)len, h);
            h += len + (h[len] == '\n');
        }
    }
    fprintf(f, "All mask parts combine by AND%s.\n",
            (kinds & CLI_OPTS_KERNEL)
                ? "; a query row with no visible key gives\noutput 0 and "
                  "log-sum-exp -inf"
                : "");
}

/* The file-valued options (and --mask-convention's word), recorded by
 * row during the scan and read after it (so --mask-convention may come
 * after --mask). */
#define PENDING_ROWS 64
typedef struct {
    const char *v[PENDING_ROWS];
} pending_files;

/* The row of the options' description named name; -1 when none. */
static int row_index(const char *name) {
    int n;
    const attn__opt_desc *rows = attn__sdpa_opt_descs(&n);
    for (int r = 0; r < n; r++)
        if (strcmp(rows[r].name, name) == 0) return r;
    return -1;
}

/* The value recorded for the row named name, or NULL. */
static const char *pending(const pending_files *pf, const char *name) {
    int r = row_index(name);
    return r >= 0 && r < PENDING_ROWS ? pf->v[r] : NULL;
}

static int parse_align(const char *cmd, const char *opt, const char *v,
                       attn_align *out) {
    if (strcmp(v, "top-left") == 0) {
        *out = ATTN_ALIGN_TOP_LEFT;
    } else if (strcmp(v, "bottom-right") == 0) {
        *out = ATTN_ALIGN_BOTTOM_RIGHT;
    } else {
        return cli_usage_error(cmd,
                               "%s takes top-left or bottom-right, not "
                               "'%s'",
                               opt, v);
    }
    return 0;
}

int cli_split_commas(const char *v, char *buf, size_t cap, char **parts,
                     int max) {
    if (strlen(v) >= cap) return 0;
    strcpy(buf, v);
    int n = 0;
    char *p = buf;
    for (;;) {
        if (n == max) return max + 1;
        parts[n++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = '\0';
        p = c + 1;
    }
    return n;
}

/* ---- the options whose values are composite ------------------------- */

/* --causal ALIGN and --align ALIGN: one alignment, said twice at most. */
static int parse_causal_align(const char *cmd, const char *opt, const char *v,
                              cli_sdpa_args *a, pending_files *pf) {
    (void)pf;
    attn_mask *m = &a->opts.mask;
    const int causal = strcmp(opt, "--causal") == 0;
    attn_align al = ATTN_ALIGN_TOP_LEFT;
    if (parse_align(cmd, opt, v, &al)) return 2;
    if (a->align_set && m->align != al)
        return cli_usage_error(cmd, "%s %s contradicts %s", opt, v,
                               causal ? "--align" : "--causal");
    if (causal) m->causal = 1;
    m->align = al;
    a->align_set = 1;
    a->causal_set |= causal;
    return 0;
}

static int parse_window(const char *cmd, const char *opt, const char *v,
                        cli_sdpa_args *a, pending_files *pf) {
    (void)opt, (void)pf;
    char buf[4096];
    char *parts[2];
    int64_t l, r;
    if (cli_split_commas(v, buf, sizeof buf, parts, 2) != 2 ||
        cli_parse_i64(parts[0], &l) || cli_parse_i64(parts[1], &r) || l < -1 ||
        r < -1)
        return cli_usage_error(cmd,
                               "--window takes LEFT,RIGHT with each "
                               ">= 0 or -1 (unbounded), not '%s'",
                               v);
    a->opts.mask.window_left = l;
    a->opts.mask.window_right = r;
    return 0;
}

static int parse_block_sparse(const char *cmd, const char *opt, const char *v,
                              cli_sdpa_args *a, pending_files *pf) {
    (void)opt;
    char buf[4096];
    char *parts[1];
    int64_t bs;
    const char *comma = strchr(v, ',');
    if (!comma || cli_split_commas(v, buf, sizeof buf, parts, 1) < 1)
        return cli_usage_error(cmd,
                               "--block-sparse takes BLOCK,LAYOUT.npy, "
                               "not '%s'",
                               v);
    buf[comma - v] = '\0'; /* the path may itself contain commas */
    if (cli_parse_i64(buf, &bs) || bs < 1)
        return cli_usage_error(cmd,
                               "--block-sparse: BLOCK must be a "
                               "positive integer, not '%s'",
                               buf);
    a->opts.mask.block_size = bs;
    pf->v[row_index("block_sparse")] = comma + 1;
    return 0;
}

static int parse_random_blocks(const char *cmd, const char *opt, const char *v,
                               cli_sdpa_args *a, pending_files *pf) {
    (void)opt, (void)pf;
    char buf[4096];
    char *parts[3];
    int64_t bs;
    double p;
    uint64_t seed;
    if (cli_split_commas(v, buf, sizeof buf, parts, 3) != 3 ||
        cli_parse_i64(parts[0], &bs) || bs < 1 ||
        cli_parse_double(parts[1], &p) || !(p >= 0.0 && p <= 1.0) ||
        cli_parse_u64(parts[2], &seed))
        return cli_usage_error(cmd,
                               "--random-blocks takes BLOCK,KEEP_P,SEED "
                               "(BLOCK >= 1, KEEP_P in [0, 1], SEED >= 0), "
                               "not '%s'",
                               v);
    a->opts.mask.random_block = bs;
    a->opts.mask.random_keep_p = p;
    a->opts.mask.random_seed = seed;
    return 0;
}

static int parse_rope_row(const char *cmd, const char *opt, const char *v,
                          cli_sdpa_args *a, pending_files *pf) {
    (void)pf;
    return cli_rope_parse(cmd, opt, v, a);
}

/* The parsers of the rows of kind ATTN__VAL_OWN, by row name. */
typedef int (*own_parser)(const char *cmd, const char *opt, const char *v,
                          cli_sdpa_args *a, pending_files *pf);
static const struct {
    const char *row;
    own_parser fn;
} own[] = {
    {"causal", parse_causal_align},
    {"align", parse_causal_align},
    {"window", parse_window},
    {"block_sparse", parse_block_sparse},
    {"random_blocks", parse_random_blocks},
    {"rope", parse_rope_row},
    {"rope_theta", parse_rope_row},
    {"rope_dim", parse_rope_row},
    {"rope_scaling", parse_rope_row},
    {"rope_positions", parse_rope_row},
};

/* The index of v among the words "a|b|c"; -1 when it is none of them. */
static int word_index(const char *words, const char *v) {
    const size_t n = strlen(v);
    for (int i = 0; words && *words; i++) {
        size_t len = strcspn(words, "|");
        if (len == n && strncmp(words, v, n) == 0) return i;
        words += len + (words[len] == '|');
    }
    return -1;
}

/* A value of a plain kind: checked against the row's rule and stored into
 * the row's first field of o, or (a file name, a word with no field)
 * recorded for after the scan. */
static int parse_plain(const char *cmd, const char *opt, const char *v,
                       const attn__opt_desc *d, int row, attn_sdpa_opts *o,
                       pending_files *pf) {
    const attn__opt_value *k = &d->value;
    char *field = (char *)o + d->fields[0].off;
    const size_t size = d->fields[0].size;
    int bad = 0;
    if (k->kind == ATTN__VAL_FLOAT) {
        double x;
        bad = cli_parse_double(v, &x) ||
              !((k->open & 1) ? x > k->lo : x >= k->lo) ||
              !((k->open & 2) ? x < k->hi : x <= k->hi);
        if (!bad && size == sizeof x) memcpy(field, &x, sizeof x);
    } else if (k->kind == ATTN__VAL_INT) {
        int64_t x;
        bad = cli_parse_i64(v, &x) || (double)x < k->lo || (double)x > k->hi;
        int y = (int)x;
        if (!bad && size == sizeof y) memcpy(field, &y, sizeof y);
        if (!bad && size == sizeof x) memcpy(field, &x, sizeof x);
    } else if (k->kind == ATTN__VAL_U64) {
        uint64_t x;
        bad = cli_parse_u64(v, &x);
        if (!bad && size == sizeof x) memcpy(field, &x, sizeof x);
    } else if (k->kind == ATTN__VAL_ENUM) {
        int w = word_index(k->words, v);
        bad = w < 0;
        if (!bad && size == sizeof(int))
            memcpy(field, &k->values[w], sizeof(int));
        else if (!bad)
            pf->v[row] = v;
    } else { /* ATTN__VAL_FILE */
        pf->v[row] = v;
    }
    if (bad) return cli_usage_error(cmd, "%s %s, not '%s'", opt, k->rule, v);
    return 0;
}

/* Handles one option at argv[i] (value at argv[i + 1]); *used is how many
 * arguments it took (0: not ours). */
static int parse_one(const char *cmd, int argc, char **argv, int i,
                     cli_sdpa_args *a, pending_files *pf, int *used) {
    const char *opt = argv[i];
    *used = 0;
    /* ours when a row of the options' description has this flag */
    int n, row = -1;
    const attn__opt_desc *rows = attn__sdpa_opt_descs(&n), *d = NULL;
    char flag[64];
    for (int r = 0; r < n && !d; r++)
        if (row_flag(&rows[r], flag, sizeof flag) && strcmp(opt, flag) == 0)
            d = &rows[row = r];
    if (!d) return 0;
    /* options of the kernel in a command that computes no attention */
    unsigned kinds = a->kinds ? a->kinds : CLI_OPTS_ALL;
    if (d->where != ATTN__OPT_MASK && !(kinds & d->where))
        return cli_usage_error(cmd,
                               "%s has no effect here: attn %s reads "
                               "weights and computes no attention",
                               opt, cmd);
    if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", opt);
    const char *v = argv[i + 1];
    *used = 2;
    if (row >= PENDING_ROWS)
        return cli_usage_error(cmd, "%s: too many option rows", opt);
    if (d->value.kind != ATTN__VAL_OWN)
        return parse_plain(cmd, opt, v, d, row, &a->opts, pf);
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
        if (strcmp(own[k].row, d->name) == 0)
            return own[k].fn(cmd, opt, v, a, pf) ? 2 : 0;
    /* a row of opts_desc.c this parser does not know yet */
    return cli_usage_error(cmd, "%s is described but not parsed", opt);
}

/* Reads a lengths file: B integers (ints, or floats holding whole numbers). */
static int load_lengths(const char *cmd, const char *path, const char *opt,
                        attn_npy *out) {
    char what[64];
    snprintf(what, sizeof what, "reading %s", opt);
    attn_status st = attn_npy_read(path, out);
    if (st) return cli_fail(cmd, st, what);
    if (out->ndim != 1) {
        fprintf(stderr,
                "attn %s: %s (%s) must have rank 1 (one length per "
                "batch entry), not %d\n",
                cmd, opt, cli_esc(path), out->ndim);
        return 1;
    }
    if ((st = attn_npy_convert(out, ATTN_I64))) return cli_fail(cmd, st, what);
    return 0;
}

/* Reads a mask-shaped file (mask, bias) as a 4-d view: rank 2 (Lq, Lk) is
 * (1, 1, Lq, Lk), rank 3 (B, Lq, Lk) is (B, 1, Lq, Lk), rank 4 as is. */
static int load_mask_like(const char *cmd, const char *path, const char *opt,
                          attn_npy *out, attn_tensor *view) {
    char what[64];
    snprintf(what, sizeof what, "reading %s", opt);
    attn_status st = attn_npy_read(path, out);
    if (st) return cli_fail(cmd, st, what);
    int64_t s[4];
    int rc = cli_to_bhld(cmd, opt, out, s);
    if (rc) return rc;
    *view = attn_tensor_4d(out->data, out->dtype, s[0], s[1], s[2], s[3]);
    return 0;
}

/* A file of rank <= max_rank converted to dtype (the score-modifier
 * files: per-head floats, per-position ids). */
static int load_small(const char *cmd, const char *path, const char *opt,
                      attn_dtype dtype, int max_rank, attn_npy *out) {
    char what[64];
    snprintf(what, sizeof what, "reading %s", opt);
    attn_status st = attn_npy_read(path, out);
    if (st) return cli_fail(cmd, st, what);
    if (out->ndim < 1 || out->ndim > max_rank) {
        fprintf(stderr, "attn %s: %s (%s) must have rank 1%s, not %d\n", cmd,
                opt, cli_esc(path), max_rank > 1 ? " or 2" : "", out->ndim);
        return 1;
    }
    if ((st = attn_npy_convert(out, dtype))) return cli_fail(cmd, st, what);
    return 0;
}

/* 1 if v is a list of starts ("0,3,7": a comma, or digits alone, and not
 * a .npy path), whose entries load_cu then reads; 0 for a file. */
static int is_int_list(const char *v) {
    const size_t n = strlen(v);
    if (n == 0 || strchr(v, '/') || (n >= 4 && strcmp(v + n - 4, ".npy") == 0))
        return 0;
    if (strchr(v, ',')) return 1;
    for (const char *c = v; *c; c++)
        if (!(*c >= '0' && *c <= '9')) return 0;
    return 1;
}

/* --cu-seqlens (x = 0) or --cu-seqlens-k (1): a comma list or a rank-1
 * .npy of integers, into a->cu[x] (a->ncu[x] entries). */
static int load_cu(const char *cmd, const char *v, int x, cli_sdpa_args *a) {
    const char *opt = x ? "--cu-seqlens-k" : "--cu-seqlens";
    int64_t n = 0;
    if (is_int_list(v)) {
        n = 1;
        for (const char *c = v; *c; c++) n += *c == ',';
        if (!(a->cu[x] = malloc(sizeof(int64_t) * (size_t)n))) {
            fprintf(stderr, "attn %s: out of memory for %s\n", cmd, opt);
            return 1;
        }
        char buf[32];
        const char *p = v;
        for (int64_t i = 0; i < n; i++) {
            const char *e = strchr(p, ',');
            size_t w = e ? (size_t)(e - p) : strlen(p);
            if (w >= sizeof buf)
                return cli_usage_error(cmd, "%s: entry %lld is too long", opt,
                                       (long long)i);
            memcpy(buf, p, w);
            buf[w] = '\0';
            if (cli_parse_i64(buf, &a->cu[x][i]))
                return cli_usage_error(cmd,
                                       "%s: entry %lld ('%s') is not an "
                                       "integer",
                                       opt, (long long)i, cli_esc(buf));
            p = e ? e + 1 : p + w;
        }
    } else {
        attn_npy f;
        memset(&f, 0, sizeof f);
        int rc = load_small(cmd, v, opt, ATTN_I64, 1, &f);
        if (rc) {
            attn_npy_free(&f);
            return rc;
        }
        n = f.shape[0];
        a->cu[x] = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
        if (a->cu[x]) memcpy(a->cu[x], f.data, sizeof(int64_t) * (size_t)n);
        attn_npy_free(&f);
        if (!a->cu[x]) {
            fprintf(stderr, "attn %s: out of memory for %s\n", cmd, opt);
            return 1;
        }
    }
    a->ncu[x] = n;
    return 0;
}

/* Document ids of every entry (B x L into dst) from a->cu[x]. */
static int bind_cu(const char *cmd, const cli_sdpa_args *a, int x, int64_t B,
                   int64_t L, int64_t *dst) {
    attn_status st =
        attn_doc_ids_from_cu_seqlens(a->cu[x], a->ncu[x] - 1, L, dst);
    if (st) return cli_fail(cmd, st, x ? "--cu-seqlens-k" : "--cu-seqlens");
    for (int64_t b = 1; b < B; b++)
        memcpy(dst + b * L, dst, sizeof(int64_t) * (size_t)L);
    return 0;
}

static int load_score_files(const char *cmd, cli_sdpa_args *a,
                            const pending_files *pf) {
    int rc;
    if (pending(pf, "alibi_slopes") && !a->opts.mask.alibi)
        a->opts.mask.alibi = ATTN_ALIBI_CAUSAL;
    if (pending(pf, "alibi_slopes") &&
        (rc = load_small(cmd, pending(pf, "alibi_slopes"), "--alibi-slopes",
                         ATTN_F64, 1, &a->alibi_slopes)))
        return rc;
    if (pending(pf, "sinks") &&
        (rc = load_small(cmd, pending(pf, "sinks"), "--sinks", ATTN_F64, 1,
                         &a->sinks)))
        return rc;
    if (pending(pf, "doc_ids") &&
        (pending(pf, "cu_seqlens") || pending(pf, "cu_seqlens_k")))
        return cli_usage_error(cmd, "--doc-ids and --cu-seqlens both give the "
                                    "documents: pass one of them");
    if (pending(pf, "cu_seqlens_k") && !pending(pf, "cu_seqlens"))
        return cli_usage_error(cmd, "--cu-seqlens-k needs --cu-seqlens (the "
                                    "queries' starts)");
    /* the paths were cut at parse time (a->files[7], [8]) */
    if (pending(pf, "doc_ids") &&
        (rc =
             load_small(cmd, a->files[7], "--doc-ids", ATTN_I64, 2, &a->doc_q)))
        return rc;
    if (a->files[8] && (rc = load_small(cmd, a->files[8], "--doc-ids (key ids)",
                                        ATTN_I64, 2, &a->doc_k)))
        return rc;
    for (int x = 0; x < 2; x++)
        if (pending(pf, x ? "cu_seqlens_k" : "cu_seqlens") &&
            (rc = load_cu(cmd, pending(pf, x ? "cu_seqlens_k" : "cu_seqlens"),
                          x, a)))
            return rc;
    return 0;
}

/* Points the mask at doc ids of shape (B, L); an (L,) file is repeated
 * over the batch into dst (B * L entries). 1 (with a message) when the
 * shape does not fit. */
static int bind_docs(const char *cmd, const attn_npy *ids, const char *what,
                     int64_t B, int64_t L, int64_t *dst, const int64_t **ptr,
                     int64_t *n) {
    int ok = (ids->ndim == 1 && ids->shape[0] == L) ||
             (ids->ndim == 2 && ids->shape[0] == B && ids->shape[1] == L);
    if (!ok) {
        char sh[160];
        cli_shape_str(sh, sizeof sh, ids->ndim, ids->shape);
        fprintf(stderr,
                "attn %s: --doc-ids %s have shape %s but (B, L) = "
                "(%lld, %lld) or (L,) = (%lld,) is needed\n",
                cmd, what, sh, (long long)B, (long long)L, (long long)L);
        return 1;
    }
    *n = B * L;
    if (ids->ndim == 2) {
        *ptr = ids->data;
        return 0;
    }
    for (int64_t b = 0; b < B; b++)
        memcpy(dst + b * L, ids->data, sizeof(int64_t) * (size_t)L);
    *ptr = dst;
    return 0;
}

static int bind_score_files(const char *cmd, cli_sdpa_args *a, int64_t B,
                            int64_t Lq, int64_t Lk) {
    attn_mask *m = &a->opts.mask;
    if (a->alibi_slopes.data) {
        m->alibi_slopes = a->alibi_slopes.data;
        m->n_alibi_slopes = a->alibi_slopes.shape[0];
    }
    if (a->sinks.data) {
        m->sinks = a->sinks.data;
        m->n_sinks = a->sinks.shape[0];
    }
    if (a->cu[0]) {
        if (Lq != Lk && !a->cu[1]) {
            fprintf(stderr,
                    "attn %s: --cu-seqlens alone serves Lq == Lk; with Lq = "
                    "%lld and Lk = %lld add --cu-seqlens-k\n",
                    cmd, (long long)Lq, (long long)Lk);
            return 1;
        }
        free(a->doc_buf);
        a->doc_buf = malloc(sizeof(int64_t) * (size_t)(B * Lq + B * Lk));
        if (!a->doc_buf) {
            fprintf(stderr, "attn %s: out of memory for --cu-seqlens\n", cmd);
            return 1;
        }
        int64_t *buf = a->doc_buf;
        int rc = bind_cu(cmd, a, 0, B, Lq, buf);
        if (!rc && a->cu[1]) rc = bind_cu(cmd, a, 1, B, Lk, buf + B * Lq);
        if (rc) return rc;
        m->doc_q = buf;
        m->n_doc_q = B * Lq;
        if (a->cu[1]) {
            m->doc_k = buf + B * Lq;
            m->n_doc_k = B * Lk;
        }
        return 0;
    }
    if (!a->doc_q.data) return 0;
    free(a->doc_buf);
    a->doc_buf = malloc(sizeof(int64_t) * (size_t)(B * Lq + B * Lk));
    if (!a->doc_buf) {
        fprintf(stderr, "attn %s: out of memory for --doc-ids\n", cmd);
        return 1;
    }
    int64_t *buf = a->doc_buf;
    int rc = bind_docs(cmd, &a->doc_q, a->doc_k.data ? "(query ids)" : "ids", B,
                       Lq, buf, &m->doc_q, &m->n_doc_q);
    if (!rc && a->doc_k.data)
        rc = bind_docs(cmd, &a->doc_k, "(key ids)", B, Lk, buf + B * Lq,
                       &m->doc_k, &m->n_doc_k);
    return rc;
}

static int load_files(const char *cmd, cli_sdpa_args *a,
                      const pending_files *pf) {
    attn_mask *m = &a->opts.mask;
    int rc;
    attn_status st;
    if (pending(pf, "mask_convention") && !pending(pf, "keep"))
        return cli_usage_error(cmd, "--mask-convention needs --mask");
    if (pending(pf, "key_lengths") &&
        (rc = load_lengths(cmd, pending(pf, "key_lengths"), "--key-lengths",
                           &a->key_lengths)))
        return rc;
    if (pending(pf, "query_lengths") &&
        (rc = load_lengths(cmd, pending(pf, "query_lengths"), "--query-lengths",
                           &a->query_lengths)))
        return rc;
    if (pending(pf, "keep")) {
        if ((rc = load_mask_like(cmd, pending(pf, "keep"), "--mask", &a->mask,
                                 &a->keep_t)))
            return rc;
        attn_dtype mdt = a->mask.dtype;
        int is_float = mdt == ATTN_F32 || mdt == ATTN_F64 || mdt == ATTN_F16 ||
                       mdt == ATTN_BF16;
        if (is_float && !pending(pf, "mask_convention")) {
            /* PyTorch's (and attn.scaled_dot_product_attention's) rule: a
             * float mask is added to the scores (0 / -inf), a bool or
             * integer one says which keys to keep */
            if (pending(pf, "bias"))
                return cli_usage_error(cmd,
                                       "--mask %s is float, which is an "
                                       "additive bias (as in PyTorch), and "
                                       "--bias is given too: add the two into "
                                       "one --bias file",
                                       pending(pf, "keep"));
            attn_npy tmp = a->mask;
            a->mask = a->bias;
            a->bias = tmp;
            a->bias_t = a->keep_t;
            if (mdt != ATTN_F32 && mdt != ATTN_F64 &&
                (st = attn_npy_convert(&a->bias, ATTN_F32)))
                return cli_fail(cmd, st, "reading --mask");
            a->bias_t.data = a->bias.data;
            a->bias_t.dtype = a->bias.dtype;
            m->bias = &a->bias_t;
            a->mask_was_bias = 1;
            goto layout;
        }
        if (is_float) {
            /* an explicit convention reads a float mask as 0/1; anything
             * else (-inf, 0.5) would be silently taken as nonzero */
            size_t n = 1;
            for (int i = 0; i < a->mask.ndim; i++)
                n *= (size_t)a->mask.shape[i];
            for (size_t i = 0; i < n; i++) {
                double x = mdt == ATTN_F64   ? ((const double *)a->mask.data)[i]
                           : mdt == ATTN_F32 ? ((const float *)a->mask.data)[i]
                                             : 0.0;
                if (mdt == ATTN_F16 || mdt == ATTN_BF16) {
                    uint16_t u = ((const uint16_t *)a->mask.data)[i];
                    x = (u & 0x7fff) == 0                          ? 0.0
                        : u == (mdt == ATTN_F16 ? 0x3c00 : 0x3f80) ? 1.0
                                                                   : 0.5;
                }
                if (x != 0.0 && x != 1.0)
                    return cli_usage_error(cmd,
                                           "--mask %s is float with a value "
                                           "%g at flat index %zu: with "
                                           "--mask-convention %s it must hold "
                                           "only 0 and 1 (leave out "
                                           "--mask-convention to add a float "
                                           "mask to the scores, as PyTorch)",
                                           pending(pf, "keep"), x, i,
                                           pending(pf, "mask_convention"));
            }
        }
        /* every convention ends as u8 keep = 1 */
        const char *conv = pending(pf, "mask_convention")
                               ? pending(pf, "mask_convention")
                               : "keep";
        /* to a 0/1 u8 array first (nonzero = 1), then, for the other
         * conventions, through their builders in place (elementwise) */
        st = attn_npy_convert(&a->mask, ATTN_U8);
        if (!st && strcmp(conv, "keep") != 0) {
            size_t n = 1;
            for (int i = 0; i < a->mask.ndim; i++)
                n *= (size_t)a->mask.shape[i];
            st = strcmp(conv, "masked") == 0
                     ? attn_mask_from_keras(a->mask.data, ATTN_U8, n,
                                            a->mask.data)
                     : attn_mask_from_torch_mha(a->mask.data, ATTN_U8, n,
                                                a->mask.data);
        }
        if (st) return cli_fail(cmd, st, "reading --mask");
        a->keep_t.data = a->mask.data;
        a->keep_t.dtype = ATTN_U8;
        m->keep = &a->keep_t;
    }
    if (pending(pf, "bias")) {
        if ((rc = load_mask_like(cmd, pending(pf, "bias"), "--bias", &a->bias,
                                 &a->bias_t)))
            return rc;
        if (a->bias.dtype != ATTN_F32 && a->bias.dtype != ATTN_F64 &&
            (st = attn_npy_convert(&a->bias, ATTN_F64)))
            return cli_fail(cmd, st, "reading --bias");
        a->bias_t.data = a->bias.data;
        a->bias_t.dtype = a->bias.dtype;
        m->bias = &a->bias_t;
    }
layout:
    if (pending(pf, "block_sparse")) {
        if ((st = attn_npy_read(pending(pf, "block_sparse"), &a->layout)))
            return cli_fail(cmd, st, "reading the --block-sparse layout");
        if ((st = attn_npy_convert(&a->layout, ATTN_U8)))
            return cli_fail(cmd, st, "reading the --block-sparse layout");
    }
    return load_score_files(cmd, a, pf);
}

int cli_sdpa_args_parse(const char *cmd, int *argc, char **argv,
                        cli_sdpa_args *a) {
    pending_files pf;
    memset(&pf, 0, sizeof pf);
    int out = 1;
    for (int i = 1; i < *argc;) {
        int used, rc = parse_one(cmd, *argc, argv, i, a, &pf, &used);
        if (rc) return rc;
        if (used == 0)
            argv[out++] = argv[i++];
        else
            i += used;
    }
    *argc = out;
    a->file_opt[0] = "--key-lengths", a->files[0] = pending(&pf, "key_lengths");
    a->file_opt[1] = "--query-lengths",
    a->files[1] = pending(&pf, "query_lengths");
    a->file_opt[2] = "--mask", a->files[2] = pending(&pf, "keep");
    a->file_opt[3] = "--bias", a->files[3] = pending(&pf, "bias");
    a->file_opt[4] = "--block-sparse",
    a->files[4] = pending(&pf, "block_sparse");
    a->file_opt[5] = "--sinks", a->files[5] = pending(&pf, "sinks");
    a->file_opt[6] = "--alibi-slopes",
    a->files[6] = pending(&pf, "alibi_slopes");
    a->file_opt[7] = "--doc-ids", a->file_opt[8] = "--doc-ids (key ids)";
    if (pending(&pf, "doc_ids")) {
        /* Q.npy[,K.npy]: the last comma splits, if what follows ends .npy */
        if (!(a->doc_paths = malloc(strlen(pending(&pf, "doc_ids")) + 1))) {
            fprintf(stderr, "attn %s: out of memory for --doc-ids\n", cmd);
            return 1;
        }
        strcpy(a->doc_paths, pending(&pf, "doc_ids"));
        char *comma = strrchr(a->doc_paths, ',');
        if (comma && strlen(comma + 1) >= 4 &&
            strcmp(comma + strlen(comma) - 4, ".npy") == 0) {
            *comma = '\0';
            a->files[8] = comma + 1;
        }
        a->files[7] = a->doc_paths;
    }
    /* a list of starts names no file */
    for (int x = 0; x < 2; x++) {
        a->file_opt[9 + x] = x ? "--cu-seqlens-k" : "--cu-seqlens";
        if (pending(&pf, x ? "cu_seqlens_k" : "cu_seqlens") &&
            !is_int_list(pending(&pf, x ? "cu_seqlens_k" : "cu_seqlens")))
            a->files[9 + x] = pending(&pf, x ? "cu_seqlens_k" : "cu_seqlens");
    }
    return load_files(cmd, a, &pf);
}

int cli_sdpa_args_bind(const char *cmd, cli_sdpa_args *a, int64_t B, int64_t H,
                       int64_t Lq, int64_t Lk) {
    attn_mask *m = &a->opts.mask;
    const attn_npy *len[2] = {&a->key_lengths, &a->query_lengths};
    const char *names[2] = {"--key-lengths", "--query-lengths"};
    for (int i = 0; i < 2; i++)
        if (len[i]->data && len[i]->shape[0] != B) {
            fprintf(stderr,
                    "attn %s: %s has %lld entries but the batch has "
                    "%lld\n",
                    cmd, names[i], (long long)len[i]->shape[0], (long long)B);
            return 1;
        }
    m->key_lengths = a->key_lengths.data;
    m->query_lengths = a->query_lengths.data;
    if (a->layout.data) {
        const attn_npy *l = &a->layout;
        int64_t bs = m->block_size;
        /* ceil without Lq + bs - 1, which overflows for a huge BLOCK */
        int64_t nq = Lq / bs + (Lq % bs != 0), nk = Lk / bs + (Lk % bs != 0);
        int64_t lh = l->ndim == 3 ? l->shape[0] : 1;
        if ((l->ndim != 2 && l->ndim != 3) || l->shape[l->ndim - 2] != nq ||
            l->shape[l->ndim - 1] != nk || (lh != 1 && lh != H)) {
            char s[160];
            cli_shape_str(s, sizeof s, l->ndim, l->shape);
            fprintf(
                stderr,
                "attn %s: the --block-sparse layout has shape %s; "
                "with block %lld, Lq = %lld, Lk = %lld and H = %lld it must "
                "be (%lld, %lld) or (1 or %lld, %lld, %lld)\n",
                cmd, s, (long long)bs, (long long)Lq, (long long)Lk,
                (long long)H, (long long)nq, (long long)nk, (long long)H,
                (long long)nq, (long long)nk);
            return 1;
        }
        m->layout = l->data;
        m->layout_heads = lh;
    }
    int rc = bind_score_files(cmd, a, B, Lq, Lk);
    if (rc) return rc;
    attn_status st = attn_mask_check(m, B, H, Lq, Lk);
    if (st) return cli_fail(cmd, st, "checking the mask");
    return cli_rope_bind(cmd, a, Lq, Lk);
}
