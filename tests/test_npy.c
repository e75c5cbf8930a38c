/* .npy reading and writing: round trips of every dtype and rank 0..4, files
 * written by hand in every version, and every kind of malformed file, each
 * refused with its status and a message (never a crash or an over-read:
 * the sanitizer build watches the latter). */
#include "attn.h"
#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (n && fwrite(bytes, 1, n, f) != n) exit(2);
    fclose(f);
}

/* Builds a .npy file from its parts: version (major), the header text
 * (padded with spaces and '\n' to a multiple of 64 unless raw), and data. */
static size_t build_npy(unsigned char *buf, int major, int minor,
                        const char *header, const void *data, size_t ndata) {
    size_t pre = major == 1 ? 10 : 12, hl = strlen(header);
    size_t total = (pre + hl + 1 + 63) / 64 * 64, hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = (unsigned char)minor;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, header, hl);
    memset(buf + pre + hl, ' ', hlen - hl - 1);
    buf[total - 1] = '\n';
    if (ndata) memcpy(buf + total, data, ndata);
    return total + ndata;
}

static unsigned char filebuf[1 << 16];

/* Writes a crafted file and expects attn_npy_read to refuse it. */
static void expect_refused(const char *label, const void *bytes, size_t n,
                           attn_status want) {
    const char *path = tmp_path("bad.npy");
    write_bytes(path, bytes, n);
    attn_npy arr;
    memset(&arr, 0x5a, sizeof arr);
    attn_clear_error();
    attn_status st = attn_npy_read(path, &arr);
    CHECK_MSG(st == want, "%s: got %s (%s), wanted %s", label,
              attn_strerror(st), attn_last_error(), attn_strerror(want));
    CHECK_MSG(attn_last_error()[0] != '\0', "%s: empty message", label);
    if (getenv("ATTN_TEST_VERBOSE"))
        printf("%-28s %s\n", label, attn_last_error());
    CHECK_MSG(arr.data == NULL && arr.ndim == 0, "%s: arr not zeroed", label);
    attn_npy_free(&arr);
}

static void expect_header_refused(const char *label, int major,
                                  const char *header, size_t ndata) {
    static unsigned char zeros[4096];
    size_t n = build_npy(filebuf, major, 0, header, zeros, ndata);
    expect_refused(label, filebuf, n, ATTN_E_FORMAT);
}

static void roundtrips(void) {
    const attn_dtype dtypes[] = {ATTN_F32, ATTN_F16, ATTN_F64,
                                 ATTN_I32, ATTN_I64, ATTN_U8};
    const int64_t shapes[5][4] = {{0}, {7}, {3, 5}, {2, 1, 3}, {2, 3, 1, 4}};
    unsigned long long seed = 7;
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (int rank = 0; rank <= 4; rank++) {
            attn_npy arr = {0}, back;
            arr.dtype = dtypes[d];
            arr.ndim = rank;
            size_t numel = 1;
            for (int i = 0; i < rank; i++) {
                arr.shape[i] = shapes[rank][i];
                numel *= (size_t)shapes[rank][i];
            }
            size_t bytes = numel * attn_dtype_size(arr.dtype);
            unsigned char *data = malloc(bytes);
            for (size_t i = 0; i < bytes; i++)
                data[i] = (unsigned char)((test_rand(&seed) + 1.0) * 127.9);
            arr.data = data;
            const char *path = tmp_path("rt.npy");
            CHECK_STATUS(attn_npy_write(path, &arr), ATTN_OK);
            CHECK_STATUS(attn_npy_read(path, &back), ATTN_OK);
            CHECK_MSG(back.dtype == arr.dtype && back.ndim == rank,
                      "%s rank %d came back as %s rank %d",
                      attn_dtype_name(arr.dtype), rank,
                      attn_dtype_name(back.dtype), back.ndim);
            for (int i = 0; i < rank && back.ndim == rank; i++)
                CHECK(back.shape[i] == arr.shape[i]);
            CHECK(back.data && memcmp(back.data, data, bytes) == 0);
            /* the data starts at a multiple of 64 bytes, as NumPy writes */
            FILE *f = fopen(path, "rb");
            fseek(f, 0, SEEK_END);
            long size = ftell(f);
            fclose(f);
            CHECK_MSG((size_t)size >= bytes && ((size_t)size - bytes) % 64 == 0,
                      "file of %ld bytes for %zu data bytes", size, bytes);
            attn_npy_free(&back);
            CHECK(back.data == NULL);
            free(data);
        }
}

static void exact_header(void) {
    /* byte-exact against what numpy.save writes for np.zeros((2, 3), '<f4') */
    float z[6] = {0};
    attn_npy arr = {ATTN_F32, 2, {2, 3}, z};
    const char *path = tmp_path("exact.npy");
    CHECK_STATUS(attn_npy_write(path, &arr), ATTN_OK);
    unsigned char got[200];
    FILE *f = fopen(path, "rb");
    size_t n = fread(got, 1, sizeof got, f);
    fclose(f);
    const char *dict =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(n == 128 + 24);
    CHECK(memcmp(got, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
    CHECK(memcmp(got + 10, dict, strlen(dict)) == 0);
    CHECK(got[127] == '\n' && got[126] == ' ');
    /* rank 1 and rank 0 tuples */
    int32_t one[3] = {1, 2, 3};
    attn_npy a1 = {ATTN_I32, 1, {3}, one};
    CHECK_STATUS(attn_npy_write(path, &a1), ATTN_OK);
    f = fopen(path, "rb");
    n = fread(got, 1, sizeof got, f);
    fclose(f);
    CHECK(n > 64 && strstr((char *)got + 10, "'shape': (3,), }") != NULL);
    attn_npy a0 = {ATTN_F64, 0, {0}, (double[]){2.5}};
    CHECK_STATUS(attn_npy_write(path, &a0), ATTN_OK);
    attn_npy back;
    CHECK_STATUS(attn_npy_read(path, &back), ATTN_OK);
    CHECK(back.ndim == 0 && back.dtype == ATTN_F64 &&
          ((double *)back.data)[0] == 2.5);
    attn_npy_free(&back);
}

static void zero_size(void) {
    attn_npy arr = {ATTN_F32, 3, {2, 0, 3}, NULL}, back;
    const char *path = tmp_path("empty.npy");
    CHECK_STATUS(attn_npy_write(path, &arr), ATTN_OK);
    CHECK_STATUS(attn_npy_read(path, &back), ATTN_OK);
    CHECK(back.ndim == 3 && back.shape[1] == 0 && back.data != NULL);
    attn_npy_free(&back);
}

static void hand_written(void) {
    /* other spellings NumPy or its ancestors produce: versions 2.0 and 3.0,
     * double quotes, other key order, no trailing comma, Python 2 longs,
     * '|b1' and '<u1', no padding at all */
    const double d[6] = {1, 2, 3, 4, 5, 6};
    const char *headers[] = {
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
        "{\"shape\": (2,3), \"descr\": \"<f8\", \"fortran_order\": False}",
        "{'descr':'<f8','fortran_order':False,'shape':(2L, 3L)}",
    };
    for (int major = 1; major <= 3; major++)
        for (int h = 0; h < 3; h++) {
            size_t n = build_npy(filebuf, major, 0, headers[h], d, sizeof d);
            write_bytes(tmp_path("hand.npy"), filebuf, n);
            attn_npy arr;
            CHECK_STATUS(attn_npy_read(tmp_path("hand.npy"), &arr), ATTN_OK);
            CHECK(arr.dtype == ATTN_F64 && arr.ndim == 2 && arr.shape[0] == 2 &&
                  arr.shape[1] == 3);
            CHECK(arr.data && memcmp(arr.data, d, sizeof d) == 0);
            attn_npy_free(&arr);
        }
    const unsigned char bools[4] = {1, 0, 1, 1};
    const char *bh[] = {
        "{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }",
        "{'descr': '<u1', 'fortran_order': False, 'shape': (2, 2), }"};
    for (int i = 0; i < 2; i++) {
        size_t n = build_npy(filebuf, 1, 0, bh[i], bools, 4);
        write_bytes(tmp_path("bool.npy"), filebuf, n);
        attn_npy arr;
        CHECK_STATUS(attn_npy_read(tmp_path("bool.npy"), &arr), ATTN_OK);
        CHECK(arr.dtype == ATTN_U8 && memcmp(arr.data, bools, 4) == 0);
        attn_npy_free(&arr);
    }
    /* an unpadded header: 10-byte preamble, header, data straight after */
    const char *raw = "{'descr': '<i4', 'fortran_order': False, 'shape': (1,)}";
    size_t hl = strlen(raw);
    memcpy(filebuf, "\x93NUMPY\x01\x00", 8);
    filebuf[8] = (unsigned char)hl;
    filebuf[9] = 0;
    memcpy(filebuf + 10, raw, hl);
    int32_t v = -5;
    memcpy(filebuf + 10 + hl, &v, 4);
    write_bytes(tmp_path("raw.npy"), filebuf, 14 + hl);
    attn_npy arr;
    CHECK_STATUS(attn_npy_read(tmp_path("raw.npy"), &arr), ATTN_OK);
    CHECK(arr.dtype == ATTN_I32 && ((int32_t *)arr.data)[0] == -5);
    attn_npy_free(&arr);
}

static void malformed(void) {
    const char *ok_hdr =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    float d[6] = {0};
    size_t n = build_npy(filebuf, 1, 0, ok_hdr, d, sizeof d);

    /* the preamble */
    expect_refused("empty file", filebuf, 0, ATTN_E_FORMAT);
    expect_refused("5 bytes", filebuf, 5, ATTN_E_FORMAT);
    expect_refused("preamble only", filebuf, 10, ATTN_E_FORMAT);
    unsigned char bad[sizeof filebuf];
    memcpy(bad, filebuf, n);
    bad[1] = 'n';
    expect_refused("bad magic", bad, n, ATTN_E_FORMAT);
    memcpy(bad, filebuf, n);
    bad[0] = 'P';
    expect_refused("bad magic byte 0", bad, n, ATTN_E_FORMAT);
    memcpy(bad, filebuf, n);
    bad[6] = 4;
    expect_refused("version 4.0", bad, n, ATTN_E_FORMAT);
    memcpy(bad, filebuf, n);
    bad[6] = 0;
    expect_refused("version 0.0", bad, n, ATTN_E_FORMAT);
    memcpy(bad, filebuf, n);
    bad[7] = 1;
    expect_refused("version 1.1", bad, n, ATTN_E_FORMAT);
    memcpy(bad, "\x93NUMPY\x02\x00\x10", 9);
    expect_refused("v2 preamble cut", bad, 11, ATTN_E_FORMAT);

    /* the header's length */
    memcpy(bad, filebuf, n);
    bad[8] = 0xff;
    bad[9] = 0xff;
    expect_refused("header longer than file", bad, n, ATTN_E_FORMAT);
    expect_refused("header cut", filebuf, 40, ATTN_E_FORMAT);
    size_t n2 = build_npy(bad, 2, 0, ok_hdr, d, sizeof d);
    bad[8] = 0;
    bad[9] = 0;
    bad[10] = 0;
    bad[11] = 0x40; /* 1 GiB header */
    expect_refused("v2 header of 1 GiB", bad, n2, ATTN_E_FORMAT);
    memcpy(bad, filebuf, n);
    bad[40] = '\0';
    expect_refused("NUL in header", bad, n, ATTN_E_FORMAT);

    /* the data's length against the shape, both ways */
    expect_refused("data one byte short", filebuf, n - 1, ATTN_E_FORMAT);
    expect_refused("data missing", filebuf, n - sizeof d, ATTN_E_FORMAT);
    memcpy(bad, filebuf, n);
    bad[n] = 0;
    expect_refused("one trailing byte", bad, n + 1, ATTN_E_FORMAT);
    expect_header_refused(
        "lying shape (4, 3)", 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", 24);
    expect_header_refused(
        "lying shape (1,)", 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 24);
    expect_header_refused(
        "scalar with 2 elements", 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 8);

    /* order, endianness, dtype */
    expect_header_refused(
        "fortran order", 1,
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24);
    expect_header_refused(
        "big-endian f4", 1,
        "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
    expect_header_refused(
        "big-endian i8", 1,
        "{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", 24);
    const char *descrs[] = {"<c8",  "|O",  "<U6", "|i1", "<u4",
                            "<f16", "=f4", "f4",  "",    "<i2"};
    for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++) {
        char h[128];
        snprintf(h, sizeof h,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (2,), }",
                 descrs[i]);
        expect_header_refused(descrs[i], 1, h, 8);
    }
    expect_header_refused(
        "structured descr", 1,
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
        8);

    /* absurd shapes */
    expect_header_refused(
        "element count overflow", 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
        0);
    expect_header_refused(
        "byte count overflow", 1,
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
        0);
    expect_header_refused(
        "a trillion elements claimed", 3,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }",
        16);
    expect_header_refused(
        "negative dimension", 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", 0);
    expect_header_refused(
        "dimension over 64 bits", 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
        0);
    expect_header_refused(
        "9 dimensions", 1,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }",
        4);

    /* malformed dict syntax */
    const char *dicts[] = {
        "'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
        "{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'shape': (2,)}",
        "{'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
        "{'descr': '<f4', 'fortran_order': False, 'shape': 2}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (a,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
        "{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
        "{'de\\x73cr': '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{descr: '<f4', 'fortran_order': False, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}",
        "",
        "{",
    };
    for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
        char label[32];
        snprintf(label, sizeof label, "malformed dict %zu", i);
        expect_header_refused(label, 1, dicts[i], 8);
    }
}

static void io_errors(void) {
    attn_npy arr;
    CHECK_STATUS(attn_npy_read(tmp_path("does-not-exist.npy"), &arr),
                 ATTN_E_IO);
    CHECK(strstr(attn_last_error(), "does-not-exist.npy") != NULL);
    CHECK_STATUS(attn_npy_read(tmpdir, &arr), ATTN_E_IO);
    CHECK(attn_last_error()[0] != '\0');
    float x[2] = {1, 2};
    attn_npy a = {ATTN_F32, 1, {2}, x};
    CHECK_STATUS(attn_npy_write(tmp_path("no-such-dir/x.npy"), &a), ATTN_E_IO);
    CHECK(attn_last_error()[0] != '\0');
    /* argument errors */
    CHECK_STATUS(attn_npy_read(NULL, &arr), ATTN_E_INVALID);
    CHECK_STATUS(attn_npy_read(tmp_path("x.npy"), NULL), ATTN_E_INVALID);
    CHECK_STATUS(attn_npy_write(NULL, &a), ATTN_E_INVALID);
    CHECK_STATUS(attn_npy_write(tmp_path("x.npy"), NULL), ATTN_E_INVALID);
    attn_npy bad = a;
    bad.ndim = ATTN_NPY_MAX_DIMS + 1;
    CHECK_STATUS(attn_npy_write(tmp_path("x.npy"), &bad), ATTN_E_SHAPE);
    bad = a;
    bad.ndim = -1;
    CHECK_STATUS(attn_npy_write(tmp_path("x.npy"), &bad), ATTN_E_SHAPE);
    bad = a;
    bad.shape[0] = -2;
    CHECK_STATUS(attn_npy_write(tmp_path("x.npy"), &bad), ATTN_E_SHAPE);
    bad = a;
    bad.data = NULL;
    CHECK_STATUS(attn_npy_write(tmp_path("x.npy"), &bad), ATTN_E_INVALID);
    bad = a;
    bad.dtype = ATTN_BF16;
    CHECK_STATUS(attn_npy_write(tmp_path("x.npy"), &bad), ATTN_E_DTYPE);
    bad = a;
    bad.ndim = 4;
    bad.shape[0] = bad.shape[1] = bad.shape[2] = bad.shape[3] = 1ll << 20;
    CHECK_STATUS(attn_npy_write(tmp_path("x.npy"), &bad), ATTN_E_NOMEM);
    attn_npy_free(NULL);
}

/* Reads a freshly written array back for conversion tests. */
static attn_npy load(attn_dtype dt, int64_t n, const void *data) {
    attn_npy a = {dt, 1, {n}, (void *)data}, r;
    attn_npy_write(tmp_path("conv.npy"), &a);
    CHECK_STATUS(attn_npy_read(tmp_path("conv.npy"), &r), ATTN_OK);
    return r;
}

static void conversions(void) {
    const float f[4] = {1.5f, -2.0f, 0.0f, 65504.0f};
    attn_npy a = load(ATTN_F32, 4, f);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_F16), ATTN_OK);
    CHECK(a.dtype == ATTN_F16 && ((uint16_t *)a.data)[0] == 0x3e00);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_F32), ATTN_OK);
    for (int i = 0; i < 4; i++) CHECK(((float *)a.data)[i] == f[i]);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_BF16), ATTN_OK);
    CHECK(((uint16_t *)a.data)[0] == 0x3fc0);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_U8), ATTN_OK);
    CHECK(((uint8_t *)a.data)[0] == 1 && ((uint8_t *)a.data)[2] == 0 &&
          ((uint8_t *)a.data)[1] == 1);
    attn_npy_free(&a);

    const double lens[3] = {3.0, 0.0, 17.0};
    a = load(ATTN_F64, 3, lens);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_I64), ATTN_OK);
    CHECK(((int64_t *)a.data)[2] == 17);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_F32), ATTN_OK);
    CHECK(((float *)a.data)[0] == 3.0f);
    attn_npy_free(&a);

    const double frac[2] = {1.0, 2.5};
    a = load(ATTN_F64, 2, frac);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_I64), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "2.5") != NULL);
    CHECK(a.dtype == ATTN_F64); /* unchanged on failure */
    attn_npy_free(&a);

    const int64_t big[2] = {5, 1ll << 40};
    a = load(ATTN_I64, 2, big);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_I32), ATTN_E_INVALID);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_F64), ATTN_OK);
    CHECK(((double *)a.data)[1] == 1099511627776.0);
    attn_npy_free(&a);

    const int32_t ints[3] = {-1, 0, 7};
    a = load(ATTN_I32, 3, ints);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_I32), ATTN_OK); /* no-op */
    CHECK_STATUS(attn_npy_convert(&a, ATTN_I64), ATTN_OK);
    CHECK(((int64_t *)a.data)[0] == -1 && ((int64_t *)a.data)[2] == 7);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_U8), ATTN_OK);
    CHECK(((uint8_t *)a.data)[0] == 1 && ((uint8_t *)a.data)[1] == 0);
    attn_npy_free(&a);

    const double inf[1] = {1.0 / 0.0};
    a = load(ATTN_F64, 1, inf);
    CHECK_STATUS(attn_npy_convert(&a, ATTN_I64), ATTN_E_INVALID);
    CHECK_STATUS(attn_npy_convert(&a, (attn_dtype)99), ATTN_E_DTYPE);
    attn_npy_free(&a);
    CHECK_STATUS(attn_npy_convert(NULL, ATTN_F32), ATTN_E_INVALID);
}

int main(void) {
    strcpy(tmpdir, "/tmp/attn-npy-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    roundtrips();
    exact_header();
    zero_size();
    hand_written();
    malformed();
    io_errors();
    conversions();
    const char *names[] = {"rt.npy",   "exact.npy", "empty.npy", "hand.npy",
                           "bool.npy", "raw.npy",   "bad.npy",   "conv.npy"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        remove(tmp_path(names[i]));
    rmdir(tmpdir);
    return check_done("test_npy");
}
