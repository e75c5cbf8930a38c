/* Internal pieces of the byte-level BPE tokenizer (src/models): the
 * tokenizer's tables, shared by bpe_build.c (made from tokenizer.json or a
 * GGUF-style vocabulary), bpe.c (encoding, decoding) and the generated
 * Unicode classes of bpe_tables.c. Not installed. */
#ifndef ATTN_BPE_H
#define ATTN_BPE_H

#include "../io/json.h" /* attn__put_utf8, attn__escape_bytes */
#include "attn_tokenizer.h"
#include "internal.h"
#include "unicode.h"

/* Unicode classes as the patterns read them. */
enum {
    ATTN__BPE_OTHER = 0,
    ATTN__BPE_LETTER = 1, /* \p{L}                                        */
    ATTN__BPE_NUMBER = 2, /* \p{N}                                        */
    ATTN__BPE_SPACE = 3   /* \s: White_Space                              */
};

typedef attn__cp_run attn__bpe_run;

extern const attn__bpe_run attn__bpe_runs[];
extern const int attn__bpe_nruns;

/* NFC tables: combining classes (runs), full canonical decompositions
 * (cp -> pool[off .. off + len)), primary composites (a, b) -> c sorted
 * by (a, b). */
typedef struct {
    uint32_t cp;
    uint16_t off;
    uint8_t len;
} attn__bpe_decomp;

typedef struct {
    uint32_t a, b, c;
} attn__bpe_pair3;

extern const attn__bpe_run attn__bpe_ccc[];
extern const int attn__bpe_nccc;
extern const uint32_t attn__bpe_nfd_pool[];
extern const attn__bpe_decomp attn__bpe_nfd[];
extern const int attn__bpe_nnfd;
extern const attn__bpe_pair3 attn__bpe_nfc[];
extern const int attn__bpe_nnfc;

/* NFC of s[0..n) into out (room for attn__bpe_nfc_cap(n) bytes); bytes
 * that are not UTF-8 pass through as they are. scratch holds 2 * n + 4
 * uint32_t code points. Returns the length written, SIZE_MAX when out of
 * memory (the message set). */
size_t attn__bpe_nfc_cap(size_t n);
size_t attn__bpe_nfc_apply(const unsigned char *s, size_t n, char *out,
                           uint32_t *scratch);
/* 1 if s[0..n) may change under NFC (some byte starts a code point at or
 * above U+0300). */
int attn__bpe_nfc_maybe(const unsigned char *s, size_t n);

/* The pre-tokenizers (the patterns of attn_tokenizer.h). */
enum {
    ATTN__PRE_NONE = 0, /* the whole text is one word                  */
    ATTN__PRE_GPT2,
    ATTN__PRE_SMOLLM,
    ATTN__PRE_LLAMA3,
    ATTN__PRE_QWEN2
};

/* Longest added-token content accepted: matching costs up to this much
 * per byte of text. */
#define ATTN__BPE_MAX_ADDED 4096

typedef struct {
    char *str;     /* the token as written (NUL-terminated), NULL if none */
    char *vstr;    /* its string in the model's vocabulary, or NULL       */
    char *bytes;   /* what it decodes to                                  */
    uint32_t blen; /* bytes' length                                       */
    uint8_t special;
} attn__bpe_tok;

/* A merge: the pair (left, right) of ids, its rank and its result. */
typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty slot           */
    int32_t rank;
    int32_t id;
} attn__bpe_merge;

/* A node of the added tokens' trie; children are in the edge hash. */
typedef struct {
    int32_t id; /* token ending here, -1 if none                         */
    uint8_t special, lstrip, rstrip;
} attn__bpe_node;

typedef struct {
    uint64_t key; /* node << 8 | byte, UINT64_MAX: empty                  */
    int32_t child;
} attn__bpe_edge;

struct attn_bpe {
    int64_t n; /* ids in [0, n)                                       */
    attn__bpe_tok *tok;
    char *arena; /* the tokens' strings and bytes                      */
    /* model vocabulary: string -> id (open addressing; -1 empty)        */
    int32_t *vslot;
    uint64_t vmask;
    int32_t byte_id[256]; /* the symbol of each byte, -1 if none      */
    attn__bpe_merge *merge;
    uint64_t mmask;
    /* added tokens                                                      */
    attn__bpe_node *node;
    int32_t nnodes;
    attn__bpe_edge *edge;
    uint64_t emask;
    uint8_t first[256]; /* 1: some added token starts with this byte */
    int pre;
    int nfc; /* the normalizer: NFC, else none                   */
    int add_prefix_space;
    int ignore_merges;
    int32_t unk; /* -1: bytes missing from the vocabulary are dropped */
    int fuse_unk;
    int32_t prefix[4], suffix[4]; /* post-processor tokens            */
    int nprefix, nsuffix;
    uint32_t max_blen; /* the longest token's bytes                  */
};

/* Hashes shared by the builder and the encoder. */
static inline uint64_t attn__bpe_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The vocabulary id of the n bytes at s (a token as written), or -1. */
int32_t attn__bpe_vocab_id(const attn_bpe *t, const char *s, size_t n);
/* The merge of the pair (a, b), or NULL. */
static inline const attn__bpe_merge *
attn__bpe_find_merge(const attn_bpe *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = attn__splitmix64_final(key) & t->mmask;;
         i = (i + 1) & t->mmask) {
        if (t->merge[i].key == key) return &t->merge[i];
        if (t->merge[i].key == UINT64_MAX) return NULL;
    }
}
/* The child of trie node nd by byte c, or -1. */
int32_t attn__bpe_child(const attn_bpe *t, int32_t nd, unsigned char c);

/* The byte-level alphabet: byte b is written as code point
 * attn__bpe_byte_cp(b); attn__bpe_cp_byte(cp) is the reverse (-1 for a
 * code point outside the alphabet). */
uint32_t attn__bpe_byte_cp(unsigned b);
int attn__bpe_cp_byte(uint32_t cp);

#endif
