/* One description of the attention options: every field of attn_sdpa_opts
 * (attn_mask included) belongs to one option row with its name, the kind
 * of its value, its help, and how the command (--flag VALUE) and Python
 * (the keyword of attn.scaled_dot_product_attention) spell it. The
 * command's parser and --help are made from these rows, and a test checks
 * that the rows cover every byte of attn_sdpa_opts and that the command
 * and Python take every option the rows give them. Not installed. */
#ifndef ATTN_OPTS_DESC_H
#define ATTN_OPTS_DESC_H

#include "internal.h"

#include <stddef.h>

/* Which commands take an option: the mask options every one, the others
 * only those that compute attention (the command's CLI_OPTS_* values). */
enum {
    ATTN__OPT_SCALE = 1u,   /* the scale                             */
    ATTN__OPT_THREADS = 2u, /* the thread count                      */
    ATTN__OPT_KERNEL = 4u,  /* the kernel choice, dropout, its seed  */
    ATTN__OPT_MASK = 8u     /* the mask (always taken)               */
};

/* A field of attn_sdpa_opts: its offset and size (size 0 ends a list). */
typedef struct {
    size_t off, size;
} attn__opt_field;

/* How the command reads a row's value. A row of a plain kind needs no
 * parsing code of its own: the command checks the value against the
 * row's rule and stores it into the row's first field. */
typedef enum {
    ATTN__VAL_OWN = 0, /* a composite value the command parses itself    */
    ATTN__VAL_FLOAT,   /* a number in the range, into a double field      */
    ATTN__VAL_INT,     /* an integer in the range, into an int or int64   */
    ATTN__VAL_U64,     /* an integer >= 0, into a uint64 field            */
    ATTN__VAL_ENUM,    /* one of the words, its value into an int field;
                          a row with no field hands the word on          */
    ATTN__VAL_FILE     /* a file name, read after every option is seen    */
} attn__opt_kind;

typedef struct {
    attn__opt_kind kind;
    double lo, hi;     /* FLOAT and INT: the range                       */
    unsigned open;     /* FLOAT: 1 excludes lo, 2 excludes hi            */
    const char *words; /* ENUM: "a|b|c"                                  */
    int values[6];     /* ENUM: the value of each word                   */
    const char *rule;  /* the error says "--flag RULE, not 'VALUE'"      */
} attn__opt_value;

typedef struct {
    const char *name;   /* the option, as the C field or fields are named */
    const char *type;   /* the kind of value it takes                     */
    const char *cli;    /* "--flag VALUE" of the command; NULL: none       */
    const char *python; /* keyword of attn.scaled_dot_product_attention;
                           NULL: none                                      */
    const char *none;   /* why a side has none (NULL when both have it)   */
    unsigned where;     /* ATTN__OPT_*                                    */
    const char *help;   /* lines separated by '\n'                        */
    attn__opt_field fields[5]; /* the fields it sets; a size 0 ends       */
    attn__opt_value value;     /* how the command reads it                */
} attn__opt_desc;

/* The rows, in the order of the command's --help; n of them. */
const attn__opt_desc *attn__sdpa_opt_descs(int *n);

#endif /* ATTN_OPTS_DESC_H */
