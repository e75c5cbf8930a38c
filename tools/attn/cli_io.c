/* Shared pieces of the attention subcommands: .npy arrays as attention
 * tensors (with the rank convention), and one parser for the SDPA options
 * so that sdpa, sdpa-backward, heatmap, mha ... accept the same flags. */
/* realpath is X/Open */
#define _XOPEN_SOURCE 700
#include "cli.h"
#include "binfile.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
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

void cli_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "",
                              (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "%s)", ndim == 1 ? "," : "");
}

/* Maps a rank-2/3/4 shape to (B, H, L, D) by the convention in cli.h. */
int cli_to_bhld(const char *cmd, const char *name, const attn_npy *a,
                int64_t out[4]) {
    char s[160];
    cli_shape_str(s, sizeof s, a->ndim, a->shape);
    if (a->ndim < 2 || a->ndim > 4)
        return cli_usage_error(cmd,
                               "%s has shape %s: rank 2 (L, D), 3 "
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
            return cli_usage_error(cmd,
                                   "%s has shape %s: attention needs "
                                   "every extent >= 1",
                                   name, s);
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
        char d[32];
        fprintf(stderr,
                "attn %s: %s (%s) has dtype %s; a float array (<f4, "
                "<f2 or <f8) is needed\n",
                cmd, name, cli_esc(path), cli_npy_descr(path, d, sizeof d));
        return 1;
    }
    int64_t s[4];
    int rc = cli_to_bhld(cmd, name, &out->npy, s);
    if (rc) {
        cli_tensor_free(out);
        return rc;
    }
    out->rank = out->npy.ndim;
    out->t =
        attn_tensor_4d(out->npy.data, out->npy.dtype, s[0], s[1], s[2], s[3]);
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
    } t[] = {{"f32", ATTN_F32},
             {"f16", ATTN_F16},
             {"bf16", ATTN_BF16},
             {"f64", ATTN_F64}};
    if (!s) return 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(s, t[i].name) == 0) {
            *dt = t[i].dt;
            return 0;
        }
    return cli_usage_error(cmd,
                           "--compute-dtype takes f32, f16, bf16 or "
                           "f64, not '%s'",
                           s);
}

int cli_sdpa_inputs(const char *cmd, const char *cd, attn_impl impl,
                    const char *const paths[3], cli_tensor *qkv[3],
                    attn_dtype *compute, attn_dtype *fdt) {
    static const char *const names[3] = {"q", "k", "v"};
    *compute = ATTN_F32;
    int rc = cli_compute_dtype(cmd, cd, compute);
    if (rc) return rc;
    if (*compute == ATTN_F64 && impl != ATTN_IMPL_REF)
        return cli_usage_error(cmd, "--compute-dtype f64 runs on the "
                                    "reference kernel only: add --impl ref");
    for (int i = 0; i < 3; i++)
        if ((rc = cli_load_tensor(cmd, paths[i], names[i], qkv[i]))) return rc;
    const cli_tensor *in[3] = {qkv[0], qkv[1], qkv[2]};
    if ((rc = cli_same_dtype(cmd, names, in, 3))) return rc;
    *fdt = cli_out_dtype(qkv[0]->npy.dtype, cd != NULL, *compute);
    /* without --compute-dtype, f64 files are read as f32 (any kernel) */
    for (int i = 0; i < 3; i++) {
        attn_dtype to =
            cd ? *compute
               : (qkv[i]->t.dtype == ATTN_F64 ? ATTN_F32 : qkv[i]->t.dtype);
        if ((rc = cli_tensor_convert(cmd, qkv[i], to))) return rc;
    }
    return 0;
}

int cli_on_off_auto(const char *cmd, const char *opt, const char *v, int *out) {
    static const char *const words[3] = {"off", "on", "auto"};
    static const int values[3] = {0, 1, -1};
    for (int i = 0; i < 3; i++)
        if (strcmp(v, words[i]) == 0) {
            *out = values[i];
            return 0;
        }
    return cli_usage_error(cmd, "%s is on, off or auto, not '%s'", opt, v);
}

int cli_parse_paths(const char *cmd, int argc, char **argv,
                    const cli_path_opt *opts, size_t n) {
    for (int i = 1; i < argc; i += 2) {
        const char **slot = NULL;
        for (size_t j = 0; j < n && !slot; j++)
            if (strcmp(argv[i], opts[j].name) == 0) slot = opts[j].slot;
        if (!slot)
            return cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
        if (i + 1 >= argc)
            return cli_usage_error(cmd, "%s needs a value", argv[i]);
        *slot = argv[i + 1];
    }
    return 0;
}

int cli_require(const char *cmd, const char *const *names,
                const char *const *values, int n) {
    char miss[512];
    size_t len = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!values[i]) k++;
    if (!k) return 0;
    miss[0] = '\0';
    for (int i = 0, seen = 0; i < n; i++) {
        if (values[i]) continue;
        seen++;
        const char *sep = seen == 1 ? "" : seen == k ? " and " : ", ";
        len += (size_t)snprintf(miss + len,
                                len < sizeof miss ? sizeof miss - len : 0,
                                "%s%s", sep, names[i]);
        if (len >= sizeof miss) break;
    }
    return cli_usage_error(cmd, "missing %s (%s required)", miss,
                           k == 1 ? "it is" : "they are");
}

const char *cli_npy_descr(const char *path, char *buf, size_t cap) {
    /* the messages name a file's dtype as NumPy does: the library reads
     * |b1 and |u1 both as u8 */
    snprintf(buf, cap, "?");
    FILE *f = fopen(path, "rb");
    if (!f) return buf;
    char h[512];
    size_t n = fread(h, 1, sizeof h - 1, f);
    fclose(f);
    h[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (h[i] == '\0') h[i] = ' ';
    const char *d = strstr(h, "'descr'");
    if (!d || !(d = strchr(d + 7, '\''))) return buf;
    d++;
    const char *e = strchr(d, '\'');
    if (!e || e - d > 8) return buf;
    static const struct {
        const char *code, *name;
    } t[] = {{"b1", "bool"},      {"u1", "uint8"},      {"i1", "int8"},
             {"i2", "int16"},     {"i4", "int32"},      {"i8", "int64"},
             {"u2", "uint16"},    {"u4", "uint32"},     {"u8", "uint64"},
             {"f2", "float16"},   {"f4", "float32"},    {"f8", "float64"},
             {"c8", "complex64"}, {"c16", "complex128"}};
    const char *code = d + (*d == '<' || *d == '|' || *d == '>' || *d == '=');
    size_t cl = (size_t)(e - code);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strlen(t[i].code) == cl && strncmp(code, t[i].code, cl) == 0) {
            snprintf(buf, cap, "%s", t[i].name);
            return buf;
        }
    snprintf(buf, cap, "%.*s", (int)(e - d), d);
    return buf;
}

/* Where a path leads, for telling two apart: the file's (device, inode)
 * when it exists, else the real path of its folder and its name (an
 * output not written yet), following symbolic links on the way, dangling
 * ones included (alias.npy -> o.npy, o.npy not yet written, is o.npy). */
typedef struct {
    int exists;
    dev_t dev;
    ino_t ino;
    char name[PATH_MAX + 256];
} path_key;

static void key_of(const char *p, path_key *k) {
    struct stat st;
    memset(k, 0, sizeof *k);
    if (stat(p, &st) == 0) {
        k->exists = 1;
        k->dev = st.st_dev;
        k->ino = st.st_ino;
        return;
    }
    char cur[PATH_MAX], d[PATH_MAX], b[PATH_MAX], real[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", p);
    /* a dangling link: where it points, relative to the link's folder;
     * 40 hops at most, as the kernel's own limit */
    for (int hop = 0; hop < 40 && lstat(cur, &st) == 0 && S_ISLNK(st.st_mode);
         hop++) {
        char to[PATH_MAX];
        ssize_t n = readlink(cur, to, sizeof to - 1);
        if (n <= 0) break;
        to[n] = '\0';
        if (to[0] == '/') {
            snprintf(cur, sizeof cur, "%s", to);
        } else {
            snprintf(d, sizeof d, "%s", cur);
            char next[PATH_MAX + 1];
            if ((size_t)snprintf(next, sizeof next, "%s/%s", dirname(d), to) >=
                sizeof cur)
                break;
            memcpy(cur, next, sizeof cur);
        }
    }
    snprintf(d, sizeof d, "%s", cur);
    snprintf(b, sizeof b, "%s", cur);
    if (realpath(dirname(d), real))
        snprintf(k->name, sizeof k->name, "%s/%s", real, basename(b));
    else
        snprintf(k->name, sizeof k->name, "%s", cur);
}

static int same_key(const path_key *a, const path_key *b) {
    if (a->exists != b->exists) return 0;
    return a->exists ? a->dev == b->dev && a->ino == b->ino
                     : strcmp(a->name, b->name) == 0;
}

int cli_check_outputs(const char *cmd, const char *const *names,
                      const char *const *paths, int n) {
    for (int i = 0; i < n; i++) {
        if (!paths[i]) continue;
        attn_status st = attn__check_output(paths[i]);
        if (st) return cli_fail(cmd, st, names[i]);
    }
    return 0;
}

int cli_check_out_dir(const char *cmd, const char *name, const char *path) {
    attn_status st = attn__check_output_dir(path);
    return st ? cli_fail(cmd, st, name) : 0;
}

/* The first of paths[0 .. n - 1] (NULL: not given) that is the file ko
 * names, or -1. */
static int same_file(const path_key *ko, const char *const *paths, int n) {
    path_key kx;
    for (int j = 0; j < n; j++) {
        if (!paths[j]) continue;
        key_of(paths[j], &kx);
        if (same_key(ko, &kx)) return j;
    }
    return -1;
}

int cli_distinct_outputs(const char *cmd, const char *const *in_names,
                         const char *const *ins, int nin,
                         const char *const *out_names, const char *const *outs,
                         int nout) {
    path_key ko;
    for (int i = 0; i < nout; i++) {
        if (!outs[i]) continue;
        key_of(outs[i], &ko);
        int j = same_file(&ko, ins, nin);
        if (j >= 0)
            return cli_usage_error(cmd,
                                   "%s %s is also the input %s %s: "
                                   "writing it would overwrite the input",
                                   out_names[i], outs[i], in_names[j], ins[j]);
        if ((j = same_file(&ko, outs, i)) >= 0)
            return cli_usage_error(cmd,
                                   "%s %s and %s %s are the same file: "
                                   "one output would overwrite the other",
                                   out_names[j], outs[j], out_names[i],
                                   outs[i]);
    }
    /* and each can be written, before the work rather than after it */
    return cli_check_outputs(cmd, out_names, outs, nout);
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
            fprintf(stderr,
                    "attn %s: %s of shape (%lld, %lld, %lld, %lld) is "
                    "too large\n",
                    cmd, name, (long long)d0, (long long)d1, (long long)d2,
                    (long long)d3);
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

static int dtype_rank(attn_dtype d) {
    return d == ATTN_F64 ? 3 : d == ATTN_F32 ? 2 : 1; /* f16, bf16: 1 */
}

attn_dtype cli_out_dtype(attn_dtype in, int given, attn_dtype compute) {
    if (!given || compute == in) return in;
    if (dtype_rank(compute) != dtype_rank(in))
        return dtype_rank(compute) > dtype_rank(in) ? compute : in;
    return ATTN_F32; /* f16 with bf16 */
}

int cli_save_like_as(const char *cmd, const char *path, attn_dtype dtype,
                     void *data, int ndim, const int64_t *shape, int rank,
                     attn_dtype file_dtype) {
    if (file_dtype == dtype)
        return cli_save_like(cmd, path, dtype, data, ndim, shape, rank);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    void *buf = malloc(n * attn_dtype_size(file_dtype) + 1);
    if (!buf) return cli_fail(cmd, ATTN_E_NOMEM, "converting the outputs");
    attn_status st = attn_convert(data, dtype, buf, file_dtype, n);
    int rc = st ? cli_fail(cmd, st, "converting the outputs")
                : cli_save_like(cmd, path, file_dtype, buf, ndim, shape, rank);
    free(buf);
    return rc;
}

int cli_same_dtype(const char *cmd, const char *const *names,
                   const cli_tensor *const *t, int n) {
    for (int i = 1; i < n; i++)
        if (t[i]->npy.dtype != t[0]->npy.dtype) {
            char msg[256];
            size_t at = 0;
            for (int j = 0; j < n && at < sizeof msg; j++)
                at += (size_t)snprintf(msg + at, sizeof msg - at, "%s%s is %s",
                                       j ? ", " : "", names[j],
                                       attn_dtype_name(t[j]->npy.dtype));
            return cli_usage_error(cmd,
                                   "%s: the inputs must share one dtype, as "
                                   "in PyTorch (convert them, e.g. with "
                                   "astype, and pick the arithmetic with "
                                   "--compute-dtype)",
                                   msg);
        }
    return 0;
}
