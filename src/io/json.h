/* A small, strict JSON parser for the headers and configs of pretrained
 * models (safetensors headers, config.json): RFC 8259 syntax, UTF-8
 * checked, \u escapes decoded (surrogate pairs too; \u0000 refused so that
 * every string is a C string), nesting limited, every failure a message
 * with the byte offset. The result is a tree of nodes in one array; object
 * members keep the file's order (duplicate keys are the caller's to
 * refuse). Not installed. */
#ifndef ATTN_JSON_H
#define ATTN_JSON_H

#include "internal.h"

typedef enum {
    ATTN__JSON_NULL,
    ATTN__JSON_BOOL,
    ATTN__JSON_NUM,
    ATTN__JSON_STR,
    ATTN__JSON_ARR,
    ATTN__JSON_OBJ
} attn__json_kind;

/* One value: 40 bytes (a hostile text of "[0,0,0,..." makes a node per
 * two bytes). The fields in the union are those of the node's kind. */
typedef struct {
    const char *key; /* member name inside an object, else NULL          */
    union {
        const char *str; /* ATTN__JSON_STR: the decoded text             */
        struct {
            double num;  /* ATTN__JSON_NUM (and BOOL: 0 or 1)            */
            int64_t i64; /* its value when is_int                        */
        };
        struct {
            int32_t child; /* ARR / OBJ: first child, -1 if none         */
            int32_t count; /* ARR / OBJ: children                        */
        };
    };
    int32_t next;   /* next sibling, -1 if last                          */
    uint32_t pos;   /* byte offset of the value in the text              */
    uint8_t kind;   /* attn__json_kind                                   */
    uint8_t is_int; /* NUM written as an integer that fits in int64      */
} attn__json_node;

typedef struct {
    attn__json_node *nodes; /* nodes[0] is the root                        */
    int64_t n;
    char *arena; /* the decoded strings                         */
} attn__json;

/* What a reader expects, refused past it while parsing (before the tree
 * grows): 0 in a field means no limit beyond the parser's own. */
typedef struct {
    int64_t max_nodes; /* values in the whole text                      */
    int64_t max_array; /* elements of any one array                     */
    int max_depth;     /* nesting (the root is depth 0); at most 64     */
} attn__json_limits;

#define ATTN__JSON_MAX_DEPTH 64

/* Parses len bytes of text (no NUL needed); trailing whitespace is allowed,
 * anything else after the value is not. label names the text in messages
 * ("model.safetensors header"). ATTN_E_FORMAT or ATTN_E_NOMEM; on failure
 * *j is zeroed. */
attn_status attn__json_parse(const char *text, size_t len, const char *label,
                             attn__json *j);
/* The same within limits (NULL: none); texts past 4 GiB are refused. */
attn_status attn__json_parse_lim(const char *text, size_t len,
                                 const char *label,
                                 const attn__json_limits *lim, attn__json *j);
void attn__json_free(attn__json *j);

/* Member key of object node obj (first match), or NULL. */
const attn__json_node *attn__json_get(const attn__json *j,
                                      const attn__json_node *obj,
                                      const char *key);

/* Writes s (up to n bytes, stopping at a NUL) into out (cap bytes, NUL-
 * terminated, cut with "..." if too long) with bytes outside printable
 * ASCII and backslashes written as \xNN, for messages that quote input.
 * Returns out. */
char *attn__escape_bytes(const char *s, size_t n, char *out, size_t cap);

/* Code point cp (< 0x110000) as UTF-8 at o (room for 4 bytes); returns
 * the bytes written. The JSON reader and the WordPiece tokenizer share it. */
size_t attn__put_utf8(char *o, uint32_t cp);

#endif
