/* Internal pieces of the WordPiece tokenizer (src/models): the generated
 * Unicode tables (wordpiece_tables.c) and their classes. Not installed. */
#ifndef ATTN_WORDPIECE_H
#define ATTN_WORDPIECE_H

#include "internal.h"
#include "unicode.h"

/* Class of a code point for BERT's basic tokenization. */
enum {
    ATTN__WP_PLAIN = 0,  /* part of a word                               */
    ATTN__WP_REMOVE = 1, /* control, format, unassigned, U+FFFD: dropped  */
    ATTN__WP_SPACE = 2,  /* White_Space: ends a word                     */
    ATTN__WP_PUNCT = 3,  /* ASCII punctuation or category P*: own token  */
    ATTN__WP_CJK = 4     /* CJK ideograph: own token                     */
};

typedef attn__cp_run attn__wp_run;

/* c -> lower(remove_Mn(NFD(c))) as UTF-8 (len bytes, may be 0). */
typedef struct {
    uint32_t cp;
    uint8_t len;
    const char *utf8;
} attn__wp_map;

extern const attn__wp_run attn__wp_runs[];
extern const int attn__wp_nruns;
extern const attn__wp_map attn__wp_maps[];
extern const int attn__wp_nmaps;

#endif
