/* attn_gguf.h: GGUF files, the single-file format of llama.cpp models:
 * metadata (the architecture's numbers, the tokenizer's vocabulary and
 * merges, the chat template) and tensors, quantized or not. The reader
 * checks the whole layout before anything uses it and turns the tensor
 * types attn reads into f32.
 *
 * attn_gguf_open maps a file; attn_gguf_parse reads an image in memory.
 *
 * Example: a file's architecture and the f32 values of one tensor.
 *
 *     unsigned char file[136] = {
 *         'G', 'G', 'U', 'F', 3, 0, 0, 0, // magic, version 3
 *         1, 0, 0, 0, 0, 0, 0, 0,         // one tensor
 *         1, 0, 0, 0, 0, 0, 0, 0,         // one metadata entry:
 *         20, 0, 0, 0, 0, 0, 0, 0, 'g', 'e', 'n', 'e', 'r', 'a', 'l', '.',
 *         'a', 'r', 'c', 'h', 'i', 't', 'e', 'c', 't', 'u', 'r', 'e',
 *         8, 0, 0, 0,                     // a string,
 *         5, 0, 0, 0, 0, 0, 0, 0, 'l', 'l', 'a', 'm', 'a',
 *         1, 0, 0, 0, 0, 0, 0, 0, 'w',    // tensor "w":
 *         1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, // 1 dimension of 2,
 *         0, 0, 0, 0,                     // F32,
 *         0, 0, 0, 0, 0, 0, 0, 0};        // at offset 0 of the data
 *     const float w[2] = {0.5f, -2.0f};
 *     memcpy(file + 128, w, sizeof w); // the data: at 102 rounded up to 32
 *     attn_gguf *g;
 *     if (attn_gguf_parse(file, sizeof file, "example", &g)) {
 *         fprintf(stderr, "%s\n", attn_last_error());
 *         return 1;
 *     }
 *     const char *arch;
 *     size_t n;
 *     attn_gguf_tensor t;
 *     float x[2];
 *     if (attn_gguf_get_string(g, "general.architecture", &arch, &n) ||
 *         attn_gguf_find_tensor(g, "w", &t) ||
 *         attn_gguf_tensor_to_f32(&t, x, t.numel))
 *         return 1;
 *     printf("%.*s: w = [%g, %g]\n", (int)n, arch, x[0], x[1]);
 *     attn_gguf_close(g);
 *     return n == 5 && x[1] == -2.0f ? 0 : 1;
 */
#ifndef ATTN_GGUF_H
#define ATTN_GGUF_H

#include "attn.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Layout (little-endian, versions 2 and 3): "GGUF", u32 version, u64
 * tensor count, u64 metadata count; then each metadata entry (a string
 * key, a u32 value type, the value), each tensor's description (a string
 * name, u32 dimension count 1..4, u64 extents fastest first, u32 type,
 * u64 offset), padding to the alignment (metadata general.alignment, a
 * power of two, default 32), and the tensors' data at their offsets from
 * there. A string is a u64 byte count and the bytes (no NUL); an array is
 * a u32 element type, a u64 count and the elements.
 *
 * The reader refuses (ATTN_E_FORMAT, naming the entry or tensor and the
 * numbers) a wrong magic or version, counts that the file's bytes cannot
 * hold, a string or array past the end, a key or name given twice, an
 * unknown value type, an array of arrays, an alignment that is not a
 * power of two, a tensor with 0 or more than 4 dimensions or an extent of
 * 0, an unknown tensor type, a first extent that is not a whole number of
 * the type's blocks, an offset off the alignment, and data past the end of
 * the file or overlapping another tensor. Memory beyond the mapped file is
 * a small multiple of the number of entries, which the file's size bounds.
 */

typedef struct attn_gguf attn_gguf;

/* Metadata value types (the format's numbers). */
typedef enum {
    ATTN_GGUF_UINT8 = 0,
    ATTN_GGUF_INT8 = 1,
    ATTN_GGUF_UINT16 = 2,
    ATTN_GGUF_INT16 = 3,
    ATTN_GGUF_UINT32 = 4,
    ATTN_GGUF_INT32 = 5,
    ATTN_GGUF_FLOAT32 = 6,
    ATTN_GGUF_BOOL = 7,
    ATTN_GGUF_STRING = 8,
    ATTN_GGUF_ARRAY = 9,
    ATTN_GGUF_UINT64 = 10,
    ATTN_GGUF_INT64 = 11,
    ATTN_GGUF_FLOAT64 = 12
} attn_gguf_type;

/* Tensor types attn turns into f32 (the format's numbers); the others
 * the format defines are read as layout and refused by name on
 * conversion. */
#define ATTN_GGML_F32 0
#define ATTN_GGML_F16 1
#define ATTN_GGML_Q4_0 2
#define ATTN_GGML_Q4_1 3
#define ATTN_GGML_Q8_0 8
#define ATTN_GGML_BF16 30

/* One metadata value. A scalar is in i (integers, bool), u (UINT64) or f
 * (FLOAT32, FLOAT64); a string in str / len (not NUL-terminated, pointing
 * into the file); an array has elem_type and count (read its elements
 * with attn_gguf_array_*). */
typedef struct {
    const char *key; /* NUL-terminated copy, owned by the file object   */
    attn_gguf_type type;
    int64_t i;
    uint64_t u;
    double f;
    const char *str;
    size_t len;
    attn_gguf_type elem_type;
    uint64_t count;
} attn_gguf_value;

typedef struct {
    const char *name;      /* NUL-terminated copy, owned by the file object   */
    int type;              /* ATTN_GGML_*, or another of the format's types   */
    const char *type_name; /* "Q4_1", ...                               */
    int ndim;              /* 1 .. 4                                     */
    int64_t shape[4];      /* row-major: shape[ndim - 1] is the fastest axis */
    int64_t numel;
    const void *data; /* nbytes at the tensor's offset, in the mapping  */
    size_t nbytes;
} attn_gguf_tensor;

/* Opens and checks path (memory-mapped, read-only); *out on success, NULL
 * on failure. ATTN_E_IO if it cannot be opened (not a regular file...). */
ATTN_API attn_status attn_gguf_open(const char *path, attn_gguf **out);
/* The same checks on size bytes at buf, which must stay valid until close
 * (the object points into it). label names the buffer in messages. */
ATTN_API attn_status attn_gguf_parse(const void *buf, size_t size,
                                     const char *label, attn_gguf **out);
/* Frees the object (and unmaps the file). NULL is fine. */
ATTN_API void attn_gguf_close(attn_gguf *g);

/* The format version (2 or 3). */
ATTN_API int attn_gguf_version(const attn_gguf *g);
/* Metadata: the count, entry i in file order, or the entry called key
 * (ATTN_E_INVALID naming it when absent). */
ATTN_API int64_t attn_gguf_meta_count(const attn_gguf *g);
ATTN_API attn_status attn_gguf_meta_get(const attn_gguf *g, int64_t i,
                                        attn_gguf_value *v);
ATTN_API attn_status attn_gguf_meta_find(const attn_gguf *g, const char *key,
                                         attn_gguf_value *v);
/* Typed look-ups: ATTN_E_INVALID when absent, ATTN_E_FORMAT naming the
 * key when the value has another type (any integer type for get_int when
 * it fits in int64; FLOAT32 or FLOAT64 for get_float). */
ATTN_API attn_status attn_gguf_get_string(const attn_gguf *g, const char *key,
                                          const char **str, size_t *len);
ATTN_API attn_status attn_gguf_get_int(const attn_gguf *g, const char *key,
                                       int64_t *x);
ATTN_API attn_status attn_gguf_get_float(const attn_gguf *g, const char *key,
                                         double *x);
/* Element i of an array value: a string (pointer into the file, len
 * bytes), an integer, or a float. ATTN_E_INVALID for i out of range,
 * ATTN_E_FORMAT when the elements have another type. */
ATTN_API attn_status attn_gguf_array_string(const attn_gguf *g,
                                            const attn_gguf_value *v,
                                            uint64_t i, const char **str,
                                            size_t *len);
ATTN_API attn_status attn_gguf_array_int(const attn_gguf *g,
                                         const attn_gguf_value *v, uint64_t i,
                                         int64_t *x);
ATTN_API attn_status attn_gguf_array_float(const attn_gguf *g,
                                           const attn_gguf_value *v, uint64_t i,
                                           double *x);

/* Tensors: the count, tensor i in file order, or the one called name. */
ATTN_API int64_t attn_gguf_tensor_count(const attn_gguf *g);
ATTN_API attn_status attn_gguf_tensor_get(const attn_gguf *g, int64_t i,
                                          attn_gguf_tensor *t);
ATTN_API attn_status attn_gguf_find_tensor(const attn_gguf *g, const char *name,
                                           attn_gguf_tensor *t);
/* The tensor's n = t->numel values as f32 at dst (overwritten), row-major
 * as shape says. F32, F16, BF16 exactly; Q8_0, Q4_0 and Q4_1 blocks as
 * the format defines them (block scale d and minimum m as f16; values
 * d * (q - 8) for Q4_0, d * q + m for Q4_1, d * q for Q8_0, each product
 * and sum rounded to f32). Other types: ATTN_E_UNSUPPORTED naming them;
 * ATTN_E_SHAPE when n differs; ATTN_E_NONFINITE naming the block when a
 * scale or value is NaN or infinite. */
ATTN_API attn_status attn_gguf_tensor_to_f32(const attn_gguf_tensor *t,
                                             float *dst, int64_t n);
/* Rows r0 .. r0 + nrows - 1 of a tensor seen as (numel / shape[ndim-1])
 * rows of shape[ndim-1] values, as f32 at dst: what a matrix-vector
 * product needs without converting the whole tensor. */
ATTN_API attn_status attn_gguf_tensor_rows_f32(const attn_gguf_tensor *t,
                                               int64_t r0, int64_t nrows,
                                               float *dst);

#ifdef __cplusplus
}
#endif

#endif
