/* The GGUF reader (attn_gguf.h):
 * - tests/data/gguf/types.gguf, written by the `gguf` package
 *   (tests/make_gguf_fixture.py): every metadata value type read back, and
 *   each tensor type attn reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1)
 *   dequantized to the same bits as the package's NumPy dequantization
 *   (NAME.npy), whole and by rows; Q6_K refused by name;
 * - hostile images made here: every truncation of the valid file, counts
 *   past the file, strings and arrays past the end, unknown types, nested
 *   arrays, bad alignment, misaligned, overlapping and out-of-range
 *   tensors, duplicate keys and names, bad bools, big-endian and other
 *   versions: each a clear error, never a crash (run under ASan in CI). */
#include "attn_gguf.h"
#include "check.h"

#include <stdint.h>
#include <string.h>

#ifndef ATTN_SOURCE_DIR
#define ATTN_SOURCE_DIR "."
#endif
#define DATA ATTN_SOURCE_DIR "/tests/data/gguf/"

/* ---- a writer for hand-made images ------------------------------------ */

typedef struct {
    unsigned char b[4096];
    size_t n;
} img;

static void put(img *m, const void *p, size_t n) {
    memcpy(m->b + m->n, p, n);
    m->n += n;
}
static void u32(img *m, uint32_t x) {
    for (int i = 0; i < 4; i++) m->b[m->n++] = (unsigned char)(x >> 8 * i);
}
static void u64(img *m, uint64_t x) {
    for (int i = 0; i < 8; i++) m->b[m->n++] = (unsigned char)(x >> 8 * i);
}
static void str(img *m, const char *s) {
    u64(m, strlen(s));
    put(m, s, strlen(s));
}
static void header(img *m, uint64_t nt, uint64_t nkv) {
    m->n = 0;
    put(m, "GGUF", 4);
    u32(m, 3);
    u64(m, nt);
    u64(m, nkv);
}
static void tensor(img *m, const char *name, uint64_t ne0, uint64_t ne1,
                   uint32_t type, uint64_t off) {
    str(m, name);
    u32(m, 2);
    u64(m, ne0);
    u64(m, ne1);
    u32(m, type);
    u64(m, off);
}
static void pad(img *m, size_t align) {
    while (m->n % align) m->b[m->n++] = 0;
}

static attn_status parse(const img *m) {
    attn_gguf *g = NULL;
    attn_status st = attn_gguf_parse(m->b, m->n, "img", &g);
    attn_gguf_close(g);
    return st;
}

static int has(const char *needle) {
    return strstr(attn_last_error(), needle) != NULL;
}

/* ---- the fixture ------------------------------------------------------- */

static void test_fixture(void) {
    attn_gguf *g = NULL;
    CHECK_STATUS(attn_gguf_open(DATA "types.gguf", &g), ATTN_OK);
    if (!g) return;
    CHECK(attn_gguf_version(g) == 3);
    const char *s;
    size_t n;
    int64_t i;
    double f;
    CHECK_STATUS(attn_gguf_get_string(g, "general.architecture", &s, &n),
                 ATTN_OK);
    CHECK(n == 5 && memcmp(s, "llama", 5) == 0);
    CHECK_STATUS(attn_gguf_get_int(g, "t.u8", &i), ATTN_OK);
    CHECK(i == 200);
    CHECK_STATUS(attn_gguf_get_int(g, "t.i8", &i), ATTN_OK);
    CHECK(i == -100);
    CHECK_STATUS(attn_gguf_get_int(g, "t.u16", &i), ATTN_OK);
    CHECK(i == 60000);
    CHECK_STATUS(attn_gguf_get_int(g, "t.i16", &i), ATTN_OK);
    CHECK(i == -30000);
    CHECK_STATUS(attn_gguf_get_int(g, "t.u32", &i), ATTN_OK);
    CHECK(i == 4000000000LL);
    CHECK_STATUS(attn_gguf_get_int(g, "t.i32", &i), ATTN_OK);
    CHECK(i == -2000000000LL);
    CHECK_STATUS(attn_gguf_get_int(g, "t.bool", &i), ATTN_OK);
    CHECK(i == 1);
    CHECK_STATUS(attn_gguf_get_int(g, "t.i64", &i), ATTN_OK);
    CHECK(i == -(1LL << 40));
    /* 2^63 + 5 does not fit an int64: the typed getter says so */
    CHECK_STATUS(attn_gguf_get_int(g, "t.u64", &i), ATTN_E_FORMAT);
    attn_gguf_value v;
    CHECK_STATUS(attn_gguf_meta_find(g, "t.u64", &v), ATTN_OK);
    CHECK(v.type == ATTN_GGUF_UINT64 && v.u == (1ULL << 63) + 5);
    CHECK_STATUS(attn_gguf_get_float(g, "t.f32", &f), ATTN_OK);
    CHECK(f == 0.15625);
    CHECK_STATUS(attn_gguf_get_float(g, "t.f64", &f), ATTN_OK);
    CHECK(f == -1.0e300);
    CHECK_STATUS(attn_gguf_get_string(g, "t.str", &s, &n), ATTN_OK);
    CHECK(n == strlen("caf\xc3\xa9 \xe2\x98\x83") &&
          memcmp(s, "caf\xc3\xa9 \xe2\x98\x83", n) == 0);
    CHECK_STATUS(attn_gguf_get_int(g, "t.str", &i), ATTN_E_FORMAT);
    CHECK(has("t.str") && has("STRING"));
    CHECK_STATUS(attn_gguf_get_int(g, "no.such", &i), ATTN_E_INVALID);
    CHECK_STATUS(attn_gguf_meta_find(g, "t.strs", &v), ATTN_OK);
    CHECK(v.type == ATTN_GGUF_ARRAY && v.elem_type == ATTN_GGUF_STRING &&
          v.count == 4);
    const char *want[4] = {"a", "", "\xc3\xa9t\xc3\xa9", "<|im_end|>"};
    for (uint64_t k = 0; k < 4; k++) {
        CHECK_STATUS(attn_gguf_array_string(g, &v, k, &s, &n), ATTN_OK);
        CHECK(n == strlen(want[k]) && memcmp(s, want[k], n) == 0);
    }
    CHECK_STATUS(attn_gguf_array_string(g, &v, 4, &s, &n), ATTN_E_INVALID);
    CHECK_STATUS(attn_gguf_array_int(g, &v, 0, &i), ATTN_E_FORMAT);
    CHECK_STATUS(attn_gguf_meta_find(g, "t.ints", &v), ATTN_OK);
    int64_t ints[3];
    for (uint64_t k = 0; k < 3; k++)
        CHECK_STATUS(attn_gguf_array_int(g, &v, k, &ints[k]), ATTN_OK);
    CHECK(ints[0] == 3 && ints[1] == -1 && ints[2] == 7);

    const char *names[6] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"};
    const int types[6] = {ATTN_GGML_F32,  ATTN_GGML_F16,  ATTN_GGML_BF16,
                          ATTN_GGML_Q8_0, ATTN_GGML_Q4_0, ATTN_GGML_Q4_1};
    for (int t = 0; t < 6; t++) {
        attn_gguf_tensor gt;
        CHECK_STATUS(attn_gguf_find_tensor(g, names[t], &gt), ATTN_OK);
        char path[512];
        snprintf(path, sizeof path, DATA "%s.npy", names[t]);
        attn_npy want_arr;
        CHECK_STATUS(attn_npy_read(path, &want_arr), ATTN_OK);
        CHECK(gt.type == types[t]);
        CHECK(gt.ndim == 2 && want_arr.ndim == 2 &&
              gt.shape[0] == want_arr.shape[0] &&
              gt.shape[1] == want_arr.shape[1]);
        float *x = malloc(sizeof(float) * (size_t)gt.numel);
        CHECK_STATUS(attn_gguf_tensor_to_f32(&gt, x, gt.numel), ATTN_OK);
        CHECK_MSG(
            memcmp(x, want_arr.data, sizeof(float) * (size_t)gt.numel) == 0,
            "%s: dequantized values differ from the gguf package's", names[t]);
        /* by rows: the last row alone */
        const int64_t cols = gt.shape[1], r = gt.shape[0] - 1;
        memset(x, 0, sizeof(float) * (size_t)cols);
        CHECK_STATUS(attn_gguf_tensor_rows_f32(&gt, r, 1, x), ATTN_OK);
        CHECK(memcmp(x, (const float *)want_arr.data + r * cols,
                     sizeof(float) * (size_t)cols) == 0);
        CHECK_STATUS(attn_gguf_tensor_rows_f32(&gt, r, 2, x), ATTN_E_SHAPE);
        CHECK_STATUS(attn_gguf_tensor_to_f32(&gt, x, gt.numel - 1),
                     ATTN_E_SHAPE);
        free(x);
        attn_npy_free(&want_arr);
    }
    attn_gguf_tensor q6;
    CHECK_STATUS(attn_gguf_find_tensor(g, "q6_k", &q6), ATTN_OK);
    float y[256];
    CHECK_STATUS(attn_gguf_tensor_to_f32(&q6, y, 256), ATTN_E_UNSUPPORTED);
    CHECK(has("Q6_K") && has("q6_k"));
    CHECK_STATUS(attn_gguf_find_tensor(g, "nope", &q6), ATTN_E_INVALID);
    attn_gguf_close(g);

    /* every truncation of the real file before the end of its last tensor
     * is an error, never a crash; the writer's padding after it may go */
    FILE *fp = fopen(DATA "types.gguf", "rb");
    CHECK(fp != NULL);
    if (!fp) return;
    static unsigned char whole[1 << 16];
    size_t size = fread(whole, 1, sizeof whole, fp);
    fclose(fp);
    size_t end = 0;
    CHECK_STATUS(attn_gguf_parse(whole, size, "whole", &g), ATTN_OK);
    for (int64_t k = 0; g && k < attn_gguf_tensor_count(g); k++) {
        attn_gguf_tensor gt;
        attn_gguf_tensor_get(g, k, &gt);
        size_t e = (size_t)((const unsigned char *)gt.data - whole) + gt.nbytes;
        if (e > end) end = e;
    }
    attn_gguf_close(g);
    CHECK(end > 0 && end <= size);
    int refused = 0, kept = 0;
    for (size_t cut = 0; cut < size; cut++) {
        unsigned char *b = malloc(cut ? cut : 1);
        memcpy(b, whole, cut);
        attn_gguf *h = NULL;
        attn_status st = attn_gguf_parse(b, cut, "cut", &h);
        refused += cut < end && st != ATTN_OK;
        kept += cut >= end && st == ATTN_OK;
        attn_gguf_close(h);
        free(b);
    }
    CHECK_MSG(refused == (int)end && kept == (int)(size - end),
              "%d of %zu truncations refused, %d of %zu kept", refused, end,
              kept, size - end);
}

/* ---- hostile images ----------------------------------------------------- */

static void test_hostile(void) {
    static img m;
    /* a valid base: one Q8_0 tensor of 1 x 32 */
    header(&m, 1, 0);
    tensor(&m, "w", 32, 1, ATTN_GGML_Q8_0, 0);
    pad(&m, 32);
    memset(m.b + m.n, 0, 34);
    m.n += 34;
    CHECK_STATUS(parse(&m), ATTN_OK);

    header(&m, 0, 0);
    m.b[0] = 'X';
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("not a GGUF file"));
    header(&m, 0, 0);
    m.b[4] = 1;
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("version 1"));
    header(&m, 0, 0);
    m.b[4] = 0, m.b[7] = 3; /* version 3 written big-endian */
    CHECK_STATUS(parse(&m), ATTN_E_UNSUPPORTED);
    CHECK(has("big-endian"));

    /* counts the file cannot hold: refused before any allocation */
    header(&m, UINT64_MAX, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    header(&m, 0, (uint64_t)1 << 62);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("cannot fit"));

    /* a key string longer than the file */
    header(&m, 0, 1);
    u64(&m, 1000);
    put(&m, "abc", 3);
    m.n += 20;
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("past the end"));
    /* an unknown value type, an array of arrays, a bad bool */
    header(&m, 0, 1);
    str(&m, "k");
    u32(&m, 13);
    u64(&m, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("unknown value type 13"));
    header(&m, 0, 1);
    str(&m, "k");
    u32(&m, ATTN_GGUF_ARRAY);
    u32(&m, ATTN_GGUF_ARRAY);
    u64(&m, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("array of arrays"));
    header(&m, 0, 1);
    str(&m, "k");
    u32(&m, ATTN_GGUF_BOOL);
    put(&m, "\x02", 1);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    /* an array whose count runs past the end, of scalars and strings */
    header(&m, 0, 1);
    str(&m, "k");
    u32(&m, ATTN_GGUF_ARRAY);
    u32(&m, ATTN_GGUF_UINT64);
    u64(&m, (uint64_t)1 << 61);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    header(&m, 0, 1);
    str(&m, "k");
    u32(&m, ATTN_GGUF_ARRAY);
    u32(&m, ATTN_GGUF_STRING);
    u64(&m, (uint64_t)1 << 40);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    /* a key given twice; a key with a NUL; an empty key */
    header(&m, 0, 2);
    str(&m, "k");
    u32(&m, ATTN_GGUF_UINT8);
    put(&m, "\x01", 1);
    str(&m, "k");
    u32(&m, ATTN_GGUF_UINT8);
    put(&m, "\x01", 1);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("given twice"));
    header(&m, 0, 1);
    u64(&m, 3);
    put(&m, "a\0b", 3);
    u32(&m, ATTN_GGUF_UINT8);
    put(&m, "\x01", 1);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    /* alignment: not a power of two, or of another type */
    header(&m, 0, 1);
    str(&m, "general.alignment");
    u32(&m, ATTN_GGUF_UINT32);
    u32(&m, 24);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("general.alignment"));
    header(&m, 0, 1);
    str(&m, "general.alignment");
    u32(&m, ATTN_GGUF_UINT64);
    u64(&m, 32);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);

    /* tensors: unknown type, 0 or 5 dimensions, a zero extent, a row that
     * is not whole blocks, misaligned, past the data, overlapping, a name
     * given twice, a name too long */
    header(&m, 1, 0);
    tensor(&m, "w", 32, 1, 99, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("unknown type 99"));
    header(&m, 1, 0);
    str(&m, "w");
    u32(&m, 5);
    m.n += 64;
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("5 dimensions"));
    header(&m, 1, 0);
    tensor(&m, "w", 32, 0, ATTN_GGML_F32, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    header(&m, 1, 0);
    tensor(&m, "w", 33, 1, ATTN_GGML_Q4_0, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("whole Q4_0 blocks"));
    header(&m, 1, 0);
    tensor(&m, "w", UINT64_MAX / 2, 4, ATTN_GGML_F32, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    header(&m, 1, 0);
    tensor(&m, "w", 4, 1, ATTN_GGML_F32, 16);
    pad(&m, 32);
    m.n += 64;
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("not a multiple of the alignment"));
    header(&m, 1, 0);
    tensor(&m, "w", 64, 1, ATTN_GGML_F32, 0);
    pad(&m, 32);
    m.n += 255; /* one byte short of 64 f32 */
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("past the data section"));
    header(&m, 2, 0);
    tensor(&m, "a", 16, 1, ATTN_GGML_F32, 0);
    tensor(&m, "b", 16, 1, ATTN_GGML_F32, 32);
    pad(&m, 32);
    m.n += 128;
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("overlaps"));
    header(&m, 2, 0);
    tensor(&m, "a", 8, 1, ATTN_GGML_F32, 0);
    tensor(&m, "a", 8, 1, ATTN_GGML_F32, 32);
    pad(&m, 32);
    m.n += 64;
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    CHECK(has("given twice"));
    header(&m, 1, 0);
    tensor(&m,
           "0123456789012345678901234567890123456789012345678901234567890123"
           "4",
           8, 1, ATTN_GGML_F32, 0);
    CHECK_STATUS(parse(&m), ATTN_E_FORMAT);
    /* NaN in the data: refused on conversion, naming the tensor */
    header(&m, 1, 0);
    tensor(&m, "w", 2, 1, ATTN_GGML_F32, 0);
    pad(&m, 32);
    const float vals[2] = {1.0f, NAN};
    put(&m, vals, sizeof vals);
    attn_gguf *g = NULL;
    CHECK_STATUS(attn_gguf_parse(m.b, m.n, "img", &g), ATTN_OK);
    attn_gguf_tensor t;
    float x[2];
    CHECK_STATUS(attn_gguf_find_tensor(g, "w", &t), ATTN_OK);
    CHECK_STATUS(attn_gguf_tensor_to_f32(&t, x, 2), ATTN_E_NONFINITE);
    CHECK(has("'w'") && has("NaN"));
    attn_gguf_close(g);
    /* no file, and a folder */
    CHECK_STATUS(attn_gguf_open(DATA "missing.gguf", &g), ATTN_E_IO);
    CHECK(g == NULL);
    CHECK_STATUS(attn_gguf_open(DATA, &g), ATTN_E_IO);
}

int main(void) {
    test_fixture();
    test_hostile();
    return check_done("test_gguf");
}
