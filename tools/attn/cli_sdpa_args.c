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

/* The file-valued options, recorded during the scan and loaded after it
 * (so --mask-convention may come after --mask). */
typedef struct {
    const char *key_lengths, *query_lengths, *mask, *bias, *layout;
    const char *convention;
    const char *sinks, *alibi_slopes, *doc_ids;
    const char *cu[2]; /* --cu-seqlens, --cu-seqlens-k */
} pending_files;

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

/* Splits "A,B" (or "A,B,C") into parts in buf; returns the number found. */
static int split_commas(const char *v, char *buf, size_t cap, char **parts,
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

/* --rope, --rope-theta, --rope-dim, --rope-scaling, --rope-offset. */
static int parse_rope(const char *cmd, const char *opt, const char *v,
                      cli_sdpa_args *a) {
    attn_rope *r = &a->rope;
    if (strcmp(opt, "--rope") == 0) {
        if (strcmp(v, "neox") == 0)
            r->style = ATTN_ROPE_NEOX;
        else if (strcmp(v, "interleaved") == 0)
            r->style = ATTN_ROPE_INTERLEAVED;
        else
            return cli_usage_error(cmd,
                                   "--rope takes neox or interleaved, not "
                                   "'%s'",
                                   v);
        a->rope_set = 1;
    } else if (strcmp(opt, "--rope-theta") == 0) {
        if (cli_parse_double(v, &r->theta) || !(r->theta > 1) ||
            isinf(r->theta))
            return cli_usage_error(cmd,
                                   "--rope-theta must be a number > 1, not "
                                   "'%s'",
                                   v);
    } else if (strcmp(opt, "--rope-dim") == 0) {
        if (cli_parse_i64(v, &r->rotary_dim) || r->rotary_dim < 2 ||
            r->rotary_dim % 2)
            return cli_usage_error(cmd,
                                   "--rope-dim must be an even number >= 2, "
                                   "not '%s'",
                                   v);
    } else if (strcmp(opt, "--rope-offset") == 0) {
        if (cli_parse_i64(v, &a->rope_offset) || a->rope_offset < 0 ||
            a->rope_offset > ((int64_t)1 << 40))
            return cli_usage_error(cmd,
                                   "--rope-offset must be an integer in "
                                   "[0, 2^40], not '%s'",
                                   v);
    } else { /* --rope-scaling linear:F or llama3:F,LOW,HIGH,ORIG */
        char buf[256];
        char *parts[5];
        const char *colon = strchr(v, ':');
        int n = colon ? split_commas(colon + 1, buf, sizeof buf, parts, 4) : 0;
        double x[4] = {0, 0, 0, 0};
        int bad = n < 1;
        for (int i = 0; i < n && i < 4; i++)
            bad |= cli_parse_double(parts[i], &x[i]) != 0 || !isfinite(x[i]);
        if (!bad && strncmp(v, "linear:", 7) == 0 && n == 1 && x[0] >= 1) {
            r->scaling = ATTN_ROPE_SCALING_LINEAR;
            r->factor = x[0];
        } else if (!bad && strncmp(v, "llama3:", 7) == 0 && n == 4 &&
                   x[0] >= 1 && x[1] > 0 && x[2] > x[1] && x[3] > 0) {
            r->scaling = ATTN_ROPE_SCALING_LLAMA3;
            r->factor = x[0];
            r->low_freq_factor = x[1];
            r->high_freq_factor = x[2];
            r->original_max_position = x[3];
        } else {
            return cli_usage_error(cmd,
                                   "--rope-scaling takes linear:FACTOR or "
                                   "llama3:FACTOR,LOW,HIGH,ORIG (FACTOR >= 1, "
                                   "0 < LOW < HIGH, ORIG > 0), not '%s'",
                                   cli_esc(v));
        }
    }
    return 0;
}

/* Handles one option at argv[i] (value at argv[i + 1]); *used is how many
 * arguments it took (0: not ours). */
static int parse_one(const char *cmd, int argc, char **argv, int i,
                     cli_sdpa_args *a, pending_files *pf, int *used) {
    const char *opt = argv[i];
    *used = 0;
    /* ours when a row of the options' description has this flag */
    int n;
    const attn__opt_desc *rows = attn__sdpa_opt_descs(&n), *d = NULL;
    char flag[64];
    for (int r = 0; r < n && !d; r++)
        if (row_flag(&rows[r], flag, sizeof flag) && strcmp(opt, flag) == 0)
            d = &rows[r];
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
    attn_sdpa_opts *o = &a->opts;
    char buf[4096];
    char *parts[4];
    if (strcmp(opt, "--scale") == 0) {
        if (cli_parse_double(v, &o->scale) || !(o->scale > 0) ||
            isinf(o->scale))
            return cli_usage_error(cmd,
                                   "--scale must be a positive number, "
                                   "not '%s'",
                                   v);
    } else if (strncmp(opt, "--rope", 6) == 0) {
        return parse_rope(cmd, opt, v, a) ? 2 : 0;
    } else if (strcmp(opt, "--causal") == 0) {
        attn_align al = ATTN_ALIGN_TOP_LEFT;
        if (parse_align(cmd, opt, v, &al)) return 2;
        if (a->align_set && o->mask.align != al)
            return cli_usage_error(cmd, "--causal %s contradicts --align", v);
        o->mask.causal = 1;
        o->mask.align = al;
        a->causal_set = a->align_set = 1;
    } else if (strcmp(opt, "--align") == 0) {
        attn_align al = ATTN_ALIGN_TOP_LEFT;
        if (parse_align(cmd, opt, v, &al)) return 2;
        if (a->align_set && o->mask.align != al)
            return cli_usage_error(cmd, "--align %s contradicts --causal", v);
        o->mask.align = al;
        a->align_set = 1;
    } else if (strcmp(opt, "--window") == 0) {
        int64_t l, r;
        if (split_commas(v, buf, sizeof buf, parts, 2) != 2 ||
            cli_parse_i64(parts[0], &l) || cli_parse_i64(parts[1], &r) ||
            l < -1 || r < -1)
            return cli_usage_error(cmd,
                                   "--window takes LEFT,RIGHT with each "
                                   ">= 0 or -1 (unbounded), not '%s'",
                                   v);
        o->mask.window_left = l;
        o->mask.window_right = r;
    } else if (strcmp(opt, "--key-lengths") == 0) {
        pf->key_lengths = v;
    } else if (strcmp(opt, "--query-lengths") == 0) {
        pf->query_lengths = v;
    } else if (strcmp(opt, "--mask") == 0) {
        pf->mask = v;
    } else if (strcmp(opt, "--mask-convention") == 0) {
        if (strcmp(v, "keep") != 0 && strcmp(v, "masked") != 0 &&
            strcmp(v, "torch-mha") != 0)
            return cli_usage_error(cmd,
                                   "--mask-convention takes keep, masked "
                                   "or torch-mha, not '%s'",
                                   v);
        pf->convention = v;
    } else if (strcmp(opt, "--bias") == 0) {
        pf->bias = v;
    } else if (strcmp(opt, "--block-sparse") == 0) {
        int64_t bs;
        const char *comma = strchr(v, ',');
        if (!comma || split_commas(v, buf, sizeof buf, parts, 1) < 1)
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
        o->mask.block_size = bs;
        pf->layout = comma + 1;
    } else if (strcmp(opt, "--random-blocks") == 0) {
        int64_t bs;
        double p;
        uint64_t seed;
        if (split_commas(v, buf, sizeof buf, parts, 3) != 3 ||
            cli_parse_i64(parts[0], &bs) || bs < 1 ||
            cli_parse_double(parts[1], &p) || !(p >= 0.0 && p <= 1.0) ||
            cli_parse_u64(parts[2], &seed))
            return cli_usage_error(cmd,
                                   "--random-blocks takes BLOCK,KEEP_P,SEED "
                                   "(BLOCK >= 1, KEEP_P in [0, 1], SEED >= 0), "
                                   "not '%s'",
                                   v);
        o->mask.random_block = bs;
        o->mask.random_keep_p = p;
        o->mask.random_seed = seed;
    } else if (strcmp(opt, "--softcap") == 0) {
        if (cli_parse_double(v, &o->mask.softcap) || !(o->mask.softcap > 0) ||
            isinf(o->mask.softcap))
            return cli_usage_error(cmd,
                                   "--softcap takes a positive cap, not "
                                   "'%s'",
                                   v);
    } else if (strcmp(opt, "--alibi") == 0) {
        if (strcmp(v, "causal") == 0)
            o->mask.alibi = ATTN_ALIBI_CAUSAL;
        else if (strcmp(v, "symmetric") == 0)
            o->mask.alibi = ATTN_ALIBI_SYMMETRIC;
        else
            return cli_usage_error(cmd,
                                   "--alibi takes causal or symmetric, "
                                   "not '%s'",
                                   v);
    } else if (strcmp(opt, "--alibi-slopes") == 0) {
        pf->alibi_slopes = v;
    } else if (strcmp(opt, "--sinks") == 0) {
        pf->sinks = v;
    } else if (strcmp(opt, "--doc-ids") == 0) {
        pf->doc_ids = v;
    } else if (strcmp(opt, "--cu-seqlens") == 0) {
        pf->cu[0] = v;
    } else if (strcmp(opt, "--cu-seqlens-k") == 0) {
        pf->cu[1] = v;
    } else if (strcmp(opt, "--impl") == 0) {
        if (strcmp(v, "auto") == 0)
            o->impl = ATTN_IMPL_AUTO;
        else if (strcmp(v, "ref") == 0)
            o->impl = ATTN_IMPL_REF;
        else if (strcmp(v, "flash") == 0)
            o->impl = ATTN_IMPL_FLASH;
        else
            return cli_usage_error(cmd,
                                   "--impl takes auto, ref or flash, not "
                                   "'%s'",
                                   v);
    } else if (strcmp(opt, "--threads") == 0) {
        int64_t t;
        if (cli_parse_i64(v, &t) || t < 0 || t > 4096)
            return cli_usage_error(cmd,
                                   "--threads must be an integer in "
                                   "[0, 4096], not '%s'",
                                   v);
        o->threads = (int)t;
    } else if (strcmp(opt, "--dropout") == 0) {
        if (cli_parse_double(v, &o->dropout_p) ||
            !(o->dropout_p >= 0.0 && o->dropout_p < 1.0))
            return cli_usage_error(cmd, "--dropout must be in [0, 1), not '%s'",
                                   v);
    } else if (strcmp(opt, "--seed") == 0) {
        if (cli_parse_u64(v, &o->seed))
            return cli_usage_error(cmd,
                                   "--seed must be an integer >= 0, not "
                                   "'%s'",
                                   v);
    } else { /* a row of opts_desc.c this parser does not know yet */
        return cli_usage_error(cmd, "%s is described but not parsed", opt);
    }
    return 0;
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
    if (pf->alibi_slopes && !a->opts.mask.alibi)
        a->opts.mask.alibi = ATTN_ALIBI_CAUSAL;
    if (pf->alibi_slopes &&
        (rc = load_small(cmd, pf->alibi_slopes, "--alibi-slopes", ATTN_F64, 1,
                         &a->alibi_slopes)))
        return rc;
    if (pf->sinks &&
        (rc = load_small(cmd, pf->sinks, "--sinks", ATTN_F64, 1, &a->sinks)))
        return rc;
    if (pf->doc_ids && (pf->cu[0] || pf->cu[1]))
        return cli_usage_error(cmd, "--doc-ids and --cu-seqlens both give the "
                                    "documents: pass one of them");
    if (pf->cu[1] && !pf->cu[0])
        return cli_usage_error(cmd, "--cu-seqlens-k needs --cu-seqlens (the "
                                    "queries' starts)");
    /* the paths were cut at parse time (a->files[7], [8]) */
    if (pf->doc_ids && (rc = load_small(cmd, a->files[7], "--doc-ids", ATTN_I64,
                                        2, &a->doc_q)))
        return rc;
    if (a->files[8] && (rc = load_small(cmd, a->files[8], "--doc-ids (key ids)",
                                        ATTN_I64, 2, &a->doc_k)))
        return rc;
    for (int x = 0; x < 2; x++)
        if (pf->cu[x] && (rc = load_cu(cmd, pf->cu[x], x, a))) return rc;
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
    if (pf->convention && !pf->mask)
        return cli_usage_error(cmd, "--mask-convention needs --mask");
    if (pf->key_lengths &&
        (rc = load_lengths(cmd, pf->key_lengths, "--key-lengths",
                           &a->key_lengths)))
        return rc;
    if (pf->query_lengths &&
        (rc = load_lengths(cmd, pf->query_lengths, "--query-lengths",
                           &a->query_lengths)))
        return rc;
    if (pf->mask) {
        if ((rc =
                 load_mask_like(cmd, pf->mask, "--mask", &a->mask, &a->keep_t)))
            return rc;
        attn_dtype mdt = a->mask.dtype;
        int is_float = mdt == ATTN_F32 || mdt == ATTN_F64 || mdt == ATTN_F16 ||
                       mdt == ATTN_BF16;
        if (is_float && !pf->convention) {
            /* PyTorch's (and attn.scaled_dot_product_attention's) rule: a
             * float mask is added to the scores (0 / -inf), a bool or
             * integer one says which keys to keep */
            if (pf->bias)
                return cli_usage_error(cmd,
                                       "--mask %s is float, which is an "
                                       "additive bias (as in PyTorch), and "
                                       "--bias is given too: add the two into "
                                       "one --bias file",
                                       pf->mask);
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
                                           pf->mask, x, i, pf->convention);
            }
        }
        /* every convention ends as u8 keep = 1 */
        const char *conv = pf->convention ? pf->convention : "keep";
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
    if (pf->bias) {
        if ((rc =
                 load_mask_like(cmd, pf->bias, "--bias", &a->bias, &a->bias_t)))
            return rc;
        if (a->bias.dtype != ATTN_F32 && a->bias.dtype != ATTN_F64 &&
            (st = attn_npy_convert(&a->bias, ATTN_F64)))
            return cli_fail(cmd, st, "reading --bias");
        a->bias_t.data = a->bias.data;
        a->bias_t.dtype = a->bias.dtype;
        m->bias = &a->bias_t;
    }
layout:
    if (pf->layout) {
        if ((st = attn_npy_read(pf->layout, &a->layout)))
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
    a->file_opt[0] = "--key-lengths", a->files[0] = pf.key_lengths;
    a->file_opt[1] = "--query-lengths", a->files[1] = pf.query_lengths;
    a->file_opt[2] = "--mask", a->files[2] = pf.mask;
    a->file_opt[3] = "--bias", a->files[3] = pf.bias;
    a->file_opt[4] = "--block-sparse", a->files[4] = pf.layout;
    a->file_opt[5] = "--sinks", a->files[5] = pf.sinks;
    a->file_opt[6] = "--alibi-slopes", a->files[6] = pf.alibi_slopes;
    a->file_opt[7] = "--doc-ids", a->file_opt[8] = "--doc-ids (key ids)";
    if (pf.doc_ids) {
        /* Q.npy[,K.npy]: the last comma splits, if what follows ends .npy */
        if (!(a->doc_paths = malloc(strlen(pf.doc_ids) + 1))) {
            fprintf(stderr, "attn %s: out of memory for --doc-ids\n", cmd);
            return 1;
        }
        strcpy(a->doc_paths, pf.doc_ids);
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
        if (pf.cu[x] && !is_int_list(pf.cu[x])) a->files[9 + x] = pf.cu[x];
    }
    return load_files(cmd, a, &pf);
}

/* --rope-* without --rope is an error; an offset becomes positions. */
static int bind_rope(const char *cmd, cli_sdpa_args *a, int64_t Lq,
                     int64_t Lk) {
    attn_rope def;
    attn_rope_init(&def);
    if (!a->rope_set) {
        if (memcmp(&def, &a->rope, sizeof def) != 0 || a->rope_offset)
            return cli_usage_error(cmd, "--rope-theta, --rope-dim, "
                                        "--rope-scaling and --rope-offset "
                                        "need --rope neox|interleaved");
        return 0;
    }
    a->opts.rope = &a->rope;
    if (!a->rope_offset) return 0;
    free(a->rope_pos);
    a->rope_pos = malloc(sizeof(int64_t) * (size_t)(Lq + Lk));
    if (!a->rope_pos) {
        fprintf(stderr, "attn %s: out of memory for the rope positions\n", cmd);
        return 1;
    }
    int br = a->opts.mask.align == ATTN_ALIGN_BOTTOM_RIGHT;
    for (int64_t i = 0; i < Lq; i++) {
        int64_t c = br ? i + Lk - Lq : i;
        a->rope_pos[i] = a->rope_offset + (c < 0 ? 0 : c);
    }
    for (int64_t j = 0; j < Lk; j++) a->rope_pos[Lq + j] = a->rope_offset + j;
    a->opts.rope_q_positions = a->rope_pos;
    a->opts.n_rope_q_positions = Lq;
    a->opts.rope_k_positions = a->rope_pos + Lq;
    a->opts.n_rope_k_positions = Lk;
    return 0;
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
    return bind_rope(cmd, a, Lq, Lk);
}
