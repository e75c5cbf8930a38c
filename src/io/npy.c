/* .npy files: the interchange format with NumPy, PyTorch and Keras.
 *
 * Format (numpy.lib.format): "\x93NUMPY", major and minor version bytes, the
 * header length (u16 LE for 1.0, u32 LE for 2.0/3.0), then an ASCII (3.0:
 * UTF-8) Python dict literal {'descr': ..., 'fortran_order': ..., 'shape':
 * (...)} padded with spaces and a newline, then the raw C-order data.
 *
 * The reader trusts nothing: every length is checked against the file's
 * size before anything is allocated, so a lying header can neither make us
 * over-read nor allocate more than the file holds. Zero-size arrays (a 0 in
 * the shape) are valid .npy files and are accepted; attention entry points
 * (the CLI) refuse them because attention needs every extent >= 1. */
#include "binfile.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* Headers longer than this are refused: NumPy itself caps what it reads
 * (10000 bytes by default), and ours are a few hundred bytes. */
#define NPY_MAX_HEADER (1u << 20)

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ---- the header dict ------------------------------------------------- */

typedef struct {
    const char *s; /* NUL-terminated header text */
    size_t pos;
    const char *path;
} hdr_parser;

static void skip_ws(hdr_parser *p) {
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
           p->s[p->pos] == '\n' || p->s[p->pos] == '\r')
        p->pos++;
}

static attn_status hdr_error(const hdr_parser *p, const char *what) {
    return attn__fail(ATTN_E_FORMAT,
                      "%s: malformed .npy header: %s at byte %zu of the "
                      "header",
                      p->path, what, p->pos);
}

static attn_status expect_char(hdr_parser *p, char c, const char *what) {
    skip_ws(p);
    if (p->s[p->pos] != c) return hdr_error(p, what);
    p->pos++;
    return ATTN_OK;
}

/* A Python string literal in single or double quotes, without escapes (the
 * keys and descrs NumPy writes never need them). */
static attn_status parse_string(hdr_parser *p, char *out, size_t cap) {
    skip_ws(p);
    char q = p->s[p->pos];
    if (q != '\'' && q != '"') return hdr_error(p, "expected a quoted string");
    p->pos++;
    size_t n = 0;
    while (p->s[p->pos] != q) {
        char c = p->s[p->pos];
        if (c == '\0') return hdr_error(p, "unterminated string");
        if (c == '\\') return hdr_error(p, "escape sequence in a string");
        if (n + 1 >= cap) return hdr_error(p, "string too long");
        out[n++] = c;
        p->pos++;
    }
    p->pos++;
    out[n] = '\0';
    return ATTN_OK;
}

static attn_status parse_bool(hdr_parser *p, int *out) {
    skip_ws(p);
    if (strncmp(p->s + p->pos, "True", 4) == 0) {
        *out = 1;
        p->pos += 4;
    } else if (strncmp(p->s + p->pos, "False", 5) == 0) {
        *out = 0;
        p->pos += 5;
    } else {
        return hdr_error(p, "fortran_order must be True or False");
    }
    return ATTN_OK;
}

/* A tuple of non-negative integers: (), (n,), (a, b, ...) with an optional
 * trailing comma; Python 2's long suffix 'L' is tolerated. */
static attn_status parse_shape(hdr_parser *p, int *ndim, int64_t *shape) {
    attn_status st = expect_char(p, '(', "shape must be a tuple");
    if (st) return st;
    int n = 0, comma = 0;
    for (;;) {
        skip_ws(p);
        char c = p->s[p->pos];
        if (c == ')') {
            p->pos++;
            break;
        }
        if (c == '-')
            return attn__fail(ATTN_E_FORMAT,
                              "%s: .npy header has a negative dimension in "
                              "its shape",
                              p->path);
        if (c < '0' || c > '9') return hdr_error(p, "expected a dimension");
        /* Python (and so NumPy) refuses 0002 but reads 00 as 0 */
        int leading_zero = c == '0', nonzero = 0;
        int64_t v = 0;
        while (p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            nonzero |= p->s[p->pos] != '0';
            int d = p->s[p->pos] - '0';
            if (v > (INT64_MAX - d) / 10)
                return attn__fail(ATTN_E_FORMAT,
                                  "%s: .npy header has a dimension that does "
                                  "not fit in 64 bits",
                                  p->path);
            v = v * 10 + d;
            p->pos++;
        }
        if (leading_zero && nonzero)
            return hdr_error(p, "a dimension with a leading zero (Python "
                                "refuses 0002)");
        if (p->s[p->pos] == 'L') p->pos++;
        if (n == ATTN_NPY_MAX_DIMS)
            return attn__fail(ATTN_E_FORMAT,
                              "%s: .npy array has more than %d dimensions",
                              p->path, ATTN_NPY_MAX_DIMS);
        shape[n++] = v;
        skip_ws(p);
        comma = p->s[p->pos] == ',';
        if (comma) {
            p->pos++;
        } else if (p->s[p->pos] != ')') {
            return hdr_error(p, "expected ',' or ')' in the shape");
        }
    }
    /* "(3)" is the integer 3 in Python, not a tuple: NumPy writes "(3,)" */
    if (n == 1 && !comma) return hdr_error(p, "shape (n) is not a tuple");
    *ndim = n;
    return ATTN_OK;
}

typedef struct {
    char descr[32];
    int fortran;
    int ndim;
    int64_t shape[ATTN_NPY_MAX_DIMS];
} npy_header;

static attn_status parse_header(const char *text, const char *path,
                                npy_header *h) {
    hdr_parser p = {text, 0, path};
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    attn_status st = expect_char(&p, '{', "expected '{'");
    if (st) return st;
    for (;;) {
        skip_ws(&p);
        if (p.s[p.pos] == '}') {
            p.pos++;
            break;
        }
        char key[32];
        if ((st = parse_string(&p, key, sizeof key))) return st;
        if ((st = expect_char(&p, ':', "expected ':' after a key"))) return st;
        int *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &have_descr;
            if (*seen) return hdr_error(&p, "key 'descr' given twice");
            st = parse_string(&p, h->descr, sizeof h->descr);
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &have_fortran;
            if (*seen) return hdr_error(&p, "key 'fortran_order' given twice");
            st = parse_bool(&p, &h->fortran);
        } else if (strcmp(key, "shape") == 0) {
            seen = &have_shape;
            if (*seen) return hdr_error(&p, "key 'shape' given twice");
            st = parse_shape(&p, &h->ndim, h->shape);
        } else {
            return attn__fail(ATTN_E_FORMAT,
                              "%s: .npy header has an unknown key '%s' (only "
                              "descr, fortran_order and shape are allowed)",
                              path, key);
        }
        if (st) return st;
        *seen = 1;
        skip_ws(&p);
        if (p.s[p.pos] == ',') {
            p.pos++;
        } else if (p.s[p.pos] != '}') {
            return hdr_error(&p, "expected ',' or '}' after a value");
        }
    }
    skip_ws(&p);
    if (p.s[p.pos] != '\0')
        return hdr_error(&p, "unexpected text after the closing '}'");
    if (!have_descr || !have_fortran || !have_shape)
        return attn__fail(
            ATTN_E_FORMAT, "%s: .npy header lacks the key '%s'", path,
            !have_descr ? "descr"
                        : (!have_fortran ? "fortran_order" : "shape"));
    return ATTN_OK;
}

/* Maps a descr to our dtype. Accepted: <f4 <f2 <f8 <i4 <i8, and for one-byte
 * types |u1 |b1 (also spelt <u1 <b1, which NumPy reads the same). */
static attn_status descr_dtype(const char *descr, const char *path,
                               attn_dtype *dt) {
    static const struct {
        const char *descr;
        attn_dtype dtype;
    } table[] = {
        {"<f4", ATTN_F32}, {"<f2", ATTN_F16}, {"<f8", ATTN_F64},
        {"<i4", ATTN_I32}, {"<i8", ATTN_I64}, {"|u1", ATTN_U8},
        {"|b1", ATTN_U8},  {"<u1", ATTN_U8},  {"<b1", ATTN_U8},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(descr, table[i].descr) == 0) {
            *dt = table[i].dtype;
            return ATTN_OK;
        }
    if (descr[0] == '>')
        return attn__fail(ATTN_E_FORMAT,
                          "%s: .npy data is big-endian ('%s'); save it with "
                          "arr.astype('<%s')",
                          path, descr, descr + 1);
    return attn__fail(ATTN_E_FORMAT,
                      "%s: .npy dtype '%s' is not supported (use <f4, <f2, "
                      "<f8, <i4, <i8, |u1 or |b1)",
                      path, descr);
}

/* ---- reading --------------------------------------------------------- */

/* Reads exactly n bytes or reports why not (truncation is a format error,
 * a failing read an I/O error). */
static attn_status read_exact(FILE *f, void *buf, size_t n, const char *path,
                              const char *what) {
    size_t got = n ? fread(buf, 1, n, f) : 0;
    if (got == n) return ATTN_OK;
    if (ferror(f))
        return attn__fail(ATTN_E_IO, "%s: reading the %s failed", path, what);
    return attn__fail(ATTN_E_FORMAT,
                      "%s: truncated .npy file: the %s needs %zu bytes but "
                      "only %zu remain",
                      path, what, n, got);
}

static attn_status read_open(FILE *f, const char *path, uint64_t fsize,
                             attn_npy *arr) {
    unsigned char pre[12];
    attn_status st;
    if (fsize < 10)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: truncated .npy file: %llu bytes, less than the "
                          "10-byte preamble",
                          path, (unsigned long long)fsize);
    if ((st = read_exact(f, pre, 10, path, "preamble"))) return st;
    if (memcmp(pre, npy_magic, 6) != 0)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: not a .npy file (the magic string \\x93NUMPY "
                          "is missing)",
                          path);
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: .npy version %d.%d is not supported (1.0, 2.0 "
                          "and 3.0 are)",
                          path, major, minor);
    uint64_t hlen, pre_len;
    if (major == 1) {
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
        pre_len = 10;
    } else {
        if (fsize < 12)
            return attn__fail(ATTN_E_FORMAT,
                              "%s: truncated .npy file: %llu bytes, less than "
                              "the 12-byte preamble of version %d.0",
                              path, (unsigned long long)fsize, major);
        if ((st = read_exact(f, pre + 10, 2, path, "preamble"))) return st;
        hlen = attn__get_u32(pre + 8);
        pre_len = 12;
    }
    if (hlen > NPY_MAX_HEADER)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: .npy header claims %llu bytes (more than %u)",
                          path, (unsigned long long)hlen, NPY_MAX_HEADER);
    if (hlen > fsize - pre_len)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: truncated .npy header: it claims %llu bytes but "
                          "the file has %llu after the preamble",
                          path, (unsigned long long)hlen,
                          (unsigned long long)(fsize - pre_len));
    char *text = attn__alloc((size_t)hlen + 1, 1, "npy header");
    if (!text) return ATTN_E_NOMEM;
    st = read_exact(f, text, (size_t)hlen, path, "header");
    text[hlen] = '\0';
    if (!st && strlen(text) != hlen)
        st = attn__fail(ATTN_E_FORMAT, "%s: .npy header contains a NUL byte",
                        path);
    npy_header h;
    memset(&h, 0, sizeof h);
    if (!st) st = parse_header(text, path, &h);
    attn__free(text);
    if (st) return st;

    if (h.fortran)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: .npy array is in Fortran order; save it with "
                          "np.ascontiguousarray(arr)",
                          path);
    attn_dtype dt = ATTN_F32;
    if ((st = descr_dtype(h.descr, path, &dt))) return st;
    int64_t numel = 1, bytes;
    for (int i = 0; i < h.ndim; i++)
        if (!attn__mul_i64(numel, h.shape[i], &numel))
            return attn__fail(ATTN_E_FORMAT,
                              "%s: .npy shape has more elements than 64 bits "
                              "can count",
                              path);
    if (!attn__mul_i64(numel, (int64_t)attn_dtype_size(dt), &bytes))
        return attn__fail(ATTN_E_FORMAT,
                          "%s: .npy shape needs more bytes than 64 bits can "
                          "count (%lld elements of %s)",
                          path, (long long)numel, h.descr);
    uint64_t have = fsize - pre_len - hlen;
    if ((uint64_t)bytes != have)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: .npy header says %lld elements of %s (%lld "
                          "bytes) but the file holds %llu data bytes (%s)",
                          path, (long long)numel, h.descr, (long long)bytes,
                          (unsigned long long)have,
                          (uint64_t)bytes > have ? "truncated"
                                                 : "trailing bytes");
    void *data = attn__alloc((size_t)bytes, 1, "npy data");
    if (!data) return ATTN_E_NOMEM;
    if ((st = read_exact(f, data, (size_t)bytes, path, "data"))) {
        attn__free(data);
        return st;
    }
    arr->dtype = dt;
    arr->ndim = h.ndim;
    for (int i = 0; i < h.ndim; i++) arr->shape[i] = h.shape[i];
    arr->data = data;
    return ATTN_OK;
}

attn_status attn_npy_read(const char *path, attn_npy *arr) {
    if (!arr) return attn__fail(ATTN_E_INVALID, "attn_npy_read: arr is NULL");
    memset(arr, 0, sizeof *arr);
    if (!path) return attn__fail(ATTN_E_INVALID, "attn_npy_read: path is NULL");
    if (!host_is_little_endian())
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "%s: .npy I/O needs a little-endian host", path);
    FILE *f;
    uint64_t fsize;
    attn_status st = attn__fopen_input(path, &f, &fsize);
    if (st) return st;
    st = read_open(f, path, fsize, arr);
    fclose(f);
    return st;
}

void attn_npy_free(attn_npy *arr) {
    if (!arr) return;
    attn__free(arr->data);
    memset(arr, 0, sizeof *arr);
}

/* ---- writing --------------------------------------------------------- */

static const char *dtype_descr(attn_dtype dt) {
    switch (dt) {
    case ATTN_F32: return "<f4";
    case ATTN_F16: return "<f2";
    case ATTN_F64: return "<f8";
    case ATTN_I32: return "<i4";
    case ATTN_I64: return "<i8";
    case ATTN_U8: return "|u1";
    case ATTN_BF16: return NULL; /* NumPy has no bfloat16 */
    case ATTN_Q8: return NULL;   /* a KV cache format, not an array */
    }
    return NULL;
}

/* Element count of arr, checking ndim and the shape (0 extents allowed). */
static attn_status npy_numel(const attn_npy *arr, const char *what,
                             int64_t *numel) {
    if (arr->ndim < 0 || arr->ndim > ATTN_NPY_MAX_DIMS)
        return attn__fail(ATTN_E_SHAPE, "%s: ndim is %d; it must be in [0, %d]",
                          what, arr->ndim, ATTN_NPY_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < arr->ndim; i++) {
        if (arr->shape[i] < 0)
            return attn__fail(ATTN_E_SHAPE, "%s: shape[%d] is %lld (< 0)", what,
                              i, (long long)arr->shape[i]);
        if (!attn__mul_i64(n, arr->shape[i], &n))
            return attn__fail(ATTN_E_NOMEM,
                              "%s: the shape's element count overflows", what);
    }
    size_t bytes;
    if (!attn__mul_size((size_t)n, attn_dtype_size(arr->dtype), &bytes) ||
        (uint64_t)n > (uint64_t)SIZE_MAX)
        return attn__fail(ATTN_E_NOMEM, "%s: %lld elements overflow size_t",
                          what, (long long)n);
    if (n > 0 && !arr->data)
        return attn__fail(ATTN_E_INVALID, "%s: data is NULL", what);
    *numel = n;
    return ATTN_OK;
}

attn_status attn_npy_write(const char *path, const attn_npy *arr) {
    if (!path || !arr)
        return attn__fail(ATTN_E_INVALID, "attn_npy_write: %s is NULL",
                          path ? "arr" : "path");
    const char *descr = dtype_descr(arr->dtype);
    if (!descr)
        return attn__fail(ATTN_E_DTYPE,
                          "%s: dtype %s cannot be stored in .npy (convert bf16 "
                          "to f32 first)",
                          path, attn_dtype_name(arr->dtype));
    int64_t numel;
    attn_status st = npy_numel(arr, path, &numel);
    if (st) return st;
    if (!host_is_little_endian())
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "%s: .npy I/O needs a little-endian host", path);

    /* the dict, then spaces and '\n' so that the data starts at a multiple
     * of 64 bytes, as NumPy does */
    char dict[64 + ATTN_NPY_MAX_DIMS * 24];
    int n =
        snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < arr->ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld",
                      i ? ", " : "", (long long)arr->shape[i]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }",
                  arr->ndim == 1 ? "," : "");
    ATTN_ASSERT(n > 0 && (size_t)n < sizeof dict);
    /* version 2.0 only if the header outgrows a u16; with at most
     * ATTN_NPY_MAX_DIMS dimensions it never does, but the rule is NumPy's */
    size_t pre_len = (size_t)n + 1 + 10 > 65535 ? 12 : 10;
    size_t total = (pre_len + (size_t)n + 1 + 63) / 64 * 64;
    size_t hlen = total - pre_len;

    unsigned char head[12 + sizeof dict + 64];
    memcpy(head, npy_magic, 6);
    head[6] = pre_len == 10 ? 1 : 2;
    head[7] = 0;
    for (size_t i = 0; i < pre_len - 8; i++)
        head[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(head + pre_len, dict, (size_t)n);
    memset(head + pre_len + n, ' ', hlen - (size_t)n - 1);
    head[total - 1] = '\n';

    /* through binfile.c: a temporary in the same folder, fsync'ed and
     * renamed, so a failed write (a full disk) leaves the old file; device
     * nodes are written in place, never removed */
    const attn__piece pc[2] = {
        {head, total},
        {arr->data, (size_t)numel * attn_dtype_size(arr->dtype)}};
    return attn__write_pieces(path, pc, pc[1].n ? 2 : 1);
}

/* ---- dtype conversion ------------------------------------------------ */

/* Integer value of element i for an integer target: exact for integer
 * sources; a float source must hold an integral value in [lo, hi]. */
static attn_status get_int(const attn_npy *arr, size_t i, int64_t lo,
                           int64_t hi, int64_t *out) {
    int64_t v;
    if (arr->dtype == ATTN_I64) {
        v = ((const int64_t *)arr->data)[i];
    } else if (arr->dtype == ATTN_I32) {
        v = ((const int32_t *)arr->data)[i];
    } else if (arr->dtype == ATTN_U8) {
        v = ((const uint8_t *)arr->data)[i];
    } else {
        double x = attn__load_one(arr->data, arr->dtype, i);
        /* 2^63 itself is out of range; compare in double before casting */
        if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0) ||
            x != (double)(int64_t)x)
            return attn__fail(ATTN_E_INVALID,
                              "element %zu is %g, not an integer", i, x);
        v = (int64_t)x;
    }
    if (v < lo || v > hi)
        return attn__fail(ATTN_E_INVALID,
                          "element %zu is %lld, outside the range of the "
                          "target type",
                          i, (long long)v);
    *out = v;
    return ATTN_OK;
}

attn_status attn_npy_convert(attn_npy *arr, attn_dtype dtype) {
    if (!arr)
        return attn__fail(ATTN_E_INVALID, "attn_npy_convert: arr is NULL");
    if (attn_dtype_size(arr->dtype) == 0 || attn_dtype_size(dtype) == 0)
        return attn__fail(ATTN_E_DTYPE,
                          "attn_npy_convert: unknown dtype (%d -> %d)",
                          (int)arr->dtype, (int)dtype);
    int64_t numel;
    attn_status st = npy_numel(arr, "attn_npy_convert", &numel);
    if (st) return st;
    if (arr->dtype == dtype) return ATTN_OK;
    size_t n = (size_t)numel;
    void *dst = attn__alloc(n, attn_dtype_size(dtype), "npy conversion");
    if (!dst) return ATTN_E_NOMEM;
    if (attn__is_float_dtype(dtype)) {
        attn__convert_to_float(arr->data, arr->dtype, dst, dtype, n);
    } else if (dtype == ATTN_U8) { /* a boolean: nonzero counts as one */
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)dst)[i] =
                attn__load_one(arr->data, arr->dtype, i) != 0.0;
    } else { /* I32 or I64: exact integers only */
        int64_t lo = dtype == ATTN_I32 ? INT32_MIN : INT64_MIN;
        int64_t hi = dtype == ATTN_I32 ? INT32_MAX : INT64_MAX;
        for (size_t i = 0; i < n && !st; i++) {
            int64_t v = 0;
            st = get_int(arr, i, lo, hi, &v);
            if (dtype == ATTN_I32)
                ((int32_t *)dst)[i] = (int32_t)v;
            else
                ((int64_t *)dst)[i] = v;
        }
        if (st) {
            char why[256]; /* the message buffer cannot be its own source */
            snprintf(why, sizeof why, "%s", attn_last_error());
            attn__fail(st, "cannot convert %s to %s: %s",
                       attn_dtype_name(arr->dtype), attn_dtype_name(dtype),
                       why);
        }
    }
    if (st) {
        attn__free(dst);
        return st;
    }
    attn__free(arr->data);
    arr->data = dst;
    arr->dtype = dtype;
    return ATTN_OK;
}
