/* The safetensors reader: valid files (three float dtypes, scalars, zero
 * sizes, Unicode names, padding) read back exactly; every hostile kind
 * (truncated, header length past the file, offsets out of range, reversed,
 * overlapping or leaving holes, unknown dtype, shape/size mismatch, shape
 * overflow, bad JSON, duplicates, deep nesting) refused with its status and
 * a message that names the tensor and escapes what is not printable; every
 * prefix of a valid file refused without an over-read (the sanitizer build
 * watches). The seed corpus of tests/fuzz/ is checked here by its names:
 * good_* must load, bad_* must not. */
#include "attn_pretrained.h"
#include "check.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char buf[1 << 16];

/* header text + data into buf; returns the size. */
static size_t build(const char *header, const void *data, size_t nd) {
    size_t hl = strlen(header);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (nd) memcpy(buf + 8 + hl, data, nd);
    return 8 + hl + nd;
}

static attn_status parse(size_t n) {
    attn_safetensors *st = NULL;
    attn_status s = attn_safetensors_parse(buf, n, "t.safetensors", &st);
    if (s == ATTN_OK)
        CHECK(st != NULL);
    else
        CHECK(st == NULL);
    attn_safetensors_close(st);
    return s;
}

static int has(const char *needle) {
    int ok = strstr(attn_last_error(), needle) != NULL;
    if (!ok)
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", attn_last_error(),
                needle);
    return ok;
}

static void good_file(void) {
    float a[4] = {1, -2, 3.5f, 4};
    unsigned char d[24];
    memcpy(d, a, 16);
    uint16_t h[3] = {attn_f32_to_f16(0.5f), attn_f32_to_f16(-1),
                     attn_f32_to_f16(2)};
    memcpy(d + 16, h, 6);
    uint16_t bf = attn_f32_to_bf16(1.0f);
    memcpy(d + 22, &bf, 2);
    size_t n = build(
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"c\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[22,24]}}   ",
        d, sizeof d);
    attn_safetensors *st;
    CHECK_STATUS(attn_safetensors_parse(buf, n, "good", &st), ATTN_OK);
    if (!st) return;
    CHECK(attn_safetensors_count(st) == 3);
    attn_st_tensor t;
    CHECK_STATUS(attn_safetensors_get(st, 0, &t), ATTN_OK);
    CHECK(strcmp(t.name, "a") == 0 && t.ndim == 2 && t.shape[0] == 2 &&
          t.shape[1] == 2 && t.numel == 4 && t.dtype == ATTN_F32 &&
          t.nbytes == 16);
    float f[4];
    CHECK_STATUS(attn_st_tensor_to_f32(&t, f, 4), ATTN_OK);
    CHECK(f[0] == 1 && f[1] == -2 && f[2] == 3.5f && f[3] == 4);
    CHECK_STATUS(attn_st_tensor_to_f32(&t, f, 3), ATTN_E_SHAPE);
    CHECK_STATUS(attn_safetensors_find(st, "b", &t), ATTN_OK);
    CHECK(t.dtype == ATTN_F16 && t.numel == 3);
    CHECK_STATUS(attn_st_tensor_to_f32(&t, f, 3), ATTN_OK);
    CHECK(f[0] == 0.5f && f[1] == -1 && f[2] == 2);
    CHECK_STATUS(attn_safetensors_find(st, "c", &t), ATTN_OK);
    CHECK(t.ndim == 0 && t.numel == 1 && t.dtype == ATTN_BF16);
    CHECK_STATUS(attn_st_tensor_to_f32(&t, f, 1), ATTN_OK);
    CHECK(f[0] == 1.0f);
    CHECK_STATUS(attn_safetensors_find(st, "zz\x01", &t), ATTN_E_INVALID);
    CHECK(has("zz\\x01"));
    CHECK_STATUS(attn_safetensors_get(st, 3, &t), ATTN_E_INVALID);
    CHECK_STATUS(attn_safetensors_get(st, -1, &t), ATTN_E_INVALID);
    attn_safetensors_close(st);

    /* every prefix of it is refused, none over-reads */
    unsigned char copy[sizeof buf];
    memcpy(copy, buf, n);
    int refused = 0;
    for (size_t k = 0; k < n; k++) {
        unsigned char *p = malloc(k ? k : 1);
        memcpy(p, copy, k);
        attn_safetensors *s2 = NULL;
        refused += attn_safetensors_parse(p, k, "prefix", &s2) != ATTN_OK;
        attn_safetensors_close(s2);
        free(p);
    }
    CHECK(refused == (int)n);
    /* integer tensors are not converted */
    int64_t iv = 5;
    n = build(
        "{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", &iv,
        8);
    CHECK_STATUS(attn_safetensors_parse(buf, n, "int", &st), ATTN_OK);
    if (st) {
        CHECK_STATUS(attn_safetensors_find(st, "i", &t), ATTN_OK);
        CHECK(t.dtype == ATTN_I64 && memcmp(t.data, &iv, 8) == 0);
        CHECK_STATUS(attn_st_tensor_to_f32(&t, f, 1), ATTN_E_DTYPE);
        attn_safetensors_close(st);
    }
}

static void hostile(void) {
    float d[4] = {1, 2, 3, 4};
    /* header length past the file */
    size_t n = build("{}", NULL, 0);
    buf[0] = 200;
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("header length 200 reaches past the end of the file (10 bytes"));
    for (int i = 0; i < 8; i++) buf[i] = 0xff;
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK_STATUS(parse(7), ATTN_E_FORMAT);
    CHECK(has("too short"));
    /* a huge header length within a huge claimed file is capped */
    n = build("[]", NULL, 0);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("does not start with '{'"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", d,
        8);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(
        has("tensor 'a': data_offsets [0, 16] reach past the 8 bytes of data"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", d,
        8);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("end before they begin"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        d, 12);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("tensor 'b' (bytes 4..12) overlaps tensor 'a' (ending at 8)"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", d,
        8);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("data bytes 0..4 before tensor 'a' belong to no tensor"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d,
        8);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("trailing bytes"));
    n = build(
        "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", d,
        4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("unknown dtype 'F33'"));
    n = build("{\"a\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
              d, 4);
    CHECK_STATUS(parse(n), ATTN_E_UNSUPPORTED);
    CHECK(has("dtype I8"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d,
        8);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has(
        "shape holds 3 elements of F32 (4 bytes each) but data_offsets [0, 8] give 8 bytes"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,4]}}",
        d, 4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("overflows"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551620]}}",
        d, 4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", d,
        4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", d,
        4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
        d, 4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    /* refused while parsing: a header holds no longer array */
    CHECK(has("an array of more than 8 elements"));
    n = build(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
        d, 4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("unknown key 'x'"));
    n = build("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", d, 4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("lacks 'data_offsets'"));
    n = build("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              d, 8);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("tensor 'a' is given twice"));
    n = build("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
              d, 4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("malformed JSON"));
    n = build("{\"__metadata__\":{\"k\":1}}", NULL, 0);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("__metadata__ entry 'k' is not a string"));
    /* non-printable bytes of names and dtypes are escaped in messages */
    n = build(
        "{\"\\u0001a\\u007f\":{\"dtype\":\"X\\u0002\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        d, 4);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("tensor '\\x01a\\x7f': unknown dtype 'X\\x02'"));
    for (const char *m = attn_last_error(); *m; m++)
        CHECK((unsigned char)*m >= 0x20 && (unsigned char)*m < 0x7f);
    /* invalid UTF-8, control characters, NUL escapes, deep nesting */
    n = build("{\"\xff\":{}}", NULL, 0);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    n = build("{\"a\x01\":{}}", NULL, 0);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    n = build("{\"a\\u0000b\":{}}", NULL, 0);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    n = build("{\"a\\ud800\":{}}", NULL, 0);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    char deep[600] = "{\"__metadata__\":";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    for (int i = 0; i < 100; i++) strcat(deep, "]");
    strcat(deep, "}");
    n = build(deep, NULL, 0);
    CHECK_STATUS(parse(n), ATTN_E_FORMAT);
    CHECK(has("nesting deeper than 3")); /* name: {shape: [n]} at most */
    /* NULL arguments */
    attn_safetensors *st = (attn_safetensors *)1;
    CHECK_STATUS(attn_safetensors_parse(NULL, 5, "x", &st), ATTN_E_INVALID);
    CHECK(st == NULL);
    CHECK_STATUS(attn_safetensors_parse(buf, 5, "x", NULL), ATTN_E_INVALID);
    CHECK(attn_safetensors_count(NULL) == 0);
    attn_safetensors_close(NULL);
}

static void files(void) {
    char dir[] = "/tmp/attn_st_XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[128];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float d[2] = {7, 8};
    size_t n = build(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d,
        8);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    attn_safetensors *st;
    CHECK_STATUS(attn_safetensors_open(path, &st), ATTN_OK);
    attn_st_tensor t;
    float got[2] = {0, 0};
    if (st && !attn_safetensors_find(st, "w", &t))
        attn_st_tensor_to_f32(&t, got, 2);
    CHECK(got[0] == 7 && got[1] == 8);
    attn_safetensors_close(st);
    f = fopen(path, "wb");
    fwrite(buf, 1, n - 1, f); /* truncated on disk */
    fclose(f);
    CHECK_STATUS(attn_safetensors_open(path, &st), ATTN_E_FORMAT);
    CHECK(has("m.safetensors"));
    remove(path);
    CHECK_STATUS(attn_safetensors_open(path, &st), ATTN_E_IO);
    CHECK_STATUS(attn_safetensors_open(dir, &st), ATTN_E_IO);
    rmdir(dir);
}

/* The seed corpus: good_* load, bad_* are refused. */
static void corpus(void) {
    const char *dir = ATTN_SOURCE_DIR "/tests/fuzz/corpus/safetensors";
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        attn_safetensors *st;
        attn_status s = attn_safetensors_open(p, &st);
        int want_ok = strncmp(e->d_name, "good_", 5) == 0;
        CHECK_MSG(want_ok ? s == ATTN_OK
                          : (s == ATTN_E_FORMAT || s == ATTN_E_UNSUPPORTED),
                  "%s: %s (%s)", e->d_name, attn_strerror(s),
                  attn_last_error());
        attn_safetensors_close(st);
        seen++;
    }
    closedir(d);
    CHECK(seen >= 10);
}

int main(void) {
    good_file();
    hostile();
    files();
    corpus();
    return check_done("test_safetensors");
}
