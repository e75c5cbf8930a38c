/* The one description of a byte-level BPE tokenizer that tokenizer.json
 * (bpe_json.c) and the GGUF-style arrays (bpe_build.c) are read into, and
 * the builder that checks it and makes the tables. Strings point into the
 * caller's memory (copied by the builder). Not installed. */
#ifndef ATTN_BPE_SPEC_H
#define ATTN_BPE_SPEC_H

#include "bpe.h"

typedef struct {
    const char *str; /* valid UTF-8, NUL-terminated                    */
    size_t len;
    int32_t id;
} attn__bpe_entry;

typedef struct {
    attn__bpe_entry e;
    uint8_t special, lstrip, rstrip;
} attn__bpe_added;

typedef struct {
    const char *a;
    size_t alen;
    const char *b;
    size_t blen;
} attn__bpe_pair;

typedef struct {
    const char *label; /* names the source in messages                 */
    int64_t nvocab;
    attn__bpe_entry *vocab;
    int64_t nmerges;
    attn__bpe_pair *merges; /* rank = index                           */
    int64_t nadded;
    attn__bpe_added *added;
    size_t max_len; /* the longest token or merge pair (alen + blen) */
    int pre, nfc, add_prefix_space, ignore_merges, fuse_unk;
    const char *unk; /* unknown token by name (unk_len > 0) ...     */
    size_t unk_len;
    int32_t unk_id; /* ... or by id (-1: none)                     */
    int64_t prefix[4], suffix[4];
    int nprefix, nsuffix;
} attn__bpe_spec;

/* Checks sp and makes the tokenizer (*out NULL on failure). */
attn_status attn__bpe_build(const attn__bpe_spec *sp, attn_bpe **out);
/* ATTN__PRE_* of a GGUF pre-tokenizer name, or -1. */
int attn__bpe_pre_by_name(const char *name);
/* Length of the valid UTF-8 prefix of s[0..n). */
size_t attn__utf8_check(const char *s, size_t n);

#endif
