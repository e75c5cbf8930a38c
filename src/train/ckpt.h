/* Internal: the framing both kinds of training checkpoint share
 * (docs/checkpoint-format.md), attn_trainer's (checkpoint.c, ATTNCKPT) and
 * attn_gen_trainer's (gentrainer.c, ATTNGENM). Magic, version, the count
 * of configuration words, the words, the step, the data RNG, the parameter
 * count, the parameters and both AdamW moments, the CRC32 of every byte
 * before it. A kind names its magic, its words and what its configuration
 * allows; this file writes and checks the rest. Not installed. */
#ifndef ATTN_CKPT_H
#define ATTN_CKPT_H

#include "train.h"

#include <limits.h>
#include <string.h>

#define ATTN__CKPT_VERSION 1u
#define ATTN__CKPT_MAX_FIELDS 64
/* Beyond the parameters (whose size the file's length bounds), the
 * training buffers a checkpoint's configuration asks for: refused above
 * this before anything is allocated. */
#define ATTN__CKPT_MAX_WORK_BYTES ((uint64_t)1 << 30)

/* One kind of checkpoint. */
typedef struct {
    const char *magic;  /* 8 bytes, no NUL                           */
    int nfields;        /* configuration words, <= MAX_FIELDS         */
    const char *not_it; /* what a file of an unknown magic is told    */
    const char *other_magic, *other_it; /* the sibling kind's magic and
                                           what its files are told     */
} attn__ckpt_kind;

/* The file's bytes up to the parameters: magic, version, nfields, words,
 * step, rng, n. */
static inline size_t attn__ckpt_head_bytes(const attn__ckpt_kind *k) {
    return 8 + 4 + 4 + 8 * (size_t)k->nfields + 8 + 32 + 8;
}

/* Writes the checkpoint of state s with configuration words w
 * (k->nfields of them) to path, atomically (attn__write_atomic). */
attn_status attn__ckpt_save(const attn__ckpt_kind *k, const uint64_t *w,
                            const attn__train_state *s, const char *path);

/* A checkpoint read and checked by attn__ckpt_read. */
typedef struct {
    unsigned char *buf; /* the whole file (attn__ckpt_image_free)   */
    size_t size;
    uint64_t count; /* parameters, consistent with size         */
    uint64_t w[ATTN__CKPT_MAX_FIELDS];
} attn__ckpt_image;

/* Reads path and checks its framing: magic (k->other_magic is named as
 * what it is), version, word count, a length that matches its parameter
 * count (truncated or padded), the CRC. The words land in img->w. Nothing
 * is allocated beyond the file's own size. On failure img holds nothing. */
attn_status attn__ckpt_read(const attn__ckpt_kind *k, const char *path,
                            attn__ckpt_image *img);
void attn__ckpt_image_free(attn__ckpt_image *img);

/* The state behind the words into s (created by the kind for the words'
 * configuration, s->n == img->count): the step (a negative one is
 * refused), the data RNG, the parameters and moments. */
attn_status attn__ckpt_restore(const attn__ckpt_kind *k,
                               const attn__ckpt_image *img, const char *path,
                               attn__train_state *s);

/* ATTN_E_FORMAT "path: its configuration is invalid: <the last error>". */
attn_status attn__ckpt_invalid(const char *path);
/* ATTN_E_FORMAT naming both counts unless need >= 1 and need == count. */
attn_status attn__ckpt_count_check(const char *path, uint64_t count,
                                   int64_t need);

/* A word read into an int (or enum) field must be an int: a cast would
 * load garbage in the upper half (0x700000000) as a valid value. */
static inline int attn__ckpt_fits_int(uint64_t w) {
    const int64_t v = (int64_t)w;
    return v >= INT_MIN && v <= INT_MAX;
}
static inline uint64_t attn__ckpt_dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}
static inline double attn__ckpt_bitsd(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* A kind's list of its configuration words, in the file's order, is a run
 * of these with w (the words), k (the next index), to_file (1: field ->
 * word, 0: word -> field) and bad (the first int or enum word that does
 * not fit, or -1) in scope. Integers go as two's complement, doubles by
 * bit pattern. */
#define ATTN__CKPT_NOTE_BAD                                                    \
    (bad < 0 && !attn__ckpt_fits_int(w[k]) ? (void)(bad = k) : (void)0)
#define ATTN__CKPT_I64(x)                                                      \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (void)((x) = (int64_t)w[k])),                                   \
        k++
#define ATTN__CKPT_U64(x)                                                      \
    (to_file ? (void)(w[k] = (x)) : (void)((x) = w[k])), k++
#define ATTN__CKPT_ENUM(x, T)                                                  \
    (to_file ? (void)(w[k] = (uint64_t)(int64_t)(x))                           \
             : (ATTN__CKPT_NOTE_BAD, (void)((x) = (T)(int64_t)w[k]))),         \
        k++
#define ATTN__CKPT_INT(x) ATTN__CKPT_ENUM(x, int)
#define ATTN__CKPT_DBL(x)                                                      \
    (to_file ? (void)(w[k] = attn__ckpt_dbits(x))                              \
             : (void)((x) = attn__ckpt_bitsd(w[k]))),                          \
        k++

/* The runs of words both kinds hold: an encoder's configuration (11
 * words) and AdamW's (9, no int among them), from w[k]; they return k past
 * them, the encoder's noting the first int word that does not fit in *bad
 * as the macros above do. */
int attn__ckpt_encoder_words(attn_encoder_config *e, uint64_t *w, int k,
                             int to_file, int *bad);
int attn__ckpt_adamw_words(attn_adamw_config *o, uint64_t *w, int k,
                           int to_file);

#endif
