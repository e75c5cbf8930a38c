/* Shared pieces of the attention subcommands: .npy arrays as attention
 * tensors (with the rank convention), and one parser for the SDPA options
 * so that sdpa, sdpa-backward, heatmap, mha ... accept the same flags. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- numbers --------------------------------------------------------- */

int cli_parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE) return 1;
    *out = x;
    return 0;
}

int cli_parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) return 1;
    *out = (int64_t)x;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out) {
    char *end;
    if (s[0] == '-') return 1; /* strtoull would wrap it */
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) return 1;
    *out = (uint64_t)x;
    return 0;
}

/* ---- arrays ---------------------------------------------------------- */

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "",
                              (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "%s)", ndim == 1 ? "," : "");
}

/* Maps a rank-2/3/4 shape to (B, H, L, D) by the convention in cli.h. */
static int to_bhld(const char *cmd, const char *name, const attn_npy *a,
                   int64_t out[4]) {
    char s[160];
    shape_str(s, sizeof s, a->ndim, a->shape);
    if (a->ndim < 2 || a->ndim > 4)
        return cli_usage_error(cmd, "%s has shape %s: rank 2 (L, D), 3 "
                               "(B, L, D) or 4 (B, H, L, D) is needed",
                               name, s);
    int64_t pad = 4 - a->ndim;
    for (int i = 0; i < 4; i++) out[i] = 1;
    if (a->ndim == 3) { /* (B, L, D): the missing axis is H */
        out[0] = a->shape[0];
        out[2] = a->shape[1];
        out[3] = a->shape[2];
    } else {
        for (int i = 0; i < a->ndim; i++) out[pad + i] = a->shape[i];
    }
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] < 1)
            return cli_usage_error(cmd, "%s has shape %s: attention needs "
                                   "every extent >= 1", name, s);
    return 0;
}

int cli_load_tensor(const char *cmd, const char *path, const char *name,
                    cli_tensor *out) {
    memset(out, 0, sizeof *out);
    char what[64];
    snprintf(what, sizeof what, "reading %s", name);
    attn_status st = attn_npy_read(path, &out->npy);
    if (st) return cli_fail(cmd, st, what);
    attn_dtype dt = out->npy.dtype;
    if (dt != ATTN_F32 && dt != ATTN_F16 && dt != ATTN_F64) {
        cli_tensor_free(out);
        fprintf(stderr, "attn %s: %s (%s) has dtype %s; a float array (<f4, "
                "<f2 or <f8) is needed\n", cmd, name, path,
                attn_dtype_name(dt));
        return 1;
    }
    int64_t s[4];
    int rc = to_bhld(cmd, name, &out->npy, s);
    if (rc) {
        cli_tensor_free(out);
        return rc;
    }
    out->rank = out->npy.ndim;
    out->t = attn_tensor_4d(out->npy.data, out->npy.dtype, s[0], s[1], s[2],
                            s[3]);
    return 0;
}

int cli_tensor_convert(const char *cmd, cli_tensor *t, attn_dtype dtype) {
    attn_status st = attn_npy_convert(&t->npy, dtype);
    if (st) return cli_fail(cmd, st, "converting the inputs");
    t->t.data = t->npy.data;
    t->t.dtype = dtype;
    return 0;
}

int cli_compute_dtype(const char *cmd, const char *s, attn_dtype *dt) {
    static const struct {
        const char *name;
        attn_dtype dt;
    } t[] = {{"f32", ATTN_F32}, {"f16", ATTN_F16}, {"bf16", ATTN_BF16},
             {"f64", ATTN_F64}};
    if (!s) return 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(s, t[i].name) == 0) {
            *dt = t[i].dt;
            return 0;
        }
    return cli_usage_error(cmd, "--compute-dtype takes f32, f16, bf16 or "
                           "f64, not '%s'", s);
}

int cli_qkv_convert(const char *cmd, int given, attn_dtype compute,
                    cli_tensor *q, cli_tensor *k, cli_tensor *v) {
    /* without --compute-dtype, f64 files are read as f32 (any kernel) */
    cli_tensor *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        attn_dtype to = given ? compute
                              : (in[i]->t.dtype == ATTN_F64 ? ATTN_F32
                                                            : in[i]->t.dtype);
        int rc = cli_tensor_convert(cmd, in[i], to);
        if (rc) return rc;
    }
    return 0;
}

int cli_parse_paths(const char *cmd, int argc, char **argv,
                    const cli_path_opt *opts, size_t n) {
    for (int i = 1; i < argc; i += 2) {
        const char **slot = NULL;
        for (size_t j = 0; j < n && !slot; j++)
            if (strcmp(argv[i], opts[j].name) == 0) slot = opts[j].slot;
        if (!slot) return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
        if (i + 1 >= argc)
            return cli_usage_error(cmd, "%s needs a value", argv[i]);
        *slot = argv[i + 1];
    }
    return 0;
}

void cli_tensor_free(cli_tensor *t) {
    attn_npy_free(&t->npy);
    memset(t, 0, sizeof *t);
}

int cli_alloc_tensor(const char *cmd, const char *name, attn_dtype dtype,
                     int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                     attn_tensor *t) {
    const int64_t d[4] = {d0, d1, d2, d3};
    uint64_t n = attn_dtype_size(dtype);
    for (int i = 0; i < 4; i++) {
        if (d[i] < 1 || n > SIZE_MAX / (uint64_t)d[i]) {
            fprintf(stderr, "attn %s: %s of shape (%lld, %lld, %lld, %lld) is "
                    "too large\n", cmd, name, (long long)d0, (long long)d1,
                    (long long)d2, (long long)d3);
            return 1;
        }
        n *= (uint64_t)d[i];
    }
    void *p = calloc(1, (size_t)n);
    if (!p) {
        fprintf(stderr, "attn %s: cannot allocate %llu bytes for %s\n", cmd,
                (unsigned long long)n, name);
        return 1;
    }
    *t = attn_tensor_4d(p, dtype, d0, d1, d2, d3);
    return 0;
}

int cli_save_array(const char *cmd, const char *path, attn_dtype dtype,
                   void *data, int ndim, const int64_t *shape) {
    attn_npy a;
    memset(&a, 0, sizeof a);
    a.dtype = dtype;
    a.ndim = ndim;
    for (int i = 0; i < ndim; i++) a.shape[i] = shape[i];
    a.data = data;
    attn_status st = attn_npy_write(path, &a);
    if (st) return cli_fail(cmd, st, "writing");
    return 0;
}

int cli_save_like(const char *cmd, const char *path, attn_dtype dtype,
                  void *data, int ndim, const int64_t *shape, int rank) {
    int64_t s[4];
    int n = 0;
    /* rank 4 keeps B and H, rank 3 keeps B, rank 2 keeps neither; the
     * dropped axes have extent 1 because the input of that rank had them */
    if (rank >= 3) s[n++] = shape[0];
    if (rank == 4) s[n++] = shape[1];
    for (int i = 2; i < ndim; i++) s[n++] = shape[i];
    return cli_save_array(cmd, path, dtype, data, n, s);
}

/* ---- the shared SDPA options ----------------------------------------- */

void cli_sdpa_args_init(cli_sdpa_args *a) {
    memset(a, 0, sizeof *a);
    attn_sdpa_opts_init(&a->opts);
}

void cli_sdpa_args_free(cli_sdpa_args *a) {
    attn_npy_free(&a->key_lengths);
    attn_npy_free(&a->query_lengths);
    attn_npy_free(&a->mask);
    attn_npy_free(&a->bias);
    attn_npy_free(&a->layout);
    memset(a, 0, sizeof *a);
}

void cli_sdpa_args_help(FILE *f) {
    fprintf(f,
"attention options (shared by every attention subcommand):\n"
"  --scale S            multiplier of q.k (> 0); default 1/sqrt(Dk)\n"
"  --causal ALIGN       look-ahead mask; ALIGN is top-left (query i sees keys\n"
"                       0..i, PyTorch is_causal) or bottom-right (the last\n"
"                       query sees the last key, FlashAttention / KV cache)\n"
"  --align ALIGN        alignment of --window without --causal (top-left)\n"
"  --window LEFT,RIGHT  local window: query i sees keys c-LEFT .. c+RIGHT\n"
"                       around its diagonal c; -1 leaves a side unbounded\n"
"  --key-lengths KL.npy    valid keys per batch entry, B ints (or whole floats)\n"
"  --query-lengths QL.npy  valid queries per batch entry; rows past it are 0\n"
"  --mask M.npy         boolean mask, rank 2 (Lq, Lk), 3 (B, Lq, Lk) or\n"
"                       4 (B|1, H|1, Lq|1, Lk|1); axes of size 1 broadcast\n"
"  --mask-convention C  how M reads: keep (nonzero attends, PyTorch SDPA;\n"
"                       the default), masked (1 = masked, Keras/TF) or\n"
"                       torch-mha (True = blocked, nn.MultiheadAttention)\n"
"  --bias BIAS.npy      additive float bias, same ranks as --mask; -inf masks\n"
"  --block-sparse BLOCK,LAYOUT.npy\n"
"                       block layout of 0/1, (ceil(Lq/BLOCK), ceil(Lk/BLOCK))\n"
"                       shared by all heads, or (H, ...) per head\n"
"  --random-blocks BLOCK,KEEP_P,SEED\n"
"                       keep each BLOCK x BLOCK block with probability KEEP_P\n"
"  --impl auto|ref|flash   kernel (ref: exact reference, double sums)\n"
"  --threads N          threads (0: OpenMP's default)\n"
"  --dropout P          dropout on the weights, P in [0, 1)\n"
"  --seed N             dropout seed (default 0)\n"
"All mask parts combine by AND; a query row with no visible key gives\n"
"output 0 and log-sum-exp -inf.\n");
}

/* The file-valued options, recorded during the scan and loaded after it
 * (so --mask-convention may come after --mask). */
typedef struct {
    const char *key_lengths, *query_lengths, *mask, *bias, *layout;
    const char *convention;
} pending_files;

static int parse_align(const char *cmd, const char *opt, const char *v,
                       attn_align *out) {
    if (strcmp(v, "top-left") == 0) {
        *out = ATTN_ALIGN_TOP_LEFT;
    } else if (strcmp(v, "bottom-right") == 0) {
        *out = ATTN_ALIGN_BOTTOM_RIGHT;
    } else {
        return cli_usage_error(cmd, "%s takes top-left or bottom-right, not "
                               "'%s'", opt, v);
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

/* Handles one option at argv[i] (value at argv[i + 1]); *used is how many
 * arguments it took (0: not ours). */
static int parse_one(const char *cmd, int argc, char **argv, int i,
                     cli_sdpa_args *a, pending_files *pf, int *used) {
    static const char *const with_value[] = {
        "--scale", "--causal", "--align", "--window", "--key-lengths",
        "--query-lengths", "--mask", "--mask-convention", "--bias",
        "--block-sparse", "--random-blocks", "--impl", "--threads",
        "--dropout", "--seed"};
    const char *opt = argv[i];
    *used = 0;
    size_t k, nopts = sizeof with_value / sizeof with_value[0];
    for (k = 0; k < nopts; k++)
        if (strcmp(opt, with_value[k]) == 0) break;
    if (k == nopts) return 0;
    if (i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", opt);
    const char *v = argv[i + 1];
    *used = 2;
    attn_sdpa_opts *o = &a->opts;
    char buf[4096];
    char *parts[4];
    if (strcmp(opt, "--scale") == 0) {
        if (cli_parse_double(v, &o->scale) || !(o->scale > 0) ||
            isinf(o->scale))
            return cli_usage_error(cmd, "--scale must be a positive number, "
                                   "not '%s'", v);
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
            return cli_usage_error(cmd, "--window takes LEFT,RIGHT with each "
                                   ">= 0 or -1 (unbounded), not '%s'", v);
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
            return cli_usage_error(cmd, "--mask-convention takes keep, masked "
                                   "or torch-mha, not '%s'", v);
        pf->convention = v;
    } else if (strcmp(opt, "--bias") == 0) {
        pf->bias = v;
    } else if (strcmp(opt, "--block-sparse") == 0) {
        int64_t bs;
        const char *comma = strchr(v, ',');
        if (!comma || split_commas(v, buf, sizeof buf, parts, 1) < 1)
            return cli_usage_error(cmd, "--block-sparse takes BLOCK,LAYOUT.npy, "
                                   "not '%s'", v);
        buf[comma - v] = '\0'; /* the path may itself contain commas */
        if (cli_parse_i64(buf, &bs) || bs < 1)
            return cli_usage_error(cmd, "--block-sparse: BLOCK must be a "
                                   "positive integer, not '%s'", buf);
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
            return cli_usage_error(cmd, "--random-blocks takes BLOCK,KEEP_P,SEED "
                                   "(BLOCK >= 1, KEEP_P in [0, 1], SEED >= 0), "
                                   "not '%s'", v);
        o->mask.random_block = bs;
        o->mask.random_keep_p = p;
        o->mask.random_seed = seed;
    } else if (strcmp(opt, "--impl") == 0) {
        if (strcmp(v, "auto") == 0) o->impl = ATTN_IMPL_AUTO;
        else if (strcmp(v, "ref") == 0) o->impl = ATTN_IMPL_REF;
        else if (strcmp(v, "flash") == 0) o->impl = ATTN_IMPL_FLASH;
        else return cli_usage_error(cmd, "--impl takes auto, ref or flash, not "
                                    "'%s'", v);
    } else if (strcmp(opt, "--threads") == 0) {
        int64_t t;
        if (cli_parse_i64(v, &t) || t < 0 || t > 4096)
            return cli_usage_error(cmd, "--threads must be an integer in "
                                   "[0, 4096], not '%s'", v);
        o->threads = (int)t;
    } else if (strcmp(opt, "--dropout") == 0) {
        if (cli_parse_double(v, &o->dropout_p) ||
            !(o->dropout_p >= 0.0 && o->dropout_p < 1.0))
            return cli_usage_error(cmd, "--dropout must be in [0, 1), not '%s'",
                                   v);
    } else { /* --seed */
        if (cli_parse_u64(v, &o->seed))
            return cli_usage_error(cmd, "--seed must be an integer >= 0, not "
                                   "'%s'", v);
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
        fprintf(stderr, "attn %s: %s (%s) must have rank 1 (one length per "
                "batch entry), not %d\n", cmd, opt, path, out->ndim);
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
    int rc = to_bhld(cmd, opt, out, s);
    if (rc) return rc;
    *view = attn_tensor_4d(out->data, out->dtype, s[0], s[1], s[2], s[3]);
    return 0;
}

static int load_files(const char *cmd, cli_sdpa_args *a,
                      const pending_files *pf) {
    attn_mask *m = &a->opts.mask;
    int rc;
    attn_status st;
    if (pf->convention && !pf->mask)
        return cli_usage_error(cmd, "--mask-convention needs --mask");
    if (pf->key_lengths &&
        (rc = load_lengths(cmd, pf->key_lengths, "--key-lengths", &a->key_lengths)))
        return rc;
    if (pf->query_lengths &&
        (rc = load_lengths(cmd, pf->query_lengths, "--query-lengths",
                           &a->query_lengths)))
        return rc;
    if (pf->mask) {
        if ((rc = load_mask_like(cmd, pf->mask, "--mask", &a->mask, &a->keep_t)))
            return rc;
        /* every convention ends as u8 keep = 1 */
        const char *conv = pf->convention ? pf->convention : "keep";
        /* to a 0/1 u8 array first (nonzero = 1), then, for the other
         * conventions, through their builders in place (elementwise) */
        st = attn_npy_convert(&a->mask, ATTN_U8);
        if (!st && strcmp(conv, "keep") != 0) {
            size_t n = 1;
            for (int i = 0; i < a->mask.ndim; i++) n *= (size_t)a->mask.shape[i];
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
        if ((rc = load_mask_like(cmd, pf->bias, "--bias", &a->bias, &a->bias_t)))
            return rc;
        if (a->bias.dtype != ATTN_F32 && a->bias.dtype != ATTN_F64 &&
            (st = attn_npy_convert(&a->bias, ATTN_F64)))
            return cli_fail(cmd, st, "reading --bias");
        a->bias_t.data = a->bias.data;
        a->bias_t.dtype = a->bias.dtype;
        m->bias = &a->bias_t;
    }
    if (pf->layout) {
        if ((st = attn_npy_read(pf->layout, &a->layout)))
            return cli_fail(cmd, st, "reading the --block-sparse layout");
        if ((st = attn_npy_convert(&a->layout, ATTN_U8)))
            return cli_fail(cmd, st, "reading the --block-sparse layout");
    }
    return 0;
}

int cli_sdpa_args_parse(const char *cmd, int *argc, char **argv,
                        cli_sdpa_args *a) {
    pending_files pf;
    memset(&pf, 0, sizeof pf);
    int out = 1;
    for (int i = 1; i < *argc;) {
        int used, rc = parse_one(cmd, *argc, argv, i, a, &pf, &used);
        if (rc) return rc;
        if (used == 0) argv[out++] = argv[i++];
        else i += used;
    }
    *argc = out;
    return load_files(cmd, a, &pf);
}

int cli_sdpa_args_bind(const char *cmd, cli_sdpa_args *a, int64_t B,
                       int64_t H, int64_t Lq, int64_t Lk) {
    attn_mask *m = &a->opts.mask;
    const attn_npy *len[2] = {&a->key_lengths, &a->query_lengths};
    const char *names[2] = {"--key-lengths", "--query-lengths"};
    for (int i = 0; i < 2; i++)
        if (len[i]->data && len[i]->shape[0] != B) {
            fprintf(stderr, "attn %s: %s has %lld entries but the batch has "
                    "%lld\n", cmd, names[i], (long long)len[i]->shape[0],
                    (long long)B);
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
            shape_str(s, sizeof s, l->ndim, l->shape);
            fprintf(stderr, "attn %s: the --block-sparse layout has shape %s; "
                    "with block %lld, Lq = %lld, Lk = %lld and H = %lld it must "
                    "be (%lld, %lld) or (1 or %lld, %lld, %lld)\n", cmd, s,
                    (long long)bs, (long long)Lq, (long long)Lk, (long long)H,
                    (long long)nq, (long long)nk, (long long)H, (long long)nq,
                    (long long)nk);
            return 1;
        }
        m->layout = l->data;
        m->layout_heads = lh;
    }
    attn_status st = attn_mask_check(m, B, H, Lq, Lk);
    if (st) return cli_fail(cmd, st, "checking the mask");
    return 0;
}
